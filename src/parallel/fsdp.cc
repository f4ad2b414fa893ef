// fully_shard (fsdp.h): a module's managed parameters as one group whose
// shards are gathered by one all_gather of a flat buffer and whose
// gradients are scattered back by one reduce_scatter of one.
//
// The flat buffer of a rank is, for each parameter in order, its dp shard
// flattened and padded with zeros to the largest shard of its dp group
// (FSDP2's padding), so every member of the group puts in the same number
// of elements and member j's piece starts at j * total. The unsharded value
// of a parameter on a rank is its members' pieces, cut to their true
// shapes, concatenated along the dim dp shards (0, or shard_placement_fn's)
// in the group's (row-major) order, which is the order in which nested
// Shard(d)s split dim d.
//
// Autograd: the sharded leaves <- ReduceScatterWait <- wait token <-
// GatherNode <- token <- one UnshardNode per unsharded value. An
// UnshardNode keeps the gradient it is given in the call's state and hands
// the token a zero; the GatherNode runs after every UnshardNode of its
// call (the engine counts the dependencies) and reduce-scatters the
// gradients they kept at once, or starts it (async_reduce_scatter);
// ReduceScatterWait, ordered among the leaves' accumulators (after every
// op of backward), waits for it if it is still in flight and gives each
// leaf its cut. (The engine's nodes have one output; the tokens are how
// one node gets or gives the gradients of several tensors.)
//
// Mixed precision (MixedPrecisionPolicy): the flat buffer of the gather is
// of param_dtype, each shard cast into it, so the unsharded values are of
// param_dtype; each UnshardNode casts its gradient to reduce_dtype before
// it moves (a tensor-parallel Partial reduced on its way), the flat
// gradient is of reduce_dtype, and each leaf's cut of the reduce-scatter's
// result is cast to the leaf's dtype once, after the reduction.
#include "dtensor/fsdp.h"

#include <algorithm>
#include <any>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "autograd/graph.h"
#include "comm/backend.h"
#include "dtensor/error.h"
#include "dtensor/memory.h"

namespace dtensor {

namespace {

// Where a rank's parameters sit in the flat buffer.
// How the members of one dp group lay their shards out in the flat
// buffers. One per group, shared by its members: per rank it would be
// ranks x members shapes per parameter (3.6 GB for a 32-layer model on
// 1,024 ranks of a shape-only world).
struct PieceLayout {
  int64_t total = 0;                        // elements per member's piece
  std::vector<int64_t> offset;              // per parameter, within a piece
  std::vector<std::vector<Shape>> shapes;   // per parameter, per member: its shard's shape
};

struct RankLayout {
  int member = 0;  // this rank's index in its dp group
  std::shared_ptr<const PieceLayout> pieces;
};

struct Param {
  std::string name;
  // The module slots holding the parameter: one, or several for a tied one
  // (nn::same_parameter), which all read the same values.
  std::vector<DTensor*> slots;
  DTensor sharded;             // the leaf the optimizer steps
  DTensorSpec unsharded_spec;  // Replicate on the dp dims
  int64_t dim = 0;             // the tensor dim dp shards (shard_placement_fn)
};

struct Group;

// The gradients an UnshardNode of one forward call hands its GatherNode,
// and the reduce_scatter the GatherNode started (async_reduce_scatter) or
// ran, for the ReduceScatterWait node that gives the leaves their cuts.
struct CallState {
  std::vector<std::optional<DTensor>> grads;
  std::unique_ptr<Backend::Pending> reducing;
  std::optional<LocalTensor> reduced;  // the flat shards, summed over dp (and HSDP's replicas)
  // Which parameters backward gave a gradient: only those get their cut
  // (an unused one keeps no gradient, as in FSDP2).
  std::vector<bool> had_grad;
};

struct Group {
  Group(nn::Module& m, const DeviceMesh& dp_mesh) : module(&m), mesh(m.mesh()), dp_mesh(dp_mesh) {}
  nn::Module* module;
  DeviceMesh mesh;
  std::vector<int> dp_dims;
  DeviceMesh dp_mesh;  // the mesh the collectives run on: mesh, or its dp dims flattened
  int dp_dim = 0;
  // HSDP: the mesh dims the parameters are replicated over, and the mesh
  // and dim of the all_reduce over them (flattened when several).
  std::vector<int> replicate_dims;
  std::optional<DeviceMesh> replicate_mesh;
  int replicate_dim = 0;
  // A flat buffer of n zeros; meta in a World::shape_only (no memory, and
  // the copies into it move nothing).
  Tensor flat_zeros(int64_t n, DType dtype) const {
    return mesh.world().is_shape_only() ? Tensor::meta({n}, dtype) : Tensor::zeros({n}, dtype);
  }
  bool data_parallel(size_t d) const {
    const auto in = [d](const std::vector<int>& v) {
      return std::find(v.begin(), v.end(), static_cast<int>(d)) != v.end();
    };
    return in(dp_dims) || in(replicate_dims);
  }
  bool reshard_after_forward = true;
  // reshard_after_forward as an int k: between forward and backward each
  // rank keeps the pieces of the members j with j % k == its position in
  // its run of k consecutive members (`kept`, pieces in ascending j), and
  // backward all-gathers them over k_mesh's dim k_dim (the runs).
  int reshard_size = 0;
  std::optional<DeviceMesh> k_mesh;
  int k_dim = 0;
  std::optional<LocalTensor> kept;
  // set_requires_gradient_sync(false): backward keeps the flat gradient
  // here (summed over backwards) instead of reduce-scattering it; the next
  // backward with sync adds it in first.
  bool requires_gradient_sync = true;
  std::optional<LocalTensor> unsynced;
  // set_gradient_divide_factor: the reduced gradient is divided by it.
  double divide_factor = 1;
  bool async_reduce_scatter = false;
  DType dtype = DType::Float32;  // the sharded parameters' (and their gradients')
  MixedPrecisionPolicy mp;
  // The dtype the gather carries and the module computes in.
  DType param_dtype() const { return mp.param_dtype.value_or(dtype); }
  // The dtype of the gradient reductions.
  DType reduce_dtype() const { return mp.reduce_dtype.value_or(param_dtype()); }
  std::vector<Param> params;
  std::map<int, RankLayout> layouts;  // per held rank of the mesh

