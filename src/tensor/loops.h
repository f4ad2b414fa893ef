// Internal: the one strided N-operand loop every elementwise kernel runs on.
//
// for_each_strided walks a common shape over N operands, each given by a base
// pointer and byte strides (stride 0 = broadcast), and hands the kernel runs
// of the innermost dim: kernel(ptrs, n, inner_strides). Adjacent dims that
// are contiguous for every operand are coalesced first, so a contiguous or a
// plainly broadcast tensor is one long run whatever its rank, and a kernel
// can check `inner_strides[k] == sizeof(T)` to take a vectorisable path.
#pragma once

#include <array>
#include <cstdint>

#include "dtensor/tensor.h"

namespace dtensor::detail {

template <size_t N>
struct StridedOperands {
  std::array<char*, N> base{};
  // byte strides per operand per dim
  std::array<std::array<int64_t, kMaxDims>, N> strides{};
};

template <size_t N, class Kernel>
void for_each_strided(const Shape& shape, const StridedOperands<N>& ops, Kernel&& kernel) {
  // Collect non-trivial dims (size != 1), then coalesce.
  int64_t sizes[kMaxDims];
  std::array<std::array<int64_t, kMaxDims>, N> st;
  int nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    sizes[nd] = shape[d];
    for (size_t k = 0; k < N; ++k) st[k][nd] = ops.strides[k][d];
    ++nd;
  }
  // Merge dim i (outer) into the running inner dim when every operand's
  // outer stride equals inner stride * inner size.
  if (nd > 1) {
    int out = nd - 1;  // write position walking outward
    int64_t csizes[kMaxDims];
    std::array<std::array<int64_t, kMaxDims>, N> cst;
    csizes[out] = sizes[nd - 1];
    for (size_t k = 0; k < N; ++k) cst[k][out] = st[k][nd - 1];
    for (int d = nd - 2; d >= 0; --d) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k) {
        if (st[k][d] != cst[k][out] * csizes[out]) { mergeable = false; break; }
      }
      if (mergeable) {
        csizes[out] *= sizes[d];
      } else {
        --out;
        csizes[out] = sizes[d];
        for (size_t k = 0; k < N; ++k) cst[k][out] = st[k][d];
      }
    }
    nd = nd - out;
    for (int d = 0; d < nd; ++d) {
      sizes[d] = csizes[out + d];
      for (size_t k = 0; k < N; ++k) st[k][d] = cst[k][out + d];
    }
  }

  std::array<int64_t, N> inner{};
  if (nd == 0) {  // a single element
    std::array<char*, N> p = ops.base;
    kernel(p, int64_t{1}, inner);
    return;
  }
  for (size_t k = 0; k < N; ++k) inner[k] = st[k][nd - 1];
  const int64_t n_inner = sizes[nd - 1];
  const int outer_nd = nd - 1;
  int64_t idx[kMaxDims] = {};
  std::array<char*, N> p = ops.base;
  while (true) {
    kernel(p, n_inner, inner);
    // advance the outer odometer
    int d = outer_nd - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < sizes[d]) {
        for (size_t k = 0; k < N; ++k) p[k] += st[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) p[k] -= st[k][d] * (sizes[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
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
