// Internal: the one strided N-operand loop every elementwise kernel runs on.
//
// for_each_strided walks a common shape over N operands, each given by a base
// pointer and byte strides (stride 0 = broadcast), and hands the kernel runs
// of the innermost dim: kernel(ptrs, n, inner_strides). Adjacent dims that
// are contiguous for every operand are coalesced first, so a contiguous or a
// plainly broadcast tensor is one long run whatever its rank, and a kernel
// can check `inner_strides[k] == sizeof(T)` to take a vectorisable path.
//
// Two things on top of the plain walk:
//
// * Threads. Operand 0 is the output (or a reduction's accumulator). The
//   walk is cut along one dim where operand 0's stride is nonzero into
//   blocks of at least kParallelGrain elements, and the blocks run through
//   parallel_for. Each element of operand 0 then belongs to exactly one
//   block, and every element sees the same sequence of kernel calls as in
//   a one-thread walk (a reduction slot still folds its inputs in the same
//   order), so the bits do not depend on the thread count. The kernel may
//   therefore be called concurrently on disjoint parts: it must write only
//   through operand 0 (or operands laid out like it). A kernel that keeps
//   state of its own (a running max in a captured variable) must use
//   for_each_strided_serial.
//
// * Tiles. When some operand's fastest dim is not the innermost one (a.t()
//   + b, a permuted tensor made contiguous), walking runs of the innermost
//   dim reads that operand a cache line per element and comes back for the
//   next element of each line only after a whole row. The walk then goes
//   over tiles of kTile x kTileRun elements of the two dims, so each line
//   is used up while it is still in L1.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/parallel.h"
#include "dtensor/tensor.h"
#include "tensor/simd.h"
#include "tensor/transpose.h"

