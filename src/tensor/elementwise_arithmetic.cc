// Elementwise arithmetic: add, sub, mul, div, maximum, minimum and pow, with
// PyTorch's broadcasting and type promotion. Every op converts its inputs to
// one compute dtype and runs one kernel per (op, dtype) on
// detail::for_each_strided (elementwise_map.h); scalars ride inside the
// functor.

#include <cstdint>
#include <type_traits>

#include "dtensor/tensor.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/elementwise_functors.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"

namespace dtensor {

// ---- arithmetic -----------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  check_defined("add", a);
  check_defined("add", b);
  return binary<Types::All>("add", a, b, promote_types(a.dtype(), b.dtype()), AddOp{});
}
Tensor add(const Tensor& a, Scalar b) {
  check_defined("add", a);
  return binary_scalar<Types::All>("add", a, b, b.result_type(a.dtype()), AddOp{});
}

Tensor sub(const Tensor& a, const Tensor& b) {
  check_defined("sub", a);
  check_defined("sub", b);
  const DType d = sub_dtype("sub", promote_types(a.dtype(), b.dtype()), a.dtype(), b.dtype());
  return binary<Types::Numeric>("sub", a, b, d, SubOp{});
}
Tensor sub(const Tensor& a, Scalar b) {
  check_defined("sub", a);
  const DType d = sub_dtype("sub", b.result_type(a.dtype()), a.dtype(), scalar_dtype(b));
  return binary_scalar<Types::Numeric>("sub", a, b, d, SubOp{});
}
Tensor sub(Scalar a, const Tensor& b) {
  check_defined("sub", b);
  const DType d = sub_dtype("sub", a.result_type(b.dtype()), scalar_dtype(a), b.dtype());
  return binary_scalar<Types::Numeric, true>("sub", b, a, d, SubOp{});
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_defined("mul", a);
  check_defined("mul", b);
  return binary<Types::All>("mul", a, b, promote_types(a.dtype(), b.dtype()), MulOp{});
}
Tensor mul(const Tensor& a, Scalar b) {
  check_defined("mul", a);
  return binary_scalar<Types::All>("mul", a, b, b.result_type(a.dtype()), MulOp{});
}

Tensor div(const Tensor& a, const Tensor& b) {
  check_defined("div", a);
  check_defined("div", b);
  return binary<Types::Floating>("div", a, b, div_dtype(promote_types(a.dtype(), b.dtype())),
                                 DivOp{});
}
Tensor div(const Tensor& a, Scalar b) {
  check_defined("div", a);
  return binary_scalar<Types::Floating>("div", a, b, div_dtype(b.result_type(a.dtype())), DivOp{});
}
Tensor div(Scalar a, const Tensor& b) {
  check_defined("div", b);
  return binary_scalar<Types::Floating, true>("div", b, a, div_dtype(a.result_type(b.dtype())),
                                              DivOp{});
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  check_defined("maximum", a);
  check_defined("maximum", b);
  return binary<Types::All>("maximum", a, b, promote_types(a.dtype(), b.dtype()), MaximumOp{});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  check_defined("minimum", a);
  check_defined("minimum", b);
  return binary<Types::All>("minimum", a, b, promote_types(a.dtype(), b.dtype()), MinimumOp{});
}

// Integral results for an integral exponent (int64 ** 2 stays int64, with
// negative exponents refused as in PyTorch); floating ones otherwise, with
// the common exponents as multiplies, a division or a square root instead
// of pow().
Tensor pow(const Tensor& a, Scalar exponent) {
  check_defined("pow", a);
  const DType compute = exponent.result_type(a.dtype());
  if (is_half(compute)) return detail::round_to(pow(detail::widen(a), exponent), compute);
  const Tensor ac = a.to(compute);
  return detail::dispatch_all(compute, "pow", [&]<class T>() -> Tensor {
    if constexpr (std::is_same_v<T, bool>) {
      // bool ** bool: x ** true = x, x ** false = true.
      return exponent.to<bool>() ? a.clone() : Tensor::ones(a.shape(), DType::Bool);
    } else if constexpr (std::is_integral_v<T>) {
      const int64_t e = exponent.to_int();
      DT_CHECK(e >= 0, "pow: integers to negative integer powers are not allowed (", a.dtype(),
               " tensor ** ", e, ")");
      return map_unary<T>(ac, [e](T x) { return int_pow(x, e); });
    } else {
      // PyTorch's special exponents (its pow_tensor_scalar kernel's), as
      // products, a division or a square root: vectorised, where pow() is
      // one opaque libm call per element (pow(x, -1) took 1.7x torch's).
      const T e = exponent.to<T>();
      if (e == T(2)) return map_unary<T>(ac, [](T x) { return x * x; });
      if (e == T(3)) return map_unary<T>(ac, [](T x) { return x * x * x; });
      if (e == T(0.5)) return map_unary<T>(ac, SqrtOp{});
      if (e == T(-0.5)) return map_unary<T>(ac, RsqrtOp{});
      if (e == T(-1)) return map_unary<T>(ac, [](T x) { return T(1) / x; });
      if (e == T(-2)) return map_unary<T>(ac, [](T x) { return T(1) / (x * x); });
      return map_unary<T>(ac, [e](T x) { return std::pow(x, e); });
    }
  });
}

}  // namespace dtensor
