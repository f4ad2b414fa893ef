#include "checkpoint/checksum.h"

#define XXH_INLINE_ALL  // header-only: no library to link, for users of libdtensor.a
#include <xxhash.h>

#include "tensor/simd.h"

namespace dtensor::checkpoint::detail {

uint64_t xxh3_64_baseline(const void* data, uint64_t n) {
  return XXH3_64bits(data, static_cast<size_t>(n));
}

uint64_t checksum(const void* data, int64_t n) {
  using dtensor::detail::SimdLevel;
  const auto bytes = static_cast<uint64_t>(n);
  switch (dtensor::detail::simd_level()) {
    case SimdLevel::kAvx512:
      return xxh3_64_avx512(data, bytes);
    case SimdLevel::kAvx2:
      return xxh3_64_avx2(data, bytes);
    case SimdLevel::kBaseline:
      break;
  }
  return xxh3_64_baseline(data, bytes);
}

}  // namespace dtensor::checkpoint::detail
