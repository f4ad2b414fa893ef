// The planner's shortcuts against the work they skip (issue 18, fifth
// pass): each prune must leave the plan exactly as cheap and as light.
// - The box exchange's floor (plan_box.cc) never exceeds the exchange's
//   cost, and the planner takes the box exchange exactly when the rule of
//   prefer_box_exchange, applied to the exchange worked out in full, says so.
// - The search over one state per class of interchangeable tensor dims
//   (plan_symmetry.cc) finds plans as cheap and as light as plain Dijkstra
//   over every state, and its plans, renamed back step by step, move the
//   data right.
// - The search never moves a Partial the target keeps (plan_moves.cc):
//   plans as cheap and as light as plain Dijkstra, which does.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "plan_check.h"
#include "redistribute/plan_internal.h"
#include "redistribute/planner.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::as_cheap_and_light;
using dtensor::testing::random_topology;
using dtensor::testing::plan_moves_the_data;
using redistribute_detail::build_plan;
using redistribute_detail::Planner;
using redistribute_detail::SearchMode;

// Random S/R pairs (shard orders on some) on 2- to 5-d meshes: the floor is
// at most the cost of the exchange box_exchange_step works out, and the
// plan is the direct box exchange only when that exchange beats the
// search's plan (planned with the box exchange off) by
// prefer_box_exchange's rule; when it does, the plan is an exchange (from
// the source or from a free layout) at most as dear.
TEST(PlanPrune, BoxExchangeFloorNeverExceedsItsCostAndKeepsTheChoice) {
  World world = World::simulated(64);
  std::mt19937 rng(2718);
  const int iterations = dtensor::testing::property_cases(600);
  int boxes = 0, free = 0, skipped = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_planner_mesh(rng, 2 + iter % 4));
    random_topology(rng, mesh);
    const Shape shape = dtensor::testing::random_planner_shape(rng, 3);
    const int64_t ndim = static_cast<int64_t>(shape.size());
    const Placements from = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    const Placements to = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), ndim);
    const DType dtype = iter % 4 == 3 ? DType::Int64 : DType::Float32;
    const DTensorSpec a(mesh, from, shape, dtype);
    const DTensorSpec b = a.with_placements(to);
    if (a.placements() == b.placements()) continue;
    const std::string what = mesh.to_string() + " " + to_string(shape) + " " +
                             to_string(a.placements()) + " -> " + to_string(b.placements());
    const std::optional<RedistributeStep> box =
        redistribute_detail::box_exchange_step(a, b, mesh.topology().base_us);
    const Planner planner(a, b, {}, SearchMode::Pruned, redistribute_detail::kMaxPlanStates);
    const double floor = planner.box_exchange_floor(1e300);
    if (box) {
      ASSERT_LE(floor, box->cost_us) << what;
    }
    // The choice, made again from the exchange worked out in full.
    RedistributeOptions off;
    off.box_exchange = false;
    const RedistributePlan searched = build_plan(a, b, off);
    const RedistributePlan got = build_plan(a, b, {});
    int collectives = 0;
    for (const RedistributeStep& s : searched.steps) collectives += s.kind != StepKind::Local;
    const double cost = searched.cost_us, eps = 1e-9 * std::max(1.0, cost);
    const bool better =
        box && collectives > 0 &&
        (box->cost_us < cost - eps ||
         (collectives > 1 && box->cost_us <= cost + eps && box->peak_bytes < searched.peak_bytes));
    // The exchange from a free layout (local steps first, plan_box.cc)
    // may beat the direct one; it is never dearer than it.
    const bool exchanged = got.count(StepKind::BoxExchange) == 1;
    const bool direct = exchanged && got.steps.size() == 1;
    // Over several mesh dims the box exchange also needs its group, which
    // auto-flattening (on by default) provides.
    if (better) {
      EXPECT_TRUE(exchanged) << what << "\n" << got.explain() << searched.explain();
      EXPECT_LE(got.cost_us, box->cost_us + 1e-9 * std::max(1.0, box->cost_us)) << what;
    } else {
      EXPECT_FALSE(direct) << what << "\n" << got.explain() << searched.explain();
    }
    if (exchanged) {
      EXPECT_LE(got.cost_us, cost + eps) << what;
    }
    boxes += direct;
    free += exchanged && !direct;
    skipped += box && floor > cost + eps;
  }
  // The property must have met both outcomes, the free layouts' and the skip.
  EXPECT_GT(boxes, 10);
  EXPECT_GT(free, 0);
  EXPECT_GT(skipped, 10);
}

