// The autograd engine: grad mode, recording nodes, the DTensor gradient
// methods and backward().
//
// backward() runs each node once all the nodes that feed it gradients have
// run (a count of dependencies found by a walk from the roots), latest
// created first among the ready ones, so the order - and the order in
// which gradients of one tensor are added - is a function of the program
// alone: the same in the simulated world and on every MPI rank.
#include <algorithm>
#include <any>
#include <queue>
#include <map>
#include <unordered_set>

#include "autograd/graph.h"
#include "debug/verify.h"

namespace dtensor {

namespace autograd {

namespace detail {
constinit thread_local bool grad_enabled = true;
}

namespace {

std::atomic<uint64_t> next_sequence_nr{0};

// The sum of the in-place-op counters of the storages of t's shards: any
// in-place change to a shard changes it.
uint64_t version_of(const DTensor& t) {
  uint64_t v = 0;
  for (const auto& [rank, shard] : t.local().shards())
    if (shard.storage()) v += shard.storage()->version();
  return v;
}

std::string describe(const DTensor& t) { return t.spec().to_string(); }

// The innermost alive SavedTensorHooks of this thread, last.
thread_local std::vector<std::shared_ptr<const SavedTensorHooks::Pair>> saved_hooks;

// The node of an op recorded with record(): a BackwardFn over saved tensors.
class FunctionNode final : public Node {
 public:
  // The saved tensors are detached (a saved output must not keep its own
  // node alive) and their versions noted; under saved-tensor hooks they
  // are packed instead.
  FunctionNode(const char* name, std::vector<DTensor> saved, BackwardFn fn)
      : name_(name), saved_(std::move(saved)), fn_(std::move(fn)) {
    for (DTensor& t : saved_) MetaAccess::of(t).reset();
    if (!saved_hooks.empty() && !saved_.empty()) {
      hooks_ = saved_hooks.back();
      packed_.reserve(saved_.size());
      metas_.reserve(saved_.size());
      for (const DTensor& t : saved_) {
        metas_.push_back(t.spec());
        packed_.push_back(hooks_->pack(t));
      }
      saved_.clear();
      saved_.shrink_to_fit();
      return;
    }
    versions_.reserve(saved_.size());
    for (DTensor& t : saved_) versions_.push_back(version_of(t));
  }
  const char* name() const override { return name_; }

  Grads apply(DTensor grad) override {
    DT_CHECK(!released_, "backward: the graph through ", name_,
             " was freed by an earlier backward(); pass retain_graph = true to the first "
             "backward() to run backward through it again");
    if (hooks_) {
      std::vector<DTensor> values = unpack();
      return run(grad, values.data());
    }
    for (size_t i = 0; i < saved_.size(); ++i) {
      const uint64_t now = version_of(saved_[i]);
      DT_CHECK(now == versions_[i], "backward: tensor ", i, " that ", name_,
               " saved for backward (", describe(saved_[i]),
               ") was changed in place after it was saved (version ", now, ", saved at ",
               versions_[i], "); clone() it before changing it, or change it after backward()");
    }
    return run(grad, saved_.data());
  }

  void for_each_saved(const std::function<void(const DTensor&)>& f) const override {
    for (const DTensor& t : saved_) f(t);
    for (const std::any& a : packed_) {
      if (hooks_ && hooks_->inspect)
        hooks_->inspect(a, f);
      else if (const DTensor* t = std::any_cast<DTensor>(&a))
        f(*t);
    }
  }

  void release() override {
    saved_.clear();
    saved_.shrink_to_fit();
    packed_.clear();
    packed_.shrink_to_fit();
    hooks_.reset();
    fn_ = nullptr;
    released_ = true;
  }

 private:
  Grads run(const DTensor& grad, const DTensor* saved) const {
    Grads out = fn_(Context(grad, saved, *this));
    DT_CHECK(out.size() == edges.size(), "internal error: backward of ", name_, " gave ",
             out.size(), " gradients for ", edges.size(), " inputs");
    if (verify_detail::should_verify()) verify(grad, saved, out);
    return out;
  }

