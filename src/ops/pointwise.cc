// Pointwise ops on DTensors: the local kernels are the Tensor ops; the
// strategies say which placements pass through.
//
// Sharding: an output dim may be sharded when every input that has that dim
// (right-aligned, broadcasting) is sharded on it the same way; an input that
// broadcasts the dim (size 1) or lacks it must be replicated.
// Partial: the op must commute with the reduction over the mesh dim.
//  - sum/avg: linear ops. add/sub of two P(sum); mul/div of a P(sum) by a
//    replicated factor; neg; where() picking between two P(sum). Adding a
//    scalar to a partial sum is not linear (n pieces would each add it),
//    but it is for an average: avg(a_r + b) = avg(a_r) + b.
//  - max/min: monotone ops. max(a_r + b) = max(a_r) + b, so adding a
//    replicated value or a scalar keeps P(max); negating turns it into
//    P(min); relu, exp, tanh, sigmoid and erf are increasing and defined
//    everywhere (log and sqrt are not: a negative piece would give NaN;
//    silu is not monotone: it dips below zero near x = -1.28);
//    maximum/minimum and where()/masked_fill selecting per element commute;
//    so does max against a replicated value with P(min) (max distributes
//    over min), and min with P(max). A scalar filled in by where/masked_fill
//    is its own average, so P(avg) passes them too.
// Everything else reduces the Partial first.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/pointwise_rule.h"

