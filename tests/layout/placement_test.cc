// Tests of placements (text form, parsing, equality) and of DTensorSpec:
// validation and the chunking rules of SEMANTICS.md.
#include <gtest/gtest.h>

#include "test_util.h"

#include <random>

#include "dtensor/spec.h"

using namespace dtensor;
using dtensor::testing::error_of;

TEST(Placement, TextFormRoundTrips) {
  Placements p{Shard(0), Replicate(), Partial(), Partial(ReduceOp::Avg)};
  EXPECT_EQ(to_string(p), "S(0),R,P(sum),P(avg)");
  EXPECT_EQ(parse_placements("S(0),R,P(sum),P(avg)"), p);
  EXPECT_EQ(parse_placements(" s(0) , r, P ,p(AVG)"), p);
  EXPECT_EQ(parse_placement("S(-1)"), Shard(-1));
  // PyTorch's spellings.
  EXPECT_EQ(parse_placements("Shard(0), Replicate(), Partial(), Partial(avg)"), p);
  EXPECT_EQ(parse_placements("shard(0),replicate,partial,partial(AVG)"), p);
  EXPECT_EQ(parse_placement("Shard(-1)"), Shard(-1));
  EXPECT_EQ(parse_placement("P(max)"), Partial(ReduceOp::Max));
  EXPECT_EQ(parse_placement("P(min)"), Partial(ReduceOp::Min));
  EXPECT_NE(Shard(0), Shard(1));
  EXPECT_NE(Partial(ReduceOp::Sum), Partial(ReduceOp::Max));
  EXPECT_EQ(Placement(), Replicate());
  EXPECT_NE(Shard(0).hash(), Shard(1).hash());
}

TEST(Placement, ParseErrorsNameTheText) {
  EXPECT_NE(error_of([] { parse_placement("Shard(x)"); }).find("'Shard(x)': shard dim 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_placement("Partial(mean)"); }).find("unknown reduce op 'mean'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_placement("Replicated"); }).find("bad placement 'Replicated'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_placements("S(0),X"); }).find("'X'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_placement("S(a)"); }).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of([] { parse_placement("P(prod)"); }).find("unknown reduce op 'prod'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_placements(""); }).find("comma-separated"), std::string::npos);
  EXPECT_THROW(parse_placements("S(0),,R"), Error);
  EXPECT_THROW(parse_placement("S(99)"), Error);
  EXPECT_THROW(parse_placement("S()"), Error);
}

TEST(Chunk, RangesFollowCeilDivision) {
  auto sizes = [](int64_t L, int64_t n) {
    std::vector<int64_t> s;
    for (int64_t r = 0; r < n; ++r) s.push_back(chunk_range(L, n, r).size);
    return s;
  };
  EXPECT_EQ(sizes(7, 3), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(sizes(13, 4), (std::vector<int64_t>{4, 4, 4, 1}));
  EXPECT_EQ(chunk_range(2, 4, 3).start, 2);  // empty: offset = length
  EXPECT_EQ(chunk_range(13, 4, 3).start, 12);
  EXPECT_EQ(chunk_range(0, 3, 0).size, 0);
}

class SpecTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
};

TEST_F(SpecTest, NestedShardingOfOneDimGoesLeftToRight) {
  // SEMANTICS.md: 18 rows on a 4x2 mesh with [S(0),S(0)].
  DeviceMesh mesh(world, {4, 2});
  DTensorSpec spec(mesh, {Shard(0), Shard(0)}, {18, 2});
  for (int64_t dp = 0; dp < 3; ++dp) {
    EXPECT_EQ(spec.local_shape({dp, 0}), (Shape{3, 2}));
    EXPECT_EQ(spec.global_offset({dp, 0}), (Shape{5 * dp, 0}));
    EXPECT_EQ(spec.local_shape({dp, 1}), (Shape{2, 2}));
    EXPECT_EQ(spec.global_offset({dp, 1}), (Shape{5 * dp + 3, 0}));
  }
  EXPECT_EQ(spec.local_shape({3, 0}), (Shape{2, 2}));
  EXPECT_EQ(spec.global_offset({3, 0}), (Shape{15, 0}));
  EXPECT_EQ(spec.local_shape({3, 1}), (Shape{1, 2}));
  EXPECT_EQ(spec.global_offset({3, 1}), (Shape{17, 0}));
}

TEST_F(SpecTest, EmptyShardReportsGlobalLengthAsOffset) {
  DeviceMesh mesh(world, {4, 2});
  DTensorSpec spec(mesh, {Shard(0), Shard(0)}, {13, 3});
  EXPECT_EQ(spec.local_shape({3, 0}), (Shape{1, 3}));
  EXPECT_EQ(spec.global_offset({3, 0}), (Shape{12, 0}));
  EXPECT_EQ(spec.local_shape({3, 1}), (Shape{0, 3}));
  EXPECT_EQ(spec.global_offset({3, 1}), (Shape{13, 0}));
  ShardExtent e = *spec.extent_of_rank(7);
  EXPECT_EQ(e.local_shape, (Shape{0, 3}));
  // 2 rows over 4 ranks: 1,1,0,0.
  DTensorSpec small(DeviceMesh(world, {4}), {Shard(0)}, {2});
  EXPECT_EQ(small.local_shape({2}), (Shape{0}));
  EXPECT_EQ(small.global_offset({2}), (Shape{2}));
  EXPECT_EQ(small.global_offset({1}), (Shape{1}));
}