  // The unsharded values the module reads during its forward (and the
  // root's until after backward); empty while resharded.
  std::vector<DTensor> unsharded;
  // Gathered again in backward for the unpack hook; freed after the
  // group's backward.
  std::vector<DTensor> backward_unsharded;
  std::optional<SavedTensorHooks> hooks;
  // Between a pre_forward and its post_forward that frees the values.
  bool resharding = false;
  // Whether no other fully_shard module contains this one (found at the
  // first forward, as FSDP2's lazy init finds the root).
  std::optional<bool> root;

  // The unsharded values: from the prefetched gather when one was started
  // (and the shards have not changed since), else gathered now.
  std::vector<DTensor> gather();
  std::unique_ptr<Backend::Pending> start_gather() const;
  // Prefetch: the next group's gather started early (FullyShardOptions::
  // prefetch), taken by its gather(); the shards' in-place versions then,
  // so that a gather outdated by a step is never used.
  void start_prefetch();
  uint64_t shard_versions() const;
  std::unique_ptr<Backend::Pending> prefetched;
  uint64_t prefetched_versions = 0;
  bool prefetch = false;
  // The groups before and after this one in the first forward of their root
  // (forward order; backward runs them the other way).
  std::weak_ptr<Group> next_forward, prev_forward;
  // set_modules_to_forward_prefetch / backward: explicit lists.
  std::vector<std::weak_ptr<Group>> forward_prefetch, backward_prefetch;
  // The unsharded values from the gathered flat buffers: member j's piece
  // starts at piece_start(j) * total.
  std::vector<DTensor> cut(const LocalTensor& flat,
                           const std::function<int64_t(int64_t)>& piece_start) const;
  // reshard_after_forward = k: `kept` from the unsharded values, and the
  // backward gather from it.
  void keep_k_pieces();
  std::vector<DTensor> gather_kept() const;
  void reshard();
  // What an op saved as parameter k, for its backward.
  const DTensor& backward_value(size_t k) {
    if (backward_unsharded.empty()) {
      backward_unsharded = kept ? gather_kept() : gather();
      kept.reset();
      prefetch_for_backward();
    }
    return backward_unsharded[k];
  }
  // The group whose backward comes next (the one before in forward order),
  // when it will gather in full.
  void prefetch_for_backward() {
    auto start = [](const std::shared_ptr<Group>& p) {
      if (p && p->root && !*p->root && p->unsharded.empty() && p->backward_unsharded.empty() &&
          !p->kept)
        p->start_prefetch();
    };
    if (!backward_prefetch.empty()) {
      for (const std::weak_ptr<Group>& w : backward_prefetch) start(w.lock());
    } else if (prefetch) {
      start(prev_forward.lock());
    }
  }
  void prefetch_for_forward() {
    auto start = [](const std::shared_ptr<Group>& n) {
      if (n && n->unsharded.empty()) n->start_prefetch();
    };
    if (!forward_prefetch.empty()) {
      for (const std::weak_ptr<Group>& w : forward_prefetch) start(w.lock());
    } else if (prefetch) {
      start(next_forward.lock());
    }
  }
};

// The groups of this thread unsharded in a forward that will reshard:
// the ones whose parameters the pack hook replaces by a handle.
thread_local std::vector<std::weak_ptr<Group>> resharding_groups;

// A parameter saved for backward, packed: gathered again on unpack.
struct SavedParam {
  std::shared_ptr<Group> group;
  size_t index;
};

bool same_data(const DTensor& a, const DTensor& b) {
  if (a.spec() != b.spec() || a.local().size() != b.local().size()) return false;
  if (a.local().empty()) return true;
  const Tensor& x = a.local().shards().front().second;
  const Tensor& y = b.local().shards().front().second;
  return x.storage() == y.storage() && x.storage_offset() == y.storage_offset() &&
         x.strides() == y.strides();
}

std::any pack_param(const DTensor& t) {
  for (const std::weak_ptr<Group>& weak : resharding_groups) {
    std::shared_ptr<Group> g = weak.lock();
    if (!g) continue;
    for (size_t k = 0; k < g->unsharded.size(); ++k)
      if (same_data(t, g->unsharded[k])) return SavedParam{g, k};
  }
  return t;
}

DTensor unpack_param(const std::any& a) {
  if (const SavedParam* p = std::any_cast<SavedParam>(&a))
    return p->group->backward_value(p->index);
  return std::any_cast<DTensor>(a);
}

std::unique_ptr<Backend::Pending> Group::start_gather() const {
  // The flat buffers (this rank's and the gathered one) until cut.
  const MemoryScope scope(MemoryCategory::CommunicationBuffers);
  LocalTensor in;
  for (const auto& [rank, l] : layouts) {
    Tensor flat = flat_zeros(l.pieces->total, param_dtype());
    for (size_t k = 0; k < params.size() && !flat.is_meta(); ++k) {
      const Tensor s = params[k].sharded.to_local(rank);
      if (s.numel() > 0) flat.narrow(0, l.pieces->offset[k], s.numel()).copy_(s.reshape({-1}));
    }
    in.set(rank, std::move(flat));
  }
  return mesh.world().backend().start_all_gather_flat(in, dp_mesh, dp_dim);
}

uint64_t Group::shard_versions() const {
  uint64_t v = 0;
  for (const Param& p : params)
    for (const auto& [rank, shard] : p.sharded.local().shards())
      if (shard.storage()) v += shard.storage()->version();
  return v;
}

void Group::start_prefetch() {
  if (prefetched || params.empty()) return;
  prefetched_versions = shard_versions();
  prefetched = start_gather();
}

std::vector<DTensor> Group::gather() {
  if (prefetched) {
    std::unique_ptr<Backend::Pending> p = std::move(prefetched);
    LocalTensor out = p->wait();
    // Gathered before a step changed the shards (every rank alike): stale.
    if (shard_versions() == prefetched_versions) return cut(out, [](int64_t j) { return j; });
  }
  return cut(start_gather()->wait(), [](int64_t j) { return j; });
}

std::vector<DTensor> Group::cut(const LocalTensor& out,
                                const std::function<int64_t(int64_t)>& piece_start) const {
  const MemoryScope scope(MemoryCategory::UnshardedParameters);
  std::vector<DTensor> values;
  values.reserve(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    LocalTensor local;
    const DTensorSpec& u = params[k].unsharded_spec;
    for (const auto& [rank, l] : layouts) {
      const Tensor& flat = out.shard(rank);
      if (flat.is_meta()) {  // a shape-only world: the joined shape, nothing cut
        local.set(rank, Tensor::meta(u.extent_of_rank(rank)->local_shape, param_dtype()));
        continue;
      }
      std::vector<Tensor> pieces;
      for (size_t j = 0; j < l.pieces->shapes[k].size(); ++j) {
        const Shape& shape = l.pieces->shapes[k][j];
        pieces.push_back(
            flat.narrow(0, piece_start(static_cast<int64_t>(j)) * l.pieces->total + l.pieces->offset[k],
                        shape.product())
                .view(shape));
      }
      local.set(rank, cat(pieces, params[k].dim).contiguous());
    }
    values.emplace_back(DTensorSpec(u.mesh(), u.placements(), u.shape(), param_dtype()),
                        std::move(local));
  }
  return values;
}

void Group::keep_k_pieces() {
  const MemoryScope scope(MemoryCategory::UnshardedParameters);
  const int64_t k = reshard_size;
  LocalTensor out;
  for (const auto& [rank, l] : layouts) {
    const int64_t members = static_cast<int64_t>(l.pieces->shapes.empty() ? 1 : l.pieces->shapes[0].size());
    const int64_t mine = l.member % k;
    Tensor flat = flat_zeros(members / k * l.pieces->total, param_dtype());
    for (size_t p = 0; p < params.size() && !flat.is_meta(); ++p) {
      const Tensor value = unsharded[p].to_local(rank);
      const int64_t dim = params[p].dim;
      int64_t start = 0;
      for (int64_t j = 0; j < members; ++j) {
        const Shape& shape = l.pieces->shapes[p][static_cast<size_t>(j)];
        if (j % k == mine && shape.product() > 0)
          flat.narrow(0, j / k * l.pieces->total + l.pieces->offset[p], shape.product())
              .view(shape)
              .copy_(value.narrow(dim, start, shape[static_cast<size_t>(dim)]));
        start += shape[static_cast<size_t>(dim)];
      }
    }
    out.set(rank, std::move(flat));
  }
  kept = std::move(out);
}

std::vector<DTensor> Group::gather_kept() const {
  // Position i of a run sent the pieces i, i + k, ...: member j's piece is
  // the (j / k)-th of position j % k's.
  const int64_t k = reshard_size;
  const int64_t members = static_cast<int64_t>(layouts.begin()->second.pieces->shapes.empty()
                                                    ? 1
                                                    : layouts.begin()->second.pieces->shapes[0].size());
  LocalTensor out;
  {
    const MemoryScope scope(MemoryCategory::CommunicationBuffers);
    out = mesh.world().backend().all_gather(*kept, *k_mesh, k_dim, 0);
  }
  return cut(out, [k, members](int64_t j) { return j % k * (members / k) + j / k; });
}

void Group::reshard() {
  for (Param& p : params)
    for (DTensor* slot : p.slots) *slot = p.sharded;
  unsharded.clear();
}

// A gradient of an unsharded value made ready for the reduce_scatter: on
// the dp dims (and HSDP's replicate dims) a Partial(sum) (what
// batch-sharded activations give; a Replicate or Shard gradient there is
// made Replicate and then split, so that the sum restores it), on every
// other mesh dim the parameter's own placement (a Partial(sum) on tp is
// reduced there: an all_reduce, or a reduce_scatter onto a tp Shard).
DTensor ready_for_reduce_scatter(const DTensor& g, const Group& group, const Param& p) {
  Placements step = g.placements(), want = p.unsharded_spec.placements();
  for (size_t d = 0; d < step.size(); ++d) {
    if (!group.data_parallel(d)) {
      step[d] = want[d];
    } else {
      if (step[d] != Partial()) step[d] = Replicate();
      want[d] = Partial();
    }
  }
  RedistributeOptions o;
  o.allow_new_partial = true;
  DTensor out = g.placements() == step ? g : g.redistribute(step);
  return out.placements() == want ? out : out.redistribute(want, o);
}

// HSDP: each replica's shards hold its sum; the sum over the replicas is
// one all_reduce of the flat shard (1/shard-group of the gradient).
LocalTensor over_replicas(LocalTensor out, const Group& g) {
  if (!g.replicate_mesh) return out;
  return g.mesh.world().backend().all_reduce(out, *g.replicate_mesh, g.replicate_dim,
                                             ReduceOp::Sum);
}

// Waits for a started reduce_scatter.
void finish_reduce(CallState& call, const Group& g) {
  if (!call.reducing) return;
  const std::unique_ptr<Backend::Pending> p = std::move(call.reducing);
  call.reduced = over_replicas(p->wait(), g);
}

// The reduce_scatters started and not yet waited for, in the order
// started (async_reduce_scatter): at most one, since each GatherNode waits
// for the ones before it first. Backward runs on one thread.
struct InFlight {
  std::weak_ptr<CallState> call;
  std::weak_ptr<Group> group;
};
thread_local std::vector<InFlight> reducing;

void finish_in_flight() {
  std::vector<InFlight> all;
  all.swap(reducing);
  for (const InFlight& f : all) {
    const std::shared_ptr<CallState> call = f.call.lock();
    const std::shared_ptr<Group> group = f.group.lock();
    if (call && group) finish_reduce(*call, *group);
  }
}

// Lets the ones in flight advance (Backend::Pending::progress): called as
// the next group's backward hands over each gradient.
void progress_in_flight() {
  for (const InFlight& f : reducing)
    if (const std::shared_ptr<CallState> call = f.call.lock(); call && call->reducing)
      call->reducing->progress();
}

// The backward of the group's gather: one reduce_scatter of the flat
// gradient, started (or run) here; its wait node cuts it into each leaf's
// gradient. Its one input is the wait node's token.
class GatherNode final : public autograd::Node {
 public:
  GatherNode(std::shared_ptr<Group> group, std::shared_ptr<CallState> call)
      : group_(std::move(group)), call_(std::move(call)) {}
  const char* name() const override { return "FullyShardGather"; }

