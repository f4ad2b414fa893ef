// Elementwise comparisons (eq, ne, lt, le, gt, ge, computed in the promoted
// dtype, bool results) and the comparison helpers built on them: equal,
// allclose and max_abs_diff.

#include <array>
#include <cmath>
#include <cstdint>

#include "dtensor/tensor.h"
#include "tensor/elementwise_drivers.h"
#include "tensor/elementwise_functors.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"
#include "tensor/loops.h"

namespace dtensor {

// ---- comparisons (computed in the promoted dtype) -------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", a, b, EqOp{}); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", a, b, NeOp{}); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", a, b, LtOp{}); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", a, b, LeOp{}); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", a, b, GtOp{}); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", a, b, GeOp{}); }
Tensor eq(const Tensor& a, Scalar b) { return compare("eq", a, b, EqOp{}); }
Tensor ne(const Tensor& a, Scalar b) { return compare("ne", a, b, NeOp{}); }
Tensor lt(const Tensor& a, Scalar b) { return compare("lt", a, b, LtOp{}); }
Tensor le(const Tensor& a, Scalar b) { return compare("le", a, b, LeOp{}); }
Tensor gt(const Tensor& a, Scalar b) { return compare("gt", a, b, GtOp{}); }
Tensor ge(const Tensor& a, Scalar b) { return compare("ge", a, b, GeOp{}); }

// ---- comparison helpers ---------------------------------------------------------------

bool equal(const Tensor& a, const Tensor& b) {
  check_defined("equal", a);
  check_defined("equal", b);
  if (a.shape() != b.shape()) return false;
  return all_true(eq(a, b));
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("allclose", a);
  check_defined("allclose", b);
  DT_CHECK(rtol >= 0 && atol >= 0, "allclose: rtol and atol must be >= 0, got rtol=", rtol,
           " atol=", atol);
  // Compared in double whatever the dtype, so the tolerance itself is not
  // rounded to float32. Infinities are close only to themselves.
  const auto close = [rtol, atol, equal_nan](auto x, auto y) {
    if (x == y) return true;
    const double dx = static_cast<double>(x), dy = static_cast<double>(y);
    if (std::isnan(dx) || std::isnan(dy)) return equal_nan && std::isnan(dx) && std::isnan(dy);
    if (std::isinf(dx) || std::isinf(dy)) return false;
    return std::abs(dx - dy) <= atol + rtol * std::abs(dy);
  };
  return all_true(binary<Types::All>("allclose", a, b, promote_types(a.dtype(), b.dtype()), close));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  check_defined("max_abs_diff", a);
  check_defined("max_abs_diff", b);
  const Shape shape = broadcast_for("max_abs_diff", a.shape(), b.shape());
  const DType compute = promote_types(a.dtype(), b.dtype());
  if (is_half(compute)) return max_abs_diff(detail::widen(a), detail::widen(b));
  const Tensor ac = a.to(compute);
  const Tensor bc = b.to(compute);
  // A NaN anywhere makes the answer NaN: a comparison helper must not hide it.
  double result = 0;
  detail::dispatch_all(compute, "max_abs_diff", [&]<class T>() {
    detail::StridedOperands<2> ops;
    detail::set_operand(ops, 0, ac, shape);
    detail::set_operand(ops, 1, bc, shape);
    // Serial: the kernel keeps its running maximum in `result`.
    detail::for_each_strided_serial(
        shape, ops,
        [&result](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& st) {
          const char* x = p[0];
          const char* y = p[1];
          for (int64_t i = 0; i < n; ++i, x += st[0], y += st[1]) {
            const double d =
                std::abs(static_cast<double>(load<T>(x)) - static_cast<double>(load<T>(y)));
            if (d > result || std::isnan(d)) result = d;  // once NaN, d > result never holds
          }
        });
  });
  return result;
}

}  // namespace dtensor
