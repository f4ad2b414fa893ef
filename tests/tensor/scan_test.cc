// Tests of cumsum, sort, topk, logsumexp, all and any on plain tensors:
// hand-computed values (ties, NaN, infinities, empty and 0-d inputs,
// dtypes, non-contiguous inputs), errors, and sort/topk against a stable
// reference sort on random inputs full of ties. Also the internal
// take_along_dim / scatter_add_along_dim kernels the DTensor ops use.
//
// Tolerance: logsumexp within 1e-6 relative (float32) of the value worked
// by hand; everything else exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "dtensor/tensor.h"
#include "tensor/scan.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

constexpr double kNaNScan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfScan = std::numeric_limits<double>::infinity();

Tensor i64_scan(const std::vector<int64_t>& v, Shape shape) { return Tensor::from_vector(v, shape); }
Tensor f32_scan(const std::vector<float>& v, Shape shape) { return Tensor::from_vector(v, shape); }

// ---- cumsum ------------------------------------------------------------------------

TEST(ScanCumsum, IntegersAlongEachDim) {
  const Tensor x = i64_scan({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(cumsum(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(cumsum(x, -1).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(cumsum(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(cumsum(x, 0).dtype(), DType::Int64);
  // Non-contiguous: the transpose's dim 0 is x's dim 1.
  EXPECT_EQ(cumsum(x.t(), 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 3, 9, 6, 15}));
}

TEST(ScanCumsum, DtypesNaNAndWrapping) {
  const Tensor b = Tensor::from_vector(std::vector<bool>{true, false, true});
  EXPECT_EQ(cumsum(b, 0).dtype(), DType::Int64);
  EXPECT_EQ(cumsum(b, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2}));
  const Tensor f = Tensor::from_vector(std::vector<double>{0.5, kNaNScan, 1});
  const std::vector<double> got = cumsum(f, 0).to_vector<double>();
  EXPECT_EQ(cumsum(f, 0).dtype(), DType::Float64);
  EXPECT_EQ(got[0], 0.5);
  EXPECT_TRUE(std::isnan(got[1]) && std::isnan(got[2]));
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(cumsum(i64_scan({big, 1}, {2}), 0).to_vector<int64_t>(),
            (std::vector<int64_t>{big, std::numeric_limits<int64_t>::min()}));
  // float32 accumulates in double: 2^24 + 1 + 1 is exact there, not in float.
  const Tensor g = f32_scan({16777216.0f, 1.0f, 1.0f}, {3});
  EXPECT_EQ(cumsum(g, 0).to_vector<float>()[2], 16777218.0f);
}

TEST(ScanCumsum, EmptyZeroDimAndErrors) {
  EXPECT_EQ(cumsum(Tensor::zeros({0, 3}), 1).shape(), (Shape{0, 3}));
  const Tensor s = cumsum(Tensor::scalar(int64_t{3}), -1);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item<int64_t>(), 3);
  expect_error([] { cumsum(Tensor::zeros({2, 3}), 2); }, {"cumsum", "2"});
  expect_error([] { cumsum(Tensor::scalar(1.0), 1); }, {"cumsum"});
  EXPECT_EQ(detail::reverse_cumsum(i64_scan({1, 2, 3}, {3}), 0).to_vector<int64_t>(),
            (std::vector<int64_t>{6, 5, 3}));
}

// ---- sort / topk ---------------------------------------------------------------------

TEST(ScanSort, TiesKeepTheLowerIndexFirst) {
  const Tensor x = i64_scan({3, 1, 2, 1}, {4});
  auto [v, i] = sort(x);
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2, 3}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 2, 0}));
  auto [vd, id] = sort(x, 0, /*descending=*/true);
  EXPECT_EQ(vd.to_vector<int64_t>(), (std::vector<int64_t>{3, 2, 1, 1}));
  EXPECT_EQ(id.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(i.dtype(), DType::Int64);
}

TEST(ScanSort, NaNSortsAboveEverything) {
  const Tensor x = f32_scan({2, static_cast<float>(kNaNScan), static_cast<float>(-kInfScan), 1}, {4});
  auto [v, i] = sort(x);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 0, 1}));
  EXPECT_EQ(v.to_vector<float>()[0], -kInfScan);
  EXPECT_TRUE(std::isnan(v.to_vector<float>()[3]));
  auto [vd, id] = sort(x, -1, true);
  EXPECT_EQ(id.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, 2}));
  EXPECT_TRUE(std::isnan(vd.to_vector<float>()[0]));
}

