// Structural ops on plain tensors: flip, roll, cumprod's gradient (cumprod is a scan, scan.cc),
// argsort, outer, dot, linspace, eye, diagonal (and its gradient), nonzero,
// std, max / min. PyTorch's semantics and checks.
//
// flip and roll copy through one per-dim table of source offsets: element
// c of the output reads x at sum_d table[d][c[d]], so any strides (and
// every dtype: they move elements, no arithmetic) cost one pass. diagonal
// is a strided view, as PyTorch's. The rest are composed of existing ops
// where PyTorch's own definition is such a composition (outer, dot, std,
// max / min along a dim).
#include "tensor/structural.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"
#include "tensor/scan.h"

namespace dtensor {
namespace {

// Copies x into a new contiguous tensor: output coordinate c reads x at
// coordinate (source[0][c[0]], source[1][c[1]], ...).
Tensor copy_remapped(const Tensor& x, const std::vector<std::vector<int64_t>>& source,
                     const char* op) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const int64_t nd = x.dim();
  // Offsets instead of coordinates: the inner loop only adds.
  std::vector<std::vector<int64_t>> offset(source.size());
  for (int64_t d = 0; d < nd; ++d)
    for (int64_t i : source[d]) offset[d].push_back(i * x.stride(d));
  detail::dispatch_storage(x.dtype(), op, [&]<class T>() {
    const T* src = x.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    int64_t coord[kMaxDims] = {};
    const int64_t n = out.numel();
    for (int64_t k = 0; k < n; ++k) {
      int64_t at = 0;
      for (int64_t d = 0; d < nd; ++d) at += offset[d][coord[d]];
      dst[k] = src[at];
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++coord[d] < x.shape()[d]) break;
        coord[d] = 0;
      }
    }
  });
  return out;
}

// The identity map of every dim of x.
std::vector<std::vector<int64_t>> identity_maps(const Tensor& x) {
  std::vector<std::vector<int64_t>> m(static_cast<size_t>(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d)
    for (int64_t i = 0; i < x.shape()[d]; ++i) m[d].push_back(i);
  return m;
}

// (outer, len, inner) of `shape` along the wrapped dim d (0-d: one element).
struct StructuralRows {
  int64_t outer = 1, len = 1, inner = 1;
};

StructuralRows structural_rows(const Shape& shape, int64_t d) {
  StructuralRows r;
  for (int64_t k = 0; k < static_cast<int64_t>(shape.size()); ++k) {
    if (k < d)
      r.outer *= shape[k];
    else if (k == d)
      r.len = shape[k];
    else
      r.inner *= shape[k];
  }
  return r;
}

void check_1d(const Tensor& t, const char* op, const char* which) {
  DT_CHECK(t.defined(), op, ": ", which, " is undefined");
  DT_CHECK(t.dim() == 1, op, ": expected 1-D ", which, ", got ", t.dim(), "-D (shape ", t.shape(),
           ")");
}

}  // namespace

Tensor flip(const Tensor& x, const DimVector& dims) {
  DT_CHECK(x.defined(), "flip: input tensor is undefined");
  std::vector<std::vector<int64_t>> source = identity_maps(x);
  bool seen[kMaxDims] = {};
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, std::max<int64_t>(x.dim(), 1), "flip");
    DT_CHECK(!seen[w], "flip: dim ", w, " appears multiple times in the list of dims ", dims);
    seen[w] = true;
    if (x.dim() > 0) std::reverse(source[w].begin(), source[w].end());
  }
  return copy_remapped(x, source, "flip");
}

Tensor roll(const Tensor& x, const DimVector& shifts, const DimVector& dims) {
  DT_CHECK(x.defined(), "roll: input tensor is undefined");
  DT_CHECK(!shifts.empty(), "roll: `shifts` required");
  if (dims.empty()) {
    // PyTorch: the flattened tensor rolled by the one shift, reshaped back.
    DT_CHECK(shifts.size() == 1, "roll: shifts and dimensions must align. shifts: ", shifts.size(),
             ", dims: 0");
    return roll(x.flatten(), shifts, DimVector{0}).view(x.shape());
  }
  DT_CHECK(shifts.size() == dims.size(),
           "roll: shifts and dimensions must align. shifts: ", shifts.size(),
           ", dims: ", dims.size());
  std::vector<std::vector<int64_t>> source = identity_maps(x);
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = wrap_dim(dims[k], std::max<int64_t>(x.dim(), 1), "roll");
    if (x.dim() == 0) continue;
    const int64_t n = x.shape()[d];
    if (n == 0) continue;
    // out[i] = x[(i - shift) mod n]; a dim listed twice rolls twice, as PyTorch's.
    const int64_t s = ((shifts[k] % n) + n) % n;
    std::vector<int64_t> moved(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) moved[i] = source[d][((i - s) % n + n) % n];
    source[d] = std::move(moved);
  }
  return copy_remapped(x, source, "roll");
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return sort(x, dim, descending, stable).indices;
}

