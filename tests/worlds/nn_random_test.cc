// NN math, embedding and dropout on random layouts, on every world (see
// world_util.h): every op against the plain op on the full tensors,
// Partials, uneven and empty shards included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::class_targets;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

class NnRandomTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

}  // namespace

// ---- random layouts ----------------------------------------------------------------

namespace {

// A placement list for an index tensor (never Partial; 0-d: replicated).
Placements index_placements_nn_random(std::mt19937& rng, int mesh_nd, int64_t ndim) {
  Placements pl;
  for (int i = 0; i < mesh_nd; ++i)
    pl.push_back(ndim == 0 ? Replicate() : dtensor::testing::random_placement(rng, ndim, false));
  return pl;
}

Placements float_placements_nn_random(std::mt19937& rng, int mesh_nd, int64_t ndim) {
  if (ndim == 0) return Placements(static_cast<size_t>(mesh_nd), Replicate());
  return dtensor::testing::random_placement_pair(rng, mesh_nd, ndim).first;
}

}  // namespace

// Every op on random layouts (Partials of float inputs included) against the
// plain op on the full tensors, on meshes 4, 2x2, 2x3 and 2x4 with shapes that
// give uneven and empty shards. The inputs are multiples of 1/8, so Partial
// pieces add up exactly; the tolerances cover the ops' own rounding (a
// summed loss is added in another order).
TEST_F(NnRandomTest, RandomLayoutsMatchThePlainOps) {
  std::mt19937 rng(2024);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const char* names[] = {"softmax",  "log_softmax",   "layer_norm", "rms_norm", "nll_loss",
                         "cross_entropy", "embedding", "dropout"};
  const int iterations = dtensor::testing::property_cases(300);
  for (int iter = 0; iter < iterations; ++iter) {
    const int op = iter % 8;
    DeviceMesh mesh(world, meshes[rng() % meshes.size()]);
    const int mnd = mesh.ndim();
    Shape shape = dtensor::testing::random_small_shape(rng);
    const int64_t nd = static_cast<int64_t>(shape.size());
    std::string what = std::string(names[op]) + " on " + mesh.to_string() + " shape " +
                       to_string(shape);
    Tensor want;
    std::optional<DTensor> got;
    // (what linear ops on Partial(sum) pieces may add to atol; layout_util.h)
    double piece_rounding = 0;
    auto dist = [&](const Tensor& t, const Placements& pl, uint64_t seed) {
      what += ' ';
      what += to_string(pl);
      piece_rounding = std::max(piece_rounding, dtensor::testing::partial_sum_rounding(t, mesh, pl));
      return make_dtensor(t, mesh, pl, seed);
    };
    double rtol = 1e-5, atol = 1e-5;
    switch (op) {
      case 0:
      case 1: {
        const int64_t dim = static_cast<int64_t>(rng() % (2 * nd)) - nd;
        const Tensor x = small_valued(shape, iter);
        const DTensor dx = dist(x, float_placements_nn_random(rng, mnd, nd), iter);
        what += " dim " + std::to_string(dim);
        want = op == 0 ? softmax(x, dim) : log_softmax(x, dim);
        got = op == 0 ? softmax(dx, dim) : log_softmax(dx, dim);
        break;
      }
      case 2:
      case 3: {
        const int64_t k = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(nd, 2));
        Shape ns;
        for (int64_t i = nd - k; i < nd; ++i) ns.push_back(shape[i]);
        const Tensor x = small_valued(shape, iter);
        const DTensor dx = dist(x, float_placements_nn_random(rng, mnd, nd), iter);
        const bool with_w = rng() % 2 == 0, with_b = op == 2 && rng() % 2 == 0;
        const Tensor w = small_valued(ns, iter + 1), b = small_valued(ns, iter + 2);
        std::optional<DTensor> dw, db;
        if (with_w) dw = dist(w, float_placements_nn_random(rng, mnd, k), iter + 3);
        if (with_b) db = dist(b, float_placements_nn_random(rng, mnd, k), iter + 4);
        what += " normalized " + to_string(ns);
        if (op == 2) {
          want = layer_norm(x, ns, with_w ? w : Tensor(), with_b ? b : Tensor());
          got = layer_norm(dx, ns, dw, db);
        } else {
          want = rms_norm(x, ns, with_w ? w : Tensor(), 1e-5);
          got = rms_norm(dx, ns, dw, 1e-5);
        }
        rtol = 1e-4;
        atol = 1e-4;
        break;
      }
      case 4:
      case 5: {
        // (C), (N, C) or (N, C, d1[, d2]) with C >= 1.
        if (nd >= 2) shape[1] = 1 + shape[1] % 6;
        else shape[0] = 1 + shape[0] % 6;
        Shape ts;
        if (nd >= 2) {
          ts.push_back(shape[0]);
          for (int64_t i = 2; i < nd; ++i) ts.push_back(shape[i]);
        }
        const int64_t classes = nd >= 2 ? shape[1] : shape[0];
        const int64_t ignore = (rng() % 2 == 0) ? -100 : static_cast<int64_t>(rng() % classes);
        const Reduction red = static_cast<Reduction>(rng() % 3);
        const Tensor x = small_valued(shape, iter);
        const Tensor t = class_targets(ts, classes, ignore, iter);
        const DTensor dx = dist(x, float_placements_nn_random(rng, mnd, nd), iter);
        const DTensor dt = dist(t, index_placements_nn_random(rng, mnd, static_cast<int64_t>(ts.size())), 0);
        what += " reduction " + std::to_string(static_cast<int>(red)) + " ignore " +
                std::to_string(ignore);
        if (op == 4) {
          want = nll_loss(x, t, red, ignore);
          got = nll_loss(dx, dt, red, ignore);
        } else {
          want = cross_entropy(x, t, red, ignore);
          got = cross_entropy(dx, dt, red, ignore);
        }
        atol = 1e-4;
        break;
      }
      case 6: {
        const int64_t v = 1 + static_cast<int64_t>(rng() % 9), d = rng() % 5;
        const Tensor w = small_valued({v, d}, iter);
        Shape is = shape;
        if (is.size() > 3) is.pop_back();
        const Tensor idx = Tensor::randint(0, v, is, iter + 1);
        const DTensor dw = dist(w, float_placements_nn_random(rng, mnd, 2), iter);
        const DTensor di = dist(idx, index_placements_nn_random(rng, mnd, static_cast<int64_t>(is.size())), 0);
        want = embedding(w, idx);
        got = embedding(dw, di);
        break;
      }
      default: {
        const Tensor x = small_valued(shape, iter);
        const double p = (rng() % 3) * 0.3;
        want = x * ge(Tensor::rand(shape, iter), p) / (1 - p);
        got = dropout(dist(x, float_placements_nn_random(rng, mnd, nd), iter), p, iter);
        atol = 1e-4;
        break;
      }
    }
    for (int rank : got->local().ranks())
      ASSERT_EQ(got->to_local(rank).shape(), got->spec().extent_of_rank(rank)->local_shape)
          << what;
    if (!dtensor::testing::takes_part(mesh)) continue;  // MPI: this rank is not in the mesh
    const Tensor full = got->full_tensor();
    ASSERT_EQ(full.dtype(), want.dtype()) << what;
    ASSERT_TRUE(allclose(full, want, rtol, std::max(atol, piece_rounding), /*equal_nan=*/true))
        << what << "\n" << full << "\n" << want;
  }
}
