// Activation checkpointing (nn.h): a region's saved tensors become handles
// into a Frame, which runs the region again at the first unpack.
//
// Why saved-tensor hooks and not a node of its own (PyTorch's reentrant
// form): the region's graph stays the real one, so gradients reach every
// input and parameter through their own nodes, fully_shard's and tensor
// parallelism's included, and a region can sit anywhere in a graph.
#include <any>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/autograd.h"
#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

namespace dtensor::nn {

namespace {

thread_local int checkpoint_depth = 0;
thread_local int recompute_depth = 0;

struct RegionScope {
  RegionScope() { ++checkpoint_depth; }
  ~RegionScope() { --checkpoint_depth; }
  RegionScope(const RegionScope&) = delete;
  RegionScope& operator=(const RegionScope&) = delete;
};

// One call of a checkpointed region: what it needs to run again, and the
// tensors the second run saved.
class Frame {
 public:
  Frame(std::function<DTensor(const DTensor&)> fn, const DTensor& x)
      : fn_(std::move(fn)),
        input_(x.detach()),
        input_requires_grad_(x.requires_grad()),
        rng_(get_rng_state()),
        autocast_(autocast_dtype()) {}

  size_t next_index() { return packed_++; }

  // What saved tensor `index` keeps alive now, for graph_memory: the
  // region's input (counted with index 0) until the recomputation, then
  // the tensor it saved.
  void inspect(size_t index, const std::function<void(const DTensor&)>& f) const {
    if (recomputed_) {
      if (index < values_.size()) f(values_[index]);
    } else if (index == 0 && input_.defined()) {
      f(input_);
    }
  }

  const DTensor& saved(size_t index) {
    if (!recomputed_) recompute();
    DT_CHECK(index < values_.size(), "checkpoint: internal error: saved tensor ", index, " of ",
             values_.size());
    return values_[index];
  }

 private:
  void recompute() {
    const RngState now = get_rng_state();
    set_rng_state(rng_);
    {
      GradModeGuard grad(true);
      std::optional<AutocastGuard> autocast;
      if (autocast_) autocast.emplace(*autocast_);
      RegionScope region;
      ++recompute_depth;
      struct Unwind {
        ~Unwind() { --recompute_depth; }
      } unwind;
      SavedTensorHooks capture(
          [this](const DTensor& t) -> std::any {
            values_.push_back(t);
            return t;
          },
          [](const std::any& a) { return std::any_cast<DTensor>(a); });
      DTensor in = input_.detach();
      if (input_requires_grad_) in.requires_grad_();
      fn_(in);
    }
    set_rng_state(now);
    recomputed_ = true;
    DT_CHECK(values_.size() == packed_, "checkpoint: running the region again saved ",
             values_.size(), " tensors for backward where its first run saved ", packed_,
             "; a checkpointed function must run the same ops on the same inputs each time");
    // The region's inputs are no longer needed: its graph holds what it saved.
    input_ = DTensor();
  }

  std::function<DTensor(const DTensor&)> fn_;
  DTensor input_;
  bool input_requires_grad_;
  RngState rng_;
  std::optional<DType> autocast_;
  size_t packed_ = 0;
  bool recomputed_ = false;
  std::vector<DTensor> values_;
};

struct Handle {
  std::shared_ptr<Frame> frame;
  size_t index;
};

}  // namespace

bool in_checkpoint_region() { return checkpoint_depth > 0; }
bool in_recomputation() { return recompute_depth > 0; }

DTensor checkpoint(const std::function<DTensor(const DTensor&)>& fn, const DTensor& x) {
  DT_CHECK(fn != nullptr, "checkpoint: the function is empty");
  if (!is_grad_enabled()) return fn(x);
  auto frame = std::make_shared<Frame>(fn, x);
  RegionScope region;
  SavedTensorHooks hooks(
      [frame](const DTensor&) -> std::any {
        return Handle{frame, frame->next_index()};
      },
      [](const std::any& a) {
        const Handle& h = std::any_cast<const Handle&>(a);
        return h.frame->saved(h.index);
      },
      [](const std::any& a, const std::function<void(const DTensor&)>& f) {
        const Handle& h = std::any_cast<const Handle&>(a);
        h.frame->inspect(h.index, f);
      });
  return fn(x);
}

Module& checkpoint_wrapper(Module& module) {
  module.set_activation_checkpointing(true);
  return module;
}

}  // namespace dtensor::nn
