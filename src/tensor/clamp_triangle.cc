// clamp (with clamp_min / clamp_max) and tril / triu: elementwise bounds and
// the triangles of the last two dims, on every dtype their PyTorch
// counterparts take.
#include <cmath>
#include <limits>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"

namespace dtensor {

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  DT_CHECK(min.has_value() || max.has_value(),
           "clamp: at least one of min and max must be given, got neither");
  DT_CHECK(x.dtype() != DType::Bool, "clamp: bool tensors are not supported, got a bool tensor "
           "of shape ", x.shape(), " (expected int64, float32 or float64)");
  // PyTorch promotes the tensor with the bounds: clamp(int64, 0.5) is float.
  DType dtype = x.dtype();
  if (min) dtype = promote_types(dtype, min->result_type(x.dtype()));
  if (max) dtype = promote_types(dtype, max->result_type(x.dtype()));
  if (is_half(dtype)) return detail::round_to(clamp(detail::widen(x), min, max), dtype);
  const Tensor in = x.to(dtype).contiguous();
  Tensor out = Tensor::empty(x.shape(), dtype);
  const int64_t n = x.numel();
  detail::dispatch_numeric(dtype, "clamp", [&]<class T>() {
    const T* p = in.data_ptr<T>();
    T* q = out.data_ptr<T>();
    const T lo = min ? min->to<T>() : T{}, hi = max ? max->to<T>() : T{};
    if constexpr (std::is_floating_point_v<T>) {
      // A NaN bound makes every element NaN (PyTorch's vectorised kernel).
      if ((min && std::isnan(lo)) || (max && std::isnan(hi))) {
        for (int64_t i = 0; i < n; ++i) q[i] = std::numeric_limits<T>::quiet_NaN();
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      T v = p[i];
      // NaN fails both comparisons and so stays NaN.
      if (min && v < lo) v = lo;
      if (max && v > hi) v = hi;
      q[i] = v;
    }
  });
  return out;
}

Tensor clamp_min(const Tensor& x, Scalar min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, Scalar max) { return clamp(x, std::nullopt, max); }

namespace {

Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  DT_CHECK(x.dim() >= 2, op, ": input must have at least 2 dims, got shape ", x.shape());
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  out.copy_(x);
  const int64_t rows = x.size(-2), cols = x.size(-1);
  if (out.numel() == 0) return out;
  const int64_t batch = out.numel() / (rows * cols);
  // Moves elements only: every dtype as it is.
  detail::dispatch_storage(x.dtype(), op, [&]<class T>() {
    T* q = out.data_ptr<T>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          // j - i is bounded by the sizes, so the comparison cannot overflow.
          const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
          if (!keep) q[(b * rows + i) * cols + j] = T{};
        }
  });
  return out;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

}  // namespace dtensor
