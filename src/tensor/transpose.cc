// transpose_tile (transpose.h): square blocks through vector registers, the
// ragged edges element by element.
//
// Block sizes per level: the baseline (SSE2) transposes 8x8 bytes, 8x8
// 2-byte, 4x4 4-byte and 2x2 8-byte elements in 128-bit registers; AVX2
// does 8x8 4-byte and 4x4 8-byte ones in 256-bit registers, and pairs of
// them down the source (16x8, 8x4) that give each dst row a whole 64-byte
// line. The AVX-512 level uses the AVX2 blocks: a 16x16 float transpose
// needs two more shuffle stages, and on CPUs that split 512-bit shuffles
// into halves (Zen 4) it is no faster, while the tile (32 wide) is loaded
// from L1 either way.
//
// Every block comes in two store flavours: plain stores, and non-temporal
// ones (movnt*) for a large transposing copy written straight to memory
// (transpose.h). A wide band goes down its block columns first, so the
// rows of dst are written in runs as long as the band has rows:
// non-temporal stores fill whole cache lines in the write-combining
// buffers only if a line is finished before many others are started
// (tile_loop says more).
#include "tensor/transpose.h"

#include <emmintrin.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "tensor/simd.h"

namespace dtensor::detail {
namespace {

using Block = void (*)(const char* src, int64_t ss, char* dst, int64_t ds);

// The stores of a block: plain, or non-temporal (kStream). A non-temporal
// store needs its address aligned to its width; transpose_tile checks that
// once for the whole tile (see stream_aligned).
template <bool kStream>
inline void store64(char* p, __m128i v) {
  if constexpr (kStream) _mm_stream_si64(reinterpret_cast<long long*>(p), _mm_cvtsi128_si64(v));
  else _mm_storel_epi64(reinterpret_cast<__m128i*>(p), v);
}
template <bool kStream>
inline void store128(char* p, __m128i v) {
  if constexpr (kStream) _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
  else _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}
template <bool kStream>
__attribute__((target("avx2"))) inline void store256(char* p, __m256i v) {
  if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

// Blocks of B x B elements of S bytes where whole ones fit (and, with a
// kPair, pairs of them: 2B source rows), the rest one element at a time.
//
// Order: a wide band (walk_moves) goes one block column at a time, down
// all its rows, so dst's rows c..c+B-1 get all their whole blocks (a run of
// rb elements each) before the next ones. A narrow tile (at most 256 bytes
// of each source row: the tiled walk's staging) goes row block by row
// block across its whole width instead, each source line read whole at
// once; on Zen 3 a 4096x4096 float a.t() + b took 13% less time at 2
// threads (medians of 5 alternated runs; no different at 1 thread).
//
// kPair stores each dst row's two halves back to back, so a 4- or 8-byte
// transpose writes whole 64-byte lines: with non-temporal stores, a line
// left half written while seven other rows' stores go by was sometimes
// flushed half full (on Zen 3 a 4096x4096 float copy then took 2-3x as long
// as whole lines, in runs of seconds; docs/PERFORMANCE.md).
//
// Blocks also prefetch their source rows into L2, `ahead` bytes on: the
// next column block but three of a band, the next tile of a walk along the
// rows. The prefetches go block by block, each just before its block's
// loads, not all of a row block's at its start: in a staged a.t() + b tile
// (4 blocks across) the up-front batch took 12% longer (docs/PERFORMANCE.md,
// seventh pass). The source rows of a block are a page apart or more in a
// large transpose, each its own stream for the hardware prefetcher, which
// follows only a few dozen; on Zen 3 the pairs and this took a 4096x4096
// float copy from 1.9-2.8x memcpy to 1.3-1.5x. (On the Intel machine of the fourth
// pass, docs/PERFORMANCE.md, an L1 hint was slower and an L2 one no
// faster; hence L2.)
constexpr int64_t kAhead = 128;

template <int S, int B, Block kBlock, Block kPair = nullptr>
void tile_loop(const char* src, int64_t ss, char* dst, int64_t ds, int64_t rows, int64_t cols) {
  const int64_t rb = rows / B * B, cb = cols / B * B;
  const int64_t pb = kPair != nullptr ? rows / (2 * B) * (2 * B) : 0;
  const int64_t width = cols * S <= 256 ? std::max<int64_t>(cb, B) : B;
  const int64_t ahead = std::max<int64_t>(kAhead, width * S);
  // A block's B * S bytes of a row (8 to 32) lie in one 64-byte line of
  // the rows' own alignment: the first block of each line prefetches the
  // line `ahead` bytes on in each of its n rows.
  static_assert(B * S <= 64 && 64 % (B * S) == 0);
  auto prefetch = [&](int64_t r, int n, int64_t c) {
    if (c * S % 64 != 0) return;
    for (int i = 0; i < n; ++i) _mm_prefetch(src + (r + i) * ss + c * S + ahead, _MM_HINT_T1);
  };
  for (int64_t c0 = 0; c0 < cb; c0 += width) {
    const int64_t c1 = std::min(c0 + width, cb);
    int64_t r = 0;
    if constexpr (kPair != nullptr) {
      for (; r < pb; r += 2 * B) {
        for (int64_t c = c0; c < c1; c += B) {
          prefetch(r, 2 * B, c);
          kPair(src + r * ss + c * S, ss, dst + c * ds + r * S, ds);
        }
      }
    }
    for (; r < rb; r += B) {
      for (int64_t c = c0; c < c1; c += B) {
        prefetch(r, B, c);
        kBlock(src + r * ss + c * S, ss, dst + c * ds + r * S, ds);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    // the right strip of every row; the bottom rows in full
    for (int64_t c = r < rb ? cb : 0; c < cols; ++c) {
      std::memcpy(dst + c * ds + r * S, src + r * ss + c * S, S);
    }
  }
}

// ---- baseline (SSE2) --------------------------------------------------------

// 8x8 bytes: each row is one 64-bit load.
template <bool kStream>
void block_1x8(const char* s, int64_t ss, char* d, int64_t ds) {
  __m128i r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + i * ss));
  // a0 b0 a1 b1 ... a7 b7, and likewise for rows 2/3, 4/5, 6/7
  const __m128i p0 = _mm_unpacklo_epi8(r[0], r[1]), p1 = _mm_unpacklo_epi8(r[2], r[3]);
  const __m128i p2 = _mm_unpacklo_epi8(r[4], r[5]), p3 = _mm_unpacklo_epi8(r[6], r[7]);
  // a0 b0 c0 d0 ... a3 b3 c3 d3 | a4 .. d7
  const __m128i q0 = _mm_unpacklo_epi16(p0, p1), q1 = _mm_unpackhi_epi16(p0, p1);
  const __m128i q2 = _mm_unpacklo_epi16(p2, p3), q3 = _mm_unpackhi_epi16(p2, p3);
  // two output rows per register
  const __m128i o[4] = {_mm_unpacklo_epi32(q0, q2), _mm_unpackhi_epi32(q0, q2),
                        _mm_unpacklo_epi32(q1, q3), _mm_unpackhi_epi32(q1, q3)};
  for (int i = 0; i < 4; ++i) {
    store64<kStream>(d + (2 * i) * ds, o[i]);
    store64<kStream>(d + (2 * i + 1) * ds, _mm_srli_si128(o[i], 8));
  }
}

// 8x8 2-byte elements.
template <bool kStream>
void block_2x8(const char* s, int64_t ss, char* d, int64_t ds) {
  __m128i r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ss));
  __m128i p[8];
  for (int i = 0; i < 4; ++i) {
    p[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);      // a0 b0 .. a3 b3
    p[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // a4 b4 .. a7 b7
  }
  __m128i q[8];
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    const __m128i* x = p + 4 * h;
    q[4 * h + 0] = _mm_unpacklo_epi32(x[0], x[2]);  // a0 b0 c0 d0 a1 b1 c1 d1
    q[4 * h + 1] = _mm_unpackhi_epi32(x[0], x[2]);  // columns 2, 3
    q[4 * h + 2] = _mm_unpacklo_epi32(x[1], x[3]);  // columns 4, 5
    q[4 * h + 3] = _mm_unpackhi_epi32(x[1], x[3]);  // columns 6, 7
  }
  for (int i = 0; i < 4; ++i) {
    store128<kStream>(d + (2 * i) * ds, _mm_unpacklo_epi64(q[i], q[4 + i]));
    store128<kStream>(d + (2 * i + 1) * ds, _mm_unpackhi_epi64(q[i], q[4 + i]));
  }
}

// 4x4 4-byte elements (the moves are on float registers; no arithmetic, so
// NaN payloads pass unchanged).
template <bool kStream>
void block_4x4(const char* s, int64_t ss, char* d, int64_t ds) {
  __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(s));
  __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(s + ss));
  __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 2 * ss));
  __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 3 * ss));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  store128<kStream>(d, _mm_castps_si128(r0));
  store128<kStream>(d + ds, _mm_castps_si128(r1));
  store128<kStream>(d + 2 * ds, _mm_castps_si128(r2));
  store128<kStream>(d + 3 * ds, _mm_castps_si128(r3));
}

