// The two halves of a vector norm, shared by the plain op (src/tensor/norm.cc)
// and the DTensor op (src/ops/norm.cc) so that both run the same kernels:
//   part(x)   what adds up over elements: sum |x|^ord (sum x*x for 2, sum |x|
//             for 1, the count of nonzeros for 0), or max |x| / min |x| for
//             ord = inf / -inf;
//   root(s)   the norm from the combined parts: sqrt for 2, s^(1/ord) for other
//             ords, nothing for 0, 1 and ±inf.
// A norm over rows split between ranks is then root(combine(part(piece))),
// combine being a sum (or max / min for ±inf) over the pieces: the reason
// the DTensor op needs one reduction and no gather.
#pragma once

#include <cmath>

#include "dtensor/tensor.h"

namespace dtensor::norm_parts {

// Checks the arguments as PyTorch's vector_norm does (float dtype, dims in
// range and not repeated, ord not NaN, no empty reduced dim for ord < 0 or
// inf) and returns the output shape. Errors name `op` ("vector_norm" or
// "norm") and what was given.
Shape check(const char* op, const Shape& shape, DType dtype, double ord, const DimVector& dims,
            bool keepdim);

// Whether root() is the identity, i.e. the combined parts are the norm.
inline bool rootless(double ord) { return ord == 0 || ord == 1 || std::isinf(ord); }

// part(x) over `dims`; the dtype of x. REQUIRES: check() passed, and for
// ±inf no reduced dim of x is empty.
Tensor part(const Tensor& x, double ord, const DimVector& dims, bool keepdim);

// root(s) (s itself when rootless(ord)).
Tensor root(const Tensor& s, double ord);

}  // namespace dtensor::norm_parts
