// Reductions on DTensors: sum, mean, prod, amax, amin, var, argmax, argmin.
//
// A kept dim stays sharded (renumbered when earlier dims are dropped). A
// reduced dim that is sharded leaves each rank with the reduction of its
// own rows, a Partial over that mesh dim when the reduction decomposes:
//  - sum: Partial(sum). Partial(sum|avg) inputs stay partial (a sum of sums).
//  - mean: Partial(avg) of the local means when every rank holds the same
//    number of reduced elements; otherwise Partial(sum) of local sums
//    divided by the global count (uneven shards would weigh wrongly in an
//    average). In general rank r holds sum_r * K / N, where N is the global
//    count and K the product of the sizes of the Partial(avg) mesh dims.
//  - amax/amin: Partial(max/min); an empty shard holds the identity (the
//    lowest / highest value of the dtype). Partial(max/min) inputs pass.
//  - prod, var, argmax, argmin do not decompose this way: the reduced dims
//    are gathered first (argmax/argmin without a dim has no rule at all and
//    computes on Replicate).
//
// The backwards (PyTorch's formulas) are DTensor ops on the output's
// gradient with the reduced dims put back as size 1; argmax/argmin have
// none (integer output).
#include <algorithm>
#include <limits>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/reduce_schema.h"

namespace dtensor {

using namespace dispatch;

namespace {

// Schema args: keepdim, then the reduced dims as given (none = all; the
// rule's meta validates them like the plain op). argmax/argmin: keepdim,
// then the dim when one is given.
bool keepdim_of(const OpSchema& s) { return reduce_keepdim(s); }
bool reduced(const OpSchema& s, int64_t d) { return reduces_dim(s, 1, d); }
DimVector dims_of(const OpSchema& s) { return reduce_dims(s, 1); }

// The plain reduction (var with its default correction; only the shape and
// dtype of the result matter where this is called with a probe).
Tensor plain(OpId op, const Tensor& x, const DimVector& dims, bool keepdim) {
  switch (op) {
    case OpId::Sum: return sum(x, dims, keepdim);
    case OpId::Mean: return mean(x, dims, keepdim);
    case OpId::Prod: return prod(x, dims, keepdim);
    case OpId::Amax: return amax(x, dims, keepdim);
    case OpId::Amin: return amin(x, dims, keepdim);
    case OpId::Var: return var(x, dims, 1, keepdim);
    case OpId::Argmax:
      return argmax(x, dims.empty() ? std::nullopt : std::optional<int64_t>(dims[0]), keepdim);
    case OpId::Argmin:
      return argmin(x, dims.empty() ? std::nullopt : std::optional<int64_t>(dims[0]), keepdim);
    default: break;
  }
  DT_THROW("internal error: op ", static_cast<int>(op), " is not a reduction");
}

// The plain op validates (dims, dtype, empty reductions) on a probe of at
// most one element with the input's zero-size dims; the shape follows.
TensorMeta reduce_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  Shape probe_shape;
  for (int64_t n : x.shape()) probe_shape.push_back(std::min<int64_t>(n, 1));
  const DType dtype =
      plain(s.op, Tensor::zeros(probe_shape, x.dtype()), dims_of(s), keepdim_of(s)).dtype();
  const Shape out = reduced_shape(s, 1);
  return {out, contiguous_strides(out), dtype};
}

void reduce_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const Placement sum = Partial(ReduceOp::Sum), avg = Partial(ReduceOp::Avg);
  const Placement max = Partial(ReduceOp::Max), min = Partial(ReduceOp::Min);
  kept_dims_stay_sharded(s, 1, c, [&](int64_t d) {
    switch (s.op) {
      case OpId::Sum: c.push_back({{Shard(d)}, sum}); break;
      case OpId::Mean: c.push_back({{Shard(d)}, avg}), c.push_back({{Shard(d)}, sum}); break;
      case OpId::Amax: c.push_back({{Shard(d)}, max}); break;
      case OpId::Amin: c.push_back({{Shard(d)}, min}); break;
      default: break;
    }
  });
  switch (s.op) {
    case OpId::Sum:
    case OpId::Mean: c.push_back({{sum}, sum}), c.push_back({{avg}, avg}); break;
    case OpId::Amax: c.push_back({{max}, max}); break;
    case OpId::Amin: c.push_back({{min}, min}); break;
    default: break;
  }
  c.push_back({{Replicate()}, Replicate()});
}

