// Vector norms on plain tensors: vector_norm (torch.linalg.vector_norm) and
// norm (torch.norm with a numeric p), as root(part(x)) (norm_parts.h).
//
// The parts reuse the reduction kernels (reduce.cc): floating sums
// accumulate in double there, so a float32 power sum loses no more than the
// final rounding, and max/min propagate NaN as torch.linalg.vector_norm does.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "tensor/norm_parts.h"
#include "tensor/half_compute.h"

namespace dtensor {
namespace norm_parts {

namespace {

std::string ord_text(double ord) {
  std::ostringstream os;
  os << ord;
  return os.str();
}

}  // namespace

Shape check(const char* op, const Shape& shape, DType dtype, double ord, const DimVector& dims,
            bool keepdim) {
  DT_CHECK(is_floating(dtype), op, ": expected a floating-point input (float32 or float64), got ",
           dtype);
  DT_CHECK(!std::isnan(ord), op, ": ord must be a real number or +-inf, got nan");
  const int64_t ndim = static_cast<int64_t>(shape.size());
  bool reduced[kMaxDims] = {};
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) reduced[d] = true;
  } else {
    // A 0-d tensor takes dim 0 / -1 (one dim of size 1), as in PyTorch.
    bool seen[kMaxDims] = {};
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, std::max<int64_t>(ndim, 1), op);
      DT_CHECK(!seen[w], op, ": dim ", w, " appears more than once in dim ", dims,
               " (input shape ", shape, ")");
      seen[w] = true;
      if (ndim > 0) reduced[w] = true;
    }
  }
  Shape out;
  for (int64_t d = 0; d < ndim; ++d) {
    // max |x| over nothing, or a sum of |x|^ord with ord < 0 over nothing
    // (whose root would be inf^-1 = 0 or 0^(1/ord) = inf), has no identity.
    DT_CHECK(!reduced[d] || shape[d] != 0 || !(ord < 0 || ord == INFINITY), op,
             ": cannot compute the ", ord_text(ord), " norm over the empty dim ", d,
             " of an input of shape ", shape, " (the operation has no identity)");
    if (!reduced[d]) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor part(const Tensor& x, double ord, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(part(detail::widen(x), ord, dims, keepdim), x.dtype());
  if (ord == INFINITY) return amax(abs(x), dims, keepdim);
  if (ord == -INFINITY) return amin(abs(x), dims, keepdim);
  if (ord == 0) return sum(ne(x, 0), dims, keepdim).to(x.dtype());
  if (ord == 1) return sum(abs(x), dims, keepdim);
  if (ord == 2) return sum(mul(x, x), dims, keepdim);
  return sum(pow(abs(x), ord), dims, keepdim);
}

Tensor root(const Tensor& s, double ord) {
  if (rootless(ord)) return s;
  if (detail::is_half_tensor(s)) return detail::round_to(root(detail::widen(s), ord), s.dtype());
  if (ord == 2) return sqrt(s);
  return pow(s, 1.0 / ord);
}

}  // namespace norm_parts

Tensor vector_norm(const Tensor& x, double ord, const DimVector& dims, bool keepdim) {
  DT_CHECK(x.defined(), "vector_norm: the input is an undefined tensor");
  norm_parts::check("vector_norm", x.shape(), x.dtype(), ord, dims, keepdim);
  // The part and the root in float32, rounded once.
  if (detail::is_half_tensor(x))
    return detail::round_to(vector_norm(detail::widen(x), ord, dims, keepdim), x.dtype());
  return norm_parts::root(norm_parts::part(x, ord, dims, keepdim), ord);
}

Tensor norm(const Tensor& x, double p, const DimVector& dims, bool keepdim) {
  DT_CHECK(x.defined(), "norm: the input is an undefined tensor");
  norm_parts::check("norm", x.shape(), x.dtype(), p, dims, keepdim);
  if (detail::is_half_tensor(x))
    return detail::round_to(norm(detail::widen(x), p, dims, keepdim), x.dtype());
  return norm_parts::root(norm_parts::part(x, p, dims, keepdim), p);
}

}  // namespace dtensor
