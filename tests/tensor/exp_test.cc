// float32 exp (and sigmoid, built on it) through the vectorised polynomial
// (src/tensor/row_math.h, exp_f32) against double exp: every float in
// windows around the places where the result changes regime (1, the
// smallest normal result, the smallest denormal, overflow) and a strided
// sample of the rest of [-110, 90]; the special values; and the same bits
// from the vector loop, its scalar tail and the strided walk, on every
// SIMD level and thread count. Likewise float32 erf (erf_f32), which GELU
// uses, tanh (tanh_f32; GELU's tanh form) and log (log_f32).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/threads.h"
#include "tensor/row_math.h"
#include "tensor/simd.h"
#include "tensor/simd_threads.h"

using namespace dtensor;

namespace {

using ExpF32Levels = dtensor::testing::ThreadsAndSimdTest;

// x moved `k` floats along the number line (k may be negative; zero counts
// once).
float step_from(float x, int64_t k) {
  for (; k > 0; --k) x = std::nextafter(x, std::numeric_limits<float>::infinity());
  for (; k < 0; ++k) x = std::nextafter(x, -std::numeric_limits<float>::infinity());
  return x;
}

// "" if exp(x) computed as `got` is within 1 ulp of double exp (exactly 0 or
// inf where the correctly rounded float is), else a description.
std::string check(float x, float got) {
  const double ref = std::exp(static_cast<double>(x));
  const float rounded = static_cast<float>(ref);
  auto fail = [&] {
    return "exp(" + std::to_string(x) + ") = " + std::to_string(got) + ", expected " +
           std::to_string(ref);
  };
  if (std::isnan(x)) return std::isnan(got) ? "" : fail();
  if (rounded == 0.0f || std::isinf(rounded)) return got == rounded ? "" : fail();
  const double ulp =
      std::nextafter(rounded, std::numeric_limits<float>::infinity()) - static_cast<double>(rounded);
  return std::abs(static_cast<double>(got) - ref) <= ulp ? "" : fail();
}

void expect_within_an_ulp(const std::vector<float>& xs) {
  const std::vector<float> got = exp(Tensor::from_vector(xs)).to_vector<float>();
  ASSERT_EQ(got.size(), xs.size());
  int failures = 0;
  for (size_t i = 0; i < xs.size() && failures < 10; ++i) {
    const std::string bad = check(xs[i], got[i]);
    if (!bad.empty()) {
      ADD_FAILURE() << bad;
      ++failures;
    }
  }
}

TEST(ExpF32, WithinAnUlpAroundEveryRegimeChange) {
  // 1 (x = 0); the smallest normal result (x ~ -87.34); the smallest
  // denormal (x ~ -103.28) and the last x that rounds to it (~ -103.97);
  // overflow (x ~ 88.72); the clamps (-110, 89).
  const float centres[] = {0.0f, -87.3365f, -103.279f, -103.972f, 88.7228f, -110.0f, 89.0f};
  std::vector<float> xs;
  for (float c : centres) {
    float x = step_from(c, -20000);
    for (int k = 0; k < 40000; ++k, x = step_from(x, 1)) xs.push_back(x);
  }
  expect_within_an_ulp(xs);
}

TEST(ExpF32, WithinAnUlpOverTheWholeRange) {
  // Every 97th float of [-110, 90] (about 23 million), in pieces.
  const uint32_t pos_end = std::bit_cast<uint32_t>(90.0f);
  const uint32_t neg_end = std::bit_cast<uint32_t>(-110.0f);
  std::vector<float> xs;
  auto flush = [&] {
    expect_within_an_ulp(xs);
    xs.clear();
  };
  for (uint32_t b = 0; b <= pos_end; b += 97) {
    xs.push_back(std::bit_cast<float>(b));
    if (xs.size() == (1u << 20)) flush();
  }
  for (uint32_t b = 0x80000000u; b <= neg_end; b += 97) {
    xs.push_back(std::bit_cast<float>(b));
    if (xs.size() == (1u << 20)) flush();
  }
  flush();
}

TEST(ExpF32, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {0.0f, -0.0f, kInf, -kInf, nan, -nan, 1e30f, -1e30f,
                                 std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::lowest(),
                                 std::numeric_limits<float>::denorm_min(), 1.0f, -1.0f};
  const std::vector<float> got = exp(Tensor::from_vector(xs)).to_vector<float>();
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 1.0f);
  EXPECT_EQ(got[2], kInf);
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_TRUE(std::isnan(got[5]));
  EXPECT_EQ(got[6], kInf);
  EXPECT_EQ(got[7], 0.0f);
  EXPECT_EQ(got[8], kInf);
  EXPECT_EQ(got[9], 0.0f);
  EXPECT_EQ(got[10], 1.0f);
  EXPECT_EQ(check(1.0f, got[11]), "");
  EXPECT_EQ(check(-1.0f, got[12]), "");
  // sigmoid saturates to exactly 0 and 1 and passes NaN.
  const std::vector<float> s =
      sigmoid(Tensor::from_vector(std::vector<float>{-200.0f, 200.0f, nan, 0.0f}))
          .to_vector<float>();
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 0.5f);
}