// Whether mesh dim m shards a reduced dim in `in`.
bool shards_reduced(const OpSchema& s, const Placements& in, size_t m) {
  return in[m].is_shard() && reduced(s, in[m].dim());
}

// The K of the file comment: product of the sizes of the mesh dims that
// shard a reduced dim and give Partial(avg).
int64_t avg_ways(const OpSchema& s, const Placements& in, const Placements& out,
                 const DeviceMesh& mesh) {
  int64_t k = 1;
  for (size_t m = 0; m < in.size(); ++m)
    if (shards_reduced(s, in, m) && out[m] == Partial(ReduceOp::Avg))
      k *= mesh.size(static_cast<int>(m));
  return k;
}

// mean: Partial(avg) from sharding only when every rank holds N / K reduced elements.
bool mean_accepts(const OpSchema& s, const TensorMeta&, const Placements* in,
                  const Placements& out) {
  const DTensorSpec& x = s.input(0);
  const int64_t k = avg_ways(s, in[0], out, x.mesh());
  if (k == 1) return true;
  int64_t n = 1;
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (reduced(s, d)) n *= x.shape()[d];
  const DTensorSpec spec = x.with_placements(in[0]);
  for (int rank : x.mesh().ranks()) {
    const Shape local = spec.extent_of_rank(rank)->local_shape;
    int64_t count = 1;
    for (int64_t d = 0; d < x.ndim(); ++d)
      if (reduced(s, d)) count *= local[d];
    if (count * k != n) return false;
  }
  return true;
}

constexpr OpRule kSum{"sum", reduce_meta, reduce_strategies};
constexpr OpRule kMean{"mean", reduce_meta, reduce_strategies, mean_accepts};
constexpr OpRule kProd{"prod", reduce_meta, reduce_strategies};
constexpr OpRule kAmax{"amax", reduce_meta, reduce_strategies};
constexpr OpRule kAmin{"amin", reduce_meta, reduce_strategies};
constexpr OpRule kVar{"var", reduce_meta, reduce_strategies};
constexpr OpRule kArgmax{"argmax", reduce_meta, reduce_strategies};
constexpr OpRule kArgmin{"argmin", reduce_meta, reduce_strategies};
constexpr OpRule kArgmaxAll{"argmax", reduce_meta, nullptr};
constexpr OpRule kArgminAll{"argmin", reduce_meta, nullptr};

// The schema of a reduction over `dims` (validated by the rule's meta).
OpSchema reduce_schema(OpId op, const DTensor& x, const DimVector& dims, bool keepdim) {
  OpSchema schema(op, {&x.spec()}, {keepdim ? 1 : 0});
  for (int64_t d : dims) schema.push_arg(d);
  return schema;
}

Tensor identity(OpId op, const Shape& shape, DType dtype) {
  const bool max = op == OpId::Amax;
  switch (dtype) {
    case DType::Float32:
    case DType::Float64:
    case DType::BFloat16:
    case DType::Float16: {
      const double inf = std::numeric_limits<double>::infinity();
      return Tensor::full(shape, max ? -inf : inf, dtype);
    }
    case DType::Int64:
      return Tensor::full(shape, max ? std::numeric_limits<int64_t>::min()
                                     : std::numeric_limits<int64_t>::max(), dtype);
    case DType::Bool: break;
  }
  return Tensor::full(shape, !max, dtype);
}

