// Structural ops on DTensors: flip, roll, cumprod, diagonal (each an op with
// its own rule), nonzero (data-dependent: computed replicated), and argsort,
// outer, dot, std, max / min composed of other ops.
//
// The rules:
//  - flip, roll: the dims they move along are gathered (shard r of the
//    result holds elements of other ranks' shards), other dims stay
//    sharded. Every Partial passes: they permute elements, and a
//    permutation commutes with any elementwise reduction.
//  - cumprod: `dim` is gathered, other dims stay sharded; Partials reduce
//    first (the running product of a sum is not the sum of running
//    products). Its gradient is linear in the output's gradient, so a
//    Partial(sum|avg) gradient against a replicated input stays Partial.
//  - diagonal: dim1 and dim2 are gathered (a diagonal element's row and
//    column are on different ranks), the other dims stay sharded
//    (renumbered); every Partial passes (it picks elements). Its gradient
//    places the gradient on zeros: the same layouts in reverse.
//  - nonzero: its output's length depends on the values, which no rule can
//    know before the kernel runs: x is made Replicate (Partials reduced)
//    and every rank computes the same replicated result (as PyTorch's
//    DTensor, which has no sharding strategy for it either).
//
// Autograd (PyTorch's formulas): flip's gradient is the flip of the
// gradient, roll's the roll back; cumprod's is exact with zeros (see
// tensor/structural.h); diagonal's puts the gradient back on the diagonal.
#include "tensor/structural.h"

#include <algorithm>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/dims.h"

namespace dtensor {

using namespace dispatch;

namespace {

// A probe of x's dims with at most one element each: the plain op
// validates its arguments on it without touching x's size.
Tensor probe_of(const DTensorSpec& x) {
  Shape probe;
  for (int64_t n : x.shape()) probe.push_back(std::min<int64_t>(n, 1));
  return Tensor::zeros(probe, x.dtype());
}

bool listed(const OpSchema& s, int64_t d) {
  for (int i = 0; i < s.num_args; ++i)
    if (s.args[i] == d) return true;
  return false;
}

// ---- flip / roll -----------------------------------------------------------------------
// args: the dims they move along (wrapped when valid).

TensorMeta moving_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  DimVector dims;
  for (int i = 0; i < s.num_args; ++i) dims.push_back(s.args[i]);
  if (s.op == OpId::Flip)
    flip(probe_of(x), dims);
  else
    roll(probe_of(x), DimVector(dims.size(), 0), dims);
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

void moving_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < s.input(0).ndim(); ++d)
    if (!listed(s, d)) c.push_back({{Shard(d)}, Shard(d)});
  for (ReduceOp op : kAllOps) c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{kR}, kR});
}

constexpr OpRule kFlip{"flip", moving_meta, moving_strategies};
constexpr OpRule kRoll{"roll", moving_meta, moving_strategies};

OpSchema moving_schema(OpId op, const DTensor& x, const DimVector& dims) {
  OpSchema schema(op, {&x.spec()});
  for (int64_t d : dims) schema.push_arg(wrap_dim_if_valid(d, x.dim()));
  return schema;
}

// ---- cumprod and its gradient ---------------------------------------------------------
// args: dim. The gradient: inputs grad, x.

TensorMeta cumprod_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  const DType dtype = cumprod(probe_of(x), s.args[0]).dtype();
  return {x.shape(), contiguous_strides(x.shape()), dtype};
}

void cumprod_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < s.input(0).ndim(); ++d)
    if (d != s.args[0]) c.push_back({{Shard(d), Shard(d)}, Shard(d)});
  if (s.op == OpId::CumprodBackward)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      c.push_back({{Partial(op), kR}, Partial(op)});
  c.push_back({{kR, kR}, kR});
}