namespace dtensor {

using namespace dispatch;

namespace {

// Scalars enter the schema by kind only: their value never changes the
// layout, their kind (bool, integer, floating) may change the dtype.
int64_t scalar_kind(Scalar b) { return static_cast<int64_t>(b.kind()); }

Scalar representative(int64_t kind) {
  switch (static_cast<Scalar::Kind>(kind)) {
    case Scalar::Kind::Float: return Scalar(0.5);
    case Scalar::Kind::Int: return Scalar(int64_t{1});
    case Scalar::Kind::Bool: break;
  }
  return Scalar(true);
}

// The plain tensor-tensor op behind a binary id. binary() looks it up once
// per op rather than going through apply's switch for every shard (about
// 20 instructions a shard, on ops whose dispatch costs about 1,000).
using BinaryKernel = Tensor (*)(const Tensor&, const Tensor&);
BinaryKernel binary_kernel(OpId op) {
  switch (op) {
    case OpId::Add: return add;
    case OpId::Sub: return sub;
    case OpId::Mul: return mul;
    case OpId::Div: return div;
    case OpId::Maximum: return maximum;
    case OpId::Minimum: return minimum;
    case OpId::Eq: return eq;
    case OpId::Ne: return ne;
    case OpId::Lt: return lt;
    case OpId::Le: return le;
    case OpId::Gt: return gt;
    case OpId::Ge: return ge;
    default: break;
  }
  DT_THROW("internal error: op ", static_cast<int>(op), " is not a binary pointwise op");
}

// The plain op behind each id. `s` is the scalar of the scalar forms;
// `extra` an op's other argument (gelu's approximation).
Tensor apply(OpId op, const Tensor* const* in, Scalar s, int64_t extra) {
  const Tensor& x = *in[0];
  switch (op) {
    case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Maximum:
    case OpId::Minimum: case OpId::Eq: case OpId::Ne: case OpId::Lt: case OpId::Le:
    case OpId::Gt: case OpId::Ge:
      return binary_kernel(op)(x, *in[1]);
    case OpId::Where: return where(x, *in[1], *in[2]);
    case OpId::WhereScalar: return where(x, *in[1], s);
    case OpId::MaskedFill: return masked_fill(x, *in[1], s);
    case OpId::AddScalar: return add(x, s);
    case OpId::SubScalar: return sub(x, s);
    case OpId::RSubScalar: return sub(s, x);
    case OpId::MulScalar: return mul(x, s);
    case OpId::DivScalar: return div(x, s);
    case OpId::RDivScalar: return div(s, x);
    case OpId::EqScalar: return eq(x, s);
    case OpId::NeScalar: return ne(x, s);
    case OpId::LtScalar: return lt(x, s);
    case OpId::LeScalar: return le(x, s);
    case OpId::GtScalar: return gt(x, s);
    case OpId::GeScalar: return ge(x, s);
    case OpId::Pow: return pow(x, s);
    case OpId::Neg: return neg(x);
    case OpId::Abs: return abs(x);
    case OpId::Exp: return exp(x);
    case OpId::Log: return log(x);
    case OpId::Sqrt: return sqrt(x);
    case OpId::Rsqrt: return rsqrt(x);
    case OpId::Tanh: return tanh(x);
    case OpId::Sigmoid: return sigmoid(x);
    case OpId::Erf: return erf(x);
    case OpId::Silu: return silu(x);
    case OpId::Relu: return relu(x);
    case OpId::Gelu: return gelu(x, static_cast<GeluApprox>(extra));
    case OpId::GeluBackward: return gelu_backward(x, *in[1], static_cast<GeluApprox>(extra));
    default: break;
  }
  DT_THROW("internal error: op ", static_cast<int>(op), " is not pointwise");
}

// Schema args of the scalar forms: the scalar's kind first; gelu: the approximation.
bool has_scalar(OpId op) {
  switch (op) {
    case OpId::WhereScalar: case OpId::MaskedFill: case OpId::AddScalar: case OpId::SubScalar:
    case OpId::RSubScalar: case OpId::MulScalar: case OpId::DivScalar: case OpId::RDivScalar:
    case OpId::EqScalar: case OpId::NeScalar: case OpId::LtScalar: case OpId::LeScalar:
    case OpId::GtScalar: case OpId::GeScalar: case OpId::Pow: return true;
    default: return false;
  }
}

// Shape: the inputs broadcast; dtype: whatever the plain op gives on 0-d
// tensors of the inputs' dtypes (so promotion rules live in one place).
TensorMeta pointwise_meta(const OpSchema& s) {
  Shape shape = s.input(0).shape();
  for (int i = 1; i < s.num_inputs; ++i) shape = broadcast_shapes(shape, s.input(i).shape());
  Tensor tiny[kMaxInputs];
  const Tensor* ptrs[kMaxInputs];
  for (int i = 0; i < s.num_inputs; ++i) {
    tiny[i] = Tensor::zeros({}, s.input(i).dtype());
    ptrs[i] = &tiny[i];
  }
  const Scalar scalar = has_scalar(s.op) ? representative(s.args[0]) : Scalar(0);
  const int64_t extra = s.op == OpId::Gelu || s.op == OpId::GeluBackward ? s.args[0] : 0;
  const DType dtype = apply(s.op, ptrs, scalar, extra).dtype();
  return {shape, contiguous_strides(shape), dtype};
}

// The placement an input of shape `in` takes when the output is S(d).
Placement input_for_shard(const Shape& in, const Shape& out, int64_t d) {
  const int64_t k = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size()));
  if (k < 0 || (in[k] == 1 && out[d] != 1)) return Replicate();
  return Shard(k);
}

}  // namespace

void dispatch::pointwise_shard_strategies(const OpSchema& s, const TensorMeta& out,
                                          std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d) {
    DimStrategy st;
    for (int i = 0; i < s.num_inputs; ++i)
      st.in[i] = input_for_shard(s.input(i).shape(), out.shape, d);
    st.out = Shard(d);
    c.push_back(st);
  }
}

