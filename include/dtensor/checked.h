// Checked size arithmetic — every product or sum of sizes, strides, element
// counts and byte counts in dtensor goes through these helpers.
//
// A wrapped int64 size is worse than a crash: it allocates a block too small
// for the data and the writes that follow corrupt the heap. So an overflow is
// a dtensor::Error naming what was being computed and the two operands, e.g.
//   empty: element count of shape [4294967296, 4294967296]: 4294967296 * 4294967296
//   overflows int64 (at most 9223372036854775807)
// The checks compile to one multiply and a branch on the overflow flag.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtensor/error.h"

namespace dtensor {

namespace detail {
// Out of line so the inline helpers stay small; `what` names the quantity.
[[noreturn]] void throw_overflow(const std::string& what, const char* op, int64_t a, int64_t b);
}  // namespace detail

// a * b, or throws dtensor::Error naming `what` when it does not fit int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]] detail::throw_overflow(what, "*", a, b);
  return r;
}

// a + b, or throws dtensor::Error naming `what` when it does not fit int64.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]] detail::throw_overflow(what, "+", a, b);
  return r;
}

// The bytes of `numel` elements of `itemsize` bytes each (at most INT64_MAX).
inline int64_t checked_bytes(int64_t numel, size_t itemsize, const char* what) {
  return checked_mul(numel, static_cast<int64_t>(itemsize), what);
}

}  // namespace dtensor
