// Printing a Tensor (operator<<, to_string) as PyTorch does: nested
// brackets, 4 significant digits, and a tensor of more than 1000 elements
// summarized by its first and last 3 entries along each dim.
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"

namespace dtensor {

namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements; PyTorch's threshold
constexpr int64_t kEdgeItems = 3;

template <class T>
void print_value(std::ostream& os, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "True" : "False");
  } else if constexpr (is_half_v<T>) {
    print_value(os, static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) os << "nan";
    else if (std::isinf(v)) os << (v > 0 ? "inf" : "-inf");
    else os << std::setprecision(4) << static_cast<double>(v);
  } else {
    os << v;
  }
}

template <class T>
void print_rec(std::ostream& os, const Tensor& t, size_t d, const char* p, bool summarize,
               int indent) {
  if (d == t.shape().size()) {
    print_value(os, *reinterpret_cast<const T*>(p));
    return;
  }
  const int64_t n = t.shape()[d];
  // An empty tensor's strides may overflow in bytes; nothing is read from it.
  const int64_t step = t.numel() == 0 ? 0 : t.strides()[d] * static_cast<int64_t>(sizeof(T));
  const bool last = d + 1 == t.shape().size();
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (last ? "..., " : "...,\n") ;
      if (!last) os << std::string(indent + 1, ' ');
      i = n - kEdgeItems;
    }
    print_rec<T>(os, t, d + 1, p + i * step, summarize, indent + 1);
    if (i + 1 < n) {
      if (last) os << ", ";
      else os << ",\n" << std::string(indent + 1, ' ');
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::ostringstream body;
  detail::dispatch_storage(t.dtype(), "print", [&]<class T>() {
    print_rec<T>(body, t, 0, static_cast<const char*>(t.raw_data()), t.numel() > kSummarizeAbove,
                 7);
  });
  return os << "tensor(" << body.str() << ", shape=" << t.shape() << ", dtype=" << t.dtype()
            << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace dtensor
