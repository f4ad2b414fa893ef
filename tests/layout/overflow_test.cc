// Tests of out-of-range shard dims (never silently wrapped into the int8_t
// the placement stores) and of the spec's size arithmetic on huge dims.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "dtensor/spec.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
}  // namespace

TEST(PlacementRange, ShardDimsBeyondEightDimsThrow) {
  // Shard(256) once became S(0): the dim is kept in an int8_t.
  expect_error([] { Shard(256); }, {"Shard(256)", "out of range", "-7 <= dim <= 7"});
  expect_error([] { Shard(8); }, {"Shard(8)", "out of range"});
  expect_error([] { Shard(-8); }, {"Shard(-8)", "out of range"});
  expect_error([] { Placement::shard(kMax); }, {"out of range"});
  EXPECT_EQ(Shard(7).dim(), 7);
  EXPECT_EQ(Shard(-7).dim(), -7);
}

TEST(PlacementRange, ParseRejectsOutOfRangeDims) {
  expect_error([] { parse_placement("S(256)"); }, {"'S(256)'", "shard dim 256 out of range"});
  expect_error([] { parse_placement("S(99999999999999999999)"); },
               {"'S(99999999999999999999)'", "out of range", "at most 8 dims"});
  expect_error([] { parse_placement("Shard(-99999999999999999999)"); }, {"out of range"});
  expect_error([] { parse_placements("R,S(8)"); }, {"'S(8)'", "out of range"});
  expect_error([] { parse_placement("S(1x)"); }, {"'1x'", "is not an integer"});
  expect_error([] { parse_placement("S()"); }, {"bad placement 'S()'"});
  EXPECT_EQ(parse_placement("S(+1)"), Shard(1));
}

TEST(SpecOverflow, ChunkRangeOfDimsNearInt64Max) {
  // ceil(L / n) once computed L + n - 1, which wraps for L near INT64_MAX.
  const int64_t c = kMax / 4 + 1;
  int64_t total = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const ChunkRange range = chunk_range(kMax, 4, r);
    EXPECT_EQ(range.start, r * c < kMax ? r * c : kMax);
    EXPECT_GE(range.size, 0);
    total += range.size;
  }
  EXPECT_EQ(total, kMax);
  EXPECT_EQ(chunk_range(kMax, 1, 0).size, kMax);
  EXPECT_EQ(chunk_range(kMax, kMax, kMax - 1).size, 1);
  EXPECT_EQ(chunk_range(kMax, kMax, kMax - 1).start, kMax - 1);
  // More chunks than elements: the late ranks get empty chunks at the end.
  EXPECT_EQ(chunk_range(2, kMax, kMax - 1).size, 0);
  EXPECT_EQ(chunk_range(2, kMax, kMax - 1).start, 2);
  EXPECT_EQ(chunk_range(0, 4, 3).size, 0);
}

TEST(SpecOverflow, ExtentsOfHugeShardedDims) {
  World world = World::simulated(8);
  const DTensorSpec spec(DeviceMesh(world, {8}), {Shard(0)}, {kMax / 8 * 8 - 1}, DType::Bool);
  int64_t total = 0;
  for (int rank = 0; rank < 8; ++rank) total += spec.extent_of_rank(rank)->local_shape[0];
  EXPECT_EQ(total, kMax / 8 * 8 - 1);
  EXPECT_EQ(spec.global_bytes(), kMax / 8 * 8 - 1);
}

TEST(SpecOverflow, ShapesWhoseElementsOrBytesOverflowAreRefused) {
  World world = World::simulated(4);
  const DeviceMesh mesh(world, {4});
  expect_error([&] { DTensorSpec(mesh, {Shard(0)}, {int64_t{1} << 32, int64_t{1} << 32}); },
               {"DTensorSpec", "more elements than int64"});
  expect_error([&] { DTensorSpec(mesh, {Replicate()}, {kMax}); },
               {"DTensorSpec", "bytes of the global tensor", "overflows int64"});
  expect_error([&] { DTensorSpec(mesh, {Replicate()}, {kMax / 8 + 1}, DType::Float64); },
               {"overflows int64"});
  expect_error([&] { DTensorSpec(mesh, {Shard(0)}, {4, -1}); }, {"DTensorSpec", "negative size"});
  // The largest byte count that fits is fine.
  EXPECT_EQ(DTensorSpec(mesh, {Shard(0)}, {kMax / 8}, DType::Int64).global_bytes(), kMax / 8 * 8);
}
