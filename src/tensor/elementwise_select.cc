// Elementwise selection: where (cond ? a : b, all three broadcast) and
// masked_fill, out of place and in place.

#include "dtensor/tensor.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"

namespace dtensor {

// ---- selection ------------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_bool("where", "condition", cond);
  check_defined("where", a);
  check_defined("where", b);
  const Shape shape =
      broadcast_for("where", cond.shape(), broadcast_for("where", a.shape(), b.shape()));
  const DType compute = promote_types(a.dtype(), b.dtype());
  // Selection moves elements: through float32 and back is exact.
  if (is_half(compute))
    return detail::round_to(where(cond, detail::widen(a), detail::widen(b)), compute);
  const Tensor ac = a.to(compute);
  const Tensor bc = b.to(compute);
  return detail::dispatch_all(compute, "where", [&]<class T>() {
    Tensor out = Tensor::empty(shape, compute);
    Map<T, bool, T, T>::apply(
        out, [](bool c, T x, T y) { return c ? x : y; }, cond, ac, bc);
    return out;
  });
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  check_bool("where", "condition", cond);
  check_defined("where", a);
  const Shape shape = broadcast_for("where", cond.shape(), a.shape());
  const DType compute = b.result_type(a.dtype());
  if (is_half(compute)) return detail::round_to(where(cond, detail::widen(a), b), compute);
  const Tensor ac = a.to(compute);
  return detail::dispatch_all(compute, "where", [&]<class T>() {
    const T v = b.to<T>();
    Tensor out = Tensor::empty(shape, compute);
    Map<T, bool, T>::apply(
        out, [v](bool c, T x) { return c ? x : v; }, cond, ac);
    return out;
  });
}

// Like torch.masked_fill: x's dtype (value is converted to it), and the
// result has the broadcast shape of x and mask.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined("masked_fill", x);
  check_bool("masked_fill", "mask", mask);
  const Shape shape = broadcast_for("masked_fill", x.shape(), mask.shape());
  // The value rounds to x's dtype once, as PyTorch's.
  if (is_half(x.dtype()))
    return detail::round_to(masked_fill(detail::widen(x), mask, value), x.dtype());
  return detail::dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    const T v = fill_value<T>("masked_fill", value, x.dtype());
    Tensor out = Tensor::empty(shape, x.dtype());
    Map<T, bool, T>::apply(
        out, [v](bool m, T y) { return m ? v : y; }, mask, x);
    return out;
  });
}

Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  check_bool("masked_fill_", "mask", mask);
  check_inplace("masked_fill_", *this, mask.shape(), dtype_);
  if (is_half(dtype_)) return copy_(masked_fill(*this, mask, value));
  const Tensor m = unaliased(*this, mask);
  detail::dispatch_all(dtype_, "masked_fill_", [&]<class T>() {
    const T v = fill_value<T>("masked_fill_", value, dtype_);
    Map<T, bool, T>::apply(
        *this, [v](bool c, T y) { return c ? v : y; }, m, *this);
  });
  return *this;
}

}  // namespace dtensor