namespace {

void pointwise_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const int n = s.num_inputs;
  pointwise_shard_strategies(s, out, c);
  const Placement r = Replicate();
  const Placement sum = Partial(ReduceOp::Sum), avg = Partial(ReduceOp::Avg);
  const Placement max = Partial(ReduceOp::Max), min = Partial(ReduceOp::Min);
  auto both = [&](Placement a, Placement b, Placement o) { c.push_back({{a, b}, o}); };
  auto one = [&](Placement a, Placement o) { c.push_back({{a}, o}); };
  switch (s.op) {
    case OpId::Add:
    case OpId::Sub:
      for (Placement p : {sum, avg}) both(p, p, p);
      for (Placement p : {avg, max, min}) both(p, r, p);
      if (s.op == OpId::Add) {
        for (Placement p : {avg, max, min}) both(r, p, p);
      } else {
        both(r, avg, avg), both(r, max, min), both(r, min, max);
      }
      break;
    case OpId::Mul:
      for (Placement p : {sum, avg}) both(p, r, p), both(r, p, p);
      break;
    case OpId::GeluBackward:  // linear in the gradient
    case OpId::Div:
      for (Placement p : {sum, avg}) both(p, r, p);
      break;
    case OpId::Maximum:  // max distributes over min: max(b, min_r a_r) = min_r max(b, a_r)
      both(max, max, max), both(max, r, max), both(r, max, max);
      both(min, r, min), both(r, min, min);
      break;
    case OpId::Minimum:
      both(min, min, min), both(min, r, min), both(r, min, min);
      both(max, r, max), both(r, max, max);
      break;
    case OpId::Where:
      for (Placement p : {sum, avg, max, min}) c.push_back({{r, p, p}, p});
      break;
    case OpId::WhereScalar:  // the scalar is the same on every rank: its avg, max, min
      for (Placement p : {avg, max, min}) c.push_back({{r, p}, p});
      break;
    case OpId::MaskedFill:
      for (Placement p : {avg, max, min}) both(p, r, p);
      break;
    case OpId::MulScalar:
    case OpId::DivScalar:
      for (Placement p : {sum, avg}) one(p, p);
      break;
    case OpId::Neg:
      for (Placement p : {sum, avg}) one(p, p);
      one(max, min), one(min, max);
      break;
    case OpId::AddScalar:
    case OpId::SubScalar:
      one(avg, avg), one(max, max), one(min, min);
      break;
    case OpId::Relu:
    case OpId::Exp:
    case OpId::Tanh:
    case OpId::Sigmoid:
    case OpId::Erf:
      one(max, max), one(min, min);
      break;
    case OpId::RSubScalar:
      one(avg, avg), one(max, min), one(min, max);
      break;
    default: break;
  }
  DimStrategy all_r;
  for (int i = 0; i < n; ++i) all_r.in[i] = r;
  all_r.out = r;
  c.push_back(all_r);
}

// Rules differ only in the name their errors carry.
#define DTENSOR_POINTWISE_RULE(var, name) \
  constexpr OpRule var{name, pointwise_meta, pointwise_strategies, nullptr, true}
DTENSOR_POINTWISE_RULE(kAdd, "add");
DTENSOR_POINTWISE_RULE(kSub, "sub");
DTENSOR_POINTWISE_RULE(kMul, "mul");
DTENSOR_POINTWISE_RULE(kDiv, "div");
DTENSOR_POINTWISE_RULE(kMaximum, "maximum");
DTENSOR_POINTWISE_RULE(kMinimum, "minimum");
DTENSOR_POINTWISE_RULE(kEq, "eq");
DTENSOR_POINTWISE_RULE(kNe, "ne");
DTENSOR_POINTWISE_RULE(kLt, "lt");
DTENSOR_POINTWISE_RULE(kLe, "le");
DTENSOR_POINTWISE_RULE(kGt, "gt");
DTENSOR_POINTWISE_RULE(kGe, "ge");
DTENSOR_POINTWISE_RULE(kWhere, "where");
DTENSOR_POINTWISE_RULE(kMaskedFill, "masked_fill");
DTENSOR_POINTWISE_RULE(kPow, "pow");
DTENSOR_POINTWISE_RULE(kNeg, "neg");
DTENSOR_POINTWISE_RULE(kAbs, "abs");
DTENSOR_POINTWISE_RULE(kExp, "exp");
DTENSOR_POINTWISE_RULE(kLog, "log");
DTENSOR_POINTWISE_RULE(kSqrt, "sqrt");
DTENSOR_POINTWISE_RULE(kRsqrt, "rsqrt");
DTENSOR_POINTWISE_RULE(kTanh, "tanh");
DTENSOR_POINTWISE_RULE(kSigmoid, "sigmoid");
DTENSOR_POINTWISE_RULE(kErf, "erf");
DTENSOR_POINTWISE_RULE(kRelu, "relu");
DTENSOR_POINTWISE_RULE(kGelu, "gelu");
DTENSOR_POINTWISE_RULE(kSilu, "silu");
DTENSOR_POINTWISE_RULE(kGeluBackward, "gelu_backward");
#undef DTENSOR_POINTWISE_RULE

