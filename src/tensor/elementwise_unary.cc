// Elementwise unary functions: neg, abs, relu (and relu_), exp, log, sqrt,
// rsqrt, tanh, sigmoid, erf, silu and gelu (and gelu's gradient). The
// transcendental ones compute (and return) float32 for integral inputs.
//
// Trapping math off: float32 exp and sigmoid clamp their argument next to a
// polynomial (row_math.h, exp_f32), and GCC vectorises that select only
// when it may evaluate both sides; no op here reads the floating-point
// exception flags. FMA contraction off, as row_math.h asks.
#pragma GCC optimize("no-trapping-math", "fp-contract=off")

#include "dtensor/tensor.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/elementwise_functors.h"
#include "tensor/dispatch.h"

namespace dtensor {

// ---- unary ----------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  check_defined("neg", x);
  DT_CHECK(x.dtype() != DType::Bool,
           "neg: negating a bool tensor is not supported; to invert a "
           "mask use eq(mask, false)");
  return unary<Types::Numeric>("neg", x, x.dtype(), NegOp{});
}
Tensor abs(const Tensor& x) {
  check_defined("abs", x);
  return unary<Types::All>("abs", x, x.dtype(), AbsOp{});
}
Tensor relu(const Tensor& x) {
  check_defined("relu", x);
  DT_CHECK(x.dtype() != DType::Bool, "relu: not supported for bool tensors");
  return unary<Types::Numeric>("relu", x, x.dtype(), ReluOp{});
}
Tensor exp(const Tensor& x) { return floating_unary("exp", x, ExpOp{}); }
Tensor log(const Tensor& x) { return floating_unary("log", x, LogOp{}); }
Tensor sqrt(const Tensor& x) { return floating_unary("sqrt", x, SqrtOp{}); }
Tensor rsqrt(const Tensor& x) { return floating_unary("rsqrt", x, RsqrtOp{}); }
Tensor tanh(const Tensor& x) { return floating_unary("tanh", x, TanhOp{}); }
Tensor sigmoid(const Tensor& x) { return floating_unary("sigmoid", x, SigmoidOp{}); }
Tensor erf(const Tensor& x) { return floating_unary("erf", x, ErfOp{}); }
Tensor silu(const Tensor& x) { return floating_unary("silu", x, SiluOp{}); }
Tensor gelu(const Tensor& x, GeluApprox approximate) {
  if (approximate == GeluApprox::Tanh) return floating_unary("gelu", x, GeluTanhOp{});
  return floating_unary("gelu", x, GeluErfOp{});
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApprox approximate) {
  check_defined("gelu_backward", grad);
  check_defined("gelu_backward", x);
  DT_CHECK(is_floating(grad.dtype()) && is_floating(x.dtype()),
           "gelu_backward: grad and x must be floating point, got ", grad.dtype(), " and ",
           x.dtype());
  const DType compute = promote_types(grad.dtype(), x.dtype());
  if (approximate == GeluApprox::Tanh)
    return binary<Types::Floating>("gelu_backward", grad, x, compute, GeluTanhGradOp{});
  return binary<Types::Floating>("gelu_backward", grad, x, compute, GeluErfGradOp{});
}

Tensor& Tensor::relu_() {
  check_defined("relu_", *this);
  DT_CHECK(dtype_ != DType::Bool, "relu_: not supported for bool tensors");
  check_inplace("relu_", *this, Shape{}, dtype_);
  if (is_half(dtype_)) return copy_(relu(*this));
  detail::dispatch_numeric(dtype_, "relu_",
                           [&]<class T>() { Map<T, T>::apply(*this, ReluOp{}, *this); });
  return *this;
}

}  // namespace dtensor