// Whether two tensor dims of `shape` that neither end shards have one length:
// the pairs the search plans over one state per class.
bool has_twins(const Shape& shape, const Placements& from, const Placements& to) {
  bool touched[kMaxDims] = {};
  for (const Placements* p : {&from, &to})
    for (const Placement& q : *p)
      if (q.is_shard()) touched[q.dim()] = true;
  for (size_t d = 0; d < shape.size(); ++d)
    for (size_t e = d + 1; e < shape.size(); ++e)
      if (!touched[d] && !touched[e] && shape[d] == shape[e]) return true;
  return false;
}

// Random pairs on 3- to 5-d meshes whose tensors repeat lengths (uneven
// ones: 3, 5, 7, 35 over meshes of 2s, 3s and 4s), Partials and shard
// orders on some, merging on and off: the pruned search (the bound and the
// twins) costs and peaks as the exhaustive one, and some plans run.
TEST(PlanPrune, TwinTensorDimsPlanAsCheaplyAsTheExhaustiveSearch) {
  World world = World::simulated(64);
  std::mt19937 rng(3141);
  const int iterations = dtensor::testing::property_cases(240);
  int twins = 0, ran = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_planner_mesh(rng, 3 + iter % 3));
    random_topology(rng, mesh);
    const int64_t lengths[] = {3, 5, 7, 8, 35, 64};
    const int64_t ndim = 3 + static_cast<int64_t>(rng() % 2);
    Shape shape;
    for (int64_t d = 0; d < ndim; ++d) shape.push_back(lengths[rng() % (d == 0 ? 6 : 3)]);
    if (rng() % 4 != 0) shape[static_cast<size_t>(ndim - 1)] = shape[static_cast<size_t>(ndim - 2)];
    auto [from, to] = dtensor::testing::random_placement_pair(rng, mesh.ndim(), ndim);
    // Neither end shards the last two tensor dims (at least), so that
    // twins occur.
    const int64_t reach = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(ndim - 2));
    for (Placements* p : {&from, &to})
      for (Placement& q : *p)
        if (q.is_shard() && q.dim() >= reach) q = Replicate();
    if (iter % 6 == 1) {
      from = dtensor::testing::with_random_orders(rng, from);
      to = dtensor::testing::with_random_orders(rng, to);
    }
    RedistributeOptions options;
    options.merge = iter % 5 != 0;
    std::optional<DTensorSpec> a, b;
    std::optional<RedistributePlan> got;
    try {
      a.emplace(mesh, from, shape, DType::Float32);
      b.emplace(a->with_placements(to));
      got = build_plan(*a, *b, options, SearchMode::Pruned);
    } catch (const Error&) {
      continue;  // a move redistribute refuses
    }
    const RedistributePlan full = build_plan(*a, *b, options, SearchMode::Exhaustive);
    const std::string what = mesh.to_string() + " " + to_string(from) + " -> " + to_string(to) +
                             " shape " + to_string(shape) + "\n" + got->explain() + full.explain();
    ASSERT_TRUE(as_cheap_and_light(*got, full)) << what;
    const bool twin = has_twins(shape, a->placements(), b->placements());
    twins += twin;
    if (twin && iter % 2 == 0) {
      ASSERT_TRUE(plan_moves_the_data(*got, *a, *b, static_cast<uint64_t>(iter))) << what;
      ++ran;
    }
  }
  EXPECT_GT(twins, iterations / 4);
  EXPECT_GT(ran, 10);
}

// The slowest pair of the 5-d sweep, whose tensor dims 0 and 3 are twins.
TEST(PlanPrune, TheSlowestSweepPairPlansAsTheIssue18SearchDoes) {
  World world = World::simulated(64);
  DeviceMesh mesh(world, {4, 2, 2, 2, 2});
  const DTensorSpec a(mesh, parse_placements("P,R,R,R,R"), {35, 10, 46, 35}, DType::Float32);
  const DTensorSpec b = a.with_placements(parse_placements("S(1),R,R,S(1),S(1)"));
  const RedistributePlan pruned = build_plan(a, b, {}, SearchMode::Pruned);
  // The issue-18 search: no twins, and (unlike plain Dijkstra) quick here.
  const RedistributePlan full = build_plan(a, b, {}, SearchMode::CoarsePruned);
  EXPECT_NEAR(pruned.cost_us, full.cost_us, 1e-9 * full.cost_us) << pruned.explain();
  EXPECT_NEAR(pruned.peak_bytes, full.peak_bytes, 1e-9 * full.peak_bytes) << pruned.explain();
}

