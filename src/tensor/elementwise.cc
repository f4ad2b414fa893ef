// Elementwise tensor math: arithmetic, unary functions, comparisons, where /
// masked_fill, the in-place forms and the comparison helpers (equal,
// allclose, max_abs_diff), with PyTorch's broadcasting and type promotion.
// Every op converts its inputs to one compute dtype and runs one kernel per
// (op, dtype) on detail::for_each_strided; scalars ride inside the functor.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/loops.h"

namespace dtensor {
namespace {

// ---- the loop -------------------------------------------------------------------------

template <class T>
inline T load(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

// body(i) for i in [0, n), on the fast paths of Map. The first loop's trip
// count is a multiple of 16 so that GCC vectorises it even at -O2, whose
// "very cheap" cost model refuses loops that would need a scalar epilogue
// (that alone makes a contiguous add 2x slower in RelWithDebInfo builds).
template <class Body>
inline void vector_loop(int64_t n, Body body) {
  const int64_t main = n & ~int64_t{15};
#pragma GCC ivdep
  for (int64_t i = 0; i < main; ++i) body(i);
  for (int64_t i = main; i < n; ++i) body(i);
}

// out[i] = op(in_0[i], ..., in_k[i]) over out's shape, each input broadcast
// to it; R is out's element type and In... the inputs'. The runs handed over
// by for_each_strided take one of three paths: all operands contiguous (a
// plain loop the compiler vectorises), one input broadcast along the run
// (stride 0: its value is loaded once), or the general strided walk.
//
// The fast loops use `#pragma GCC ivdep` rather than __restrict: in-place
// ops pass self as both the output and an input, and restrict would make
// that exact aliasing undefined. What does hold, and is all the vectoriser
// needs, is that no iteration reads what another one writes; callers
// guarantee it by copying inputs that overlap the output partially.
template <class R, class... In>
struct Map {
  static constexpr size_t N = sizeof...(In) + 1;
  using Ptrs = std::array<char*, N>;
  using Strides = std::array<int64_t, N>;
  static constexpr Strides kContiguous{static_cast<int64_t>(sizeof(R)),
                                       static_cast<int64_t>(sizeof(In))...};

  template <class Op, class... Ts>
  static void apply(const Tensor& out, Op op, const Ts&... ins) {
    static_assert(sizeof...(Ts) == sizeof...(In));
    detail::StridedOperands<N> ops;
    size_t k = 0;
    detail::set_operand(ops, k++, out, out.shape());
    (detail::set_operand(ops, k++, ins, out.shape()), ...);
    auto kernel = [op](const Ptrs& p, int64_t n, const Strides& st) {
      run(std::index_sequence_for<In...>{}, op, p, n, st);
    };
    detail::for_each_strided<N, detail::kOverwrite>(out.shape(), ops, kernel);
  }

  template <class Op, size_t... K>
  static void run(std::index_sequence<K...>, Op op, const Ptrs& p, int64_t n, const Strides& st) {
    R* o = reinterpret_cast<R*>(p[0]);
    if (st == kContiguous) {
      const std::tuple<const In*...> x(reinterpret_cast<const In*>(p[K + 1])...);
      vector_loop(n, [&](int64_t i) { o[i] = op(std::get<K>(x)[i]...); });
      return;
    }
    if constexpr (sizeof...(In) == 1) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      if (st[0] == kContiguous[0] && st[1] == 0) {
        const R v = op(load<A>(p[1]));
        vector_loop(n, [&](int64_t i) { o[i] = v; });
        return;
      }
    } else if constexpr (sizeof...(In) == 2) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      if (st[0] == kContiguous[0] && st[1] == kContiguous[1] && st[2] == 0) {
        const A* x = reinterpret_cast<const A*>(p[1]);
        const B y = load<B>(p[2]);
        vector_loop(n, [&](int64_t i) { o[i] = op(x[i], y); });
        return;
      }
      if (st[0] == kContiguous[0] && st[1] == 0 && st[2] == kContiguous[2]) {
        const A x = load<A>(p[1]);
        const B* y = reinterpret_cast<const B*>(p[2]);
        vector_loop(n, [&](int64_t i) { o[i] = op(x, y[i]); });
        return;
      }
    }
    Ptrs q = p;
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<R*>(q[0]) = op(load<In>(q[K + 1])...);
      for (size_t k = 0; k < N; ++k) q[k] += st[k];
    }
  }
};

// ---- dtype dispatch over the types an op supports -------------------------------------

enum class Types { All, Numeric, Floating };

