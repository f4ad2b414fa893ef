// More pointwise ops on DTensors (sin, cos, log1p, expm1, square, sign,
// floor, round, softplus, isnan, logical_*, addcmul, addcdiv, lerp): the
// local kernels are the Tensor ops, the shards pass as for every pointwise
// op (pointwise_shard_strategies), and the Partials that commute with the op
// pass too:
//  - max/min through the non-decreasing ops defined everywhere: floor,
//    round, sign, expm1 and softplus (max_r f(a_r) = f(max_r a_r)). softplus
//    switches to x where beta x > threshold, a step of exp(-threshold) /
//    beta down, within the error torch accepts for that switch itself.
//    log1p is increasing but NaN below -1: a piece there would give NaN
//    where the reduced value has none, so it reduces first.
//  - sum/avg through maps linear in the Partial operands: addcmul in
//    (input, t1) or (input, t2) with the other factor replicated; addcdiv
//    in (input, t1); lerp in (input, end) with a replicated weight, and
//    in an averaged weight alone (avg_r (x + w_r (e - x)) is lerp(x, e, avg w)). Adding
//    a replicated term keeps avg, max and min (addcmul/addcdiv's input).
// Everything else (sin, cos, square, isnan, logical_*) reduces first.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/pointwise_rule.h"

