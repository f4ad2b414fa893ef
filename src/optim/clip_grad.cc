// clip_grad_norm_: the norm of all gradients, combined over the whole
// world by at most one all_reduce, so that every process gets the same
// bits, whichever meshes it holds ranks of.
//
// A rank's local sum of |g|^p over its shard is part of the total exactly
// once along every mesh dim the gradient is sharded on, and repeated along
// every dim it is replicated on. So gradients sharded over the same mesh
// dims (of the same mesh) add their local sums on each rank, and the ranks
// of one replica of the group (coordinate 0 on every dim the group is
// replicated on) together hold the group's share once. Each process puts
// its held ranks' sums of the groups they are such a replica of into a
// vector of a slot per group (the other slots +0, which changes no bits)
// and one all_reduce over a 1-d mesh of every rank of the world adds them
// up: a process holding no rank of some mesh still gets that mesh's share,
// and so clips with the same coefficient. The sums run in a fixed order
// (parameters in order, elements in order, ranks in world order, groups in
// order of first use) and the all_reduce's order is the backend's fixed
// one, so every world gives the same bits.
//
// A sub-mesh (mesh["tp"]) is one mesh per view, each with its own copy of
// the gradient; its group has a slot per view, and the views must agree
// (replicas, as data parallelism keeps them), or it throws: one number for
// every process cannot be each view's own. When every group is replicated on a mesh of
// the whole world, every process already holds every share: no collective.
#include <cmath>
#include <sstream>

#include "comm/backend.h"
#include "dtensor/optim.h"