namespace dtensor::detail {

template <size_t N>
struct StridedOperands {
  std::array<char*, N> base{};
  // byte strides per operand per dim
  std::array<std::array<int64_t, kMaxDims>, N> strides{};
  // element size per operand in bytes, 0 if unknown (then it is never
  // staged through a tile buffer)
  std::array<int64_t, N> item{};
};

// Elements a parallel block should carry at least: at a few GB/s, 32K
// floats take ~20-50 us, which pays for waking a worker.
inline constexpr int64_t kParallelGrain = int64_t{1} << 15;
// Tile edges for walks whose operands disagree on the fastest dim: kTile
// along the tiled dim, kTileRun along the innermost one. The operands read
// in place get runs of kTileRun elements (512 bytes of floats, 8 lines) per
// row and tile, where the hardware prefetcher follows them; with square
// 32x32 tiles every row of a tile was two demand misses and a 4096x4096
// float32 a.t() + b took 1.3-1.5x as long (docs/PERFORMANCE.md). A staged
// tile is then up to 32 KiB (8-byte elements), 16 KiB for floats.
inline constexpr int64_t kTile = 32;
inline constexpr int64_t kTileRun = 128;
// Tiles are visited in blocks of kTileBlock x kTileBlock (256 KiB of
// floats per operand, within L2). With a 16 KiB row stride every row of a
// tile is its own 4 KiB page and its own prefetch stream. Inside a block
// the walk goes down the innermost dim's tiles last: a staged (transposed)
// operand then reads kTileRun of its rows for 1 KiB each in order (with
// transpose_tile's software prefetch), while the contiguous operands move
// through 32-row bands. The other order (the tile dim last) was 1.2-1.7x slower
// on a 4096x4096 transposing copy (docs/PERFORMANCE.md).
inline constexpr int64_t kTileBlock = 256;
// A tiled walk whose output (operand 0) spans at least this many bytes, and
// is contiguous along the innermost dim, writes it with non-temporal
// stores: a transposing copy then moves its bytes once each way instead of
// also reading every output line in first (read-for-ownership). Below it
// the output may still be in cache for the next op, which streaming would
// throw away. (glibc's memcpy streams only from 127 MiB on this machine, so
// the memcpy yardstick of docs/PERFORMANCE.md pays that read.)
inline constexpr int64_t kStreamBytes = int64_t{16} << 20;
// kStreamBytes, unless a test lowered it to run the streaming path on small
// tensors (tests/tensor/transpose_test.cc).
inline std::atomic<int64_t> stream_bytes{kStreamBytes};
inline int64_t stream_threshold() { return stream_bytes.load(std::memory_order_relaxed); }

// Options of for_each_strided, or-ed together. The walk functions below
// take them as a template argument too and compile only the paths a flag
// allows: a reduction's walk (kNoTiles, no kMove or kOverwrite) holds one
// copy of its kernel rather than three (rows, tiles, streamed pieces),
// which simd_dispatch then makes per instruction set.
enum WalkFlags : int {
  // No tiles. Reductions pass it: tiles would cut a slot's run into
  // kTile-element pieces (changing how its fold splits into lanes), and a
  // reduction walk already follows the input's memory order.
  kNoTiles = 1,
  // Run the walk (each parallel block) through simd_dispatch, so the
  // kernel is compiled for AVX2 / AVX-512 too. Only for files that turn FP
  // contraction off (see simd.h). Reductions use it; the elementwise ops
  // dispatch inside their kernel, on contiguous runs only
  // (simd_dispatch_run, elementwise_map.h says why). Moving reduce.cc's
  // kernels to that too made it slower to compile (33 s against 20 s):
  // their baseline copies, inlined at -O3 without `flatten`, cost more than
  // the walk copies saved.
  kSimd = 2,
  // The kernel copies operand 1 into operand 0 unchanged, element for
  // element of one size (a same-dtype copy). A walk that would tile then
  // moves the bytes itself (walk_moves) without calling the kernel.
  kMove = 4,
  // The kernel writes operand 0 without reading it (elementwise ops,
  // copies): a large output is then streamed (Walk::stream).
  kOverwrite = 8,
};

namespace loops {

// A walk after dropping size-1 dims and coalescing contiguous ones.
template <size_t N>
struct Walk {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  std::array<std::array<int64_t, kMaxDims>, N> st{};
  std::array<int64_t, N> item{};
  int tile_dim = -1;  // the dim tiled against the innermost one, or -1
  // The kernel overwrites operand 0 (kOverwrite), which spans at least
  // stream_threshold() bytes: a tiled copy or walk_rows streams it out.
  bool stream = false;
  bool move = false;    // a transposing byte move (kMove): walk_moves instead of tiles
};

// Copies `bytes` from the 16-byte aligned buffer `src` to `dst` with
// non-temporal stores when dst is 16-byte aligned (a tile row of 32 floats
// is two whole cache lines), the last bytes short of 16 and an unaligned
// dst with memcpy. The bytes are the same either way; only whether the
// lines go through the cache.
inline void stream_row(char* dst, const char* src, int64_t bytes) {
  int64_t i = 0;
#if defined(__SSE2__)
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    for (; i + 16 <= bytes; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm_load_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
#endif
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
}

// false when the shape is empty (nothing to walk).
template <size_t N>
bool coalesce(const Shape& shape, const StridedOperands<N>& ops, Walk<N>& w) {
  int64_t sizes[kMaxDims];
  std::array<std::array<int64_t, kMaxDims>, N> st;
  int nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return false;
    if (shape[d] == 1) continue;
    sizes[nd] = shape[d];
    for (size_t k = 0; k < N; ++k) st[k][nd] = ops.strides[k][d];
    ++nd;
  }
  // Merge dim d (outer) into the running inner dim when every operand's
  // outer stride equals inner stride * inner size.
  w.nd = 0;
  w.item = ops.item;
  if (nd == 0) return true;
  int out = nd - 1;  // write position walking outward
  int64_t csizes[kMaxDims];
  std::array<std::array<int64_t, kMaxDims>, N> cst;
  csizes[out] = sizes[nd - 1];
  for (size_t k = 0; k < N; ++k) cst[k][out] = st[k][nd - 1];
  for (int d = nd - 2; d >= 0; --d) {
    bool mergeable = true;
    for (size_t k = 0; k < N; ++k) {
      if (st[k][d] != cst[k][out] * csizes[out]) {
        mergeable = false;
        break;
      }
    }
    if (mergeable) {
      csizes[out] *= sizes[d];
    } else {
      --out;
      csizes[out] = sizes[d];
      for (size_t k = 0; k < N; ++k) cst[k][out] = st[k][d];
    }
  }
  w.nd = nd - out;
  for (int d = 0; d < w.nd; ++d) {
    w.sizes[d] = csizes[out + d];
    for (size_t k = 0; k < N; ++k) w.st[k][d] = cst[k][out + d];
  }
  return true;
}

// The dim to tile against the innermost one: the fastest dim of the first
// operand whose innermost stride spans at least a cache line while another
// of its dims moves through memory faster. -1 when every operand reads
// its runs in cache-friendly order (or the walk is too small to matter).
template <size_t N>
int pick_tile_dim(const Walk<N>& w) {
  if (w.nd < 2) return -1;
  const int last = w.nd - 1;
  if (w.sizes[last] < kTile / 2) return -1;
  for (size_t k = 0; k < N; ++k) {
    const int64_t inner = std::abs(w.st[k][last]);
    if (inner < 64) continue;
    int fast = -1;
    int64_t best = inner;
    for (int d = 0; d < last; ++d) {
      const int64_t s = std::abs(w.st[k][d]);
      if (s != 0 && s < best && w.sizes[d] >= kTile / 2) {
        best = s;
        fast = d;
      }
    }
    if (fast >= 0) return fast;
  }
  return -1;
}

// Advances the odometer of dims [0, dims) by one and moves the pointers
// with it; false when it wrapped around (every row was visited).
template <size_t N>
bool next_row(const Walk<N>& w, int dims, int64_t* idx, std::array<char*, N>& p) {
  for (int d = dims - 1; d >= 0; --d) {
    if (++idx[d] < w.sizes[d]) {
      for (size_t k = 0; k < N; ++k) p[k] += w.st[k][d];
      return true;
    }
    for (size_t k = 0; k < N; ++k) p[k] -= w.st[k][d] * (w.sizes[d] - 1);
    idx[d] = 0;
  }
  return false;
}

// One run of walk_rows with a large contiguous output (w.stream): the
// kernel computes pieces of up to 4 KiB into an L1 buffer standing in for
// operand 0, and each piece is streamed out whole (stream_row), after a head
// written in place up to 16-byte alignment. A large output then is not read
// into the cache before each line is written: on this machine an allocating
// 64 MiB add took ~15% less time, and an op reading such an output next was
// no slower from 8 MiB up (docs/PERFORMANCE.md). The kernel runs the same
// code on the same inputs either way (its operand 0 has unit stride in both
// cases), so the bits are the same; only which elements fall in a loop's
// scalar tail moves with the pieces, which can change the payload of a sum
// of two NaNs (IEEE 754 leaves it open). The choice depends on the output's
// size and address, never on the thread count. Only for walks
// whose kernel writes operand 0 without reading it (kOverwrite); an
// in-place op (operand 0 also an input) writes in place, having read each
// line anyway.
template <size_t N, class Kernel>
void stream_run(const Walk<N>& w, std::array<char*, N> p, int64_t n,
                const std::array<int64_t, N>& inner, Kernel& kernel) {
  const int64_t item = w.item[0];
  bool in_place = false;
  for (size_t k = 1; k < N; ++k) in_place |= p[k] == p[0];
  if (in_place || inner[0] != item) {
    kernel(p, n, inner);
    return;
  }
  std::array<char*, N> q = p;
  const int64_t head =
      std::min(n, static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(p[0]) % 16) % 16) / item);
  if (head > 0) kernel(q, head, inner);
  constexpr int64_t kPiece = 4096;
  alignas(64) char buf[kPiece];
  const int64_t per_piece = kPiece / item;
  for (int64_t i = head; i < n; i += per_piece) {
    const int64_t m = std::min(per_piece, n - i);
    for (size_t k = 1; k < N; ++k) q[k] = p[k] + i * inner[k];
    q[0] = buf;
    kernel(q, m, inner);
    stream_row(p[0] + i * item, buf, m * item);
  }
}