  autograd::Grads apply(DTensor token_grad) override {
    Group& g = *group_;
    // The flat gradients, the pieces received, the reduced flat shards.
    const MemoryScope scope(MemoryCategory::CommunicationBuffers);
    LocalTensor in;
    for (const auto& [rank, l] : g.layouts) {
      const int64_t n = static_cast<int64_t>(l.pieces->shapes.empty() ? 1 : l.pieces->shapes[0].size());
      Tensor flat = g.flat_zeros(n * l.pieces->total, g.reduce_dtype());
      for (size_t k = 0; k < g.params.size() && !flat.is_meta(); ++k) {
        if (!call_->grads[k]) continue;
        const Tensor local = call_->grads[k]->to_local(rank);
        const int64_t dim = g.params[k].dim;
        int64_t start = 0;
        for (size_t j = 0; j < l.pieces->shapes[k].size(); ++j) {
          const Shape& shape = l.pieces->shapes[k][j];
          if (shape.product() > 0)
            flat.narrow(0, static_cast<int64_t>(j) * l.pieces->total + l.pieces->offset[k], shape.product())
                .view(shape)
                .copy_(local.narrow(dim, start, shape[static_cast<size_t>(dim)]));
          start += shape[static_cast<size_t>(dim)];
        }
      }
      // Earlier backwards without sync first, then this one (FSDP2 adds
      // each backward's unsharded gradient into the accumulated one).
      if (g.unsynced)
        flat = flat.is_meta() ? flat.new_empty(flat.shape(), flat.dtype())  // shapes only
                              : add(g.unsynced->shard(rank), flat);
      in.set(rank, std::move(flat));
    }
    call_->had_grad.clear();
    for (const std::optional<DTensor>& grad : call_->grads)
      call_->had_grad.push_back(grad.has_value());
    finish_backward();
    if (!g.requires_gradient_sync) {
      g.unsynced = std::move(in);
      return {};  // the sharded leaves get no gradient yet
    }
    g.unsynced.reset();
    // The one before finishes first: one in flight, and every rank waits
    // and starts in the same order.
    finish_in_flight();
    Backend& backend = g.mesh.world().backend();
    if (g.async_reduce_scatter) {
      call_->reducing = backend.start_reduce_scatter_flat(in, g.dp_mesh, g.dp_dim, ReduceOp::Sum);
      reducing.push_back({call_, group_});
    } else {
      call_->reduced =
          over_replicas(backend.reduce_scatter(in, g.dp_mesh, g.dp_dim, ReduceOp::Sum, 0), g);
    }
    return {std::move(token_grad)};
  }