// 2x2 8-byte elements.
template <bool kStream>
void block_8x2(const char* s, int64_t ss, char* d, int64_t ds) {
  const __m128d r0 = _mm_loadu_pd(reinterpret_cast<const double*>(s));
  const __m128d r1 = _mm_loadu_pd(reinterpret_cast<const double*>(s + ss));
  store128<kStream>(d, _mm_castpd_si128(_mm_unpacklo_pd(r0, r1)));
  store128<kStream>(d + ds, _mm_castpd_si128(_mm_unpackhi_pd(r0, r1)));
}

template <bool kStream>
void transpose_baseline(int64_t item, const char* s, int64_t ss, char* d, int64_t ds,
                        int64_t rows, int64_t cols) {
  switch (item) {
    case 1: tile_loop<1, 8, block_1x8<kStream>>(s, ss, d, ds, rows, cols); return;
    case 2: tile_loop<2, 8, block_2x8<kStream>>(s, ss, d, ds, rows, cols); return;
    case 4: tile_loop<4, 4, block_4x4<kStream>>(s, ss, d, ds, rows, cols); return;
    default: tile_loop<8, 2, block_8x2<kStream>>(s, ss, d, ds, rows, cols); return;
  }
}

// ---- AVX2 -------------------------------------------------------------------

