// The planner with shard orders (spec.h): the FSDP-over-TP gather is one
// all_gather, a mesh dim that is not last in its dim's split order is never
// gathered in place, and random ordered layouts plan correctly (every plan
// also passes the plan check) with the search never costlier than the
// per-dim baseline.
#include <gtest/gtest.h>

#include <random>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "redistribute/plan_internal.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;

namespace {

std::shared_ptr<const RedistributePlan> plan_of_shard_order_plan(const DeviceMesh& mesh, const Shape& shape,
                                                const char* from, const char* to,
                                                RedistributeOptions options = {}) {
  const DTensorSpec s(mesh, parse_placements(from), shape);
  return plan_redistribute(s, s.with_placements(parse_placements(to)), options);
}

}  // namespace

TEST(ShardOrderPlan, GatheringTheLastSplitterIsOneAllGather) {
  DeviceMesh mesh(World::simulated(4), {2, 2}, {"dp", "tp"});
  auto p = plan_of_shard_order_plan(mesh, {8, 4}, "S(0)[1],S(0)[0]", "R,S(0)");
  EXPECT_EQ(p->num_collectives(), 1) << p->explain();
  EXPECT_EQ(p->count(StepKind::AllGather), 1) << p->explain();
  ASSERT_EQ(p->steps.size(), 1u);
  EXPECT_EQ(p->steps[0].mesh_dims, DimVector{0});
  // Natural order: gathering mesh dim 0 in place is not allowed (one
  // collective only when merged over the flattened dp_tp group).
  RedistributeOptions unmerged;
  unmerged.merge = false;
  auto q = plan_of_shard_order_plan(mesh, {8, 4}, "S(0),S(0)", "R,S(0)", unmerged);
  EXPECT_GE(q->num_collectives(), 2) << q->explain();
  // Sharding again over dp (FSDP on a TP shard) is a local chunk.
  auto back = plan_of_shard_order_plan(mesh, {8, 4}, "R,S(0)", "S(0)[1],S(0)[0]");
  EXPECT_EQ(back->num_collectives(), 0) << back->explain();
  // Orders show in the plan's text.
  EXPECT_NE(back->explain().find("S(0)[1]"), std::string::npos) << back->explain();
}

TEST(ShardOrderPlan, GatheringAnEarlierSplitterMovesTheLaterOnesFirst) {
  DeviceMesh mesh(World::simulated(8), {2, 2, 2});
  for (const char* from :
       {"S(0)[1],S(0)[0],R", "S(0)[2],S(0)[0],S(0)[1]", "S(0)[0],S(0)[2],S(0)[1]"})
    for (const char* to :
         {"S(0),R,R", "R,R,S(0)", "S(1),S(0),R", "S(0),S(0),S(0)", "R,S(0)[1],S(0)[0]"}) {
      for (bool search : {true, false}) {
        RedistributeOptions o;
        o.search = search;
        DTensor x = distribute_tensor(int_valued({13, 5}, 1), mesh, parse_placements(from));
        const DTensor y = x.redistribute(parse_placements(to), o);
        EXPECT_TRUE(equal(y.full_tensor(), int_valued({13, 5}, 1)))
            << from << " -> " << to << " search " << search;
      }
    }
}

// Random meshes of 1-4 dims up to 64 ranks, uneven and empty shards,
// Partial sources, orders on both ends: plans are correct (the plan check
// replays every step), the search never costs more than the per-dim path,
// and both move the data right.
TEST(ShardOrderPlan, RandomOrderedPlans) {
  World world = World::simulated(64);
  std::mt19937 rng(5150);
  const int iterations = dtensor::testing::property_cases(200);
  for (int iter = 0; iter < iterations; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    auto [from, to] = dtensor::testing::random_placement_pair(rng, mesh.ndim(),
                                                              static_cast<int64_t>(shape.size()));
    from = dtensor::testing::with_random_orders(rng, from);
    to = dtensor::testing::with_random_orders(rng, to);
    const Tensor x = int_valued(shape, iter);
    const DTensor d = make_dtensor(x, mesh, from, iter);
    const DTensorSpec target = d.spec().with_placements(to);
    const std::string what = mesh.to_string() + " " + to_string(d.placements()) + " -> " +
                             to_string(target.placements()) + " shape " + to_string(shape);
    auto plan = plan_redistribute(d.spec(), target);
    RedistributeOptions baseline;
    baseline.search = false;
    baseline.merge = false;
    auto base = plan_redistribute(d.spec(), target, baseline);
    ASSERT_LE(plan->cost_us, base->cost_us + 1e-9) << what << "\n" << plan->explain()
                                                  << base->explain();
    ASSERT_TRUE(equal(d.redistribute(to).full_tensor(), x)) << what << "\n" << plan->explain();
    ASSERT_TRUE(equal(d.redistribute(to, baseline).full_tensor(), x))
        << what << "\n" << base->explain();
  }
}

// A step whose target placements claim an order the collective does not
// produce is refused by the plan check.
TEST(ShardOrderPlan, TheCheckRefusesAWrongOrder) {
  DeviceMesh mesh(World::simulated(4), {2, 2});
  const DTensorSpec from(mesh, parse_placements("R,S(0)"), {8, 4});
  const DTensorSpec to(mesh, parse_placements("S(0),S(0)"), {8, 4});
  RedistributePlan plan{from, to, {}, 0, {}, {}};
  RedistributeStep s;
  s.kind = StepKind::Local;
  s.mesh_dims = DimVector{0};
  s.from = Placements{Replicate()};
  s.to = Placements{Shard(0)};  // a local chunk splits last: S(0)[1],S(0)[0], not S(0),S(0)
  s.group_size = 2;
  s.tensor_dim = 0;
  plan.steps.push_back(s);
  const std::string err = dtensor::testing::error_of(
      [&] { dtensor::redistribute_detail::check_plan(plan); });
  EXPECT_NE(err.find("fails its check at step 1"), std::string::npos) << err;
}
