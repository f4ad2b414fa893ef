// The triangle inequality of the planner's costs (issue 41): a min-cost
// planner never plans A -> C dearer than a way through another layout B
// that it would plan itself. What holds, and is tested here on 1- to 4-d
// meshes of up to 64 ranks, uneven and empty shards, Partials and shard
// orders:
// - No plan is dearer than a local step followed by the search's path or
//   one box exchange: for every layout B one local step from the source
//   (free_layouts, plan_box.cc), cost(A -> C) <= the cheaper of B's
//   searched plan and B's exchange to C. This is the edge the planner
//   missed: R,S(1),S(1) -> S(1),S(0),S(2) on [13, 2, 13] over 2x2x2 costs
//   7.80 us through S(0),S(1),S(1), where the direct exchange costs 8.41.
// - The search is a shortest path: cost(A -> C) <= cost(A -> B) + cost(B
//   -> C) when neither leg is a box exchange and B passes through the
//   search's states (between natural ends, natural ones: planner.h).
// Outside these a box exchange into an intermediate layout or from a
// layout several local steps away, or an ordered detour between natural
// ends, can be cheaper; the planner does not search those (see
// docs/redistribute.md for what each would cost a cold plan).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "plan_check.h"
#include "redistribute/plan_internal.h"
#include "redistribute/planner.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::plan_moves_the_data;
using dtensor::testing::random_topology;
using redistribute_detail::build_plan;
using redistribute_detail::Planner;
using redistribute_detail::SearchMode;

namespace {

// Placements a redistribute from `from` may go to: each mesh dim keeps
// from's Partial about one time in three, else R or S (no new Partial),
// with random split orders.
Placements reachable(std::mt19937& rng, const Placements& from, int64_t ndim) {
  Placements to;
  for (const Placement& p : from) {
    if (p.is_partial() && rng() % 3 == 0)
      to.push_back(p);
    else
      to.push_back(dtensor::testing::random_placement(rng, ndim, false));
  }
  return dtensor::testing::with_random_orders(rng, to);
}

bool is_box_plan(const RedistributePlan& p) { return p.count(StepKind::BoxExchange) > 0; }

std::string describe(const DTensorSpec& a, const DTensorSpec& b, const DTensorSpec& c) {
  return a.mesh().to_string() + " " + to_string(a.shape()) + ": " + to_string(a.placements()) +
         " -> " + to_string(b.placements()) + " -> " + to_string(c.placements());
}

}  // namespace

TEST(PlanTriangle, TheIssueCaseGoesThroughAFreeLayout) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2});
  const DTensorSpec a(mesh, parse_placements("R,S(1),S(1)"), Shape{13, 2, 13}, DType::Float32);
  const DTensorSpec b = a.with_placements(parse_placements("S(0),S(1),S(1)"));
  const DTensorSpec c = a.with_placements(parse_placements("S(1),S(0),S(2)"));
  const RedistributePlan direct = build_plan(a, c, {});
  const RedistributePlan via = build_plan(b, c, {});
  EXPECT_EQ(build_plan(a, b, {}).cost_us, 0.0);
  EXPECT_LE(direct.cost_us, via.cost_us + 1e-12) << direct.explain() << via.explain();
  // The plan is the local step and the exchange from S(0),S(1),S(1).
  ASSERT_EQ(direct.steps.size(), 2u) << direct.explain();
  EXPECT_EQ(direct.steps[0].kind, StepKind::Local);
  EXPECT_EQ(direct.steps[1].kind, StepKind::BoxExchange);
  EXPECT_NEAR(direct.cost_us, 7.8039, 1e-4);
  EXPECT_TRUE(plan_moves_the_data(direct, a, c, 41));
}

