// XXH3-64 compiled with -mavx512f (cmake/dtensorBuildSpeed.cmake gives files
// named *_avx512.cc that flag), so xxhash.h takes its AVX-512 code path;
// checksum() calls it only on a CPU that has AVX-512.
//
// Every function this file compiles is its own: xxhash.h's are static
// (XXH_INLINE_ALL), and checksum.h brings only <cstdint>'s types. An inline
// function of a shared C++ header compiled here could be the copy the
// linker keeps for the whole program, and run on a CPU without AVX-512.
#include "checkpoint/checksum.h"

// GCC 12's avx512fintrin.h builds some intrinsics on _mm512_undefined_*(),
// which -W(maybe-)uninitialized reports once they are inlined here (GCC bug
// 105593, fixed in GCC 13); the builds with -Werror (make, CI) stop on it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define XXH_INLINE_ALL
#include <xxhash.h>

#ifndef __AVX512F__
#error "checksum_avx512.cc must be compiled with -mavx512f"
#endif

namespace dtensor::checkpoint::detail {

uint64_t xxh3_64_avx512(const void* data, uint64_t n) {
  return XXH3_64bits(data, static_cast<size_t>(n));
}

}  // namespace dtensor::checkpoint::detail
