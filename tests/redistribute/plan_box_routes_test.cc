// A planned box exchange carries its pieces (RedistributeStep::box_routes,
// src/redistribute/box_exchange.h), worked out once with the plan: they are
// the pieces of the two layouts, and running the plan with them gives the
// same shards as working them out again, on a whole mesh and on a sub-mesh
// (whose views map the same coordinates to different ranks).
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include "comm/backend.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "redistribute/box_exchange.h"
#include "redistribute/plan_internal.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::redistribute_detail;
using dtensor::testing::int_valued;

namespace {

bool same_moves(const BoxRoutes& a, const BoxRoutes& b) {
  if (a.outputs != b.outputs || a.moves.size() != b.moves.size()) return false;
  for (size_t k = 0; k < a.moves.size(); ++k) {
    const BoxMove& x = a.moves[k];
    const BoxMove& y = b.moves[k];
    if (x.from != y.from || x.to != y.to || x.size != y.size || x.from_start != y.from_start ||
        x.to_start != y.to_start)
      return false;
  }
  return true;
}

// Every shard of `out` (on the ranks of every view of spec's mesh) is the
// one `ref` holds.
void expect_same_shards(const LocalTensor& out, const LocalTensor& ref, const std::string& what) {
  ASSERT_EQ(out.shards().size(), ref.shards().size()) << what;
  for (const auto& [rank, t] : ref.shards()) {
    ASSERT_TRUE(out.holds(rank)) << what << " rank " << rank;
    EXPECT_TRUE(equal(out.shard(rank), t)) << what << " rank " << rank;
  }
}

}  // namespace

TEST(PlanBoxRoutes, PlannedBoxExchangesCarryTheirPiecesAndRunAsWorkedOutAgain) {
  World world = World::simulated(16);
  DeviceMesh root(world, {2, 2, 4}, {"a", "b", "c"});
  std::mt19937 rng(4711);
  int boxes = 0;
  for (int iter = 0; iter < dtensor::testing::property_cases(60); ++iter) {
    // Alternately the whole mesh and the sub-mesh of (b, c), which has two
    // views: the pieces name coordinates, each view its own ranks.
    const DeviceMesh mesh = iter % 2 == 0 ? root : root[{"b", "c"}];
    const Shape shape{1 + static_cast<int64_t>(rng() % 13), 1 + static_cast<int64_t>(rng() % 9)};
    const Placements from = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), 2);
    const Placements to = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), 2);
    const DTensor d = distribute_tensor(int_valued(shape, iter), mesh, from);
    const DTensorSpec target = d.spec().with_placements(to);
    const auto plan = plan_redistribute(d.spec(), target);
    const std::string what = plan->explain();
    if (plan->count(StepKind::BoxExchange) == 0) continue;
    ++boxes;
    // The exchange is the last step; local steps may come before it (a
    // free layout's exchange, plan_box.cc), and it starts where they end.
    const size_t k = plan->steps.size() - 1;
    Placements before = from;
    for (size_t j = 0; j < k; ++j) {
      ASSERT_EQ(plan->steps[j].kind, StepKind::Local) << what;
      before = replace_placements(before, plan->steps[j].mesh_dims, plan->steps[j].to);
    }
    const RedistributeStep& step = plan->steps[k];
    ASSERT_EQ(step.kind, StepKind::BoxExchange) << what;
    ASSERT_NE(step.box_routes, nullptr) << what;
    EXPECT_TRUE(same_moves(*step.box_routes, *box_routes(d.spec().with_placements(before), target)))
        << what;
    // The same plan without its pieces makes the executor work them out.
    RedistributePlan by_hand = *plan;
    by_hand.steps[k].box_routes = nullptr;
    expect_same_shards(execute_plan(*plan, d.local()), execute_plan(by_hand, d.local()), what);
    // And both are the target layout of the tensor.
    expect_same_shards(execute_plan(*plan, d.local()),
                       distribute_tensor(int_valued(shape, iter), mesh, to).local(), what);
  }
  EXPECT_GT(boxes, 0);
}

// The plan check checks the pieces the step carries, which are what runs:
// a move dropped, shifted or sent to the wrong coordinate is refused.
TEST(PlanBoxRoutes, ThePlanCheckRefusesWrongRoutes) {
  World world = World::simulated(4);
  DeviceMesh mesh(world, {2, 2});
  const DTensorSpec from(mesh, parse_placements("S(0),S(1)"), Shape{6, 5}, DType::Float32);
  const auto plan = plan_redistribute(from, from.with_placements(parse_placements("S(1),S(0)")));
  ASSERT_EQ(plan->count(StepKind::BoxExchange), 1) << plan->explain();
  ASSERT_NE(plan->steps[0].box_routes, nullptr);
  EXPECT_NO_THROW(check_plan(*plan));
  ASSERT_GT(plan->steps[0].box_routes->moves.size(), 1u);
  auto with_routes = [&](auto&& change) {
    RedistributePlan p = *plan;
    auto routes = std::make_shared<BoxRoutes>(*p.steps[0].box_routes);
    change(*routes);
    p.steps[0].box_routes = routes;
    return p;
  };
  EXPECT_THROW(check_plan(with_routes([](BoxRoutes& r) { r.moves.pop_back(); })), Error);
  EXPECT_THROW(check_plan(with_routes([](BoxRoutes& r) { r.moves[1].to_start[0] += 1; })), Error);
  EXPECT_THROW(
      check_plan(with_routes([](BoxRoutes& r) { r.moves[1].to = (r.moves[1].to + 1) % 4; })),
      Error);
  EXPECT_THROW(check_plan(with_routes([](BoxRoutes& r) { r.outputs[0].second[0] += 1; })), Error);
}