TEST(ScanSort, AlongDimZeroBoolAndZeroDim) {
  auto [v, i] = sort(i64_scan({3, 1, 1, 2}, {2, 2}), 0);
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 3, 2}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  auto [bv, bi] = sort(Tensor::from_vector(std::vector<bool>{true, false, true}));
  EXPECT_EQ(bv.to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(bi.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 2}));
  auto [sv, si] = sort(Tensor::scalar(2.5));
  EXPECT_EQ(sv.shape(), Shape{});
  EXPECT_EQ(sv.item<double>(), 2.5);
  EXPECT_EQ(si.item<int64_t>(), 0);
  EXPECT_EQ(sort(Tensor::zeros({3, 0})).values.shape(), (Shape{3, 0}));
  expect_error([] { sort(Tensor::zeros({2}), 1); }, {"sort"});
}

TEST(ScanTopk, LargestSmallestTiesAndNaN) {
  const Tensor x = i64_scan({1, 3, 3, 2}, {4});
  auto [v, i] = topk(x, 2);
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  auto [sv, si] = topk(x, 2, 0, /*largest=*/false);
  EXPECT_EQ(sv.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(si.to_vector<int64_t>(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(topk(x, 0).values.shape(), Shape{0});
  const Tensor n = Tensor::from_vector(std::vector<double>{1, kNaNScan, 3});
  EXPECT_EQ(topk(n, 1).indices.item<int64_t>(), 1);
  EXPECT_EQ(topk(n, 3, 0, false).indices.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1}));
  // Along dim 0 of a 2-d tensor.
  auto [cv, ci] = topk(i64_scan({1, 5, 4, 2, 3, 9}, {3, 2}), 2, 0);
  EXPECT_EQ(cv.to_vector<int64_t>(), (std::vector<int64_t>{4, 9, 3, 5}));
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 2, 0}));
  expect_error([&] { topk(x, 5); }, {"topk", "k = 5", "size 4"});
  expect_error([&] { topk(x, -1); }, {"topk", "k = -1"});
  expect_error([&] { topk(x, 1, 2); }, {"topk"});
}

// sort and topk against std::stable_sort of each row, on random rows with
// many ties and some NaNs, along every dim of 1-3 dim shapes, transposed too.
TEST(ScanSort, MatchesAStableReferenceSort) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 60; ++iter) {
    Shape shape;
    const int nd = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < nd; ++k) shape.push_back(rng() % 6);
    Tensor x = Tensor::randint(-3, 3, shape, iter).to(DType::Float64);
    x = masked_fill(x, eq(x, 2), kNaNScan);
    if (nd >= 2 && iter % 2) x = x.transpose(0, nd - 1);
    const int64_t d = static_cast<int64_t>(rng() % static_cast<unsigned>(nd));
    const bool desc = rng() % 2;
    const int64_t n = x.shape()[d];
    const int64_t k = n == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<unsigned>(n + 1));
    const auto [v, i] = sort(x, d, desc);
    const auto [tv, ti] = topk(x, k, d, desc);
    // The reference: move dim d last, sort each row of the contiguous copy.
    const Tensor moved = x.transpose(d, nd - 1).contiguous();
    const std::vector<double> rows = moved.to_vector<double>();
    const std::vector<int64_t> got = i.transpose(d, nd - 1).contiguous().to_vector<int64_t>();
    const std::vector<int64_t> got_k = ti.transpose(d, nd - 1).contiguous().to_vector<int64_t>();
    const std::vector<double> got_v = v.transpose(d, nd - 1).contiguous().to_vector<double>();
    for (int64_t r = 0; n > 0 && r < static_cast<int64_t>(rows.size()) / n; ++r) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), int64_t{0});
      auto key = [&](int64_t j) {
        const double e = rows[static_cast<size_t>(r * n + j)];
        return std::isnan(e) ? kInfScan * 2 : e;  // NaN above +inf; ties stay equal
      };
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return desc ? key(a) > key(b) : key(a) < key(b);
      });
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(got[static_cast<size_t>(r * n + j)], order[static_cast<size_t>(j)])
            << "shape " << x.shape() << " dim " << d << " row " << r;
        const double want = rows[static_cast<size_t>(r * n + order[static_cast<size_t>(j)])];
        const double have = got_v[static_cast<size_t>(r * n + j)];
        ASSERT_TRUE(std::isnan(want) ? std::isnan(have) : have == want);
        if (j < k) {
          ASSERT_EQ(got_k[static_cast<size_t>(r * k + j)], order[static_cast<size_t>(j)]);
        }
      }
    }
  }
}

// ---- logsumexp -------------------------------------------------------------------------