// The contiguous loop runs 16 elements at a time with a scalar tail, a
// strided operand takes the general walk, and each runs in a copy per SIMD
// level: all compute the same IEEE operations, so every element has the
// bits of the baseline's contiguous loop whichever path and level it took,
// at any thread count.
TEST_F(ExpF32Levels, SameBitsOnEveryPathAndLevel) {
  std::vector<float> xs;
  for (int i = 0; i < 3 * 37; ++i) xs.push_back(-105.0f + 1.77f * static_cast<float>(i));
  const Tensor x = Tensor::from_vector(xs, Shape{3, 37});
  detail::set_simd_level(detail::SimdLevel::kBaseline);
  const std::vector<float> want = exp(x).to_vector<float>();
  const std::vector<float> want_sigmoid = sigmoid(x).to_vector<float>();
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
    return true;
  };
  // A large input, so the walk splits over threads.
  std::vector<float> big(1 << 18);
  for (size_t i = 0; i < big.size(); ++i) big[i] = xs[i % xs.size()] + 1e-3f * static_cast<float>(i % 7);
  const Tensor xb = Tensor::from_vector(big);
  set_num_threads(1);
  const std::vector<float> want_big = exp(xb).to_vector<float>();
  for (detail::SimdLevel level : dtensor::testing::simd_levels()) {
    detail::set_simd_level(level);
    SCOPED_TRACE(detail::simd_level_name(level));
    EXPECT_TRUE(same(exp(x).to_vector<float>(), want));
    EXPECT_TRUE(same(exp(x.t()).contiguous().t().contiguous().to_vector<float>(), want));
    EXPECT_TRUE(same(sigmoid(x).to_vector<float>(), want_sigmoid));
    for (size_t i = 0; i < xs.size(); i += 10) {
      const float one = exp(Tensor::from_vector(std::vector<float>{xs[i]})).to_vector<float>()[0];
      EXPECT_EQ(std::bit_cast<uint32_t>(one), std::bit_cast<uint32_t>(want[i])) << xs[i];
    }
    for (int threads : {1, 2, 3, 8}) {
      set_num_threads(threads);
      EXPECT_TRUE(same(exp(xb).to_vector<float>(), want_big)) << threads << " threads";
    }
    set_num_threads(1);
  }
}

