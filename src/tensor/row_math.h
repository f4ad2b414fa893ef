// Internal: the vectorisable row arithmetic shared by the softmax family
// (src/tensor/nn.cc) and the fused vocab-parallel loss
// (src/parallel/vocab_ce_kernel.cc): exp on [-110, 0], a row max and a row
// sum; and the float32 transcendentals of the elementwise ops (exp, erf,
// tanh, log, log1p, expm1) as polynomials the compiler vectorises. One copy, so the fused loss rounds exactly like cross_entropy on the
// full tensor. Include only from files compiled with FMA contraction off
// (#pragma GCC optimize("fp-contract=off")), as simd.h requires of every
// kernel with AVX2 / AVX-512 copies.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace dtensor::detail {

// std::exp cannot be vectorised by the compiler (it is an opaque libm call),
// and in softmax the exp pass dominates. The softmax family only needs
// exp(x - max), whose argument is in [-inf, 0] or NaN, so float32 uses two
// vectorisable passes: clamp the argument at -110 (exp is 0 in float below
// about -103.97), then exp_f32_core. The clamp lives in its own loop because
// GCC will not vectorise a float select next to the polynomial: under the
// default -ftrapping-math it refuses to if-convert, and jump threading clones
// the polynomial for the clamped constant. float64 keeps std::exp.

// The pieces exp_f32_core and expm1_f32 share: x = n*ln2 + r, |r| <= ln2/2
// (Cody-Waite), em = expm1(r) = r + r^2 P(r) (the Cephes expf polynomial
// without its leading 1), and 2^n as two factors s1 * s2 = 2^half *
// 2^(n-half), each a normal float (n in [-159, 128]), so that a product
// with them rounds once and gives denormals correctly.
struct ExpPartsF32 {
  float em, s1, s2;
  int32_t n;
};
inline ExpPartsF32 exp_parts_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  // Adding 1.5 * 2^23 rounds to an integer that lands in the low mantissa
  // bits, read back without a float->int conversion (undefined for NaN).
  constexpr float kShift = 12582912.0f;
  const float shifted = x * kLog2e + kShift;
  const float n = shifted - kShift;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) -
                                          std::bit_cast<uint32_t>(kShift));
  const int32_t half = ni >> 1;
  return {p * r2 + r, std::bit_cast<float>(static_cast<uint32_t>(half + 127) << 23),
          std::bit_cast<float>(static_cast<uint32_t>(ni - half + 127) << 23), ni};
}

// exp(x) for x in [-110, 89], or NaN (which propagates through the
// arithmetic): exp_parts_f32's (em + 1) * 2^n. Checked exhaustively against
// double exp over every float in [-104, 0]: under 1 ulp, denormal results
// included, and 0 below (correctly rounded); above 0 see exp_f32.
inline float exp_f32_core(float x) {
  const ExpPartsF32 e = exp_parts_f32(x);
  return (e.em + 1.0f) * e.s1 * e.s2;
}

// exp(x) for every float32 x: the argument clamped to [-110, 89] (exp is 0
// in float below about -103.97 and inf above about 88.72, and NaN passes a
// clamp written as comparisons), then exp_f32_core, whose 2^n in two
// factors also covers n up to 128. Under 1 ulp against double exp, 0 and
// inf where the rounded result is (tests/tensor/exp_test.cc). Vectorises
// only where trapping math is off (GCC keeps a float select next to the
// polynomial as a branch otherwise): elementwise_unary.cc turns it off.
inline float exp_f32(float x) {
  x = x < -110.0f ? -110.0f : x;
  x = x > 89.0f ? 89.0f : x;
  return exp_f32_core(x);
}

