// Tests of softmax, log_softmax, layer_norm, rms_norm, nll_loss and
// cross_entropy: hand-computed values, numerical edge cases (huge logits,
// -inf masks, NaN, the vectorised float32 exp over its whole range), errors,
// and every op against a double-precision reference loop over to_vector() on
// random inputs of several shapes, dims and layouts.
//
// Tolerances (|got - ref| against the double reference):
//   softmax float32: 4e-6 * |ref| + 1e-9 (exp is < 1 ulp; x - max rounds)
//   log_softmax / layer_norm / rms_norm / losses float32: 4e-6 * (1 + |ref|)
//   float64 everywhere: 1e-12 * (1 + |ref|)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

constexpr double kNaNNn = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfNn = std::numeric_limits<double>::infinity();

// Relative-plus-absolute check; `rel_only` uses the softmax-style bound.
void expect_near_all(const Tensor& got, const Shape& shape, const std::vector<double>& ref,
                     const std::string& what, bool softmax_bound = false) {
  ASSERT_EQ(got.shape(), shape) << what;
  const auto v = got.to_vector<double>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  const bool f32 = got.dtype() == DType::Float32;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(ref[i])) {
      ASSERT_TRUE(std::isnan(v[i])) << what << ": element " << i << " is " << v[i];
      continue;
    }
    if (std::isinf(ref[i])) {
      ASSERT_EQ(v[i], ref[i]) << what << ": element " << i;
      continue;
    }
    const double a = std::fabs(ref[i]);
    const double tol = !f32 ? 1e-12 * (1 + a) : softmax_bound ? 4e-6 * a + 1e-9 : 4e-6 * (1 + a);
    ASSERT_LE(std::fabs(v[i] - ref[i]), tol)
        << what << ": element " << i << " is " << v[i] << ", expected " << ref[i];
  }
}

Tensor scaled_randn(const Shape& s, uint64_t seed, double scale, DType dtype) {
  auto v = Tensor::randn(s, seed, 0, DType::Float64).to_vector<double>();
  for (double& e : v) e *= scale;
  return Tensor::from_vector(v, s).to(dtype);
}

// (outer, len, inner) split of a row-major shape around dim d.
struct Split {
  int64_t outer = 1, len = 1, inner = 1;
};
Split split_at(const Shape& s, int64_t d) {
  Split sp;
  for (int64_t k = 0; k < static_cast<int64_t>(s.size()); ++k) {
    if (k < d) sp.outer *= s[k];
    else if (k == d) sp.len = s[k];
    else sp.inner *= s[k];
  }
  return sp;
}

// Reference softmax / log_softmax along dim d in double.
std::vector<double> ref_softmax(const Tensor& x, int64_t d, bool log) {
  const auto v = x.to_vector<double>();
  std::vector<double> out(v.size());
  const int64_t nd = x.dim();
  const Split sp = split_at(x.shape(), nd == 0 ? 0 : (d < 0 ? d + nd : d));
  for (int64_t o = 0; o < sp.outer; ++o) {
    for (int64_t j = 0; j < sp.inner; ++j) {
      auto at = [&](int64_t k) { return static_cast<size_t>((o * sp.len + k) * sp.inner + j); };
      double m = -kInfNn;
      bool nan = false;
      for (int64_t k = 0; k < sp.len; ++k) {
        nan |= std::isnan(v[at(k)]);
        m = std::max(m, v[at(k)]);
      }
      double s = 0;
      for (int64_t k = 0; k < sp.len; ++k) s += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < sp.len; ++k) {
        const double z = v[at(k)] - m;
        out[at(k)] = nan ? kNaNNn : log ? z - std::log(s) : std::exp(z) / s;
      }
    }
  }
  return out;
}

std::vector<double> ref_norm(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b,
                             double eps, bool rms) {
  const auto v = x.to_vector<double>();
  const auto wv = w.defined() ? w.to_vector<double>() : std::vector<double>(n, 1.0);
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>(n, 0.0);
  std::vector<double> out(v.size());
  for (size_t r = 0; n > 0 && r < v.size() / static_cast<size_t>(n); ++r) {
    const double* row = v.data() + r * n;
    double mu = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) mu += row[i];
    mu /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) sq += rms ? row[i] * row[i] : (row[i] - mu) * (row[i] - mu);
    sq /= static_cast<double>(n);
    const double centre = rms ? 0.0 : mu;
    for (int64_t i = 0; i < n; ++i)
      out[r * n + i] = (row[i] - centre) / std::sqrt(sq + eps) * wv[i] + bv[i];
  }
  return out;
}

