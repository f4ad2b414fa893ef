// Internal to the elementwise ops (src/tensor/elementwise_*.cc): one functor
// per op, templated on the element type. Internal linkage as
// elementwise_map.h says.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/row_math.h"

namespace dtensor {
namespace {

// ---- op functors ----------------------------------------------------------------------
// One functor per op, templated on the element type. int64 arithmetic wraps
// (as in PyTorch) through uint64 so that overflow is defined behaviour.

inline int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }

struct AddOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>)
      return a || b;
    else if constexpr (std::is_integral_v<T>)
      return wrap(uint64_t(a) + uint64_t(b));
    else
      return a + b;
  }
};
struct SubOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return wrap(uint64_t(a) - uint64_t(b));
    else
      return a - b;
  }
};
struct MulOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>)
      return a && b;
    else if constexpr (std::is_integral_v<T>)
      return wrap(uint64_t(a) * uint64_t(b));
    else
      return a * b;
  }
};
struct DivOp {
  template <class T>
  T operator()(T a, T b) const {
    return a / b;
  }
};
// NaN-propagating, like torch.maximum / torch.minimum.
struct MaximumOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a > b || a != a ? a : b;
    else
      return a > b ? a : b;
  }
};
struct MinimumOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a < b || a != a ? a : b;
    else
      return a < b ? a : b;
  }
};

struct EqOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct NeOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a != b;
  }
};
struct LtOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LeOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GtOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GeOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};

struct NegOp {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return wrap(uint64_t(0) - uint64_t(x));
    else
      return -x;
  }
};
struct AbsOp {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>)
      return x;
    else if constexpr (std::is_integral_v<T>)
      return x < 0 ? wrap(uint64_t(0) - uint64_t(x)) : x;
    else
      return std::abs(x);
  }
};
// `x < 0 ? 0 : x` rather than `x > 0 ? x : 0` so that NaN passes through.
struct ReluOp {
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};
// float32 through a polynomial the compiler vectorises (libm's expf is one
// opaque call per element, 3 ns each on Zen 3), in a copy per instruction
// set (kWide, elementwise_map.h); float64 keeps std::exp. Used only from
// elementwise_unary.cc, which turns FMA contraction off as row_math.h asks.
struct ExpOp {
  template <class T>
  static constexpr bool kWide = std::is_same_v<T, float>;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return detail::exp_f32(x);
    else return std::exp(x);
  }
};
struct LogOp {
  template <class T>
  static constexpr bool kWide = std::is_same_v<T, float>;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return detail::log_f32(x);
    else return std::log(x);
  }
};
struct SqrtOp {
  template <class T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct RsqrtOp {
  template <class T>
  T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};
struct TanhOp {
  template <class T>
  static constexpr bool kWide = std::is_same_v<T, float>;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return detail::tanh_f32(x);
    else return std::tanh(x);
  }
};
struct SigmoidOp {
  template <class T>
  static constexpr bool kWide = ExpOp::kWide<T>;
  template <class T>
  T operator()(T x) const {
    return T(1) / (T(1) + ExpOp{}(-x));
  }
};
// x / (1 + exp(-x)), PyTorch's silu kernel: one rounding fewer than
// x * sigmoid(x).
struct SiluOp {
  template <class T>
  static constexpr bool kWide = ExpOp::kWide<T>;
  template <class T>
  T operator()(T x) const {
    return x / (T(1) + ExpOp{}(-x));
  }
};
struct ErfOp {
  template <class T>
  static constexpr bool kWide = std::is_same_v<T, float>;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return detail::erf_f32(x);
    else return std::erf(x);
  }
};
// PyTorch's gelu: x * Phi(x) with the exact normal CDF ...
struct GeluErfOp {
  template <class T>
  static constexpr bool kWide = ErfOp::kWide<T>;
  template <class T>
  T operator()(T x) const {
    return T(0.5) * x * (T(1) + ErfOp{}(x * T(0.70710678118654752440)));
  }
};
// ... or its tanh approximation (approximate='tanh').
struct GeluTanhOp {
  template <class T>
  static constexpr bool kWide = TanhOp::kWide<T>;
  template <class T>
  T operator()(T x) const {
    const T k_beta = T(0.79788456080286535588);  // sqrt(2 / pi)
    const T k_kappa = T(0.044715);
    return T(0.5) * x * (T(1) + TanhOp{}(k_beta * (x + k_kappa * x * x * x)));
  }
};