// erf(x) for every float32 x, vectorisable (libm's erff is an opaque call,
// and GELU's erf took 10% of a training step). Two least-squares fits,
// evaluated in float32 (docs/PERFORMANCE.md, "A vectorised erf"):
// - |x| < 1: erf = x + x * P(x^2), P of degree 6 (the small correction
//   term keeps P's rounding off the leading x);
// - 1 <= |x| < 3.92: erf = 1 - exp(-x^2) * Q(|x| - 2.46), Q of degree 13
//   (erfc(x) exp(x^2) is smooth there);
// - beyond, erf is 1 in float32; the sign comes back by copysign, and NaN
//   passes through. Under 1.5 ulp against double erf over every float
//   (tests/tensor/exp_test.cc, ErfF32.UnderOneAndAHalfUlps).
inline float erf_f32(float x) {
  const float a = std::fabs(x);
  const float z = a * a;
  float p = 7.847262168e-05f;
  p = p * z - 8.008193108e-04f;
  p = p * z + 5.188099574e-03f;
  p = p * z - 2.685369179e-02f;
  p = p * z + 1.128358245e-01f;
  p = p * z - 3.761262596e-01f;
  p = p * z + 1.283791661e-01f;
  const float small = a + a * p;
  const float t = a - 2.46f;
  float q = -2.636882357e-08f;
  q = q * t + 1.177330873e-07f;
  q = q * t - 2.891339932e-07f;
  q = q * t + 1.083121788e-06f;
  q = q * t - 4.686606644e-06f;
  q = q * t + 1.775181772e-05f;
  q = q * t - 6.423433661e-05f;
  q = q * t + 2.280988265e-04f;
  q = q * t - 7.862597704e-04f;
  q = q * t + 2.619004110e-03f;
  q = q * t - 8.408312686e-03f;
  q = q * t + 2.592233941e-02f;
  q = q * t - 7.638143748e-02f;
  q = q * t + 2.138206810e-01f;
  const float large = 1.0f - exp_f32(-z) * q;
  float r = a < 3.92f ? large : 1.0f;
  r = a < 1.0f ? small : r;
  r = a != a ? a : r;  // NaN
  return std::copysign(r, x);
}

// tanh(x) for every float32 x, vectorisable (libm's tanhf is an opaque call:
// 15 ns per element, 4x torch's tanh, and GELU's tanh form and its
// gradient run it). Cephes' tanhf split:
// - |x| < 0.625: x + x^3 P(x^2), P of degree 4 (Cephes' minimax
//   coefficients);
// - up to 9: 1 - 2 / (exp(2|x|) + 1) with exp_f32;
// - beyond, 1 in float32; the sign comes back by copysign (odd, -0 stays
//   -0), and NaN passes through.
// Under 1.35 ulp against double tanh over every float (glibc's tanhf:
// 2.2; tests/tensor/exp_test.cc, TanhF32.UnderOneAndAThirdUlps).
inline float tanh_f32(float x) {
  const float a = std::fabs(x);
  const float z = a * a;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = a + a * z * p;
  const float large = 1.0f - 2.0f / (exp_f32(a + a) + 1.0f);
  float r = a < 0.625f ? small : large;
  r = a > 9.0f ? 1.0f : r;
  r = a != a ? a : r;  // NaN
  return std::copysign(r, x);
}

// log(u) + corr for u >= 0 (u = 0 and infinities are the callers'), the
// float32 core of log_f32 and log1p_f32. u = 2^k m with m in [sqrt(1/2),
// sqrt(2)), read from the bits: subtracting sqrt(1/2)'s bits makes the
// exponent field k, and m keeps the rest. log(m) = f - f^2/2 + f^3 P(f),
// f = m - 1, P of degree 8 (Cephes' logf coefficients), plus k ln 2 in two
// parts (Cody-Waite). corr, far below log(u)'s last bit, joins the small
// terms before the last two additions. Denormals are scaled by 2^23 first.
inline float log_core_f32(float u, float corr) {
  const bool tiny = u < 1.17549435e-38f;  // below the smallest normal
  const uint32_t bits = std::bit_cast<uint32_t>(tiny ? u * 8388608.0f : u);
  const int32_t k = static_cast<int32_t>(bits - 0x3f3504f3u) >> 23;
  const float m = std::bit_cast<float>(bits - (static_cast<uint32_t>(k) << 23));
  const float e = static_cast<float>(k) - (tiny ? 23.0f : 0.0f);
  const float f = m - 1.0f;
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * z;
  y = y + corr;
  const float r = f + y;
  return r + e * 0.693359375f;
}