DTensor reduce(OpId op, const OpRule& rule, const DTensor& x, const DimVector& dims, bool keepdim) {
  const OpSchema schema = reduce_schema(op, x, dims, keepdim);
  const DTensor* inputs[] = {&x};
  // Only mean and amax/amin shards differ from the plain op when a reduced
  // dim is sharded (the file comment): a sum's shards hold their local sums,
  // and prod, var, argmax and argmin gather the reduced dims first. The
  // others skip the per-shard look at the placements.
  if (op == OpId::Sum)  // the common one, without plain()'s switch per shard
    return run(schema, rule, inputs, [&](int, const Tensor* const* t, const OutputSharding&) {
      return sum(*t[0], dims, keepdim);
    });
  if (op != OpId::Mean && op != OpId::Amax && op != OpId::Amin)
    return run(schema, rule, inputs, [&](int, const Tensor* const* t, const OutputSharding&) {
      return plain(op, *t[0], dims, keepdim);
    });
  return run(schema, rule, inputs, [&](int rank, const Tensor* const* t, const OutputSharding& s) {
    const Tensor& local = *t[0];
    const Placements& in = s.input_targets[0]->placements();
    bool sharded = false;
    for (size_t m = 0; m < in.size(); ++m) sharded = sharded || shards_reduced(schema, in, m);
    if (!sharded) return plain(op, local, dims, keepdim);
    if (op == OpId::Mean) {
      int64_t n = 1;
      for (int64_t d = 0; d < x.dim(); ++d)
        if (reduced(schema, d)) n *= x.shape()[d];
      const int64_t k = avg_ways(schema, in, s.output.placements(), x.mesh());
      return div(sum(local, dims, keepdim), static_cast<double>(n) / static_cast<double>(k));
    }
    if (op == OpId::Amax || op == OpId::Amin) {
      for (int64_t d = 0; d < local.dim(); ++d)
        if (reduced(schema, d) && local.shape()[d] == 0)
          return identity(op, output_local_shape(s, rank), s.output.dtype());
    }
    return plain(op, local, dims, keepdim);
  });
}

// ---- backward helpers --------------------------------------------------------------

// Which of the `nd` dims a reduction over `dims` (all when empty) reduces.
std::vector<bool> reduced_mask(int64_t nd, const DimVector& dims) {
  std::vector<bool> mask(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) mask[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  return mask;
}

// The number of elements of an input of `shape` each output element reduces.
int64_t reduced_count(const Shape& shape, const DimVector& dims) {
  const std::vector<bool> mask = reduced_mask(static_cast<int64_t>(shape.size()), dims);
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (mask[d]) n *= shape[d];
  return n;
}

// A reduction's output (or its gradient) `g` with the reduced dims back as
// size 1 where broadcasting against the `nd`-d input needs them: every
// reduced dim after the first kept one (leading ones broadcast anyway).
DTensor unreduce(const DTensor& g, int64_t nd, const DimVector& dims, bool keepdim) {
  if (keepdim) return g;
  const std::vector<bool> mask = reduced_mask(nd, dims);
  DTensor out = g;
  int64_t pos = 0;
  bool kept = false;
  for (int64_t d = 0; d < nd; ++d) {
    if (!mask[static_cast<size_t>(d)]) {
      kept = true;
      ++pos;
    } else if (kept) {
      out = unsqueeze(out, pos++);
    }
  }
  return out;
}

// amax/amin's gradient (saved: the input, the output) goes to the elements
// equal to the result, split evenly among ties (PyTorch's amax/amin).
DTensor extreme_backward(const autograd::Context& c, const DimVector& dims, bool keepdim) {
  const DTensor& x = c.saved(0);
  const DTensor hit = eq(x, unreduce(c.saved(1), x.dim(), dims, keepdim));
  const DTensor g = unreduce(c.grad, x.dim(), dims, keepdim);
  return mul(div(g, sum(hit, dims, true)), hit);
}

}  // namespace

DTensor sum(const DTensor& x, const DimVector& dims, bool keepdim) {
  DTensor out = reduce(OpId::Sum, kSum, x, dims, keepdim);
  if (autograd::recording({&x}))
    autograd::record(out, "sum", {&x}, {}, [shape = x.shape(), dims, keepdim](const autograd::Context& c) {
      return autograd::Grads{autograd::expand_reduced(c.grad, shape, dims, keepdim)};
    });
  return out;
}
DTensor mean(const DTensor& x, const DimVector& dims, bool keepdim) {
  DTensor out = reduce(OpId::Mean, kMean, x, dims, keepdim);
  if (autograd::recording({&x}))
    autograd::record(out, "mean", {&x}, {},
                     [shape = x.shape(), dims, keepdim](const autograd::Context& c) {
                       const DTensor g =
                           div(c.grad, static_cast<double>(reduced_count(shape, dims)));
                       const DTensor u =
                           unreduce(g, static_cast<int64_t>(shape.size()), dims, keepdim);
                       return autograd::Grads{u.shape() == shape ? u : expand(u, shape)};
                     });
  return out;
}

