// The autograd graph: what a DTensor knows about its gradient (Meta), the
// backward nodes ops record, and record(), the one call an op makes to
// become differentiable:
//
//   DTensor mul(const DTensor& a, const DTensor& b) {
//     DTensor out = ...forward...;
//     if (autograd::recording({&a, &b}))
//       autograd::record(out, "mul", {&a, &b}, {a, b}, [](const autograd::Context& c) {
//         autograd::Grads g(2);
//         if (c.needs(0)) g[0] = sum_to(mul(c.grad, c.saved(1)), c.saved(0).shape());
//         if (c.needs(1)) g[1] = sum_to(mul(c.grad, c.saved(0)), c.saved(1).shape());
//         return g;
//       });
//     return out;
//   }
//
// A backward function is written with DTensor ops (run with grad mode off),
// so its layouts are propagated like any forward op and no backward holds
// a hand-written collective. It sees the saved tensors (checked against
// in-place changes since they were saved), the output's gradient and which
// inputs want one; non-tensor arguments it captures by value. It must not
// depend on the placements of what it is given except to choose them for
// the result: VerifyMode reruns it on replicated copies and compares.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "dtensor/autograd.h"
#include "dtensor/distributed_tensor.h"

namespace dtensor::autograd {

namespace detail {
extern constinit thread_local bool grad_enabled;
}

class Node;

// What a DTensor knows about its gradient, shared by the copies of one
// DTensor (as a Python reference shares one torch.Tensor).
struct Meta {
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;    // null for a leaf
  std::optional<DTensor> grad;      // a leaf's accumulated gradient (or retain_grad's)
  std::shared_ptr<Node> accumulator;  // a leaf's AccumulateGrad node, made on first use
  bool retains_grad = false;
  // A leaf's gradient is moved to these before it is added (from_local's).
  std::optional<Placements> grad_placements;
  // The dtype that move runs in (replicate's mp_policy.reduce_dtype); the
  // moved gradient is cast back to its own dtype after it.
  std::optional<DType> grad_reduce_dtype;
  // A module parameter that nn::replace_parameter replaced: what replaced
  // it ("parallelize_module"), so that an optimizer still holding it can
  // say so instead of stepping a tensor the model no longer reads.
  std::optional<std::string> superseded_by;
};

// One gradient per forward input; nullopt where the input needs none.
using Grads = std::vector<std::optional<DTensor>>;

// A backward step: from the gradient of one forward output to the
// gradients of the forward inputs (next[i] receives input i's).
class Node {
 public:
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  virtual Grads apply(DTensor grad) = 0;
  // Frees the saved tensors (a backward without retain_graph ran).
  virtual void release() {}
  // Calls f(tensor) for each tensor saved for backward.
  virtual void for_each_saved(const std::function<void(const DTensor&)>& f) const {}

  // One per forward input: the node its gradient goes to (null where the
  // input needs none) and the input's shape and dtype, for the checks.
  struct Edge {
    std::shared_ptr<Node> node;
    TensorMeta meta;
  };
  std::vector<Edge> edges;
  // The order nodes run in when several are ready: op nodes before leaf
  // accumulators, later-created first. It is a total order (every node has
  // its own sequence_nr, accumulators included), because it is the order of
  // the collectives a backward issues and every rank must issue the same:
  // with ties, the heap's tie-breaking decided, and a process whose counter
  // started the graph at 0 tied an op with the accumulators (desync under
  // MPI when ranks had run different numbers of graphs before).
  uint64_t sequence_nr = 0;
  bool accumulator = false;
  std::weak_ptr<Meta> retained;             // the output's Meta when it retains its grad

  // The engine's state during one backward() (a graph runs on one thread
  // at a time): the pass that last reached the node, how many of the
  // nodes feeding it have still to run, and the gradient summed so far.
  uint64_t pass = 0;
  int waiting = 0;
  std::optional<DTensor> pending;
};

// What a backward function sees.
class Context {
 public:
  Context(const DTensor& grad, const DTensor* saved, const Node& node)
      : grad(grad), saved_(saved), node_(node) {}
  // The gradient of the op's output.
  const DTensor& grad;
  // The i-th tensor given to record() to save.
  const DTensor& saved(size_t i) const { return saved_[i]; }
  // Whether input i wants a gradient.
  bool needs(size_t i) const { return node_.edges[i].node != nullptr; }

 private:
  const DTensor* saved_;
  const Node& node_;
};

using BackwardFn = std::function<Grads(const Context&)>;

inline bool requires_grad(const DTensor* t) { return t != nullptr && t->requires_grad(); }

// Whether an op on these inputs must record its backward: grad mode is on
// and an input requires grad. Null entries (an absent bias) are skipped.
inline bool recording(std::initializer_list<const DTensor*> inputs) {
  if (!detail::grad_enabled) return false;
  for (const DTensor* t : inputs)
    if (requires_grad(t)) return true;
  return false;
}
bool recording(const std::vector<const DTensor*>& inputs);

// Makes `out` the output of a node `name` over `inputs` whose backward is
// `fn`, saving `saved` (detached) for it. REQUIRES: recording(inputs).
void record(DTensor& out, const char* name, std::initializer_list<const DTensor*> inputs,
            std::vector<DTensor> saved, BackwardFn fn);
void record(DTensor& out, const char* name, const std::vector<const DTensor*>& inputs,
            std::vector<DTensor> saved, BackwardFn fn);
void record(DTensor& out, const char* name, const DTensor* const* inputs, size_t num_inputs,
            std::vector<DTensor> saved, BackwardFn fn);

// Makes `out` the output of `node`, whose next edges are set here from
// `inputs` (for nodes that are not a BackwardFn, e.g. redistribute's).
void attach(DTensor& out, std::shared_ptr<Node> node, const std::vector<const DTensor*>& inputs);

// The meta of a DTensor (null when it never required grad).
struct MetaAccess {
  static std::shared_ptr<Meta>& of(DTensor& t) { return t.autograd_; }
  static const std::shared_ptr<Meta>& of(const DTensor& t) { return t.autograd_; }
};
inline const std::shared_ptr<Meta>& meta_of(const DTensor& t) { return MetaAccess::of(t); }

// ---- helpers backward functions share ---------------------------------------------
// `g` summed over the dims broadcasting added to make it from `shape`
// (leading dims, and dims of size 1 in `shape`), then viewed as `shape`.
DTensor sum_to(const DTensor& g, const Shape& shape);
// The gradient `g` of a reduction of an input of shape `shape` over `dims`
// (all when empty; negative allowed) brought back to `shape`: the reduced
// dims unsqueezed (unless keepdim) and expanded.
DTensor expand_reduced(const DTensor& g, const Shape& shape, const DimVector& dims, bool keepdim);

}  // namespace dtensor::autograd