// log(x) for every float32 x, vectorisable (libm's logf is an opaque call,
// 2.4x torch's log): log_core_f32. 0 gives -inf, a negative x NaN, inf
// inf, NaN NaN. Under 0.85 ulp against double log over every float, as
// glibc's logf (tests/tensor/exp_test.cc, LogF32.UnderAnUlp).
inline float log_f32(float x) {
  float r = log_core_f32(x, 0.0f);
  r = x == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  r = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x != x ? x : r;  // NaN
  return r;
}

// log(1 + x) for every float32 x, vectorisable: log_core_f32 of u = 1 + x,
// corrected by u's rounding error c (exact: x - (u - 1) below 2, 1 - (u -
// x) from 2 on) as log(u + c) = log(u) + c/u. Tiny x give x (and -0 -0),
// -1 gives -inf, below -1 NaN. Under 0.9 ulp against double log1p over
// every float (glibc's log1pf: 0.82; LogF32.Log1pUnderAnUlp).
inline float log1p_f32(float x) {
  const float u = 1.0f + x;
  const float c = u < 2.0f ? x - (u - 1.0f) : 1.0f - (u - x);
  float r = log_core_f32(u, c / u);
  r = u == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  r = u < 0.0f ? std::numeric_limits<float>::quiet_NaN() : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x == 0.0f ? x : r;  // keeps -0
  r = x != x ? x : r;     // NaN
  return r;
}

// exp(x) - 1 for every float32 x, vectorisable: exp_parts_f32, then 2^n
// expm1(r) + (2^n - 1), both parts exact but the last addition for n <=
// 24; beyond, 2^n (expm1(r) + 1) as exp. -0 stays -0, NaN passes through. Under 1.6 ulp against double expm1 over every float
// (glibc's expm1f: 0.8; ExpF32.Expm1UnderOneAndSixTenthsUlps).
inline float expm1_f32(float x) {
  float xc = x < -110.0f ? -110.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  const ExpPartsF32 e = exp_parts_f32(xc);
  float res = e.em * e.s1 * e.s2 + (e.s1 * e.s2 - 1.0f);
  res = e.n > 24 ? ((e.em + 1.0f) * e.s1) * e.s2 : res;
  res = x == 0.0f ? x : res;  // keeps -0
  res = x != x ? x : res;     // NaN
  return res;
}

// Maximum of a row. GCC will not vectorise a float max reduction (NaN and
// -0 semantics), so it compares integer keys: the float bits with the
// magnitude flipped for negatives order exactly like the floats, and an
// integer max reduction vectorises (3x faster on SSE2). A NaN may or may not
// come out as the max (positive NaNs sort above +inf, negative ones below
// -inf); either way exp(x - max) turns the whole line NaN, as in PyTorch.
template <class T>
T row_max(const T* x, int64_t n) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  constexpr I kMag = std::numeric_limits<I>::max();
  constexpr int kSignShift = static_cast<int>(sizeof(I) * 8 - 1);
  auto key = [](I b) { return static_cast<I>(b ^ ((b >> kSignShift) & kMag)); };  // an involution
  I best = key(std::bit_cast<I>(-std::numeric_limits<T>::infinity()));
  for (int64_t i = 0; i < n; ++i) {
    const I k = key(std::bit_cast<I>(x[i]));
    best = k > best ? k : best;
  }
  return std::bit_cast<T>(key(best));
}

// Sum of a row in eight double lanes (exact enough for any row length).
template <class T>
double sum_lanes(const T* e, int64_t n) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(e[i + j]);
  for (; i < n; ++i) lanes[0] += static_cast<double>(e[i]);
  double s = 0;
  for (int j = 0; j < kLanes; ++j) s += lanes[j];
  return s;
}

}  // namespace dtensor::detail