// Random A, C; B drawn from the layouts one local step from A: the plan
// from A is never dearer than B's searched plan or B's exchange. Plans
// that took an exchange from such a layout run, and move the data right.
TEST(PlanTriangle, NoPlanIsDearerThanLocalStepsAndAnotherPlan) {
  World world = World::simulated(64);
  std::mt19937 rng(4141);
  const int iterations = dtensor::testing::property_cases(1500);
  int checked = 0, through_free = 0;
  RedistributeOptions searched_only;
  searched_only.box_exchange = false;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_planner_mesh(rng, 1 + iter % 4));
    random_topology(rng, mesh);
    const Shape shape = dtensor::testing::random_planner_shape(rng, 3);
    const int64_t ndim = static_cast<int64_t>(shape.size());
    // Partials one time in five (float32: P(avg) needs a floating dtype).
    const bool partial = iter % 5 == 0;
    const Placements pa =
        partial ? dtensor::testing::random_placement_pair(rng, mesh.ndim(), ndim).first
                : dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    const DType dtype = iter % 4 == 3 && !partial ? DType::Int64 : DType::Float32;
    const DTensorSpec a(mesh, pa, shape, dtype);
    const DTensorSpec c = a.with_placements(reachable(rng, a.placements(), ndim));
    const std::string pair = to_string(a.placements()) + " -> " + to_string(c.placements());
    const RedistributePlan ac = build_plan(a, c, {});
    const Planner planner(a, c, {}, SearchMode::Pruned, redistribute_detail::kMaxPlanStates);
    const std::vector<Planner::FreeLayout> free = planner.free_layouts();
    ASSERT_FALSE(free.empty());
    ASSERT_EQ(free[0].placements, a.placements());
    for (int k = 0; k < 3 && free.size() > 1; ++k) {
      const Planner::FreeLayout& f = free[1 + rng() % (free.size() - 1)];
      const DTensorSpec b = a.with_placements(f.placements);
      const RedistributePlan bc = build_plan(b, c, searched_only);
      double via = bc.cost_us;
      const auto box = redistribute_detail::box_exchange_step(b, c, mesh.topology().base_us);
      if (box) {
        via = std::min(via, box->cost_us);
        // The floor that skips every free layout's exchange at once holds
        // for this one's.
        EXPECT_LE(planner.box_exchange_floor(a, 1e300, true), box->cost_us) << pair;
      }
      EXPECT_LE(ac.cost_us, via + 1e-9 * std::max(1.0, via)) << describe(a, b, c) << "\n"
                                                             << ac.explain() << bc.explain();
      ++checked;
    }
    const bool free_exchange = is_box_plan(ac) && ac.steps.size() > 1;
    through_free += free_exchange;
    // Small ones run (planner shapes reach 4096^4 elements).
    if (free_exchange && shape.product() <= (1 << 16) && a.dtype() == DType::Float32) {
      EXPECT_TRUE(plan_moves_the_data(ac, a, c, static_cast<uint64_t>(iter))) << ac.explain();
    }
  }
  EXPECT_GT(checked, iterations / 2);
  EXPECT_GT(through_free, 5);
}

// Random triples whose legs are searched paths (no box exchange), with
// Partials kept along the way: the plan from A to C is no dearer than the
// two legs. Triples outside the search's graph (a leg with a box exchange,
// an ordered B between natural A and C) are left out and counted.
TEST(PlanTriangle, TheSearchIsAShortestPath) {
  World world = World::simulated(64);
  std::mt19937 rng(1729);
  const int iterations = dtensor::testing::property_cases(1500);
  int checked = 0, left_out = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_planner_mesh(rng, 1 + iter % 4));
    random_topology(rng, mesh);
    const Shape shape = dtensor::testing::random_planner_shape(rng, 3);
    const int64_t ndim = static_cast<int64_t>(shape.size());
    const Placements pa = dtensor::testing::random_placement_pair(rng, mesh.ndim(), ndim).first;
    const DTensorSpec a(mesh, dtensor::testing::with_random_orders(rng, pa), shape, DType::Float32);
    const DTensorSpec b = a.with_placements(reachable(rng, a.placements(), ndim));
    const DTensorSpec c = a.with_placements(reachable(rng, b.placements(), ndim));
    const RedistributePlan ab = build_plan(a, b, {}), bc = build_plan(b, c, {});
    const bool ordered_detour = has_shard_order(b.placements()) &&
                                !has_shard_order(a.placements()) &&
                                !has_shard_order(c.placements());
    if (is_box_plan(ab) || is_box_plan(bc) || ordered_detour) {
      ++left_out;
      continue;
    }
    const RedistributePlan ac = build_plan(a, c, {});
    const double legs = ab.cost_us + bc.cost_us;
    EXPECT_LE(ac.cost_us, legs + 1e-9 * std::max(1.0, legs))
        << describe(a, b, c) << "\n"
        << ac.explain() << ab.explain() << bc.explain();
    ++checked;
  }
  EXPECT_GT(checked, iterations / 2) << left_out << " left out";
}
