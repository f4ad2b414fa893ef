// ByteCopier (copy_bytes.h): four 32-byte loads, then four stores.
#include "tensor/copy_bytes.h"

#include <immintrin.h>

#include <cstring>

#include "tensor/simd.h"

namespace dtensor::detail {

__attribute__((target("avx2"))) void copy_bytes_avx2(void* dst, const void* src, size_t n) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t k = 0;
  for (; k + 128 <= n; k += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k + 96), e);
  }
  for (; k + 32 <= n; k += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k)));
  }
  // The last 32 bytes, overlapping bytes already copied (the ranges do not
  // overlap each other, so rewriting them is harmless).
  if (k < n) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + n - 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32)));
  }
}

ByteCopier::ByteCopier() : wide_(simd_level() >= SimdLevel::kAvx2) {}

}  // namespace dtensor::detail
