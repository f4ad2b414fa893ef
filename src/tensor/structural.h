// Internal kernels of the structural ops that the DTensor ops
// (src/ops/structural.cc) need but users do not: the gradients of cumprod
// and diagonal.
#pragma once

#include "dtensor/tensor.h"

namespace dtensor::detail {

// The gradient of cumprod(x, dim) given the output's, exact with zeros in
// x. REQUIRES: grad and x floating, of one shape and dtype.
Tensor cumprod_backward(const Tensor& grad, const Tensor& x, int64_t dim);

// Zeros of input_shape (grad's dtype) with grad on the diagonal
// diagonal(.., offset, dim1, dim2) takes.
Tensor diagonal_backward(const Tensor& grad, const Shape& input_shape, int64_t offset, int64_t dim1,
                         int64_t dim2);

}  // namespace dtensor::detail
