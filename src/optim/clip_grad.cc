// clip_grad_norm_: the norm of all gradients with one all_reduce per set of
// mesh dims the gradients are sharded over.
//
// A rank's local sum of |g|^p over its shard is part of the total exactly
// once along every mesh dim the gradient is sharded on, and repeated along
// every dim it is replicated on. So gradients sharded over the same mesh
// dims (of the same mesh) add their local sums on each rank, and one
// all_reduce over just those dims (a 1-element Partial DTensor
// on the flattened group of those dims, redistributed to Replicate) gives their
// share; replicated dims need no reduction. Sums run in a fixed order
// (parameters in order, elements in order, groups in order of first use)
// and the all_reduce's order is the backend's fixed one, so every world
// gives the same bits.
#include <cmath>

#include "dtensor/optim.h"

namespace dtensor::optim {

namespace {

struct NormGroup {
  DeviceMesh mesh;
  uint32_t sharded_dims;            // bit d: the gradients are sharded on mesh dim d
  std::vector<std::pair<int, double>> local;  // per held rank of the mesh, in rank order
};

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
  if (n == 0) return acc;
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
      groups.push_back({g->mesh(), mask, {}});
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
  double total = 0;
  NoGradGuard no_grad;
  for (const NormGroup& gr : groups) {
    if (gr.local.empty()) continue;  // this process holds no rank of that mesh
    double value;
    if (gr.sharded_dims == 0) {
      value = gr.local.front().second;  // replicated everywhere: already the total
    } else {
      // One 1-element Partial DTensor on the flattened group of the sharded
      // dims (each rank in its own group), all-reduced by one redistribute.
      std::vector<int> dims;
      for (int d = 0; d < gr.mesh.ndim(); ++d)
        if (gr.sharded_dims >> d & 1u) dims.push_back(d);
      const DeviceMesh group_mesh = gr.mesh.flatten(dims);
      LocalTensor local;
      for (const auto& [rank, v] : gr.local)
        local.set(rank, Tensor::full({1}, v, DType::Float64));
      const DTensor partial(DTensorSpec(group_mesh, {Partial(inf ? ReduceOp::Max : ReduceOp::Sum)},
                                        Shape{1}, DType::Float64),
                            std::move(local));
      const DTensor reduced = partial.redistribute({Replicate()});
      value = reduced.local().shards().front().second.item<double>();
    }
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
  Tensor out = Tensor::empty(c.shape(), c.dtype());
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
  DT_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ",
           norm_type, " of the gradients of ", grads.size(),
           " parameters is non-finite (", total,
           "), so it cannot be clipped; pass error_if_nonfinite = false to clip anyway");
  const double coef = max_norm / (total + 1e-6);
  // PyTorch clamps the coefficient to 1; a nan norm scales by nan as it does.
  if (coef >= 1) return total;
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