template <Types kTypes, class F>
decltype(auto) dispatch(DType dtype, const char* op, F&& f) {
  if constexpr (kTypes == Types::All)
    return detail::dispatch_all(dtype, op, f);
  else if constexpr (kTypes == Types::Numeric)
    return detail::dispatch_numeric(dtype, op, f);
  else
    return detail::dispatch_floating(dtype, op, f);
}

// ---- argument checks ------------------------------------------------------------------

void check_defined(const char* op, const Tensor& t) {
  DT_CHECK(t.defined(), op, ": undefined tensor");
}

// broadcast_shapes, with the op named in its error.
Shape broadcast_for(const char* op, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const Error& e) {
    DT_THROW(op, ": ", e.what());
  }
}

// PyTorch's can_cast: no floating -> integral/bool and no numeric -> bool.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

// The checks every in-place op makes on self: the result fits self's dtype,
// the other operands broadcast to self's shape (self never grows), and no two
// elements of self share memory (writing an expanded view is ill-defined).
void check_inplace(const char* op, const Tensor& self, const Shape& other_shape, DType result) {
  check_defined(op, self);
  const Shape shape = broadcast_for(op, self.shape(), other_shape);
  DT_CHECK(shape == self.shape(), op, ": output with shape ", self.shape(),
           " doesn't match the broadcast shape ", shape);
  DT_CHECK(can_cast(result, self.dtype()), op, ": result type ", result,
           " can't be cast to the desired output type ", self.dtype());
  for (size_t d = 0; d < self.shape().size(); ++d) {
    DT_CHECK(self.shape()[d] <= 1 || self.strides()[d] != 0, op,
             ": cannot write in place to a tensor whose elements share memory (shape ",
             self.shape(), ", strides ", self.strides(), "); clone() it first");
  }
  // Autograd refuses to use a saved tensor changed since it was saved.
  if (self.storage()) self.storage()->bump_version();
}

// The byte range [lo, hi) a tensor's elements span.
std::pair<const char*, const char*> byte_range(const Tensor& t) {
  const char* base = static_cast<const char*>(t.raw_data());
  if (t.numel() == 0) return {base, base};  // its strides may overflow in bytes
  const int64_t item = static_cast<int64_t>(t.itemsize());
  int64_t lo = 0, hi = item;
  for (size_t d = 0; d < t.shape().size(); ++d) {
    const int64_t extent = (t.shape()[d] - 1) * t.strides()[d] * item;
    (extent < 0 ? lo : hi) += extent;
  }
  return {base + lo, base + hi};
}

// What an in-place op writing self should read for `input`: input itself when
// it is exactly self's view or shares no memory with self, else a copy. A
// partial overlap (x[1:] += x[:-1]) would otherwise read elements already
// overwritten, with a result that depends on loop order and vectorisation.
// x when it has `dtype` already, else x converted and kept in `converted`:
// the common case copies no Tensor (no reference-count traffic).
const Tensor& as_dtype(const Tensor& x, DType dtype, std::optional<Tensor>& converted) {
  if (x.dtype() == dtype) return x;
  return converted.emplace(x.to(dtype));
}

