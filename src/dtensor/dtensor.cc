// DTensor: construction (distribute_tensor, from_local), full_tensor and
// redistribute. Data movement is delegated to the transforms in
// src/redistribute/.
#include "dtensor/distributed_tensor.h"

#include <sstream>

#include "autograd/graph.h"
#include "comm/backend.h"
#include "debug/verify.h"
#include "layout/roles_check.h"
#include "redistribute/plan_internal.h"
#include "tensor/allocator.h"
#include "world/roles.h"

namespace dtensor {

namespace {

// Every held shard has the shape `spec` gives its rank. from_local with
// run_check = false trusts its caller; a bad shard found here would
// otherwise come out as a tensor of the wrong shape (an all_gather of rows
// of the wrong count), so it is checked wherever data is consumed: a shape
// comparison per held rank, cheap next to moving the data. `hint` ends the
// shape message (what the caller may have done wrong).
void check_local_shapes(const LocalTensor& local, const DTensorSpec& spec, const char* what,
                        const char* hint = " (was it made by from_local with run_check = false?)") {
  for (const auto& [rank, t] : local.shards()) {
    const std::optional<ShardExtent> e = spec.extent_of_rank(rank);
    DT_CHECK(e.has_value(), what, ": a shard is held for rank ", rank, " which is not in ",
             spec.mesh());
    DT_CHECK(t.shape() == e->local_shape, what, ": rank ", rank, " (coordinate ",
             *spec.mesh().coordinate(rank), ") holds a shard of shape ", t.shape(), " but ",
             to_string(spec.placements()), " of a ", spec.shape(), " tensor gives it ",
             e->local_shape, hint);
    DT_CHECK(t.dtype() == spec.dtype(), what, ": rank ", rank, " holds a shard of dtype ",
             t.dtype(), " but the DTensor's dtype is ", spec.dtype());
  }
}

// Plans (through the cache) and runs the redistribution of `local` from `from` to `to`.
LocalTensor redistribute_local(const LocalTensor& local, const DTensorSpec& from,
                               const DTensorSpec& to, const RedistributeOptions& options,
                               const char* what) {
  check_local_shapes(local, from, what);
  if (from == to) return local;
  auto plan = plan_redistribute(from, to, options);
  return redistribute_detail::execute_plan(*plan, local);
}

void check_placement_count(const DTensorSpec& spec, const Placements& placements) {
  const int nd = spec.mesh().ndim();
  DT_CHECK(placements.size() == static_cast<size_t>(nd), "redistribute: expected ", nd,
           nd == 1 ? " placement" : " placements", " for a ", nd,
           "-d mesh, got ", placements.size(), ": ", to_string(placements));
}

}  // namespace

// Simulated ranks must behave as separate processes: an in-place change to
// one rank's shard may never show on another's. Paths that hand the same
// tensor to several ranks (a replicated input, a no-op step, an op that
// returns its input, a user passing one tensor for every rank) are many, so
// the rule is kept here, where every DTensor is made, at the cost a real
// world pays anyway: one copy per replica. Under MPI there is one shard.
// Two overloads rather than one by value: an op's result copies its spec
// from the propagation cache straight into place (a by-value parameter
// would add a move and a destruction of a spec, mesh included, per op).
// A shape-only world computing by roles checks each new layout against its
// stand-ins (world/roles.h) here, where every DTensor is made.
DTensor::DTensor(const DTensorSpec& spec, LocalTensor local) : spec_(spec), local_(std::move(local)) {
  local_.unshare();
  if (WorldRoles::active(spec_->mesh().world())) [[unlikely]]
    detail::check_roles(*spec_);
}

DTensor::DTensor(DTensorSpec&& spec, LocalTensor local)
    : spec_(std::move(spec)), local_(std::move(local)) {
  local_.unshare();
  if (WorldRoles::active(spec_->mesh().world())) [[unlikely]]
    detail::check_roles(*spec_);
}

void DTensor::throw_empty() {
  DT_THROW("DTensor: this DTensor is empty (default-constructed): it has no mesh, placements ",
           "or data; assign it a DTensor (distribute_tensor, from_local, an op) first");
}

Tensor DTensor::to_local() const {
  DT_CHECK(local_.size() == 1, "to_local: this process holds ", local_.size(),
           " shards (a simulated world holds every rank); use to_local(rank)");
  return local_.shards().front().second;
}

bool DTensor::same_shards(const DTensor& other) const {
  if (spec() != other.spec() || local_.size() != other.local_.size()) return false;
  bool same = true;
  local_.for_each([&](int rank, const Tensor& t) {
    const Tensor& u = other.to_local(rank);
    same = same && t.storage() == u.storage() && t.storage_offset() == u.storage_offset() &&
           t.dtype() == u.dtype();
  });
  return same;
}

namespace {

// full_tensor in a simulated world that holds the whole view: the one
// tensor the caller gets, built once by copying the shards into their
// boxes, instead of all-gathering a copy for every rank and keeping one.
// The shards taken are those at coordinate 0 on every Replicate dim: the
// ones the lowest rank's all-gather would read, so the bits are the same.
// nullopt where that does not apply: a Partial (its fold order is the
// redistribution's), all Replicate (the redistribution moves nothing and
// gives the lowest rank's shard itself, as PyTorch's full_tensor does), a
// shape-only world or meta shards, a rank of the view not held; and while
// someone watches (CommDebugMode, a collective trace, per-rank memory
// counting), who must see the collectives and the per-rank copies that the
// same call makes under MPI.
std::optional<Tensor> assemble_held(const DTensorSpec& spec, const LocalTensor& local) {
  const DeviceMesh& mesh = spec.mesh();
  if (local.size() < 2 || mesh.world().is_shape_only()) return std::nullopt;
  if (collectives_observed() || detail::rank_counting()) return std::nullopt;
  bool sharded = false;
  for (const Placement& p : spec.placements()) {
    if (p.is_partial()) return std::nullopt;
    sharded = sharded || p.is_shard();
  }
  if (!sharded) return std::nullopt;
  const std::vector<int> ranks = mesh.ranks();
  for (int r : ranks)
    if (!local.holds(r) || local.shard(r).is_meta()) return std::nullopt;
  check_local_shapes(local, spec, "full_tensor");
  Tensor full = Tensor::empty(spec.shape(), spec.dtype());
  for (int r : ranks) {
    const DimVector coord = *mesh.coordinate(r);
    bool representative = true;
    for (size_t d = 0; d < coord.size(); ++d)
      representative = representative && (!spec.placements()[d].is_replicate() || coord[d] == 0);
    if (!representative) continue;
    const ShardExtent e = spec.extent(coord);
    Tensor box = full;
    for (size_t k = 0; k < e.local_shape.size(); ++k)
      box = box.narrow(static_cast<int64_t>(k), e.global_offset[k], e.local_shape[k]);
    if (box.numel() > 0) box.copy_(local.shard(r));
  }
  return full;
}

}  // namespace

Tensor DTensor::full_tensor() const {
  DT_CHECK(!local_.empty(), "full_tensor: this process holds no rank of mesh ", mesh());
  if (std::optional<Tensor> whole = assemble_held(spec(), local_)) return *std::move(whole);
  Placements all_r(static_cast<size_t>(mesh().ndim()), Replicate());
  LocalTensor full =
      redistribute_local(local_, spec(), spec().with_placements(all_r), {}, "full_tensor");
  return full.shards().front().second;
}

namespace {

// DTensor::meta's shards, deferred (no memory: Storage::is_deferred) or not.
DTensor meta_dtensor(const DTensorSpec& spec, bool deferred) {
  LocalTensor local;
  for (int rank : spec.mesh().held_ranks()) {
    const std::optional<ShardExtent> e = spec.extent_of_rank(rank);
    Tensor t = Tensor::meta(e ? e->local_shape : Shape{}, spec.dtype());
    t.storage()->set_deferred(deferred);
    local.set(rank, std::move(t));
  }
  return DTensor(spec, std::move(local));
}

}  // namespace

// In a world with data a meta tensor holds no memory yet; in a shape-only
// world it stands for the memory the tensor would hold.
DTensor DTensor::meta(const DTensorSpec& spec) {
  return meta_dtensor(spec, !spec.mesh().world().is_shape_only());
}

bool DTensor::is_deferred() const {
  bool deferred = false;
  local_.for_each([&](int, const Tensor& t) {
    deferred = deferred || (t.storage() != nullptr && t.storage()->is_deferred());
  });
  return deferred;
}

bool DTensor::is_meta() const {
  bool meta = false;
  local_.for_each([&](int, const Tensor& t) { meta = meta || t.is_meta(); });
  return meta;
}

DTensor DTensor::redistribute(const Placements& placements,
                              const RedistributeOptions& options) const {
  check_placement_count(spec(), placements);
  if (options.grad_placements) check_placement_count(spec(), *options.grad_placements);
  for (const std::optional<DType>& d : {options.forward_dtype, options.backward_dtype})
    DT_CHECK(!d || is_floating(*d), "redistribute: forward_dtype and backward_dtype must be "
             "floating dtypes, got ", *d);
  if (options.forward_dtype && *options.forward_dtype != dtype()) {
    RedistributeOptions rest = options;
    rest.forward_dtype.reset();
    return to(*options.forward_dtype).redistribute(placements, rest);
  }
  DTensorSpec target = spec().with_placements(placements);
  // A no-op is the tensor itself, for autograd too (its backward is a
  // no-op), unless grad_placements asks the gradient to move.
  const bool noop = target == spec();
  if (noop && (!options.grad_placements || !autograd::recording({this}))) {
    check_local_shapes(local_, spec(), "redistribute");
    return *this;
  }
  // Deferred initialisation: a meta tensor's values are made later from
  // global indices, so laying it out moves nothing, in a shape-only world
  // too. (Its other tensors run the plan: its collectives are what it records.)
  if (is_meta() && (!mesh().world().is_shape_only() || is_deferred()))
    return meta_dtensor(target, true);
  LocalTensor out = redistribute_local(local_, spec(), target, options, "redistribute");
  DTensor result(std::move(target), std::move(out));
  if (autograd::recording({this})) {
    // The gradient goes back to the source's placements, a Partial source
    // getting a Replicate gradient: turning a Replicate gradient into a
    // Partial only postpones a reduction (PyTorch's rule). Explicit
    // grad_placements are taken as given, a new Partial included.
    const bool explicit_placements = options.grad_placements.has_value();
    Placements to = options.grad_placements.value_or(spec().placements());
    if (!explicit_placements)
      for (Placement& p : to)
        if (p.is_partial()) p = Replicate();
    autograd::record(result, "redistribute", {this}, {},
                     [to, explicit_placements,
                      backward_dtype = options.backward_dtype](const autograd::Context& c) {
                       RedistributeOptions o;
                       o.allow_new_partial = explicit_placements;
                       const DTensor g = backward_dtype ? c.grad.to(*backward_dtype) : c.grad;
                       return autograd::Grads{g.redistribute(to, o)};
                     });
  }
  if (verify_detail::should_verify() && !local_.empty() && !mesh().world().is_shape_only()) {
    // VerifyMode: moving data must keep the tensor's value.
    verify_detail::CheckScope scope;
    verify_detail::expect_match(result.full_tensor(), full_tensor(),
                                "redistribute " + to_string(spec().placements()) + " -> " +
                                    to_string(placements) + " of " + spec().to_string(),
                                "the tensor before the move");
    record_verification();
  }
  return result;
}

DTensor DTensor::redistribute(const DeviceMesh& mesh, const Placements& placements,
                              const RedistributeOptions& options) const {
  DT_CHECK(mesh == this->mesh(), "redistribute: the DTensor lives on ", this->mesh(),
           " but the target mesh is ", mesh, "; redistributing between meshes is not supported");
  return redistribute(placements, options);
}

DTensor distribute_tensor(const Tensor& given, const DeviceMesh& mesh, const Placements& placements,
                          std::optional<int> src_rank) {
  DT_CHECK(given.defined(), "distribute_tensor: the tensor is undefined");
  // A shape-only world keeps shapes only: the same steps, on a meta tensor.
  const Tensor full = mesh.world().is_shape_only() && !given.is_meta()
                          ? Tensor::meta(given.shape(), given.dtype())
                          : given;
  DTensorSpec spec(mesh, placements, full.shape(), full.dtype());  // validates
  DT_CHECK(!src_rank || mesh.contains(*src_rank), "distribute_tensor: src_rank ", *src_rank,
           " is not in mesh ", mesh);
  // `full` is the caller's, no rank's: a rank's memory (RankMemoryTracker)
  // counts only the copy it ends with.
  std::optional<detail::RankCountingPause> pause(std::in_place);
  Placements all_r(static_cast<size_t>(mesh.ndim()), Replicate());
  DTensorSpec replicated = spec.with_placements(all_r);
  LocalTensor local;
  for (int r : mesh.held_ranks()) local.set(r, full.contiguous());
  if (src_rank) {
    DT_CHECK(mesh.contains(*src_rank), "distribute_tensor: src_rank ", *src_rank,
             " is not in mesh ", mesh);
    // The data spreads out from src_rank one mesh dim at a time: a scatter
    // over each Shard dim, then a broadcast over each other dim, so every
    // rank receives only its own part (not the whole tensor) and the
    // broadcasts carry the smallest pieces. The member of a group with
    // src_rank's coordinate on that dim is its root. Once a dim is done,
    // the ranks holding correct data are those agreeing with src_rank on
    // the dims still to do; a group without such a root moves garbage that
    // a later step overwrites. The mesh dims sharding a tensor dim scatter
    // in its split order (spec.h): each scatter chunks the local piece, so
    // it splits after the ones before it.
    const DimVector src = *mesh.coordinate(*src_rank);
    Backend& backend = mesh.world().backend();
    Placements reached = all_r;
    for (int64_t d = 0; d < spec.ndim(); ++d) {
      const DimVector order = shard_split_order(spec.placements(), d);
      for (size_t j = 0; j < order.size(); ++j) {
        const int k = static_cast<int>(order[j]);
        if (mesh.size(k) > 1) local = backend.scatter(local, mesh, k, src[k], d);
        reached = replace_placements(reached, DimVector{k},
                                     Placements{Shard(d, static_cast<int64_t>(j))});
      }
    }
    for (int k = 0; k < mesh.ndim(); ++k)
      if (mesh.size(k) > 1 && !spec.placements()[k].is_shard())
        local = backend.broadcast(local, mesh, k, src[k]);
    replicated = spec.with_placements(reached);
  }
  RedistributeOptions options;
  options.allow_new_partial = true;
  LocalTensor out = redistribute_local(local, replicated, spec, options, "distribute_tensor");
  // The DTensor owns its data (the caller may change `full` afterwards),
  // in both worlds: a shard still sharing full's storage (a Replicate, or
  // a Partial(max) kept as is) becomes a copy.
  out.unshare(full.storage().get());
  pause.reset();
  out.count_ranks();
  return DTensor(std::move(spec), std::move(out));
}

DTensor from_local(const LocalTensor& local, const DeviceMesh& mesh, const Placements& placements,
                   const FromLocalOptions& options) {
  const std::vector<int> ranks = mesh.held_ranks();
  DT_CHECK(!ranks.empty() || !local.empty(), "from_local: this process holds no rank of ", mesh);
  for (int r : ranks) {
    DT_CHECK(local.holds(r), "from_local: no shard given for rank ", r, " of ", mesh,
             " (this process holds it)");
  }
  for (int r : local.ranks()) {
    DT_CHECK(mesh.contains(r), "from_local: a shard is given for rank ", r,
             " which is not in ", mesh);
  }
  const Tensor& first = local.shard(ranks.front());
  const DType dtype = first.dtype();
  Shape shape;
  if (options.shape) {
    shape = *options.shape;
  } else {
    // Even shards: each sharding mesh dim multiplies the local size.
    shape = first.shape();
    Placements probe = placements;
    DTensorSpec check(mesh, probe, shape, dtype);  // validates dims against the local rank
    for (size_t i = 0; i < check.placements().size(); ++i) {
      const Placement& p = check.placements()[i];
      if (p.is_shard()) shape[p.dim()] *= mesh.size(static_cast<int>(i));
    }
  }
  const Shape strides = contiguous_strides(shape);
  // Strides only matter to a global view of the data, which the shards never
  // form; accepting others would promise a layout nothing honours.
  DT_CHECK(!options.stride || *options.stride == strides, "from_local: stride ",
           options.stride ? *options.stride : Shape{}, " is not supported; only the contiguous ",
           "strides ", strides, " of the global shape ", shape, " are");
  TensorMeta meta{shape, strides, dtype};
  DTensorSpec spec(mesh, placements, meta);
  if (options.run_check)
    check_local_shapes(local, spec, "from_local",
                       options.shape ? "" : " (pass the global shape for uneven shards)");
  Placements grad_placements = options.grad_placements.value_or(placements);
  if (options.grad_placements) {
    DT_CHECK(grad_placements.size() == placements.size(), "from_local: grad_placements ",
             to_string(grad_placements), " must have one placement per mesh dim, like ",
             to_string(placements));
  } else {
    for (Placement& p : grad_placements)
      if (p.is_partial()) p = Replicate();
  }
  DTensor out(std::move(spec), local);
  auto& grad_meta = autograd::MetaAccess::of(out);
  grad_meta = std::make_shared<autograd::Meta>();
  grad_meta->grad_placements = grad_placements;
  out.requires_grad_(options.requires_grad);
  return out;
}

DTensor from_local(const std::function<Tensor(int rank)>& make_shard, const DeviceMesh& mesh,
                   const Placements& placements, const FromLocalOptions& options) {
  LocalTensor local;
  for (int r : mesh.held_ranks()) local.set(r, make_shard(r));
  return from_local(local, mesh, placements, options);
}

std::string visualize_sharding(const DTensor& d) { return visualize_sharding(d.spec()); }

}  // namespace dtensor
