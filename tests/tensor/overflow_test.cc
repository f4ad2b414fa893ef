// Tests of the size arithmetic: every element count, stride, offset and byte
// count that would overflow int64 is a dtensor::Error naming the op and the
// values, never a wrapped size (a too-small block and a corrupted heap), and
// allocations beyond physical memory are refused before they are made.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "dtensor/tensor.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t k2to32 = int64_t{1} << 32;
}  // namespace

TEST(CheckedArithmetic, MulAndAddThrowNamingTheOperands) {
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x"), int64_t{1} << 62);
  EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(checked_bytes(kMax / 8, 8, "x"), kMax / 8 * 8);
  expect_error([] { checked_mul(k2to32, k2to32, "the count"); },
               {"the count", "4294967296 * 4294967296", "overflows int64"});
  expect_error([] { checked_add(kMax, 1, "the sum"); }, {"the sum", "+ 1", "overflows int64"});
  expect_error([] { checked_bytes(kMax / 4, 8, "bytes"); }, {"bytes", "overflows int64"});
  expect_error([] { checked_mul(std::numeric_limits<int64_t>::min(), -1, "negation"); },
               {"negation", "overflows"});
}

TEST(CheckedArithmetic, NumelOfShapes) {
  EXPECT_EQ(checked_numel({}, "op"), 1);
  EXPECT_EQ(checked_numel({k2to32, 2}, "op"), int64_t{1} << 33);
  // An empty dim makes the product 0 even when the other dims would overflow.
  EXPECT_EQ(checked_numel({k2to32, k2to32, 0}, "op"), 0);
  EXPECT_EQ((Shape{k2to32, k2to32, 0}).product(), 0);
  expect_error([] { checked_numel({k2to32, k2to32}, "myop"); },
               {"myop", "[4294967296, 4294967296]", "more elements than int64"});
  expect_error([] { checked_numel({4, -3}, "myop"); }, {"myop", "negative size -3", "dim 1"});
  expect_error([] { (Shape{k2to32, k2to32}).product(); },
               {"product of [4294967296, 4294967296]", "overflows int64"});
  expect_error([] { contiguous_strides({2, k2to32, k2to32}); }, {"contiguous strides", "overflows"});
}

TEST(TensorOverflow, CreationOfHugeShapesThrows) {
  // Once a segfault: the wrapped size allocated 0 bytes and memset wrote 2^64.
  expect_error([] { Tensor::zeros({k2to32, k2to32}); },
               {"zeros", "[4294967296, 4294967296]", "more elements than int64"});
  expect_error([] { Tensor::empty({k2to32, k2to32}); }, {"empty", "more elements than int64"});
  expect_error([] { Tensor::ones({kMax, 2}); }, {"ones", "more elements than int64"});
  expect_error([] { Tensor::full({3, kMax}, 1.5); }, {"full", "more elements than int64"});
  expect_error([] { Tensor::randn({k2to32, k2to32}, 1); }, {"randn", "more elements"});
  expect_error([] { Tensor::rand({k2to32, k2to32}, 1); }, {"rand", "more elements"});
  expect_error([] { Tensor::randint(0, 5, {k2to32, k2to32}, 1); }, {"randint", "more elements"});
  // Elements fit, bytes do not: 2^62 float32 elements are 2^64 bytes.
  expect_error([] { Tensor::empty({int64_t{1} << 62}); }, {"empty", "bytes", "overflows int64"});
  expect_error([] { Tensor::zeros({int64_t{1} << 61}, DType::Float64); },
               {"zeros", "bytes", "overflows int64"});
  expect_error([] { Tensor::arange(0, 1e19, 1); }, {"arange", "more elements than int64"});
}

TEST(TensorOverflow, NegativeSizesAreRefused) {
  expect_error([] { Tensor::empty({2, -1}); }, {"empty", "negative size -1", "[2, -1]"});
  expect_error([] { Tensor::zeros({-5}); }, {"zeros", "negative size -5"});
  expect_error([] { Tensor::ones({3, -2}); }, {"ones", "negative size -2"});
  expect_error([] { Tensor::full({-1}, 0); }, {"full", "negative size"});
  expect_error([] { Tensor::randn({-4}, 1); }, {"randn", "negative size"});
  expect_error([] { Tensor::rand({2, -4}, 1); }, {"rand", "negative size"});
  expect_error([] { Tensor::randint(0, 3, {-4}, 1); }, {"randint", "negative size"});
}

TEST(TensorOverflow, AllocationBeyondPhysicalMemoryIsRefused) {
  const size_t physical = physical_memory_bytes();
  ASSERT_GT(physical, size_t{0});
  EXPECT_LE(available_memory_bytes(), physical);
  // 2^45 float32 elements = 128 TiB: representable, but no machine here has it.
  if (physical < (size_t{1} << 47)) {
    expect_error([] { Tensor::empty({int64_t{1} << 45}); },
                 {"out of memory", "140737488355328 bytes", "physical memory", "available"});
    expect_error([] { Storage s(size_t{1} << 50); }, {"out of memory", "physical memory"});
  }
}

