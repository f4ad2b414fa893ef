// Tests of vector_norm and norm on plain tensors: hand-computed values for
// every kind of ord (2, 1, 0, inf, -inf, fractional, negative), NaN and inf
// elements, dims / keepdim / 0-d inputs, PyTorch's errors, then random
// inputs against a double reference loop.
//
// Tolerance: float64 within 1e-12 relative, float32 within 4 float32 ulps
// (the power sum accumulates in double, pow/sqrt add an ulp or two).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dtensor/tensor.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();
constexpr double kNaNNorm = std::numeric_limits<double>::quiet_NaN();

Tensor vec(std::vector<double> v) { return Tensor::from_vector(v); }

double norm_of(std::vector<double> v, double ord) {
  return vector_norm(vec(std::move(v)), ord).item<double>();
}

TEST(NormTensor, HandValuesOfEveryOrd) {
  const std::vector<double> x = {3, -4};
  EXPECT_DOUBLE_EQ(norm_of(x, 2), 5);
  EXPECT_DOUBLE_EQ(norm_of(x, 1), 7);
  EXPECT_DOUBLE_EQ(norm_of(x, kInfNorm), 4);
  EXPECT_DOUBLE_EQ(norm_of(x, -kInfNorm), 3);
  EXPECT_DOUBLE_EQ(norm_of(x, 0), 2);
  EXPECT_NEAR(norm_of(x, 3), 4.497941445275415, 1e-14);           // (27 + 64)^(1/3)
  EXPECT_NEAR(norm_of(x, -1), 12.0 / 7.0, 1e-14);                  // (1/3 + 1/4)^-1
  EXPECT_NEAR(norm_of(x, 0.5), 13.928203230275509, 1e-13);         // (sqrt 3 + 2)^2
  // Zeros: ord 0 counts the nonzeros; a negative ord or -inf gives 0.
  EXPECT_DOUBLE_EQ(norm_of({0, 2, 0}, 0), 1);
  EXPECT_DOUBLE_EQ(norm_of({0, 2, 0}, -1), 0);
  EXPECT_DOUBLE_EQ(norm_of({0, 2, 0}, -kInfNorm), 0);
  EXPECT_DOUBLE_EQ(norm_of({0, -0.0}, 0), 0);  // -0 is zero
  EXPECT_DOUBLE_EQ(norm_of({0, 0}, 2), 0);
}

TEST(NormTensor, NanAndInfElements) {
  EXPECT_TRUE(std::isnan(norm_of({1, kNaNNorm}, 2)));
  EXPECT_TRUE(std::isnan(norm_of({1, kNaNNorm}, kInfNorm)));
  EXPECT_TRUE(std::isnan(norm_of({1, kNaNNorm}, -kInfNorm)));
  EXPECT_TRUE(std::isnan(norm_of({kNaNNorm, 1}, 1)));
  EXPECT_DOUBLE_EQ(norm_of({1, kNaNNorm}, 0), 2);  // NaN is nonzero
  EXPECT_EQ(norm_of({-kInfNorm, 1}, 2), kInfNorm);
  EXPECT_EQ(norm_of({-kInfNorm, 1}, kInfNorm), kInfNorm);
  EXPECT_DOUBLE_EQ(norm_of({-kInfNorm, 1}, -kInfNorm), 1);
  EXPECT_DOUBLE_EQ(norm_of({-kInfNorm, 1}, -2), 1);  // (0 + 1)^(-1/2)
}