  // The group's backward is done: free what backward gathered, and the
  // root's values kept since forward (post-backward reshard).
  void finish_backward() {
    call_->grads.clear();
    group_->backward_unsharded.clear();
    group_->kept.reset();
    if (!group_->unsharded.empty()) group_->reshard();
  }

 private:
  std::shared_ptr<Group> group_;
  std::shared_ptr<CallState> call_;
};

// Gives the sharded leaves their gradients: the cuts of the reduced flat
// shard, waited for first if still in flight. It runs among the leaves'
// accumulators, after every op of backward (the engine runs ops first), so
// the last group's reduce_scatter overlaps nothing it must wait for.
class ReduceScatterWait final : public autograd::Node {
 public:
  ReduceScatterWait(std::shared_ptr<Group> group, std::shared_ptr<CallState> call)
      : group_(std::move(group)), call_(std::move(call)) {
    accumulator = true;
  }
  const char* name() const override { return "FullyShardReduceScatterWait"; }

  autograd::Grads apply(DTensor) override {
    const Group& g = *group_;
    if (call_->reducing) {
      std::erase_if(reducing, [&](const InFlight& f) { return f.call.lock() == call_; });
      const MemoryScope scope(MemoryCategory::CommunicationBuffers);
      finish_reduce(*call_, g);
    }
    DT_CHECK(call_->reduced, "fully_shard: internal error: a group of ", g.params.size(),
             " parameters has no reduced gradient");
    const LocalTensor out = std::move(*call_->reduced);
    call_->reduced.reset();
    autograd::Grads grads(g.params.size());
    for (size_t k = 0; k < g.params.size(); ++k) {
      if (!call_->had_grad[k] || !edges[k].node) continue;
      LocalTensor local;
      for (const auto& [rank, l] : g.layouts) {
        const Shape& shape = l.pieces->shapes[k][static_cast<size_t>(l.member)];
        Tensor cut = out.shard(rank).narrow(0, l.pieces->offset[k], shape.product()).view(shape);
        if (g.divide_factor != 1)  // in reduce_dtype (a shape-only world: the shape)
          cut = cut.is_meta() ? cut.new_empty(shape, cut.dtype()) : cut / g.divide_factor;
        local.set(rank, cut.dtype() == g.dtype ? cut.clone() : cut.to(g.dtype));
      }
      grads[k] = DTensor(g.params[k].sharded.spec(), std::move(local));
    }
    return grads;
  }

 private:
  std::shared_ptr<Group> group_;
  std::shared_ptr<CallState> call_;
};

// The backward of one unsharded value: keeps its gradient for the GatherNode.
class UnshardNode final : public autograd::Node {
 public:
  UnshardNode(std::shared_ptr<Group> group, std::shared_ptr<CallState> call, size_t index,
              DTensor token_grad)
      : group_(std::move(group)), call_(std::move(call)), index_(index),
        token_grad_(std::move(token_grad)) {}
  const char* name() const override { return "FullyShardUnshard"; }

  autograd::Grads apply(DTensor grad) override {
    progress_in_flight();
    const Param& p = group_->params[index_];
    DTensor g = ready_for_reduce_scatter(grad.to(group_->reduce_dtype()), *group_, p);
    std::optional<DTensor>& kept = call_->grads[index_];
    kept = kept ? add(*kept, g) : g;
    return {token_grad_};
  }

