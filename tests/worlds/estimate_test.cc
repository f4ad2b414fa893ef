// estimate::profile (estimate.h) on every world (see world_util.h): the
// same program — a GPT built on the meta device, laid out, trained for two
// steps with AdamW and gradient clipping — run on this test's world and on
// a World::shape_only of its size gives every rank this process holds the
// same collectives (kind, dtype, bytes, group members, order, phase) and
// the same memory (bytes held at the end, peak, and the peaks of
// fully_shard's unsharded parameters and communication buffers), for
// FSDP, HSDP, DDP, tensor and sequence parallelism and their combinations,
// activation checkpointing (whole and selective), bf16 mixed precision,
// uneven shards, eager and deferred initialisation, and fully_shard's
// prefetch and async reduce_scatter (whose started collectives keep their
// input until waited for in both worlds, as MPI's send buffers are). The
// shape-only world runs no kernel and moves no byte.
#include "dtensor/estimate.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/models/gpt.h"
#include "worlds/estimate_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

struct Case {
  const char* name;
  Shape mesh;
  bool tp = false;    // tensor + sequence parallel over the last mesh dim
  bool fsdp = false;  // fully_shard over mesh dim 0 (HSDP: dim 1, replicated over 0)
  bool hsdp = false;
  bool ddp = false;    // replicate over mesh dim 0
  int checkpoint = 0;  // 1: whole blocks; 2: keeping the matmuls' outputs
  bool bf16 = false;   // MixedPrecisionPolicy(param bf16, reduce float32)
  int64_t hidden = 32;
  int64_t batch = 8;     // 10 over 4 dp ranks: 3, 3, 3, 1
  bool eager = false;    // built whole, not on the meta device
  bool overlap = false;  // fully_shard's prefetch and async_reduce_scatter
};

// The layout of a case (estimate_util.h).
dtensor::testing::EstimateLayout gpt_layout_of(const Case& c) {
  dtensor::testing::EstimateLayout l;
  l.tp = c.tp;
  l.fsdp = c.fsdp;
  l.hsdp = c.hsdp;
  l.ddp = c.ddp;
  l.checkpoint = c.checkpoint > 0;
  if (c.checkpoint == 2) l.save_ops = {"mm", "matmul"};
  l.bf16 = c.bf16;
  l.overlap = c.overlap;
  return l;
}

void train_gpt(const DeviceMesh& mesh, const Case& c) {
  models::GPTConfig config;
  config.batch = c.batch;
  config.seq = 8;
  config.hidden = c.hidden;
  config.heads = 4;
  config.layers = 2;
  config.vocab = 62;  // uneven over 4 (16, 16, 16, 14) and 8 tp ranks
  std::unique_ptr<models::GPT> model;
  {
    std::optional<nn::MetaDeviceGuard> meta;
    if (!c.eager) meta.emplace();
    model = std::make_unique<models::GPT>(mesh, config, 11);
  }
  dtensor::testing::lay_out_and_train(*model, mesh, gpt_layout_of(c));
}

std::vector<Case> cases() {
  return {
      {"fsdp", {4}, false, true},
      {"fsdp_uneven", {4}, false, true, false, false, 0, false, 36, 10},
      {"tp", {4}, true},
      {"ddp", {4}, false, false, false, true},
      {"fsdp_tp", {2, 2}, true, true},
      {"fsdp_tp_checkpoint", {2, 2}, true, true, false, false, 1},
      {"fsdp_tp_selective_checkpoint", {2, 2}, true, true, false, false, 2},
      {"fsdp_bf16", {2, 2}, true, true, false, false, 0, true},
      {"hsdp_tp", {2, 2, 2}, true, true, true},
      {"fsdp_tp_8", {4, 2}, true, true, false, false, 1, false, 40, 12},
      {"fsdp_tp_eager", {2, 2}, true, true, false, false, 0, false, 32, 8, true},
      {"fsdp_overlap", {4}, false, true, false, false, 0, false, 32, 8, false, true},
  };
}

}  // namespace