TEST_F(SpecTest, ShardsOfDifferentDimsAndReplicas) {
  DeviceMesh mesh(world, {2, 2, 2}, {"dp", "cp", "tp"});
  DTensorSpec spec(mesh, {Shard(0), Replicate(), Shard(-1)}, {8, 16});
  EXPECT_EQ(spec.placements()[2], Shard(1));  // normalised
  EXPECT_EQ(spec.local_shape({1, 0, 1}), (Shape{4, 8}));
  EXPECT_EQ(spec.global_offset({1, 1, 1}), (Shape{4, 8}));
  EXPECT_EQ(spec.num_shards(), 4);
  EXPECT_TRUE(spec.is_sharded(1));
  EXPECT_FALSE(spec.is_replicated());
  EXPECT_TRUE(spec.with_placements({Replicate(), Replicate(), Replicate()}).is_replicated());
  // A rank outside the mesh has no shard.
  DTensorSpec part(DeviceMesh(world, {2}), {Shard(0)}, {4});
  EXPECT_FALSE(part.extent_of_rank(5).has_value());
}

TEST_F(SpecTest, ValidationErrorsNameTheProblem) {
  DeviceMesh mesh(world, {2, 2});
  EXPECT_NE(error_of([&] { DTensorSpec(mesh, {Shard(0), Replicate(), Replicate()}, {4}); })
                .find("expected 2 placements for a 2-d mesh, got 3: S(0),R,R"),
            std::string::npos);
  EXPECT_NE(error_of([&] { DTensorSpec(mesh, {Shard(2), Replicate()}, {4, 4}); })
                .find("names tensor dim 2 but the tensor has shape [4, 4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DTensorSpec(mesh, {Partial(ReduceOp::Sum), Partial(ReduceOp::Max)}, {4});
            }).find("mix Partial(sum) with Partial(max)"),
            std::string::npos);
  // sum with avg is allowed.
  EXPECT_NO_THROW(DTensorSpec(mesh, {Partial(ReduceOp::Sum), Partial(ReduceOp::Avg)}, {4}));
  // An average of integers has no integer value to reduce to.
  EXPECT_NE(error_of([&] {
              DTensorSpec(mesh, {Partial(ReduceOp::Avg), Replicate()}, {4}, DType::Int64);
            }).find("placement P(avg) on mesh dim 0 needs a floating dtype, got int64"),
            std::string::npos);
  EXPECT_NO_THROW(DTensorSpec(mesh, {Partial(ReduceOp::Max), Replicate()}, {4}, DType::Int64));
}

TEST_F(SpecTest, HashAndEquality) {
  DeviceMesh mesh(world, {2, 4});
  DTensorSpec a(mesh, {Shard(0), Replicate()}, {8, 8});
  DTensorSpec b(mesh, {Shard(0), Replicate()}, {8, 8});
  DTensorSpec c(mesh, {Shard(1), Replicate()}, {8, 8});
  DTensorSpec d(mesh, {Shard(0), Replicate()}, {8, 8}, DType::Float64);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_EQ(a.to_string(), "DTensorSpec(mesh=[2, 4], placements=S(0),R, shape=[8, 8], dtype=float32)");
}

// Property: on random meshes, shapes and placements, every element of the
// global tensor is held by exactly (product of non-sharding mesh dim sizes)
// ranks, and every shard is a box inside the tensor.
TEST_F(SpecTest, RandomLayoutsTileTheTensor) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    Shape mesh_shape;
    const int mesh_nd = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < mesh_nd; ++i) mesh_shape.push_back(1 + rng() % 3);
    if (mesh_shape.product() > 8) mesh_shape = {2, 2, 2};
    Shape shape;
    const int nd = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nd; ++i) shape.push_back(rng() % 8);
    Placements pl;
    int64_t replicas = 1;
    for (int i = 0; i < static_cast<int>(mesh_shape.size()); ++i) {
      if (rng() % 2) {
        pl.push_back(Shard(rng() % nd));
      } else {
        pl.push_back(Replicate());
        replicas *= mesh_shape[i];
      }
    }
    DeviceMesh mesh(world, mesh_shape);
    DTensorSpec spec(mesh, pl, shape);
    std::vector<int> cover(static_cast<size_t>(shape.product()), 0);
    for (int rank = 0; rank < mesh.size(); ++rank) {
      ShardExtent e = *spec.extent_of_rank(rank);
      for (int d = 0; d < nd; ++d) {
        ASSERT_GE(e.local_shape[d], 0);
        ASSERT_LE(e.global_offset[d] + e.local_shape[d], shape[d]);
      }
      if (e.local_shape.product() == 0) continue;
      Shape idx(nd, 0);
      for (int64_t k = 0; k < e.local_shape.product(); ++k) {
        int64_t rem = k, flat = 0;
        for (int d = nd - 1; d >= 0; --d) {
          idx[d] = rem % e.local_shape[d];
          rem /= e.local_shape[d];
        }
        for (int d = 0; d < nd; ++d) flat = flat * shape[d] + e.global_offset[d] + idx[d];
        cover[flat]++;
      }
    }
    for (int c : cover)
      ASSERT_EQ(c, replicas) << "mesh " << mesh_shape << " shape " << shape << " " << to_string(pl);
  }
}