// d prod / d x_i is the product of the other elements of x_i's slice: with
// no zero in the slice result / x_i; with exactly one, the product of the
// nonzero elements at the zero and 0 elsewhere; with more, 0 everywhere.
DTensor prod(const DTensor& x, const DimVector& dims, bool keepdim) {
  DTensor out = reduce(OpId::Prod, kProd, x, dims, keepdim);
  if (autograd::recording({&x}))
    autograd::record(out, "prod", {&x}, {x}, [dims, keepdim](const autograd::Context& c) {
      const DTensor& in = c.saved(0);
      const DTensor zero = eq(in, 0);
      const DTensor filled = add(in, zero);  // the zeros replaced by ones
      const DTensor zeros = sum(zero, dims, true);
      const DTensor nonzero_prod = prod(filled, dims, true);
      const DTensor if_none = where(eq(zeros, 0), nonzero_prod, 0.0);
      const DTensor if_one = where(eq(zeros, 1), nonzero_prod, 0.0);
      const DTensor g = unreduce(c.grad, in.dim(), dims, keepdim);
      return autograd::Grads{mul(g, where(zero, if_one, div(if_none, filled)))};
    });
  return out;
}

DTensor amax(const DTensor& x, const DimVector& dims, bool keepdim) {
  DTensor out = reduce(OpId::Amax, kAmax, x, dims, keepdim);
  if (autograd::recording({&x}))
    autograd::record(out, "amax", {&x}, {x, out}, [dims, keepdim](const autograd::Context& c) {
      return autograd::Grads{extreme_backward(c, dims, keepdim)};
    });
  return out;
}
DTensor amin(const DTensor& x, const DimVector& dims, bool keepdim) {
  DTensor out = reduce(OpId::Amin, kAmin, x, dims, keepdim);
  if (autograd::recording({&x}))
    autograd::record(out, "amin", {&x}, {x, out}, [dims, keepdim](const autograd::Context& c) {
      return autograd::Grads{extreme_backward(c, dims, keepdim)};
    });
  return out;
}

// d var / d x = 2 (x - mean) / (N - correction), N the reduced count
// (PyTorch's, unclamped: N <= correction gives inf/nan as there).
DTensor var(const DTensor& x, const DimVector& dims, int64_t correction, bool keepdim) {
  const OpSchema schema = reduce_schema(OpId::Var, x, dims, keepdim);
  DTensor out = run_unary(schema, kVar, x,
                          [&](int, const Tensor& t) { return var(t, dims, correction, keepdim); });
  if (autograd::recording({&x}))
    autograd::record(out, "var", {&x}, {x},
                     [dims, correction, keepdim](const autograd::Context& c) {
                       const DTensor& in = c.saved(0);
                       const double dof =
                           static_cast<double>(reduced_count(in.shape(), dims) - correction);
                       const DTensor g = unreduce(mul(c.grad, 2.0 / dof), in.dim(), dims, keepdim);
                       return autograd::Grads{mul(g, sub(in, mean(in, dims, true)))};
                     });
  return out;
}

DTensor argmax(const DTensor& x, std::optional<int64_t> dim, bool keepdim) {
  const DimVector dims = dim ? DimVector{*dim} : DimVector{};
  return reduce(OpId::Argmax, dim ? kArgmax : kArgmaxAll, x, dims, keepdim);
}
DTensor argmin(const DTensor& x, std::optional<int64_t> dim, bool keepdim) {
  const DimVector dims = dim ? DimVector{*dim} : DimVector{};
  return reduce(OpId::Argmin, dim ? kArgmin : kArgminAll, x, dims, keepdim);
}

}  // namespace dtensor