  // The packed tensors, unpacked by the hooks that packed them.
  std::vector<DTensor> unpack() const {
    std::vector<DTensor> values;
    values.reserve(packed_.size());
    for (size_t i = 0; i < packed_.size(); ++i) {
      values.push_back(hooks_->unpack(packed_[i]));
      const DTensorSpec& want = metas_[i];
      const DTensor& got = values.back();
      DT_CHECK(got.shape() == want.shape() && got.dtype() == want.dtype() &&
                   got.mesh() == want.mesh(),
               "backward of ", name_, ": the unpack hook gave ", describe(got),
               " for saved tensor ", i, ", which was ", want.to_string(),
               " (same shape, dtype and mesh expected)");
    }
    return values;
  }

  // VerifyMode: the same backward on replicated copies of the gradient and
  // the saved tensors must give the same gradients (as full tensors).
  void verify(const DTensor& grad, const DTensor* saved, const Grads& got) const {
    if (grad.local().empty()) return;  // this process holds no rank of the mesh
    if (grad.mesh().world().is_shape_only()) return;  // no values to compare
    verify_detail::CheckScope scope;
    auto replicated = [](const DTensor& t) {
      return t.redistribute(Placements(static_cast<size_t>(t.mesh().ndim()), Replicate()));
    };
    const size_t n = hooks_ ? packed_.size() : saved_.size();
    std::vector<DTensor> values;
    values.reserve(n);
    for (size_t i = 0; i < n; ++i) values.push_back(replicated(saved[i]));
    const Grads want = fn_(Context(replicated(grad), values.data(), *this));
    // A gradient computed from 16-bit values (the incoming one, a saved
    // tensor) is compared at that precision, whatever its own dtype.
    std::vector<DType> dtypes{grad.dtype()};
    for (const DTensor& v : values) dtypes.push_back(v.dtype());
    const std::optional<DType> precision = verify_detail::least_precise(dtypes);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i] || !want[i]) continue;
      verify_detail::expect_match(got[i]->full_tensor(), want[i]->full_tensor(),
                                  std::string("backward of ") + name_ + ", gradient of input " +
                                      std::to_string(i) + " (" + describe(*got[i]) + ")",
                                  "the same backward on replicated tensors", precision);
    }
    record_verification();
  }

  const char* name_;
  std::vector<DTensor> saved_;
  std::vector<uint64_t> versions_;  // of saved_, when saved
  // Under saved-tensor hooks: what pack gave, the hooks, and the specs of
  // the tensors packed (saved_ is then empty).
  std::vector<std::any> packed_;
  std::shared_ptr<const SavedTensorHooks::Pair> hooks_;
  std::vector<DTensorSpec> metas_;
  BackwardFn fn_;
  bool released_ = false;
};

// The sink of a leaf: adds the gradient into the leaf's grad(). The leaf's
// Meta owns it (made once, reused by every graph); it points back weakly,
// so the two do not keep each other alive.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<Meta>& leaf) : leaf_(leaf) {
    sequence_nr = next_sequence_nr.fetch_add(1, std::memory_order_relaxed);
    accumulator = true;
  }
  const char* name() const override { return "AccumulateGrad"; }
  Grads apply(DTensor grad) override {
    const std::shared_ptr<Meta> leaf = leaf_.lock();
    if (!leaf) return {};  // the leaf is gone: nobody can read its gradient
    if (leaf->grad_placements) {
      RedistributeOptions o;
      o.allow_new_partial = true;  // asked for explicitly
      const DType own = grad.dtype();
      if (leaf->grad_reduce_dtype) grad = grad.to(*leaf->grad_reduce_dtype);
      grad = grad.redistribute(*leaf->grad_placements, o).to(own);
    }
    if (leaf->grad) leaf->grad = add(*leaf->grad, grad);
    else leaf->grad = std::move(grad);
    return {};
  }

 private:
  std::weak_ptr<Meta> leaf_;
};

