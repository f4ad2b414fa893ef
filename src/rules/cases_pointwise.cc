// Validator cases of the pointwise ops (src/ops/pointwise.cc): unary ops on
// [4, 5, 2], binary ops against a broadcast [5, 1] operand, the scalar forms,
// where and masked_fill. Shapes: on 3 or 4 ranks, 4, 5 and 2 split unevenly
// and leave empty shards.
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

const Shape kB{5, 1};

template <class F>
OpCase unary(std::string name, OpId id, F f, InputKind kind = InputKind::Values, double tol = 0) {
  return {std::move(name), id, {{kX, kind}},
          [f](const Tensors& x) { return f(x[0]); },
          [f](const DTensors& x) { return f(x[0]); }, tol};
}

template <class F>
OpCase binary(std::string name, OpId id, F f, InputKind b_kind = InputKind::Values,
              double tol = 0) {
  return {std::move(name), id, {{kX}, {kB, b_kind}},
          [f](const Tensors& x) { return f(x[0], x[1]); },
          [f](const DTensors& x) { return f(x[0], x[1]); }, tol};
}

}  // namespace

void add_pointwise_cases(std::vector<OpCase>& c) {
  c.push_back(binary("add", OpId::Add, [](const auto& a, const auto& b) { return add(a, b); }));
  c.push_back(binary("sub", OpId::Sub, [](const auto& a, const auto& b) { return sub(a, b); }));
  c.push_back(binary("mul", OpId::Mul, [](const auto& a, const auto& b) { return mul(a, b); }));
  c.push_back(binary("div", OpId::Div, [](const auto& a, const auto& b) { return div(a, b); },
                     InputKind::Positive, kFloat));
  c.push_back(binary("maximum", OpId::Maximum,
                     [](const auto& a, const auto& b) { return maximum(a, b); }));
  c.push_back(binary("minimum", OpId::Minimum,
                     [](const auto& a, const auto& b) { return minimum(a, b); }));
  c.push_back(binary("eq", OpId::Eq, [](const auto& a, const auto& b) { return eq(a, b); }));
  c.push_back(binary("ne", OpId::Ne, [](const auto& a, const auto& b) { return ne(a, b); }));
  c.push_back(binary("lt", OpId::Lt, [](const auto& a, const auto& b) { return lt(a, b); }));
  c.push_back(binary("le", OpId::Le, [](const auto& a, const auto& b) { return le(a, b); }));
  c.push_back(binary("gt", OpId::Gt, [](const auto& a, const auto& b) { return gt(a, b); }));
  c.push_back(binary("ge", OpId::Ge, [](const auto& a, const auto& b) { return ge(a, b); }));
  c.push_back(unary("add_scalar", OpId::AddScalar, [](const auto& x) { return add(x, 2.0); }));
  c.push_back(unary("sub_scalar", OpId::SubScalar, [](const auto& x) { return sub(x, 2.0); }));
  c.push_back(unary("rsub_scalar", OpId::RSubScalar, [](const auto& x) { return sub(2.0, x); }));
  c.push_back(unary("mul_scalar", OpId::MulScalar, [](const auto& x) { return mul(x, -3.0); }));
  c.push_back(unary("div_scalar", OpId::DivScalar, [](const auto& x) { return div(x, 4.0); }));
  c.push_back(unary("rdiv_scalar", OpId::RDivScalar, [](const auto& x) { return div(4.0, x); },
                    InputKind::Positive, kFloat));
  c.push_back(unary("eq_scalar", OpId::EqScalar, [](const auto& x) { return eq(x, 3); }));
  c.push_back(unary("ne_scalar", OpId::NeScalar, [](const auto& x) { return ne(x, 3); }));
  c.push_back(unary("lt_scalar", OpId::LtScalar, [](const auto& x) { return lt(x, 0.5); }));
  c.push_back(unary("le_scalar", OpId::LeScalar, [](const auto& x) { return le(x, 0.5); }));
  c.push_back(unary("gt_scalar", OpId::GtScalar, [](const auto& x) { return gt(x, 0.5); }));
  c.push_back(unary("ge_scalar", OpId::GeScalar, [](const auto& x) { return ge(x, 0.5); }));
  c.push_back(unary("neg", OpId::Neg, [](const auto& x) { return neg(x); }));
  c.push_back(unary("abs", OpId::Abs, [](const auto& x) { return abs(x); }));
  c.push_back(unary("relu", OpId::Relu, [](const auto& x) { return relu(x); }));
  c.push_back(unary("pow", OpId::Pow, [](const auto& x) { return pow(x, 2); }));
  c.push_back(unary("exp", OpId::Exp, [](const auto& x) { return exp(x); }, InputKind::Values,
                    kFloat));
  c.push_back(unary("log", OpId::Log, [](const auto& x) { return log(x); }, InputKind::Positive,
                    kFloat));
  c.push_back(unary("sqrt", OpId::Sqrt, [](const auto& x) { return sqrt(x); },
                    InputKind::Positive, kFloat));
  c.push_back(unary("rsqrt", OpId::Rsqrt, [](const auto& x) { return rsqrt(x); },
                    InputKind::Positive, kFloat));
  c.push_back(unary("tanh", OpId::Tanh, [](const auto& x) { return tanh(x); }, InputKind::Values,
                    kFloat));
  c.push_back(unary("sigmoid", OpId::Sigmoid, [](const auto& x) { return sigmoid(x); },
                    InputKind::Values, kFloat));
  c.push_back(unary("erf", OpId::Erf, [](const auto& x) { return erf(x); }, InputKind::Values,
                    kFloat));
  c.push_back(unary("gelu", OpId::Gelu, [](const auto& x) { return gelu(x); }, InputKind::Values,
                    kFloat));
  c.push_back({"where", OpId::Where, {{kB, InputKind::Mask}, {kX}, {kB}},
               [](const Tensors& x) { return where(x[0], x[1], x[2]); },
               [](const DTensors& x) { return where(x[0], x[1], x[2]); }});
  c.push_back({"where_scalar", OpId::WhereScalar, {{kB, InputKind::Mask}, {kX}},
               [](const Tensors& x) { return where(x[0], x[1], -1.5); },
               [](const DTensors& x) { return where(x[0], x[1], -1.5); }});
  c.push_back({"masked_fill", OpId::MaskedFill, {{kX}, {kB, InputKind::Mask}},
               [](const Tensors& x) { return masked_fill(x[0], x[1], 9); },
               [](const DTensors& x) { return masked_fill(x[0], x[1], 9); }});
}