// ---- backward ----------------------------------------------------------------------
// PyTorch's formulas (derivatives.yaml), written with DTensor ops so that
// the gradients' layouts propagate like any forward op's. Each op saves
// only what its formula reads; a saved output is detached by the engine.
// Gradients of broadcast inputs are summed back to their shapes (sum_to).
// Comparisons give bool and record nothing.

using autograd::Context;
using autograd::Grads;
using autograd::sum_to;

// The gradient of maximum (or minimum) for one input: all of g where that
// input wins, none where it loses, half of it at a tie (PyTorch's rule,
// so that maximum(x, x) passes g through once).
DTensor max_min_grad(const DTensor& g, const DTensor& tie, const DTensor& loses) {
  return where(tie, mul(g, 0.5), masked_fill(g, loses, 0));
}

void record_binary(OpId id, const char* name, DTensor& out, const DTensor& a, const DTensor& b) {
  const Shape sa = a.shape(), sb = b.shape();
  switch (id) {
    case OpId::Add:
    case OpId::Sub:
      autograd::record(out, name, {&a, &b}, {}, [id, sa, sb](const Context& c) {
        Grads g(2);
        if (c.needs(0)) g[0] = sum_to(c.grad, sa);
        if (c.needs(1)) g[1] = sum_to(id == OpId::Sub ? neg(c.grad) : c.grad, sb);
        return g;
      });
      return;
    case OpId::Mul:
      autograd::record(out, name, {&a, &b}, {a, b}, [sa, sb](const Context& c) {
        Grads g(2);
        if (c.needs(0)) g[0] = sum_to(mul(c.grad, c.saved(1)), sa);
        if (c.needs(1)) g[1] = sum_to(mul(c.grad, c.saved(0)), sb);
        return g;
      });
      return;
    case OpId::Div:
      // d(a/b)/db = -a/b^2, as -(a/b)/b like PyTorch (b*b could overflow).
      autograd::record(out, name, {&a, &b}, {a, b}, [sa, sb](const Context& c) {
        Grads g(2);
        const DTensor& x = c.saved(0);
        const DTensor& y = c.saved(1);
        if (c.needs(0)) g[0] = sum_to(div(c.grad, y), sa);
        if (c.needs(1)) g[1] = sum_to(mul(neg(c.grad), div(div(x, y), y)), sb);
        return g;
      });
      return;
    case OpId::Maximum:
    case OpId::Minimum:
      autograd::record(out, name, {&a, &b}, {a, b}, [id, sa, sb](const Context& c) {
        Grads g(2);
        const DTensor& x = c.saved(0);
        const DTensor& y = c.saved(1);
        const DTensor tie = eq(x, y);
        const bool max = id == OpId::Maximum;
        if (c.needs(0)) g[0] = sum_to(max_min_grad(c.grad, tie, max ? lt(x, y) : gt(x, y)), sa);
        if (c.needs(1)) g[1] = sum_to(max_min_grad(c.grad, tie, max ? gt(x, y) : lt(x, y)), sb);
        return g;
      });
      return;
    default: return;
  }
}

void record_scalar(OpId id, const char* name, DTensor& out, const DTensor& x, Scalar s) {
  // The formulas use the scalar's value as a double (as PyTorch's do); the
  // gradient is floating, so its dtype does not depend on the scalar's kind.
  const double v = s.to_double();
  switch (id) {
    case OpId::AddScalar:
    case OpId::SubScalar:
      autograd::record(out, name, {&x}, {}, [](const Context& c) { return Grads{c.grad}; });
      return;
    case OpId::RSubScalar:
      autograd::record(out, name, {&x}, {}, [](const Context& c) { return Grads{neg(c.grad)}; });
      return;
    case OpId::MulScalar:
      autograd::record(out, name, {&x}, {},
                       [v](const Context& c) { return Grads{mul(c.grad, v)}; });
      return;
    case OpId::DivScalar:
      autograd::record(out, name, {&x}, {},
                       [v](const Context& c) { return Grads{div(c.grad, v)}; });
      return;
    case OpId::RDivScalar:
      // d(v/x)/dx = -v/x^2.
      autograd::record(out, name, {&x}, {x}, [v](const Context& c) {
        return Grads{mul(c.grad, div(div(-v, c.saved(0)), c.saved(0)))};
      });
      return;
    case OpId::Pow:
      // PyTorch: zero for the exponent 0 (even where x is inf or NaN), else
      // v * x^(v-1), which is inf at x = 0 for 0 < v < 1 and 1 for v = 1.
      if (v == 0) {
        autograd::record(out, name, {&x}, {},
                         [](const Context& c) { return Grads{zeros_like(c.grad)}; });
        return;
      }
      autograd::record(out, name, {&x}, {x}, [v](const Context& c) {
        return Grads{mul(c.grad, mul(pow(c.saved(0), v - 1), v))};
      });
      return;
    default: return;
  }
}

