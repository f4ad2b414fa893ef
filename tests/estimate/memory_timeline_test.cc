// estimate::profile's memory timeline (ProfileOptions::memory_timeline): each
// rank's bytes after each event, one history per distinct rank, the same
// on a simulated world (real tensors) as on a shape-only one, agreeing
// with the rank's own figures, and nothing kept without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/estimate.h"

using namespace dtensor;

namespace {

// A step whose ranks differ: 10 rows over 4 ranks are 3, 3, 3 and 1, until
// the all_gather gives every rank all 10.
void uneven_step(const DeviceMesh& mesh) {
  estimate::phase("forward");
  const DTensor x = randn({10, 6}, mesh, {Shard(0)}, 1);
  const DTensor w = randn({6, 4}, mesh, {Replicate()}, 2);
  const DTensor y = relu(matmul(x, w));
  const DTensor all = y.redistribute({Replicate()});
  const DTensor s = sum(all);
}

// The samples after the collectives of `p`, of the history of `rank`.
std::vector<estimate::MemorySample> at_collectives(const estimate::Profile& p, int rank) {
  std::vector<estimate::MemorySample> out;
  const auto& h =
      p.memory_histories[static_cast<size_t>(p.ranks[static_cast<size_t>(rank)].memory_history)];
  for (size_t i = 0; i < p.events.size(); ++i)
    if (p.events[i].type == StepEvent::Type::Collective) out.push_back(h[i]);
  return out;
}

// Every rank computed (not by roles: the tests read p.ranks[rank]), with
// the timeline.
estimate::ProfileOptions every_rank(bool memory_timeline) {
  estimate::ProfileOptions o;
  o.roles = false;
  o.memory_timeline = memory_timeline;
  return o;
}

}  // namespace

TEST(MemoryTimelineTest, EachRanksBytesAfterEachEventOnceForRanksAlike) {
  const World world = World::shape_only(4);
  const DeviceMesh mesh(world, Shape{4});
  const estimate::Profile p =
      estimate::profile(world, [&] { uneven_step(mesh); }, every_rank(true));
  ASSERT_FALSE(p.events.empty());
  // Ranks 0-2 alike, rank 3 apart: two histories, each of every event.
  ASSERT_EQ(p.memory_histories.size(), 2u);
  for (const auto& h : p.memory_histories) EXPECT_EQ(h.size(), p.events.size());
  EXPECT_EQ(p.ranks[0].memory_history, p.ranks[1].memory_history);
  EXPECT_EQ(p.ranks[0].memory_history, p.ranks[2].memory_history);
  EXPECT_NE(p.ranks[0].memory_history, p.ranks[3].memory_history);
  for (const estimate::RankProfile& r : p.ranks) {
    SCOPED_TRACE(r.rank);
    const auto& h = p.memory_histories[static_cast<size_t>(r.memory_history)];
    // The rank's own peak is the last sample's (in a shape-only world
    // every op is an event, so nothing is made after the last); its bytes
    // at the end are 0, the step's tensors gone with it.
    EXPECT_EQ(h.back().peak, r.memory.peak);
    EXPECT_GT(h.back().now, 0);
    EXPECT_EQ(r.memory.now, 0);
    for (size_t i = 1; i < h.size(); ++i) EXPECT_GE(h[i].peak, h[i - 1].peak);
    for (const estimate::MemorySample& m : h) EXPECT_GE(m.peak, m.now);
  }
  // Rank 3 holds 1 row of x where the others hold 3.
  const auto& most = p.memory_histories[static_cast<size_t>(p.ranks[0].memory_history)];
  const auto& least = p.memory_histories[static_cast<size_t>(p.ranks[3].memory_history)];
  EXPECT_GT(most.front().now, least.front().now);

  const estimate::Profile without =
      estimate::profile(world, [&] { uneven_step(mesh); }, every_rank(false));
  EXPECT_TRUE(without.memory_histories.empty());
  for (const estimate::RankProfile& r : without.ranks) EXPECT_EQ(r.memory_history, -1);
}

// A simulated world runs the kernels, so its events are the collectives
// alone; after each, every rank's bytes are the shape-only world's.
TEST(MemoryTimelineTest, ShapeOnlyTimelineIsTheRealOnesAtTheCollectives) {
  const World real = World::simulated(4), shapes = World::shape_only(4);
  const DeviceMesh real_mesh(real, Shape{4}), shapes_mesh(shapes, Shape{4});
  const estimate::Profile a =
      estimate::profile(real, [&] { uneven_step(real_mesh); }, every_rank(true));
  const estimate::Profile b =
      estimate::profile(shapes, [&] { uneven_step(shapes_mesh); }, every_rank(true));
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(rank);
    const std::vector<estimate::MemorySample> x = at_collectives(a, rank),
                                              y = at_collectives(b, rank);
    EXPECT_FALSE(x.empty());
    EXPECT_EQ(x, y);
  }
}