 private:
  std::shared_ptr<Group> group_;
  std::shared_ptr<CallState> call_;
  size_t index_;
  DTensor token_grad_;
};

// Makes the gathered values differentiable functions of the sharded leaves.
void record_gather(const std::shared_ptr<Group>& group, std::vector<DTensor>& values) {
  std::vector<const DTensor*> leaves;
  for (const Param& p : group->params) leaves.push_back(&p.sharded);
  if (!autograd::recording(leaves)) return;
  auto call = std::make_shared<CallState>();
  call->grads.resize(group->params.size());
  const Placements replicate(static_cast<size_t>(group->mesh.ndim()), Replicate());
  // leaves <- ReduceScatterWait <- wait token <- GatherNode <- token.
  DTensor wait_token =
      distribute_tensor(group->flat_zeros(1, group->dtype), group->mesh, replicate);
  autograd::attach(wait_token, std::make_shared<ReduceScatterWait>(group, call), leaves);
  DTensor token = wait_token.detach();
  autograd::attach(token, std::make_shared<GatherNode>(group, call), {&wait_token});
  const DTensor token_grad = token.detach();
  for (size_t k = 0; k < values.size(); ++k) {
    if (!group->params[k].sharded.requires_grad()) continue;
    autograd::attach(values[k], std::make_shared<UnshardNode>(group, call, k, token_grad),
                     {&token});
  }
}

void end_packing(const std::shared_ptr<Group>& group) {
  group->hooks.reset();
  std::erase_if(resharding_groups, [&](const std::weak_ptr<Group>& w) {
    return w.expired() || w.lock() == group;
  });
}

bool is_root(const Group& group);  // below, with the registry

// The group whose pre_forward ran last on this thread in this forward
// (from its root's on): how each group learns its neighbours.
thread_local std::weak_ptr<Group> last_pre_forward;

void pre_forward(const std::shared_ptr<Group>& group) {
  if (!group->root) group->root = is_root(*group);
  // A forward that threw left its scope behind: end it now.
  if (group->hooks) end_packing(group);
  std::vector<DTensor> values = group->gather();
  // Learn the forward order once (the first forward), then prefetch the
  // neighbour that gathers next: the next group in forward, the previous
  // one in an activation checkpoint's recomputation (backward's order).
  if (!*group->root) {
    const std::shared_ptr<Group> last = last_pre_forward.lock();
    if (last && last != group && last->next_forward.expired() && group->prev_forward.expired()) {
      last->next_forward = group;
      group->prev_forward = last;
    }
  }
  last_pre_forward = group;
  if (nn::in_recomputation())
    group->prefetch_for_backward();
  else
    group->prefetch_for_forward();
  record_gather(group, values);
  group->unsharded = std::move(values);
  for (size_t k = 0; k < group->params.size(); ++k)
    for (DTensor* slot : group->params[k].slots) *slot = group->unsharded[k];
  // The root keeps its values until after backward (FSDP2): nothing to pack.
  // Without grad (an evaluation) no backward comes to reshard them, and the
  // model would hold its root's unsharded values, not the leaves the
  // optimizer and a state dict name, until its next backward: it reshards
  // after forward like the others then.
  // Inside an activation-checkpointing region the region keeps nothing of
  // them (backward runs the module again, gathering again), so there is
  // nothing to pack either.
  group->resharding = group->reshard_after_forward && (!*group->root || !is_grad_enabled());
  if (group->resharding && !nn::in_checkpoint_region()) {
    resharding_groups.push_back(group);
    group->hooks.emplace(pack_param, unpack_param);
  }
}

void post_forward(const std::shared_ptr<Group>& group) {
  if (!group->resharding) return;
  group->resharding = false;
  // Kept only for a backward that gathers from it: not in a checkpointed
  // region (its recomputation gathers) nor when nothing was recorded.
  if (group->hooks && group->reshard_size > 0 && autograd::recording({&group->unsharded[0]}))
    group->keep_k_pieces();
  if (group->hooks) end_packing(group);
  group->reshard();
}

// ---- which modules and parameters are taken --------------------------------------------

// Every module under fully_shard or replicate, with a marker its hooks
// own: an entry whose marker expired belongs to a module that is gone
// (its group may outlive it in a graph, so the group alone cannot tell).
struct Registry {
  struct Entry {
    const nn::Module* module;
    std::weak_ptr<void> marker;
    std::weak_ptr<Group> group;  // null for replicate
    std::vector<int> data_parallel_dims;  // ascending
  };
  std::mutex mutex;
  std::vector<Entry> entries;

  // The entries of live modules (pruning the others). REQUIRES: mutex held.
  const std::vector<Entry>& live() {
    std::erase_if(entries, [](const Entry& e) { return e.marker.expired(); });
    return entries;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

bool taken(const nn::Module& module) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.live())
    if (e.module == &module) return true;
  return false;
}

void take(const nn::Module& module, const std::shared_ptr<void>& marker,
          const std::shared_ptr<Group>& group, std::vector<int> data_parallel_dims) {
  std::sort(data_parallel_dims.begin(), data_parallel_dims.end());
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries.push_back({&module, marker, group, std::move(data_parallel_dims)});
}

// Whether a live fully_shard module manages this parameter slot.
bool managed(const DTensor* slot) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.live())
    if (auto g = e.group.lock())
      for (const Param& p : g->params)
        if (std::find(p.slots.begin(), p.slots.end(), slot) != p.slots.end()) return true;
  return false;
}

// No other live fully_shard module contains the group's module.
bool is_root(const Group& group) {
  std::vector<nn::Module*> others;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& e : r.live())
      if (auto g = e.group.lock(); g && g.get() != &group) others.push_back(g->module);
  }
  for (nn::Module* m : others)
    for (const auto& [name, sub] : m->named_modules())
      if (sub == group.module) return false;
  return true;
}