void record_unary(OpId id, const char* name, DTensor& out, const DTensor& x, int64_t extra) {
  // Ops whose derivative is a function of the output save the output.
  auto of_input = [&](Grads (*f)(const Context&)) { autograd::record(out, name, {&x}, {x}, f); };
  auto of_output = [&](Grads (*f)(const Context&)) {
    autograd::record(out, name, {&x}, {out}, f);
  };
  switch (id) {
    case OpId::Neg:
      autograd::record(out, name, {&x}, {}, [](const Context& c) { return Grads{neg(c.grad)}; });
      return;
    case OpId::Abs:
      // g * sign(x); sign(0) = 0 as in PyTorch.
      return of_input([](const Context& c) {
        const DTensor& v = c.saved(0);
        return Grads{where(lt(v, 0), neg(c.grad), masked_fill(c.grad, eq(v, 0), 0))};
      });
    case OpId::Exp:
      return of_output([](const Context& c) { return Grads{mul(c.grad, c.saved(0))}; });
    case OpId::Log:
      return of_input([](const Context& c) { return Grads{div(c.grad, c.saved(0))}; });
    case OpId::Sqrt:
      return of_output([](const Context& c) { return Grads{div(c.grad, mul(c.saved(0), 2))}; });
    case OpId::Rsqrt:
      // d(x^-1/2)/dx = -1/2 x^-3/2 = -1/2 y^3.
      return of_output([](const Context& c) {
        return Grads{mul(mul(c.grad, pow(c.saved(0), 3)), -0.5)};
      });
    case OpId::Tanh:
      return of_output([](const Context& c) {
        const DTensor& y = c.saved(0);
        return Grads{mul(c.grad, sub(1, mul(y, y)))};
      });
    case OpId::Sigmoid:
      return of_output([](const Context& c) {
        const DTensor& y = c.saved(0);
        return Grads{mul(mul(c.grad, sub(1, y)), y)};
      });
    case OpId::Relu:
      // PyTorch's threshold_backward on the output: zero where y <= 0, so
      // relu'(0) = 0.
      return of_output([](const Context& c) {
        return Grads{masked_fill(c.grad, le(c.saved(0), 0), 0)};
      });
    case OpId::Erf:
      return of_input([](const Context& c) {
        const double k = 1.12837916709551257390;  // 2 / sqrt(pi)
        const DTensor& v = c.saved(0);
        return Grads{mul(c.grad, mul(exp(neg(mul(v, v))), k))};
      });
    case OpId::Silu:
      // PyTorch's silu_backward: g * s * (1 + x (1 - s)), s = sigmoid(x).
      return of_input([](const Context& c) {
        const DTensor& v = c.saved(0);
        const DTensor s = sigmoid(v);
        return Grads{mul(c.grad, mul(s, add(mul(v, sub(1, s)), 1)))};
      });
    case OpId::Gelu: {
      const auto approximate = static_cast<GeluApprox>(extra);
      autograd::record(out, name, {&x}, {x}, [approximate](const Context& c) {
        return Grads{gelu_backward(c.grad, c.saved(0), approximate)};
      });
      return;
    }
    default: return;
  }
}

DTensor binary(OpId id, const OpRule& rule, const DTensor& a, const DTensor& b) {
  const OpSchema schema(id, {&a.spec(), &b.spec()});
  const BinaryKernel kernel = binary_kernel(id);
  DTensor out = run_binary(schema, rule, a, b, [kernel](int, const Tensor& x, const Tensor& y) {
    return kernel(x, y);
  });
  if (autograd::recording({&a, &b})) record_binary(id, rule.name, out, a, b);
  return out;
}