namespace dtensor {

using namespace dispatch;

namespace {

// The arguments beside the tensors that only the kernel reads (they never
// change the layout or the dtype).
struct MathArgs {
  Scalar s = Scalar(0);  // addcmul/addcdiv's value, lerp's scalar weight
  int64_t decimals = 0;
  double beta = 1, threshold = 20;
};

Tensor math_apply(OpId op, const Tensor* const* in, const MathArgs& a) {
  const Tensor& x = *in[0];
  switch (op) {
    case OpId::Sin:
      return sin(x);
    case OpId::Cos:
      return cos(x);
    case OpId::Log1p:
      return log1p(x);
    case OpId::Expm1:
      return expm1(x);
    case OpId::Square:
      return square(x);
    case OpId::Sign:
      return sign(x);
    case OpId::Floor:
      return floor(x);
    case OpId::Round:
      return round(x, a.decimals);
    case OpId::Softplus:
      return softplus(x, a.beta, a.threshold);
    case OpId::Isnan:
      return isnan(x);
    case OpId::LogicalNot:
      return logical_not(x);
    case OpId::LogicalAnd:
      return logical_and(x, *in[1]);
    case OpId::LogicalOr:
      return logical_or(x, *in[1]);
    case OpId::LogicalXor:
      return logical_xor(x, *in[1]);
    case OpId::Addcmul:
      return addcmul(x, *in[1], *in[2], a.s);
    case OpId::Addcdiv:
      return addcdiv(x, *in[1], *in[2], a.s);
    case OpId::Lerp:
      return lerp(x, *in[1], *in[2]);
    case OpId::LerpScalar:
      return lerp(x, *in[1], a.s);
    default:
      break;
  }
  DT_THROW("internal error: op ", static_cast<int>(op), " is not in pointwise_math.cc");
}

// Shape: the inputs broadcast; dtype: the plain op's on 0-d tensors of the
// inputs' dtypes (its checks throw its errors: lerp's dtypes, softplus of
// an integer tensor).
TensorMeta math_meta(const OpSchema& s) {
  Shape shape = s.input(0).shape();
  for (int i = 1; i < s.num_inputs; ++i) shape = broadcast_shapes(shape, s.input(i).shape());
  Tensor tiny[kMaxInputs];
  const Tensor* ptrs[kMaxInputs];
  for (int i = 0; i < s.num_inputs; ++i) {
    tiny[i] = Tensor::ones({}, s.input(i).dtype());
    ptrs[i] = &tiny[i];
  }
  const DType dtype = math_apply(s.op, ptrs, MathArgs{}).dtype();
  return {shape, contiguous_strides(shape), dtype};
}

void math_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  pointwise_shard_strategies(s, out, c);
  const Placement r = Replicate();
  const Placement sum = Partial(ReduceOp::Sum), avg = Partial(ReduceOp::Avg);
  const Placement max = Partial(ReduceOp::Max), min = Partial(ReduceOp::Min);
  auto one = [&](Placement a, Placement o) { c.push_back({{a}, o}); };
  auto three = [&](Placement a, Placement b, Placement d, Placement o) {
    c.push_back({{a, b, d}, o});
  };
  switch (s.op) {
    case OpId::Floor:
    case OpId::Round:
    case OpId::Sign:
    case OpId::Expm1:
    case OpId::Softplus:
      one(max, max), one(min, min);
      break;
    case OpId::Addcmul:
      for (Placement p : {sum, avg}) three(p, p, r, p), three(p, r, p, p);
      for (Placement p : {avg, max, min}) three(p, r, r, p);
      break;
    case OpId::Addcdiv:
      for (Placement p : {sum, avg}) three(p, p, r, p);
      for (Placement p : {avg, max, min}) three(p, r, r, p);
      break;
    case OpId::Lerp:
      for (Placement p : {sum, avg}) three(p, p, r, p);
      three(r, r, avg, avg);  // linear in the weight too (but input is not summed n times)
      break;
    case OpId::LerpScalar:
      for (Placement p : {sum, avg}) c.push_back({{p, p}, p});
      break;
    default:
      break;
  }
  DimStrategy all_r;
  for (int i = 0; i < s.num_inputs; ++i) all_r.in[i] = r;
  all_r.out = r;
  c.push_back(all_r);
}

#define DTENSOR_MATH_RULE(var, name) \
  constexpr OpRule var { name, math_meta, math_strategies, nullptr, true }
DTENSOR_MATH_RULE(kSin, "sin");
DTENSOR_MATH_RULE(kCos, "cos");
DTENSOR_MATH_RULE(kLog1p, "log1p");
DTENSOR_MATH_RULE(kExpm1, "expm1");
DTENSOR_MATH_RULE(kSquare, "square");
DTENSOR_MATH_RULE(kSign, "sign");
DTENSOR_MATH_RULE(kFloor, "floor");
DTENSOR_MATH_RULE(kRound, "round");
DTENSOR_MATH_RULE(kSoftplus, "softplus");
DTENSOR_MATH_RULE(kIsnan, "isnan");
DTENSOR_MATH_RULE(kLogicalNot, "logical_not");
DTENSOR_MATH_RULE(kLogicalAnd, "logical_and");
DTENSOR_MATH_RULE(kLogicalOr, "logical_or");
DTENSOR_MATH_RULE(kLogicalXor, "logical_xor");
DTENSOR_MATH_RULE(kAddcmul, "addcmul");
DTENSOR_MATH_RULE(kAddcdiv, "addcdiv");
DTENSOR_MATH_RULE(kLerp, "lerp");
#undef DTENSOR_MATH_RULE

// ---- backward: PyTorch's formulas (derivatives.yaml), in DTensor ops -----------------

using autograd::Context;
using autograd::Grads;
using autograd::sum_to;

void math_record_unary(OpId id, const char* name, DTensor& out, const DTensor& x,
                       const MathArgs& a) {
  auto of_input = [&](Grads (*f)(const Context&)) { autograd::record(out, name, {&x}, {x}, f); };
  switch (id) {
    case OpId::Sin:
      return of_input([](const Context& c) { return Grads{mul(c.grad, cos(c.saved(0)))}; });
    case OpId::Cos:
      return of_input([](const Context& c) { return Grads{mul(c.grad, neg(sin(c.saved(0))))}; });
    case OpId::Log1p:
      return of_input([](const Context& c) { return Grads{div(c.grad, add(c.saved(0), 1))}; });
    case OpId::Expm1:
      autograd::record(out, name, {&x}, {out},
                       [](const Context& c) { return Grads{mul(c.grad, add(c.saved(0), 1))}; });
      return;
    case OpId::Square:  // pow(x, 2)'s: grad * (2 * x)
      return of_input([](const Context& c) { return Grads{mul(c.grad, mul(c.saved(0), 2.0))}; });
    case OpId::Sign:
    case OpId::Floor:
    case OpId::Round:  // piecewise constant: zero, as PyTorch
      autograd::record(out, name, {&x}, {},
                       [](const Context& c) { return Grads{zeros_like(c.grad)}; });
      return;
    case OpId::Softplus:
      // softplus_backward: z = exp(beta x); grad where beta x > threshold,
      // else grad * z / (z + 1).
      autograd::record(out, name, {&x}, {x}, [beta = a.beta, th = a.threshold](const Context& c) {
        const DTensor xb = mul(c.saved(0), beta);
        const DTensor z = exp(xb);
        return Grads{where(gt(xb, th), c.grad, div(mul(c.grad, z), add(z, 1)))};
      });
      return;
    default:
      return;  // isnan, logical_not: bool, no gradient
  }
}

DTensor math_unary(OpId id, const OpRule& rule, const DTensor& x, const MathArgs& a = {}) {
  const OpSchema schema(id, {&x.spec()});
  DTensor out = run_unary(schema, rule, x, [id, a](int, const Tensor& t) {
    const Tensor* in[] = {&t};
    return math_apply(id, in, a);
  });
  if (autograd::recording({&x})) math_record_unary(id, rule.name, out, x, a);
  return out;
}

// The logical ops: bool results, nothing to differentiate.
DTensor math_logical(OpId id, const OpRule& rule, const DTensor& a, const DTensor& b) {
  const OpSchema schema(id, {&a.spec(), &b.spec()});
  return run_binary(schema, rule, a, b, [id](int, const Tensor& x, const Tensor& y) {
    const Tensor* in[] = {&x, &y};
    return math_apply(id, in, MathArgs{});
  });
}

DTensor math_ternary(OpId id, const OpRule& rule, const DTensor& a, const DTensor& b,
                     const DTensor& c, Scalar s) {
  const OpSchema schema(id, {&a.spec(), &b.spec(), &c.spec()}, {static_cast<int64_t>(s.kind())});
  const DTensor* inputs[] = {&a, &b, &c};
  MathArgs args;
  args.s = s;
  return run(schema, rule, inputs, [id, args](int, const Tensor* const* in, const OutputSharding&) {
    return math_apply(id, in, args);
  });
}

}  // namespace

