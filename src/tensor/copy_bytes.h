// Internal: memcpy for the mid-sized runs the simulated collectives move.
//
// A collective that splits or joins along an inner dim (S(0)->S(1) is an
// all_to_all over dim 1) copies each shard row in pieces, one per member:
// 8 ranks and 4 KiB rows make 512-byte runs. glibc's memcpy moved such
// runs at about half the speed of one 256 KiB memcpy on Zen 3 when source
// and destination addresses fell at the same offsets within 4 KiB pages (a
// 4K-aliasing stall: a load waits for an older store to a different
// address that matches in its low 12 bits); a loop that loads 128 bytes
// into four 32-byte registers before storing them ran at the big copy's
// speed at every alignment tried (docs/PERFORMANCE.md, "Eighth pass").
#pragma once

#include <cstddef>
#include <cstring>

namespace dtensor::detail {

// The loop's range of run lengths: for 64-byte runs it was no faster than
// memcpy, and for 16 KiB runs memcpy was as fast (0.95-0.97x the big copy
// either way).
inline constexpr size_t kCopyLoopMin = 256;
inline constexpr size_t kCopyLoopMax = size_t{16} << 10;

// The AVX2 loop. REQUIRES: the CPU has AVX2, n >= 32.
void copy_bytes_avx2(void* dst, const void* src, size_t n);

// std::memcpy(dst, src, n), through the AVX2 loop for runs of
// [kCopyLoopMin, kCopyLoopMax) bytes where simd_level() (simd.h) is AVX2
// or better, read once at construction: a collective makes one and copies
// hundreds of runs with it. Only bytes move, so every level gives the same
// result.
class ByteCopier {
 public:
  ByteCopier();
  // REQUIRES: [dst, dst + n) and [src, src + n) do not overlap.
  void operator()(void* dst, const void* src, size_t n) const {
    // (unsigned: n below kCopyLoopMin wraps around to a huge difference)
    if (wide_ && n - kCopyLoopMin < kCopyLoopMax - kCopyLoopMin) copy_bytes_avx2(dst, src, n);
    else std::memcpy(dst, src, n);
  }

 private:
  bool wide_;
};

}  // namespace dtensor::detail
