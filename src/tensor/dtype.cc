// DimVector, DType and Scalar: the small value types of the tensor layer.
#include <algorithm>
#include <ostream>
#include <sstream>

#include "dtensor/tensor.h"

namespace dtensor {

DimVector::DimVector(size_t n, int64_t value) {
  DT_CHECK(n <= static_cast<size_t>(kMaxDims), "too many dims: ", n, " (at most ", kMaxDims,
           " are supported)");
  for (size_t i = 0; i < n; ++i) data_[i] = value;
  size_ = static_cast<uint8_t>(n);
}

void DimVector::insert(size_t pos, int64_t v) {
  push_back(0);
  for (size_t i = size_ - 1; i > pos; --i) data_[i] = data_[i - 1];
  data_[pos] = v;
}

void DimVector::erase(size_t pos) {
  for (size_t i = pos; i + 1 < size_; ++i) data_[i] = data_[i + 1];
  --size_;
}

void DimVector::resize(size_t n, int64_t value) {
  DT_CHECK(n <= static_cast<size_t>(kMaxDims), "too many dims: ", n, " (at most ", kMaxDims,
           " are supported)");
  for (size_t i = size_; i < n; ++i) data_[i] = value;
  size_ = static_cast<uint8_t>(n);
}

int64_t DimVector::product_overflowed() const {
  for (size_t i = 0; i < size_; ++i)
    if (data_[i] == 0) return 0;  // [2^40, 2^40, 0] is empty, not an overflow
  DT_THROW("the product of ", *this, " overflows int64 (at most ", INT64_MAX, ")");
}

std::string to_string(const DimVector& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const DimVector& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os << ']';
}

bool is_floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || is_half(dtype);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

const char* dtype_short_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::Int64: return "i64";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
    case DType::BFloat16: return "bf16";
    case DType::Float16: return "f16";
  }
  return "?";
}

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32" || text == "float") return DType::Float32;
  if (text == "f64" || text == "float64" || text == "double") return DType::Float64;
  if (text == "i64" || text == "int64" || text == "long") return DType::Int64;
  if (text == "bool") return DType::Bool;
  if (text == "bf16" || text == "bfloat16") return DType::BFloat16;
  if (text == "f16" || text == "float16" || text == "half") return DType::Float16;
  DT_THROW("unknown dtype '", text, "' (expected one of f32, f64, i64, bool, bf16, f16)");
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

// PyTorch's table restricted to these six: the higher of the two by
// bool < int64 < {bfloat16, float16} < float32 < float64, and the two 16-bit
// floats together give float32 (neither holds the other's values).
DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_half(a) && is_half(b)) return DType::Float32;
  auto rank = [](DType d) {
    switch (d) {
      case DType::Bool: return 0;
      case DType::Int64: return 1;
      case DType::BFloat16:
      case DType::Float16: return 2;
      case DType::Float32: return 3;
      case DType::Float64: return 4;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

DType Scalar::result_type(DType tensor_dtype) const {
  switch (kind_) {
    case Kind::Bool: return tensor_dtype;
    case Kind::Int: return tensor_dtype == DType::Bool ? DType::Int64 : tensor_dtype;
    case Kind::Float: return dtensor::is_floating(tensor_dtype) ? tensor_dtype : DType::Float32;
  }
  return tensor_dtype;
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return os << (s.to_int() ? "true" : "false");
    case Scalar::Kind::Int: return os << s.to_int();
    case Scalar::Kind::Float: return os << s.to_double();
  }
  return os;
}

}  // namespace dtensor