// 8x8 4-byte elements into o[0..7] (o[i]: column i of the block): pairs of
// rows interleaved, then pairs of pairs, then the 128-bit halves exchanged.
__attribute__((target("avx2"))) inline void regs_4x8(const char* s, int64_t ss, __m256i* o) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + i * ss));
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int h = 0; h < 2; ++h) {
    const __m256* x = t + 4 * h;
    u[4 * h + 0] = _mm256_shuffle_ps(x[0], x[2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(x[0], x[2], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(x[1], x[3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(x[1], x[3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    o[i] = _mm256_castps_si256(_mm256_permute2f128_ps(u[i], u[4 + i], 0x20));
    o[4 + i] = _mm256_castps_si256(_mm256_permute2f128_ps(u[i], u[4 + i], 0x31));
  }
}

// 4x4 8-byte elements into o[0..3] (o[i]: column i of the block).
__attribute__((target("avx2"))) inline void regs_8x4(const char* s, int64_t ss, __m256i* o) {
  __m256d r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_pd(reinterpret_cast<const double*>(s + i * ss));
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]);  // a0 b0 a2 b2
  const __m256d t1 = _mm256_unpackhi_pd(r[0], r[1]);  // a1 b1 a3 b3
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]);  // c0 d0 c2 d2
  const __m256d t3 = _mm256_unpackhi_pd(r[2], r[3]);  // c1 d1 c3 d3
  o[0] = _mm256_castpd_si256(_mm256_permute2f128_pd(t0, t2, 0x20));
  o[1] = _mm256_castpd_si256(_mm256_permute2f128_pd(t1, t3, 0x20));
  o[2] = _mm256_castpd_si256(_mm256_permute2f128_pd(t0, t2, 0x31));
  o[3] = _mm256_castpd_si256(_mm256_permute2f128_pd(t1, t3, 0x31));
}

// A register transpose of B source rows into B vectors, one per dst row.
using Regs = void (*)(const char* s, int64_t ss, __m256i* o);

// One register block, stored as B dst rows.
template <int B, Regs kRegs, bool kStream>
__attribute__((target("avx2"))) void block_avx2(const char* s, int64_t ss, char* d, int64_t ds) {
  __m256i o[B];
  kRegs(s, ss, o);
  for (int i = 0; i < B; ++i) store256<kStream>(d + i * ds, o[i]);
}

// Two register blocks, 2B source rows: each dst row gets 64 contiguous bytes.
template <int B, Regs kRegs, bool kStream>
__attribute__((target("avx2"))) void pair_avx2(const char* s, int64_t ss, char* d, int64_t ds) {
  __m256i lo[B], hi[B];
  kRegs(s, ss, lo);
  kRegs(s + B * ss, ss, hi);
  for (int i = 0; i < B; ++i) {
    store256<kStream>(d + i * ds, lo[i]);
    store256<kStream>(d + i * ds + 32, hi[i]);
  }
}

template <bool kStream>
__attribute__((target("avx2"), flatten)) void transpose_avx2(int64_t item, const char* s,
                                                             int64_t ss, char* d, int64_t ds,
                                                             int64_t rows, int64_t cols) {
  switch (item) {
    case 4:
      tile_loop<4, 8, block_avx2<8, regs_4x8, kStream>, pair_avx2<8, regs_4x8, kStream>>(
          s, ss, d, ds, rows, cols);
      return;
    case 8:
      tile_loop<8, 4, block_avx2<4, regs_8x4, kStream>, pair_avx2<4, regs_8x4, kStream>>(
          s, ss, d, ds, rows, cols);
      return;
    default: transpose_baseline<kStream>(item, s, ss, d, ds, rows, cols); return;
  }
}

// The widest store of the level's block for this item size: every whole
// block stores at dst + c * ds + r * item with r a multiple of the block
// edge, so dst and ds aligned to it align every store.
bool stream_aligned(bool avx2, int64_t item, const char* dst, int64_t ds) {
  const int64_t width = avx2 && (item == 4 || item == 8) ? 32 : item == 1 ? 8 : 16;
  return ((reinterpret_cast<uintptr_t>(dst) | static_cast<uint64_t>(ds)) & (width - 1)) == 0;
}

}  // namespace

bool transpose_tile(int64_t item, const char* src, int64_t src_stride, char* dst,
                    int64_t dst_stride, int64_t rows, int64_t cols, bool stream) {
  const bool avx2 = simd_level() >= SimdLevel::kAvx2;
  stream = stream && stream_aligned(avx2, item, dst, dst_stride);
  if (avx2) {
    if (stream) transpose_avx2<true>(item, src, src_stride, dst, dst_stride, rows, cols);
    else transpose_avx2<false>(item, src, src_stride, dst, dst_stride, rows, cols);
  } else {
    if (stream) transpose_baseline<true>(item, src, src_stride, dst, dst_stride, rows, cols);
    else transpose_baseline<false>(item, src, src_stride, dst, dst_stride, rows, cols);
  }
  return stream;
}

}  // namespace dtensor::detail
