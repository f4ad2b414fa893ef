// Tests of visualize_sharding: the table shows the chunking rules of
// SEMANTICS.md (nested shards, empty shards) and notes Partial mesh dims.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "dtensor/debug.h"
#include "dtensor/spec.h"

using namespace dtensor;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The line of the table whose first cell is this rank.
std::string row_of(const std::string& table, int rank) {
  const std::string prefix = std::to_string(rank) + " ";
  for (const std::string& line : lines_of(table))
    if (line.rfind(prefix, 0) == 0) return line;
  return "<no row for rank " + std::to_string(rank) + ">";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(Visualize, HeaderNamesMeshPlacementsShapeDtype) {
  DeviceMesh mesh(World::simulated(8), {4, 2}, {"dp", "tp"});
  const std::string out = visualize_sharding(DTensorSpec(mesh, {Shard(0), Shard(0)}, {18, 2}));
  const std::string head = lines_of(out).at(0);
  EXPECT_TRUE(contains(head, "[4, 2]")) << head;
  EXPECT_TRUE(contains(head, "dp, tp")) << head;
  EXPECT_TRUE(contains(head, "S(0),S(0)")) << head;
  EXPECT_TRUE(contains(head, "[18, 2]")) << head;
  EXPECT_TRUE(contains(head, "float32")) << head;
  const std::string columns = lines_of(out).at(1);
  EXPECT_TRUE(contains(columns, "rank")) << columns;
  EXPECT_TRUE(contains(columns, "dim 0")) << columns;
  EXPECT_TRUE(contains(columns, "dim 1")) << columns;
  EXPECT_TRUE(contains(columns, "local shape")) << columns;
}

// SEMANTICS.md: 18 rows on a 4x2 mesh with [S(0),S(0)]: dp 0..2 get (3 rows at
// 5*dp, 2 rows at 5*dp+3); dp 3 gets (2 at 15, 1 at 17).
TEST(Visualize, NestedShardsOfEighteenRows) {
  DeviceMesh mesh(World::simulated(8), {4, 2}, {"dp", "tp"});
  const std::string out = visualize_sharding(DTensorSpec(mesh, {Shard(0), Shard(0)}, {18, 2}));
  const char* expected[8][3] = {
      {"[0, 0]", "[0, 3)", "[3, 2]"},   {"[0, 1]", "[3, 5)", "[2, 2]"},
      {"[1, 0]", "[5, 8)", "[3, 2]"},   {"[1, 1]", "[8, 10)", "[2, 2]"},
      {"[2, 0]", "[10, 13)", "[3, 2]"}, {"[2, 1]", "[13, 15)", "[2, 2]"},
      {"[3, 0]", "[15, 17)", "[2, 2]"}, {"[3, 1]", "[17, 18)", "[1, 2]"},
  };
  for (int rank = 0; rank < 8; ++rank) {
    const std::string row = row_of(out, rank);
    for (const char* cell : expected[rank]) EXPECT_TRUE(contains(row, cell)) << row;
    EXPECT_TRUE(contains(row, "[0, 2)")) << row;  // dim 1 is not sharded
  }
  EXPECT_EQ(lines_of(out).size(), 10u) << out;  // header, column names, 8 rows
  EXPECT_FALSE(contains(out, "partial")) << out;
  EXPECT_FALSE(contains(out, "empty")) << out;
}

// 13 rows on 4x2 with [S(0),S(0)]: the last rank holds 0 rows at offset 13.
TEST(Visualize, EmptyLastShard) {
  DeviceMesh mesh(World::simulated(8), {4, 2});
  const std::string out = visualize_sharding(DTensorSpec(mesh, {Shard(0), Shard(0)}, {13, 2}));
  EXPECT_TRUE(contains(row_of(out, 6), "[12, 13)")) << out;
  EXPECT_TRUE(contains(row_of(out, 7), "[13, 13) empty")) << out;
  EXPECT_TRUE(contains(row_of(out, 7), "[0, 2]")) << out;  // local shape
  EXPECT_TRUE(contains(row_of(out, 0), "[0, 2)")) << out;
  EXPECT_FALSE(contains(row_of(out, 6), "empty")) << out;
}

TEST(Visualize, ColumnsAreAligned) {
  DeviceMesh mesh(World::simulated(8), {4, 2});
  const std::string out = visualize_sharding(DTensorSpec(mesh, {Shard(0), Shard(1)}, {13, 3}));
  const std::vector<std::string> lines = lines_of(out);
  // Every row's "dim 1" cell starts in the same column as its header.
  const size_t col = lines.at(1).find("dim 1");
  ASSERT_NE(col, std::string::npos);
  for (size_t i = 2; i < 10; ++i) EXPECT_EQ(lines.at(i).at(col), '[') << out;
  for (const std::string& line : lines) EXPECT_NE(line.back(), ' ') << "trailing blank: " << line;
}

TEST(Visualize, PartialDimsAreNoted) {
  DeviceMesh mesh(World::simulated(4), {2, 2}, {"dp", "tp"});
  const std::string out =
      visualize_sharding(DTensorSpec(mesh, {Shard(1), Partial()}, {4, 6}));
  EXPECT_TRUE(contains(out, "mesh dim 1 (tp): partial sum")) << out;
  EXPECT_TRUE(contains(out, "the value is the sum over this dim")) << out;
  EXPECT_FALSE(contains(out, "mesh dim 0")) << out;
  // Partial leaves the shape alone: both tp ranks hold the same range.
  EXPECT_TRUE(contains(row_of(out, 0), "[0, 3)")) << out;
  EXPECT_TRUE(contains(row_of(out, 1), "[0, 3)")) << out;
  EXPECT_TRUE(contains(row_of(out, 2), "[3, 6)")) << out;
  EXPECT_TRUE(contains(row_of(out, 0), "[4, 3]")) << out;

  const std::string both = visualize_sharding(
      DTensorSpec(DeviceMesh(World::simulated(4), {2, 2}), {Partial(ReduceOp::Avg), Partial()}, {4}));
  EXPECT_TRUE(contains(both, "mesh dim 0: partial avg")) << both;
  EXPECT_TRUE(contains(both, "the average over this dim")) << both;
  EXPECT_TRUE(contains(both, "mesh dim 1: partial sum")) << both;

  const std::string mx = visualize_sharding(
      DTensorSpec(DeviceMesh(World::simulated(2), {2}), {Partial(ReduceOp::Max)}, {4}));
  EXPECT_TRUE(contains(mx, "partial max")) << mx;
  EXPECT_TRUE(contains(mx, "the maximum over this dim")) << mx;
}

TEST(Visualize, ReplicatedAndScalar) {
  DeviceMesh mesh(World::simulated(2), {2});
  const std::string rep = visualize_sharding(DTensorSpec(mesh, {Replicate()}, {5}, DType::Int64));
  EXPECT_TRUE(contains(lines_of(rep).at(0), "int64")) << rep;
  EXPECT_TRUE(contains(row_of(rep, 0), "[0, 5)")) << rep;
  EXPECT_TRUE(contains(row_of(rep, 1), "[0, 5)")) << rep;

  const std::string scalar = visualize_sharding(DTensorSpec(mesh, {Replicate()}, Shape{}));
  EXPECT_TRUE(contains(row_of(scalar, 1), "[]")) << scalar;
}

TEST(Visualize, RowsInRankOrderForExplicitRanks) {
  // A mesh over explicit ranks, listed out of order, inside a larger world.
  DeviceMesh mesh(World::simulated(6), {2}, std::vector<int>{3, 1});
  const std::string out = visualize_sharding(DTensorSpec(mesh, {Shard(0)}, {4}));
  const std::vector<std::string> lines = lines_of(out);
  EXPECT_EQ(lines.at(2).rfind("1 ", 0), 0u) << out;  // rank 1 first, at coordinate [1]
  EXPECT_TRUE(contains(lines.at(2), "[2, 4)")) << out;
  EXPECT_EQ(lines.at(3).rfind("3 ", 0), 0u) << out;
  EXPECT_TRUE(contains(lines.at(3), "[0, 2)")) << out;
  EXPECT_TRUE(contains(out, "4 rank(s) of the world are not in this mesh")) << out;
}