void add_pointwise_backward_cases(std::vector<OpCase>& c) {
  c.push_back(binary("gelu_backward", OpId::GeluBackward,
                     [](const auto& g, const auto& x) { return gelu_backward(g, x); },
                     InputKind::Values, kFloat));
  c.push_back(binary("gelu_backward_tanh", OpId::GeluBackward,
                     [](const auto& g, const auto& x) {
                       return gelu_backward(g, x, GeluApprox::Tanh);
                     },
                     InputKind::Values, kFloat));
}

// After every other case: cases are seeded by their index in the table.
void add_late_pointwise_cases(std::vector<OpCase>& c) {
  c.push_back(unary("silu", OpId::Silu, [](const auto& x) { return silu(x); }, InputKind::Values,
                    kFloat));
  add_pointwise_math_cases(c);
}

// sin ... lerp (src/ops/pointwise_math.cc), after silu.
void add_pointwise_math_cases(std::vector<OpCase>& c) {
  // zeros on both sides, so that the logical ops see both truth values
  const std::vector<CaseInput> kFewZerosPair{{kX, InputKind::FewZeros}, {kB, InputKind::FewZeros}};
  c.push_back(unary("sin", OpId::Sin, [](const auto& x) { return sin(x); }, InputKind::Values,
                    kFloat));
  c.push_back(unary("cos", OpId::Cos, [](const auto& x) { return cos(x); }, InputKind::Values,
                    kFloat));
  c.push_back(unary("log1p", OpId::Log1p, [](const auto& x) { return log1p(x); },
                    InputKind::Positive, kFloat));
  c.push_back(unary("expm1", OpId::Expm1, [](const auto& x) { return expm1(x); },
                    InputKind::Values, kFloat));
  c.push_back(unary("square", OpId::Square, [](const auto& x) { return square(x); }));
  c.push_back(unary("sign", OpId::Sign, [](const auto& x) { return sign(x); }));
  c.push_back(unary("floor", OpId::Floor, [](const auto& x) { return floor(x); }));
  c.push_back(unary("round", OpId::Round, [](const auto& x) { return round(x); }));
  c.push_back(unary("round_decimals", OpId::Round, [](const auto& x) { return round(x, -1); },
                    InputKind::Values, kFloat));
  // threshold 3: both of softplus's branches among values in [-9, 9]
  c.push_back(unary("softplus", OpId::Softplus, [](const auto& x) { return softplus(x, 1, 3); },
                    InputKind::Values, kFloat));
  c.push_back(unary("isnan", OpId::Isnan, [](const auto& x) { return isnan(x); }));
  c.push_back(unary("logical_not", OpId::LogicalNot, [](const auto& x) { return logical_not(x); },
                    InputKind::FewZeros));
  c.push_back({"logical_and", OpId::LogicalAnd, kFewZerosPair,
               [](const Tensors& x) { return logical_and(x[0], x[1]); },
               [](const DTensors& x) { return logical_and(x[0], x[1]); }});
  c.push_back({"logical_or", OpId::LogicalOr, kFewZerosPair,
               [](const Tensors& x) { return logical_or(x[0], x[1]); },
               [](const DTensors& x) { return logical_or(x[0], x[1]); }});
  c.push_back({"logical_xor", OpId::LogicalXor, kFewZerosPair,
               [](const Tensors& x) { return logical_xor(x[0], x[1]); },
               [](const DTensors& x) { return logical_xor(x[0], x[1]); }});
  c.push_back({"addcmul", OpId::Addcmul, {{kX}, {kX}, {kB}},
               [](const Tensors& x) { return addcmul(x[0], x[1], x[2], 0.5); },
               [](const DTensors& x) { return addcmul(x[0], x[1], x[2], 0.5); }, kFloat});
  c.push_back({"addcdiv", OpId::Addcdiv, {{kX}, {kX}, {kB, InputKind::Positive}},
               [](const Tensors& x) { return addcdiv(x[0], x[1], x[2], 2); },
               [](const DTensors& x) { return addcdiv(x[0], x[1], x[2], 2); }, kFloat});
  c.push_back({"lerp", OpId::Lerp, {{kX}, {kX}, {kB}},
               [](const Tensors& x) { return lerp(x[0], x[1], x[2]); },
               [](const DTensors& x) { return lerp(x[0], x[1], x[2]); }, kFloat});
  c.push_back(binary("lerp_scalar", OpId::LerpScalar,
                     [](const auto& a, const auto& b) { return lerp(a, b, 0.75); },
                     InputKind::Values, kFloat));
}

}  // namespace dtensor::rules
