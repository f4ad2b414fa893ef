// More elementwise functions, with PyTorch 1.13's semantics: sin, cos,
// log1p, expm1 (transcendental: integer/bool inputs give float32), square,
// sign, floor, round, softplus, and the bool-valued isnan and logical_*.
// The 16-bit floats compute in float32 and round once (the drivers do it).
//
// FMA contraction off, as elsewhere among the elementwise kernels: softplus
// and round(decimals) must round each step as their formulas read, and
// row_math.h's polynomials (log1p, expm1) ask for it. Trapping math off, as
// in elementwise_unary.cc: GCC vectorises those polynomials' selects only
// then; no op here reads the floating-point exception flags.
#pragma GCC optimize("no-trapping-math", "fp-contract=off")

#include <cmath>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/elementwise_functors.h"

namespace dtensor {

namespace {

// floor and round of an integer are the integer (a copy, as torch); torch
// has no bool kernel for them.
bool rounds_to_itself(const char* op, const Tensor& x) {
  check_defined(op, x);
  DT_CHECK(x.dtype() != DType::Bool, op, ": bool tensors are not supported (torch has no bool ",
           "kernel), got a bool tensor of shape ", x.shape());
  return x.dtype() == DType::Int64;
}

}  // namespace

Tensor sin(const Tensor& x) { return floating_unary("sin", x, SinOp{}); }
Tensor cos(const Tensor& x) { return floating_unary("cos", x, CosOp{}); }
Tensor log1p(const Tensor& x) { return floating_unary("log1p", x, Log1pOp{}); }
Tensor expm1(const Tensor& x) { return floating_unary("expm1", x, Expm1Op{}); }

Tensor square(const Tensor& x) {
  check_defined("square", x);
  // torch.square is pow(x, 2): a bool tensor gives int64.
  const DType d = x.dtype() == DType::Bool ? DType::Int64 : x.dtype();
  return unary<Types::Numeric>("square", x, d, SquareOp{});
}

Tensor sign(const Tensor& x) {
  check_defined("sign", x);
  return unary<Types::All>("sign", x, x.dtype(), SignOp{});
}

Tensor floor(const Tensor& x) {
  if (rounds_to_itself("floor", x)) return x.clone();
  return unary<Types::Floating>("floor", x, x.dtype(), FloorOp{});
}

Tensor round(const Tensor& x, int64_t decimals) {
  if (decimals == 0) {
    if (rounds_to_itself("round", x)) return x.clone();
    return unary<Types::Floating>("round", x, x.dtype(), RoundOp{});
  }
  check_defined("round", x);
  DT_CHECK(is_floating(x.dtype()), "round: decimals=", decimals, " needs a floating tensor, got ",
           x.dtype(), " (torch has no integer kernel for it)");
  const double p = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  return unary<Types::Floating>("round", x, x.dtype(), RoundDecimalsOp{p, decimals < 0});
}

Tensor softplus(const Tensor& x, Scalar beta, Scalar threshold) {
  check_defined("softplus", x);
  DT_CHECK(is_floating(x.dtype()), "softplus: needs a floating tensor, got ", x.dtype(),
           " (torch has no integer kernel for it)");
  return unary<Types::Floating>("softplus", x, x.dtype(),
                                SoftplusOp{beta.to_double(), threshold.to_double()});
}

Tensor isnan(const Tensor& x) {
  check_defined("isnan", x);
  return unary<Types::All>("isnan", x, x.dtype(), IsnanOp{});
}
Tensor logical_not(const Tensor& x) {
  check_defined("logical_not", x);
  return unary<Types::All>("logical_not", x, x.dtype(), LogicalNotOp{});
}
// The operands meet in their promoted dtype, which keeps every non-zero
// value non-zero (no float is ever converted to an integer).
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return compare("logical_and", a, b, LogicalAndOp{});
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return compare("logical_or", a, b, LogicalOrOp{});
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return compare("logical_xor", a, b, LogicalXorOp{});
}

}  // namespace dtensor