// The node a gradient for `t` goes to: its grad_fn, or its leaf's
// accumulator (one per leaf, so that the gradients of several uses add up
// before they reach grad()).
const std::shared_ptr<Node>& edge_to(const DTensor& t) {
  static const std::shared_ptr<Node> none;
  const std::shared_ptr<Meta>& m = meta_of(t);
  if (!m || !m->requires_grad) return none;
  if (m->grad_fn) return m->grad_fn;
  if (!m->accumulator) m->accumulator = std::make_shared<AccumulateGrad>(m);
  return m->accumulator;
}

void connect(Node& node, const DTensor* const* inputs, size_t n) {
  node.sequence_nr = next_sequence_nr.fetch_add(1, std::memory_order_relaxed);
  node.edges.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const DTensor* t = inputs[i];
    if (t) node.edges.push_back({edge_to(*t), t->spec().meta()});
    else node.edges.push_back({});
  }
}

void attach(DTensor& out, std::shared_ptr<Node> node, const DTensor* const* inputs, size_t n) {
  connect(*node, inputs, n);
  auto m = std::make_shared<Meta>();
  m->requires_grad = true;
  m->grad_fn = std::move(node);
  // out's Meta is replaced, not changed: a copy of an input returned as
  // the output keeps the input's own state.
  MetaAccess::of(out) = std::move(m);
}

// A gradient the formula gave for an input with meta `want`: the shape
// must match (a formula bug otherwise); a dtype that differs (an input of
// lower precision than the op computed in) is cast shard by shard, which
// keeps the placements.
void conform(DTensor& g, const TensorMeta& want, const Node& node, size_t i) {
  DT_CHECK(g.shape() == want.shape, "internal error: backward of ", node.name(),
           " gave a gradient of shape ", g.shape(), " for input ", i, " of shape ", want.shape);
  if (g.dtype() == want.dtype) return;
  DTensorSpec spec(g.mesh(), g.placements(), want.shape, want.dtype);
  g = DTensor(std::move(spec),
              g.local().map([&](int, const Tensor& s) { return s.to(want.dtype); }));
}

}  // namespace

bool recording(const std::vector<const DTensor*>& inputs) {
  if (!detail::grad_enabled) return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const DTensor* t) { return requires_grad(t); });
}

void attach(DTensor& out, std::shared_ptr<Node> node, const std::vector<const DTensor*>& inputs) {
  attach(out, std::move(node), inputs.data(), inputs.size());
}

void record(DTensor& out, const char* name, const DTensor* const* inputs, size_t num_inputs,
            std::vector<DTensor> saved, BackwardFn fn) {
  attach(out, std::make_shared<FunctionNode>(name, std::move(saved), std::move(fn)), inputs,
         num_inputs);
}

void record(DTensor& out, const char* name, const std::vector<const DTensor*>& inputs,
            std::vector<DTensor> saved, BackwardFn fn) {
  record(out, name, inputs.data(), inputs.size(), std::move(saved), std::move(fn));
}

void record(DTensor& out, const char* name, std::initializer_list<const DTensor*> inputs,
            std::vector<DTensor> saved, BackwardFn fn) {
  record(out, name, inputs.begin(), inputs.size(), std::move(saved), std::move(fn));
}

// One op where one does: only leading dims summed (no keepdim), only
// size-1 dims (keepdim), only the element count unchanged (a reshape); both
// kinds of dims take a sum and a reshape.
DTensor sum_to(const DTensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  if (g.shape().product() == shape.product()) return reshape(g, shape);
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  DimVector dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  const DTensor s = sum(g, dims, /*keepdim=*/lead == 0);
  return s.shape() == shape ? s : reshape(s, shape);
}

