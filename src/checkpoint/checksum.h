// The checksum of checkpoint bytes: XXH3-64, the data files' block
// checksums and metadata.json's content checksum alike.
//
// XXH3 gives the same value whichever vector unit computes it, so the
// library (built for baseline x86-64) carries three copies of it and runs
// the widest this CPU has: AVX-512 (about twice AVX2's speed on data in
// the cache, four times SSE2's), AVX2, or SSE2. tensor/simd.h's level picks
// it, so DTENSOR_SIMD caps it as it does the kernels'. A checkpoint written
// on one machine checks on any other.
#pragma once

#include <cstdint>

namespace dtensor::checkpoint::detail {

// XXH3-64 of n bytes.
uint64_t checksum(const void* data, int64_t n);

// The copies checksum() picks from, each in its own file compiled for its
// instruction set (checksum_avx2.cc, checksum_avx512.cc). REQUIRES: the CPU
// has the instruction set.
uint64_t xxh3_64_baseline(const void* data, uint64_t n);
uint64_t xxh3_64_avx2(const void* data, uint64_t n);
uint64_t xxh3_64_avx512(const void* data, uint64_t n);

}  // namespace dtensor::checkpoint::detail
