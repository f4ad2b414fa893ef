// The box exchange step (src/redistribute/box_exchange.cc): one
// all_to_allv of boxes between any two layouts without Partial. Every test
// runs the step itself (not only when the planner picks it), checks the
// plan check accepts it, and compares every shard with the single-process
// tensor. The MPI side runs in tests/worlds/box_exchange_test.cc.
#include <gtest/gtest.h>

#include <random>

#include "comm/backend.h"
#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "redistribute/plan_internal.h"
#include "redistribute/transforms.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::redistribute_detail;
using dtensor::testing::int_valued;

using dtensor::testing::random_shard_or_replicate;

namespace {

// The one-step plan of a box exchange from a to b (nullopt: nothing moves).
std::optional<RedistributePlan> box_plan(const DTensorSpec& a, const DTensorSpec& b) {
  std::optional<RedistributeStep> step = box_exchange_step(a, b, 6.6);
  if (!step) return std::nullopt;
  RedistributePlan plan{a, b, {*step}, step->cost_us, {}, {}};
  plan.counts[static_cast<int>(StepKind::BoxExchange)] = 1;
  plan.output_bytes = static_cast<double>(b.global_bytes());
  plan.peak_bytes = step->peak_bytes;
  return plan;
}

// Every shard of `out` is the box of `full` its layout gives its rank.
void expect_shards(const LocalTensor& out, const DTensorSpec& spec, const Tensor& full,
                   const std::string& what) {
  for (int rank : spec.mesh().ranks()) {
    const ShardExtent e = *spec.extent_of_rank(rank);
    Tensor want = full;
    for (int64_t d = 0; d < full.dim(); ++d)
      want = want.narrow(d, std::min(e.global_offset[d], full.shape()[d]), e.local_shape[d]);
    ASSERT_TRUE(out.holds(rank)) << what;
    EXPECT_TRUE(equal(out.shard(rank), want)) << what << " rank " << rank;
  }
}

}  // namespace

// Random pairs of S/R layouts (shard orders included) on meshes of 1-4 dims
// up to 64 ranks, shapes with uneven and empty shards, several dtypes: the
// step passes the plan check and every shard holds exactly its box.
TEST(BoxExchange, RandomLayoutPairsMoveEveryBit) {
  World world = World::simulated(64);
  std::mt19937 rng(2818);
  const int iterations = dtensor::testing::property_cases(300);
  int ran = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    const int64_t nd = static_cast<int64_t>(shape.size());
    const Placements from = random_shard_or_replicate(rng, mesh.ndim(), nd);
    const Placements to = random_shard_or_replicate(rng, mesh.ndim(), nd);
    const DType dtype = iter % 3 == 0 ? DType::Int64 : iter % 3 == 1 ? DType::Float32 : DType::Bool;
    const Tensor v = int_valued(shape, iter);
    const Tensor x = dtype == DType::Bool ? gt(v, 0.0) : v.to(dtype);
    const DTensor d = distribute_tensor(x, mesh, from);
    const DTensorSpec b = d.spec().with_placements(to);
    const std::string what = mesh.to_string() + " " + to_string(d.spec().placements()) + " -> " +
                             to_string(b.placements()) + " of " + ::testing::PrintToString(shape);
    const std::optional<RedistributePlan> plan = box_plan(d.spec(), b);
    if (!plan) {
      EXPECT_EQ(d.spec().placements(), b.placements()) << what;
      continue;
    }
    ASSERT_NO_THROW(check_plan(*plan)) << what << "\n" << plan->explain();
    CommDebugMode comm;
    const LocalTensor out = execute_plan(*plan, d.local());
    EXPECT_EQ(comm.count(CollectiveKind::BoxExchange), plan->steps[0].group_size > 1 ? 1 : 0)
        << what;
    expect_shards(out, b, x, what);
    ++ran;
  }
  EXPECT_GT(ran, iterations / 2);
}