TEST(ScanLogsumexp, ValuesAndInfinities) {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 0, 0, 0}, Shape{2, 3});
  const std::vector<double> got = logsumexp(x, {1}).to_vector<double>();
  EXPECT_NEAR(got[0], 3.40760596444438, 1e-12);
  EXPECT_NEAR(got[1], std::log(3.0), 1e-12);
  EXPECT_NEAR(logsumexp(x, {}).item<double>(), std::log(std::exp(1) + std::exp(2) + std::exp(3) + 3),
              1e-12);
  EXPECT_EQ(logsumexp(x, {0}, true).shape(), (Shape{1, 3}));
  // Stable: exp(1000) overflows float32, the max-subtracted form does not.
  const Tensor big = f32_scan({1000, 1000}, {2});
  EXPECT_NEAR(logsumexp(big, {0}).item<double>(), 1000 + std::log(2.0), 1e-3);
  const Tensor inf = Tensor::from_vector(std::vector<double>{-kInfScan, -kInfScan, 1, kInfScan, 0, kNaNScan},
                                         Shape{3, 2});
  const std::vector<double> r = logsumexp(inf, {-1}).to_vector<double>();
  EXPECT_EQ(r[0], -kInfScan);
  EXPECT_EQ(r[1], kInfScan);
  EXPECT_TRUE(std::isnan(r[2]));
}

TEST(ScanLogsumexp, DtypesEmptyAndErrors) {
  const Tensor ints = i64_scan({0, 0}, {2});
  EXPECT_EQ(logsumexp(ints, {0}).dtype(), DType::Float32);
  EXPECT_NEAR(logsumexp(ints, {0}).item<double>(), std::log(2.0), 1e-6);
  const Tensor e = logsumexp(Tensor::zeros({2, 0}), {1});
  EXPECT_EQ(e.shape(), Shape{2});
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{-INFINITY, -INFINITY}));
  EXPECT_EQ(logsumexp(Tensor::zeros({0, 2}), {1}).shape(), Shape{0});
  EXPECT_NEAR(logsumexp(Tensor::scalar(1.5), {}).item<double>(), 1.5, 1e-12);
  expect_error([] { logsumexp(Tensor::zeros({2, 3}), {1, -1}); },
               {"logsumexp", "more than once"});
  expect_error([] { logsumexp(Tensor::zeros({2, 3}), {2}); }, {"logsumexp"});
}

// ---- all / any ---------------------------------------------------------------------------

TEST(ScanLogical, AllAndAnyOverDims) {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 0, 2, 3}, Shape{2, 2});
  EXPECT_EQ(all(x, {1}).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(any(x, {1}).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(all(x, {0}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_FALSE(all(x).item<bool>());
  EXPECT_TRUE(any(x).item<bool>());
  EXPECT_EQ(all(x).dtype(), DType::Bool);
  EXPECT_EQ(any(x, {-1}, true).shape(), (Shape{2, 1}));
  EXPECT_FALSE(any(Tensor::zeros({3}, DType::Int64)).item<bool>());
  // NaN is nonzero; so is -0.0 not.
  EXPECT_TRUE(all(Tensor::from_vector(std::vector<double>{kNaNScan, 1})).item<bool>());
  EXPECT_FALSE(any(Tensor::from_vector(std::vector<double>{-0.0, 0.0})).item<bool>());
  const Tensor b = Tensor::from_vector(std::vector<bool>{true, true, false}, Shape{3});
  EXPECT_FALSE(all(b).item<bool>());
  EXPECT_TRUE(any(b).item<bool>());
}

TEST(ScanLogical, EmptySlicesAndErrors) {
  EXPECT_EQ(all(Tensor::zeros({2, 0}), {1}).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(any(Tensor::zeros({2, 0}), {1}).to_vector<bool>(), (std::vector<bool>{false, false}));
  EXPECT_TRUE(all(Tensor::zeros({0})).item<bool>());
  EXPECT_TRUE(all(Tensor::scalar(int64_t{4}), {0}).item<bool>());
  expect_error([] { all(Tensor::zeros({2}), {1}); }, {"all"});
  expect_error([] { any(Tensor::zeros({2, 2}), {0, 0}); }, {"any", "more than once"});
}

// ---- the internal gather / scatter -------------------------------------------------------

TEST(ScanInternal, TakeAndScatterAlongDim) {
  const Tensor x = i64_scan({10, 11, 12, 20, 21, 22}, {2, 3});
  const Tensor idx = i64_scan({2, 0, 1, 1}, {2, 2});
  const Tensor t = detail::take_along_dim(x, idx, 1);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{12, 10, 21, 21}));
  const Tensor s = detail::scatter_add_along_dim(t, idx, 1, {2, 3});
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{10, 0, 12, 0, 42, 0}));
  expect_error([&] { detail::take_along_dim(x, i64_scan({3}, {1, 1}).expand({2, 1}), 1); },
               {"take_along_dim", "out of range"});
}

}  // namespace