namespace dtensor::optim {

namespace {

struct NormGroup {
  DeviceMesh mesh;
  uint32_t sharded_dims;            // bit d: the gradients are sharded on mesh dim d
  std::vector<std::pair<int, double>> local;  // per held rank of the mesh, in rank order
  size_t first_param;               // for messages
};

// The root dims a set of mesh dims covers.
MeshDimMask root_dims_of(const DeviceMesh& mesh, uint32_t mesh_dims) {
  MeshDimMask out = 0;
  for (int d = 0; d < mesh.ndim(); ++d)
    if (mesh_dims >> d & 1u) out |= mesh.root_dims(d);
  return out;
}

// The index of the view of `mesh` that holds `rank` (row-major over the
// root dims the mesh does not cover; 0 for a mesh over every root dim),
// or -1 when the rank is not in the root.
int64_t view_of(const DeviceMesh& mesh, int rank) {
  const std::optional<DimVector> c = mesh.root().coordinate(rank);
  if (!c) return -1;
  const MeshDimMask covered = root_dims_of(mesh, (1u << mesh.ndim()) - 1);
  const Shape root_shape = mesh.root().shape();
  int64_t view = 0;
  for (size_t i = 0; i < root_shape.size(); ++i)
    if (!(covered >> i & 1u)) view = view * root_shape[i] + (*c)[i];
  return view;
}

// Whether the rank's sum counts: it is in the one replica of the group that
// does (coordinate 0 on every mesh dim the group is replicated on).
bool counts(const DeviceMesh& mesh, uint32_t sharded_dims, int rank) {
  const std::optional<DimVector> c = mesh.root().coordinate(rank);
  if (!c) return false;
  const MeshDimMask replicated = root_dims_of(mesh, (1u << mesh.ndim()) - 1) &
                                 ~root_dims_of(mesh, sharded_dims);
  for (size_t i = 0; i < c->size(); ++i)
    if ((replicated >> i & 1u) && (*c)[i] != 0) return false;
  return true;
}

// How many views of its root `mesh` is (1 for a mesh over every root dim).
int64_t view_count(const DeviceMesh& mesh) { return mesh.root().size() / mesh.size(); }

// The first rank (in root order) of view `view` of `mesh`, for messages.
int first_rank_of_view(const DeviceMesh& mesh, int64_t view) {
  for (int r : mesh.root().ranks())
    if (view_of(mesh, r) == view) return r;
  return -1;
}

// The gradient of p in p's placements (nullopt without a gradient),
// written back as p's gradient when it had to move and write_back.
std::optional<DTensor> grad_in_param_layout(const DTensor& p, bool write_back) {
  std::optional<DTensor> g = p.grad();
  if (!g || g->placements() == p.placements()) return g;
  NoGradGuard no_grad;
  DTensor moved = g->redistribute(p.placements());
  if (write_back) {
    DTensor alias = p;  // shares p's gradient state
    alias.set_grad(moved);
  }
  return moved;
}

template <class T>
double local_accumulate(const Tensor& shard, double norm_type, double acc) {
  const Tensor c = shard.contiguous();
  const int64_t n = c.numel();
  if (n == 0 || c.is_meta()) return acc;  // a shape-only world has no values
  const T* x = c.data_ptr<T>();
  if (std::isinf(norm_type)) {
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::abs(static_cast<double>(x[i]));
      if (a > acc || std::isnan(a)) acc = a;  // nan wins, as torch.max
    }
  } else if (norm_type == 2) {
    for (int64_t i = 0; i < n; ++i) {
      const double a = static_cast<double>(x[i]);
      acc += a * a;
    }
  } else if (norm_type == 1) {
    for (int64_t i = 0; i < n; ++i) acc += std::abs(static_cast<double>(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), norm_type);
  }
  return acc;
}

// Each group's share of the total (sum of |g|^p, or max |g|), the same bits
// on every process: see the comment at the top.
std::vector<double> group_values(const std::vector<NormGroup>& groups, bool inf, const char* op) {
  const World& world = groups.front().mesh.world();
  std::vector<double> values;
  bool local_only = true;
  for (const NormGroup& gr : groups)
    local_only = local_only && gr.sharded_dims == 0 && gr.mesh.size() == world.size();
  if (local_only) {
    // Replicated on meshes of every rank: each process holds every total.
    for (const NormGroup& gr : groups) values.push_back(gr.local.front().second);
    return values;
  }
  std::vector<size_t> first_slot;  // per group; then one slot per view
  size_t slots = 0;
  for (const NormGroup& gr : groups) {
    first_slot.push_back(slots);
    slots += static_cast<size_t>(view_count(gr.mesh));
  }
  LocalTensor in;
  for (int rank : world.held_ranks()) {
    std::vector<double> mine(slots, 0.0);
    for (size_t k = 0; k < groups.size(); ++k) {
      const NormGroup& gr = groups[k];
      if (!counts(gr.mesh, gr.sharded_dims, rank)) continue;
      const int64_t view = view_of(gr.mesh, rank);
      for (const auto& [r, v] : gr.local)
        if (r == rank) mine[first_slot[k] + static_cast<size_t>(view)] = v;
    }
    // A shape-only world's values are no values (a NaN norm): the shards
    // are meta, the all_reduce recorded as in a run with data.
    in.set(rank, world.is_shape_only() ? Tensor::meta(Shape{static_cast<int64_t>(slots)},
                                                      DType::Float64)
                                       : Tensor::from_vector(mine));
  }
  NoGradGuard no_grad;
  const DeviceMesh everyone(world, Shape{world.size()});
  const LocalTensor reduced =
      world.backend().all_reduce(in, everyone, 0, inf ? ReduceOp::Max : ReduceOp::Sum);
  if (world.is_shape_only()) return std::vector<double>(groups.size(), NAN);
  const std::vector<double> all = reduced.shards().front().second.to_vector<double>();
  for (size_t k = 0; k < groups.size(); ++k) {
    const double v = all[first_slot[k]];
    const size_t views = static_cast<size_t>(view_count(groups[k].mesh));
    for (size_t j = 1; j < views; ++j) {
      const double w = all[first_slot[k] + j];
      if (v == w || (std::isnan(v) && std::isnan(w))) continue;
      std::ostringstream os;
      os.precision(17);
      os << v << " in the view of rank " << first_rank_of_view(groups[k].mesh, 0) << ", " << w
         << " in that of rank " << first_rank_of_view(groups[k].mesh, static_cast<int64_t>(j));
      DT_THROW(op, ": the gradients on sub-mesh ", groups[k].mesh.to_string(), " (parameter ",
               groups[k].first_param, " and those sharded alike) have different norms in its ",
               views, " views (", os.str(),
               "); one norm for every process needs the views to hold replicas");
    }
    values.push_back(v);
  }
  return values;
}

double grad_norm(const std::vector<DTensor>& params, double norm_type, bool write_back,
                 std::vector<std::pair<size_t, DTensor>>* grads_out, const char* op) {
  DT_CHECK(norm_type > 0 && !std::isnan(norm_type), op, ": expected norm_type > 0 (or INFINITY), got ",
           norm_type);
  const bool inf = std::isinf(norm_type);
  std::vector<NormGroup> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    std::optional<DTensor> g = grad_in_param_layout(params[i], write_back);
    if (!g) continue;
    DT_CHECK(is_floating(g->dtype()), op, ": the gradient of parameter ", i, " is ", g->dtype());
    uint32_t mask = 0;
    for (size_t d = 0; d < g->placements().size(); ++d) {
      const Placement& pl = g->placements()[d];
      DT_CHECK(!pl.is_partial(), op, ": parameter ", i, " has Partial placements ",
               to_string(g->placements()), "; expected Shard/Replicate");
      // A shard over a mesh dim of size 1 is the whole: nothing to reduce.
      if (pl.is_shard() && g->mesh().size(static_cast<int>(d)) > 1) mask |= 1u << d;
    }
    NormGroup* group = nullptr;
    for (NormGroup& gr : groups)
      if (gr.sharded_dims == mask && gr.mesh == g->mesh()) group = &gr;
    if (!group) {
      DT_CHECK(groups.empty() || g->mesh().world() == groups.front().mesh.world(), op,
               ": the gradient of parameter ", i, " lives on another world than that of parameter ",
               groups.front().first_param, "; one norm is taken over one world");
      groups.push_back({g->mesh(), mask, {}, i});
      group = &groups.back();
      for (const auto& [rank, t] : g->local().shards())
        group->local.emplace_back(rank, 0.0);
    }
    size_t k = 0;
    for (const auto& [rank, t] : g->local().shards()) {
      double& acc = group->local[k++].second;
      acc = g->dtype() == DType::Float64 ? local_accumulate<double>(t, norm_type, acc)
                                         : local_accumulate<float>(t, norm_type, acc);
    }
    if (grads_out) grads_out->emplace_back(i, *g);
  }
  if (groups.empty()) return 0;
  const std::vector<double> values = group_values(groups, inf, op);
  if (groups.front().mesh.world().is_shape_only()) return NAN;  // no values, no norm
  double total = 0;
  for (double value : values) {
    if (inf)
      total = (value > total || std::isnan(value)) ? value : total;
    else
      total += value;
  }
  if (inf) return total;
  if (norm_type == 2) return std::sqrt(total);
  if (norm_type == 1) return total;
  return std::pow(total, 1.0 / norm_type);
}