std::vector<int> checked_dims(const DeviceMesh& mesh, std::vector<int> dims, const char* api) {
  DT_CHECK(!dims.empty(), api, ": mesh_dims is empty; name the data-parallel mesh dims");
  for (size_t i = 0; i < dims.size(); ++i) {
    DT_CHECK(dims[i] >= 0 && dims[i] < mesh.ndim(), api, ": mesh dim ", dims[i],
             " is out of range for the module's mesh ", mesh.to_string());
    DT_CHECK(i == 0 || dims[i] > dims[i - 1], api,
             ": mesh_dims must be ascending without repeats, got dim ", dims[i], " after ",
             dims[i - 1]);
  }
  return dims;
}

std::string placements_text(const DTensor& p) { return to_string(p.placements()); }

void check_policy(const MixedPrecisionPolicy& mp, const char* api) {
  for (const auto& [field, d] : {std::pair{"param_dtype", mp.param_dtype},
                                 std::pair{"reduce_dtype", mp.reduce_dtype},
                                 std::pair{"output_dtype", mp.output_dtype}})
    DT_CHECK(!d || is_floating(*d), api, ": mp_policy.", field, " must be a floating dtype "
             "(float32, float64, bfloat16, float16), got ", *d);
}

// x cast to `dtype` when it is floating and of another one (differentiable:
// the gradient comes back in x's dtype).
DTensor cast_floating(const DTensor& x, std::optional<DType> dtype) {
  if (!dtype || !is_floating(x.dtype()) || x.dtype() == *dtype) return x;
  return x.to(*dtype);
}

}  // namespace

