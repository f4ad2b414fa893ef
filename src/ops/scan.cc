// Scans, sorting and logical reductions on DTensors: cumsum, sort, topk,
// logsumexp, all, any.
//
// Every op here works along one dim (or reduces some): the other dims stay
// sharded (renumbered after the reduced dims are dropped), and what happens
// to the op's own dim and to Partial inputs is what differs:
//  - cumsum: the scanned dim is gathered (each output needs every earlier
//    element). It is linear, so Partial(sum) passes (the running sums of
//    the pieces add up to the running sum of their sum, integers wrapping
//    alike), and Partial(avg) for floating inputs. bool is not linear under
//    its sum (logical or), and an int64 avg would not divide: both reduce.
//  - sort, topk: the sorted dim is gathered and Partials are reduced first
//    (the sort of a sum, or even of a max, is not made of the pieces'
//    sorts). The indices come from one op; the values are then picked
//    from the same shards by a gather along the dim, so the input is moved
//    once for both outputs.
//  - logsumexp: a sharded reduced dim is gathered (a Partial(sum) of local
//    exp-sums would need the global max first: a new placement); Partials
//    reduce first.
//  - all, any: a sharded reduced dim gives Partial(min) / Partial(max) on
//    the bool output, the local all / any: an empty shard holds true / false,
//    the identities. Partial inputs reduce first (all(a + b) is not a
//    function of all(a) and all(b)).
//
// Autograd (PyTorch's formulas): cumsum's gradient is the reverse
// cumulative sum of the output's (an op of its own here, the same rule);
// sort's and topk's values take theirs from the gather, whose backward adds
// the gradient into zeros at the indices (a scatter op of its own, linear,
// so Partial(sum|avg) gradients pass); logsumexp's is grad * exp(x - out).
// Indices and bool outputs have none.
#include <algorithm>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/reduce_schema.h"
#include "tensor/scan.h"
#include "ops/dims.h"

namespace dtensor {

using namespace dispatch;

namespace {


// Dims other than `dim` stay sharded; the rest is the caller's.
void other_dims_sharded(int64_t ndim, int64_t dim, int num_inputs, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < ndim; ++d) {
    if (d == dim) continue;
    DimStrategy st{{}, Shard(d)};
    for (int i = 0; i < num_inputs; ++i) st.in[i] = Shard(d);
    c.push_back(st);
  }
}

// ---- cumsum (and its reverse, the gradient) ---------------------------------------
// args: dim.

TensorMeta cumsum_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  wrap_dim(s.args[0], std::max<int64_t>(x.ndim(), 1), "cumsum");
  const DType dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  return {x.shape(), contiguous_strides(x.shape()), dtype};
}

void cumsum_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  other_dims_sharded(x.ndim(), s.args[0], 1, c);
  if (x.dtype() != DType::Bool) c.push_back({{Partial(ReduceOp::Sum)}, Partial(ReduceOp::Sum)});
  if (is_floating(x.dtype())) c.push_back({{Partial(ReduceOp::Avg)}, Partial(ReduceOp::Avg)});
  c.push_back({{kR}, kR});
}

constexpr OpRule kCumsum{"cumsum", cumsum_meta, cumsum_strategies};
constexpr OpRule kReverseCumsum{"cumsum", cumsum_meta, cumsum_strategies};

DTensor reverse_cumsum(const DTensor& x, int64_t dim);

DTensor scan(const DTensor& x, int64_t dim, bool reverse) {
  const int64_t d = wrap_dim_if_valid(dim, x.dim());
  const OpSchema schema(reverse ? OpId::CumsumReverse : OpId::Cumsum, {&x.spec()}, {d});
  DTensor out = run_unary(schema, reverse ? kReverseCumsum : kCumsum, x, [&](int, const Tensor& t) {
    return reverse ? detail::reverse_cumsum(t, d) : cumsum(t, d);
  });
  // The two are each other's adjoint.
  if (autograd::recording({&x}))
    autograd::record(out, "cumsum", {&x}, {}, [d, reverse](const autograd::Context& c) {
      return autograd::Grads{reverse ? cumsum(c.grad, d) : reverse_cumsum(c.grad, d)};
    });
  return out;
}

DTensor reverse_cumsum(const DTensor& x, int64_t dim) { return scan(x, dim, true); }

// ---- reductions: logsumexp, all, any ----------------------------------------------
// args: keepdim, then the reduced dims as given (none = all).

bool logical_keepdim(const OpSchema& s) { return reduce_keepdim(s); }
DimVector logical_dims(const OpSchema& s) { return reduce_dims(s, 1); }