DTensor sin(const DTensor& x) { return math_unary(OpId::Sin, kSin, x); }
DTensor cos(const DTensor& x) { return math_unary(OpId::Cos, kCos, x); }
DTensor log1p(const DTensor& x) { return math_unary(OpId::Log1p, kLog1p, x); }
DTensor expm1(const DTensor& x) { return math_unary(OpId::Expm1, kExpm1, x); }
DTensor square(const DTensor& x) { return math_unary(OpId::Square, kSquare, x); }
DTensor sign(const DTensor& x) { return math_unary(OpId::Sign, kSign, x); }
DTensor floor(const DTensor& x) { return math_unary(OpId::Floor, kFloor, x); }
DTensor round(const DTensor& x, int64_t decimals) {
  MathArgs a;
  a.decimals = decimals;
  return math_unary(OpId::Round, kRound, x, a);
}
DTensor softplus(const DTensor& x, Scalar beta, Scalar threshold) {
  MathArgs a;
  a.beta = beta.to_double();
  a.threshold = threshold.to_double();
  return math_unary(OpId::Softplus, kSoftplus, x, a);
}
DTensor isnan(const DTensor& x) { return math_unary(OpId::Isnan, kIsnan, x); }
DTensor logical_not(const DTensor& x) { return math_unary(OpId::LogicalNot, kLogicalNot, x); }
DTensor logical_and(const DTensor& a, const DTensor& b) {
  return math_logical(OpId::LogicalAnd, kLogicalAnd, a, b);
}
DTensor logical_or(const DTensor& a, const DTensor& b) {
  return math_logical(OpId::LogicalOr, kLogicalOr, a, b);
}
DTensor logical_xor(const DTensor& a, const DTensor& b) {
  return math_logical(OpId::LogicalXor, kLogicalXor, a, b);
}

