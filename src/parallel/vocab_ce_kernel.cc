// The per-shard loops of vocab_parallel_cross_entropy (vocab_ce_kernel.h).
//
// The exp, max and sum helpers below are the ones src/tensor/nn.cc uses for
// softmax and cross_entropy (same polynomial, same lanes), repeated here
// because nn.cc keeps them file-local; keeping the same arithmetic means the
// fused loss agrees with cross_entropy on the full tensor to rounding.
// FMA contraction off: the SIMD copies must round like the baseline (simd.h).
#pragma GCC optimize("fp-contract=off")
#include "parallel/vocab_ce_kernel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "tensor/simd.h"

namespace dtensor::detail {
namespace {

// Rows per parallel chunk: about 2^15 elements of work (nn.cc's grain).
int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(n, 1));
}

template <class Body>
void for_rows(int64_t rows, int64_t n, const Body& body) {
  parallel_for(rows, row_grain(n), [&](int64_t b, int64_t e) {
    simd_dispatch([&] { body(b, e); });
  });
}

// exp(x) for x in [-110, 0] or NaN: nn.cc's exp_f32_core (Cody-Waite
// reduction and the Cephes polynomial, under 1 ulp), vectorisable where
// std::exp is an opaque libm call.
inline float exp_f32_core(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
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
  p = p * r2 + r + 1.0f;
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) -
                                          std::bit_cast<uint32_t>(kShift));
  const int32_t half = ni >> 1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(ni - half + 127) << 23);
  return p * s1 * s2;
}

// e[i] = exp(x[i] - m), where x[i] <= m. float: clamp, then the polynomial,
// in two flat loops (GCC vectorises neither if they are fused, see nn.cc).
template <class T>
void exp_shifted(const T* x, T* e, int64_t n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = x[i] - m;
      e[i] = d < -110.0f ? -110.0f : d;
    }
    for (int64_t i = 0; i < n; ++i) e[i] = exp_f32_core(e[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) e[i] = std::exp(x[i] - m);
  }
}

// Max of a run through integer keys that order like the floats (an integer
// max reduction vectorises; a float one does not).
template <class T>
T run_max(const T* x, int64_t n) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  constexpr I kMag = std::numeric_limits<I>::max();
  constexpr int kSignShift = static_cast<int>(sizeof(I) * 8 - 1);
  auto key = [](I b) { return static_cast<I>(b ^ ((b >> kSignShift) & kMag)); };
  I best = key(std::bit_cast<I>(-std::numeric_limits<T>::infinity()));
  for (int64_t i = 0; i < n; ++i) {
    const I k = key(std::bit_cast<I>(x[i]));
    best = k > best ? k : best;
  }
  return std::bit_cast<T>(key(best));
}

// Sum in eight double lanes.
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

// The row is walked in blocks small enough to stay in L1: a block's max,
// then its exps against the running max, so each element comes from memory
// once (the exps re-read the block from L1) and the loops still vectorise,
// which a per-element online update (a branch and a rescale per element)
// would not. When a block raises the max, the sum so far is rescaled by
// exp(old - new), in double.
constexpr int64_t kBlock = 1024;

template <class T>
void row_stats(const T* x, int64_t n, T* scratch, T& max, double& sum) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T m = kNegInf;
  double s = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const T bm = run_max(x + b, len);
    if (bm != bm) {  // a NaN logit: the row's loss is NaN, as cross_entropy's
      m = bm;
      s = std::numeric_limits<double>::quiet_NaN();
      break;
    }
    if (bm > m) {
      if (s != 0) s *= std::exp(static_cast<double>(m) - static_cast<double>(bm));
      m = bm;
    }
    // All -inf so far: each exp is 0, and x - m would be NaN.
    if (m == kNegInf) continue;
    exp_shifted(x + b, scratch, len, m);
    s += sum_lanes(scratch, len);
  }
  max = m;
  sum = s;
}

}  // namespace

template <class T>
void vocab_ce_row_stats(const T* x, int64_t rows, int64_t n, int64_t offset,
                        const int64_t* target, int64_t ignore_index, T* max, double* sum,
                        T* picked) {
  for_rows(rows, n, [&](int64_t r0, int64_t r1) {
    std::vector<T> scratch(static_cast<size_t>(std::min(n, kBlock)));
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * n;
      row_stats(row, n, scratch.data(), max[r], sum[r]);
      const int64_t t = target[r];
      const bool mine = t != ignore_index && t >= offset && t < offset + n;
      picked[r] = mine ? row[t - offset] : T(0);
    }
  });
}

template <class T>
void vocab_ce_grad(const T* x, int64_t rows, int64_t n, int64_t offset, const int64_t* target,
                   int64_t ignore_index, const T* max, const T* sum, double coef, T* grad) {
  for_rows(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* g = grad + r * n;
      const int64_t t = target[r];
      if (t == ignore_index) {
        std::fill(g, g + n, T(0));
        continue;
      }
      exp_shifted(x + r * n, g, n, max[r]);
      const double s = static_cast<double>(sum[r]);
      const T scale = static_cast<T>(coef / s);
      // The target's entry from its exp before scaling, in double: there
      // softmax - 1 cancels, and a float product would lose the difference.
      const bool mine = t >= offset && t < offset + n;
      const double et = mine ? static_cast<double>(g[t - offset]) : 0.0;
      for (int64_t j = 0; j < n; ++j) g[j] *= scale;
      if (mine) g[t - offset] = static_cast<T>(coef * (et / s - 1.0));
    }
  });
}

template void vocab_ce_row_stats<float>(const float*, int64_t, int64_t, int64_t, const int64_t*,
                                        int64_t, float*, double*, float*);
template void vocab_ce_row_stats<double>(const double*, int64_t, int64_t, int64_t,
                                         const int64_t*, int64_t, double*, double*, double*);
template void vocab_ce_grad<float>(const float*, int64_t, int64_t, int64_t, const int64_t*,
                                   int64_t, const float*, const float*, double, float*);
template void vocab_ce_grad<double>(const double*, int64_t, int64_t, int64_t, const int64_t*,
                                    int64_t, const double*, const double*, double, double*);

}  // namespace dtensor::detail
