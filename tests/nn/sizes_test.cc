// Modules and factories check every size before they allocate anything
// (check_allocation): a refused construction leaves the allocator untouched,
// instead of filling a bias (and its replicas) only to drop it when the
// weight turns out too big.
#include <gtest/gtest.h>

#include "dtensor/models/gpt.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"
#include "tensor/allocator.h"
#include "test_util.h"

namespace dtensor {
namespace {

using testing::expect_error;

// Blocks handed out by the allocator so far (cache hits and system calls).
uint64_t allocations() {
  const detail::AllocatorStats s = detail::allocator_stats();
  return s.hits + s.misses;
}

// fn() throws a dtensor::Error with every piece, having allocated nothing.
void expect_refused_without_allocating(const std::function<void()>& fn,
                                       const std::vector<std::string>& pieces) {
  const uint64_t before = allocations();
  expect_error(fn, pieces);
  EXPECT_EQ(allocations(), before) << "tensors were allocated before the refusal";
}

struct SizesTest : ::testing::Test {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}, {"dp", "tp"}};
};

TEST_F(SizesTest, LinearChecksTheWeightBeforeMakingTheBias) {
  // 2^42 floats for the weight: too big for any machine; the bias is tiny.
  expect_refused_without_allocating([&] { nn::Linear(mesh, int64_t{1} << 40, 4); },
                                    {"Linear(in_features=1099511627776, out_features=4)",
                                     "weight", "nothing was allocated"});
  // More elements than int64 counts.
  expect_refused_without_allocating([&] { nn::Linear(mesh, int64_t{1} << 40, int64_t{1} << 40); },
                                    {"Linear(in_features=", "weight", "int64"});
  expect_refused_without_allocating([&] { nn::Linear(mesh, 0, 4); },
                                    {"Linear: in_features must be positive, got 0"});
}

TEST_F(SizesTest, LinearFromTensorsChecksTheBiasBeforeRegisteringTheWeight) {
  const Tensor w = Tensor::randn({3, 5}, 1), b = Tensor::randn({4}, 2);
  expect_refused_without_allocating([&] { nn::Linear(mesh, w, b); },
                                    {"Linear: bias must be (out) = (3)", "[4]"});
}

TEST_F(SizesTest, EmbeddingAndLayerNormFromSizesCheckFirst) {
  expect_refused_without_allocating([&] { nn::Embedding(mesh, int64_t{1} << 40, 64); },
                                    {"Embedding(num_embeddings=1099511627776", "weight",
                                     "nothing was allocated"});
  expect_refused_without_allocating([&] { nn::LayerNorm(mesh, int64_t{1} << 61); },
                                    {"LayerNorm(2305843009213693952)", "weight"});
  nn::Embedding emb(mesh, 10, 4, 3);
  EXPECT_TRUE(equal(emb.weight().full_tensor(), Tensor::randn({10, 4}, 3)));
  nn::LayerNorm ln(mesh, 6);
  EXPECT_TRUE(equal(ln.weight().full_tensor(), Tensor::ones({6})));
  EXPECT_TRUE(equal(ln.bias().full_tensor(), Tensor::zeros({6})));
  expect_refused_without_allocating([&] { nn::RMSNorm(mesh, int64_t{1} << 61); },
                                    {"RMSNorm(2305843009213693952)", "weight"});
  nn::RMSNorm rms(mesh, 6);
  EXPECT_TRUE(equal(rms.weight().full_tensor(), Tensor::ones({6})));
}

TEST_F(SizesTest, GPTChecksEveryParameterBeforeTheFirst) {
  // The position table comes first and is small; the token table is not.
  models::GPTConfig c{.batch = 1, .seq = 4, .hidden = 8, .heads = 2, .layers = 1,
                      .vocab = int64_t{1} << 40};
  expect_refused_without_allocating([&] { models::GPT(mesh, c); },
                                    {"GPT", "tok.weight", "nothing was allocated"});
  c.vocab = 16;
  c.hidden = int64_t{1} << 62;
  c.heads = 1;
  expect_refused_without_allocating([&] { models::GPT(mesh, c); }, {"GPT", "4 x hidden"});
}

TEST_F(SizesTest, ReplicasOfOneRankEachCountTowardTheLimit) {
  // A quarter of the machine's memory per rank fits one rank but not the
  // four ranks this process holds. empty() would not touch the pages, so
  // without the check this "succeeded" on an overcommitting kernel.
  const int64_t quarter = static_cast<int64_t>(physical_memory_bytes() / 4 / 4) + 1024;
  const Placements r{Replicate(), Replicate()};
  expect_refused_without_allocating([&] { empty({quarter}, mesh, r); },
                                    {"empty", "rank 3", "nothing was allocated"});
  expect_refused_without_allocating([&] { zeros({quarter}, mesh, r); }, {"zeros", "rank 3"});
  expect_refused_without_allocating([&] { rand({quarter}, mesh, r, 1); }, {"rand", "rank 3"});
  // Sharded over all four ranks it fits (and is not made here).
  const Tensor small = rand({8, 4}, mesh, {Shard(0), Shard(1)}, 5).full_tensor();
  EXPECT_TRUE(equal(small, Tensor::rand({8, 4}, 5)));
}

TEST(CheckAllocation, NamesTheTensorAndCountsCopies) {
  expect_error([] { check_allocation("op", {{"a", {-1, 2}}}); }, {"op: a", "negative size -1"});
  expect_error([] { check_allocation("op", {{"b", {int64_t{1} << 62}, DType::Float64}}); },
               {"op: b", "bytes"});
  // Nothing is allocated here: only counted.
  const int64_t half = static_cast<int64_t>(physical_memory_bytes() / 2) + 1;
  check_allocation("op", {{"c", {half}, DType::Bool}});
  expect_error([&] { check_allocation("op", {{"c", {half}, DType::Bool, 2}}); },
               {"op: c", "x 2 copies", "nothing was allocated"});
  expect_error(
      [&] { check_allocation("op", {{"c", {half}, DType::Bool}, {"d", {half}, DType::Bool}}); },
      {"op: d", "with the tensors before it", "nothing was allocated"});
}

}  // namespace
}  // namespace dtensor