// gelu's gradient, grad * d gelu(x) / dx, as PyTorch's gelu_backward: one
// pass that computes in the op's dtype (float32 for the 16-bit floats) and
// rounds once. The operations and their order are those of the DTensor
// formula it replaced (one op per step), so float32 and float64 give that
// formula's bits.
//   exact: Phi(x) + x phi(x), the normal CDF and density;
struct GeluErfGradOp {
  template <class T>
  static constexpr bool kWide = ErfOp::kWide<T>;
  template <class T>
  T operator()(T g, T x) const {
    const T cdf = (ErfOp{}(x * T(0.70710678118654752440)) + T(1)) * T(0.5);  // 1 / sqrt(2)
    const T pdf = ExpOp{}((x * x) * T(-0.5)) * T(0.39894228040143267794);   // 1 / sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};
//   tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2), t = tanh(u),
//   u = beta (x + kappa x^3).
struct GeluTanhGradOp {
  template <class T>
  static constexpr bool kWide = TanhOp::kWide<T>;
  template <class T>
  T operator()(T g, T x) const {
    const T k_beta = T(0.79788456080286535588);  // sqrt(2 / pi)
    const T k_kappa = T(0.044715);
    const T x_sq = x * x;
    const T t = TanhOp{}((x + (x_sq * x) * k_kappa) * k_beta);
    const T left = (t + T(1)) * T(0.5);
    const T tanh_derivative = T(1) - t * t;
    const T inner_derivative = (x_sq * T(3 * 0.044715) + T(1)) * k_beta;
    const T right = ((x * T(0.5)) * tanh_derivative) * inner_derivative;
    return g * (left + right);
  }
};

// ---- more pointwise math (elementwise_math.cc), PyTorch 1.13's formulas ----------------
struct SinOp {
  template <class T>
  T operator()(T x) const {
    return std::sin(x);
  }
};
struct CosOp {
  template <class T>
  T operator()(T x) const {
    return std::cos(x);
  }
};
// float32 through row_math.h's vectorisable polynomials, as ExpOp.
struct Log1pOp {
  template <class T>
  static constexpr bool kWide = std::is_same_v<T, float>;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return detail::log1p_f32(x);
    else return std::log1p(x);
  }
};
struct Expm1Op {
  template <class T>
  static constexpr bool kWide = std::is_same_v<T, float>;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return detail::expm1_f32(x);
    else return std::expm1(x);
  }
};
struct SquareOp {
  template <class T>
  T operator()(T x) const {
    return MulOp{}(x, x);
  }
};
// (0 < x) - (x < 0): NaN and -0.0 give +0, as torch 1.13's sign; bool is
// its own sign.
struct SignOp {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return T(int(T(0) < x) - int(x < T(0)));
  }
};
struct FloorOp {
  template <class T>
  T operator()(T x) const {
    return std::floor(x);
  }
};
// Round to nearest, ties to even (the default rounding mode), as torch.round.
struct RoundOp {
  template <class T>
  T operator()(T x) const {
    return std::nearbyint(x);
  }
};
// torch.round(x, decimals=d): nearbyint(x * 10^d) / 10^d, and for d < 0
// nearbyint(x / 10^-d) * 10^-d (so that 10^d is never a fraction that
// cannot be represented).
struct RoundDecimalsOp {
  double ten_pow;  // 10^|d|
  bool negative;   // d < 0
  template <class T>
  T operator()(T x) const {
    const T p = static_cast<T>(ten_pow);
    return negative ? std::nearbyint(x / p) * p : std::nearbyint(x * p) / p;
  }
};
// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (where
// the two agree to within exp(-threshold) / beta), as torch's softplus.
struct SoftplusOp {
  double beta, threshold;
  template <class T>
  static constexpr bool kWide = Log1pOp::kWide<T>;
  template <class T>
  T operator()(T x) const {
    const T b = static_cast<T>(beta);
    const T xb = x * b;
    return xb > static_cast<T>(threshold) ? x : Log1pOp{}(ExpOp{}(xb)) / b;
  }
};
// Bool results for any input dtype; non-zero (NaN included) is true.
struct IsnanOp {
  template <class T>
  bool operator()(T x) const {
    return x != x;
  }
};
struct LogicalNotOp {
  template <class T>
  bool operator()(T x) const {
    return x == T(0);
  }
};
struct LogicalAndOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a != T(0) && b != T(0);
  }
};
struct LogicalOrOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a != T(0) || b != T(0);
  }
};
struct LogicalXorOp {
  template <class T>
  bool operator()(T a, T b) const {
    return (a != T(0)) != (b != T(0));
  }
};
// input + value * t1 * t2 and input + value * t1 / t2, in torch's order of
// operations: (value * t1) first.
struct AddcmulOp {
  template <class T>
  T operator()(T in, T a, T b, T v) const {
    return AddOp{}(in, MulOp{}(MulOp{}(v, a), b));
  }
};
struct AddcdivOp {
  template <class T>
  T operator()(T in, T a, T b, T v) const {
    return in + v * a / b;
  }
};
// torch's lerp: from the nearer end, so that weight 0 gives input and 1
// gives end exactly.
struct LerpOp {
  template <class T>
  T operator()(T in, T end, T w) const {
    return std::abs(w) < T(0.5) ? in + w * (end - in) : end - (end - in) * (T(1) - w);
  }
};

// x ** e for an integral exponent by repeated squaring (wrapping like int64
// multiplication). REQUIRES: e >= 0.
inline int64_t int_pow(int64_t x, int64_t e) {
  uint64_t result = 1, base = static_cast<uint64_t>(x);
  while (e > 0) {
    if (e & 1) result *= base;
    base *= base;
    e >>= 1;
  }
  return wrap(result);
}

}  // namespace
}  // namespace dtensor
