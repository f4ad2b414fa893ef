// Internal: turns a runtime DType into a compile-time C++ type.
//
//   DT_DISPATCH_ALL(x.dtype(), "sum", [&]<class T>() { ... T ... });
//
// The lambda is instantiated once per listed type. The op name is used in the
// error raised for a dtype the op does not support.
#pragma once

#include <cstdint>

#include "dtensor/tensor.h"

namespace dtensor::detail {

template <class F>
decltype(auto) dispatch_all(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
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
  DT_THROW(op, ": expected a numeric dtype (int64, float32, float64), got ", dtype);
}

template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: break;
  }
  DT_THROW(op, ": expected a floating dtype (float32, float64), got ", dtype);
}

// The type sums and means accumulate in: double for floating types, int64
// for integers and bool.
template <class T>
using acc_type_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

}  // namespace dtensor::detail
