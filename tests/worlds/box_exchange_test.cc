// The box exchange step on every world (see world_util.h): under MPI it is
// one MPI_Alltoallw of subarray datatypes per rank, and every shard must
// come out as in the simulated world, which is the single-process tensor's
// box. The step is run directly (not only when the planner picks it) on
// random S/R layout pairs with shard orders, uneven and empty shards.
#include <gtest/gtest.h>

#include <random>

#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "redistribute/plan_internal.h"
#include "redistribute/transforms.h"
#include "worlds/world_util.h"

using namespace dtensor;
using namespace dtensor::redistribute_detail;

using dtensor::testing::random_shard_or_replicate;

namespace {

class BoxExchangeWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// This process's shards of `out` are the boxes of `full` the layout gives.
void expect_own_shards(const LocalTensor& out, const DTensorSpec& spec, const Tensor& full,
                       const std::string& what) {
  for (const auto& [rank, t] : out.shards()) {
    const std::optional<ShardExtent> e = spec.extent_of_rank(rank);
    if (!e) continue;
    Tensor want = full;
    for (int64_t d = 0; d < full.dim(); ++d)
      want = want.narrow(d, std::min(e->global_offset[d], full.shape()[d]), e->local_shape[d]);
    EXPECT_TRUE(equal(t, want)) << what << " rank " << rank;
  }
}

}  // namespace

TEST_F(BoxExchangeWorldTest, RandomLayoutPairsMatchTheFullTensor) {
  std::mt19937 rng(3818);
  for (const Shape& mesh_shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, mesh_shape);
    for (int iter = 0; iter < 6; ++iter) {
      const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
      const int64_t nd = static_cast<int64_t>(shape.size());
      const Placements from = random_shard_or_replicate(rng, mesh.ndim(), nd);
      const Placements to = random_shard_or_replicate(rng, mesh.ndim(), nd);
      if (!dtensor::testing::takes_part(mesh)) continue;  // after drawing, as every rank
      const Tensor x = dtensor::testing::int_valued(shape, iter).to(DType::Float32);
      const DTensor d = distribute_tensor(x, mesh, from);
      const DTensorSpec b = d.spec().with_placements(to);
      std::optional<RedistributeStep> step = box_exchange_step(d.spec(), b, 6.6);
      if (!step) continue;
      RedistributePlan plan{d.spec(), b, {*step}, step->cost_us, {}, {}};
      const std::string what = plan.explain();
      check_plan(plan);
      const LocalTensor out = execute_plan(plan, d.local());
      expect_own_shards(out, b, x, what);
      EXPECT_TRUE(equal(DTensor(b, out).full_tensor(), x)) << what;
    }
  }
}

// What the planner picks for the transpose of issue 18: one box exchange.
TEST_F(BoxExchangeWorldTest, TransposeIsOneBoxExchange) {
  if (world.size() < 4) GTEST_SKIP();
  DeviceMesh mesh(world, Shape{2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor x = dtensor::testing::int_valued({13, 6, 3}, 4).to(DType::Float32);
  const DTensor d = distribute_tensor(x, mesh, parse_placements("S(0),S(1)"));
  CommDebugMode comm;
  const DTensor r = d.redistribute(parse_placements("S(1),S(0)"));
  EXPECT_EQ(comm.count(CollectiveKind::BoxExchange), 1) << comm.table();
  EXPECT_EQ(comm.total_count(), 1) << comm.table();
  expect_own_shards(r.local(), r.spec(), x, "transpose");
  EXPECT_TRUE(equal(r.full_tensor(), x));
}
