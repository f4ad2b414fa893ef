// float32 <-> float16 runs (convert_half.h): F16C's 8-wide conversions when
// the CPU has them and the SIMD level allows (simd.h), the scalar
// conversion otherwise and for the tail.
#include "tensor/convert_half.h"

#include <immintrin.h>

#include "tensor/simd.h"

namespace dtensor::detail {

namespace {

__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* s, Float16* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  for (; i < n; ++i) d[i] = Float16(s[i]);
}

__attribute__((target("avx,f16c"))) void half_to_float_f16c(const Float16* s, float* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) d[i] = static_cast<float>(s[i]);
}

// The bfloat16 loops are plain code the compiler vectorises, compiled once
// per instruction set (BFloat16::round is branch-free but for the NaN test,
// which becomes a blend).
template <int kIsa>
inline void to_bf16(const float* s, BFloat16* d, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) d[i].bits = BFloat16::round(s[i]);
}

template <int kIsa>
inline void from_bf16(const BFloat16* s, float* d, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
}

__attribute__((target("avx2"))) void to_bf16_avx2(const float* s, BFloat16* d, int64_t n) {
  to_bf16<1>(s, d, n);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) void to_bf16_avx512(const float* s,
                                                                         BFloat16* d, int64_t n) {
  to_bf16<2>(s, d, n);
}
__attribute__((target("avx2"))) void from_bf16_avx2(const BFloat16* s, float* d, int64_t n) {
  from_bf16<1>(s, d, n);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) void from_bf16_avx512(const BFloat16* s,
                                                                           float* d, int64_t n) {
  from_bf16<2>(s, d, n);
}

}  // namespace

bool f16c_enabled() {
  // Every CPU with AVX2 has F16C; the SIMD level's cap (DTENSOR_SIMD,
  // set_simd_level) turns it off with the other vector paths.
  return simd_level() != SimdLevel::kBaseline && __builtin_cpu_supports("f16c");
}

void float_to_half(const float* src, Float16* dst, int64_t n) {
  if (f16c_enabled()) return float_to_half_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = Float16(src[i]);
}

void half_to_float(const Float16* src, float* dst, int64_t n) {
  if (f16c_enabled()) return half_to_float_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void float_to_half(const float* src, BFloat16* dst, int64_t n) {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return to_bf16_avx512(src, dst, n);
    case SimdLevel::kAvx2: return to_bf16_avx2(src, dst, n);
    default: return to_bf16<0>(src, dst, n);
  }
}

void half_to_float(const BFloat16* src, float* dst, int64_t n) {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return from_bf16_avx512(src, dst, n);
    case SimdLevel::kAvx2: return from_bf16_avx2(src, dst, n);
    default: return from_bf16<0>(src, dst, n);
  }
}

}  // namespace dtensor::detail