// The layouts a test input comes in: contiguous, transposed, stepped slice.
std::vector<Tensor> layouts_of(const Shape& shape, uint64_t seed, double scale, DType dtype) {
  std::vector<Tensor> out = {scaled_randn(shape, seed, scale, dtype)};
  const size_t n = shape.size();
  if (n >= 2) {
    Shape p = shape;
    std::swap(p[0], p[n - 1]);
    out.push_back(scaled_randn(p, seed + 1, scale, dtype).transpose(0, -1));
  }
  if (n >= 1) {
    Shape p = shape;
    p[n - 1] = 2 * shape[n - 1];
    out.push_back(scaled_randn(p, seed + 2, scale, dtype).slice(-1, 0, p[n - 1], 2));
  }
  return out;
}

// Reference per-element nll: input (N, C, S) row-major after contiguous.
struct RefLoss {
  std::vector<double> per_element;
  double sum = 0;
  int64_t count = 0;
};
RefLoss ref_nll(const Tensor& log_probs, const Tensor& target, int64_t ignore_index) {
  const auto x = log_probs.to_vector<double>();
  const auto t = target.to_vector<int64_t>();
  const Shape& s = log_probs.shape();
  const int64_t c = s.size() == 1 ? s[0] : s[1];
  int64_t spatial = 1;
  for (size_t k = 2; k < s.size(); ++k) spatial *= s[k];
  RefLoss r;
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i) / spatial, sp = static_cast<int64_t>(i) % spatial;
    double l = 0;
    if (t[i] != ignore_index) {
      l = -x[static_cast<size_t>((b * c + t[i]) * spatial + sp)];
      r.sum += l;
      ++r.count;
    }
    r.per_element.push_back(l);
  }
  return r;
}

// Targets in [0, C) with roughly one in five set to ignore_index.
Tensor random_targets(const Shape& shape, int64_t classes, uint64_t seed, int64_t ignore_index) {
  auto t = Tensor::randint(0, classes, shape, seed).to_vector<int64_t>();
  const auto coin = Tensor::randint(0, 5, shape, seed + 99).to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (coin[i] == 0) t[i] = ignore_index;
  return Tensor::from_vector(t, shape);
}

}  // namespace

// ---- softmax ---------------------------------------------------------------------------

TEST(NN, SoftmaxHandComputed) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3});
  // e^k / (e + e^2 + e^3)
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expect_near_all(softmax(x, 0), {3}, {std::exp(1.0) / s, std::exp(2.0) / s, std::exp(3.0) / s},
                  "softmax", true);
  expect_near_all(log_softmax(x, -1), {3}, {1 - std::log(s), 2 - std::log(s), 3 - std::log(s)},
                  "log_softmax");
  // Over dim 0 of a 2x2: columns normalise independently.
  const Tensor y = Tensor::from_vector(std::vector<double>{0, 1, 0, 3}, Shape{2, 2});
  const double a = 1 / (1 + std::exp(2.0));
  expect_near_all(softmax(y, 0), {2, 2}, {0.5, a, 0.5, 1 - a}, "softmax dim 0");
  // A 0-d tensor is a row of one: softmax 1, log_softmax 0.
  EXPECT_EQ(softmax(Tensor::scalar(3.0f), 0).item<float>(), 1.0f);
  EXPECT_EQ(log_softmax(Tensor::scalar(3.0), -1).item<double>(), 0.0);
}

