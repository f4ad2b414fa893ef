// Internal: the casts an autocast scope (autograd.h's AutocastGuard) makes
// at an op's entry. A lower-precision op (the products) casts its float32
// and other-16-bit inputs to the scope's dtype, leaving float64 alone (as
// PyTorch's eligibility rule); a float32 op (the losses) casts 16-bit
// inputs to float32. Each op checks, casts (DTensor::to, which
// autograd records) and calls itself again, which then finds nothing to
// cast.
#pragma once

#include <initializer_list>
#include <optional>

#include "dtensor/autograd.h"
#include "dtensor/distributed_tensor.h"

namespace dtensor::autocast_detail {

inline bool lowers(const DTensor& x, DType d) {
  return is_floating(x.dtype()) && x.dtype() != DType::Float64 && x.dtype() != d;
}

// The scope's dtype when one of the inputs (null: absent) is to be lowered.
inline std::optional<DType> lower_to(std::initializer_list<const DTensor*> xs) {
  const std::optional<DType> d = autocast_dtype();
  if (!d) return std::nullopt;
  for (const DTensor* x : xs)
    if (x && lowers(*x, *d)) return d;
  return std::nullopt;
}

inline DTensor lower(const DTensor& x, DType d) { return lowers(x, d) ? x.to(d) : x; }

// Whether a float32 op is to raise one of its inputs.
inline bool raises(std::initializer_list<const DTensor*> xs) {
  if (!autocast_dtype()) return false;
  for (const DTensor* x : xs)
    if (x && is_half(x->dtype())) return true;
  return false;
}

inline DTensor raise(const DTensor& x) { return is_half(x.dtype()) ? x.to(DType::Float32) : x; }

}  // namespace dtensor::autocast_detail
