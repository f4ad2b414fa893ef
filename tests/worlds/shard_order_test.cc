// Shard order (spec.h) on every world (see world_util.h): distribute ->
// full_tensor, random redistributions between ordered layouts, ops on
// ordered inputs against the single-process result, gradients through
// redistribute, and the FSDP-over-TP gather being one all_gather.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::make_dtensor;

using dtensor::testing::random_shard_or_replicate;

namespace {

class ShardOrderTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

}  // namespace

// The example of the docs: (dp=2, tp=2), [8, 4], S(0)[1],S(0)[0]: (d, t)
// holds rows [4t+2d, 4t+2d+2); gathering dp (the last to split) is one
// all_gather and leaves each tp rank its rows [4t, 4t+4).
TEST_F(ShardOrderTest, FsdpOverTpGatherIsOneAllGather) {
  if (world.size() < 4) GTEST_SKIP();
  DeviceMesh mesh(world, Shape{2, 2}, {"dp", "tp"});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor full = Tensor::arange(32).reshape({8, 4}).to(DType::Float32);
  const DTensor w = distribute_tensor(full, mesh, parse_placements("S(0)[1],S(0)[0]"));
  for (const auto& [rank, t] : w.local().shards()) {
    const DimVector c = *mesh.coordinate(rank);
    EXPECT_TRUE(equal(t, full.narrow(0, 4 * c[1] + 2 * c[0], 2))) << rank;
  }
  CommDebugMode comm;
  const DTensor g = w.redistribute(parse_placements("R,S(0)"));
  EXPECT_EQ(comm.total_count(), 1) << comm.table();
  EXPECT_EQ(comm.count(CollectiveKind::AllGather), 1) << comm.table();
  for (const auto& [rank, t] : g.local().shards()) {
    const DimVector c = *mesh.coordinate(rank);
    EXPECT_TRUE(equal(t, full.narrow(0, 4 * c[1], 4))) << rank;
  }
  // And back: a local chunk, no collective.
  std::optional<DTensor> again;
  {
    CommDebugMode back;
    again = g.redistribute(parse_placements("S(0)[1],S(0)[0]"));
    EXPECT_EQ(back.total_count(), 0) << back.table();
  }
  EXPECT_TRUE(equal(again->full_tensor(), full));
}

// Random meshes of 1-4 dims up to 64 ranks, uneven and empty shards: an
// ordered layout distributes (from every rank, and scattered from one) and
// gathers back to the tensor, and random redistributions between ordered
// layouts (Partial sources too) keep its value.
TEST_F(ShardOrderTest, RandomRedistributionsKeepTheValue) {
  std::mt19937 rng(2024);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const int cases = dtensor::testing::property_cases(150);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape ms = meshes[static_cast<size_t>(iter) % meshes.size()];
    DeviceMesh mesh(world, ms);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    const int64_t nd = static_cast<int64_t>(shape.size());
    auto [from, to] = dtensor::testing::random_placement_pair(rng, mesh.ndim(), nd);
    from = dtensor::testing::with_random_orders(rng, from);
    to = dtensor::testing::with_random_orders(rng, to);
    const Placements plain = random_shard_or_replicate(rng, mesh.ndim(), nd);
    const int src = static_cast<int>(rng() % static_cast<uint32_t>(mesh.size()));
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = mesh.to_string() + " " + to_string(from) + " -> " + to_string(to) +
                              " shape " + to_string(shape);
    const Tensor full = dtensor::testing::int_valued(shape, iter);
    EXPECT_TRUE(equal(distribute_tensor(full, mesh, plain).full_tensor(), full)) << where;
    const int root = mesh.ranks()[static_cast<size_t>(src)];
    EXPECT_TRUE(equal(distribute_tensor(full, mesh, plain, root).full_tensor(), full))
        << where << " from rank " << root;
    const DTensor x = make_dtensor(full, mesh, from, iter);
    const DTensor y = x.redistribute(to);
    EXPECT_EQ(y.placements(), y.spec().placements()) << where;
    EXPECT_TRUE(equal(y.full_tensor(), full)) << where;
    // Each shard is the box the layout gives it.
    for (const auto& [rank, t] : y.local().shards())
      EXPECT_EQ(t.shape(), y.spec().extent_of_rank(rank)->local_shape) << where;
  }
}