TEST(NN, SoftmaxMatchesReference) {
  const std::vector<Shape> shapes = {{7}, {1}, {4, 9}, {3, 1, 5}, {2, 3, 4}, {5, 40},
                                     {2, 130}, {3, 17, 6}, {1, 1}, {2, 3, 4, 5}};
  int cases = 0;
  uint64_t seed = 1;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Shape& shape : shapes) {
      for (const Tensor& x : layouts_of(shape, seed += 3, 4.0, dt)) {
        const int64_t nd = x.dim();
        for (int64_t d = -nd; d < nd; ++d) {
          const std::string what = "of " + to_string(shape) + " " + dtype_name(dt) + " dim " +
                                   std::to_string(d) + (x.is_contiguous() ? "" : " strided");
          const Tensor y = softmax(x, d);
          EXPECT_EQ(y.dtype(), dt);
          expect_near_all(y, shape, ref_softmax(x, d, false), "softmax " + what, true);
          expect_near_all(log_softmax(x, d), shape, ref_softmax(x, d, true),
                          "log_softmax " + what);
          // Each normalised line sums to 1.
          const auto total = sum(y, {d}).to_vector<double>();
          for (double t : total) EXPECT_NEAR(t, 1.0, dt == DType::Float32 ? 1e-5 : 1e-12);
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

TEST(NN, SoftmaxNumericalEdgeCases) {
  // Huge logits: max subtraction keeps it finite and shift-invariant.
  const Tensor big = Tensor::from_vector(std::vector<float>{1000, 1001, 1002});
  const Tensor small = Tensor::from_vector(std::vector<float>{0, 1, 2});
  EXPECT_LE(max_abs_diff(softmax(big, 0), softmax(small, 0)), 1e-7);
  EXPECT_LE(max_abs_diff(log_softmax(big, 0), log_softmax(small, 0)), 1e-6);
  const Tensor neg = Tensor::from_vector(std::vector<float>{-1000, -1001});
  EXPECT_FALSE(std::isnan(softmax(neg, 0).to_vector<double>()[1]));

  // -inf entries (attention masks) give exactly 0, also along a column.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor masked =
      Tensor::from_vector(std::vector<float>{0, -inf, 0, 5, -inf, 5}, Shape{2, 3});
  const auto m = softmax(masked, 1).to_vector<float>();
  EXPECT_EQ(m[1], 0.0f);
  EXPECT_EQ(m[4], 0.0f);
  EXPECT_FLOAT_EQ(m[0], 0.5f);
  EXPECT_FLOAT_EQ(m[5], 0.5f);
  EXPECT_EQ(log_softmax(masked, 1).to_vector<float>()[1], -inf);
  EXPECT_EQ(softmax(masked.t().contiguous(), 0).to_vector<float>()[2], 0.0f);

  // A NaN poisons its own line only (as in PyTorch); an all -inf line is NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor bad =
      Tensor::from_vector(std::vector<float>{1, nan, 2, 1, 2, 3, -inf, -inf, -inf}, Shape{3, 3});
  const auto b = softmax(bad, 1).to_vector<float>();
  for (int i : {0, 1, 2, 6, 7, 8}) EXPECT_TRUE(std::isnan(b[i])) << i;
  for (int i : {3, 4, 5}) EXPECT_FALSE(std::isnan(b[i])) << i;
  const auto bc = softmax(bad.t(), 0).to_vector<float>();  // same through the column path
  for (int i : {0, 3, 6, 2, 5, 8}) EXPECT_TRUE(std::isnan(bc[i])) << i;
  EXPECT_FALSE(std::isnan(bc[1]));

  // Empty dims: an empty result of the same shape.
  EXPECT_EQ(softmax(Tensor::zeros({0, 5}), 1).shape(), (Shape{0, 5}));
  EXPECT_EQ(log_softmax(Tensor::zeros({3, 0}), 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(softmax(Tensor::zeros({3, 0, 2}), 0).shape(), (Shape{3, 0, 2}));
}

TEST(NN, Float32ExpIsAccurateOverItsRange) {
  // Rows [0, v]: softmax[1] = e^v / (1 + e^v). 200k values of v from -103 to
  // 88 feed the vectorised exp every argument in [-103, 0] it sees in
  // softmax (x - max <= 0), denormal results included: within 3e-7 relative
  // for normal results (exp < 1 ulp, plus the division and the final scale),
  // two denormal steps below.
  const int64_t n = 200000;
  std::vector<float> v(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    v[2 * i] = 0;
    v[2 * i + 1] = static_cast<float>(-103.0 + 191.0 * static_cast<double>(i) / (n - 1));
  }
  const auto y = softmax(Tensor::from_vector(v, Shape{n, 2}), 1).to_vector<float>();
  int checked = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = v[2 * i + 1];
    // softmax of [0, x] computed stably in double
    const double ref = x <= 0 ? std::exp(x) / (1 + std::exp(x)) : 1 / (1 + std::exp(-x));
    const double got = y[2 * i + 1];
    const double tol = ref < std::numeric_limits<float>::min()
                           ? 2 * std::numeric_limits<float>::denorm_min()
                           : 3e-7 * ref;
    ASSERT_LE(std::fabs(got - ref), tol) << "v = " << x;
    ++checked;
  }
  EXPECT_EQ(checked, n);
}

TEST(NN, SoftmaxErrors) {
  const Tensor i = Tensor::randint(0, 5, {2, 3}, 1);
  expect_error([&] { softmax(i, 1); }, {"softmax", "int64", "floating"});
  expect_error([&] { log_softmax(i.to(DType::Bool), 0); }, {"log_softmax", "bool"});
  const Tensor x = Tensor::randn({2, 3}, 1);
  expect_error([&] { softmax(x, 2); }, {"softmax", "out of range"});
  expect_error([&] { log_softmax(x, -3); }, {"log_softmax", "out of range"});
}

// ---- layer_norm / rms_norm -----------------------------------------------------------

TEST(NN, LayerNormHandComputed) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 2, 2, 2, 2}, Shape{2, 4});
  const double sd = std::sqrt(1.25 + 1e-5);  // biased variance of 1..4 is 1.25
  expect_near_all(layer_norm(x, {4}), {2, 4},
                  {-1.5 / sd, -0.5 / sd, 0.5 / sd, 1.5 / sd, 0, 0, 0, 0}, "layer_norm");
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4});
  const Tensor b = Tensor::from_vector(std::vector<float>{0, 0, 0, 10});
  expect_near_all(layer_norm(x, {4}, w, b), {2, 4},
                  {-1.5 / sd, -1.0 / sd, 1.5 / sd, 6 / sd + 10, 0, 0, 0, 10}, "layer_norm affine");
  // normalized over both dims of a 2x2 block
  const Tensor y = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, Shape{1, 2, 2});
  const double sd64 = std::sqrt(1.25 + 1e-3);
  expect_near_all(layer_norm(y, {2, 2}, Tensor(), Tensor(), 1e-3), {1, 2, 2},
                  {-1.5 / sd64, -0.5 / sd64, 0.5 / sd64, 1.5 / sd64}, "layer_norm 2 dims");
}

