// Activation checkpointing (nn.h): a region's saved tensors become handles
// into a Frame, which runs the region again at the first unpack.
//
// Why saved-tensor hooks and not a node of its own (PyTorch's reentrant
// form): the region's graph stays the real one, so gradients reach every
// input and parameter through their own nodes, fully_shard's and tensor
// parallelism's included, and a region can sit anywhere in a graph.
//
// Selective checkpointing: the Frame is also the dispatcher's KeptOutputs
// while the region runs (dispatch.h), keeping the outputs of the policy's
// ops in the first run and handing them back, in order, in the
// recomputation.
#include <algorithm>
#include <any>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/dispatch.h"
#include "dtensor/autograd.h"
#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

namespace dtensor::nn {

namespace {

thread_local int checkpoint_depth = 0;
thread_local int recompute_depth = 0;

// The ops whose outputs a policy may keep (their rules' names).
constexpr const char* kKeepable[] = {"mm",     "addmm",  "bmm",
                                     "baddbmm", "matmul", "linear",
                                     "scaled_dot_product_attention"};

// A region running on this thread: the checkpoint depth (and, in a
// recomputation, the recompute depth) one more, and `kept` the
// dispatcher's KeptOutputs (null when the region keeps nothing), until it
// ends.
class RegionScope {
 public:
  explicit RegionScope(dispatch::KeptOutputs* kept, bool recomputing = false)
      : previous_(dispatch::kept_outputs), recomputing_(recomputing) {
    ++checkpoint_depth;
    recompute_depth += recomputing_;
    dispatch::kept_outputs = kept;
  }
  ~RegionScope() {
    dispatch::kept_outputs = previous_;
    recompute_depth -= recomputing_;
    --checkpoint_depth;
  }
  RegionScope(const RegionScope&) = delete;
  RegionScope& operator=(const RegionScope&) = delete;

 private:
  dispatch::KeptOutputs* previous_;
  bool recomputing_;
};

// The sum of the in-place versions of a tensor's held shards' storages.
uint64_t versions_of(const DTensor& t) {
  uint64_t v = 0;
  for (const auto& [rank, shard] : t.local().shards())
    if (shard.defined() && shard.storage()) v += shard.storage()->version();
  return v;
}

// One call of a checkpointed region: what it needs to run again, and the
// tensors the second run saved.
class Frame final : public dispatch::KeptOutputs {
 public:
  Frame(std::function<DTensor(const DTensor&)> fn, const DTensor& x,
        const CheckpointPolicy& policy)
      : fn_(std::move(fn)),
        input_(x.detach()),
        input_requires_grad_(x.requires_grad()),
        rng_(get_rng_state()),
        autocast_(autocast_dtype()),
        save_ops_(policy.save_ops) {}

  // The dispatcher's view of it while the region runs (null: keeps nothing).
  dispatch::KeptOutputs* kept_outputs() { return save_ops_.empty() ? nullptr : this; }

  bool keeps(const char* op) const override {
    return std::find(save_ops_.begin(), save_ops_.end(), op) != save_ops_.end();
  }
  void keep(const char* op, const DTensor& out) override {
    kept_.push_back({op, out, versions_of(out)});
  }
  std::optional<DTensor> replay(const char* op) override {
    if (!recomputing_) return std::nullopt;
    DT_CHECK(!kept_.empty() && kept_.front().op == op, "checkpoint: the recomputation ran ", op,
             " where the first run ",
             kept_.empty() ? std::string("ran no more ops it keeps") : "ran " + kept_.front().op,
             "; a checkpointed function must run the same ops on the same inputs each time");
    Kept k = std::move(kept_.front());
    kept_.pop_front();
    DT_CHECK(versions_of(k.out) == k.versions, "checkpoint: the output of ", op,
             " that the region kept (CheckpointPolicy::save_ops) was changed in place before "
             "backward; keep an op whose output is not modified in place, or none");
    return std::move(k.out);
  }

  size_t next_index() { return packed_++; }

  // What saved tensor `index` keeps alive now, for graph_memory: the
  // region's input (counted with index 0) until the recomputation, then
  // the tensor it saved.
  void inspect(size_t index, const std::function<void(const DTensor&)>& f) const {
    if (recomputed_) {
      if (index < values_.size()) f(values_[index]);
    } else if (index == 0) {
      if (input_.defined()) f(input_);
      for (const Kept& k : kept_) f(k.out);
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
      recomputing_ = true;
      RegionScope region(kept_outputs(), true);
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
    recomputing_ = false;
    recomputed_ = true;
    DT_CHECK(kept_.empty(), "checkpoint: the recomputation ran ", kept_.size(),
             " fewer of the ops the region keeps than its first run (the first not run again: ",
             kept_.empty() ? "" : kept_.front().op,
             "); a checkpointed function must run the same ops on the same inputs each time");
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
  bool recomputing_ = false;
  std::vector<DTensor> values_;
  // Selective checkpointing: the ops it keeps, and their outputs from the
  // first run (with their storages' versions then) until the recomputation.
  std::vector<std::string> save_ops_;
  struct Kept {
    std::string op;
    DTensor out;
    uint64_t versions = 0;
  };
  std::deque<Kept> kept_;
};

struct Handle {
  std::shared_ptr<Frame> frame;
  size_t index;
};

}  // namespace

bool in_checkpoint_region() { return checkpoint_depth > 0; }
bool in_recomputation() { return recompute_depth > 0; }

void check_checkpoint_policy(const CheckpointPolicy& policy) {
  for (const std::string& op : policy.save_ops) {
    if (std::find(std::begin(kKeepable), std::end(kKeepable), op) != std::end(kKeepable)) continue;
    std::string known;
    for (const char* k : kKeepable) known += std::string(known.empty() ? "" : ", ") + k;
    DT_THROW("checkpoint: CheckpointPolicy::save_ops names \"", op,
             "\", whose output a region cannot keep; expected some of: ", known);
  }
}

DTensor checkpoint(const std::function<DTensor(const DTensor&)>& fn, const DTensor& x,
                   const CheckpointPolicy& policy) {
  DT_CHECK(fn != nullptr, "checkpoint: the function is empty");
  check_checkpoint_policy(policy);
  if (!is_grad_enabled()) return fn(x);
  auto frame = std::make_shared<Frame>(fn, x, policy);
  RegionScope region(frame->kept_outputs());
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

Module& checkpoint_wrapper(Module& module, const CheckpointPolicy& policy) {
  module.set_activation_checkpointing(policy);
  return module;
}

}  // namespace dtensor::nn