// PyTorch's: self.reshape({n, 1}) * vec2.
Tensor outer(const Tensor& a, const Tensor& b) {
  check_1d(a, "outer", "self");
  check_1d(b, "outer", "vec2");
  return mul(a.unsqueeze(1), b);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_1d(a, "dot", "self");
  check_1d(b, "dot", "tensor");
  DT_CHECK(a.dtype() == b.dtype(), "dot: expected both vectors to have same dtype, but found ",
           a.dtype(), " and ", b.dtype());
  DT_CHECK(a.dtype() != DType::Bool, "dot: not implemented for bool");
  DT_CHECK(a.shape() == b.shape(), "dot: inconsistent tensor size, expected tensor [", a.numel(),
           "] and src [", b.numel(), "] to have the same number of elements, but got ", a.numel(),
           " and ", b.numel(), " elements respectively");
  return sum(mul(a, b)).to(a.dtype());
}

Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  DT_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  DT_CHECK(dtype != DType::Bool, "linspace: not implemented for bool");
  if (is_half(dtype)) return linspace(start, end, steps, DType::Float32).to(dtype);
  Tensor out = Tensor::empty({steps}, dtype);
  if (steps == 0) return out;
  detail::dispatch_numeric(dtype, "linspace", [&]<class T>() {
    // PyTorch's scalar formula: start and end in the dtype first (an int64
    // linspace truncates them), the step in the dtype's precision (double
    // for integers); the first half counts from start, the second from end,
    // so both ends are exact. (torch 1.13's vectorised CPU path computes
    // whole vectors from one base, which differs in the last bits and, for
    // int64, can lose the end: see docs/python.md.)
    using Step = std::conditional_t<std::is_floating_point_v<T>, T, double>;
    const Step lo = static_cast<Step>(static_cast<T>(start));
    const Step hi = static_cast<Step>(static_cast<T>(end));
    T* dst = out.data_ptr<T>();
    if (steps == 1) {
      dst[0] = static_cast<T>(lo);
      return;
    }
    const Step step = (hi - lo) / static_cast<Step>(steps - 1);
    const int64_t halfway = steps / 2;
    for (int64_t i = 0; i < steps; ++i)
      dst[i] = static_cast<T>(i < halfway ? lo + step * static_cast<Step>(i)
                                          : hi - step * static_cast<Step>(steps - i - 1));
  });
  return out;
}

Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype) {
  const int64_t cols = m.value_or(n);
  DT_CHECK(n >= 0, "eye: n must be greater or equal to 0, got ", n);
  DT_CHECK(cols >= 0, "eye: m must be greater or equal to 0, got ", cols);
  Tensor out = Tensor::zeros({n, cols}, dtype);
  diagonal(out).fill_(1);
  return out;
}

Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  DT_CHECK(x.defined(), "diagonal: input tensor is undefined");
  DT_CHECK(x.dim() >= 2, "diagonal: expected a tensor of at least 2 dims, got ", x.dim(),
           " (shape ", x.shape(), ")");
  const int64_t d1 = wrap_dim(dim1, x.dim(), "diagonal");
  const int64_t d2 = wrap_dim(dim2, x.dim(), "diagonal");
  DT_CHECK(d1 != d2, "diagonal: dimensions cannot be identical ", dim1, ", ", dim2);
  const int64_t n1 = x.shape()[d1], n2 = x.shape()[d2];
  int64_t length = offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2);
  length = std::max<int64_t>(length, 0);
  int64_t start = x.storage_offset();
  // An empty diagonal starts where x does (its offset may lie past the end).
  if (length > 0) start += offset >= 0 ? offset * x.stride(d2) : -offset * x.stride(d1);
  Shape shape, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == d1 || d == d2) continue;
    shape.push_back(x.shape()[d]);
    strides.push_back(x.stride(d));
  }
  shape.push_back(length);
  strides.push_back(x.stride(d1) + x.stride(d2));
  return Tensor(x.storage(), x.dtype(), shape, strides, start);
}

Tensor nonzero(const Tensor& x) {
  DT_CHECK(x.defined(), "nonzero: input tensor is undefined");
  const Tensor xc = x.contiguous();
  const int64_t nd = x.dim(), n = x.numel();
  std::vector<int64_t> hits;
  detail::dispatch_storage(x.dtype(), "nonzero", [&]<class T>() {
    const T* src = xc.data_ptr<T>();
    // Through double: NaN is nonzero, and no nonzero double or int64 rounds to 0.
    for (int64_t k = 0; k < n; ++k) {
      const double v = static_cast<double>(src[k]);
      if (v != 0 || v != v) hits.push_back(k);
    }
  });
  Tensor out = Tensor::empty({static_cast<int64_t>(hits.size()), nd}, DType::Int64);
  int64_t* dst = out.data_ptr<int64_t>();
  for (size_t h = 0; h < hits.size(); ++h) {
    int64_t rest = hits[h];
    for (int64_t d = nd - 1; d >= 0; --d) {
      dst[static_cast<int64_t>(h) * nd + d] = rest % x.shape()[d];
      rest /= x.shape()[d];
    }
  }
  return out;
}