void fully_shard(nn::Module& module, const FullyShardOptions& options) {
  const DeviceMesh& mesh = module.mesh();
  DT_CHECK(!taken(module), "fully_shard: the module is already under fully_shard or replicate");
  const std::vector<int> dp_dims = checked_dims(mesh, options.mesh_dims, "fully_shard");
  auto group = std::make_shared<Group>(module, dp_dims.size() == 1 ? mesh : mesh.flatten(dp_dims));
  group->dp_dims = dp_dims;
  group->dp_dim = dp_dims.size() == 1 ? dp_dims[0] : 0;
  if (!options.replicate_mesh_dims.empty()) {
    const std::vector<int> rep =
        checked_dims(mesh, options.replicate_mesh_dims, "fully_shard (replicate_mesh_dims)");
    for (int d : rep)
      DT_CHECK(std::find(dp_dims.begin(), dp_dims.end(), d) == dp_dims.end(),
               "fully_shard: mesh dim ", d, " is in both mesh_dims (shard) and "
               "replicate_mesh_dims (replicate); HSDP shards over one and replicates over the "
               "other");
    group->replicate_dims = rep;
    group->replicate_mesh = rep.size() == 1 ? mesh : mesh.flatten(rep);
    group->replicate_dim = rep.size() == 1 ? rep[0] : 0;
  }
  if (const int* k = std::get_if<int>(&options.reshard_after_forward)) {
    const int64_t n = group->dp_mesh.size(group->dp_dim);
    DT_CHECK(dp_dims.size() == 1, "fully_shard: reshard_after_forward = ", *k,
             " (an int) needs one data-parallel mesh dim, got mesh_dims of ", dp_dims.size(),
             " (not implemented for several)");
    DT_CHECK(*k > 1 && *k < n && n % *k == 0, "fully_shard: reshard_after_forward = ", *k,
             ": an int must divide the data-parallel group's ", n, " ranks and lie strictly "
             "between 1 and ", n, " (true reshards to all ", n, ", false to 1)");
    group->reshard_size = *k;
    // The dp dim split into (n / k, k): the runs of k consecutive members
    // along the inner dim, the mesh's ranks in the same row-major order.
    Shape shape = mesh.shape();
    const auto d = static_cast<size_t>(group->dp_dim);
    shape[d] = n / *k;
    shape.insert(d + 1, *k);
    std::vector<std::string> names;  // for messages only: this mesh is the group's own
    for (size_t i = 0; i < shape.size(); ++i)
      names.push_back("fully_shard_reshard_" + std::to_string(i));
    group->k_mesh.emplace(mesh.world(), shape, mesh.ranks(), names);
    group->k_dim = group->dp_dim + 1;
  } else {
    group->reshard_after_forward = std::get<bool>(options.reshard_after_forward);
  }
  check_policy(options.mp_policy, "fully_shard");
  group->mp = options.mp_policy;
  group->prefetch = options.prefetch;
  group->async_reduce_scatter = options.async_reduce_scatter;

  bool first = true;
  for (auto& [name, slot] : module.named_parameters(/*remove_duplicate=*/false)) {
    if (managed(slot)) continue;
    const DTensor& p = *slot;
    // A tied parameter's other slots: the same Param.
    const auto tied = std::find_if(group->params.begin(), group->params.end(), [&](const Param& q) {
      return nn::same_parameter(*q.slots.front(), p);
    });
    if (tied != group->params.end()) {
      tied->slots.push_back(slot);
      continue;
    }
    // Tied to one an inner fully_shard already replaced: two groups would
    // each shard a copy and the tie would silently break.
    if (const std::optional<std::string> by = nn::superseded_by(p))
      DT_THROW("fully_shard: parameter '", name, "' is tied to (the same tensor as) another "
               "slot's parameter, which ", *by, " already replaced; a tied parameter must be ",
               "managed by one fully_shard: apply it to a module holding every use, and not ",
               "to the inner ones");
    DT_CHECK(p.mesh() == mesh, "fully_shard: parameter '", name, "' lives on mesh ",
             p.mesh().to_string(), ", not the module's ", mesh.to_string());
    DT_CHECK(p.dim() >= 1, "fully_shard: parameter '", name,
             "' is 0-d; FSDP shards dim 0 (make it shape [1])");
    DT_CHECK(first || p.dtype() == group->dtype, "fully_shard: parameter '", name, "' is ",
             dtype_name(p.dtype()), " but the group's others are ", dtype_name(group->dtype),
             "; one group gathers one dtype (fully_shard the module holding it on its own)");
    group->dtype = p.dtype();
    first = false;
    Placements sharded = p.placements();
    for (size_t d = 0; d < sharded.size(); ++d) {
      DT_CHECK(!sharded[d].is_partial(), "fully_shard: parameter '", name, "' is ",
               placements_text(p), ", Partial on mesh dim ", d, "; parameters hold values");
      DT_CHECK(!group->data_parallel(d) || sharded[d].is_replicate(), "fully_shard: parameter '",
               name, "' is ", placements_text(p),
               "; it must be Replicate on the data-parallel mesh dim ", d);
    }
    // The tensor dim dp shards: Shard(0), or what shard_placement_fn says.
    int64_t dim = 0;
    if (options.shard_placement_fn) {
      if (const std::optional<Placement> want = options.shard_placement_fn(name, p)) {
        DT_CHECK(want->is_shard(), "fully_shard: shard_placement_fn gave ", *want,
                 " for parameter '", name, "'; it must give a Shard(dim) or nothing (Shard(0))");
        dim = want->dim() < 0 ? want->dim() + p.dim() : want->dim();
        DT_CHECK(dim >= 0 && dim < p.dim(), "fully_shard: shard_placement_fn gave ", *want,
                 " for parameter '", name, "' of shape ", p.shape(), ", which has no dim ",
                 want->dim());
      }
    }
    // dp splits `dim` after the mesh dims that already shard it (tp splits
    // the rows first, dp each tp piece: S(0)[1],S(0)[0] on (dp, tp)), so the
    // dp group's pieces are consecutive slices of one tp piece and one plain
    // all_gather over dp restores it.
    const DimVector before = shard_split_order(sharded, dim);
    for (size_t i = 0; i < before.size(); ++i)
      sharded[static_cast<size_t>(before[i])] = Shard(dim, static_cast<int64_t>(i));
    for (size_t j = 0; j < group->dp_dims.size(); ++j)
      sharded[static_cast<size_t>(group->dp_dims[j])] =
          Shard(dim, static_cast<int64_t>(before.size() + j));
    sharded = normalize_shard_orders(sharded);
    // Each shard is a copy, so the replicated storage is freed.
    DTensor leaf = [&] {
      NoGradGuard no_grad;
      const DTensor moved = p.redistribute(sharded);
      return DTensor(moved.spec(),
                     moved.local().map([](int, const Tensor& t) { return t.clone(); }));
    }();
    if (p.requires_grad()) leaf.requires_grad_();
    group->params.push_back({name, {slot}, leaf, p.spec(), dim});
  }
  // Only once every parameter passed the checks.
  for (Param& p : group->params)
    for (DTensor* slot : p.slots) nn::replace_parameter(*slot, p.sharded, "fully_shard");

  std::map<int, std::shared_ptr<const PieceLayout>> by_first_member;
  for (int rank : mesh.held_ranks()) {
    const std::vector<int> members = group->dp_mesh.group(rank, group->dp_dim);
    std::shared_ptr<const PieceLayout>& pieces = by_first_member[members.front()];
    if (!pieces) {
      auto made = std::make_shared<PieceLayout>();
      for (const Param& p : group->params) {
        std::vector<Shape> shapes;
        int64_t most = 0;
        for (int m : members) {
          shapes.push_back(p.sharded.spec().extent_of_rank(m)->local_shape);
          most = std::max(most, shapes.back().product());
        }
        made->offset.push_back(made->total);
        made->total += most;
        made->shapes.push_back(std::move(shapes));
      }
      pieces = std::move(made);
    }
    const int member = static_cast<int>(group->dp_mesh.group_index(rank, group->dp_dim));
    group->layouts.emplace(rank, RankLayout{member, pieces});
  }

  // The hooks own the group and the module's marker. A module with
  // nothing left to manage still counts as fully_shard'ed (it may be the
  // root that contains the others). The marker dies with the module's
  // hooks and then drops the values the group still holds: a root keeps
  // its unsharded values until backward, and their nodes hold the group,
  // so a forward never followed by backward would otherwise keep the
  // group alive in a cycle (values -> UnshardNode -> group -> values).
  auto marker = std::shared_ptr<int>(new int(0), [weak = std::weak_ptr<Group>(group)](int* p) {
    delete p;
    if (const std::shared_ptr<Group> g = weak.lock()) {
      g->unsharded.clear();
      g->backward_unsharded.clear();
    }
  });
  std::vector<int> batch_dims = group->dp_dims;
  batch_dims.insert(batch_dims.end(), group->replicate_dims.begin(), group->replicate_dims.end());
  take(module, marker, group, std::move(batch_dims));
  module.register_forward_pre_hook([group, marker](nn::Module&, const DTensor& x) {
    if (!group->params.empty()) {
      pre_forward(group);
    } else {
      // A root with nothing to gather still starts its forward's order.
      if (!group->root) group->root = is_root(*group);
      if (*group->root) last_pre_forward = group;
    }
    return group->mp.cast_forward_inputs ? cast_floating(x, group->mp.param_dtype) : x;
  });
  module.register_forward_hook([group](nn::Module&, const DTensor&, const DTensor& y) {
    if (!group->params.empty()) post_forward(group);
    // The order is learnt within one root's forward: no link reaches
    // another model, or the next forward.
    if (group->root && *group->root) last_pre_forward.reset();
    return cast_floating(y, group->mp.output_dtype);
  });
}

namespace {

// The fully_shard groups of `module` (it must be fully_shard'ed) and, with
// recurse, of every fully_shard module under it.
std::vector<std::shared_ptr<Group>> groups_of(nn::Module& module, bool recurse, const char* api,
                                              bool if_any = false) {
  std::vector<const nn::Module*> modules{&module};
  if (recurse)
    for (const auto& [name, sub] : module.named_modules()) modules.push_back(sub);
  std::vector<std::shared_ptr<Group>> out;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.live())
    if (std::find(modules.begin(), modules.end(), e.module) != modules.end())
      if (std::shared_ptr<Group> g = e.group.lock();
          g && std::find(out.begin(), out.end(), g) == out.end())
        out.push_back(std::move(g));
  const bool own = std::any_of(out.begin(), out.end(), [&](const auto& g) {
    return g->module == &module;
  });
  DT_CHECK(own || if_any, api, ": the module is not under fully_shard (FSDP2's FSDPModule methods are "
           "for modules fully_shard was applied to)");
  return out;
}

}  // namespace

