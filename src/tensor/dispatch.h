// Internal: turns a runtime DType into a compile-time C++ type.
//
//   DT_DISPATCH_ALL(x.dtype(), "sum", [&]<class T>() { ... T ... });
//
// The lambda is instantiated once per listed type. The op name is used in the
// error raised for a dtype the op does not support.
//
// The compute dispatches (all, numeric, floating) never list bfloat16 and
// float16: ops convert those to float32 at their entry (half_compute.h) and
// round the result once, so no kernel is compiled for them. Only code that
// moves or converts elements without arithmetic (copy, fill, print, gather,
// tril/triu, index reads) uses dispatch_storage, which lists all six.
#pragma once

#include <cstdint>

#include "dtensor/tensor.h"

namespace dtensor::detail {

// A compute dispatch reached with bfloat16 or float16: the op forgot to
// convert to float32 first.
[[noreturn]] inline void throw_no_half_kernel(const char* op, DType dtype) {
  DT_THROW(op, ": no kernel for ", dtype, " (16-bit floats compute in float32 and this op does "
           "not convert them: a bug, please report it)");
}

template <class F>
decltype(auto) dispatch_all(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: break;
  }
  throw_no_half_kernel(op, dtype);
}

// Every dtype, for code that converts or moves elements only.
template <class F>
decltype(auto) dispatch_storage(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float16: return f.template operator()<Float16>();
  }
  DT_THROW(op, ": unknown dtype ", static_cast<int>(dtype));
}

// int64, float32, float64 (not bool).
template <class F>
decltype(auto) dispatch_numeric(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: break;
  }
  if (is_half(dtype)) throw_no_half_kernel(op, dtype);
  DT_THROW(op, ": expected a numeric dtype (int64, float32, float64), got ", dtype);
}

template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: break;
  }
  if (is_half(dtype)) throw_no_half_kernel(op, dtype);
  DT_THROW(op, ": expected a floating dtype (float32, float64), got ", dtype);
}

// The type sums and means accumulate in: double for floating types, int64
// for integers and bool.
template <class T>
using acc_type_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

}  // namespace dtensor::detail
