// The validator's op cases (include/dtensor/rules.h): each names one call of
// a DTensor op on fixed input shapes, its plain Tensor reference, and the op
// id it dispatches (for forced layouts). One file per op family adds its
// cases (cases_*.cc); check.cc runs them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dispatch/dispatch.h"

namespace dtensor::rules {

// What an input holds. Values take every placement, Partials included;
// masks and indices only Replicate and Shard (a Partial index means
// nothing).
enum class InputKind {
  Values,    // integer-valued floats in [-9, 9]
  Positive,  // integer-valued floats in [1, 9] (log, sqrt, divisors)
  // Values with more zeros, for all/any: about a fifth (FewZeros) or four
  // fifths (FewNonzeros) of them 0, so that a row's all/any varies; the
  // rest in [-9, 9] as Values, so that Partial pieces can be 0 where the
  // value is not.
  FewZeros,
  FewNonzeros,
  Mask,      // bool
  Index,     // int64 in [0, bound)
};

struct CaseInput {
  Shape shape;
  InputKind kind = InputKind::Values;
  int64_t bound = 0;  // Index: exclusive upper bound
};

using Tensors = std::vector<Tensor>;
using DTensors = std::vector<DTensor>;

struct OpCase {
  std::string name;
  // The id the op dispatches first; nullopt: composite (no forced layouts).
  std::optional<dispatch::OpId> id;
  std::vector<CaseInput> inputs;
  std::function<Tensor(const Tensors&)> plain;
  std::function<DTensor(const DTensors&)> dist;
  // 0: the result must be exact; else rtol = atol = tol.
  double tol = 0;
  // The full inputs when given (a user's op); else made from `inputs`.
  Tensors examples = {};
};

void add_pointwise_cases(std::vector<OpCase>& cases);
void add_matmul_cases(std::vector<OpCase>& cases);
void add_reduction_cases(std::vector<OpCase>& cases);
void add_view_cases(std::vector<OpCase>& cases);
void add_tensor_cases(std::vector<OpCase>& cases);
void add_nn_cases(std::vector<OpCase>& cases);
void add_scan_cases(std::vector<OpCase>& cases);
void add_shape_cases(std::vector<OpCase>& cases);
void add_index_cases(std::vector<OpCase>& cases);
void add_attention_cases(std::vector<OpCase>& cases);
// Degenerate calls of the views and shape ops (full-range and empty cuts,
// same-shape views): last, so that the cases before keep their seeds.
void add_degenerate_view_cases(std::vector<OpCase>& cases);
// The fused backward ops of pointwise ops (gelu_backward), after those.
void add_pointwise_backward_cases(std::vector<OpCase>& cases);
// silu (the SwiGLU gate), after those.
void add_late_pointwise_cases(std::vector<OpCase>& cases);
// sin, cos, ..., addcmul, lerp (src/ops/pointwise_math.cc): added by
// add_late_pointwise_cases, after silu.
void add_pointwise_math_cases(std::vector<OpCase>& cases);
// flip, roll, cumprod, diagonal (src/ops/structural.cc), after those.
void add_structural_cases(std::vector<OpCase>& cases);

// The input shape most cases use: uneven over 2 and 3 ranks, and a dim of 2.
inline const Shape kX{4, 5, 2};
// The tolerance of transcendental ops on float32 inputs (float32 rounding).
inline constexpr double kFloat = 1e-4;

// Every case, in table order.
const std::vector<OpCase>& all_cases();

// A DTensor with placements `pl` whose full value is `full`, with the
// adversarial Partial pieces described in rules.h (`half`: Partial(max|min)
// pieces off the integers, see adversarial.cc).
DTensor adversarial(const Tensor& full, const DeviceMesh& mesh, const Placements& pl,
                    uint64_t seed, bool half);

// The full input of a case input.
Tensor make_input(const CaseInput& in, uint64_t seed);

}  // namespace dtensor::rules
