// Reverse-mode automatic differentiation of DTensor programs (PyTorch's
// autograd, for DTensors).
//
//   DTensor w = distribute_tensor(Tensor::randn({16, 8}, 0), mesh, {Shard(0)});
//   w.requires_grad_();                       // a leaf: gradients accumulate in w.grad()
//   DTensor loss = sum(relu(mm(x, w)));       // ops record their backward
//   loss.backward();                          // w.grad(): d loss / d w, a DTensor
//
// Every op on a DTensor that requires grad records a node holding what its
// backward needs; backward() runs the nodes in reverse, each a small DTensor
// computation (its layouts are propagated, cached, verified and counted by
// CommDebugMode like any forward op), and adds each leaf's gradient into its
// grad(). A gradient has whatever placements its backward produced: a
// replicated weight used with batch-sharded activations gets a Partial(sum)
// gradient (its all_reduce is the data-parallel step), as in PyTorch. The
// placement rules of redistribute, from_local, to_local and full_tensor are
// PyTorch's (docs/autograd.md).
//
// Thread safety: grad mode is per thread. One graph must not be run
// backward from two threads at once, and ops on one leaf must not be
// recorded from two threads at once.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {

class DTensor;

// Whether ops record their backward on this thread (true unless a
// NoGradGuard is alive).
bool is_grad_enabled();

// While alive, ops on this thread record nothing: their outputs do not
// require grad (torch.no_grad()). Nests.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Sets grad mode while alive, restoring the previous mode after
// (torch.set_grad_enabled).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// An autocast scope, as torch.autocast("cpu", dtype=torch.bfloat16):
// while alive on this thread, PyTorch's CPU lists restricted to dtensor's
// ops apply. The products (mm, bmm, matmul, addmm, baddbmm, linear,
// scaled_dot_product_attention) cast their float32 inputs to `dtype`
// (float64 stays); the losses (nll_loss, cross_entropy) cast 16-bit inputs
// to float32. Other ops run on what they are given (type promotion):
// softmax and the norms keep a 16-bit input's dtype, as on PyTorch's CPU,
// and compute their statistics in float32 as every 16-bit op does. The casts are differentiable (a
// gradient returns in its input's dtype); backward runs without autocast,
// as PyTorch's. dtype must be bfloat16 or float16. Nests; `enabled` false
// turns it off inside an outer scope.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};
// The dtype of this thread's innermost enabled autocast scope, if any.
std::optional<DType> autocast_dtype();

// Runs backward from several outputs at once (torch.autograd.backward):
// grads[i] is the gradient of outputs[i]; a missing or nullopt entry is
// ones for a one-element output and an error otherwise. The graph is freed
// as it runs unless retain_graph. Throws dtensor::Error for an output that
// does not require grad, a gradient of another shape, dtype or mesh, a
// graph already freed, or a saved tensor changed in place since it was
// saved.
void backward(const std::vector<DTensor>& outputs,
              const std::vector<std::optional<DTensor>>& grads = {}, bool retain_graph = false);

// Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks): while a
// SavedTensorHooks is alive on this thread, each tensor an op saves for its
// backward is handed to `pack` when the op runs, and the node keeps what
// pack returns instead of the tensor; when backward needs the tensor, the
// node calls `unpack` on it (each time it runs) and uses the result, which
// must have the saved tensor's shape, dtype and mesh. The innermost alive
// scope applies; scopes nest and may end in any order. Use it to keep less
// alive between forward and backward: fully_shard packs its unsharded
// parameters as a handle and gathers them again on unpack (fsdp.h).
//   SavedTensorHooks hooks([](const DTensor& t) -> std::any { return t; },
//                          [](const std::any& a) { return std::any_cast<DTensor>(a); });
// A packed tensor is not checked for in-place changes (the hooks own what
// they keep). graph_memory counts what was packed when it is held as a
// DTensor, or what `inspect` (optional) reports a packed value keeps alive. The hooks run on the thread that records (pack) and the one
// that runs backward (unpack), with grad mode off when unpacking.
class SavedTensorHooks {
 public:
  using Pack = std::function<std::any(const DTensor&)>;
  using Unpack = std::function<DTensor(const std::any&)>;
  using Inspect =
      std::function<void(const std::any&, const std::function<void(const DTensor&)>&)>;
  SavedTensorHooks(Pack pack, Unpack unpack, Inspect inspect = nullptr);
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;

  struct Pair {
    Pack pack;
    Unpack unpack;
    Inspect inspect;
  };

 private:
  std::shared_ptr<const Pair> pair_;
};

// The bytes of the tensors the graph behind `output` holds for its
// backward (each storage counted once; its shards on every held rank), and
// the number of nodes. For measuring what training keeps alive.
struct GraphMemory {
  int64_t saved_bytes = 0;
  int64_t nodes = 0;
  // saved_bytes by held rank, in rank order (ranks with nothing saved too).
  std::vector<std::pair<int, int64_t>> saved_bytes_by_rank;
};
// Storages of `exclude`'s shards (the parameters, say, which a report
// counts as such) are not counted.
GraphMemory graph_memory(const DTensor& output, const std::vector<DTensor>& exclude = {});

}  // namespace dtensor
