// Boxes (hyper-rectangles of a global tensor) and the runs of bytes that
// copy one box's part of another: the arithmetic behind resharding a
// checkpoint, where a saved chunk and a rank's target shard are two boxes
// and only their intersection moves.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor::checkpoint::detail {

// offsets[d] .. offsets[d] + sizes[d] on every dim d of the global tensor;
// stored row-major and contiguous wherever it is stored.
struct Box {
  Shape offsets;
  Shape sizes;

  int64_t numel() const;
  friend bool operator==(const Box&, const Box&) = default;
};

// The common part of a and b; nullopt when it is empty. REQUIRES: same rank.
std::optional<Box> intersect(const Box& a, const Box& b);

// An element of `whole` that `boxes` (each inside `whole`) do not cover
// exactly once: covered twice or more, or not at all; nullopt when they
// tile it. O(2^ndim n log n) for n boxes at any n: the signed sum of the
// boxes' indicators minus whole's is zero iff every change of it along a
// sweep of dim 0 (the boxes starting or ending at one coordinate, as
// signed boxes of the remaining dims) is zero, recursively.
std::optional<Shape> miscovered_element(const std::vector<Box>& boxes, const Box& whole);

// One contiguous stretch of `inner`'s elements, as byte offsets from the
// start of the two boxes it is copied between.
struct Run {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t bytes = 0;
};

// Walks the runs of `inner` (inside both `src` and `dst`) in row-major
// order, so src and dst offsets ascend. Trailing dims that `inner` covers
// whole in both boxes merge into one run.
class RunIter {
 public:
  // REQUIRES: inner is inside src and dst and not empty.
  RunIter(const Box& inner, const Box& src, const Box& dst, size_t itemsize);

  bool done() const { return done_; }
  const Run& run() const { return run_; }
  void next();
  // The byte just past the last run's end in src.
  int64_t src_end() const { return src_end_; }

 private:
  void locate();

  Shape index_;  // position in `inner` over the outer dims [0, merged_)
  Shape inner_sizes_, src_strides_, dst_strides_, src_start_, dst_start_;
  int64_t merged_ = 0;  // dims [merged_, ndim) form one run
  Run run_;
  int64_t src_end_ = 0;
  bool done_ = false;
};

// Row-major strides (elements) of a box of `sizes`.
Shape strides_of(const Shape& sizes);

}  // namespace dtensor::checkpoint::detail