// The routes are allocated once: box_exchange.cc counts the pieces from the
// boxes' grid before it makes them (a vector grown by doubling touched
// twice its size in fresh pages). The count is exact, on uneven and empty
// shards and shard orders, on 1- to 4-d meshes; box_exchange_step_with_routes
// gives box_routes' moves.
TEST(PlanBoxRoutes, TheRoutesAreCountedBeforeTheyAreMade) {
  World world = World::simulated(64);
  std::mt19937 rng(2718);
  int checked = 0;
  for (int iter = 0; iter < dtensor::testing::property_cases(200); ++iter) {
    Shape mesh_shape;
    for (int i = 0; i < 1 + iter % 4; ++i)
      mesh_shape.push_back(1 + static_cast<int64_t>(rng() % 4));
    if (mesh_shape.product() > 64) continue;
    DeviceMesh mesh(world, mesh_shape);
    const int64_t ndim = 1 + static_cast<int64_t>(rng() % 3);
    Shape shape;
    for (int64_t d = 0; d < ndim; ++d) shape.push_back(static_cast<int64_t>(rng() % 10));
    // Shard orders on some (random_shard_or_replicate draws them).
    const Placements from = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    const Placements to = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    std::optional<DTensorSpec> a, b;
    try {
      a.emplace(mesh, from, shape, DType::Float32);
      b.emplace(a->with_placements(to));
    } catch (const Error&) {
      continue;  // orders DTensorSpec refuses
    }
    const std::string what = mesh.to_string() + " " + to_string(shape) + " " + to_string(from) +
                             " -> " + to_string(to);
    const auto routes = box_routes(*a, *b);
    EXPECT_EQ(routes->moves.capacity(), routes->moves.size()) << what;
    EXPECT_EQ(routes->moves.size(), box_pieces(*a, *b, static_cast<size_t>(-1))->size()) << what;
    const std::optional<RedistributeStep> step = box_exchange_step_with_routes(*a, *b, 6.6);
    if (!step) continue;  // nothing changes
    ASSERT_NE(step->box_routes, nullptr) << what;
    EXPECT_EQ(step->box_routes->moves.capacity(), step->box_routes->moves.size()) << what;
    EXPECT_TRUE(same_moves(*step->box_routes, *routes)) << what;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// box_exchange_step prices an exchange without visiting its pieces (per
// tensor dim counts and sums, box_exchange.cc); the planner keeps the
// routes of the winner only. On random S/R pairs (uneven and empty shards,
// shard orders, size-1 dims, 1- to 5-d meshes up to 64 ranks, uneven links,
// int64) the step is exactly the one made from the pieces: cost, bytes,
// mesh dims and their placements, group size and peak.
TEST(PlanBoxRoutes, TheExchangePricedWithoutItsPiecesIsTheVisitedOne) {
  World world = World::simulated(64);
  std::mt19937 rng(4444);
  int checked = 0, crossing = 0;
  for (int iter = 0; iter < dtensor::testing::property_cases(400); ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_planner_mesh(rng, 1 + iter % 5));
    dtensor::testing::random_topology(rng, mesh);
    const Shape shape = dtensor::testing::random_planner_shape(rng, 3);
    const int64_t ndim = static_cast<int64_t>(shape.size());
    const Placements from = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    const Placements to = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    std::optional<DTensorSpec> a, b;
    try {
      a.emplace(mesh, from, shape, iter % 4 == 3 ? DType::Int64 : DType::Float32);
      b.emplace(a->with_placements(to));
    } catch (const Error&) {
      continue;  // orders DTensorSpec refuses
    }
    const std::string what =
        mesh.to_string() + " " + to_string(shape) + " " + to_string(from) + " -> " + to_string(to);
    const std::optional<RedistributeStep> priced = box_exchange_step(*a, *b, 6.6);
    const std::optional<RedistributeStep> visited = box_exchange_step_with_routes(*a, *b, 6.6);
    ASSERT_EQ(priced.has_value(), visited.has_value()) << what;
    if (!priced) continue;
    EXPECT_EQ(priced->cost_us, visited->cost_us) << what;
    EXPECT_EQ(priced->bytes, visited->bytes) << what;
    EXPECT_EQ(priced->peak_bytes, visited->peak_bytes) << what;
    EXPECT_EQ(priced->mesh_dims, visited->mesh_dims) << what;
    EXPECT_EQ(priced->from, visited->from) << what;
    EXPECT_EQ(priced->to, visited->to) << what;
    EXPECT_EQ(priced->group_size, visited->group_size) << what;
    EXPECT_EQ(priced->box_routes, nullptr) << what;
    ++checked;
    crossing += visited->cost_us > 0;
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(crossing, 100);
}