template <class T>
Tensor scaled(const Tensor& shard, double coef) {
  const Tensor c = shard.contiguous();
  Tensor out = c.new_empty(c.shape(), c.dtype());
  if (c.is_meta()) return out;
  const int64_t n = c.numel();
  if (n == 0) return out;
  const T k = static_cast<T>(coef);
  const T* x = c.data_ptr<T>();
  T* y = out.data_ptr<T>();
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * k;
  return out;
}

}  // namespace

double total_grad_norm(const std::vector<DTensor>& params, double norm_type) {
  return grad_norm(params, norm_type, false, nullptr, "total_grad_norm");
}

double clip_grad_norm_(const std::vector<DTensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  std::vector<std::pair<size_t, DTensor>> grads;
  const double total = grad_norm(params, norm_type, true, &grads, "clip_grad_norm_");
  // A shape-only world knows no norm (NaN): it takes the gradients as
  // scaled, their new memory counted, the larger of the two cases.
  const bool shapes = !grads.empty() && grads.front().second.mesh().world().is_shape_only();
  DT_CHECK(!error_if_nonfinite || shapes || std::isfinite(total), "clip_grad_norm_: the total norm of order ",
           norm_type, " of the gradients of ", grads.size(),
           " parameters is non-finite (", total,
           "), so it cannot be clipped; pass error_if_nonfinite = false to clip anyway");
  const double coef = max_norm / (total + 1e-6);
  // PyTorch clamps the coefficient to 1; a nan norm scales by nan as it does.
  if (coef >= 1 && !shapes) return total;
  for (auto& [i, g] : grads) {
    LocalTensor local = g.local().map([&](int, const Tensor& t) {
      return g.dtype() == DType::Float64 ? scaled<double>(t, coef) : scaled<float>(t, coef);
    });
    DTensor alias = params[i];
    alias.set_grad(DTensor(g.spec(), std::move(local)));
  }
  return total;
}

}  // namespace dtensor::optim