// The plain walk: runs of the innermost dim in row-major order of the rest.
template <int kFlags, size_t N, class Kernel>
void walk_rows(const Walk<N>& w, std::array<char*, N> p, Kernel& kernel) {
  std::array<int64_t, N> inner{};
  if (w.nd == 0) {  // a single element
    kernel(p, int64_t{1}, inner);
    return;
  }
  for (size_t k = 0; k < N; ++k) inner[k] = w.st[k][w.nd - 1];
  const int64_t n_inner = w.sizes[w.nd - 1];
  const int outer_nd = w.nd - 1;
  int64_t idx[kMaxDims] = {};
  while (true) {
    if constexpr ((kFlags & kOverwrite) != 0) {
      if (w.stream) stream_run(w, p, n_inner, inner, kernel);
      else kernel(p, n_inner, inner);
    } else {
      kernel(p, n_inner, inner);
    }
    if (!next_row(w, outer_nd, idx, p)) return;
  }
}

// Copies a jn x ln tile (element (r, c) at mem + r * sj + c * sl, with sj
// the element size: contiguous along r) into buf as jn contiguous rows of
// ln, or back (kToBuffer false): a transpose, done in registers
// (transpose.h).
template <bool kToBuffer>
inline void stage_tile(int64_t item, char* buf, char* mem, int64_t jn, int64_t ln, int64_t sl) {
  if constexpr (kToBuffer) transpose_tile(item, mem, sl, buf, ln * item, ln, jn);
  else transpose_tile(item, buf, ln * item, mem, sl, jn, ln);
}

