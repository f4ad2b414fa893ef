// The structural ops on DTensors (flip, roll, cumprod, argsort, diagonal,
// nonzero, std, max / min along a dim, outer, dot) on every world (see
// world_util.h):
//  - full_tensor() of the op equals the plain op on the full tensor, on
//    random meshes of 1-4 dims, random shapes with uneven and empty shards,
//    random placements with every Partial kind (integer-valued data: exact);
//  - the layouts the rules promise to keep run no collective;
//  - gradients against finite differences and against the replicated
//    computation.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

class StructuralWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

void expect_same_structural(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(equal(got, want)) << what << "\n" << got << "\n" << want;
}

TEST_F(StructuralWorldTest, MatchesThePlainOps) {
  std::mt19937 rng(4343);
  const int cases = dtensor::testing::property_cases(240);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh_shape.product());
    const int64_t nd = static_cast<int64_t>(shape.size());
    const Placements pl = dtensor::testing::random_placement_pair(rng, mesh.ndim(), nd).first;
    const int op = iter % 7;
    const int64_t dim =
        static_cast<int64_t>(rng() % static_cast<unsigned>(std::max<int64_t>(nd, 1)));
    const int64_t other = nd > 1 ? (dim + 1) % nd : dim;
    const int64_t shift = static_cast<int64_t>(rng() % 11) - 5;
    const DimVector flipped = nd > 1 ? DimVector{dim, other} : DimVector{dim};
    if (!dtensor::testing::takes_part(mesh)) continue;
    // cumprod of values in [-9, 9] overflows float32's exact integers
    // beyond 7 factors: smaller values there.
    Tensor full = dtensor::testing::int_valued(shape, iter);
    if (op == 2) full = clamp(full, -2, 2);
    const DTensor x = dtensor::testing::make_dtensor(full, mesh, pl, iter + 1);
    const std::string what = "mesh " + mesh.to_string() + " " + x.spec().to_string() + " op " +
                             std::to_string(op) + " dim " + std::to_string(dim);
    switch (op) {
      case 0:
        expect_same_structural(flip(x, flipped).full_tensor(), flip(full, flipped), what);
        break;
      case 1:
        expect_same_structural(roll(x, {shift}, {dim}).full_tensor(), roll(full, {shift}, {dim}),
                               what);
        expect_same_structural(roll(x, {shift}).full_tensor(), roll(full, {shift}), what);
        break;
      case 2:
        if (nd > 0 && shape[dim] > 7) break;
        expect_same_structural(cumprod(x, dim).full_tensor(), cumprod(full, dim), what);
        break;
      case 3:
        if (nd < 2) break;
        expect_same_structural(diagonal(x, shift % 3, dim, other).full_tensor(),
                               diagonal(full, shift % 3, dim, other).contiguous(), what);
        break;
      case 4: {
        if (nd > 0 && shape[dim] == 0) break;
        const auto [v, i] = max(x, dim, shift > 0);
        const auto [wv, wi] = max(full, dim, shift > 0);
        expect_same_structural(v.full_tensor(), wv, what);
        expect_same_structural(i.full_tensor(), wi, what);
        break;
      }
      case 5: {
        // Every rank holds the whole (count, ndim) result: small inputs only.
        if (shape.product() > 4096) break;
        const DTensor got = nonzero(x);
        EXPECT_TRUE(got.spec().is_replicated()) << what;
        expect_same_structural(got.full_tensor(), nonzero(full), what);
        break;
      }
      default:
        expect_same_structural(argsort(x, dim, shift > 0).full_tensor(),
                               argsort(full, dim, shift > 0), what);
        break;
    }
  }
}

