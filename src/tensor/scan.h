// Internal kernels of the scan family that the DTensor ops (src/ops/scan.cc)
// need but users do not: the reverse cumulative sum (cumsum's gradient),
// and picking / placing elements along a dim by index (how sort's and
// topk's values are taken from their indices, and their gradient put back).
#pragma once

#include "dtensor/tensor.h"

namespace dtensor::detail {

// out[..., i, ...] = sum over j >= i of x[..., j, ...] along dim (dtype as cumsum).
Tensor reverse_cumsum(const Tensor& x, int64_t dim);

// out[..., i, ...] = x[..., index[..., i, ...], ...] along dim (PyTorch's
// take_along_dim / gather). REQUIRES: index is int64 with x's shape except
// on dim, values in [0, x.size(dim)).
Tensor take_along_dim(const Tensor& x, const Tensor& index, int64_t dim);

// Zeros of `shape` (dtype of src) with src's elements added at index along
// dim (PyTorch's scatter_add): the adjoint of take_along_dim. REQUIRES:
// index is int64 of src's shape, which is `shape` except on dim.
Tensor scatter_add_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                             const Shape& shape);

}  // namespace dtensor::detail