// Calls plane(p) with the operands' pointers at each index tuple of the
// dims other than tile_dim and the innermost one, in row-major order.
template <size_t N, class Plane>
void for_each_plane(const Walk<N>& w, const std::array<char*, N>& base, Plane& plane) {
  Walk<N> rest;  // the other dims, as a walk of single elements
  for (int d = 0; d < w.nd - 1; ++d) {
    if (d == w.tile_dim) continue;
    rest.sizes[rest.nd] = w.sizes[d];
    for (size_t k = 0; k < N; ++k) rest.st[k][rest.nd] = w.st[k][d];
    ++rest.nd;
  }
  if (rest.nd == 0) {
    plane(base);
    return;
  }
  // Walk `rest` one element per "run": make its innermost dim a run of 1.
  rest.sizes[rest.nd] = 1;
  for (size_t k = 0; k < N; ++k) rest.st[k][rest.nd] = 0;
  ++rest.nd;
  auto run = [&plane](const std::array<char*, N>& p, int64_t, const std::array<int64_t, N>&) {
    plane(p);
  };
  walk_rows<0>(rest, base, run);
}

// The tiled walk: the dims other than tile_dim (j) and the innermost (l) in
// row-major order, and for each of their index tuples the (j, l) plane in
// kTile x kTileRun tiles, each tile as kTile runs of up to kTileRun
// elements.
//
// An operand whose elements are contiguous along j is staged: its tile is
// copied (transposed) into a small buffer first, and the kernel reads the
// buffer with a unit stride, so the kernel takes its vectorised path and
// the operand is read in whole lines. Lines kTile elements apart along l
// map to the same L1 set when the stride is a multiple of 4 KiB (a 4096-
// float matrix), so reading them in place would thrash L1 however small
// the tile. A staged operand 0 (a transposed output) is written to its
// buffer by the kernel and copied out after each tile.
template <int kFlags, size_t N, class Kernel>
void walk_tiles(const Walk<N>& w, std::array<char*, N> base, Kernel& kernel) {
  const int j = w.tile_dim, l = w.nd - 1;
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = w.st[k][l];
  std::array<bool, N> staged{};
  for (size_t k = 0; k < N; ++k) {
    const int64_t item = w.item[k];
    staged[k] = (item == 1 || item == 2 || item == 4 || item == 8) && w.st[k][j] == item &&
                std::abs(w.st[k][l]) >= 64;
  }
  // A large output contiguous along l goes through its tile buffer too, and
  // each tile row is streamed out (stream_row). Copies only (one input): on
  // a 4096x4096 float32 a.t().contiguous() this took 0.7-0.95x the CPU time,
  // but a.t() + b 1.0-1.5x (docs/PERFORMANCE.md), so two-input kernels
  // keep writing in place. (With 32x128 tiles, streaming a.t() + b's output
  // made no difference either way on Zen 3.)
  const bool stream0 = N == 2 && (kFlags & kOverwrite) != 0 && w.stream && !staged[0] &&
                       w.st[0][l] == w.item[0] && w.item[0] > 0 && w.item[0] <= 8;
  alignas(64) char buf[N][kTile * kTileRun * 8];
  auto plane = [&](std::array<char*, N> p) {
    for (int64_t jb = 0; jb < w.sizes[j]; jb += kTileBlock)
    for (int64_t lb = 0; lb < w.sizes[l]; lb += kTileBlock)
    for (int64_t l0 = lb; l0 < std::min(w.sizes[l], lb + kTileBlock); l0 += kTileRun) {
      const int64_t ln = std::min(kTileRun, w.sizes[l] - l0);
      for (int64_t j0 = jb; j0 < std::min(w.sizes[j], jb + kTileBlock); j0 += kTile) {
        const int64_t jn = std::min(kTile, w.sizes[j] - j0);
        std::array<char*, N> q;
        std::array<int64_t, N> step, run_st;
        for (size_t k = 0; k < N; ++k) {
          char* origin = p[k] + j0 * w.st[k][j] + l0 * w.st[k][l];
          if (staged[k] || (k == 0 && stream0)) {
            if (k != 0) stage_tile<true>(w.item[k], buf[k], origin, jn, ln, w.st[k][l]);
            q[k] = buf[k];
            step[k] = ln * w.item[k];
            run_st[k] = w.item[k];
          } else {
            q[k] = origin;
            step[k] = w.st[k][j];
            run_st[k] = inner[k];
          }
        }
        for (int64_t r = 0; r < jn; ++r) {
          kernel(q, ln, run_st);
          for (size_t k = 0; k < N; ++k) q[k] += step[k];
        }
        if (staged[0]) {
          stage_tile<false>(w.item[0], buf[0], p[0] + j0 * w.st[0][j] + l0 * w.st[0][l], jn, ln,
                            w.st[0][l]);
        } else if (stream0) {
          const int64_t row = ln * w.item[0];
          char* out = p[0] + j0 * w.st[0][j] + l0 * w.item[0];
          for (int64_t r = 0; r < jn; ++r)
            stream_row(out + r * w.st[0][j], buf[0] + r * row, row);
        }
      }
    }
  };
  for_each_plane(w, base, plane);
  // (for_each_strided fences after a walk that streams)
}