TensorMeta cumprod_backward_meta(const OpSchema& s) {
  const DTensorSpec& g = s.input(0);
  const DTensorSpec& x = s.input(1);
  DT_CHECK(g.shape() == x.shape() && g.dtype() == x.dtype(), "cumprod_backward: gradient ",
           g.dtype(), " ", g.shape(), " for an input ", x.dtype(), " ", x.shape());
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

constexpr OpRule kCumprod{"cumprod", cumprod_meta, cumprod_strategies};
constexpr OpRule kCumprodBackward{"cumprod_backward", cumprod_backward_meta, cumprod_strategies};

DTensor cumprod_backward(const DTensor& grad, const DTensor& x, int64_t dim) {
  const OpSchema schema(OpId::CumprodBackward, {&grad.spec(), &x.spec()}, {dim});
  return run_binary(schema, kCumprodBackward, grad, x, [&](int, const Tensor& g, const Tensor& t) {
    return detail::cumprod_backward(g, t, dim);
  });
}

// ---- diagonal and its gradient -----------------------------------------------------------
// args: offset, dim1, dim2 (wrapped when valid); the gradient then the
// input's shape.

// Where input dim d (not dim1 or dim2) lands in the output.
int64_t kept_position(int64_t d, int64_t d1, int64_t d2) {
  return d - (d > d1 ? 1 : 0) - (d > d2 ? 1 : 0);
}

TensorMeta diagonal_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  diagonal(probe_of(x), s.args[0], s.args[1], s.args[2]);  // validates
  const int64_t offset = s.args[0], n1 = x.shape()[s.args[1]], n2 = x.shape()[s.args[2]];
  const int64_t length =
      std::max<int64_t>(offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2), 0);
  Shape out;
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != s.args[1] && d != s.args[2]) out.push_back(x.shape()[d]);
  out.push_back(length);
  return {out, contiguous_strides(out), x.dtype()};
}

void diagonal_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const int64_t d1 = s.args[1], d2 = s.args[2];
  for (int64_t d = 0; d < s.input(0).ndim(); ++d)
    if (d != d1 && d != d2) c.push_back({{Shard(d)}, Shard(kept_position(d, d1, d2))});
  for (ReduceOp op : kAllOps) c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{kR}, kR});
}

Shape input_shape_of(const OpSchema& s) {
  Shape shape;
  for (int i = 3; i < s.num_args; ++i) shape.push_back(s.args[i]);
  return shape;
}

TensorMeta diagonal_backward_meta(const OpSchema& s) {
  const Shape shape = input_shape_of(s);
  return {shape, contiguous_strides(shape), s.input(0).dtype()};
}

// Zeros are zeros in every piece, so every Partial of the gradient passes.
void diagonal_backward_strategies(const OpSchema& s, const TensorMeta& out,
                                  std::vector<DimStrategy>& c) {
  const int64_t d1 = s.args[1], d2 = s.args[2];
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    if (d != d1 && d != d2) c.push_back({{Shard(kept_position(d, d1, d2))}, Shard(d)});
  for (ReduceOp op : kAllOps) c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{kR}, kR});
}

constexpr OpRule kDiagonal{"diagonal", diagonal_meta, diagonal_strategies};
constexpr OpRule kDiagonalBackward{"diagonal_backward", diagonal_backward_meta,
                                   diagonal_backward_strategies};

DTensor diagonal_backward(const DTensor& grad, const Shape& input_shape, int64_t offset, int64_t d1,
                          int64_t d2) {
  OpSchema schema(OpId::DiagonalBackward, {&grad.spec()}, {offset, d1, d2});
  for (int64_t n : input_shape) schema.push_arg(n);
  return run_unary(schema, kDiagonalBackward, grad, [&](int, const Tensor& g) {
    // This rank's input shape: dim1 and dim2 whole, the others as g's.
    Shape local = input_shape;
    for (int64_t d = 0; d < static_cast<int64_t>(local.size()); ++d)
      if (d != d1 && d != d2) local[d] = g.shape()[kept_position(d, d1, d2)];
    return detail::diagonal_backward(g, local, offset, d1, d2);
  });
}

// ---- max / min along a dim ----------------------------------------------------------