// Whatever the planner picks between S/R layouts, with the box exchange as
// a candidate: the same bits as the source, and never costlier or heavier
// than the search's own plan of one-mesh-dim steps.
TEST(BoxExchange, PlannedRedistributionsKeepTheBits) {
  World world = World::simulated(64);
  std::mt19937 rng(1828);
  const int iterations = dtensor::testing::property_cases(200);
  int boxes = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_mesh(rng, world.size()));
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    const int64_t nd = static_cast<int64_t>(shape.size());
    const Placements from = random_shard_or_replicate(rng, mesh.ndim(), nd);
    const Placements to = random_shard_or_replicate(rng, mesh.ndim(), nd);
    const Tensor x = int_valued(shape, iter);
    const DTensor d = distribute_tensor(x, mesh, from);
    const DTensorSpec b = d.spec().with_placements(to);
    const auto plan = plan_redistribute(d.spec(), b);
    const std::string what = plan->explain();
    boxes += plan->count(StepKind::BoxExchange);
    const DTensor r = d.redistribute(to);
    expect_shards(r.local(), b, x, what);
    if (plan->count(StepKind::BoxExchange) == 0) continue;
    // The search alone (no flattened groups, so no box over several dims,
    // nor merged collectives: an upper bound of what the search finds).
    RedistributeOptions unmerged;
    unmerged.merge = false;
    const RedistributePlan searched = build_plan(d.spec(), b, unmerged);
    if (searched.count(StepKind::BoxExchange) > 0) continue;
    EXPECT_LE(plan->cost_us, searched.cost_us + 1e-9) << what << searched.explain();
    EXPECT_LE(plan->peak_bytes, plan->output_bytes + static_cast<double>(d.spec().global_bytes()))
        << what;
  }
  EXPECT_GT(boxes, 0);
}

// The target of issue 18: (S0,S1) -> (S1,S0) on 2x2 peaks at 2x its output,
// runs one collective, and the executor holds no more than that.
TEST(BoxExchange, TransposeOnTwoByTwoPeaksAtTwiceItsOutput) {
  World world = World::simulated(4);
  DeviceMesh mesh(world, {2, 2});
  for (const Shape& shape : {Shape{16, 16}, Shape{7, 5}, Shape{1, 3}, Shape{64, 8, 3}}) {
    const Tensor x = int_valued(shape, 5).to(DType::Float32);
    const DTensor d = distribute_tensor(x, mesh, parse_placements("S(0),S(1)"));
    const auto plan =
        plan_redistribute(d.spec(), d.spec().with_placements(parse_placements("S(1),S(0)")));
    ASSERT_EQ(plan->steps.size(), 1u) << plan->explain();
    EXPECT_EQ(plan->steps[0].kind, StepKind::BoxExchange) << plan->explain();
    EXPECT_LE(plan->peak_bytes, 2 * plan->output_bytes + 1e-9) << plan->explain();
    EXPECT_NE(plan->explain().find("box_exchange"), std::string::npos);
    CommDebugMode comm;
    const DTensor r = d.redistribute(parse_placements("S(1),S(0)"));
    EXPECT_EQ(comm.total_count(), 1) << comm.table();
    EXPECT_EQ(comm.count(CollectiveKind::BoxExchange), 1) << comm.table();
    EXPECT_TRUE(equal(r.full_tensor(), x)) << plan->explain();
    // Only the off-diagonal ranks swap; the diagonal ones copy locally.
    expect_shards(r.local(), r.spec(), x, plan->explain());
  }
}

// A plan of local steps (R -> S) stays local: a box exchange would be
// lighter (input + output, no chunk per step) but would make every rank
// wait for the others.
TEST(BoxExchange, LocalPlansStayLocal) {
  World world = World::simulated(4);
  DeviceMesh mesh(world, {2, 2});
  const Tensor x = int_valued({8, 8}, 2);
  const DTensor d = distribute_tensor(x, mesh, parse_placements("R,R"));
  CommDebugMode comm;
  const DTensor r = d.redistribute(parse_placements("S(0),S(1)"));
  EXPECT_EQ(comm.total_count(), 0) << comm.table();
  expect_shards(r.local(), r.spec(), x, "R,R -> S(0),S(1)");
}