// Whether a walk that tiles is a transposing byte move walk_moves can do:
// two operands of one item size (1, 2, 4 or 8 bytes), each contiguous
// along one of the two tiled dims, a different one each.
template <size_t N>
bool can_move(const Walk<N>& w) {
  if constexpr (N != 2) {
    return false;
  } else {
    const int64_t item = w.item[0];
    if (w.tile_dim < 0 || item != w.item[1] || !(item == 1 || item == 2 || item == 4 || item == 8))
      return false;
    const int j = w.tile_dim, l = w.nd - 1;
    return (w.st[0][l] == item && w.st[1][j] == item) || (w.st[0][j] == item && w.st[1][l] == item);
  }
}

// A transposing byte move (can_move): operand 1's bytes go to operand 0
// through transpose_tile, register blocks straight from one to the other,
// with no kernel call and no staging buffer. Each plane goes in bands of
// 256 bytes' worth of source rows (rows_at_once) by 1,024 columns, down
// the columns first (see transpose.cc), so each destination row is written
// a run of 256 bytes at a time (four whole lines, which non-temporal
// stores need to fill their write-combining buffers) while the source is
// read rows_at_once rows at a time, 1,024 elements along each, before the
// next band. On a 4096x4096 float32 transposing copy this order with
// non-temporal stores took ~1.75x memcpy where 32x32 tiles took 3.2x
// (docs/PERFORMANCE.md). Large outputs (w.stream) are streamed.
inline void walk_moves(const Walk<2>& w, const std::array<char*, 2>& base) {
  const int64_t item = w.item[0];
  // a: the dim along which the source (operand 1) is contiguous, the
  // destination's row dim; b: the destination's contiguous dim.
  const int l = w.nd - 1;
  const int a = w.st[1][l] == item ? l : w.tile_dim, b = a == l ? w.tile_dim : l;
  const int64_t rows_at_once = 256 / item, cols_at_once = 1024;
  auto plane = [&](const std::array<char*, 2>& p) {
    for (int64_t a0 = 0; a0 < w.sizes[a]; a0 += cols_at_once) {
      const int64_t an = std::min(cols_at_once, w.sizes[a] - a0);
      for (int64_t b0 = 0; b0 < w.sizes[b]; b0 += rows_at_once) {
        const int64_t bn = std::min(rows_at_once, w.sizes[b] - b0);
        transpose_tile(item, p[1] + b0 * w.st[1][b] + a0 * item, w.st[1][b],
                       p[0] + a0 * w.st[0][a] + b0 * item, w.st[0][a], bn, an, w.stream);
      }
    }
  };
  for_each_plane(w, base, plane);
}