TEST_F(StructuralWorldTest, LayoutsThatNeedNoCommunication) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor full = dtensor::testing::int_valued({5, 4, 3}, 1);
  const DTensor x = distribute_tensor(full, mesh, {Shard(0), Shard(2)});
  const Tensor v = dtensor::testing::int_valued({5}, 2);
  const DTensor a = distribute_tensor(v, mesh, {Shard(0), Replicate()});
  const DTensor y = distribute_tensor(full, mesh, {Shard(2), Replicate()});
  const DTensor r = distribute_tensor(v, mesh, {Replicate(), Replicate()});
  CommDebugMode comm;
  EXPECT_EQ(flip(x, {1}).placements(), Placements({Shard(0), Shard(2)}));
  EXPECT_EQ(roll(x, {2}, {1}).placements(), Placements({Shard(0), Shard(2)}));
  EXPECT_EQ(cumprod(x, 1).placements(), Placements({Shard(0), Shard(2)}));
  EXPECT_EQ(diagonal(y, 0, 0, 1).placements(), Placements({Shard(0), Replicate()}));
  EXPECT_EQ(max(x, 1).values.placements(), Placements({Shard(0), Shard(1)}));
  EXPECT_EQ(dot(a, a).placements(), Placements({Partial(ReduceOp::Sum), Replicate()}));
  EXPECT_EQ(outer(a, r).placements(), Placements({Shard(0), Replicate()}));
  EXPECT_EQ(comm.total_count(), 0) << comm.table();
}

// Shapes of 1-3 dims, sizes 1-4, at most 36 elements (finite differences
// run two forwards per element).
Shape structural_grad_shape(std::mt19937& rng, int min_ndim) {
  for (;;) {
    Shape s;
    const int nd = min_ndim + static_cast<int>(rng() % static_cast<unsigned>(4 - min_ndim));
    for (int i = 0; i < nd; ++i) s.push_back(1 + rng() % 4);
    if (s.product() <= 36) return s;
  }
}

TEST_F(StructuralWorldTest, Gradients) {
  std::mt19937 rng(909);
  const int cases = dtensor::testing::property_cases(2);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      for (int op = 0; op < 6; ++op) {
        const Shape shape = structural_grad_shape(rng, op == 3 ? 2 : 1);
        const int64_t nd = static_cast<int64_t>(shape.size());
        const int64_t dim = static_cast<int64_t>(rng() % static_cast<unsigned>(nd));
        const int64_t other = nd > 1 ? (dim + 1) % nd : dim;
        const Placements pl = dtensor::testing::random_input_placements(rng, mesh.ndim(), nd);
        if (!dtensor::testing::takes_part(mesh)) continue;
        // randn: distinct values, so max is differentiable; a zero for cumprod.
        Tensor full = Tensor::randn(shape, 20 + k, 0, DType::Float64);
        if (op == 2) full.view({full.numel()}).narrow(0, 0, 1).fill_(0);
        DTensor x = dtensor::testing::make_dtensor(full, mesh, pl, 5);
        x.requires_grad_();
        // A dim of one element with correction 1 gives NaN (both ways).
        const int64_t correction = shape[dim] > 1 ? 1 : 0;
        dtensor::testing::GradFn f;
        switch (op) {
          case 0:
            f = [&](const std::vector<DTensor>& in) { return flip(in[0], {dim}); };
            break;
          case 1:
            f = [&](const std::vector<DTensor>& in) { return roll(in[0], {2}, {dim}); };
            break;
          case 2:
            f = [&](const std::vector<DTensor>& in) { return cumprod(in[0], dim); };
            break;
          case 3:
            f = [&](const std::vector<DTensor>& in) { return diagonal(in[0], 0, dim, other); };
            break;
          case 4:
            f = [&](const std::vector<DTensor>& in) {
              return dtensor::std(in[0], {dim}, correction);
            };
            break;
          default:
            f = [&](const std::vector<DTensor>& in) { return max(in[0], dim).values; };
            break;
        }
        const std::string what = "op " + std::to_string(op) + " dim " + std::to_string(dim) +
                                 " mesh " + mesh.to_string() + " " + x.spec().to_string();
        EXPECT_EQ(dtensor::testing::check_gradients(f, {x}, 7 + k), "") << what;
        EXPECT_EQ(dtensor::testing::check_matches_replicated(f, {x}, 7 + k, 1e-12, 1e-12), "")
            << what;
      }
    }
  }
}

}  // namespace
