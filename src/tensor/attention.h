// Internal: the kernels of scaled_dot_product_attention, shared by the
// plain op (tensor/attention.cc) and the DTensor op (ops/attention.cc).
//
// The DTensor op runs them on one shard at a time, so they take the global
// index of the shard's first query row (q_offset): the causal mask compares
// global query and key positions, and a rank holding query rows 5..7 must
// mask as rows 5..7 do, not as rows 0..2. Keys are never sharded (a sharded
// key sequence needs a softmax across ranks), so key positions are local.
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/tensor.h"

namespace dtensor::detail {

// PyTorch's checks of scaled_dot_product_attention on shapes and dtypes;
// `mask` is null when there is none. Returns the output's shape
// [batch..., L, Ev], batch the broadcast of the inputs' leading dims.
// Throws dtensor::Error naming `op`, what was given and what was expected.
Shape sdpa_output_shape(const char* op, const Shape& q, DType q_dtype, const Shape& k,
                        DType k_dtype, const Shape& v, DType v_dtype, const Shape* mask,
                        DType mask_dtype, double dropout_p, bool is_causal);

// The factor applied to q·k: `scale`, or 1/sqrt(E) by default.
double sdpa_scale(int64_t head_dim, std::optional<double> scale);

// softmax(q k^T * scale + mask) v on one shard whose first query row is
// global row q_offset. REQUIRES: shapes checked by sdpa_output_shape.
Tensor sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                    bool is_causal, double scale, int64_t q_offset);

enum class SdpaInput : int64_t { Query = 0, Key = 1, Value = 2, Mask = 3 };

// The gradient of the forward's output with respect to `which`, given the
// output's gradient `grad` (PyTorch's math backward, with the attention
// probabilities P recomputed):
//   grad_v = P^T grad, grad_P = grad v^T, grad_S = P * (grad_P - rowsum(grad_P * P)),
//   grad_q = grad_S k * scale, grad_k = grad_S^T q * scale,
//   grad_mask = grad_S (a float mask is added to the scores),
// each summed over the dims the input was broadcast along.
// REQUIRES: which == Mask only with a float mask.
Tensor sdpa_backward(SdpaInput which, const Tensor& grad, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& mask, bool is_causal, double scale,
                     int64_t q_offset);

}  // namespace dtensor::detail
