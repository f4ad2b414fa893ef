// Internal to the elementwise ops (src/tensor/elementwise_*.cc): the drivers
// that check, convert to the compute dtype, dispatch and run Map for the
// unary, binary, scalar, in-place and comparison forms. Internal linkage as
// elementwise_map.h says.
#pragma once

#include <optional>
#include <type_traits>

#include "dtensor/tensor.h"
#include "tensor/elementwise_checks.h"
#include "tensor/elementwise_map.h"
#include "tensor/half_compute.h"

namespace dtensor {
namespace {

// ---- op drivers -----------------------------------------------------------------------

// The 16-bit floats compute in float32 (compute_dtype), as PyTorch's CPU
// kernels do: a driver reached with compute bfloat16 or float16 whose
// tensors all hold that dtype runs HalfMap (blocks widened, computed in
// float32 and rounded once, elementwise_map.h); otherwise (an int64 or
// bool operand) it runs itself in float32 on widened copies and rounds a
// floating result back once (detail::round_to, half_compute.h). Both give
// the same bits; a comparison's bool stays bool.

// The result type R of a float32 op that HalfMap stores: float rounds to
// the 16-bit dtype, bool stays.
template <class R>
constexpr bool half_result() {
  return std::is_same_v<R, float> || std::is_same_v<R, bool>;
}

template <class R>
DType half_out_dtype(DType half) {
  return std::is_same_v<R, float> ? half : DType::Bool;
}

// op over x, whose dtype is T already.
template <class T, class Op>
Tensor map_unary(const Tensor& x, Op op) {
  using R = decltype(op(T()));
  Tensor out = Tensor::empty(x.shape(), dtype_of<R>::value);
  Map<R, T>::apply(out, op, x);
  return out;
}

template <Types kTypes, class Op>
Tensor unary(const char* name, const Tensor& x, DType compute, Op op) {
  if (is_half(compute)) {
    using R = decltype(op(float()));
    if constexpr (half_result<R>()) {
      if (x.dtype() == compute) {
        Tensor out = Tensor::empty(x.shape(), half_out_dtype<R>(compute));
        HalfMap<R, float>::apply(compute, out, op, x);
        return out;
      }
    }
    return detail::round_to(unary<kTypes>(name, x, DType::Float32, op), compute);
  }
  std::optional<Tensor> converted;
  const Tensor& xc = as_dtype(x, compute, converted);
  return dispatch<kTypes>(compute, name, [&]<class T>() { return map_unary<T>(xc, op); });
}

// Transcendental functions: integral inputs compute (and return) float32.
template <class Op>
Tensor floating_unary(const char* name, const Tensor& x, Op op) {
  check_defined(name, x);
  return unary<Types::Floating>(name, x, is_floating(x.dtype()) ? x.dtype() : DType::Float32, op);
}

template <Types kTypes, class Op>
Tensor binary(const char* name, const Tensor& a, const Tensor& b, DType compute, Op op) {
  check_defined(name, a);
  check_defined(name, b);
  const Shape shape = broadcast_for(name, a.shape(), b.shape());
  if (is_half(compute)) {
    using R = decltype(op(float(), float()));
    if constexpr (half_result<R>()) {
      if (a.dtype() == compute && b.dtype() == compute) {
        Tensor out = Tensor::empty(shape, half_out_dtype<R>(compute));
        HalfMap<R, float, float>::apply(compute, out, op, a, b);
        return out;
      }
    }
    return detail::round_to(binary<kTypes>(name, a, b, DType::Float32, op), compute);
  }
  std::optional<Tensor> a_converted, b_converted;
  const Tensor& ac = as_dtype(a, compute, a_converted);
  const Tensor& bc = as_dtype(b, compute, b_converted);
  return dispatch<kTypes>(compute, name, [&]<class T>() {
    using R = decltype(op(T(), T()));
    Tensor out = Tensor::empty(shape, dtype_of<R>::value);
    Map<R, T, T>::apply(out, op, ac, bc);
    return out;
  });
}

// a op s (s op a when kScalarFirst), with s converted to the compute type
// once and captured by the kernel instead of being broadcast as a tensor.
template <Types kTypes, bool kScalarFirst = false, class Op>
Tensor binary_scalar(const char* name, const Tensor& a, Scalar s, DType compute, Op op) {
  check_defined(name, a);
  if (is_half(compute)) {
    using R = decltype(op(float(), float()));
    if constexpr (half_result<R>()) {
      if (a.dtype() == compute) {
        const float v = s.to<float>();
        Tensor out = Tensor::empty(a.shape(), half_out_dtype<R>(compute));
        if constexpr (kScalarFirst) {
          HalfMap<R, float>::apply(compute, out, [op, v](float x) { return op(v, x); }, a);
        } else {
          HalfMap<R, float>::apply(compute, out, [op, v](float x) { return op(x, v); }, a);
        }
        return out;
      }
    }
    return detail::round_to(
        binary_scalar<kTypes, kScalarFirst>(name, a, s, DType::Float32, op), compute);
  }
  std::optional<Tensor> converted;
  const Tensor& ac = as_dtype(a, compute, converted);
  return dispatch<kTypes>(compute, name, [&]<class T>() {
    const T v = s.to<T>();
    if constexpr (kScalarFirst) {
      return map_unary<T>(ac, [op, v](T x) { return op(v, x); });
    } else {
      return map_unary<T>(ac, [op, v](T x) { return op(x, v); });
    }
  });
}

// self = self op other. Computes straight into self when the compute dtype is
// self's; otherwise (float32 self, float64 other; a 16-bit self) computes out
// of place and converts back, as PyTorch does.
template <Types kTypes, class Op>
Tensor& binary_inplace(const char* name, Tensor& self, const Tensor& other, DType compute,
                       DType result, Op op) {
  check_defined(name, other);
  check_inplace(name, self, other.shape(), result);
  if (compute != self.dtype() || is_half(compute)) {
    self.copy_(binary<kTypes>(name, self, other, compute, op));
    return self;
  }
  const Tensor oc = unaliased(self, other.to(compute));
  dispatch<kTypes>(compute, name, [&]<class T>() { Map<T, T, T>::apply(self, op, self, oc); });
  return self;
}

template <Types kTypes, class Op>
Tensor& binary_scalar_inplace(const char* name, Tensor& self, Scalar s, DType compute, DType result,
                              Op op) {
  check_inplace(name, self, Shape{}, result);
  if (compute != self.dtype() || is_half(compute)) {
    self.copy_(binary_scalar<kTypes>(name, self, s, compute, op));
    return self;
  }
  dispatch<kTypes>(compute, name, [&]<class T>() {
    const T v = s.to<T>();
    Map<T, T>::apply(
        self, [op, v](T x) { return op(x, v); }, self);
  });
  return self;
}

template <class Op>
Tensor compare(const char* name, const Tensor& a, const Tensor& b, Op op) {
  check_defined(name, a);
  check_defined(name, b);
  return binary<Types::All>(name, a, b, promote_types(a.dtype(), b.dtype()), op);
}

template <class Op>
Tensor compare(const char* name, const Tensor& a, Scalar b, Op op) {
  check_defined(name, a);
  return binary_scalar<Types::All>(name, a, b, b.result_type(a.dtype()), op);
}

}  // namespace
}  // namespace dtensor
