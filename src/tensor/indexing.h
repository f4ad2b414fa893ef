// Internal: the shape arithmetic of advanced indexing (x[i0, :, i2] with
// int64 index tensors), shared by the plain index_put and the DTensor
// rules, and the read x[indices] that index_put's gradient needs.
#pragma once

#include <optional>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor::detail {

// Where the dims of x[indices] come from.
struct AdvancedIndex {
  Shape result;     // the shape of x[indices]
  Shape broadcast;  // the index tensors' common (broadcast) shape
  int64_t first = 0;  // the result dim where the broadcast dims start
  // For each dim of x: its dim in the result when it is not indexed, else -1.
  int64_t result_dim[kMaxDims] = {};
};

// The layout of x[indices] for an x of shape `x` and int64 index tensors of
// the given shapes (nullopt = the whole dim; fewer entries than dims pad
// with whole dims). Throws naming `op` on too many indices or shapes that
// do not broadcast.
AdvancedIndex advanced_index(const Shape& x, const std::vector<std::optional<Shape>>& indices,
                             const char* op);

// x[indices] as a new tensor (the read index_put writes; int64 or bool
// index tensors as index_put takes them).
Tensor index_get(const Tensor& x, const std::vector<std::optional<Tensor>>& indices);

}  // namespace dtensor::detail

namespace dtensor::detail {

// The checks of the plain ops on shapes and dtypes alone (the DTensor rules
// validate with them before any data moves). Each throws naming `op`, what
// was given and what was expected.
// gather/scatter: index int64 with x's dims, index.size(d) <= x.size(d) for
// d != dim. Returns dim normalised.
int64_t check_gather_args(const char* op, const Shape& x, int64_t dim, const Shape& index,
                          DType index_dtype);
// scatter/scatter_add's src: x's dtype and index.size(d) <= src.size(d).
void check_scatter_src(const char* op, DType x_dtype, const Shape& index, const Shape& src,
                       DType src_dtype);
// index_add. Returns dim normalised.
int64_t check_index_add_args(const Shape& x, DType x_dtype, int64_t dim, const Shape& index,
                             DType index_dtype, const Shape& source, DType source_dtype,
                             Scalar alpha);
// index_put's values against x and the layout of x[indices].
void check_index_put_values(DType x_dtype, const AdvancedIndex& plan, const Shape& values,
                            DType values_dtype);

}  // namespace dtensor::detail