TEST(NormTensor, DimsKeepdimAndShapes) {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 2, 3, 0, 4}, Shape{2, 3});
  Tensor r = vector_norm(x, 2, {1});
  EXPECT_EQ(r.shape(), (Shape{2}));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{3, 5}));
  r = vector_norm(x, 2, {-1}, true);
  EXPECT_EQ(r.shape(), (Shape{2, 1}));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{3, 5}));
  r = vector_norm(x, 1, {-2});
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{4, 2, 6}));
  r = vector_norm(x, kInfNorm, {0}, true);
  EXPECT_EQ(r.shape(), (Shape{1, 3}));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{3, 2, 4}));
  r = vector_norm(x, 0, {0});
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{2, 1, 2}));
  // All dims, given or not, as if flattened.
  EXPECT_DOUBLE_EQ(vector_norm(x).item<double>(), std::sqrt(34.0));
  EXPECT_DOUBLE_EQ(vector_norm(x, 2, {1, 0}).item<double>(), std::sqrt(34.0));
  EXPECT_EQ(vector_norm(x, 2, {}, true).shape(), (Shape{1, 1}));
  // Non-contiguous input.
  EXPECT_EQ(vector_norm(x.t(), 1, {0}).to_vector<double>(), (std::vector<double>{5, 7}));
  // 0-d: |x| for every ord but 0; dim 0 and -1 accepted.
  const Tensor s = Tensor::scalar(-3.0);
  EXPECT_DOUBLE_EQ(vector_norm(s).item<double>(), 3);
  EXPECT_DOUBLE_EQ(vector_norm(s, -kInfNorm, {0}).item<double>(), 3);
  EXPECT_DOUBLE_EQ(vector_norm(s, 0, {-1}, true).item<double>(), 1);
  EXPECT_EQ(vector_norm(s, 2, {0}, true).dim(), 0);
  // Empty: sums give 0; inf over a non-empty dim of an empty tensor is fine.
  EXPECT_EQ(vector_norm(Tensor::zeros({0}, DType::Float32)).item<double>(), 0);
  EXPECT_EQ(vector_norm(Tensor::zeros({0, 3}, DType::Float64), 0, {0}).to_vector<double>(),
            (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(vector_norm(Tensor::zeros({0, 3}, DType::Float64), kInfNorm, {1}).shape(), (Shape{0}));
}

TEST(NormTensor, DtypeIsKept) {
  const Tensor x = Tensor::from_vector(std::vector<float>{3, -4});
  EXPECT_EQ(vector_norm(x).dtype(), DType::Float32);
  EXPECT_EQ(vector_norm(x, 0).dtype(), DType::Float32);
  EXPECT_EQ(vector_norm(x).item<float>(), 5.0f);
  EXPECT_EQ(vector_norm(x.to(DType::Float64), kInfNorm).dtype(), DType::Float64);
}

TEST(NormTensor, NormIsVectorNorm) {
  const Tensor x = Tensor::randn({3, 4, 5}, 7, 0, DType::Float64);
  for (double p : {2.0, 1.0, 0.0, kInfNorm, -kInfNorm, 3.5, -1.5})
    for (const DimVector& dims : {DimVector{}, DimVector{1}, DimVector{0, 2}})
      for (bool keepdim : {false, true})
        EXPECT_TRUE(equal(norm(x, p, dims, keepdim), vector_norm(x, p, dims, keepdim)))
            << "p " << p << " dims " << dims;
  EXPECT_DOUBLE_EQ(norm(vec({3, -4})).item<double>(), 5);
}

TEST(NormTensor, Errors) {
  const Tensor x = Tensor::zeros({2, 3}, DType::Float32);
  expect_error([&] { vector_norm(Tensor::zeros({2}, DType::Int64)); },
               {"vector_norm", "floating-point", "int64"});
  expect_error([&] { norm(Tensor::zeros({2}, DType::Bool), 1); }, {"norm", "bool"});
  expect_error([&] { vector_norm(x, 2, {2}); }, {"vector_norm", "2", "out of range"});
  expect_error([&] { vector_norm(x, 2, {-3}); }, {"vector_norm", "-3"});
  expect_error([&] { norm(x, 2, {1, -1}); }, {"norm", "dim 1", "more than once"});
  expect_error([&] { vector_norm(Tensor::scalar(1.0), 2, {1}); }, {"vector_norm", "out of range"});
  expect_error([&] { vector_norm(x, kNaNNorm); }, {"vector_norm", "nan"});
  expect_error([&] { vector_norm(Tensor::zeros({0}, DType::Float32), kInfNorm); },
               {"vector_norm", "inf norm", "empty dim 0", "[0]"});
  expect_error([&] { norm(Tensor::zeros({0, 3}, DType::Float64), -1, {0}); },
               {"norm", "-1 norm", "empty dim 0", "[0, 3]"});
  expect_error([&] { vector_norm(Tensor::zeros({2, 0}, DType::Float64), -kInfNorm); },
               {"vector_norm", "-inf norm", "empty dim 1"});
  expect_error([&] { vector_norm(Tensor()); }, {"vector_norm", "undefined"});
}

// The reference: (sum |x|^ord)^(1/ord) etc. in double over to_vector().
double reference_norm(const std::vector<double>& v, double ord) {
  if (std::isinf(ord)) {
    double m = ord > 0 ? 0 : kInfNorm;
    for (double a : v) m = ord > 0 ? std::max(m, std::fabs(a)) : std::min(m, std::fabs(a));
    return m;
  }
  double s = 0;
  for (double a : v) s += ord == 0 ? (a != 0) : std::pow(std::fabs(a), ord);
  return ord == 0 ? s : std::pow(s, 1 / ord);
}

TEST(NormTensor, RandomAgainstReference) {
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    const int64_t rows = 1 + rng() % 5, cols = 1 + rng() % 9;
    const DType dtype = rng() % 2 ? DType::Float32 : DType::Float64;
    const double ords[] = {2, 1, 0, kInfNorm, -kInfNorm, 3, 0.5, -1, 1.5, 4.25};
    const double ord = ords[rng() % 10];
    // Reduce over the columns of a (rows, cols) tensor, taken transposed
    // half of the time (non-contiguous).
    Tensor full = Tensor::randn({rows, cols}, 100 + i, 0, dtype);
    if (rng() % 4 == 0) full = masked_fill(full, lt(full, -0.8), 0.0);  // some zeros
    const bool transposed = rng() % 2;
    const Tensor x = transposed ? full.t().contiguous().t() : full;
    const Tensor got = vector_norm(x, ord, {1});
    const std::vector<double> values = full.to(DType::Float64).to_vector<double>();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(values.begin() + r * cols, values.begin() + (r + 1) * cols);
      const double want = reference_norm(row, ord);
      const double g = got.to(DType::Float64).to_vector<double>()[r];
      const double tol = dtype == DType::Float32 ? 4.8e-7 * std::fabs(want) : 1e-12 * std::fabs(want);
      EXPECT_NEAR(g, want, tol + 1e-300) << "ord " << ord << " row " << r << " of " << full;
    }
  }
}

}  // namespace