Tensor std(const Tensor& x, const DimVector& dims, int64_t correction, bool keepdim) {
  DT_CHECK(x.defined(), "std: input tensor is undefined");
  DT_CHECK(is_floating(x.dtype()), "std: only supports floating point dtypes, got ", x.dtype());
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor max(const Tensor& x) {
  DT_CHECK(x.defined() && x.numel() > 0,
           "max(): Expected reduction dim to be specified for input.numel() == 0 (shape ",
           x.shape(), "). Specify the reduction dim with the 'dim' argument.");
  return amax(x);
}

Tensor min(const Tensor& x) {
  DT_CHECK(x.defined() && x.numel() > 0,
           "min(): Expected reduction dim to be specified for input.numel() == 0 (shape ",
           x.shape(), "). Specify the reduction dim with the 'dim' argument.");
  return amin(x);
}

namespace {

// The first extreme along dim (argmax's choice, NaN first) and its value.
ValuesIndices<Tensor> extreme_along(const Tensor& x, int64_t dim, bool keepdim, bool largest) {
  const char* op = largest ? "max" : "min";
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  DT_CHECK(x.dim() == 0 || x.shape()[d] > 0, op, "(): Expected reduction dim ", d,
           " to have non-zero size (input shape ", x.shape(), ")");
  if (x.dim() == 0) return {x.clone(), Tensor::zeros({}, DType::Int64)};
  Tensor index = largest ? argmax(x, d, true) : argmin(x, d, true);
  Tensor values = detail::take_along_dim(x, index, d);
  if (!keepdim) return {values.squeeze(d), index.squeeze(d)};
  return {std::move(values), std::move(index)};
}

}  // namespace

ValuesIndices<Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along(x, dim, keepdim, true);
}
ValuesIndices<Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along(x, dim, keepdim, false);
}
Tensor max(const Tensor& a, const Tensor& b) { return maximum(a, b); }
Tensor min(const Tensor& a, const Tensor& b) { return minimum(a, b); }

namespace detail {

// d out_i / d x_k = prod_{j < k} x_j * prod_{k < j <= i} x_j for i >= k, so
// grad_k = P_k * S_k with P_k = prod_{j < k} x_j (a running product) and
// S_k = g_k + x_{k+1} S_{k+1} (a running sum from the end). No division:
// exact with zeros in x, unlike reverse_cumsum(g * out) / x.
Tensor cumprod_backward(const Tensor& grad, const Tensor& x, int64_t dim) {
  DT_CHECK(grad.defined() && x.defined(), "cumprod_backward: undefined tensor");
  if (is_half_tensor(x)) return round_to(cumprod_backward(widen(grad), widen(x), dim), x.dtype());
  DT_CHECK(is_floating(x.dtype()) && grad.dtype() == x.dtype() && grad.shape() == x.shape(),
           "cumprod_backward: expected a floating input and a gradient of its shape and dtype, "
           "got ",
           x.dtype(), " ", x.shape(), " and ", grad.dtype(), " ", grad.shape());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumprod_backward");
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous(), gc = grad.contiguous();
  const StructuralRows r = structural_rows(x.shape(), d);
  dispatch_floating(x.dtype(), "cumprod_backward", [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    const T* gs = gc.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    std::vector<double> s(static_cast<size_t>(r.len));
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t j = 0; j < r.inner; ++j) {
        auto at = [&](int64_t i) { return (o * r.len + i) * r.inner + j; };
        double acc = 0;
        for (int64_t i = r.len - 1; i >= 0; --i) {
          acc = static_cast<double>(gs[at(i)]) +
                (i + 1 < r.len ? static_cast<double>(xs[at(i + 1)]) * acc : 0.0);
          s[static_cast<size_t>(i)] = acc;
        }
        double prefix = 1;
        for (int64_t i = 0; i < r.len; ++i) {
          dst[at(i)] = static_cast<T>(prefix * s[static_cast<size_t>(i)]);
          prefix *= static_cast<double>(xs[at(i)]);
        }
      }
  });
  return out;
}

Tensor diagonal_backward(const Tensor& grad, const Shape& input_shape, int64_t offset, int64_t dim1,
                         int64_t dim2) {
  Tensor out = Tensor::zeros(input_shape, grad.dtype());
  diagonal(out, offset, dim1, dim2).copy_(grad);
  return out;
}

}  // namespace detail
}  // namespace dtensor
