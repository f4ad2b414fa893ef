// Gradients through redistribute and from_local on every world (see
// world_util.h), with PyTorch's placement rules: redistribute's gradient
// goes back to the source placements (a Partial source gets Replicate),
// a no-op has a no-op backward, grad_placements override; from_local's
// leaf gets its gradient in its own placements (Partial as Replicate).
#include <gtest/gtest.h>

#include <random>

#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::make_dtensor;

namespace {

class AutogradRedistributeTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

Placements replicate_redist(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

Placements partial_as_replicate(Placements p) {
  for (Placement& q : p)
    if (q.is_partial()) q = Replicate();
  return p;
}

}  // namespace

// Random source and target layouts on meshes of 1-4 dims up to 64 ranks,
// uneven and empty shards, every Partial kind: the gradient of
// sum(redistribute(x) * w) is exactly w, laid out as the source (Partial
// as Replicate), and the backward of the same redistribution with explicit
// grad_placements lands there.
TEST_F(AutogradRedistributeTest, GradientGoesBackToTheSourcePlacements) {
  std::mt19937 rng(99);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const int cases = dtensor::testing::property_cases(200);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape ms = meshes[static_cast<size_t>(iter) % meshes.size()];
    DeviceMesh mesh(world, ms);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    auto [from, to] = dtensor::testing::random_placement_pair(rng, mesh.ndim(),
                                                              static_cast<int64_t>(shape.size()));
    const Placements explicit_grad = dtensor::testing::random_input_placements(
        rng, mesh.ndim(), static_cast<int64_t>(shape.size()), /*allow_partial=*/false);
    const bool use_explicit = rng() % 3 == 0;
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = mesh.to_string() + " " + to_string(from) + " -> " +
                              to_string(to) + " shape " + to_string(shape);
    DTensor x = make_dtensor(dtensor::testing::int_valued(shape, iter).to(DType::Float64), mesh,
                             from, iter);
    x.requires_grad_();
    RedistributeOptions options;
    if (use_explicit) options.grad_placements = explicit_grad;
    const DTensor y = x.redistribute(to, options);
    const Tensor w = dtensor::testing::int_valued(shape, 1000 + iter).to(DType::Float64);
    sum(mul(y, distribute_tensor(w, mesh, replicate_redist(mesh)))).backward();
    ASSERT_TRUE(x.grad().has_value()) << where;
    EXPECT_TRUE(equal(x.grad()->full_tensor(), w)) << where;
    if (from == to && !use_explicit) {
      EXPECT_TRUE(y.is_leaf()) << where << ": a no-op redistribute is the tensor itself";
    } else {
      EXPECT_EQ(x.grad()->placements(), use_explicit ? explicit_grad : partial_as_replicate(from))
          << where;
    }
  }
}

// Backward never turns a Replicate gradient into a Partial: P -> R forward
// (an all_reduce) has a backward with no collective at all.
TEST_F(AutogradRedistributeTest, PartialToReplicateBackwardMovesNothing) {
  for (const Shape& ms : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;
    DTensor x = make_dtensor(Tensor::ones({5, 3}, DType::Float64), mesh,
                             Placements(static_cast<size_t>(mesh.ndim()), Partial()), 1);
    x.requires_grad_();
    const DTensor loss = sum(x.redistribute(replicate_redist(mesh)));
    CommDebugMode comm;
    loss.backward();
    EXPECT_EQ(comm.total_count(), 0) << mesh.to_string() << "\n" << comm.table();
    EXPECT_EQ(x.grad()->placements(), replicate_redist(mesh));
    EXPECT_TRUE(equal(x.grad()->full_tensor(), Tensor::ones({5, 3}, DType::Float64)));
  }
}

// A no-op redistribute returns the tensor itself, so its backward is a
// no-op; with grad_placements it is recorded and moves the gradient.
TEST_F(AutogradRedistributeTest, NoOpRedistributeHasANoOpBackward) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = distribute_tensor(Tensor::ones({4, 4}, DType::Float64), mesh, {Shard(0), Replicate()});
  x.requires_grad_();
  const DTensor same = x.redistribute({Shard(0), Replicate()});
  EXPECT_TRUE(same.is_leaf());
  RedistributeOptions options;
  options.grad_placements = Placements{Replicate(), Replicate()};
  const DTensor moved = x.redistribute({Shard(0), Replicate()}, options);
  EXPECT_STREQ(moved.grad_fn_name(), "redistribute");
  sum(moved).backward();
  EXPECT_EQ(x.grad()->placements(), (Placements{Replicate(), Replicate()}));
}

// from_local's leaf: Shard stays Shard, Replicate stays Replicate (an
// all_reduce when the gradient arrives Partial), Partial becomes
// Replicate; grad_placements override. grad().local() is the gradient of
// the shards given.
TEST_F(AutogradRedistributeTest, FromLocalLeafGetsItsGradientInItsOwnPlacements) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  const Tensor full = dtensor::testing::int_valued({4, 6}, 3).to(DType::Float64);
  const DTensor w = distribute_tensor(full, mesh, {Shard(0)});
  // A replicated row times a row-sharded matrix (broadcasting): the
  // gradient is a column sum over the sharded rows, Partial(sum), and the
  // leaf's Replicate placement all-reduces it.
  FromLocalOptions grad_on;
  grad_on.requires_grad = true;
  DTensor x = from_local([&](int) { return Tensor::ones({6}, DType::Float64); }, mesh,
                         {Replicate()}, grad_on);
  EXPECT_TRUE(x.requires_grad());
  const DTensor loss = sum(mul(x, w));
  {
    CommDebugMode comm;
    loss.backward();
    EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 1) << comm.table();
    EXPECT_EQ(comm.total_count(), 1) << comm.table();
  }
  EXPECT_EQ(x.grad()->placements(), (Placements{Replicate()}));
  EXPECT_LE(max_abs_diff(x.grad()->full_tensor(), sum(full, {0})), 1e-12);
  // Partial -> Replicate; explicit grad_placements -> those.
  FromLocalOptions partial = grad_on;
  DTensor p = from_local([&](int) { return Tensor::ones({3}, DType::Float64); }, mesh,
                         {Partial()}, partial);
  sum(p).backward();
  EXPECT_EQ(p.grad()->placements(), (Placements{Replicate()}));
  FromLocalOptions sharded_grad = grad_on;
  sharded_grad.grad_placements = Placements{Shard(0)};
  DTensor s = from_local([&](int) { return Tensor::ones({8}, DType::Float64); }, mesh,
                         {Replicate()}, sharded_grad);
  sum(s).backward();
  EXPECT_EQ(s.grad()->placements(), (Placements{Shard(0)}));
  EXPECT_TRUE(equal(s.grad()->full_tensor(), Tensor::ones({8}, DType::Float64)));
}