TEST(TensorOverflow, ViewsAndReshapes) {
  const Tensor x = Tensor::zeros({4, 6});
  // The known product of the target shape overflows before any -1 is solved.
  expect_error([&] { x.view({k2to32, k2to32, -1}); }, {"view", "more elements than int64"});
  expect_error([&] { x.reshape({k2to32, k2to32, 0}); }, {"reshape", "invalid for input"});
  expect_error([&] { x.view({kMax, 2}); }, {"view", "more elements than int64"});
  expect_error([&] { x.reshape({-2, 12}); }, {"reshape", "invalid size -2"});
  // Expanding size-1 dims to sizes whose product overflows.
  const Tensor one = Tensor::zeros({1, 1});
  expect_error([&] { one.expand({k2to32, k2to32}); }, {"more elements than int64"});
  expect_error([&] { one.expand({kMax, 2}); }, {"more elements than int64"});
  expect_error([&] { one.expand({3, -5}); }, {"expand", "invalid size -5"});
  expect_error([&] { one.expand({-3, 1, 1}); }, {"expand", "size -3"});
  // A big but representable expand is a view: stride 0, no copy.
  const Tensor big = one.expand({k2to32, k2to32 / 4});
  EXPECT_EQ(big.numel(), int64_t{1} << 62);
  EXPECT_EQ(big.strides(), (Shape{0, 0}));
  // Unsqueeze/flatten of it keep working (strides stay 0, products fit).
  EXPECT_EQ(big.unsqueeze(0).shape(), (Shape{1, k2to32, k2to32 / 4}));
  expect_error([&] { big.expand({4, k2to32, k2to32 / 4}); }, {"more elements than int64"});
}

TEST(TensorOverflow, SlicesNarrowsAndSplitsWithHugeArguments) {
  const Tensor x = Tensor::arange(10);
  // A step near INT64_MAX once overflowed (end - start + step - 1).
  const Tensor s = x.slice(0, 1, 10, kMax);
  EXPECT_EQ(s.shape(), (Shape{1}));
  EXPECT_EQ(s.item<int64_t>(), 1);
  EXPECT_EQ(x.slice(0, 0, kMax, 3).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 9}));
  expect_error([&] { x.narrow(0, 5, kMax); }, {"narrow", "exceeds dim 0"});
  expect_error([&] { x.narrow(0, 0, -1); }, {"narrow"});
  EXPECT_EQ(x.split(kMax).size(), 1u);
  expect_error([&] { x.split_with_sizes({5, -2, 7}, 0); }, {"split_with_sizes", "negative size -2"});
  expect_error([&] { x.split_with_sizes({kMax, kMax}, 0); },
               {"split_with_sizes", "overflows int64"});
}

TEST(TensorOverflow, ChunkOfLongExpandedDims) {
  // chunk() on a dim near INT64_MAX: ceil(L / n) once computed L + n - 1.
  const Tensor big = Tensor::zeros({1}).expand({kMax});
  const std::vector<Tensor> parts = big.chunk(4);
  ASSERT_EQ(parts.size(), 4u);
  int64_t total = 0;
  for (const Tensor& p : parts) total += p.size(0);
  EXPECT_EQ(total, kMax);
  EXPECT_EQ(parts[0].size(0), kMax / 4 + 1);
  EXPECT_EQ(parts[3].size(0), kMax - 3 * (kMax / 4 + 1));
}

TEST(TensorOverflow, CatOfHugeViewsThrows) {
  const Tensor big = Tensor::zeros({1}).expand({kMax - 1});
  expect_error([&] { cat({big, big}); }, {"cat", "overflows int64"});
}

TEST(TensorOverflow, ViewsOutsideTheStorageAreRefused) {
  auto storage = std::make_shared<Storage>(16 * sizeof(float));
  EXPECT_NO_THROW(Tensor(storage, DType::Float32, {4, 4}, {4, 1}, 0));
  expect_error([&] { Tensor(storage, DType::Float32, {4, 4}, {4, 1}, 1); },
               {"reaches elements 1 to 16", "storage holds 16"});
  expect_error([&] { Tensor(storage, DType::Float32, {2, k2to32}, {k2to32, 1}, 0); },
               {"storage holds 16"});
  expect_error([&] { Tensor(storage, DType::Float32, {k2to32, k2to32}, {k2to32, 1}, 0); },
               {"more elements than int64"});
  expect_error([&] { Tensor(storage, DType::Float32, {3, 2}, {kMax, 1}, 0); },
               {"view extent", "overflows int64"});
  expect_error([&] { Tensor(storage, DType::Float32, {2}, {-1}, 0); }, {"reaches elements -1"});
  // Empty views need no storage at all.
  EXPECT_NO_THROW(Tensor(storage, DType::Float32, {0, k2to32}, {k2to32, 1}, 0));
}

TEST(TensorOverflow, BroadcastResultsThatOverflowThrow) {
  const Tensor a = Tensor::zeros({1}).expand({k2to32}).reshape({k2to32, 1});
  const Tensor b = Tensor::zeros({1}).expand({k2to32}).reshape({1, k2to32});
  expect_error([&] { add(a, b); }, {"more elements than int64"});
}

TEST(TensorOverflow, EmptyTensorsWithHugeDims) {
  // [0, 2^63-1] is empty, but its stride 2^63-1 overflows once counted in
  // bytes: the loops must not compute byte strides of tensors they never read.
  const Tensor e = Tensor::zeros({0, kMax});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes(), 0u);
  EXPECT_EQ(add(e, e).shape(), e.shape());
  EXPECT_EQ(e.clone().shape(), e.shape());
  EXPECT_EQ(e.to(DType::Float64).shape(), e.shape());
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  // Reducing the empty dim leaves 2^63-1 zeros: too many bytes, refused.
  expect_error([&] { sum(e, {0}); }, {"overflows int64"});
  Tensor f = Tensor::zeros({0, kMax});
  f.add_(1.0);
  EXPECT_EQ(sum(e).item<double>(), 0.0);
  EXPECT_FALSE(to_string(e).empty());
}
