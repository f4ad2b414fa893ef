// The per-shard loops of vocab_parallel_cross_entropy (vocab_ce_kernel.h).
//
// The exp, max and sum are tensor/row_math.h's, the ones softmax and
// cross_entropy use (same polynomial, same lanes), so the fused loss agrees
// with cross_entropy on the full tensor to rounding.
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
#include "tensor/row_math.h"
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
    const T bm = row_max(x + b, len);
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
                   int64_t ignore_index, const T* max, const T* sum, const double* coefs,
                   T* grad) {
  for_rows(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* g = grad + r * n;
      const int64_t t = target[r];
      if (t == ignore_index) {
        std::fill(g, g + n, T(0));
        continue;
      }
      exp_shifted(x + r * n, g, n, max[r]);
      const double coef = coefs[r];
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
                                   int64_t, const float*, const float*, const double*, float*);
template void vocab_ce_grad<double>(const double*, int64_t, int64_t, int64_t, const int64_t*,
                                    int64_t, const double*, const double*, const double*,
                                    double*);

}  // namespace dtensor::detail