// A kernel called out of line, through a pointer: one body, which the
// rows, the streamed pieces and the tiles all call, and walks compiled once
// per operand count and flags rather than once per kernel. Inlined into
// each walk, the elementwise ops compiled every kernel three times over
// and every walk once per op and dtype (the elementwise_*.cc units were the
// slowest to compile after reduce.cc), for nothing at run time: each call
// does a run of elements. Not for walks under simd_dispatch, whose kernels
// must be inlined into each instruction set's copy.
template <size_t N>
struct KernelRef {
  using Fn = void (*)(void*, const std::array<char*, N>&, int64_t, const std::array<int64_t, N>&);
  void* context;
  Fn fn;
  template <class Kernel>
  static KernelRef of(Kernel& kernel) {
    return {&kernel, [](void* c, const std::array<char*, N>& p, int64_t n,
                        const std::array<int64_t, N>& st) { (*static_cast<Kernel*>(c))(p, n, st); }};
  }
  void operator()(const std::array<char*, N>& p, int64_t n, const std::array<int64_t, N>& st) const {
    fn(context, p, n, st);
  }
};

template <int kFlags, size_t N, class Kernel>
void walk(const Walk<N>& w, const std::array<char*, N>& base, Kernel& kernel) {
  if constexpr (N == 2 && (kFlags & kMove) != 0) {
    if (w.move) return walk_moves(w, base);
  }
  if constexpr ((kFlags & kNoTiles) == 0) {
    if (w.tile_dim >= 0) return walk_tiles<kFlags>(w, base, kernel);
  }
  walk_rows<kFlags>(w, base, kernel);
}

}  // namespace loops

// One thread, in walk order; for kernels with state of their own.
template <size_t N, class Kernel>
void for_each_strided_serial(const Shape& shape, const StridedOperands<N>& ops, Kernel&& kernel) {
  loops::Walk<N> w;
  if (!loops::coalesce(shape, ops, w)) return;
  w.tile_dim = loops::pick_tile_dim(w);
  loops::walk<0>(w, ops.base, kernel);
}

// See the file comment: possibly on several threads, each element of
// operand 0 handled by one of them.
// REQUIRES: kernel writes only through operand 0 (or operands with
// operand 0's strides), and no two elements of operand 0 outside its
// stride-0 dims share memory.
template <size_t N, int kFlags = 0, class Kernel>
void for_each_strided(const Shape& shape, const StridedOperands<N>& ops, Kernel&& kernel) {
  loops::Walk<N> w;
  if (!loops::coalesce(shape, ops, w)) return;
  if constexpr (!(kFlags & kNoTiles)) w.tile_dim = loops::pick_tile_dim(w);
  if constexpr ((kFlags & kMove) != 0) w.move = loops::can_move(w);
  if constexpr ((kFlags & kOverwrite) != 0) {
    // Operand 0's bytes: its non-broadcast dims only.
    int64_t out_bytes = w.item[0];
    for (int d = 0; d < w.nd; ++d)
      if (w.st[0][d] != 0) out_bytes *= w.sizes[d];
    w.stream = out_bytes >= stream_threshold();
  }
  auto run = [&kernel](const loops::Walk<N>& sub, const std::array<char*, N>& p) {
    if constexpr ((kFlags & kSimd) != 0) {
      simd_dispatch([&] { loops::walk<kFlags>(sub, p, kernel); });
    } else {
      // (a copy of the pointers: some kernels advance theirs)
      auto call = [&kernel](std::array<char*, N> q, int64_t n, const std::array<int64_t, N>& st) {
        kernel(q, n, st);
      };
      const loops::KernelRef<N> body = loops::KernelRef<N>::of(call);
      loops::walk<kFlags>(sub, p, body);
    }
#if defined(__SSE2__)
    // Non-temporal stores are not ordered by the release that publishes a
    // parallel block's end (or by anything but a fence).
    if (sub.stream) _mm_sfence();
#endif
  };
  int64_t total = 1;
  for (int d = 0; d < w.nd; ++d) total *= w.sizes[d];
  // Whether to split never changes the bits (see above), so a small walk
  // or a one-thread setting skips the bookkeeping.
  if (total < 2 * kParallelGrain || threads_available() == 1) {
    run(w, ops.base);
    return;
  }
  // Split the outermost dim along which operand 0 moves (so each block is
  // a contiguous slab of the output when it is contiguous).
  int s = -1;
  for (int d = 0; d < w.nd; ++d) {
    if (w.st[0][d] != 0) {
      s = d;
      break;
    }
  }
  if (s < 0) {
    run(w, ops.base);
    return;
  }
  const int64_t per_index = total / w.sizes[s];
  int64_t block = std::max<int64_t>(1, (kParallelGrain + per_index - 1) / per_index);
  // A block narrower than a tile (or, on the innermost dim, than a few
  // cache lines) would make neighbouring blocks share lines. Blocks of
  // whole tiles also cut every run at the same elements whatever the
  // thread count, so a kernel's vector loop and scalar tail see the same
  // elements (the bits of NaN + NaN can depend on which one computes it).
  if (s == w.tile_dim || (w.tile_dim >= 0 && s == w.nd - 1)) {
    const int64_t unit = s == w.tile_dim ? kTile : kTileRun;
    block = (block + unit - 1) / unit * unit;
    // Whole tile blocks where the dim is long enough for two of them.
    block = std::max(block, std::min(kTileBlock, w.sizes[s] / 2 / unit * unit));
  } else if (s == w.nd - 1) {
    block = std::max<int64_t>(block, 1024);
  }
  const int64_t blocks = (w.sizes[s] + block - 1) / block;
  if (blocks < 2) {
    run(w, ops.base);
    return;
  }
  parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    loops::Walk<N> sub = w;
    const int64_t lo = b * block;
    sub.sizes[s] = std::min(w.sizes[s], e * block) - lo;
    std::array<char*, N> p = ops.base;
    for (size_t k = 0; k < N; ++k) p[k] += lo * w.st[k][s];
    run(sub, p);
  });
}

