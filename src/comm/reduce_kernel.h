// The reduction kernel both backends fold with, so that a reduction gives the
// same bits in the simulated world and under MPI: out = (((in[0] op in[1])
// op in[2]) ...) element by element, in the group order of the inputs, then
// / n for avg. The simulated backend hands it the group's shards; the MPI
// backend the pieces it received, in member order (mpi_fold.cc). Since
// every element is folded on its own, how a caller cuts the data into runs
// (row ranges, flat pieces, blocks) never changes a result bit.
//
// Sums of integers wrap on overflow, bool sum is logical or (as in
// PyTorch); max and min propagate NaN like torch.maximum / torch.minimum.
// bfloat16 and float16 travel as themselves (half the bytes of float32) and
// fold in float32: each element's n inputs are widened, folded in the same
// order, divided for avg, and rounded once (not at every step, as a fold
// in the 16-bit type would).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dtensor/placement.h"
#include "dtensor/tensor.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dtensor::reduce_kernel {

template <class T>
struct SumOp {
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<T>) {
      // Wraps on overflow (as every real backend does) instead of being UB.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
// NaN wins: a NaN on either side gives a NaN (MPI_MAX / MPI_MIN drop it).
template <class T>
struct MaxOp {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return a > b || a != a ? a : b;
    else return a > b ? a : b;
  }
};
template <class T>
struct MinOp {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return a < b || a != a ? a : b;
    else return a < b ? a : b;
  }
};

// Copies a finished block to another output with streaming stores (on
// x86): they bypass the cache, which saves the read-for-ownership of every
// destination line and keeps the block being folded in L1, but also leaves
// the outputs out of cache for whoever reads them next; reduce_run uses
// them only for large outputs. Falls back to memcpy when unaligned.
inline void copy_block(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) % 16 == 0) {
    auto* d = static_cast<__m128i*>(dst);
    const auto* s = static_cast<const __m128i*>(src);
    for (size_t i = 0; i < bytes / 16; ++i) _mm_stream_si128(d + i, _mm_load_si128(s + i));
    _mm_sfence();  // streaming stores are weakly ordered; publish them to other threads
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// out[0][i] = (((in[0][i] op in[1][i]) op in[2][i]) ...) [/ n for avg], for
// i < count, copied to out[1..nout), with streaming stores when `stream`:
// the caller says so for outputs too large to stay in cache anyway (in
// cache, streaming made a 256 KiB P->R on 8 simulated ranks 1.7x slower;
// docs/PERFORMANCE.md). The block is small enough to stay in L1 while all
// n inputs are folded into it.
template <class T, class Op>
void reduce_run(const T* const* in, size_t n, T* const* out, size_t nout, int64_t count,
                bool avg, bool stream) {
  constexpr int64_t kBlock = 16384 / sizeof(T);  // 16 KiB: half of a typical L1d
  const Op op;
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    T* __restrict o = out[0] + b;
    if (n == 1) {
      std::memcpy(o, in[0] + b, static_cast<size_t>(m) * sizeof(T));
    } else {
      const T* __restrict a = in[0] + b;
      const T* __restrict c = in[1] + b;
      for (int64_t i = 0; i < m; ++i) o[i] = op(a[i], c[i]);
      for (size_t k = 2; k < n; ++k) {
        const T* __restrict s = in[k] + b;
        for (int64_t i = 0; i < m; ++i) o[i] = op(o[i], s[i]);
      }
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (avg) {
        const T d = static_cast<T>(n);
        for (int64_t i = 0; i < m; ++i) o[i] = o[i] / d;
      }
    }
    for (size_t j = 1; j < nout; ++j) {
      if (stream) copy_block(out[j] + b, o, static_cast<size_t>(m) * sizeof(T));
      else std::memcpy(out[j] + b, o, static_cast<size_t>(m) * sizeof(T));
    }
  }
#if defined(__SSE2__)
  if (stream) _mm_sfence();  // order the streaming stores before the outputs are handed out
#endif
}

// reduce_run for the 16-bit floats: the fold runs in a float32 block, Op
// being the float32 operation, and rounds once into out[0].
template <class T, class Op>
void reduce_run_half(const T* const* in, size_t n, T* const* out, size_t nout, int64_t count,
                     bool avg) {
  constexpr int64_t kBlock = 4096;  // 16 KiB of float32 accumulators
  float acc[kBlock];
  const Op op;
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    const T* a = in[0] + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<float>(a[i]);
    for (size_t k = 1; k < n; ++k) {
      const T* s = in[k] + b;
      for (int64_t i = 0; i < m; ++i) acc[i] = op(acc[i], static_cast<float>(s[i]));
    }
    if (avg) {
      const float d = static_cast<float>(n);
      for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] / d;
    }
    T* o = out[0] + b;
    for (int64_t i = 0; i < m; ++i) o[i] = T(acc[i]);
    for (size_t j = 1; j < nout; ++j)
      std::memcpy(out[j] + b, o, static_cast<size_t>(m) * sizeof(T));
  }
}

template <class T>
void reduce_run_op(ReduceOp op, const T* const* in, size_t n, T* const* out, size_t nout,
                   int64_t count, bool stream = false) {
  if constexpr (is_half_v<T>) {
    switch (op) {
      case ReduceOp::Sum: return reduce_run_half<T, SumOp<float>>(in, n, out, nout, count, false);
      case ReduceOp::Avg: return reduce_run_half<T, SumOp<float>>(in, n, out, nout, count, true);
      case ReduceOp::Max: return reduce_run_half<T, MaxOp<float>>(in, n, out, nout, count, false);
      case ReduceOp::Min: return reduce_run_half<T, MinOp<float>>(in, n, out, nout, count, false);
    }
  } else {
    switch (op) {
      case ReduceOp::Sum: return reduce_run<T, SumOp<T>>(in, n, out, nout, count, false, stream);
      case ReduceOp::Avg: return reduce_run<T, SumOp<T>>(in, n, out, nout, count, true, stream);
      case ReduceOp::Max: return reduce_run<T, MaxOp<T>>(in, n, out, nout, count, false, stream);
      case ReduceOp::Min: return reduce_run<T, MinOp<T>>(in, n, out, nout, count, false, stream);
    }
  }
}

// reduce_run_op on untyped buffers of `dtype` into one output.
inline void fold(DType dtype, ReduceOp op, const void* const* in, size_t n, void* out,
                 int64_t count) {
  auto run = [&](auto* type_tag) {
    using T = std::remove_pointer_t<decltype(type_tag)>;
    T* o = static_cast<T*>(out);
    reduce_run_op<T>(op, reinterpret_cast<const T* const*>(in), n, &o, 1, count);
  };
  switch (dtype) {
    case DType::Bool: return run(static_cast<bool*>(nullptr));
    case DType::Int64: return run(static_cast<int64_t*>(nullptr));
    case DType::Float32: return run(static_cast<float*>(nullptr));
    case DType::Float64: return run(static_cast<double*>(nullptr));
    case DType::BFloat16: return run(static_cast<BFloat16*>(nullptr));
    case DType::Float16: return run(static_cast<Float16*>(nullptr));
  }
}

}  // namespace dtensor::reduce_kernel
