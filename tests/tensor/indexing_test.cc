// Tests of clamp, tril/triu, gather, scatter, scatter_add, index_add and
// index_put (and the internal read x[indices]) on plain Tensors: values
// checked by hand (PyTorch's documentation examples where it has them),
// every dtype, NaN, duplicate and negative indices, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dtensor/tensor.h"
#include "tensor/indexing.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor f32_indexing(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor i64_indexing(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor i64_indexing(const std::vector<int64_t>& v) { return Tensor::from_vector(v); }

// Element-by-element equality, NaN equal to NaN.
void expect_values(const Tensor& got, const Shape& shape, const std::vector<double>& want) {
  ASSERT_EQ(got.shape(), shape);
  const std::vector<double> v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(v[i])) << "element " << i << " is " << v[i];
    else EXPECT_EQ(v[i], want[i]) << "element " << i;
  }
}

TEST(Clamp, BoundsAndNaN) {
  const Tensor x = f32_indexing({-2.5f, -1, 0, 1.5f, NAN, 3}, {2, 3});
  expect_values(clamp(x, -1, 1), {2, 3}, {-1, -1, 0, 1, kNaN, 1});
  expect_values(clamp_min(x, 0), {2, 3}, {0, 0, 0, 1.5, kNaN, 3});
  expect_values(clamp_max(x, 0), {2, 3}, {-2.5, -1, 0, 0, kNaN, 0});
  // min > max gives max everywhere (NaN stays NaN), as torch.clamp.
  expect_values(clamp(x, 2, 1), {2, 3}, {1, 1, 1, 1, kNaN, 1});
  // A NaN bound makes everything NaN.
  expect_values(clamp(x, kNaN), {2, 3}, {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN});
  EXPECT_EQ(clamp(x, -1, 1).dtype(), DType::Float32);
  // Non-contiguous input.
  expect_values(clamp(x.t(), 0, 2), {3, 2}, {0, 1.5, 0, kNaN, 0, 2});
}

TEST(Clamp, IntegerAndPromotion) {
  const Tensor x = i64_indexing({-5, 0, 7}, {3});
  const Tensor c = clamp(x, -1, 3);
  EXPECT_EQ(c.dtype(), DType::Int64);
  expect_values(c, {3}, {-1, 0, 3});
  // A floating bound promotes an int64 input to float32, as PyTorch does.
  const Tensor f = clamp_min(x, 0.5);
  EXPECT_EQ(f.dtype(), DType::Float32);
  expect_values(f, {3}, {0.5, 0.5, 7});
  expect_values(clamp(Tensor::from_vector(std::vector<double>{1e300, -3}), -1, 1), {2}, {1, -1});
  EXPECT_EQ(clamp(Tensor::zeros({2}, DType::Float64), 0, 1).dtype(), DType::Float64);
}

TEST(Clamp, Errors) {
  expect_error([] { clamp(Tensor::zeros({2}), std::nullopt, std::nullopt); },
               {"clamp", "at least one of min and max"});
  expect_error([] { clamp(Tensor::zeros({2}, DType::Bool), 0, 1); },
               {"clamp", "bool", "[2]"});
}

TEST(Triangle, TrilTriuOfARectangle) {
  const Tensor x = Tensor::arange(12).view({3, 4});
  expect_values(tril(x), {3, 4}, {0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0});
  expect_values(tril(x, 1), {3, 4}, {0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11});
  expect_values(tril(x, -1), {3, 4}, {0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0});
  expect_values(triu(x), {3, 4}, {0, 1, 2, 3, 0, 5, 6, 7, 0, 0, 10, 11});
  expect_values(triu(x, -1), {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11});
  expect_values(triu(x, 2), {3, 4}, {0, 0, 2, 3, 0, 0, 0, 7, 0, 0, 0, 0});
  EXPECT_EQ(tril(x).dtype(), DType::Int64);
  // Extreme diagonals keep everything or nothing (no overflow).
  EXPECT_TRUE(equal(tril(x, std::numeric_limits<int64_t>::max()), x));
  EXPECT_TRUE(equal(triu(x, std::numeric_limits<int64_t>::min()), x));
  EXPECT_TRUE(equal(tril(x, std::numeric_limits<int64_t>::min()), zeros_like(x)));
}