TEST(NN, LayerNormMatchesReference) {
  struct Case {
    Shape shape;
    Shape normalized;
  };
  const std::vector<Case> cases = {{{4, 9}, {9}},          {{2, 3, 5}, {5}},
                                   {{2, 3, 5}, {3, 5}},    {{6}, {6}},
                                   {{3, 1}, {1}},          {{2, 3, 200}, {200}},
                                   {{0, 4}, {4}},          {{2, 2, 3, 4}, {2, 3, 4}}};
  uint64_t seed = 10;
  int count = 0;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      const int64_t n = c.normalized.product();
      const Tensor w = scaled_randn(c.normalized, seed++, 1.0, dt);
      const Tensor b = scaled_randn(c.normalized, seed++, 1.0, dt);
      for (const Tensor& x : layouts_of(c.shape, seed += 3, 3.0, dt)) {
        // shift so the mean is far from 0 (checks the centring)
        auto v = x.to_vector<double>();
        for (double& e : v) e += 5;
        const Tensor xs = Tensor::from_vector(v, c.shape).to(dt);
        for (const Tensor& in : {x, xs}) {
          const std::string what = "layer_norm of " + to_string(c.shape) + " over " +
                                   to_string(c.normalized) + " " + dtype_name(dt);
          expect_near_all(layer_norm(in, c.normalized), c.shape,
                          ref_norm(in, n, Tensor(), Tensor(), 1e-5, false), what);
          expect_near_all(layer_norm(in, c.normalized, w, b, 1e-3), c.shape,
                          ref_norm(in, n, w, b, 1e-3, false), what + " affine");
          expect_near_all(layer_norm(in, c.normalized, w), c.shape,
                          ref_norm(in, n, w, Tensor(), 1e-5, false), what + " weight only");
          ++count;
        }
      }
    }
  }
  EXPECT_GT(count, 30);
}