DTensor with_scalar(OpId id, const OpRule& rule, const DTensor& a, Scalar b) {
  const OpSchema schema(id, {&a.spec()}, {scalar_kind(b)});
  DTensor out = run_unary(schema, rule, a, [id, b](int, const Tensor& x) {
    const Tensor* in[] = {&x};
    return apply(id, in, b, 0);
  });
  if (autograd::recording({&a})) record_scalar(id, rule.name, out, a, b);
  return out;
}

DTensor unary(OpId id, const OpRule& rule, const DTensor& a, int64_t extra = 0) {
  OpSchema schema(id, {&a.spec()});
  if (id == OpId::Gelu) schema.push_arg(extra);
  DTensor out = run_unary(schema, rule, a, [id, extra](int, const Tensor& x) {
    const Tensor* in[] = {&x};
    return apply(id, in, Scalar(0), extra);
  });
  if (autograd::recording({&a})) record_unary(id, rule.name, out, a, extra);
  return out;
}

}  // namespace

const OpRule& dispatch::pointwise_rule() { return kAdd; }

namespace {
constinit thread_local bool implicit_replication_on = false;
}

ImplicitReplication::ImplicitReplication() : previous_(implicit_replication_on) {
  implicit_replication_on = true;
}
ImplicitReplication::~ImplicitReplication() { implicit_replication_on = previous_; }
bool implicit_replication_enabled() { return implicit_replication_on; }

// A one-element plain Tensor next to a DTensor is a replicated value, and
// so is any plain Tensor inside implicit_replication (the caller vouches
// that every rank holds the same); otherwise it is an error: PyTorch would
// not know how it is laid out.
DTensor dispatch::replicated(const char* op, const Tensor& t, const DTensor& like) {
  DT_CHECK(t.defined(), op, ": the plain Tensor operand is undefined");
  DT_CHECK(t.numel() == 1 || implicit_replication_on, op, ": cannot mix a DTensor (placements ",
           to_string(like.placements()), " on ", like.mesh(), ") with a plain Tensor of shape ",
           t.shape(), "; distribute it first (distribute_tensor), pass a scalar or one-element ",
           "tensor, or open an implicit_replication scope if every rank holds this same tensor");
  return distribute_tensor(t, like.mesh(),
                           Placements(static_cast<size_t>(like.mesh().ndim()), Replicate()));
}

DTensor add(const DTensor& a, const DTensor& b) { return binary(OpId::Add, kAdd, a, b); }
DTensor sub(const DTensor& a, const DTensor& b) { return binary(OpId::Sub, kSub, a, b); }
DTensor mul(const DTensor& a, const DTensor& b) { return binary(OpId::Mul, kMul, a, b); }
DTensor div(const DTensor& a, const DTensor& b) { return binary(OpId::Div, kDiv, a, b); }
DTensor maximum(const DTensor& a, const DTensor& b) {
  return binary(OpId::Maximum, kMaximum, a, b);
}
DTensor minimum(const DTensor& a, const DTensor& b) {
  return binary(OpId::Minimum, kMinimum, a, b);
}

DTensor add(const DTensor& a, Scalar b) { return with_scalar(OpId::AddScalar, kAdd, a, b); }
DTensor sub(const DTensor& a, Scalar b) { return with_scalar(OpId::SubScalar, kSub, a, b); }
DTensor sub(Scalar a, const DTensor& b) { return with_scalar(OpId::RSubScalar, kSub, b, a); }
DTensor mul(const DTensor& a, Scalar b) { return with_scalar(OpId::MulScalar, kMul, a, b); }
DTensor div(const DTensor& a, Scalar b) { return with_scalar(OpId::DivScalar, kDiv, a, b); }
DTensor div(Scalar a, const DTensor& b) { return with_scalar(OpId::RDivScalar, kDiv, b, a); }