// Calls kernel on the runs covering elements [begin, end) of a walk in
// walk order (the order walk_rows visits them), for fixed-block reductions.
// REQUIRES: w has no tiles; 0 <= begin <= end <= the walk's element count.
template <size_t N, class Kernel>
void walk_range(const loops::Walk<N>& w, std::array<char*, N> p, int64_t begin, int64_t end,
                Kernel& kernel) {
  std::array<int64_t, N> inner{};
  if (begin >= end) return;
  if (w.nd == 0) {
    kernel(p, int64_t{1}, inner);
    return;
  }
  const int last = w.nd - 1;
  for (size_t k = 0; k < N; ++k) inner[k] = w.st[k][last];
  int64_t idx[kMaxDims] = {};
  int64_t rem = begin;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % w.sizes[d];
    rem /= w.sizes[d];
    for (size_t k = 0; k < N; ++k) p[k] += idx[d] * w.st[k][d];
  }
  int64_t left = end - begin;
  while (true) {
    const int64_t n = std::min(left, w.sizes[last] - idx[last]);
    kernel(p, n, inner);
    left -= n;
    if (left == 0) return;
    // to the start of the next row
    for (size_t k = 0; k < N; ++k) p[k] -= idx[last] * w.st[k][last];
    idx[last] = 0;
    next_row(w, last, idx, p);
  }
}

// Describes tensor t as operand k of ops, broadcast to `shape` (t's dims are
// right-aligned; missing or size-1 dims get stride 0).
// REQUIRES: t's shape broadcasts to shape.
// An empty tensor may carry strides whose byte value overflows ([0, 2^63-1]
// has stride 2^63-1); its elements are never touched, so its byte strides
// are 0.
template <size_t N>
void set_operand(StridedOperands<N>& ops, size_t k, const Tensor& t, const Shape& shape) {
  ops.base[k] = static_cast<char*>(t.raw_data());
  ops.item[k] = static_cast<int64_t>(t.itemsize());
  const int64_t item = t.numel() == 0 ? 0 : static_cast<int64_t>(t.itemsize());
  const size_t lead = shape.size() - t.shape().size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < lead) {
      ops.strides[k][d] = 0;
    } else {
      const size_t td = d - lead;
      ops.strides[k][d] = t.shape()[td] == 1 ? 0 : t.strides()[td] * item;
    }
  }
}

}  // namespace dtensor::detail