DTensor expand_reduced(const DTensor& g, const Shape& shape, const DimVector& dims,
                       bool keepdim) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  DTensor out = g;
  if (!keepdim) {
    std::vector<bool> reduced(static_cast<size_t>(nd), dims.empty());
    for (int64_t d : dims) reduced[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
    for (int64_t d = 0; d < nd; ++d)
      if (reduced[static_cast<size_t>(d)]) out = unsqueeze(out, d);
  }
  return out.shape() == shape ? out : expand(out, shape);
}

}  // namespace autograd

// ---- grad mode -------------------------------------------------------------------------

bool is_grad_enabled() { return autograd::detail::grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(autograd::detail::grad_enabled) {
  autograd::detail::grad_enabled = false;
}
NoGradGuard::~NoGradGuard() { autograd::detail::grad_enabled = previous_; }

namespace {
thread_local std::optional<DType> autocast_state;
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : previous_(autocast_state) {
  DT_CHECK(!enabled || is_half(dtype), "AutocastGuard: dtype must be bfloat16 or float16, got ",
           dtype);
  autocast_state = enabled ? std::optional<DType>(dtype) : std::nullopt;
}
AutocastGuard::~AutocastGuard() { autocast_state = previous_; }
std::optional<DType> autocast_dtype() { return autocast_state; }

GradModeGuard::GradModeGuard(bool enabled) : previous_(autograd::detail::grad_enabled) {
  autograd::detail::grad_enabled = enabled;
}
GradModeGuard::~GradModeGuard() { autograd::detail::grad_enabled = previous_; }

// ---- saved-tensor hooks ------------------------------------------------------------------

SavedTensorHooks::SavedTensorHooks(Pack pack, Unpack unpack, Inspect inspect) {
  DT_CHECK(pack != nullptr && unpack != nullptr,
           "SavedTensorHooks: both a pack and an unpack hook are needed");
  pair_ = std::make_shared<const Pair>(Pair{std::move(pack), std::move(unpack), std::move(inspect)});
  autograd::saved_hooks.push_back(pair_);
}

SavedTensorHooks::~SavedTensorHooks() {
  // Scopes usually end innermost first; one that ends out of order (its
  // owner kept it in a member) is taken out wherever it is.
  auto& stack = autograd::saved_hooks;
  for (auto it = stack.rbegin(); it != stack.rend(); ++it)
    if (*it == pair_) {
      stack.erase(std::next(it).base());
      break;
    }
}

// ---- DTensor's gradient methods --------------------------------------------------------

bool DTensor::requires_grad() const { return autograd_ && autograd_->requires_grad; }

DTensor& DTensor::requires_grad_(bool requires_grad) {
  DT_CHECK(is_leaf(), "requires_grad_: only leaves can change whether they require grad; this ",
           "tensor was made by ", grad_fn_name(), " (use detach() for a leaf of the same data)");
  DT_CHECK(!requires_grad || is_floating(dtype()),
           "requires_grad_: only floating-point tensors can require gradients, got ",
           dtype_name(dtype()), " ", spec().to_string());
  if (!autograd_) {
    if (!requires_grad) return *this;
    autograd_ = std::make_shared<autograd::Meta>();
  }
  autograd_->requires_grad = requires_grad;
  return *this;
}

bool DTensor::is_leaf() const { return !autograd_ || !autograd_->grad_fn; }

std::optional<DTensor> DTensor::grad() const {
  if (!autograd_) return std::nullopt;
  return autograd_->grad;
}

void DTensor::set_grad(std::optional<DTensor> grad) {
  if (grad) {
    DT_CHECK(grad->shape() == shape() && grad->dtype() == dtype() && grad->mesh() == mesh(),
             "set_grad: the gradient ", grad->spec().to_string(), " must have the shape, dtype ",
             "and mesh of the tensor ", spec().to_string());
    if (!autograd_) autograd_ = std::make_shared<autograd::Meta>();
    autograd_->grad = grad->detach();
  } else if (autograd_) {
    autograd_->grad.reset();
  }
}

void DTensor::retain_grad() const {
  DT_CHECK(requires_grad(), "retain_grad: the tensor ", spec().to_string(),
           " does not require grad");
  if (is_leaf()) return;  // leaves keep their gradient anyway
  autograd_->retains_grad = true;
  autograd_->grad_fn->retained = autograd_;
}

DTensor DTensor::detach() const {
  DTensor out = *this;
  out.autograd_.reset();
  return out;
}

const char* DTensor::grad_fn_name() const {
  return autograd_ && autograd_->grad_fn ? autograd_->grad_fn->name() : "";
}

namespace {

void run_backward(const DTensor* const* outputs, const std::optional<DTensor>* const* grads,
                  size_t n, bool retain_graph);

}  // namespace

void DTensor::backward(const std::optional<DTensor>& gradient, bool retain_graph) const {
  const DTensor* outputs[] = {this};
  const std::optional<DTensor>* grads[] = {&gradient};
  run_backward(outputs, grads, 1, retain_graph);
}

GraphMemory graph_memory(const DTensor& output, const std::vector<DTensor>& exclude) {
  GraphMemory m;
  std::map<int, int64_t> by_rank;
  for (int rank : output.mesh().held_ranks()) by_rank[rank] = 0;
  const auto& meta = autograd::meta_of(output);
  if (!meta || !meta->grad_fn) {
    m.saved_bytes_by_rank.assign(by_rank.begin(), by_rank.end());
    return m;
  }
  std::unordered_set<const autograd::Node*> seen{meta->grad_fn.get()};
  std::unordered_set<const Storage*> storages;
  for (const DTensor& t : exclude)
    for (const auto& [rank, shard] : t.local().shards())
      if (shard.storage()) storages.insert(shard.storage().get());
  std::vector<const autograd::Node*> stack{meta->grad_fn.get()};
  while (!stack.empty()) {
    const autograd::Node* n = stack.back();
    stack.pop_back();
    ++m.nodes;
    n->for_each_saved([&](const DTensor& t) {
      for (const auto& [rank, shard] : t.local().shards())
        if (shard.storage() && storages.insert(shard.storage().get()).second) {
          m.saved_bytes += static_cast<int64_t>(shard.storage()->nbytes());
          by_rank[rank] += static_cast<int64_t>(shard.storage()->nbytes());
        }
    });
    for (const auto& e : n->edges)
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  m.saved_bytes_by_rank.assign(by_rank.begin(), by_rank.end());
  return m;
}

// ---- backward() --------------------------------------------------------------------------

void backward(const std::vector<DTensor>& outputs, const std::vector<std::optional<DTensor>>& grads,
              bool retain_graph) {
  DT_CHECK(grads.empty() || grads.size() == outputs.size(), "backward: ", outputs.size(),
           " outputs but ", grads.size(), " gradients");
  static const std::optional<DTensor> none;
  std::vector<const DTensor*> out_ptrs;
  std::vector<const std::optional<DTensor>*> grad_ptrs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    out_ptrs.push_back(&outputs[i]);
    grad_ptrs.push_back(grads.empty() ? &none : &grads[i]);
  }
  run_backward(out_ptrs.data(), grad_ptrs.data(), outputs.size(), retain_graph);
}

namespace {

void run_backward(const DTensor* const* outputs, const std::optional<DTensor>* const* grads,
                  size_t count, bool retain_graph) {
  using autograd::Node;
  NoGradGuard no_grad;  // backward functions record nothing (no higher-order gradients)
  AutocastGuard no_autocast(DType::BFloat16, false);  // backward runs as forward computed

  // The gradient each root starts with.
  std::vector<std::pair<std::shared_ptr<Node>, DTensor>> roots;
  roots.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const DTensor& out = *outputs[i];
    DT_CHECK(out.requires_grad(), "backward: output ", i, " (", out.spec().to_string(),
             ") does not require grad: no input of the ops that made it requires grad (call "
             "requires_grad_() on the parameters first) or it was made under a NoGradGuard");
    const std::optional<DTensor>& given = *grads[i];
    DTensor g = [&] {
      if (!given) {
        DT_CHECK(out.shape().product() == 1, "backward: a gradient can be implied only for a "
                 "one-element output, but output ", i, " has shape ", out.shape(),
                 "; pass backward(gradient)");
        return ones_like(out);
      }
      DT_CHECK(given->shape() == out.shape() && given->dtype() == out.dtype() &&
                   given->mesh() == out.mesh(),
               "backward: the gradient ", given->spec().to_string(), " of output ", i,
               " must have the output's shape, dtype and mesh: ", out.spec().to_string());
      return given->detach();
    }();
    roots.emplace_back(autograd::edge_to(out), std::move(g));
  }

  // Each node reachable from the roots counts the edges that lead into it
  // (the nodes that must run first); `pass` marks the nodes of this run.
  static std::atomic<uint64_t> passes{0};
  const uint64_t pass = passes.fetch_add(1, std::memory_order_relaxed) + 1;
  std::vector<Node*> reached;
  auto reach = [&](Node* n) {
    if (n->pass == pass) return false;
    n->pass = pass;
    n->waiting = 0;
    n->pending.reset();
    reached.push_back(n);
    return true;
  };
  std::vector<Node*> stack;
  for (auto& [node, g] : roots)
    if (reach(node.get())) stack.push_back(node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->edges) {
      if (!e.node) continue;
      if (reach(e.node.get())) stack.push_back(e.node.get());
      ++e.node->waiting;
    }
  }

  // Gradients for one node add up in arrival order (a fixed order: the
  // nodes run in a fixed order).
  auto give = [](Node* n, DTensor&& g) {
    if (n->pending) n->pending = add(*n->pending, g);
    else n->pending.emplace(std::move(g));
  };
  // The top runs first (see Node::sequence_nr): ops before accumulators, later first.
  auto runs_after = [](Node* a, Node* b) {
    if (a->accumulator != b->accumulator) return a->accumulator;
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<Node*, std::vector<Node*>, decltype(runs_after)> ready(runs_after);
  for (auto& root : roots) give(root.first.get(), std::move(root.second));
  for (auto& [node, g] : roots)
    if (node->waiting == 0) {
      node->waiting = -1;  // queued once, however often it is a root
      ready.push(node.get());
    }

  // Leaves the engine's state clean whatever happens (a backward function may throw).
  struct Cleanup {
    std::vector<Node*>& nodes;
    ~Cleanup() {
      for (Node* n : nodes) n->pending.reset();
    }
  } cleanup{reached};
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    autograd::Grads out;
    if (n->pending) {
      DTensor g = std::move(*n->pending);
      n->pending.reset();
      if (auto kept = n->retained.lock()) kept->grad = kept->grad ? add(*kept->grad, g) : g;
      out = n->apply(std::move(g));
    }
    for (size_t i = 0; i < n->edges.size(); ++i) {
      Node* next = n->edges[i].node.get();
      if (!next) continue;
      if (i < out.size() && out[i]) {
        autograd::conform(*out[i], n->edges[i].meta, *n, i);
        give(next, std::move(*out[i]));
      }
      if (--next->waiting == 0) ready.push(next);
    }
    // Its saved tensors are done with: freed now, not at the end, so that
    // backward holds the activations still to be used and no more (and a
    // checkpointed region's recomputed ones only during its own backward).
    if (!retain_graph) n->release();
  }
  if (!retain_graph)
    for (Node* n : reached) n->release();
}

}  // namespace

}  // namespace dtensor
