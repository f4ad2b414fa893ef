// Pointwise ops on DTensors: the local kernels are the Tensor ops; the
// strategies say which placements pass through.
//
// Sharding: an output dim may be sharded when every input that has that dim
// (right-aligned, broadcasting) is sharded on it the same way; an input that
// broadcasts the dim (size 1) or lacks it must be replicated.
// Partial: the op must commute with the reduction. Sums are linear, so
// add/sub of two P(sum) and mul/div of a P(sum) by a replicated factor stay
// P(sum) (same for avg); adding a scalar to a partial sum is not linear (n
// pieces would each add it), nor are relu or exp.
#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {

TensorMeta binary_meta(const OpSchema& s) {
  const DTensorSpec& a = s.input(0);
  const DTensorSpec& b = s.input(1);
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  DType dtype = promote_types(a.dtype(), b.dtype());
  if (s.op == OpId::Div && !is_floating(dtype)) dtype = DType::Float32;
  return {shape, contiguous_strides(shape), dtype};
}

// The placement an input of shape `in` takes when the output is S(d).
Placement input_for_shard(const Shape& in, const Shape& out, int64_t d) {
  const int64_t k = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size()));
  if (k < 0 || (in[k] == 1 && out[d] != 1)) return Replicate();
  return Shard(k);
}

void binary_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const Shape& a = s.input(0).shape();
  const Shape& b = s.input(1).shape();
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    c.push_back({{input_for_shard(a, out.shape, d), input_for_shard(b, out.shape, d)}, Shard(d)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    const Placement p = Partial(op);
    switch (s.op) {
      case OpId::Add:
      case OpId::Sub: c.push_back({{p, p}, p}); break;
      case OpId::Mul: c.push_back({{p, Replicate()}, p}); c.push_back({{Replicate(), p}, p}); break;
      case OpId::Div: c.push_back({{p, Replicate()}, p}); break;
      default: break;
    }
  }
  c.push_back({{Replicate(), Replicate()}, Replicate()});
}

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

TensorMeta unary_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  DType dtype = x.dtype();
  switch (s.op) {
    case OpId::AddScalar:
    case OpId::SubScalar:
    case OpId::MulScalar: dtype = representative(s.args[0]).result_type(dtype); break;
    case OpId::DivScalar:
      dtype = representative(s.args[0]).result_type(dtype);
      if (!is_floating(dtype)) dtype = DType::Float32;
      break;
    case OpId::Exp:
      if (!is_floating(dtype)) dtype = DType::Float32;
      break;
    default: break;
  }
  return {x.shape(), contiguous_strides(x.shape()), dtype};
}

void unary_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    c.push_back({{Shard(d)}, Shard(d)});
  const bool linear = s.op == OpId::Neg || s.op == OpId::MulScalar || s.op == OpId::DivScalar;
  if (linear)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kAdd{"add", binary_meta, binary_strategies};
constexpr OpRule kSub{"sub", binary_meta, binary_strategies};
constexpr OpRule kMul{"mul", binary_meta, binary_strategies};
constexpr OpRule kDiv{"div", binary_meta, binary_strategies};
constexpr OpRule kAddScalar{"add", unary_meta, unary_strategies};
constexpr OpRule kSubScalar{"sub", unary_meta, unary_strategies};
constexpr OpRule kMulScalar{"mul", unary_meta, unary_strategies};
constexpr OpRule kDivScalar{"div", unary_meta, unary_strategies};
constexpr OpRule kNeg{"neg", unary_meta, unary_strategies};
constexpr OpRule kRelu{"relu", unary_meta, unary_strategies};
constexpr OpRule kExp{"exp", unary_meta, unary_strategies};

template <class F>
DTensor binary(OpId id, const OpRule& rule, const DTensor& a, const DTensor& b, F kernel) {
  const OpSchema schema(id, {&a.spec(), &b.spec()});
  return run_binary(schema, rule, a, b,
                    [&](int, const Tensor& x, const Tensor& y) { return kernel(x, y); });
}

template <class F>
DTensor with_scalar(OpId id, const OpRule& rule, const DTensor& a, Scalar b, F kernel) {
  const OpSchema schema(id, {&a.spec()}, {scalar_kind(b)});
  return run_unary(schema, rule, a, [&](int, const Tensor& x) { return kernel(x, b); });
}

template <class F>
DTensor unary(OpId id, const OpRule& rule, const DTensor& a, F kernel) {
  const OpSchema schema(id, {&a.spec()});
  return run_unary(schema, rule, a, [&](int, const Tensor& x) { return kernel(x); });
}

}  // namespace

DTensor add(const DTensor& a, const DTensor& b) {
  return binary(OpId::Add, kAdd, a, b, [](const Tensor& x, const Tensor& y) { return add(x, y); });
}
DTensor sub(const DTensor& a, const DTensor& b) {
  return binary(OpId::Sub, kSub, a, b, [](const Tensor& x, const Tensor& y) { return sub(x, y); });
}
DTensor mul(const DTensor& a, const DTensor& b) {
  return binary(OpId::Mul, kMul, a, b, [](const Tensor& x, const Tensor& y) { return mul(x, y); });
}
DTensor div(const DTensor& a, const DTensor& b) {
  return binary(OpId::Div, kDiv, a, b, [](const Tensor& x, const Tensor& y) { return div(x, y); });
}
DTensor add(const DTensor& a, Scalar b) {
  return with_scalar(OpId::AddScalar, kAddScalar, a, b,
                     [](const Tensor& x, Scalar y) { return add(x, y); });
}
DTensor sub(const DTensor& a, Scalar b) {
  return with_scalar(OpId::SubScalar, kSubScalar, a, b,
                     [](const Tensor& x, Scalar y) { return sub(x, y); });
}
DTensor mul(const DTensor& a, Scalar b) {
  return with_scalar(OpId::MulScalar, kMulScalar, a, b,
                     [](const Tensor& x, Scalar y) { return mul(x, y); });
}
DTensor div(const DTensor& a, Scalar b) {
  return with_scalar(OpId::DivScalar, kDivScalar, a, b,
                     [](const Tensor& x, Scalar y) { return div(x, y); });
}
DTensor operator+(const DTensor& a, const DTensor& b) { return add(a, b); }
DTensor operator-(const DTensor& a, const DTensor& b) { return sub(a, b); }
DTensor operator*(const DTensor& a, const DTensor& b) { return mul(a, b); }
DTensor operator/(const DTensor& a, const DTensor& b) { return div(a, b); }
DTensor operator+(const DTensor& a, Scalar b) { return add(a, b); }
DTensor operator-(const DTensor& a, Scalar b) { return sub(a, b); }
DTensor operator*(const DTensor& a, Scalar b) { return mul(a, b); }
DTensor operator/(const DTensor& a, Scalar b) { return div(a, b); }
DTensor neg(const DTensor& x) {
  return unary(OpId::Neg, kNeg, x, [](const Tensor& t) { return neg(t); });
}
DTensor relu(const DTensor& x) {
  return unary(OpId::Relu, kRelu, x, [](const Tensor& t) { return relu(t); });
}
DTensor exp(const DTensor& x) {
  return unary(OpId::Exp, kExp, x, [](const Tensor& t) { return exp(t); });
}

}  // namespace dtensor