void set_requires_gradient_sync(nn::Module& module, bool requires_gradient_sync, bool recurse) {
  for (const auto& g : groups_of(module, recurse, "set_requires_gradient_sync"))
    g->requires_gradient_sync = requires_gradient_sync;
}

void reshard(nn::Module& module, bool recurse, bool if_any) {
  for (const auto& g : groups_of(module, recurse, "reshard", if_any))
    if (!g->unsharded.empty()) g->reshard();
}

void set_reshard_after_forward(nn::Module& module, bool reshard_after_forward, bool recurse) {
  for (const auto& g : groups_of(module, recurse, "set_reshard_after_forward"))
    g->reshard_after_forward = reshard_after_forward;
}

void set_gradient_divide_factor(nn::Module& module, double factor) {
  DT_CHECK(factor > 0 && std::isfinite(factor),
           "set_gradient_divide_factor: expected a finite factor > 0, got ", factor);
  for (const auto& g : groups_of(module, false, "set_gradient_divide_factor"))
    if (g->module == &module) g->divide_factor = factor;
}

namespace {

std::vector<std::weak_ptr<Group>> prefetch_list(const std::vector<nn::Module*>& modules,
                                                const char* api) {
  std::vector<std::weak_ptr<Group>> out;
  for (nn::Module* m : modules) {
    DT_CHECK(m != nullptr, api, ": a module in the list is null");
    for (const auto& g : groups_of(*m, false, api))
      if (g->module == m) out.push_back(g);
  }
  return out;
}

}  // namespace

size_t reduce_scatters_in_flight() {
  size_t n = 0;
  for (const InFlight& f : reducing) {
    const std::shared_ptr<CallState> call = f.call.lock();
    n += call && call->reducing;
  }
  return n;
}

void set_modules_to_forward_prefetch(nn::Module& module, const std::vector<nn::Module*>& modules) {
  const auto list = prefetch_list(modules, "set_modules_to_forward_prefetch");
  for (const auto& g : groups_of(module, false, "set_modules_to_forward_prefetch"))
    if (g->module == &module) g->forward_prefetch = list;
}

void set_modules_to_backward_prefetch(nn::Module& module, const std::vector<nn::Module*>& modules) {
  const auto list = prefetch_list(modules, "set_modules_to_backward_prefetch");
  for (const auto& g : groups_of(module, false, "set_modules_to_backward_prefetch"))
    if (g->module == &module) g->backward_prefetch = list;
}

bool is_fully_sharded(const nn::Module& module) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.live())
    if (e.module == &module && !e.group.expired()) return true;
  return false;
}

std::vector<int> data_parallel_mesh_dims(const nn::Module& module) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.live())
    if (e.module == &module) return e.data_parallel_dims;
  return {};
}

void replicate(nn::Module& module, const std::vector<int>& mesh_dims) {
  ReplicateOptions options;
  options.mesh_dims = mesh_dims;
  replicate(module, options);
}

void replicate(nn::Module& module, const ReplicateOptions& options) {
  const DeviceMesh& mesh = module.mesh();
  DT_CHECK(!taken(module), "replicate: the module is already under fully_shard or replicate");
  const std::vector<int> dims = checked_dims(mesh, options.mesh_dims, "replicate");
  const MixedPrecisionPolicy& mp = options.mp_policy;
  check_policy(mp, "replicate");
  std::vector<DTensor*> slots;
  // Every slot, a tied parameter's each (each reads the cast in forward).
  for (auto& [name, slot] : module.named_parameters(/*remove_duplicate=*/false)) {
    DT_CHECK(slot->mesh() == mesh, "replicate: parameter '", name, "' lives on mesh ",
             slot->mesh().to_string(), ", not the module's ", mesh.to_string());
    for (int d : dims)
      DT_CHECK(slot->placements()[static_cast<size_t>(d)].is_replicate(), "replicate: parameter '",
               name, "' is ", placements_text(*slot),
               "; it must be Replicate on the data-parallel mesh dim ", d);
    slots.push_back(slot);
    if (!slot->requires_grad()) continue;
    // The gradient is moved to the parameter's own layout before it is
    // added: a Partial(sum) over dp (batch-sharded data) is all-reduced, in
    // reduce_dtype when the policy names one (or param_dtype, FSDP2's rule).
    auto& meta = *autograd::MetaAccess::of(*slot);
    meta.grad_placements = slot->placements();
    if (mp.reduce_dtype || mp.param_dtype)
      meta.grad_reduce_dtype = mp.reduce_dtype ? *mp.reduce_dtype : *mp.param_dtype;
  }
  // The module is marked for as long as it lives (the hooks own the marker).
  auto marker = std::make_shared<int>(0);
  take(module, marker, nullptr, dims);
  if (!mp.param_dtype) {
    module.register_forward_hook([marker, mp](nn::Module&, const DTensor&, const DTensor& y) {
      return cast_floating(y, mp.output_dtype);
    });
    return;
  }
  // param_dtype: the module reads casts of its parameters during forward
  // (differentiable: the gradient reaches the parameter in its own dtype),
  // and the parameters themselves again after it.
  auto leaves = std::make_shared<std::vector<DTensor>>();
  module.register_forward_pre_hook([slots, leaves, mp](nn::Module&, const DTensor& x) {
    // A forward that threw left the casts in place: restore first.
    for (size_t k = 0; k < leaves->size(); ++k) *slots[k] = (*leaves)[k];
    leaves->clear();
    for (DTensor* slot : slots) {
      leaves->push_back(*slot);
      *slot = cast_floating(*slot, mp.param_dtype);
    }
    return mp.cast_forward_inputs ? cast_floating(x, mp.param_dtype) : x;
  });
  module.register_forward_hook(
      [slots, leaves, marker, mp](nn::Module&, const DTensor&, const DTensor& y) {
        for (size_t k = 0; k < slots.size() && k < leaves->size(); ++k) *slots[k] = (*leaves)[k];
        leaves->clear();
        return cast_floating(y, mp.output_dtype);
      });
}

}  // namespace dtensor
