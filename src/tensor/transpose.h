// Internal: the transposing copy of a small tile, in vector registers.
//
// The tiled strided walk (loops.h) stages each 32x32 tile of an operand
// that is contiguous along the "wrong" dim through a buffer, transposed.
// An element-by-element copy there cost three times the kernel it feeds;
// transpose_tile moves 8x8 (4-byte), 4x4 (8-byte, AVX2) or 8x8 (1- and 2-
// byte) blocks through registers with unpack/shuffle instructions, and only
// the ragged edges of a tile element by element.
//
// It only moves bytes (no arithmetic), so every SIMD level gives the same
// bits; the level is the one simd_dispatch would pick (simd.h).
#pragma once

#include <cstdint>

namespace dtensor::detail {

// dst(c, r) = src(r, c) for r < rows, c < cols, for elements of `item`
// bytes: row r of src starts at src + r * src_stride and holds cols
// contiguous elements; row c of dst starts at dst + c * dst_stride and
// holds rows contiguous elements. Strides are in bytes and may be negative.
// With `stream`, the whole blocks are written with non-temporal stores
// (straight to memory, not read into the cache first) when dst and
// dst_stride are aligned for them; the result says whether they were, and
// then the caller must fence (_mm_sfence) before anyone reads dst.
// REQUIRES: item is 1, 2, 4 or 8; src and dst do not overlap.
bool transpose_tile(int64_t item, const char* src, int64_t src_stride, char* dst,
                    int64_t dst_stride, int64_t rows, int64_t cols, bool stream = false);

}  // namespace dtensor::detail
