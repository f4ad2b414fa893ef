// copy_box: moves one box between two contiguous tensors of the same dtype
// with memcpy runs. The trailing dims the box covers whole in both tensors
// join into one run, so a box of whole rows (the common case: a shard cut
// along an outer dim) is one memcpy, and the work is linear in the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dtensor/tensor.h"

namespace dtensor::comm_detail {

// Copies the box of `size` at src_start in a contiguous tensor of shape
// src_shape to dst_start in one of shape dst_shape; isz bytes per element.
// REQUIRES: the box lies inside both shapes.
inline void copy_box(std::byte* dst, const Shape& dst_shape, const Shape& dst_start,
                     const std::byte* src, const Shape& src_shape, const Shape& src_start,
                     const Shape& size, int64_t isz) {
  const int64_t nd = static_cast<int64_t>(size.size());
  for (int64_t d = 0; d < nd; ++d)
    if (size[d] == 0) return;
  // The run: the innermost dims covered whole by the box in both tensors,
  // plus the next one out (covered in part).
  int64_t k = nd;  // dims k.. form one run
  int64_t run = isz;
  while (k > 0) {
    run *= size[k - 1];
    --k;
    if (size[k] != src_shape[k] || size[k] != dst_shape[k]) break;
  }
  // Element strides of both tensors; the outer index walks dims 0..k-1.
  int64_t src_stride[kMaxDims], dst_stride[kMaxDims];
  int64_t s = 1, t = 1;
  for (int64_t d = nd - 1; d >= 0; --d) {
    src_stride[d] = s;
    dst_stride[d] = t;
    s *= src_shape[d];
    t *= dst_shape[d];
  }
  int64_t src_at = 0, dst_at = 0;
  for (int64_t d = 0; d < nd; ++d) {
    src_at += src_start[d] * src_stride[d];
    dst_at += dst_start[d] * dst_stride[d];
  }
  int64_t idx[kMaxDims] = {};
  for (;;) {
    std::memcpy(dst + dst_at * isz, src + src_at * isz, static_cast<size_t>(run));
    int64_t d = k - 1;
    for (; d >= 0; --d) {
      src_at += src_stride[d];
      dst_at += dst_stride[d];
      if (++idx[d] < size[d]) break;
      src_at -= size[d] * src_stride[d];
      dst_at -= size[d] * dst_stride[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace dtensor::comm_detail