DTensor add(const DTensor& a, const Tensor& b) { return add(a, replicated("add", b, a)); }
DTensor sub(const DTensor& a, const Tensor& b) { return sub(a, replicated("sub", b, a)); }
DTensor mul(const DTensor& a, const Tensor& b) { return mul(a, replicated("mul", b, a)); }
DTensor div(const DTensor& a, const Tensor& b) { return div(a, replicated("div", b, a)); }
DTensor add(const Tensor& a, const DTensor& b) { return add(replicated("add", a, b), b); }
DTensor sub(const Tensor& a, const DTensor& b) { return sub(replicated("sub", a, b), b); }
DTensor mul(const Tensor& a, const DTensor& b) { return mul(replicated("mul", a, b), b); }
DTensor div(const Tensor& a, const DTensor& b) { return div(replicated("div", a, b), b); }

DTensor operator+(const DTensor& a, const DTensor& b) { return add(a, b); }
DTensor operator-(const DTensor& a, const DTensor& b) { return sub(a, b); }
DTensor operator*(const DTensor& a, const DTensor& b) { return mul(a, b); }
DTensor operator/(const DTensor& a, const DTensor& b) { return div(a, b); }
DTensor operator+(const DTensor& a, Scalar b) { return add(a, b); }
DTensor operator-(const DTensor& a, Scalar b) { return sub(a, b); }
DTensor operator*(const DTensor& a, Scalar b) { return mul(a, b); }
DTensor operator/(const DTensor& a, Scalar b) { return div(a, b); }
DTensor operator+(Scalar a, const DTensor& b) { return add(b, a); }
DTensor operator-(Scalar a, const DTensor& b) { return sub(a, b); }
DTensor operator*(Scalar a, const DTensor& b) { return mul(b, a); }
DTensor operator/(Scalar a, const DTensor& b) { return div(a, b); }
DTensor operator+(const DTensor& a, const Tensor& b) { return add(a, b); }
DTensor operator-(const DTensor& a, const Tensor& b) { return sub(a, b); }
DTensor operator*(const DTensor& a, const Tensor& b) { return mul(a, b); }
DTensor operator/(const DTensor& a, const Tensor& b) { return div(a, b); }
DTensor operator+(const Tensor& a, const DTensor& b) { return add(a, b); }
DTensor operator-(const Tensor& a, const DTensor& b) { return sub(a, b); }
DTensor operator*(const Tensor& a, const DTensor& b) { return mul(a, b); }
DTensor operator/(const Tensor& a, const DTensor& b) { return div(a, b); }
DTensor operator-(const DTensor& x) { return neg(x); }

DTensor neg(const DTensor& x) { return unary(OpId::Neg, kNeg, x); }
DTensor abs(const DTensor& x) { return unary(OpId::Abs, kAbs, x); }
DTensor exp(const DTensor& x) { return unary(OpId::Exp, kExp, x); }
DTensor log(const DTensor& x) { return unary(OpId::Log, kLog, x); }
DTensor sqrt(const DTensor& x) { return unary(OpId::Sqrt, kSqrt, x); }
DTensor rsqrt(const DTensor& x) { return unary(OpId::Rsqrt, kRsqrt, x); }
DTensor tanh(const DTensor& x) { return unary(OpId::Tanh, kTanh, x); }
DTensor sigmoid(const DTensor& x) { return unary(OpId::Sigmoid, kSigmoid, x); }
DTensor erf(const DTensor& x) { return unary(OpId::Erf, kErf, x); }
DTensor relu(const DTensor& x) { return unary(OpId::Relu, kRelu, x); }
DTensor silu(const DTensor& x) { return unary(OpId::Silu, kSilu, x); }
DTensor gelu(const DTensor& x, GeluApprox approximate) {
  return unary(OpId::Gelu, kGelu, x, static_cast<int64_t>(approximate));
}
DTensor pow(const DTensor& x, Scalar exponent) {
  return with_scalar(OpId::Pow, kPow, x, exponent);
}

// One fused pass instead of the nine ops of its formula: in bfloat16 each
// of those rounded its result and the next widened it again, and the
// backward of a GPT's MLP spent more time there than in its matrix
// products' conversions (docs/PERFORMANCE.md).
DTensor gelu_backward(const DTensor& grad, const DTensor& x, GeluApprox approximate) {
  DT_CHECK(!autograd::recording({&grad, &x}),
           "gelu_backward: it has no gradient of its own (dtensor computes no higher-order "
           "gradients); call it on tensors that do not require grad, or under NoGradGuard");
  const OpSchema schema(OpId::GeluBackward, {&grad.spec(), &x.spec()},
                        {static_cast<int64_t>(approximate)});
  return run_binary(schema, kGeluBackward, grad, x,
                    [approximate](int, const Tensor& g, const Tensor& v) {
                      return gelu_backward(g, v, approximate);
                    });
}

