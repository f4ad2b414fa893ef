// In-place elementwise arithmetic: add_, sub_, mul_ and div_ (the operators
// +=, -=, *=, /= forward to them). The result must fit self's dtype and the
// other operand broadcast to self's shape (elementwise_checks.h).

#include "dtensor/tensor.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/elementwise_functors.h"

namespace dtensor {

// ---- in place -------------------------------------------------------------------------

Tensor& Tensor::add_(const Tensor& other) {
  check_defined("add_", *this);
  check_defined("add_", other);
  const DType d = promote_types(dtype_, other.dtype());
  return binary_inplace<Types::All>("add_", *this, other, d, d, AddOp{});
}
Tensor& Tensor::add_(Scalar other) {
  check_defined("add_", *this);
  const DType d = other.result_type(dtype_);
  return binary_scalar_inplace<Types::All>("add_", *this, other, d, d, AddOp{});
}
Tensor& Tensor::sub_(const Tensor& other) {
  check_defined("sub_", *this);
  check_defined("sub_", other);
  const DType d = sub_dtype("sub_", promote_types(dtype_, other.dtype()), dtype_, other.dtype());
  return binary_inplace<Types::Numeric>("sub_", *this, other, d, d, SubOp{});
}
Tensor& Tensor::sub_(Scalar other) {
  check_defined("sub_", *this);
  const DType d = sub_dtype("sub_", other.result_type(dtype_), dtype_, scalar_dtype(other));
  return binary_scalar_inplace<Types::Numeric>("sub_", *this, other, d, d, SubOp{});
}
Tensor& Tensor::mul_(const Tensor& other) {
  check_defined("mul_", *this);
  check_defined("mul_", other);
  const DType d = promote_types(dtype_, other.dtype());
  return binary_inplace<Types::All>("mul_", *this, other, d, d, MulOp{});
}
Tensor& Tensor::mul_(Scalar other) {
  check_defined("mul_", *this);
  const DType d = other.result_type(dtype_);
  return binary_scalar_inplace<Types::All>("mul_", *this, other, d, d, MulOp{});
}
Tensor& Tensor::div_(const Tensor& other) {
  check_defined("div_", *this);
  check_defined("div_", other);
  const DType d = div_dtype(promote_types(dtype_, other.dtype()));
  return binary_inplace<Types::Floating>("div_", *this, other, d, d, DivOp{});
}
Tensor& Tensor::div_(Scalar other) {
  check_defined("div_", *this);
  const DType d = div_dtype(other.result_type(dtype_));
  return binary_scalar_inplace<Types::Floating>("div_", *this, other, d, d, DivOp{});
}

}  // namespace dtensor