TEST(EstimateTest, ShapeOnlyWorldProfilesEveryRankExactly) {
  const World world = dtensor::testing::test_world();
  int ran = 0;
  for (const Case& c : cases()) {
    if (c.mesh.product() > world.size()) continue;
    SCOPED_TRACE(c.name);
    dtensor::testing::expect_shape_only_profiles_as_real(
        world, c.mesh, [&](const DeviceMesh& mesh) { train_gpt(mesh, c); });
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// A parameter made under nn::MetaDeviceGuard holds no memory until
// materialize() (in a shape-only world too, where every tensor is meta);
// then each rank counts its shard, here a replicated 6x8 weight and bias.
TEST(EstimateTest, MetaParametersCountOnceMaterialized) {
  const World real = dtensor::testing::test_world();
  for (const World& world : {real, World::shape_only(real.size())}) {
    SCOPED_TRACE(world.is_shape_only() ? "shape-only" : "real");
    const DeviceMesh mesh(world, Shape{std::min(4, world.size())});
    RankMemoryTracker tracker(world);
    std::unique_ptr<nn::Linear> layer;
    {
      nn::MetaDeviceGuard meta;
      layer = std::make_unique<nn::Linear>(mesh, 8, 6, true, 3);
    }
    for (const RankPeak& r : tracker.ranks()) EXPECT_EQ(r.now, 0) << "rank " << r.rank;
    layer->materialize();
    for (const RankPeak& r : tracker.ranks())
      EXPECT_EQ(r.now, mesh.contains(r.rank) ? (6 * 8 + 6) * 4 : 0) << "rank " << r.rank;
  }
}

// In-place ops in a shape-only world only count as a change (there are no
// values); the real world runs them. Both move the operand alike.
TEST(EstimateTest, InPlaceOpsRunShapeOnly) {
  const World real = dtensor::testing::test_world();
  std::vector<CollectiveRecord> seen[2];
  int k = 0;
  for (const World& world : {real, World::shape_only(real.size())}) {
    SCOPED_TRACE(world.is_shape_only() ? "shape-only" : "real");
    const DeviceMesh mesh(world, Shape{2, 2});
    DTensor a = randn({8, 6}, mesh, {Shard(0), Replicate()}, 1);
    const DTensor b = randn({8, 6}, mesh, {Replicate(), Shard(1)}, 2);
    CommDebugMode comm;
    a.add_(b).mul_(2.0);
    EXPECT_EQ(a.placements(), (Placements{Shard(0), Replicate()}));
    if (dtensor::testing::takes_part(mesh)) {
      EXPECT_EQ(a.is_meta(), world.is_shape_only());
    }
    seen[k++] = comm.collectives();
  }
  EXPECT_FALSE(seen[1].empty());  // b's columns gathered over mesh dim 1
  // Under MPI a process records its own shard's bytes, the simulated
  // world the largest of the call's: compared where both are the latter.
  if (real.is_simulated()) {
    EXPECT_EQ(seen[0], seen[1]);
  }
}

// A shape-only world computes each role once (world/roles.h): the profile
// by roles, each rank given its stand-in's figures in its own groups
// (Profile::expanded), equals the profile of every rank computed, on
// meshes larger than a real run here would take, with uneven and empty
// shards (a batch of 8 and a vocabulary of 62 over 16 ranks) that split
// the roles and run the step again.
TEST(EstimateTest, RolesGiveEveryRankItsFiguresExactly) {
  const std::vector<Case> by_roles = {
      {"fsdp_16", {16}, false, true, false, false, 0, false, 36, 8},
      {"fsdp_tp_bf16_8x4", {8, 4}, true, true, false, false, 0, true, 32, 12},
      {"fsdp_tp_selective_4x4", {4, 4}, true, true, false, false, 2},
      {"hsdp_tp_2x4x2", {2, 4, 2}, true, true, true},
      {"ddp_tp_checkpoint_8x2", {8, 2}, true, false, false, true, 1},
      {"fsdp_overlap_eager_8x2", {8, 2}, true, true, false, false, 0, false, 32, 16, true, true},
      // One rank: its first role's mask (first on the one dim) exceeds
      // the rank count.
      {"fsdp_1", {1}, false, true},
  };
  int split = 0;
  for (const Case& c : by_roles) {
    SCOPED_TRACE(c.name);
    const int n = static_cast<int>(c.mesh.product());
    const World all_world = World::shape_only(n), roles_world = World::shape_only(n);
    const DeviceMesh all_mesh(all_world, c.mesh), roles_mesh(roles_world, c.mesh);
    estimate::ProfileOptions every;
    every.roles = false;
    const estimate::Profile all =
        estimate::profile(all_world, [&] { train_gpt(all_mesh, c); }, every);
    const estimate::Profile roles = estimate::profile(roles_world, [&] { train_gpt(roles_mesh, c); });
    ASSERT_EQ(static_cast<int>(all.ranks.size()), n);
    if (n >= 16) {
      EXPECT_LT(roles.ranks.size(), all.ranks.size()) << "no two ranks shared a role";
    }
    ASSERT_EQ(static_cast<int>(roles.stand_in.size()), n);
    // After the profile the world holds every rank again.
    EXPECT_EQ(static_cast<int>(roles_world.held_ranks().size()), n);
    split += roles.runs > 1;
    const estimate::Profile expanded = roles.expanded();
    ASSERT_EQ(static_cast<int>(expanded.ranks.size()), n);
    dtensor::testing::expect_same_profile(all, expanded);
    EXPECT_EQ(all.events.size(), roles.events.size());
    for (size_t i = 0; i < all.events.size() && i < roles.events.size(); ++i) {
      EXPECT_EQ(all.events[i].bytes, roles.events[i].bytes) << "event " << i;
      EXPECT_EQ(all.events[i].flops, roles.events[i].flops) << "event " << i;
    }
  }
  EXPECT_GT(split, 0) << "no layout split the roles: the rerun went untested";
}