// x moved once to a layout where `dim` is whole and nothing is Partial
// (what argmax needs); the values are then picked from the same shards.
// The move is x.redistribute, so the values' gradient flows back through
// it to x's own layout.
ValuesIndices<DTensor> extreme_along(const DTensor& x, int64_t dim, bool keepdim, bool largest) {
  const char* op = largest ? "max" : "min";
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  DT_CHECK(x.dim() == 0 || x.shape()[d] > 0, op, "(): Expected reduction dim ", d,
           " to have non-zero size (input shape ", x.shape(), ")");
  Placements whole = x.placements();
  for (Placement& p : whole)
    if (p.is_partial() || p.is_shard(d)) p = kR;
  const DTensor moved = whole == x.placements() ? x : x.redistribute(whole);
  DTensor index = largest ? argmax(moved, d, true) : argmin(moved, d, true);
  DTensor values = x.dim() == 0 ? moved : gather(moved, d, index);
  if (keepdim || x.dim() == 0) return {std::move(values), std::move(index)};
  return {squeeze(values, d), squeeze(index, d)};
}

}  // namespace

DTensor flip(const DTensor& x, const DimVector& dims) {
  DimVector wrapped;
  for (int64_t d : dims) wrapped.push_back(wrap_dim_if_valid(d, x.dim()));
  const OpSchema schema = moving_schema(OpId::Flip, x, dims);
  DTensor out = run_unary(schema, kFlip, x, [&](int, const Tensor& t) { return flip(t, wrapped); });
  if (autograd::recording({&x}))
    autograd::record(out, "flip", {&x}, {}, [wrapped](const autograd::Context& c) {
      return autograd::Grads{flip(c.grad, wrapped)};
    });
  return out;
}

DTensor roll(const DTensor& x, const DimVector& shifts, const DimVector& dims) {
  DT_CHECK(!shifts.empty(), "roll: `shifts` required");
  if (dims.empty()) {
    // PyTorch's: the flattened tensor rolled, viewed back (their layouts).
    DT_CHECK(shifts.size() == 1, "roll: shifts and dimensions must align. shifts: ", shifts.size(),
             ", dims: 0");
    return reshape(roll(flatten(x), shifts, DimVector{0}), x.shape());
  }
  DT_CHECK(shifts.size() == dims.size(),
           "roll: shifts and dimensions must align. shifts: ", shifts.size(),
           ", dims: ", dims.size());
  DimVector wrapped;
  for (int64_t d : dims) wrapped.push_back(wrap_dim_if_valid(d, x.dim()));
  const OpSchema schema = moving_schema(OpId::Roll, x, dims);
  DTensor out =
      run_unary(schema, kRoll, x, [&](int, const Tensor& t) { return roll(t, shifts, wrapped); });
  if (autograd::recording({&x}))
    autograd::record(out, "roll", {&x}, {}, [shifts, wrapped](const autograd::Context& c) {
      DimVector back;
      for (int64_t s : shifts) back.push_back(-s);
      return autograd::Grads{roll(c.grad, back, wrapped)};
    });
  return out;
}

DTensor cumprod(const DTensor& x, int64_t dim) {
  const int64_t d = wrap_dim_if_valid(dim, x.dim());
  const OpSchema schema(OpId::Cumprod, {&x.spec()}, {d});
  DTensor out = run_unary(schema, kCumprod, x, [&](int, const Tensor& t) { return cumprod(t, d); });
  if (autograd::recording({&x}))
    autograd::record(out, "cumprod", {&x}, {x}, [d](const autograd::Context& c) {
      return autograd::Grads{cumprod_backward(c.grad, c.saved(0), d)};
    });
  return out;
}

DTensor argsort(const DTensor& x, int64_t dim, bool descending, bool stable) {
  return sort(x, dim, descending, stable).indices;
}

// PyTorch's definitions; the layouts are unsqueeze's, mul's and sum's.
DTensor outer(const DTensor& a, const DTensor& b) {
  DT_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected 1-D self and vec2, got shapes ",
           a.shape(), " and ", b.shape(), " (placements ", to_string(a.placements()), " and ",
           to_string(b.placements()), ")");
  return mul(unsqueeze(a, 1), b);
}