TEST(Triangle, BatchedBoolAndViews) {
  const Tensor x = Tensor::arange(8).view({2, 2, 2}).to(DType::Float64);
  expect_values(tril(x), {2, 2, 2}, {0, 0, 2, 3, 4, 0, 6, 7});
  expect_values(triu(x.transpose(1, 2)), {2, 2, 2}, {0, 2, 0, 3, 4, 6, 0, 7});
  const Tensor b = Tensor::ones({2, 3}, DType::Bool);
  const Tensor t = triu(b, 1);
  EXPECT_EQ(t.dtype(), DType::Bool);
  expect_values(t, {2, 3}, {0, 1, 1, 0, 0, 1});
  EXPECT_EQ(tril(Tensor::zeros({0, 3})).shape(), (Shape{0, 3}));
}

TEST(Triangle, Errors) {
  expect_error([] { tril(Tensor::zeros({3})); }, {"tril", "at least 2 dims", "[3]"});
  expect_error([] { triu(Tensor::scalar(1.0)); }, {"triu", "at least 2 dims"});
}

TEST(Gather, TorchExamples) {
  const Tensor x = f32_indexing({1, 2, 3, 4}, {2, 2});
  expect_values(gather(x, 1, i64_indexing({0, 0, 1, 0}, {2, 2})), {2, 2}, {1, 1, 4, 3});
  const Tensor y = f32_indexing({1, 2, 3, 4, 5, 6}, {3, 2});
  expect_values(gather(y, 0, i64_indexing({2, 0}, {1, 2})), {1, 2}, {5, 2});
  // The index may be smaller than x on the other dims; negative dim.
  const Tensor z = f32_indexing({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(gather(z, -1, i64_indexing({2, 0}, {2, 1})), {2, 1}, {3, 4});
  // Non-contiguous x, int64 and bool data, 0-d and empty.
  expect_values(gather(z.t(), 0, i64_indexing({1, 0}, {1, 2})), {1, 2}, {2, 4});
  expect_values(gather(Tensor::arange(5), 0, i64_indexing({4, 4, 0})), {3}, {4, 4, 0});
  expect_values(gather(gt(z, 3.0), 1, i64_indexing({0, 0}, {2, 1})), {2, 1}, {0, 1});
  expect_values(gather(Tensor::scalar(5.0), 0, Tensor::scalar(int64_t{0})), {}, {5});
  EXPECT_EQ(gather(z, 0, Tensor::zeros({0, 3}, DType::Int64)).shape(), (Shape{0, 3}));
}

TEST(Gather, Errors) {
  const Tensor z = Tensor::zeros({2, 3});
  expect_error([&] { gather(z, 1, i64_indexing({-1, 0}, {2, 1})); },
               {"gather", "index -1", "out of range", "dim 1", "size 3"});
  expect_error([&] { gather(z, 0, i64_indexing({2, 0}, {1, 2})); }, {"gather", "index 2", "size 2"});
  expect_error([&] { gather(z, 0, Tensor::zeros({1, 2})); }, {"gather", "int64", "float32"});
  expect_error([&] { gather(z, 0, i64_indexing({0, 0}, {2})); }, {"gather", "as many dims", "[2]"});
  expect_error([&] { gather(z, 0, Tensor::zeros({1, 4}, DType::Int64)); },
               {"gather", "index.size(1) = 4", "3"});
  expect_error([&] { gather(z, 2, Tensor::zeros({1, 1}, DType::Int64)); }, {"gather", "dim"});
}

TEST(Scatter, TorchExamplesAndDuplicates) {
  const Tensor src = Tensor::arange(1, 11).view({2, 5}).to(DType::Float32);
  expect_values(scatter(Tensor::zeros({3, 5}), 0, i64_indexing({0, 1, 2, 0}, {1, 4}), src), {3, 5},
                {1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0});
  expect_values(scatter(Tensor::zeros({3, 5}), 1, i64_indexing({0, 1, 2, 0, 1, 4}, {2, 3}), src), {3, 5},
                {1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0});
  // Duplicates: the last write in index order wins.
  expect_values(scatter(Tensor::zeros({4}), 0, i64_indexing({1, 1, 3}), f32_indexing({10, 20, 30}, {3})), {4},
                {0, 20, 0, 30});
  // A value; the input is not changed.
  const Tensor x = Tensor::zeros({2, 4});
  expect_values(scatter(x, 1, i64_indexing({2, 3}, {2, 1}), 1.5), {2, 4}, {0, 0, 1.5, 0, 0, 0, 0, 1.5});
  EXPECT_EQ(sum(x).item<double>(), 0);
  expect_values(scatter(Tensor::zeros({3}, DType::Int64), 0, i64_indexing({2}), 7), {3}, {0, 0, 7});
}

TEST(Scatter, AddAccumulatesInEveryDtype) {
  expect_values(scatter_add(Tensor::ones({5}), 0, i64_indexing({0, 1, 0, 4, 0}), f32_indexing({1, 2, 3, 4, 5}, {5})),
                {5}, {10, 3, 1, 1, 5});
  expect_values(scatter_add(Tensor::zeros({2, 2}, DType::Int64), 1, i64_indexing({1, 1, 0, 1}, {2, 2}),
                            i64_indexing({5, 6, 7, 8}, {2, 2})),
                {2, 2}, {0, 11, 7, 8});
  const Tensor b = scatter_add(Tensor::zeros({3}, DType::Bool), 0, i64_indexing({0, 0}),
                               Tensor::from_vector(std::vector<bool>{false, true}));
  EXPECT_EQ(b.dtype(), DType::Bool);
  expect_values(b, {3}, {1, 0, 0});
}

TEST(Scatter, Errors) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_error([&] { scatter(x, 0, i64_indexing({0}, {1, 1}), Tensor::zeros({1, 1}, DType::Float64)); },
               {"scatter", "src", "float32", "float64"});
  expect_error([&] { scatter_add(x, 0, i64_indexing({0, 0}, {1, 2}), Tensor::zeros({1, 1})); },
               {"scatter_add", "index.size(1) = 2", "src"});
  expect_error([&] { scatter(x, 0, i64_indexing({2}, {1, 1}), 1); }, {"scatter", "index 2", "size 2"});
  expect_error([&] { scatter(x, 0, i64_indexing({0, 0, 0, 0}, {1, 4}), 1); },
               {"scatter", "index.size(1) = 4"});
}

TEST(IndexAdd, TorchExampleAlphaAndDims) {
  const Tensor t = f32_indexing({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  expect_values(index_add(Tensor::ones({5, 3}), 0, i64_indexing({0, 4, 2}), t), {5, 3},
                {2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7});
  // Repeated indices add up; alpha scales the source.
  expect_values(index_add(Tensor::zeros({3}), 0, i64_indexing({0, 0, 2}), f32_indexing({1, 2, 3}, {3}), 2), {3},
                {6, 0, 6});
  expect_values(index_add(Tensor::zeros({2, 3}, DType::Int64), -1, i64_indexing({2, 0}),
                          i64_indexing({1, 2, 3, 4}, {2, 2})),
                {2, 3}, {2, 0, 1, 4, 0, 3});
  // A 0-d index picks one slice.
  expect_values(index_add(Tensor::zeros({2, 2}), 0, Tensor::scalar(int64_t{1}),
                          f32_indexing({5, 6}, {1, 2})),
                {2, 2}, {0, 0, 5, 6});
}

TEST(IndexAdd, Errors) {
  const Tensor x = Tensor::zeros({3, 2});
  expect_error([&] { index_add(x, 0, i64_indexing({0, 1}), Tensor::zeros({3, 2})); },
               {"index_add", "source must have shape [2, 2]", "[3, 2]"});
  expect_error([&] { index_add(x, 0, i64_indexing({0}, {1, 1}), Tensor::zeros({1, 2})); },
               {"index_add", "0-d or 1-d"});
  expect_error([&] { index_add(x, 0, i64_indexing({3}), Tensor::zeros({1, 2})); },
               {"index_add", "index 3", "size 3"});
  expect_error([&] { index_add(x, 0, i64_indexing({-1}), Tensor::zeros({1, 2})); },
               {"index_add", "index -1"});
  expect_error([] {
    index_add(Tensor::zeros({2}, DType::Int64), 0, i64_indexing({0}), Tensor::zeros({1}, DType::Int64), 0.5);
  }, {"index_add", "floating alpha", "int64"});
  expect_error([&] { index_add(x, 0, i64_indexing({0}), Tensor::zeros({1, 2}, DType::Float64)); },
               {"index_add", "dtype"});
}

TEST(IndexPut, PointsBroadcastAndSlices) {
  // x[[0, 2], [1, 2]] = [5, 6]
  expect_values(index_put(Tensor::zeros({3, 3}), {i64_indexing({0, 2}), i64_indexing({1, 2})}, f32_indexing({5, 6}, {2})),
                {3, 3}, {0, 5, 0, 0, 0, 0, 0, 0, 6});
  // Index tensors broadcast together ((2,1) with (2,)); a 0-d value broadcasts.
  expect_values(index_put(Tensor::zeros({3, 2}), {i64_indexing({0, 2}, {2, 1}), i64_indexing({0, 1})},
                          Tensor::scalar(7.0f)),
                {3, 2}, {7, 7, 0, 0, 7, 7});
  // x[:, [2, 0]] = [[1, 2], [3, 4]]
  expect_values(index_put(Tensor::zeros({2, 3}), {std::nullopt, i64_indexing({2, 0})},
                          f32_indexing({1, 2, 3, 4}, {2, 2})),
                {2, 3}, {2, 0, 1, 4, 0, 3});
  // x[[1], :, [3]] = [[1, 2, 3]]: separated index dims go first.
  const Tensor y = index_put(Tensor::zeros({2, 3, 4}), {i64_indexing({1}), std::nullopt, i64_indexing({3})},
                             f32_indexing({1, 2, 3}, {1, 3}));
  EXPECT_EQ(sum(y).item<double>(), 6);
  EXPECT_EQ(y.select(0, 1).select(1, 3).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  // Negative indices count from the end.
  expect_values(index_put(Tensor::zeros({3}), {i64_indexing({-1})}, f32_indexing({4}, {1})), {3}, {0, 0, 4});
}

TEST(IndexPut, DuplicatesAccumulateAndMasks) {
  const Tensor idx = i64_indexing({0, 0, 2});
  const Tensor v = f32_indexing({1, 2, 3}, {3});
  expect_values(index_put(Tensor::zeros({3}), {idx}, v, true), {3}, {3, 0, 3});
  expect_values(index_put(Tensor::zeros({3}), {idx}, v, false), {3}, {2, 0, 3});
  expect_values(index_put(Tensor::ones({3}, DType::Int64), {idx}, i64_indexing({1, 2, 3}), true), {3},
                {4, 1, 4});
  // A bool mask stands for its nonzero positions.
  const Tensor x = Tensor::arange(4).view({2, 2}).to(DType::Float32);
  const Tensor mask = Tensor::from_vector(std::vector<bool>{true, false, false, true}, Shape{2, 2});
  expect_values(index_put(x, {mask}, f32_indexing({9, 8}, {2})), {2, 2}, {9, 1, 2, 8});
  expect_values(index_put(x, {std::nullopt, Tensor::from_vector(std::vector<bool>{false, true})},
                          Tensor::scalar(5.0f)),
                {2, 2}, {0, 5, 2, 5});
}

TEST(IndexPut, Errors) {
  const Tensor x = Tensor::zeros({3, 2});
  expect_error([&] { index_put(x, {i64_indexing({3})}, f32_indexing({1}, {1})); },
               {"index_put", "index 3", "out of range", "dim 0", "size 3"});
  expect_error([&] { index_put(x, {i64_indexing({0}), i64_indexing({0}), i64_indexing({0})}, f32_indexing({1}, {1})); },
               {"index_put", "too many indices", "[3, 2]"});
  expect_error([&] { index_put(x, {i64_indexing({0, 1})}, f32_indexing({1, 2, 3}, {3})); },
               {"index_put", "[3]", "do not broadcast", "[2, 2]"});
  expect_error([&] { index_put(x, {i64_indexing({0})}, Tensor::zeros({1}, DType::Float64)); },
               {"index_put", "dtype", "float64"});
  expect_error([&] { index_put(x, {Tensor::zeros({1})}, f32_indexing({1}, {1})); },
               {"index_put", "int64 or bool", "float32"});
  expect_error([&] { index_put(x, {i64_indexing({0, 1}), i64_indexing({0, 1, 0})}, f32_indexing({1}, {1})); },
               {"[2]", "[3]"});
  expect_error([&] {
    index_put(x, {Tensor::from_vector(std::vector<bool>{true, false})}, f32_indexing({1}, {1}));
  }, {"index_put", "bool index", "[2]"});
}

TEST(IndexGet, ReadsWhatIndexPutWrites) {
  const Tensor x = Tensor::arange(24).view({2, 3, 4});
  const Tensor a = detail::index_get(x, {i64_indexing({1, 0}), std::nullopt, i64_indexing({3, 0})});
  expect_values(a, {2, 3}, {15, 19, 23, 0, 4, 8});
  const Tensor b = detail::index_get(x, {std::nullopt, i64_indexing({2, 0}, {2, 1}), i64_indexing({1, 2})});
  expect_values(b, {2, 2, 2}, {9, 10, 1, 2, 21, 22, 13, 14});
}

}  // namespace