DTensor eq(const DTensor& a, const DTensor& b) { return binary(OpId::Eq, kEq, a, b); }
DTensor ne(const DTensor& a, const DTensor& b) { return binary(OpId::Ne, kNe, a, b); }
DTensor lt(const DTensor& a, const DTensor& b) { return binary(OpId::Lt, kLt, a, b); }
DTensor le(const DTensor& a, const DTensor& b) { return binary(OpId::Le, kLe, a, b); }
DTensor gt(const DTensor& a, const DTensor& b) { return binary(OpId::Gt, kGt, a, b); }
DTensor ge(const DTensor& a, const DTensor& b) { return binary(OpId::Ge, kGe, a, b); }
DTensor eq(const DTensor& a, Scalar b) { return with_scalar(OpId::EqScalar, kEq, a, b); }
DTensor ne(const DTensor& a, Scalar b) { return with_scalar(OpId::NeScalar, kNe, a, b); }
DTensor lt(const DTensor& a, Scalar b) { return with_scalar(OpId::LtScalar, kLt, a, b); }
DTensor le(const DTensor& a, Scalar b) { return with_scalar(OpId::LeScalar, kLe, a, b); }
DTensor gt(const DTensor& a, Scalar b) { return with_scalar(OpId::GtScalar, kGt, a, b); }
DTensor ge(const DTensor& a, Scalar b) { return with_scalar(OpId::GeScalar, kGe, a, b); }

DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b) {
  const OpSchema schema(OpId::Where, {&cond.spec(), &a.spec(), &b.spec()});
  const DTensor* inputs[] = {&cond, &a, &b};
  DTensor out = run(schema, kWhere, inputs, [](int, const Tensor* const* in, const OutputSharding&) {
    return apply(OpId::Where, in, Scalar(0), 0);
  });
  // cond is bool: it never wants a gradient.
  if (autograd::recording({&a, &b}))
    autograd::record(out, "where", {&cond, &a, &b}, {cond},
                     [sa = a.shape(), sb = b.shape()](const Context& c) {
                       Grads g(3);
                       if (c.needs(1)) g[1] = sum_to(where(c.saved(0), c.grad, 0), sa);
                       if (c.needs(2)) g[2] = sum_to(masked_fill(c.grad, c.saved(0), 0), sb);
                       return g;
                     });
  return out;
}

DTensor where(const DTensor& cond, const DTensor& a, Scalar b) {
  const OpSchema schema(OpId::WhereScalar, {&cond.spec(), &a.spec()}, {scalar_kind(b)});
  DTensor out = run_binary(schema, kWhere, cond, a, [b](int, const Tensor& c, const Tensor& x) {
    const Tensor* in[] = {&c, &x};
    return apply(OpId::WhereScalar, in, b, 0);
  });
  if (autograd::recording({&a}))
    autograd::record(out, "where", {&cond, &a}, {cond}, [sa = a.shape()](const Context& c) {
      Grads g(2);
      if (c.needs(1)) g[1] = sum_to(where(c.saved(0), c.grad, 0), sa);
      return g;
    });
  return out;
}

DTensor masked_fill(const DTensor& x, const DTensor& mask, Scalar value) {
  const OpSchema schema(OpId::MaskedFill, {&x.spec(), &mask.spec()}, {scalar_kind(value)});
  DTensor out =
      run_binary(schema, kMaskedFill, x, mask, [value](int, const Tensor& t, const Tensor& m) {
        const Tensor* in[] = {&t, &m};
        return apply(OpId::MaskedFill, in, value, 0);
      });
  // The filled positions do not depend on x: zero gradient there.
  if (autograd::recording({&x}))
    autograd::record(out, "masked_fill", {&x, &mask}, {mask}, [sx = x.shape()](const Context& c) {
      Grads g(2);
      if (c.needs(0)) g[0] = sum_to(masked_fill(c.grad, c.saved(0), 0), sx);
      return g;
    });
  return out;
}

}  // namespace dtensor