// Ops on ordered inputs equal the single-process result: a pointwise op
// (same layouts: the order is kept, no collective; mixed layouts), a
// matmul, a reduction and a view.
TEST_F(ShardOrderTest, OpsOnOrderedInputs) {
  std::mt19937 rng(77);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const int cases = dtensor::testing::property_cases(60);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape ms = meshes[static_cast<size_t>(iter) % meshes.size()];
    DeviceMesh mesh(world, ms);
    const int64_t m = 1 + rng() % 9, k = 1 + rng() % 9, n = 1 + rng() % 9;
    const Placements pa = random_shard_or_replicate(rng, mesh.ndim(), 2);
    const Placements pb = random_shard_or_replicate(rng, mesh.ndim(), 2);
    const Placements pc = random_shard_or_replicate(rng, mesh.ndim(), 2);
    // Every process draws the same numbers, whether it takes part or not.
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = mesh.to_string() + " " + to_string(pa) + " / " + to_string(pb) +
                              " m,k,n " + std::to_string(m) + "," + std::to_string(k) + "," +
                              std::to_string(n);
    const Tensor a = dtensor::testing::small_valued({m, k}, iter);
    const Tensor a2 = dtensor::testing::small_valued({m, k}, iter + 500);
    const Tensor b = dtensor::testing::small_valued({k, n}, iter + 1000);
    const DTensor da = distribute_tensor(a, mesh, pa);
    const DTensor da2 = distribute_tensor(a2, mesh, pa);
    const DTensor db = distribute_tensor(b, mesh, pb);
    {
      CommDebugMode comm;
      const DTensor s = add(da, da2);
      EXPECT_EQ(comm.total_count(), 0) << where << comm.table();
      EXPECT_EQ(s.placements(), da.placements()) << where;
      EXPECT_TRUE(equal(s.full_tensor(), add(a, a2))) << where;
    }
    const DTensor db2 =
        distribute_tensor(dtensor::testing::small_valued({m, k}, iter + 7), mesh, pc);
    EXPECT_TRUE(equal(mul(da, db2).full_tensor(),
                      mul(a, dtensor::testing::small_valued({m, k}, iter + 7))))
        << where;
    EXPECT_TRUE(allclose(matmul(da, db).full_tensor(), matmul(a, b), 1e-5, 1e-5)) << where;
    EXPECT_TRUE(allclose(sum(da, {0}).full_tensor(), sum(a, {0}), 1e-5, 1e-5)) << where;
    EXPECT_TRUE(allclose(sum(da).full_tensor(), sum(a), 1e-5, 1e-5)) << where;
    EXPECT_TRUE(equal(reshape(da, {m * k}).full_tensor(), a.reshape({m * k}))) << where;
    EXPECT_TRUE(equal(relu(da).full_tensor(), relu(a))) << where;
  }
}

// Gradients through redistribute between ordered layouts: the gradient of
// sum(redistribute(x) * w) is w, laid out as the source (its order kept).
TEST_F(ShardOrderTest, RedistributeGradientKeepsTheSourceOrder) {
  std::mt19937 rng(31);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const int cases = dtensor::testing::property_cases(60);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape ms = meshes[static_cast<size_t>(iter) % meshes.size()];
    DeviceMesh mesh(world, ms);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    const int64_t nd = static_cast<int64_t>(shape.size());
    const Placements from = random_shard_or_replicate(rng, mesh.ndim(), nd);
    const Placements to = random_shard_or_replicate(rng, mesh.ndim(), nd);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where =
        mesh.to_string() + " " + to_string(from) + " -> " + to_string(to) + " " + to_string(shape);
    const Tensor full = dtensor::testing::int_valued(shape, iter).to(DType::Float64);
    DTensor x = distribute_tensor(full, mesh, from);
    x.requires_grad_();
    const DTensor y = x.redistribute(to);
    const Tensor w = dtensor::testing::int_valued(shape, 100 + iter).to(DType::Float64);
    sum(mul(y, distribute_tensor(w, mesh, to))).backward();
    ASSERT_TRUE(x.grad().has_value()) << where;
    // (A no-op redistribute is x itself: its gradient is laid out by mul.)
    if (x.placements() != y.placements()) {
      EXPECT_EQ(x.grad()->placements(), x.placements()) << where;
    }
    EXPECT_TRUE(equal(x.grad()->full_tensor(), w)) << where;
  }
}