// A sub-mesh's spec has one view per coordinate of the other root dims;
// the exchange runs in every view, each with its own ranks.
TEST(BoxExchange, SubMeshViewsExchangeIndependently) {
  World world = World::simulated(8);
  DeviceMesh root(world, {2, 4}, {"dp", "tp"});
  DeviceMesh tp = root["tp"];
  const Tensor x = int_valued({9, 6}, 3);
  const DTensor d = distribute_tensor(x, tp, {Shard(0)});
  const DTensorSpec b = d.spec().with_placements({Shard(1)});
  const std::optional<RedistributePlan> plan = box_plan(d.spec(), b);
  ASSERT_TRUE(plan.has_value());
  check_plan(*plan);
  const LocalTensor out = execute_plan(*plan, d.local());
  for (int rank = 0; rank < 8; ++rank) {
    const ShardExtent e = *b.extent_of_rank(rank);
    EXPECT_TRUE(equal(out.shard(rank), x.narrow(1, std::min<int64_t>(e.global_offset[1], 6),
                                                 e.local_shape[1])))
        << rank;
  }
}

// The simulated exchange copies on the thread pool from kParallelCopyBytes
// (8 MiB) on: the bits are the same on 1 and 4 threads.
TEST(BoxExchange, BitsDoNotDependOnTheThreadCount) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 4});
  const Tensor x = Tensor::rand({3000, 1025}, 11);  // 12 MiB
  const DTensor d = distribute_tensor(x, mesh, parse_placements("S(0),S(1)"));
  const DTensorSpec b = d.spec().with_placements(parse_placements("S(1),S(0)"));
  const std::optional<RedistributePlan> plan = box_plan(d.spec(), b);
  ASSERT_TRUE(plan.has_value());
  const int before = num_threads();
  set_num_threads(1);
  const LocalTensor one = execute_plan(*plan, d.local());
  set_num_threads(4);
  const LocalTensor four = execute_plan(*plan, d.local());
  set_num_threads(before);
  for (int rank = 0; rank < 8; ++rank) EXPECT_TRUE(equal(one.shard(rank), four.shard(rank)));
  expect_shards(four, b, x, "300x257 on 2x4");
}

// Bad routes are refused, naming the box and both ranks.
TEST(BoxExchange, BackendRefusesABoxThatDoesNotFit) {
  World world = World::simulated(2);
  DeviceMesh mesh(world, {2});
  const DTensor d = distribute_tensor(int_valued({4, 4}, 1), mesh, {Shard(0)});
  BoxRoutes routes;
  routes.outputs = {{0, Shape{2, 4}}, {1, Shape{2, 4}}};
  routes.moves.push_back(BoxMove{0, 1, Shape{3, 4}, Shape{0, 0}, Shape{0, 0}});
  dtensor::testing::expect_error(
      [&] { world.backend().exchange_boxes(d.local(), mesh, 0, routes); },
      {"box_exchange", "from rank 0", "to rank 1", "does not fit"});
  routes.moves[0] = BoxMove{0, 1, Shape{2, 4}, Shape{0, 0}, Shape{0, 0}};
  routes.outputs.pop_back();
  dtensor::testing::expect_error(
      [&] { world.backend().exchange_boxes(d.local(), mesh, 0, routes); },
      {"box_exchange", "rank 1", "no output shape"});
  // Ranks index tables by rank: one outside the world is refused, not read.
  routes.outputs.push_back({1, Shape{2, 4}});
  routes.moves[0] = BoxMove{5, 1, Shape{2, 4}, Shape{0, 0}, Shape{0, 0}};
  dtensor::testing::expect_error(
      [&] { world.backend().exchange_boxes(d.local(), mesh, 0, routes); },
      {"box_exchange", "sending rank 5", "not in the mesh"});
  routes.moves[0] = BoxMove{0, -1, Shape{2, 4}, Shape{0, 0}, Shape{0, 0}};
  dtensor::testing::expect_error(
      [&] { world.backend().exchange_boxes(d.local(), mesh, 0, routes); },
      {"box_exchange", "receiving rank -1", "not in the mesh"});
  routes.moves[0] = BoxMove{0, 1, Shape{2, 4}, Shape{0, 0}, Shape{0, 0}};
  routes.outputs.push_back({1, Shape{2, 4}});
  dtensor::testing::expect_error(
      [&] { world.backend().exchange_boxes(d.local(), mesh, 0, routes); },
      {"box_exchange", "output of rank 1", "listed twice"});
}