// Random pairs on 3- to 5-d meshes whose targets keep most of the
// source's Partials (uneven lengths, shard orders on some, merging on and
// off): the search that never moves a kept Partial costs and peaks as
// plain Dijkstra, which takes every move off it and back.
TEST(PlanPrune, KeptPartialsPlanAsCheaplyAsTheExhaustiveSearch) {
  World world = World::simulated(64);
  std::mt19937 rng(4404);
  const int iterations = dtensor::testing::property_cases(240);
  int kept = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_planner_mesh(rng, 3 + iter % 3));
    random_topology(rng, mesh);
    const Shape shape = dtensor::testing::random_planner_shape(rng, 4);
    const int64_t ndim = static_cast<int64_t>(shape.size());
    auto [from, to] = dtensor::testing::random_placement_pair(rng, mesh.ndim(), ndim);
    bool keeps = false;
    for (size_t i = 0; i < from.size(); ++i)
      if (from[i].is_partial() && rng() % 3 != 0) to[i] = from[i];
    if (iter % 6 == 1) {
      from = dtensor::testing::with_random_orders(rng, from);
      to = dtensor::testing::with_random_orders(rng, to);
    }
    RedistributeOptions options;
    options.merge = iter % 5 != 0;
    std::optional<DTensorSpec> a, b;
    std::optional<RedistributePlan> full;
    try {
      a.emplace(mesh, from, shape, DType::Float32);
      b.emplace(a->with_placements(to));
      full = build_plan(*a, *b, options, SearchMode::Exhaustive);
    } catch (const Error&) {
      continue;  // a move redistribute refuses
    }
    for (int i = 0; i < mesh.ndim(); ++i)
      keeps = keeps || (mesh.size(i) > 1 && a->placements()[i].is_partial() &&
                        a->placements()[i] == b->placements()[i]);
    // Outside the try: a prune that lost the target would throw here.
    const RedistributePlan got = build_plan(*a, *b, options, SearchMode::Pruned);
    const std::string what = mesh.to_string() + " " + to_string(from) + " -> " + to_string(to) +
                             " shape " + to_string(shape) + "\n" + got.explain() + full->explain();
    ASSERT_TRUE(as_cheap_and_light(got, *full)) << what;
    kept += keeps;
  }
  EXPECT_GT(kept, iterations / 4);
}

// Issue 44's slowest 4-d pair: the kept P(sum) on mesh dim 3 never moves.
TEST(PlanPrune, TheIssue44PairPlansAsTheExhaustiveSearchDoes) {
  World world = World::simulated(64);
  DeviceMesh mesh(world, {2, 2, 4, 4});
  const DTensorSpec a(mesh, parse_placements("S(0),R,R,P"), {62, 27, 34, 64}, DType::Float32);
  const DTensorSpec b = a.with_placements(parse_placements("R,R,S(0),P"));
  const RedistributePlan pruned = build_plan(a, b, {}, SearchMode::Pruned);
  const RedistributePlan full = build_plan(a, b, {}, SearchMode::Exhaustive);
  EXPECT_TRUE(as_cheap_and_light(pruned, full)) << pruned.explain() << full.explain();
  for (const RedistributeStep& s : pruned.steps)
    for (int64_t i : s.mesh_dims) EXPECT_NE(i, 3) << pruned.explain();
}

// The representative of a state is one per class: on [5, 7, 7, 7] (dims 1,
// 2 and 3 twins) every relabelling of the twins in a state gives the same
// representative, that representative's rename maps the state onto it,
// and a dim that is not a twin keeps its name.
TEST(PlanPrune, EveryRelabellingOfTwinsHasOneRepresentative) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2});
  const DTensorSpec a(mesh, parse_placements("S(0),R,R"), {5, 7, 7, 7}, DType::Float32);
  const DTensorSpec b = a.with_placements(parse_placements("R,R,S(0)"));
  const Planner planner(a, b, {}, SearchMode::Pruned, redistribute_detail::kMaxPlanStates);
  const char* states[] = {"S(1),S(2),S(3)", "S(3),S(2),S(1)", "S(2),S(3),S(1)", "S(0),S(3),S(3)",
                          "R,S(2),S(1)",    "S(3),S(0),S(2)", "S(2)[1],S(0),S(2)[0]"};
  int perm[] = {1, 2, 3};
  for (const char* text : states) {
    const Placements p = parse_placements(text);
    Planner::Rename first_to;
    const Placements first = planner.canonical(p, first_to);
    EXPECT_EQ(Planner::renamed(p, first_to), first) << text;
    EXPECT_EQ(first_to[0], 0) << text;
    std::sort(perm, perm + 3);
    do {  // every relabelling of dims 1, 2, 3
      Planner::Rename swap = {0, static_cast<int8_t>(perm[0]), static_cast<int8_t>(perm[1]),
                              static_cast<int8_t>(perm[2])};
      Planner::Rename to;
      EXPECT_EQ(planner.canonical(Planner::renamed(p, swap), to), first) << text;
    } while (std::next_permutation(perm, perm + 3));
  }
}