DTensor dot(const DTensor& a, const DTensor& b) {
  DT_CHECK(a.dim() == 1 && b.dim() == 1, "dot: expected 1-D tensors, got shapes ", a.shape(),
           " and ", b.shape());
  DT_CHECK(a.dtype() == b.dtype(), "dot: expected both vectors to have same dtype, but found ",
           a.dtype(), " and ", b.dtype());
  DT_CHECK(a.dtype() != DType::Bool, "dot: not implemented for bool");
  DT_CHECK(a.shape() == b.shape(), "dot: inconsistent tensor size, expected tensors of ", a.numel(),
           " and ", b.numel(), " elements to have the same number of elements");
  return sum(mul(a, b));
}

DTensor diagonal(const DTensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  const int64_t d1 = wrap_dim_if_valid(dim1, x.dim()), d2 = wrap_dim_if_valid(dim2, x.dim());
  const OpSchema schema(OpId::Diagonal, {&x.spec()}, {offset, d1, d2});
  // A copy, not a view of the shard: the result is a DTensor of its own.
  DTensor out = run_unary(schema, kDiagonal, x, [&](int, const Tensor& t) {
    return diagonal(t, offset, d1, d2).contiguous();
  });
  if (autograd::recording({&x}))
    autograd::record(out, "diagonal", {&x}, {},
                     [shape = x.shape(), offset, d1, d2](const autograd::Context& c) {
                       return autograd::Grads{diagonal_backward(c.grad, shape, offset, d1, d2)};
                     });
  return out;
}

DTensor nonzero(const DTensor& x) {
  DT_CHECK(!x.mesh().world().is_shape_only(),
           "nonzero: the output's shape depends on the values, which a shape-only world does "
           "not have (placements ",
           to_string(x.placements()), ")");
  const DTensor whole = x.redistribute(Placements(x.placements().size(), kR));
  LocalTensor local;
  Shape shape;
  for (const auto& [rank, t] : whole.local().shards()) {
    Tensor r = nonzero(t);
    shape = r.shape();
    local.set(rank, std::move(r));
  }
  // A process holding no rank of the mesh learns no shape: 0 rows, as a
  // rank with no data would see (it holds no shard to disagree with).
  if (whole.local().shards().empty()) shape = Shape{0, x.dim()};
  return DTensor(DTensorSpec(x.mesh(), Placements(x.placements().size(), kR), shape, DType::Int64),
                 std::move(local));
}

DTensor std(const DTensor& x, const DimVector& dims, int64_t correction, bool keepdim) {
  DT_CHECK(is_floating(x.dtype()), "std: only supports floating point dtypes, got ", x.dtype(),
           " (placements ", to_string(x.placements()), ")");
  const DTensor v = var(x, dims, correction, keepdim);
  DTensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(v);
  }
  // PyTorch's std_backward: grad / (2 std), 0 where std is 0 (sqrt's
  // gradient there is inf, and inf * 0 from var's would give NaN).
  if (autograd::recording({&v}))
    autograd::record(out, "std", {&v}, {out}, [](const autograd::Context& c) {
      const DTensor& s = c.saved(0);
      return autograd::Grads{masked_fill(div(c.grad, mul(s, 2.0)), eq(s, 0.0), 0.0)};
    });
  return out;
}

DTensor max(const DTensor& x) {
  DT_CHECK(x.numel() > 0,
           "max(): Expected reduction dim to be specified for input.numel() == 0 (shape ",
           x.shape(), "). Specify the reduction dim with the 'dim' argument.");
  return amax(x);
}

DTensor min(const DTensor& x) {
  DT_CHECK(x.numel() > 0,
           "min(): Expected reduction dim to be specified for input.numel() == 0 (shape ",
           x.shape(), "). Specify the reduction dim with the 'dim' argument.");
  return amin(x);
}

ValuesIndices<DTensor> max(const DTensor& x, int64_t dim, bool keepdim) {
  return extreme_along(x, dim, keepdim, true);
}
ValuesIndices<DTensor> min(const DTensor& x, int64_t dim, bool keepdim) {
  return extreme_along(x, dim, keepdim, false);
}
DTensor max(const DTensor& a, const DTensor& b) { return maximum(a, b); }
DTensor min(const DTensor& a, const DTensor& b) { return minimum(a, b); }

}  // namespace dtensor
