// Ops of your own on DTensors, with a sharding rule you give (PyTorch's
// torch.distributed.tensor.experimental.register_sharding).
//
//   // out[i, j] = x[i, j] * scale[j]: rows may stay sharded, and a
//   // Partial(sum) x times a replicated scale stays Partial(sum).
//   CustomOp scale_cols = register_sharding({
//       .name = "scale_cols",
//       .kernel = [](const std::vector<Tensor>& t) { return mul(t[0], t[1]); },
//       .strategies = [](const std::vector<TensorMeta>&) {
//         return std::vector<OpStrategy>{
//             {{Shard(0), Replicate()}, Shard(0)},
//             {{Shard(1), Shard(0)}, Shard(1)},
//             {{Partial(), Replicate()}, Partial()},
//             {{Replicate(), Replicate()}, Replicate()}};
//       }});
//   DTensor y = scale_cols({x, scale});
//
// The strategies are per mesh dim, as in PyTorch: each names the placement
// every input must have on a mesh dim and the output's placement there. The
// dispatcher combines them over the mesh dims, picks the layout whose input
// moves cost least (one needing none when there is one), moves the inputs
// (R -> S and R -> P are local moves), runs `kernel` on every shard and
// wraps the result. An empty list, or no workable layout, computes on
// Replicate (always correct), noted once in debug_notes(). The choice is
// cached like a built-in op's.
//
// The kernel runs on local shards, once per rank (in parallel over the
// ranks of a simulated world): it must be a pure function of its inputs. Its
// output must have the shape and dtype the layout implies; otherwise the
// call throws naming the rank and both shapes. check_rules(op, examples)
// (rules.h) tells whether your strategies are correct and complete.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/distributed_tensor.h"

namespace dtensor {

// One candidate for one mesh dim: the placement of each input, and the output's.
struct OpStrategy {
  std::vector<Placement> inputs;
  Placement output;
};

struct CustomOpDef {
  std::string name;
  // The op on (local) tensors: also the plain op on full tensors.
  std::function<Tensor(const std::vector<Tensor>&)> kernel = nullptr;
  // The candidates, best first (a tie in cost goes to the earlier one).
  std::function<std::vector<OpStrategy>(const std::vector<TensorMeta>&)> strategies = nullptr;
  // The output's global meta. Unset: the kernel is run once on zeros of the
  // inputs' global shapes (per new input meta; cached with the layout).
  std::function<TensorMeta(const std::vector<TensorMeta>&)> output_meta = nullptr;
  // The gradients of the inputs from the output's, as DTensor ops (so their
  // layouts propagate). Unset: the op is not differentiable, and calling it
  // on inputs that require grad throws.
  std::function<std::vector<DTensor>(const DTensor& grad, const std::vector<DTensor>& inputs)>
      backward = nullptr;
};

class CustomOp {
 public:
  DTensor operator()(const std::vector<DTensor>& inputs) const;
  // The plain op: the kernel on full tensors.
  Tensor operator()(const std::vector<Tensor>& inputs) const;
  const std::string& name() const;
  // The registration's index (part of the dispatcher's cache key).
  int64_t id() const { return id_; }

 private:
  friend CustomOp register_sharding(CustomOpDef def);
  explicit CustomOp(int64_t id) : id_(id) {}
  int64_t id_;
};

// Registers the op for the life of the program (thread-safe). Throws
// dtensor::Error when the name is empty or taken, or kernel or strategies
// is unset.
CustomOp register_sharding(CustomOpDef def);

}  // namespace dtensor