DTensor addcmul(const DTensor& input, const DTensor& t1, const DTensor& t2, Scalar value) {
  DTensor out = math_ternary(OpId::Addcmul, kAddcmul, input, t1, t2, value);
  if (autograd::recording({&input, &t1, &t2})) {
    const double v = value.to_double();
    autograd::record(out, "addcmul", {&input, &t1, &t2}, {t1, t2},
                     [v, si = input.shape(), s1 = t1.shape(), s2 = t2.shape()](const Context& c) {
                       Grads g(3);
                       if (c.needs(0)) g[0] = sum_to(c.grad, si);
                       if (c.needs(1)) g[1] = sum_to(mul(c.grad, mul(c.saved(1), v)), s1);
                       if (c.needs(2)) g[2] = sum_to(mul(c.grad, mul(c.saved(0), v)), s2);
                       return g;
                     });
  }
  return out;
}

DTensor addcdiv(const DTensor& input, const DTensor& t1, const DTensor& t2, Scalar value) {
  DTensor out = math_ternary(OpId::Addcdiv, kAddcdiv, input, t1, t2, value);
  if (autograd::recording({&input, &t1, &t2})) {
    const double v = value.to_double();
    // t1: grad * (value / t2); t2: -grad * (value * t1 / (t2 * t2)).
    autograd::record(out, "addcdiv", {&input, &t1, &t2}, {t1, t2},
                     [v, si = input.shape(), s1 = t1.shape(), s2 = t2.shape()](const Context& c) {
                       Grads g(3);
                       const DTensor& a = c.saved(0);
                       const DTensor& b = c.saved(1);
                       if (c.needs(0)) g[0] = sum_to(c.grad, si);
                       if (c.needs(1)) g[1] = sum_to(mul(c.grad, div(v, b)), s1);
                       if (c.needs(2))
                         g[2] = sum_to(mul(neg(c.grad), div(mul(a, v), mul(b, b))), s2);
                       return g;
                     });
  }
  return out;
}

DTensor lerp(const DTensor& input, const DTensor& end, Scalar weight) {
  const OpSchema schema(OpId::LerpScalar, {&input.spec(), &end.spec()},
                        {static_cast<int64_t>(weight.kind())});
  MathArgs args;
  args.s = weight;
  DTensor out =
      run_binary(schema, kLerp, input, end, [args](int, const Tensor& x, const Tensor& y) {
        const Tensor* in[] = {&x, &y};
        return math_apply(OpId::LerpScalar, in, args);
      });
  if (autograd::recording({&input, &end})) {
    const double w = weight.to_double();
    autograd::record(out, "lerp", {&input, &end}, {},
                     [w, si = input.shape(), se = end.shape()](const Context& c) {
                       Grads g(2);
                       if (c.needs(0)) g[0] = sum_to(mul(c.grad, 1.0 - w), si);
                       if (c.needs(1)) g[1] = sum_to(mul(c.grad, w), se);
                       return g;
                     });
  }
  return out;
}

DTensor lerp(const DTensor& input, const DTensor& end, const DTensor& weight) {
  DTensor out = math_ternary(OpId::Lerp, kLerp, input, end, weight, Scalar(0));
  if (autograd::recording({&input, &end, &weight})) {
    // input: grad * (1 - w); end: grad * w; weight: grad * (end - input).
    autograd::record(out, "lerp", {&input, &end, &weight}, {input, end, weight},
                     [si = input.shape(), se = end.shape(), sw = weight.shape()](const Context& c) {
                       Grads g(3);
                       const DTensor& w = c.saved(2);
                       if (c.needs(0)) g[0] = sum_to(mul(c.grad, sub(1, w)), si);
                       if (c.needs(1)) g[1] = sum_to(mul(c.grad, w), se);
                       if (c.needs(2)) g[2] = sum_to(mul(c.grad, sub(c.saved(1), c.saved(0))), sw);
                       return g;
                     });
  }
  return out;
}

}  // namespace dtensor
