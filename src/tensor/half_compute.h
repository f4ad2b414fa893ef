// Internal: how an op on bfloat16 / float16 computes (dispatch.h's rule,
// PyTorch's CPU semantics): at its entry point the op widens its 16-bit
// inputs to float32, runs itself in float32 and rounds its floating result
// back to the 16-bit dtype once.
//
//   if (is_half(x.dtype())) return round_to(sum(widen(x), dims), x.dtype());
//
// So every op on 16-bit data equals, bit for bit, the float32 op on the
// widened inputs rounded once, and reductions, norms, softmax and products
// accumulate as the float32 op does (in float32 or double), never in 16
// bits. Widening is exact (every bfloat16 and float16 value is a float32
// one), which is also why ops that only move elements may take this path:
// only a NaN's payload is not kept (it comes back as the quiet NaN).
// No arithmetic is compiled for the 16-bit types: the elementwise ops run
// the float32 op's loop on blocks widened on the stack and round each block
// once (HalfMap, elementwise_map.h), the same bits as this rule without the
// whole-tensor temporaries; bfloat16 products may run oneDNN's bf16
// kernels (onednn_gemm.h), the one exception to bit-for-bit equality.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor::detail {

inline bool is_half_tensor(const Tensor& t) { return t.defined() && is_half(t.dtype()); }

// t in float32 when it is 16-bit; t itself otherwise (undefined stays so).
inline Tensor widen(const Tensor& t) { return is_half_tensor(t) ? t.to(DType::Float32) : t; }

inline std::vector<Tensor> widen(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(widen(t));
  return out;
}

// A result of the widened op: float32 rounds to `half` once; integer and
// bool results (indices, masks) stay as they are.
inline Tensor round_to(const Tensor& out, DType half) {
  return out.defined() && out.dtype() == DType::Float32 ? out.to(half) : out;
}

inline ValuesIndices<Tensor> round_to(ValuesIndices<Tensor> r, DType half) {
  r.values = round_to(r.values, half);
  return r;
}

inline std::vector<Tensor> round_to(std::vector<Tensor> outs, DType half) {
  for (Tensor& t : outs) t = round_to(t, half);
  return outs;
}

// The 16-bit dtype the floating inputs share, if they are all of one 16-bit
// dtype (undefined and integer/bool tensors do not count): then the op's
// result is of that dtype and it computes in float32. Mixed floating dtypes
// (bfloat16 with float32, bfloat16 with float16) promote to float32 or
// better in the op itself.
inline std::optional<DType> shared_half(std::initializer_list<const Tensor*> ts) {
  std::optional<DType> half;
  for (const Tensor* t : ts) {
    if (!t->defined() || !is_floating(t->dtype())) continue;
    if (!is_half(t->dtype()) || (half && *half != t->dtype())) return std::nullopt;
    half = t->dtype();
  }
  return half;
}

}  // namespace dtensor::detail
