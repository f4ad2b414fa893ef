// Gradient checks for tests of autograd: analytic gradients (backward())
// against central finite differences of the full tensors, and the
// gradients of a sharded computation against those of the same
// computation on replicated inputs. Every rank of a world runs the same
// calls (they are collectives), so the helpers work in both worlds.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "debug/verify.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"

namespace dtensor::testing {

using GradFn = std::function<DTensor(const std::vector<DTensor>&)>;

// The meshes gradient checks run on: 1-3 dims, up to 16 ranks, those that
// fit a world of `world_size` ranks.
inline std::vector<Shape> grad_meshes(int64_t world_size) {
  const std::vector<Shape> all = {{1},    {4},       {2, 2},    {2, 3},    {2, 4},    {2, 1, 2},
                                  {4, 4}, {2, 2, 2}, {3, 2, 2}, {2, 2, 4}, {2, 3, 2}, {16}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (s.product() <= world_size) out.push_back(s);
  return out;
}

struct GradCheckOptions {
  double eps = 1e-6;   // the finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
};

// Random valid placements of a tensor of `ndim` dims for a mesh of
// `mesh_ndim` dims: Shard, Replicate and (allow_partial) Partials of one
// kind or sum mixed with avg. 0-d tensors get Replicate or Partial.
inline Placements random_input_placements(std::mt19937& rng, int mesh_ndim, int64_t ndim,
                                          bool allow_partial = true) {
  if (ndim > 0 && allow_partial) return random_placement_pair(rng, mesh_ndim, ndim).first;
  Placements pl;
  for (int i = 0; i < mesh_ndim; ++i) {
    if (ndim == 0) pl.push_back(allow_partial && rng() % 3 == 0 ? Partial() : Replicate());
    else pl.push_back(random_placement(rng, ndim, false));
  }
  return pl;
}

namespace grad_detail {

// The scalar the checks differentiate: sum(f(x) * w), w a fixed random
// replicated tensor of f's output shape, so that every output element gets
// its own upstream gradient.
inline DTensor weighted_loss(const DTensor& out, uint64_t seed) {
  const Tensor w = Tensor::randn(out.shape(), seed, 0, out.dtype());
  const DTensor wd = distribute_tensor(
      w, out.mesh(), Placements(static_cast<size_t>(out.mesh().ndim()), Replicate()));
  return sum(mul(out, wd));
}

inline double value_of(const DTensor& scalar) { return scalar.full_tensor().item<double>(); }

}  // namespace grad_detail

// The leaves' gradients of sum(f(inputs) * w) as full tensors (an
// undefined Tensor for an input that requires grad but got none). Clears
// the inputs' gradients first.
inline std::vector<Tensor> full_gradients(const GradFn& f, std::vector<DTensor> inputs,
                                          uint64_t seed) {
  for (DTensor& x : inputs)
    if (x.requires_grad()) x.zero_grad();
  const DTensor loss = grad_detail::weighted_loss(f(inputs), seed);
  loss.backward();
  std::vector<Tensor> out;
  for (const DTensor& x : inputs) {
    const std::optional<DTensor> g = x.requires_grad() ? x.grad() : std::nullopt;
    out.push_back(g ? g->full_tensor() : Tensor());
  }
  return out;
}

// The elements of an input of n elements whose finite differences are
// taken: all of them in the simulated world of a Release build. Under MPI
// (one rank per process) and under the sanitizers, at most 4: the first,
// the last and two drawn from `seed`, the same on every rank. Each
// difference reruns f twice, and there a rerun is a round of collectives
// over oversubscribed processes or a ~10x slower instrumented run: on
// `mpirun -np 8` the finite differences were 2/3 of mpi_world_tests'
// time. The arithmetic they check is the same in every world and build;
// the simulated Release run checks every element, and check_matches_
// replicated still compares every element of each world's gradients.
inline bool finite_differences_sampled(const World& world) {
#if defined(__SANITIZE_ADDRESS__)
  (void)world;
  return true;
#else
  return world.held_ranks().size() < static_cast<size_t>(world.size());
#endif
}

inline std::vector<size_t> finite_difference_elements(size_t n, uint64_t seed,
                                                      const World& world) {
  if (!finite_differences_sampled(world) || n <= 4) {
    std::vector<size_t> all(n);
    std::iota(all.begin(), all.end(), size_t{0});
    return all;
  }
  std::mt19937_64 rng(seed);
  std::vector<size_t> picked = {0, n - 1};
  while (picked.size() < 4) {
    const size_t j = 1 + static_cast<size_t>(rng() % (n - 2));
    if (std::find(picked.begin(), picked.end(), j) == picked.end()) picked.push_back(j);
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

// Checks backward() of f at `inputs` (float64; those that require grad are
// checked) against central differences: each element of each input's full
// tensor (a sample under MPI and the sanitizers: finite_difference_elements)
// is moved by ±eps, the input laid out again with its placements (Partials
// split as distribute_tensor does), and the loss recomputed.
// Returns "" when every gradient matches, else what differs.
inline std::string check_gradients(const GradFn& f, const std::vector<DTensor>& inputs,
                                   uint64_t seed, const GradCheckOptions& options = {}) {
  const std::vector<Tensor> analytic = full_gradients(f, inputs, seed);
  NoGradGuard no_grad;
  // The finite differences rerun f twice per element: under DTENSOR_VERIFY
  // those reruns are not checked again (the analytic pass above is), which
  // keeps the verified run of these tests affordable.
  verify_detail::CheckScope unverified;
  std::ostringstream problems;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    const Tensor full = inputs[i].full_tensor().contiguous();
    std::vector<double> values = full.to_vector<double>();
    std::vector<DTensor> moved(inputs.begin(), inputs.end());
    auto loss_at = [&](double delta, size_t j) {
      std::vector<double> v = values;
      v[j] += delta;
      moved[i] = distribute_tensor(Tensor::from_vector(v, full.shape()), inputs[i].mesh(),
                                   inputs[i].placements());
      return grad_detail::value_of(grad_detail::weighted_loss(f(moved), seed));
    };
    const std::vector<double> got =
        analytic[i].defined() ? analytic[i].contiguous().to_vector<double>()
                              : std::vector<double>(values.size(), 0.0);
    for (const size_t j :
         finite_difference_elements(values.size(), seed + i, inputs[i].mesh().world())) {
      const double numeric = (loss_at(options.eps, j) - loss_at(-options.eps, j)) / (2 * options.eps);
      if (!(std::abs(got[j] - numeric) <= options.atol + options.rtol * std::abs(numeric))) {
        problems << "input " << i << " (" << inputs[i].spec().to_string() << ") element " << j
                 << ": backward gives " << got[j] << ", finite differences " << numeric
                 << (analytic[i].defined() ? "" : " (no gradient reached the input)") << "\n";
        break;
      }
    }
  }
  return problems.str();
}

// The gradients of f at `inputs` against those of f at the same values laid
// out Replicate on every mesh dim. Exact (tolerance 0) for data movement;
// reductions may add in another order. Returns "" or what differs.
inline std::string check_matches_replicated(const GradFn& f, const std::vector<DTensor>& inputs,
                                            uint64_t seed, double atol = 0, double rtol = 0) {
  std::vector<DTensor> replicated;
  for (const DTensor& x : inputs) {
    DTensor r = distribute_tensor(x.full_tensor(), x.mesh(),
                                  Placements(static_cast<size_t>(x.mesh().ndim()), Replicate()));
    if (x.requires_grad()) r.requires_grad_();
    replicated.push_back(r);
  }
  const std::vector<Tensor> got = full_gradients(f, inputs, seed);
  const std::vector<Tensor> want = full_gradients(f, replicated, seed);
  std::ostringstream problems;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    if (got[i].defined() != want[i].defined()) {
      problems << "input " << i << ": a gradient reached only one of the two\n";
      continue;
    }
    if (!got[i].defined()) continue;
    const std::vector<double> a = got[i].contiguous().to_vector<double>();
    const std::vector<double> b = want[i].contiguous().to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j) {
      const bool same = std::isnan(a[j]) ? std::isnan(b[j])
                                          : std::abs(a[j] - b[j]) <= atol + rtol * std::abs(b[j]);
      if (!same) {
        problems << "input " << i << " (" << inputs[i].spec().to_string() << ") element " << j
                 << ": sharded gives " << a[j] << ", replicated " << b[j] << "\n";
        break;
      }
    }
  }
  return problems.str();
}

}  // namespace dtensor::testing
