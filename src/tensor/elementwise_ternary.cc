// Pointwise ops of three operands, PyTorch 1.13's: addcmul, addcdiv and lerp
// (all operands broadcast), and the in-place forms of those and of clamp.
// One pass each; the 16-bit floats compute in float32 and round once.
#pragma GCC optimize("fp-contract=off")

#include <cmath>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/elementwise_functors.h"

namespace dtensor {

namespace {

Shape broadcast3_for(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  check_defined(op, a);
  check_defined(op, b);
  check_defined(op, c);
  return broadcast_for(op, broadcast_for(op, a.shape(), b.shape()), c.shape());
}

// f(a, b, c, s) elementwise in `compute`, s converted to it once (an
// integral compute truncates a floating s, as torch does with `value`).
template <Types kTypes, class Op>
Tensor ternary_map(const char* op, const Tensor& a, const Tensor& b, const Tensor& c, Scalar s,
                   DType compute, Op f) {
  const Shape shape = broadcast3_for(op, a, b, c);
  if (is_half(compute))
    return detail::round_to(ternary_map<kTypes>(op, detail::widen(a), detail::widen(b),
                                                detail::widen(c), s, DType::Float32, f),
                            compute);
  const Tensor ac = a.to(compute), bc = b.to(compute), cc = c.to(compute);
  return dispatch<kTypes>(compute, op, [&]<class T>() {
    const T v = s.to<T>();
    Tensor out = Tensor::empty(shape, compute);
    Map<T, T, T, T>::apply(
        out, [f, v](T x, T y, T z) { return f(x, y, z, v); }, ac, bc, cc);
    return out;
  });
}

DType promote3_types(const Tensor& a, const Tensor& b, const Tensor& c) {
  return promote_types(promote_types(a.dtype(), b.dtype()), c.dtype());
}

void check_lerp_dtypes(const Tensor& input, const Tensor& end, const Tensor* weight) {
  check_defined("lerp", input);
  check_defined("lerp", end);
  DT_CHECK(is_floating(input.dtype()), "lerp: needs floating tensors, got ", input.dtype());
  DT_CHECK(end.dtype() == input.dtype(), "lerp: expected dtype ", input.dtype(),
           " for `end` but got dtype ", end.dtype());
  if (weight) {
    check_defined("lerp", *weight);
    DT_CHECK(weight->dtype() == input.dtype(), "lerp: expected dtype ", input.dtype(),
             " for `weight` but got dtype ", weight->dtype());
  }
}

// Writes an out-of-place result into self with PyTorch's in-place checks:
// the operands may not grow self by broadcasting, and the result's dtype
// must cast to self's. The result is computed first, so operands that
// share self's memory read their old values.
Tensor& assign_inplace(const char* op, Tensor& self, const Tensor& result) {
  check_inplace(op, self, result.shape(), result.dtype());
  return self.copy_(result);
}

}  // namespace

Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value) {
  broadcast3_for("addcmul", input, t1, t2);
  const DType d = promote3_types(input, t1, t2);
  DT_CHECK(d != DType::Bool, "addcmul: bool tensors are not supported (torch has no bool kernel)");
  return ternary_map<Types::Numeric>("addcmul", input, t1, t2, value, d, AddcmulOp{});
}

Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value) {
  broadcast3_for("addcdiv", input, t1, t2);
  DT_CHECK(is_floating(t1.dtype()) || is_floating(t2.dtype()),
           "addcdiv: integer division is not supported (tensor1 ", t1.dtype(), ", tensor2 ",
           t2.dtype(),
           "); as torch 1.13, use input + value * tensor1 / tensor2 for true "
           "division, or make one of them floating");
  return ternary_map<Types::Floating>("addcdiv", input, t1, t2, value,
                                      promote3_types(input, t1, t2), AddcdivOp{});
}

Tensor lerp(const Tensor& input, const Tensor& end, Scalar weight) {
  check_lerp_dtypes(input, end, nullptr);
  // The weight as a 0-d tensor of the compute dtype (float32 for the 16-bit
  // floats, so that it is not rounded to them): one kernel for both forms.
  const Tensor w = Tensor::full({}, weight, compute_dtype(input.dtype()));
  return ternary_map<Types::Floating>(
      "lerp", input, end, w, Scalar(0), input.dtype(),
      [](auto a, auto b, auto c, auto) { return LerpOp{}(a, b, c); });
}

Tensor lerp(const Tensor& input, const Tensor& end, const Tensor& weight) {
  check_lerp_dtypes(input, end, &weight);
  return ternary_map<Types::Floating>(
      "lerp", input, end, weight, Scalar(0), input.dtype(),
      [](auto a, auto b, auto c, auto) { return LerpOp{}(a, b, c); });
}

Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, Scalar value) {
  return assign_inplace("addcmul_", *this, addcmul(*this, t1, t2, value));
}
Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, Scalar value) {
  return assign_inplace("addcdiv_", *this, addcdiv(*this, t1, t2, value));
}
Tensor& Tensor::lerp_(const Tensor& end, Scalar weight) {
  return assign_inplace("lerp_", *this, lerp(*this, end, weight));
}
Tensor& Tensor::lerp_(const Tensor& end, const Tensor& weight) {
  return assign_inplace("lerp_", *this, lerp(*this, end, weight));
}
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  return assign_inplace("clamp_", *this, clamp(*this, min, max));
}
// max(x, min) then min(., max), NaN-propagating: torch's clamp with tensor
// bounds (NaN in x or a bound gives NaN; min > max gives max).
Tensor& Tensor::clamp_(const Tensor& min, const Tensor& max) {
  check_defined("clamp_", *this);
  DT_CHECK(min.defined() || max.defined(),
           "clamp_: at least one of min and max must be given, got neither");
  DT_CHECK(dtype() != DType::Bool, "clamp_: bool tensors are not supported, got a bool tensor");
  Tensor r = *this;
  if (min.defined()) r = maximum(r, min);
  if (max.defined()) r = minimum(r, max);
  return assign_inplace("clamp_", *this, r);
}

}  // namespace dtensor
