// XXH3-64 compiled with -mavx2 (cmake/dtensorBuildSpeed.cmake gives files
// named *_avx2.cc that flag), so xxhash.h takes its AVX2 code path;
// checksum() calls it only on a CPU that has AVX2.
//
// Every function this file compiles is its own: xxhash.h's are static
// (XXH_INLINE_ALL), and checksum.h brings only <cstdint>'s types. An inline
// function of a shared C++ header compiled here could be the copy the
// linker keeps for the whole program, and run on a CPU without AVX2.
#include "checkpoint/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#ifndef __AVX2__
#error "checksum_avx2.cc must be compiled with -mavx2"
#endif

namespace dtensor::checkpoint::detail {

uint64_t xxh3_64_avx2(const void* data, uint64_t n) {
  return XXH3_64bits(data, static_cast<size_t>(n));
}

}  // namespace dtensor::checkpoint::detail