Tensor unaliased(const Tensor& self, const Tensor& input) {
  if (input.storage() != self.storage() || input.numel() == 0 || self.numel() == 0) return input;
  if (input.raw_data() == self.raw_data() && input.dtype() == self.dtype() &&
      input.shape() == self.shape() && input.strides() == self.strides()) {
    return input;
  }
  const auto [lo_a, hi_a] = byte_range(self);
  const auto [lo_b, hi_b] = byte_range(input);
  return lo_a < hi_b && lo_b < hi_a ? input.clone() : input;
}

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
struct ExpOp {
  template <class T>
  T operator()(T x) const {
    return std::exp(x);
  }
};
struct LogOp {
  template <class T>
  T operator()(T x) const {
    return std::log(x);
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
  T operator()(T x) const {
    return std::tanh(x);
  }
};
struct SigmoidOp {
  template <class T>
  T operator()(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
};
struct ErfOp {
  template <class T>
  T operator()(T x) const {
    return std::erf(x);
  }
};
// PyTorch's gelu: x * Phi(x) with the exact normal CDF ...
struct GeluErfOp {
  template <class T>
  T operator()(T x) const {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  }
};
// ... or its tanh approximation (approximate='tanh').
struct GeluTanhOp {
  template <class T>
  T operator()(T x) const {
    const T k_beta = T(0.79788456080286535588);  // sqrt(2 / pi)
    const T k_kappa = T(0.044715);
    return T(0.5) * x * (T(1) + std::tanh(k_beta * (x + k_kappa * x * x * x)));
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

// ---- op drivers -----------------------------------------------------------------------

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
// self's; otherwise (float32 self, float64 other) computes out of place and
// converts back, as PyTorch does.
template <Types kTypes, class Op>
Tensor& binary_inplace(const char* name, Tensor& self, const Tensor& other, DType compute,
                       DType result, Op op) {
  check_defined(name, other);
  check_inplace(name, self, other.shape(), result);
  if (compute != self.dtype()) {
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
  if (compute != self.dtype()) {
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

// Type rules shared by the tensor and scalar forms.
DType sub_dtype(const char* name, DType promoted, DType a, DType b) {
  DT_CHECK(promoted != DType::Bool, name, ": subtracting bool operands is not supported (got ", a,
           " and ", b, "); to invert a mask use eq(mask, false)");
  return promoted;
}
DType div_dtype(DType promoted) { return is_floating(promoted) ? promoted : DType::Float32; }

// The dtype a scalar of this kind has on its own (for messages).
DType scalar_dtype(Scalar s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return DType::Bool;
    case Scalar::Kind::Int:
      return DType::Int64;
    case Scalar::Kind::Float:
      break;
  }
  return DType::Float64;
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

void check_bool(const char* op, const char* what, const Tensor& t) {
  check_defined(op, t);
  DT_CHECK(t.dtype() == DType::Bool, op, ": ", what, " must be bool, got ", t.dtype());
}

// value as the element type T of a tensor of `dtype` (masked_fill converts to
// the tensor's dtype whatever the value's kind). A float that int64 cannot
// hold (NaN, inf, 1e30) is refused rather than converted with undefined
// behaviour.
template <class T>
T fill_value(const char* op, Scalar value, DType dtype) {
  if constexpr (std::is_same_v<T, int64_t>) {
    const double d = value.to_double();
    DT_CHECK(!value.is_floating() || (d >= -0x1p63 && d < 0x1p63), op, ": value ", value,
             " cannot be converted to ", dtype, " without overflow");
  }
  return value.to<T>();
}

bool all_true(const Tensor& mask) {
  const Tensor c = mask.contiguous();
  return std::memchr(c.raw_data(), 0, static_cast<size_t>(c.numel())) == nullptr;
}

}  // namespace

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
// the common exponents 2 and 0.5 as exact multiply / sqrt instead of pow().
Tensor pow(const Tensor& a, Scalar exponent) {
  check_defined("pow", a);
  const DType compute = exponent.result_type(a.dtype());
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
      const T e = exponent.to<T>();
      if (e == T(2)) return map_unary<T>(ac, [](T x) { return x * x; });
      if (e == T(0.5)) return map_unary<T>(ac, SqrtOp{});
      return map_unary<T>(ac, [e](T x) { return std::pow(x, e); });
    }
  });
}

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
Tensor gelu(const Tensor& x, GeluApprox approximate) {
  if (approximate == GeluApprox::Tanh) return floating_unary("gelu", x, GeluTanhOp{});
  return floating_unary("gelu", x, GeluErfOp{});
}

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

// ---- selection ------------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_bool("where", "condition", cond);
  check_defined("where", a);
  check_defined("where", b);
  const Shape shape =
      broadcast_for("where", cond.shape(), broadcast_for("where", a.shape(), b.shape()));
  const DType compute = promote_types(a.dtype(), b.dtype());
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
  return detail::dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    const T v = fill_value<T>("masked_fill", value, x.dtype());
    Tensor out = Tensor::empty(shape, x.dtype());
    Map<T, bool, T>::apply(
        out, [v](bool m, T y) { return m ? v : y; }, mask, x);
    return out;
  });
}

// ---- operators ------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
// + and * commute exactly in IEEE arithmetic, so s + x can run as x + s.
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator+=(Tensor& a, Scalar b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, Scalar b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, Scalar b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, Scalar b) { return a.div_(b); }

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

Tensor& Tensor::relu_() {
  check_defined("relu_", *this);
  DT_CHECK(dtype_ != DType::Bool, "relu_: not supported for bool tensors");
  check_inplace("relu_", *this, Shape{}, dtype_);
  detail::dispatch_numeric(dtype_, "relu_",
                           [&]<class T>() { Map<T, T>::apply(*this, ReluOp{}, *this); });
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  check_bool("masked_fill_", "mask", mask);
  check_inplace("masked_fill_", *this, mask.shape(), dtype_);
  const Tensor m = unaliased(*this, mask);
  detail::dispatch_all(dtype_, "masked_fill_", [&]<class T>() {
    const T v = fill_value<T>("masked_fill_", value, dtype_);
    Map<T, bool, T>::apply(
        *this, [v](bool c, T y) { return c ? v : y; }, m, *this);
  });
  return *this;
}

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