TEST(NN, LayerNormEpsMattersForSmallVariance) {
  // Spread 1e-3 (variance 1e-6) against eps 1e-5: the eps term dominates, so
  // adding it anywhere but under the square root, or dropping it, fails.
  const Tensor x = scaled_randn({4, 64}, 3, 1e-3, DType::Float64);
  expect_near_all(layer_norm(x, {64}), {4, 64}, ref_norm(x, 64, Tensor(), Tensor(), 1e-5, false),
                  "small variance");
  const auto y = layer_norm(x, {64}).to_vector<double>();
  double ss = 0;
  for (double e : y) ss += e * e;
  EXPECT_LT(ss / 256, 0.2);  // far from unit variance, because of eps
}

TEST(NN, RmsNormMatchesReference) {
  uint64_t seed = 40;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Shape& shape : {Shape{4, 16}, Shape{2, 3, 40}, Shape{5}, Shape{0, 3}}) {
      const Shape ns{shape.back()};
      const Tensor w = scaled_randn(ns, seed++, 1.0, dt);
      for (const Tensor& x : layouts_of(shape, seed += 3, 2.0, dt)) {
        const double eps = dt == DType::Float32 ? std::numeric_limits<float>::epsilon()
                                                : std::numeric_limits<double>::epsilon();
        const std::string what = "rms_norm of " + to_string(shape) + " " + dtype_name(dt);
        expect_near_all(rms_norm(x, ns), shape, ref_norm(x, ns[0], Tensor(), Tensor(), eps, true),
                        what);
        expect_near_all(rms_norm(x, ns, w, 0.25), shape,
                        ref_norm(x, ns[0], w, Tensor(), 0.25, true), what + " eps 0.25");
      }
    }
  }
  // Two trailing dims.
  const Tensor x = scaled_randn({3, 4, 5}, 9, 1.0, DType::Float64);
  expect_near_all(rms_norm(x, {4, 5}), {3, 4, 5},
                  ref_norm(x, 20, Tensor(), Tensor(), std::numeric_limits<double>::epsilon(), true),
                  "rms_norm over 2 dims");
}

TEST(NN, RmsNormDefaultEpsIsMachineEpsilon) {
  // mean(x^2) = 1e-8 for float32, comparable to FLT_EPSILON (1.19e-7): a
  // default of 1e-5 or 1e-6 would give a visibly different scale.
  const Tensor x32 = Tensor::full({1, 8}, 1e-4f, DType::Float32);
  const double expected32 = 1e-4 / std::sqrt(1e-8 + std::numeric_limits<float>::epsilon());
  EXPECT_NEAR(rms_norm(x32, {8}).to_vector<double>()[0], expected32, 4e-6 * expected32);
  // mean(x^2) = 1e-16 for float64 against DBL_EPSILON (2.2e-16).
  const Tensor x64 = Tensor::full({2, 3}, 1e-8, DType::Float64);
  const double expected64 = 1e-8 / std::sqrt(1e-16 + std::numeric_limits<double>::epsilon());
  EXPECT_NEAR(rms_norm(x64, {3}).to_vector<double>()[5], expected64, 1e-12 * expected64);
}

TEST(NN, NormErrors) {
  const Tensor x = Tensor::randn({2, 3, 4}, 1);
  expect_error([&] { layer_norm(x, {3}); }, {"layer_norm", "[3]", "[2, 3, 4]"});
  expect_error([&] { layer_norm(x, {2, 3, 4, 5}); }, {"layer_norm", "[2, 3, 4, 5]"});
  expect_error([&] { layer_norm(x, {}); }, {"layer_norm", "normalized_shape"});
  expect_error([&] { layer_norm(x, {4}, Tensor::ones({3})); }, {"layer_norm", "weight", "[3]"});
  expect_error([&] { layer_norm(x, {3, 4}, Tensor(), Tensor::ones({4})); },
               {"layer_norm", "bias", "[4]", "[3, 4]"});
  expect_error([&] { layer_norm(Tensor::randint(0, 3, {2, 4}, 1), {4}); },
               {"layer_norm", "int64"});
  expect_error([&] { rms_norm(x, {3, 3}); }, {"rms_norm", "[3, 3]", "[2, 3, 4]"});
  expect_error([&] { rms_norm(x, {4}, Tensor::ones({5})); }, {"rms_norm", "weight"});
}