Tensor plain_reduce(OpId op, const Tensor& x, const DimVector& dims, bool keepdim) {
  if (op == OpId::Logsumexp) return logsumexp(x, dims, keepdim);
  return op == OpId::All ? all(x, dims, keepdim) : any(x, dims, keepdim);
}

// The plain op validates on a probe of at most one element per dim; the
// shape follows from the dims.
TensorMeta logical_reduce_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  Shape probe;
  for (int64_t n : x.shape()) probe.push_back(std::min<int64_t>(n, 1));
  const DType dtype =
      plain_reduce(s.op, Tensor::zeros(probe, x.dtype()), logical_dims(s), logical_keepdim(s)).dtype();
  const Shape out = reduced_shape(s, 1);
  return {out, contiguous_strides(out), dtype};
}

void logical_reduce_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  kept_dims_stay_sharded(s, 1, c, [&](int64_t d) {
    if (s.op == OpId::All) c.push_back({{Shard(d)}, Partial(ReduceOp::Min)});
    if (s.op == OpId::Any) c.push_back({{Shard(d)}, Partial(ReduceOp::Max)});
  });
  c.push_back({{kR}, kR});
}

constexpr OpRule kLogsumexp{"logsumexp", logical_reduce_meta, logical_reduce_strategies};
constexpr OpRule kAll{"all", logical_reduce_meta, logical_reduce_strategies};
constexpr OpRule kAny{"any", logical_reduce_meta, logical_reduce_strategies};

// The local op on every shard is right for every candidate: a gathered dim
// is whole, and a sharded one gives the Partial's piece.
DTensor logical_reduce(OpId op, const OpRule& rule, const DTensor& x, const DimVector& dims,
               bool keepdim) {
  OpSchema schema(op, {&x.spec()}, {keepdim ? 1 : 0});
  for (int64_t d : dims) schema.push_arg(d);
  return run_unary(schema, rule, x,
                   [&](int, const Tensor& t) { return plain_reduce(op, t, dims, keepdim); });
}

// ---- sort / topk indices ------------------------------------------------------------
// args: dim, then sort: descending; topk: k, largest. (stable and sorted
// do not change the result: see tensor.h.)

TensorMeta sort_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  Shape out = x.shape();
  if (s.op == OpId::SortIndices) {
    wrap_dim(s.args[0], std::max<int64_t>(x.ndim(), 1), "sort");
  } else {
    const int64_t d = wrap_dim(s.args[0], std::max<int64_t>(x.ndim(), 1), "topk");
    const int64_t n = x.ndim() == 0 ? 1 : x.shape()[d];
    const int64_t lo = x.ndim() == 0 ? 1 : 0;  // as the plain op
    DT_CHECK(s.args[1] >= lo && s.args[1] <= n, "topk: k = ", s.args[1],
             " is out of range for dim ", d, " of size ", n, " (input shape ", x.shape(),
             "; expected ", lo, " <= k <= ", n, ")");
    if (x.ndim() > 0) out[d] = s.args[1];
  }
  return {out, contiguous_strides(out), DType::Int64};
}

void sort_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  other_dims_sharded(s.input(0).ndim(), s.args[0], 1, c);
  c.push_back({{kR}, kR});
}

constexpr OpRule kSortIndices{"sort", sort_meta, sort_strategies};
constexpr OpRule kTopkIndices{"topk", sort_meta, sort_strategies};

// ---- gather / scatter along a dim (values of sort and topk, and their gradient) -------
// args: dim (valid: the callers pass the sort's). take: inputs x, index;
// scatter: inputs src, index, args dim and the size of dim in the output.

TensorMeta take_meta(const OpSchema& s) {
  const Shape& index = s.input(1).shape();
  return {index, contiguous_strides(index), s.input(0).dtype()};
}

// Picking commutes with every elementwise reduction, so a Partial x
// against a replicated index stays Partial of its kind.
void take_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  other_dims_sharded(s.input(0).ndim(), s.args[0], 2, c);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    c.push_back({{Partial(op), kR}, Partial(op)});
  c.push_back({{kR, kR}, kR});
}

TensorMeta scatter_add_meta(const OpSchema& s) {
  Shape out = s.input(1).shape();
  if (!out.empty()) out[s.args[0]] = s.args[1];
  return {out, contiguous_strides(out), s.input(0).dtype()};
}