// erf_f32 against double erf: under 1.5 ulp (of the float nearest the
// exact value) over a strided sample of every float in [0, 4.5] (past 3.92
// erf is 1 in float32) and every float in windows around the fits' seams
// (1 and 3.92) and 0; odd; NaN, infinities and signed zeros.
TEST(ErfF32, UnderOneAndAHalfUlps) {
  double worst = 0;
  float worst_x = 0;
  auto check_at = [&](float x) {
    const double ref = std::erf(static_cast<double>(x));
    const float nearest = static_cast<float>(ref);
    const double ulp = std::nextafter(std::fabs(nearest), INFINITY) - std::fabs(nearest);
    const double err = std::fabs(static_cast<double>(detail::erf_f32(x)) - ref) / ulp;
    if (err > worst) worst = err, worst_x = x;
    EXPECT_EQ(std::bit_cast<uint32_t>(detail::erf_f32(-x)),
              std::bit_cast<uint32_t>(-detail::erf_f32(x)));
  };
  const uint32_t last = std::bit_cast<uint32_t>(4.5f);
  for (uint32_t b = 0; b <= last; b += 151) check_at(std::bit_cast<float>(b));
  for (float seam : {0.0f, 1.0f, 3.92f}) {
    float x = step_from(seam, -5000);
    for (int i = 0; i < 10000; ++i, x = step_from(x, 1)) check_at(std::fabs(x));
  }
  EXPECT_LT(worst, 1.5) << "at x = " << worst_x;
  EXPECT_TRUE(std::isnan(detail::erf_f32(NAN)));
  EXPECT_EQ(detail::erf_f32(INFINITY), 1.0f);
  EXPECT_EQ(detail::erf_f32(-INFINITY), -1.0f);
  EXPECT_EQ(detail::erf_f32(1e30f), 1.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(detail::erf_f32(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_NEAR(detail::erf_f32(1e-40f), std::erf(1e-40), 1.5e-45);  // a denormal ulp
}

// erf and gelu of a float32 tensor: the vector loop and the strided walk
// give erf_f32's bits at every SIMD level.
TEST_F(ExpF32Levels, ErfSameBitsOnEveryPathAndLevel) {
  std::vector<float> xs;
  for (int i = 0; i < 3 * 337; ++i) xs.push_back(-5.0f + 0.0101f * static_cast<float>(i));
  xs[7] = NAN;
  const Tensor x = Tensor::from_vector(xs, Shape{3, 337});
  std::vector<float> want;
  for (float v : xs) want.push_back(detail::erf_f32(v));
  for (detail::SimdLevel level : dtensor::testing::simd_levels()) {
    detail::set_simd_level(level);
    SCOPED_TRACE(detail::simd_level_name(level));
    for (const Tensor& got : {erf(x), erf(x.t()).t()}) {
      const std::vector<float> g = got.contiguous().to_vector<float>();
      for (size_t i = 0; i < xs.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(want[i])) << xs[i];
    }
    const std::vector<float> gl = gelu(x).to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const float w = 0.5f * xs[i] * (1.0f + detail::erf_f32(xs[i] * 0.70710678118654752440f));
      ASSERT_EQ(std::bit_cast<uint32_t>(gl[i]), std::bit_cast<uint32_t>(w)) << xs[i];
    }
  }
}

// The error of `got` against the exact `ref`, in ulps of the float nearest
// ref (a denormal ulp at 0).
double ulps_off(float got, double ref) {
  const float nearest = static_cast<float>(ref);
  if (std::isinf(nearest)) return got == nearest ? 0 : INFINITY;
  const float a = std::fabs(nearest);
  const double ulp = nearest == 0 ? 0x1p-149 : static_cast<double>(std::nextafter(a, INFINITY) - a);
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

// tanh_f32 against double tanh: under 1.35 ulp over a strided sample of
// every positive float (past 9 tanh is 1 in float32) and every float in
// windows around the split (0.625) and the cut to 1 (9); odd, -0 kept;
// NaN and infinities.
TEST(TanhF32, UnderOneAndAThirdUlps) {
  double worst = 0;
  float worst_x = 0;
  auto check_at = [&](float x) {
    const double err = ulps_off(detail::tanh_f32(x), std::tanh(static_cast<double>(x)));
    if (err > worst) worst = err, worst_x = x;
    EXPECT_EQ(std::bit_cast<uint32_t>(detail::tanh_f32(-x)),
              std::bit_cast<uint32_t>(-detail::tanh_f32(x)));
  };
  const uint32_t last = std::bit_cast<uint32_t>(std::numeric_limits<float>::max());
  for (uint32_t b = 0; b <= last - 997; b += 997) check_at(std::bit_cast<float>(b));
  for (float seam : {0.0f, 0.625f, 9.0f}) {
    float x = step_from(seam, -5000);
    for (int i = 0; i < 10000; ++i, x = step_from(x, 1)) check_at(std::fabs(x));
  }
  EXPECT_LT(worst, 1.35) << "at x = " << worst_x;
  EXPECT_TRUE(std::isnan(detail::tanh_f32(NAN)));
  EXPECT_EQ(detail::tanh_f32(INFINITY), 1.0f);
  EXPECT_EQ(detail::tanh_f32(-INFINITY), -1.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(detail::tanh_f32(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(detail::tanh_f32(1e-40f), 1e-40f);  // denormals: tanh(x) = x
}

// log_f32 against double log: under 0.85 ulp (glibc's logf's figure) over a
// strided sample of every positive float, denormals included, and every
// float in windows around 1 and the mantissa split sqrt(1/2); 0, negatives,
// infinity and NaN.
TEST(LogF32, UnderAnUlp) {
  double worst = 0;
  float worst_x = 0;
  auto check_at = [&](float x) {
    const double err = ulps_off(detail::log_f32(x), std::log(static_cast<double>(x)));
    if (err > worst) worst = err, worst_x = x;
  };
  const uint32_t last = std::bit_cast<uint32_t>(std::numeric_limits<float>::max());
  for (uint32_t b = 1; b <= last - 991; b += 991) check_at(std::bit_cast<float>(b));
  for (uint32_t b = 1; b < 5000; ++b) check_at(std::bit_cast<float>(b));  // the smallest denormals
  for (float seam : {1.0f, 0.70710678f, 1.41421356f, std::numeric_limits<float>::min()}) {
    float x = step_from(seam, -5000);
    for (int i = 0; i < 10000; ++i, x = step_from(x, 1)) check_at(x);
  }
  EXPECT_LT(worst, 0.85) << "at x = " << worst_x;
  EXPECT_EQ(detail::log_f32(1.0f), 0.0f);
  EXPECT_EQ(detail::log_f32(0.0f), -INFINITY);
  EXPECT_EQ(detail::log_f32(-0.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(detail::log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(detail::log_f32(-INFINITY)));
  EXPECT_TRUE(std::isnan(detail::log_f32(NAN)));
  EXPECT_EQ(detail::log_f32(INFINITY), INFINITY);
}

// log1p_f32 and expm1_f32 against double log1p / expm1: under 0.9 and 1.6
// ulp over a strided sample of every float (both signs) and windows
// around their seams (0, 1 and -1 for log1p; 0, +-ln2/2 and the end of the
// exact 2^n - 1 for expm1); special values.
TEST(LogF32, Log1pUnderAnUlp) {
  double worst = 0;
  float worst_x = 0;
  auto check_at = [&](float x) {
    if (x < -1.0f) return;
    const double err = ulps_off(detail::log1p_f32(x), std::log1p(static_cast<double>(x)));
    if (err > worst) worst = err, worst_x = x;
  };
  for (uint64_t b = 0; b < 0xffffffffu; b += 1999) check_at(std::bit_cast<float>(uint32_t(b)));
  for (float seam : {0.0f, 1.0f, -1.0f, -0.29289322f}) {
    float x = step_from(seam, -5000);
    for (int i = 0; i < 10000; ++i, x = step_from(x, 1)) check_at(x);
  }
  EXPECT_LT(worst, 0.9) << "at x = " << worst_x;
  EXPECT_EQ(detail::log1p_f32(-1.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(detail::log1p_f32(-2.0f)));
  EXPECT_TRUE(std::isnan(detail::log1p_f32(NAN)));
  EXPECT_EQ(detail::log1p_f32(INFINITY), INFINITY);
  EXPECT_EQ(std::bit_cast<uint32_t>(detail::log1p_f32(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(detail::log1p_f32(1e-30f), 1e-30f);
}

TEST(ExpF32, Expm1UnderOneAndSixTenthsUlps) {
  double worst = 0;
  float worst_x = 0;
  auto check_at = [&](float x) {
    const double err = ulps_off(detail::expm1_f32(x), std::expm1(static_cast<double>(x)));
    if (err > worst) worst = err, worst_x = x;
  };
  for (uint64_t b = 0; b < 0xffffffffu; b += 1999) {
    const float x = std::bit_cast<float>(uint32_t(b));
    if (!std::isnan(x)) check_at(x);
  }
  for (float seam : {0.0f, 0.34657359f, -0.34657359f, 16.6355f, 88.7f}) {
    float x = step_from(seam, -5000);
    for (int i = 0; i < 10000; ++i, x = step_from(x, 1)) check_at(x);
  }
  EXPECT_LT(worst, 1.6) << "at x = " << worst_x;
  EXPECT_EQ(detail::expm1_f32(-INFINITY), -1.0f);
  EXPECT_EQ(detail::expm1_f32(INFINITY), INFINITY);
  EXPECT_EQ(detail::expm1_f32(100.0f), INFINITY);
  EXPECT_TRUE(std::isnan(detail::expm1_f32(NAN)));
  EXPECT_EQ(std::bit_cast<uint32_t>(detail::expm1_f32(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(detail::expm1_f32(1e-30f), 1e-30f);
}

// tanh, log, log1p, expm1, softplus and gelu's tanh form (and its
// gradient) of a float32 tensor:
// the vector loop and the strided walk give the scalar function's bits at
// every SIMD level.
TEST_F(ExpF32Levels, TanhLogLog1pExpm1SameBitsOnEveryPathAndLevel) {
  std::vector<float> xs;
  for (int i = 0; i < 3 * 337; ++i) xs.push_back(-10.0f + 0.0203f * static_cast<float>(i));
  xs[7] = NAN;
  xs[8] = 0.0f;
  xs[9] = 1e-41f;
  const Tensor x = Tensor::from_vector(xs, Shape{3, 337});
  std::vector<float> want_tanh, want_log, want_gelu, want_grad, want_log1p, want_expm1,
      want_softplus;
  for (float v : xs) {
    want_log1p.push_back(detail::log1p_f32(v));
    want_expm1.push_back(detail::expm1_f32(v));
    want_softplus.push_back(v > 20.0f ? v : detail::log1p_f32(detail::exp_f32(v)) / 1.0f);
    want_tanh.push_back(detail::tanh_f32(v));
    want_log.push_back(detail::log_f32(v));
    const float u = (v + (v * v * v) * 0.044715f) * 0.79788456080286535588f;
    want_gelu.push_back(0.5f * v * (1.0f + detail::tanh_f32(0.79788456080286535588f *
                                                          (v + 0.044715f * v * v * v))));
    const float t = detail::tanh_f32(u);
    const float right = ((v * 0.5f) * (1.0f - t * t)) * ((v * v * static_cast<float>(3 * 0.044715) + 1.0f) *
                                                         0.79788456080286535588f);
    want_grad.push_back(2.0f * ((t + 1.0f) * 0.5f + right));
  }
  auto expect_bits = [&](const Tensor& got, const std::vector<float>& want, const char* what) {
    const std::vector<float> g = got.contiguous().to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(want[i]))
          << what << " at " << xs[i];
  };
  const Tensor two = Tensor::full({3, 337}, 2.0f);
  for (detail::SimdLevel level : dtensor::testing::simd_levels()) {
    detail::set_simd_level(level);
    SCOPED_TRACE(detail::simd_level_name(level));
    expect_bits(tanh(x), want_tanh, "tanh");
    expect_bits(tanh(x.t()).t(), want_tanh, "tanh, strided");
    expect_bits(log(x), want_log, "log");
    expect_bits(log(x.t()).t(), want_log, "log, strided");
    expect_bits(gelu(x, GeluApprox::Tanh), want_gelu, "gelu tanh");
    expect_bits(log1p(x), want_log1p, "log1p");
    expect_bits(expm1(x.t()).t(), want_expm1, "expm1, strided");
    expect_bits(softplus(x, 1, 20), want_softplus, "softplus");
    expect_bits(gelu_backward(two, x, GeluApprox::Tanh), want_grad, "gelu_backward tanh");
  }
}

}  // namespace
