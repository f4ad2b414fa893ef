// The planner's shortcuts against the work they skip (issue 18, fifth
// pass): each prune must leave the plan exactly as cheap and as light.
// - The box exchange's floor (plan_box.cc) never exceeds the exchange's
//   cost, and the planner takes the box exchange exactly when the rule of
//   prefer_box_exchange, applied to the exchange worked out in full, says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "redistribute/plan_internal.h"
#include "redistribute/planner.h"
#include "test_util.h"

using namespace dtensor;
using redistribute_detail::build_plan;
using redistribute_detail::Planner;
using redistribute_detail::SearchMode;

namespace {

// 2- to 5-d meshes of at most 64 ranks, sizes 1-4.
Shape random_mesh_of(std::mt19937& rng, int nd) {
  for (;;) {
    Shape s;
    for (int i = 0; i < nd; ++i) s.push_back(1 + static_cast<int64_t>(rng() % 4));
    if (s.product() <= 64) return s;
  }
}

// Tensor shapes of rank 1-4: small (uneven and empty shards), up to 64 as
// the bench draws them, or up to 4096 so that bandwidth decides.
Shape random_tensor(std::mt19937& rng) {
  const int nd = 1 + static_cast<int>(rng() % 4);
  const int kind = static_cast<int>(rng() % 3);
  Shape s;
  for (int i = 0; i < nd; ++i) {
    if (kind == 0) s.push_back(static_cast<int64_t>(rng() % 10));
    else if (kind == 1) s.push_back(1 + static_cast<int64_t>(rng() % 64));
    else s.push_back(1 + static_cast<int64_t>(rng() % 4096));
  }
  return s;
}

// The default topology, small hosts, or explicit uneven per-dim links.
void random_topology(std::mt19937& rng, DeviceMesh& mesh) {
  Topology t = mesh.topology();
  switch (rng() % 3) {
    case 0: break;
    case 1: t.devices_per_host = int64_t{1} << (rng() % 4); break;
    default:
      for (int i = 0; i < mesh.ndim(); ++i)
        t.per_dim.push_back(LinkCost{5.0 + static_cast<double>(rng() % 300),
                                     0.1 + static_cast<double>(rng() % 40) / 10});
  }
  mesh.set_topology(t);
}

}  // namespace

// Random S/R pairs (shard orders on some) on 2- to 5-d meshes: the floor is
// at most the cost of the exchange box_exchange_step works out, and the
// plan is the box exchange exactly when that exchange beats the search's
// plan (planned with the box exchange off) by prefer_box_exchange's rule.
TEST(PlanPrune, BoxExchangeFloorNeverExceedsItsCostAndKeepsTheChoice) {
  World world = World::simulated(64);
  std::mt19937 rng(2718);
  const int iterations = dtensor::testing::property_cases(600);
  int boxes = 0, skipped = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, random_mesh_of(rng, 2 + iter % 4));
    random_topology(rng, mesh);
    const Shape shape = random_tensor(rng);
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
    const bool taken = got.count(StepKind::BoxExchange) == 1;
    // Over several mesh dims the box exchange also needs its group, which
    // auto-flattening (on by default) provides.
    EXPECT_EQ(taken, better) << what << "\n" << got.explain() << searched.explain();
    boxes += taken;
    skipped += box && floor > cost + eps;
  }
  // The property must have met both outcomes and the skip.
  EXPECT_GT(boxes, 10);
  EXPECT_GT(skipped, 10);
}