// Adding into zeros is linear: Partial(sum|avg) sources stay Partial (a
// max would not: repeated indices add before the max).
void scatter_add_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  other_dims_sharded(s.input(0).ndim(), s.args[0], 2, c);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) c.push_back({{Partial(op), kR}, Partial(op)});
  c.push_back({{kR, kR}, kR});
}

constexpr OpRule kTake{"take_along_dim", take_meta, take_strategies};
constexpr OpRule kScatterAdd{"scatter_add", scatter_add_meta, scatter_add_strategies};

DTensor scatter_add_along_dim(const DTensor& src, const DTensor& index, int64_t dim,
                              int64_t size) {
  const OpSchema schema(OpId::ScatterAlongDim, {&src.spec(), &index.spec()}, {dim, size});
  return run_binary(schema, kScatterAdd, src, index, [&](int rank, const Tensor& g, const Tensor& i) {
    Shape shape = g.shape();
    if (!shape.empty()) shape[dim] = size;
    return detail::scatter_add_along_dim(g, i, dim, shape);
  });
}

DTensor take_along_dim(const DTensor& x, const DTensor& index, int64_t dim) {
  const OpSchema schema(OpId::TakeAlongDim, {&x.spec(), &index.spec()}, {dim});
  DTensor out = run_binary(schema, kTake, x, index, [&](int, const Tensor& t, const Tensor& i) {
    return detail::take_along_dim(t, i, dim);
  });
  if (autograd::recording({&x}))
    autograd::record(out, "take_along_dim", {&x}, {index},
                     [dim, size = x.dim() == 0 ? 1 : x.shape()[dim]](const autograd::Context& c) {
                       return autograd::Grads{scatter_add_along_dim(c.grad, c.saved(0), dim, size)};
                     });
  return out;
}

// Moves x once to the layout the indices op needs (the sorted dim whole,
// no Partial), computes the indices there, and picks the values from the
// same shards: no second move. The move is x.redistribute, so the values'
// gradient flows back through it to x's own layout.
template <class F>
ValuesIndices<DTensor> sorted_selection(const DTensor& x, const OpSchema& schema,
                                        const OpRule& rule, int64_t dim, F&& indices_of) {
  const std::shared_ptr<const OutputSharding> s = propagate(schema, rule);
  const DTensor moved = prepare_input(x, *s, 0);
  OpSchema here = schema;
  here.set_input(0, &moved.spec());
  DTensor indices = run_unary(here, rule, moved, [&](int, const Tensor& t) { return indices_of(t); });
  DTensor values = take_along_dim(moved, indices, dim);
  return {std::move(values), std::move(indices)};
}

}  // namespace

DTensor cumsum(const DTensor& x, int64_t dim) { return scan(x, dim, false); }

ValuesIndices<DTensor> sort(const DTensor& x, int64_t dim, bool descending, bool stable) {
  const int64_t d = wrap_dim_if_valid(dim, x.dim());
  const OpSchema schema(OpId::SortIndices, {&x.spec()}, {d, descending ? 1 : 0});
  return sorted_selection(x, schema, kSortIndices, d, [&](const Tensor& t) {
    return sort(t, d, descending, stable).indices;
  });
}

ValuesIndices<DTensor> topk(const DTensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  const int64_t d = wrap_dim_if_valid(dim, x.dim());
  const OpSchema schema(OpId::TopkIndices, {&x.spec()}, {d, k, largest ? 1 : 0});
  return sorted_selection(x, schema, kTopkIndices, d, [&](const Tensor& t) {
    return topk(t, k, d, largest, sorted).indices;
  });
}

DTensor logsumexp(const DTensor& x, const DimVector& dims, bool keepdim) {
  DTensor out = logical_reduce(OpId::Logsumexp, kLogsumexp, x, dims, keepdim);
  if (autograd::recording({&x}))
    autograd::record(out, "logsumexp", {&x}, {x, out}, [dims, keepdim](const autograd::Context& c) {
      const DTensor& in = c.saved(0);
      const DTensor g = autograd::expand_reduced(c.grad, in.shape(), dims, keepdim);
      const DTensor o = autograd::expand_reduced(c.saved(1), in.shape(), dims, keepdim);
      return autograd::Grads{mul(g, exp(sub(in, o)))};
    });
  return out;
}

DTensor all(const DTensor& x, const DimVector& dims, bool keepdim) {
  return logical_reduce(OpId::All, kAll, x, dims, keepdim);
}

DTensor any(const DTensor& x, const DimVector& dims, bool keepdim) {
  return logical_reduce(OpId::Any, kAny, x, dims, keepdim);
}

}  // namespace dtensor
