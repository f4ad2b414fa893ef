// Internal to the elementwise ops (src/tensor/elementwise_*.cc): the checks
// of their arguments (defined, broadcastable, in-place writable) and the
// dtype rules the tensor and scalar forms share. `inline` so that an op
// file that calls none of them compiles without -Wunused-function; internal
// linkage as elementwise_map.h says.
#pragma once

#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "dtensor/tensor.h"

namespace dtensor {
namespace {

// ---- argument checks ------------------------------------------------------------------

inline void check_defined(const char* op, const Tensor& t) {
  DT_CHECK(t.defined(), op, ": undefined tensor");
}

// broadcast_shapes, with the op named in its error.
inline Shape broadcast_for(const char* op, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const Error& e) {
    DT_THROW(op, ": ", e.what());
  }
}

// PyTorch's can_cast: no floating -> integral/bool and no numeric -> bool.
inline bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

// The checks every in-place op makes on self: the result fits self's dtype,
// the other operands broadcast to self's shape (self never grows), and no two
// elements of self share memory (writing an expanded view is ill-defined).
inline void check_inplace(const char* op, const Tensor& self, const Shape& other_shape, DType result) {
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
inline std::pair<const char*, const char*> byte_range(const Tensor& t) {
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
inline const Tensor& as_dtype(const Tensor& x, DType dtype, std::optional<Tensor>& converted) {
  if (x.dtype() == dtype) return x;
  return converted.emplace(x.to(dtype));
}

inline Tensor unaliased(const Tensor& self, const Tensor& input) {
  if (input.storage() != self.storage() || input.numel() == 0 || self.numel() == 0) return input;
  if (input.raw_data() == self.raw_data() && input.dtype() == self.dtype() &&
      input.shape() == self.shape() && input.strides() == self.strides()) {
    return input;
  }
  const auto [lo_a, hi_a] = byte_range(self);
  const auto [lo_b, hi_b] = byte_range(input);
  return lo_a < hi_b && lo_b < hi_a ? input.clone() : input;
}

// Type rules shared by the tensor and scalar forms.
inline DType sub_dtype(const char* name, DType promoted, DType a, DType b) {
  DT_CHECK(promoted != DType::Bool, name, ": subtracting bool operands is not supported (got ", a,
           " and ", b, "); to invert a mask use eq(mask, false)");
  return promoted;
}
inline DType div_dtype(DType promoted) { return is_floating(promoted) ? promoted : DType::Float32; }

// The dtype a scalar of this kind has on its own (for messages).
inline DType scalar_dtype(Scalar s) {
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

inline void check_bool(const char* op, const char* what, const Tensor& t) {
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

inline bool all_true(const Tensor& mask) {
  const Tensor c = mask.contiguous();
  return std::memchr(c.raw_data(), 0, static_cast<size_t>(c.numel())) == nullptr;
}

}  // namespace
}  // namespace dtensor