// ---- losses ----------------------------------------------------------------------------

TEST(NN, NllLossHandComputed) {
  const Tensor lp =
      Tensor::from_vector(std::vector<float>{-1, -2, -3, -0.5, -1.5, -2.5}, Shape{2, 3});
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{2, 0});
  EXPECT_FLOAT_EQ(nll_loss(lp, t).item<float>(), 1.75f);
  EXPECT_FLOAT_EQ(nll_loss(lp, t, Reduction::Sum).item<float>(), 3.5f);
  const Tensor none = nll_loss(lp, t, Reduction::None);
  EXPECT_EQ(none.shape(), (Shape{2}));
  EXPECT_EQ(none.dtype(), DType::Float32);
  EXPECT_EQ(none.to_vector<float>(), (std::vector<float>{3, 0.5}));
  EXPECT_EQ(nll_loss(lp, t).shape(), Shape{});

  // ignore_index: not summed and not counted by Mean.
  const Tensor ti = Tensor::from_vector(std::vector<int64_t>{2, -100});
  EXPECT_FLOAT_EQ(nll_loss(lp, ti).item<float>(), 3.0f);
  EXPECT_EQ(nll_loss(lp, ti, Reduction::None).to_vector<float>(), (std::vector<float>{3, 0}));
  const Tensor tc = Tensor::from_vector(std::vector<int64_t>{1, 0});
  EXPECT_FLOAT_EQ(nll_loss(lp, tc, Reduction::Mean, 1).item<float>(), 0.5f);
  // All ignored: Mean is 0/0 = NaN (as in PyTorch), Sum is 0.
  const Tensor all = Tensor::from_vector(std::vector<int64_t>{-100, -100});
  EXPECT_TRUE(std::isnan(nll_loss(lp, all).item<double>()));
  EXPECT_EQ(nll_loss(lp, all, Reduction::Sum).item<double>(), 0.0);

  // (C) input with a 0-d target.
  const Tensor one = Tensor::from_vector(std::vector<double>{-1, -2, -3});
  EXPECT_EQ(nll_loss(one, Tensor::scalar(int64_t{1})).item<double>(), 2.0);
  EXPECT_EQ(nll_loss(one, Tensor::scalar(int64_t{2}), Reduction::None).shape(), Shape{});
}

TEST(NN, NllLossMatchesReference) {
  struct Case {
    Shape input;
    Shape target;
  };
  const std::vector<Case> cases = {{{6, 4}, {6}},         {{5}, {}},
                                   {{3, 4, 5}, {3, 5}},   {{2, 3, 4, 2}, {2, 4, 2}},
                                   {{0, 3}, {0}},         {{7, 1}, {7}}};
  uint64_t seed = 70;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      const int64_t classes = c.input.size() == 1 ? c.input[0] : c.input[1];
      for (const Tensor& lp : layouts_of(c.input, seed += 3, 2.0, dt)) {
        for (int64_t ignore : {int64_t{-100}, int64_t{0}}) {
          const Tensor t = random_targets(c.target, classes, seed++, ignore);
          const RefLoss r = ref_nll(lp, t, ignore);
          const std::string what = "nll_loss of " + to_string(c.input) + " " + dtype_name(dt);
          expect_near_all(nll_loss(lp, t, Reduction::None, ignore), c.target, r.per_element, what);
          expect_near_all(nll_loss(lp, t, Reduction::Sum, ignore), {}, {r.sum}, what + " sum");
          expect_near_all(nll_loss(lp, t, Reduction::Mean, ignore), {},
                          {r.sum / static_cast<double>(r.count)}, what + " mean");
        }
      }
    }
  }
}

TEST(NN, CrossEntropyMatchesReference) {
  struct Case {
    Shape input;
    Shape target;
  };
  const std::vector<Case> cases = {{{6, 4}, {6}},       {{5}, {}},         {{3, 4, 5}, {3, 5}},
                                   {{2, 300}, {2}},     {{0, 3}, {0}},     {{4, 1}, {4}},
                                   {{2, 3, 2, 2}, {2, 2, 2}}};
  uint64_t seed = 90;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      const int64_t nd = static_cast<int64_t>(c.input.size());
      const int64_t class_dim = nd == 1 ? 0 : 1;
      const int64_t classes = c.input[class_dim];
      for (const Tensor& logits : layouts_of(c.input, seed += 3, 3.0, dt)) {
        const Tensor t = random_targets(c.target, classes, seed++, -100);
        // reference: nll over a double log_softmax computed independently
        const auto ls = ref_softmax(logits, class_dim, true);
        const Tensor ls_t = Tensor::from_vector(ls, c.input);
        const RefLoss r = ref_nll(ls_t, t, -100);
        const std::string what = "cross_entropy of " + to_string(c.input) + " " + dtype_name(dt);
        const Tensor none = cross_entropy(logits, t, Reduction::None);
        expect_near_all(none, c.target, r.per_element, what);
        expect_near_all(cross_entropy(logits, t, Reduction::Sum), {}, {r.sum}, what + " sum");
        expect_near_all(cross_entropy(logits, t), {}, {r.sum / static_cast<double>(r.count)},
                        what + " mean");
        // The fused (N, C) path does the same arithmetic as the composition.
        EXPECT_EQ(none.to_vector<double>(),
                  nll_loss(log_softmax(logits, class_dim), t, Reduction::None).to_vector<double>())
            << what;
      }
    }
  }
}

TEST(NN, CrossEntropyLargeLogits) {
  // Naive exp would overflow; the stable form gives the exact answer.
  const Tensor logits = Tensor::from_vector(std::vector<float>{1000, 0, -1000, 1000}, Shape{2, 2});
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 1});
  EXPECT_EQ(cross_entropy(logits, t, Reduction::None).to_vector<float>(),
            (std::vector<float>{1000, 0}));
  EXPECT_EQ(cross_entropy(logits, t, Reduction::Mean).item<float>(), 500.0f);
}

TEST(NN, LossErrors) {
  const Tensor lp = Tensor::randn({2, 3}, 1);
  expect_error([&] { nll_loss(lp, Tensor::from_vector(std::vector<int64_t>{0, 3})); },
               {"nll_loss", "target 3", "[0, 3)"});
  expect_error([&] { nll_loss(lp, Tensor::from_vector(std::vector<int64_t>{-1, 0})); },
               {"nll_loss", "target -1"});
  expect_error(
      [&] { cross_entropy(lp, Tensor::from_vector(std::vector<int64_t>{7, 0})); },
      {"cross_entropy", "target 7"});
  // An out-of-range target is an error even under Reduction::None, and -100
  // stops being special when ignore_index is something else.
  const Tensor minus100 = Tensor::from_vector(std::vector<int64_t>{-100, 0});
  expect_error([&] { nll_loss(lp, minus100, Reduction::None, 5); }, {"nll_loss", "target -100"});
  expect_error([&] { nll_loss(lp, Tensor::from_vector(std::vector<int64_t>{0, 1, 2})); },
               {"nll_loss", "[3]", "[2, 3]"});
  expect_error([&] { nll_loss(lp, Tensor::from_vector(std::vector<float>{0, 1})); },
               {"nll_loss", "int64", "float32"});
  const Tensor zeros2 = Tensor::zeros({2}, DType::Int64);
  expect_error([&] { nll_loss(Tensor::randint(0, 3, {2, 3}, 1), zeros2); },
               {"nll_loss", "floating"});
  expect_error([&] { nll_loss(Tensor::randn({3}, 1), Tensor::zeros({1}, DType::Int64)); },
               {"nll_loss", "0-d"});
  const Tensor zeros23 = Tensor::zeros({2, 3}, DType::Int64);
  expect_error([&] { cross_entropy(Tensor::randn({2, 3, 4}, 1), zeros23); },
               {"cross_entropy", "[2, 3]", "[2, 4]"});
  expect_error([&] { cross_entropy(Tensor::scalar(1.0), Tensor::scalar(int64_t{0})); },
               {"cross_entropy", "[]"});
}
