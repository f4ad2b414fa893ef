// gather, scatter, scatter_add, index_add and index_put on DTensors (and
// index_get, the read x[indices] that index_put's gradient uses).
//
// Sharded dims: an op that reads or writes along `dim` by index is local on
// every other dim d as long as all the tensors it pairs up element by
// element hold the same range of d. That is so when they are sharded alike
// on d and have the same size there (then their chunks line up); index_put
// pairs x's unindexed dims with values' matching dims (or broadcasts a
// replicated values over them).
//
// Partial inputs: the ops only copy or add elements at positions the index
// (replicated, the same on every rank) names, so they commute with a
// reduction over the ranks whenever the reduction commutes with what they
// do to each element: copying commutes with every reduction (gather,
// scatter, index_put), adding commutes with sum and avg only (scatter_add,
// index_add, accumulating index_put), and x and the written values must
// then be Partial of the same kind. Writing a scalar keeps
// Partial(avg|max|min) but not sum (each piece would hold the value).
// Adding a replicated amount to every piece commutes with max and min
// (max_r(a_r + c) = max_r(a_r) + c), so scatter_add, index_add and
// accumulating index_put keep Partial(max|min) x against replicated
// src/values. And an add split over the ranks is a Partial(sum): a
// Partial(sum) x with index and src sharded alike along `dim` (each rank
// adds its own part of src) stays Partial(sum).
//
// Backward (PyTorch's formulas): gather -> scatter_add into zeros;
// scatter_add -> grad and gather(grad); scatter -> grad with the written
// positions zeroed and gather(grad); index_add -> grad and
// index_select(grad) * alpha; index_put -> grad (zeroed at the indices
// unless accumulating) and grad[indices] summed to values' shape.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "tensor/indexing.h"

namespace dtensor {

using namespace dispatch;

namespace {

constexpr ReduceOp kLinearOps[] = {ReduceOp::Sum, ReduceOp::Avg};

TensorMeta meta_of_shape(const Shape& shape, DType dtype) {
  return {shape, contiguous_strides(shape), dtype};
}

// ---- gather ---------------------------------------------------------------------------
// Inputs (x, index); args (dim as given).
TensorMeta gather_meta(const OpSchema& s) {
  const DTensorSpec &x = s.input(0), &index = s.input(1);
  detail::check_gather_args("gather", x.shape(), s.args[0], index.shape(), index.dtype());
  return meta_of_shape(index.shape(), x.dtype());
}

void gather_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec &x = s.input(0), &index = s.input(1);
  const Placement r = Replicate();
  if (x.ndim() == 0) return c.push_back({{r, r}, r});
  const int64_t dim = wrap_dim(s.args[0], x.ndim(), "gather");
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != dim && x.shape()[d] == index.shape()[d]) c.push_back({{Shard(d), Shard(d)}, Shard(d)});
  // The index's values are global positions in a whole (replicated) dim.
  c.push_back({{r, Shard(dim)}, Shard(dim)});
  // x sharded on the gathered dim, the index whole: each rank picks the
  // positions it holds and leaves zeros elsewhere, a Partial(sum) with no
  // collective (PyTorch's MaskPartial, as a row-sharded embedding).
  c.push_back({{Shard(dim), r}, Partial()});
  for (ReduceOp op : kAllOps) c.push_back({{Partial(op), r}, Partial(op)});
  c.push_back({{r, r}, r});
}

constexpr OpRule kGather{"gather", gather_meta, gather_strategies};

// The gather of a rank holding positions [first, first + n) of dim d (of
// `size` in all): an index held elsewhere gives 0. Indices are checked
// against the whole dim, so the error is the plain op's.
Tensor masked_gather(const Tensor& x, int64_t d, const Tensor& index, int64_t first, int64_t size) {
  std::vector<int64_t> idx = index.contiguous().to_vector<int64_t>();
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  std::vector<bool> others(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t v = idx[k];
    DT_CHECK(v >= 0 && v < size, "gather: index ", v, " is out of range for dim ", d,
             " of size ", size, " (expected 0 <= index < size)");
    others[k] = v < first || v >= first + n;
    idx[k] = others[k] ? 0 : v - first;
  }
  if (n == 0) return Tensor::zeros(index.shape(), x.dtype());
  const Tensor out = gather(x, d, Tensor::from_vector(idx, index.shape()));
  // A fill, not a product: the stand-in position 0 may hold inf or NaN.
  return masked_fill(out, Tensor::from_vector(others, index.shape()), false);
}

// ---- scatter, scatter of a value, scatter_add ----------------------------------------
// Inputs (x, index[, src]); args (dim as given).
TensorMeta scatter_meta(const OpSchema& s) {
  const char* op = s.op == OpId::ScatterAdd ? "scatter_add" : "scatter";
  const DTensorSpec &x = s.input(0), &index = s.input(1);
  detail::check_gather_args(op, x.shape(), s.args[0], index.shape(), index.dtype());
  if (s.num_inputs == 3)
    detail::check_scatter_src(op, x.dtype(), index.shape(), s.input(2).shape(), s.input(2).dtype());
  return meta_of_shape(x.shape(), x.dtype());
}

void scatter_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec &x = s.input(0), &index = s.input(1);
  const bool with_src = s.num_inputs == 3;
  const Placement r = Replicate();
  auto each = [&](Placement xp, Placement ip, Placement sp, Placement out) {
    DimStrategy st;
    st.in[0] = xp, st.in[1] = ip;
    if (with_src) st.in[2] = sp;
    st.out = out;
    c.push_back(st);
  };
  if (x.ndim() > 0) {
    const int64_t dim = wrap_dim(s.args[0], x.ndim(), "scatter");
    for (int64_t d = 0; d < x.ndim(); ++d) {
      const bool lined_up = x.shape()[d] == index.shape()[d] &&
                            (!with_src || s.input(2).shape()[d] == index.shape()[d]);
      if (d != dim && lined_up) each(Shard(d), Shard(d), Shard(d), Shard(d));
    }
  }
  for (ReduceOp op : kAllOps) {
    const bool linear = op == ReduceOp::Sum || op == ReduceOp::Avg;
    if (s.op == OpId::ScatterAdd && !linear) {
      each(Partial(op), r, r, Partial(op));
      continue;
    }
    if (s.op == OpId::ScatterValue && op == ReduceOp::Sum) continue;
    each(Partial(op), r, Partial(op), Partial(op));
  }
  if (s.op == OpId::ScatterAdd && x.ndim() > 0) {
    const int64_t dim = wrap_dim(s.args[0], x.ndim(), "scatter_add");
    if (index.shape()[dim] == s.input(2).shape()[dim])
      each(Partial(ReduceOp::Sum), Shard(dim), Shard(dim), Partial(ReduceOp::Sum));
  }
  each(r, r, r, r);
}

constexpr OpRule kScatter{"scatter", scatter_meta, scatter_strategies};
constexpr OpRule kScatterValue{"scatter", scatter_meta, scatter_strategies};
constexpr OpRule kScatterAdd{"scatter_add", scatter_meta, scatter_strategies};

// ---- index_add --------------------------------------------------------------------------
// Inputs (x, index, source); args (dim as given, alpha's Scalar kind).
Scalar probe_scalar(int64_t kind) {
  switch (static_cast<Scalar::Kind>(kind)) {
    case Scalar::Kind::Bool: return Scalar(true);
    case Scalar::Kind::Int: return Scalar(1);
    case Scalar::Kind::Float: break;
  }
  return Scalar(1.0);
}

TensorMeta index_add_meta(const OpSchema& s) {
  const DTensorSpec &x = s.input(0), &index = s.input(1), &source = s.input(2);
  detail::check_index_add_args(x.shape(), x.dtype(), s.args[0], index.shape(), index.dtype(),
                               source.shape(), source.dtype(), probe_scalar(s.args[1]));
  return meta_of_shape(x.shape(), x.dtype());
}

void index_add_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const Placement r = Replicate();
  // source agrees with x on every dim but `dim` (checked by the meta).
  if (x.ndim() > 0) {
    const int64_t dim = wrap_dim(s.args[0], x.ndim(), "index_add");
    for (int64_t d = 0; d < x.ndim(); ++d)
      if (d != dim) c.push_back({{Shard(d), r, Shard(d)}, Shard(d)});
  }
  for (ReduceOp op : kLinearOps) c.push_back({{Partial(op), r, Partial(op)}, Partial(op)});
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) c.push_back({{Partial(op), r, r}, Partial(op)});
  if (x.ndim() > 0 && s.input(1).ndim() == 1) {
    const int64_t dim = wrap_dim(s.args[0], x.ndim(), "index_add");
    const Placement sum = Partial(ReduceOp::Sum);
    c.push_back({{sum, Shard(0), Shard(dim)}, sum});
  }
  c.push_back({{r, r, r}, r});
}

constexpr OpRule kIndexAdd{"index_add", index_add_meta, index_add_strategies};

// ---- index_put and index_get ------------------------------------------------------------
// index_put: inputs (x, values, the defined index tensors in order); args
// (accumulate, number of index entries, bit mask of the defined ones).
// index_get: inputs (x, the defined index tensors); args (number, mask).
struct IndexArgs {
  int first_index;  // the schema input of the first index tensor
  int64_t entries;
  int64_t mask;
};

IndexArgs index_args(const OpSchema& s) {
  if (s.op == OpId::IndexPut) return {2, s.args[1], s.args[2]};
  return {1, s.args[0], s.args[1]};
}

detail::AdvancedIndex plan_of(const OpSchema& s, const char* op) {
  const IndexArgs a = index_args(s);
  std::vector<std::optional<Shape>> shapes;
  int next = a.first_index;
  for (int64_t k = 0; k < a.entries; ++k) {
    if (((a.mask >> k) & 1) == 0) {
      shapes.emplace_back();
      continue;
    }
    const DTensorSpec& index = s.input(next++);
    DT_CHECK(index.dtype() == DType::Int64, op, ": DTensor index tensors must be int64, got ",
             index.dtype(), " for index ", k,
             " (a bool mask's shape depends on its data: index with a plain Tensor)");
    shapes.push_back(index.shape());
  }
  return detail::advanced_index(s.input(0).shape(), shapes, op);
}

TensorMeta index_put_meta(const OpSchema& s) {
  const DTensorSpec &x = s.input(0), &values = s.input(1);
  const detail::AdvancedIndex plan = plan_of(s, "index_put");
  detail::check_index_put_values(x.dtype(), plan, values.shape(), values.dtype());
  return meta_of_shape(x.shape(), x.dtype());
}

void index_put_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec &x = s.input(0), &values = s.input(1);
  const detail::AdvancedIndex plan = plan_of(s, "index_put");
  const Placement r = Replicate();
  auto each = [&](Placement xp, Placement vp, Placement out) {
    DimStrategy st;
    st.in[0] = xp, st.in[1] = vp;
    for (int i = 2; i < s.num_inputs; ++i) st.in[i] = r;
    st.out = out;
    c.push_back(st);
  };
  const int64_t lead = static_cast<int64_t>(plan.result.size()) - values.ndim();
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (plan.result_dim[d] < 0) continue;
    // values' dim matching x's dim d (right-aligned against x[indices]).
    const int64_t vd = plan.result_dim[d] - lead;
    if (vd >= 0 && values.shape()[vd] == x.shape()[d]) each(Shard(d), Shard(vd), Shard(d));
    else if (vd < 0 || values.shape()[vd] == 1) each(Shard(d), r, Shard(d));
  }
  const bool accumulate = s.args[0] != 0;
  for (ReduceOp op : kAllOps) {
    if (!accumulate || op == ReduceOp::Sum || op == ReduceOp::Avg)
      each(Partial(op), Partial(op), Partial(op));
    else
      each(Partial(op), r, Partial(op));
  }
  each(r, r, r);
}

TensorMeta index_get_meta(const OpSchema& s) {
  return meta_of_shape(plan_of(s, "index").result, s.input(0).dtype());
}

void index_get_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const detail::AdvancedIndex plan = plan_of(s, "index");
  const Placement r = Replicate();
  auto each = [&](Placement xp, Placement out) {
    DimStrategy st;
    st.in[0] = xp;
    for (int i = 1; i < s.num_inputs; ++i) st.in[i] = r;
    st.out = out;
    c.push_back(st);
  };
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (plan.result_dim[d] >= 0) each(Shard(d), Shard(plan.result_dim[d]));
  for (ReduceOp op : kAllOps) each(Partial(op), Partial(op));
  each(r, r);
}

constexpr OpRule kIndexPut{"index_put", index_put_meta, index_put_strategies};
constexpr OpRule kIndexGet{"index", index_get_meta, index_get_strategies};

// The schema's share of an index list: the defined tensors (appended to
// `inputs`) and the (entries, mask) arguments.
std::pair<int64_t, int64_t> push_indices(const std::vector<std::optional<DTensor>>& indices,
                                         OpSchema& schema, const DTensor** inputs) {
  DT_CHECK(indices.size() <= static_cast<size_t>(kMaxDims), "index_put: too many indices: ",
           indices.size(), " (at most ", kMaxDims, ")");
  int64_t mask = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (!indices[k]) continue;
    DT_CHECK(schema.num_inputs < kMaxInputs, "index_put: at most ", kMaxInputs - 2,
             " index tensors are supported on DTensors, got more");
    mask |= int64_t{1} << k;
    inputs[schema.num_inputs] = &*indices[k];
    schema.push_input(&indices[k]->spec());
  }
  return {static_cast<int64_t>(indices.size()), mask};
}

// The local index list of one rank: the shards of the defined tensors.
std::vector<std::optional<Tensor>> local_indices(int64_t entries, int64_t mask,
                                                 const Tensor* const* t, int first) {
  std::vector<std::optional<Tensor>> out;
  for (int64_t k = 0; k < entries; ++k)
    out.push_back(((mask >> k) & 1) != 0 ? std::optional<Tensor>(*t[first++]) : std::nullopt);
  return out;
}

DTensor index_get(const DTensor& x, const std::vector<std::optional<DTensor>>& indices) {
  OpSchema schema(OpId::IndexGet, {&x.spec()});
  const DTensor* inputs[kMaxInputs] = {&x};
  const auto [entries, mask] = push_indices(indices, schema, inputs);
  schema.push_arg(entries);
  schema.push_arg(mask);
  return run(schema, kIndexGet, inputs, [&](int, const Tensor* const* t, const OutputSharding&) {
    return detail::index_get(*t[0], local_indices(entries, mask, t, 1));
  });
}

// ---- backward helpers -------------------------------------------------------------------
// Zeros of x's shape, laid out like x (Partial as Replicate).
DTensor zeros_like_layout(const DTensor& x, DType dtype) {
  Placements pl = x.placements();
  for (Placement& p : pl)
    if (p.is_partial()) p = Replicate();
  return zeros(x.shape(), x.mesh(), pl, dtype);
}

// g (of index's shape) placed at the start of a zero tensor of `shape`
// (src may be bigger than index on any dim: only index's part was used).
DTensor pad_to(DTensor g, const Shape& shape) {
  Shape at = g.shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (at[d] == shape[d]) continue;
    const int64_t n = at[d];
    at[d] = shape[d];
    g = slice_backward(g, at, static_cast<int64_t>(d), 0, n);
  }
  return g;
}

}  // namespace

DTensor gather(const DTensor& x, int64_t dim, const DTensor& index) {
  const OpSchema schema(OpId::Gather, {&x.spec(), &index.spec()}, {dim});
  const DTensor* inputs[2] = {&x, &index};
  DTensor out = run(schema, kGather, inputs,
                    [dim](int rank, const Tensor* const* t, const OutputSharding& s) {
                      const DTensorSpec& xs = *s.input_targets[0];
                      if (xs.ndim() == 0) return gather(*t[0], dim, *t[1]);
                      const int64_t d = wrap_dim(dim, xs.ndim(), "gather");
                      for (const Placement& p : xs.placements())
                        if (p.is_shard(d))
                          return masked_gather(*t[0], d, *t[1],
                                               xs.extent_of_rank(rank)->global_offset[d],
                                               xs.shape()[d]);
                      return gather(*t[0], dim, *t[1]);
                    });
  if (autograd::recording({&x}))
    autograd::record(out, "gather", {&x}, {x, index}, [dim](const autograd::Context& c) {
      const DTensor& in = c.saved(0);
      return autograd::Grads{
          scatter_add(zeros_like_layout(in, c.grad.dtype()), dim, c.saved(1), c.grad)};
    });
  return out;
}

DTensor scatter(const DTensor& x, int64_t dim, const DTensor& index, const DTensor& src) {
  const OpSchema schema(OpId::Scatter, {&x.spec(), &index.spec(), &src.spec()}, {dim});
  const DTensor* inputs[] = {&x, &index, &src};
  DTensor out = run(schema, kScatter, inputs, [dim](int, const Tensor* const* t, const OutputSharding&) {
    return scatter(*t[0], dim, *t[1], *t[2]);
  });
  if (autograd::recording({&x, &src}))
    autograd::record(out, "scatter", {&x, &index, &src}, {index},
                     [dim, src_shape = src.shape()](const autograd::Context& c) {
                       autograd::Grads g(3);
                       if (c.needs(0)) g[0] = scatter(c.grad, dim, c.saved(0), 0);
                       if (c.needs(2)) g[2] = pad_to(gather(c.grad, dim, c.saved(0)), src_shape);
                       return g;
                     });
  return out;
}

DTensor scatter(const DTensor& x, int64_t dim, const DTensor& index, Scalar value) {
  const OpSchema schema(OpId::ScatterValue, {&x.spec(), &index.spec()}, {dim});
  DTensor out = run_binary(schema, kScatterValue, x, index,
                           [dim, value](int, const Tensor& t, const Tensor& i) {
                             return scatter(t, dim, i, value);
                           });
  if (autograd::recording({&x}))
    autograd::record(out, "scatter", {&x}, {index}, [dim](const autograd::Context& c) {
      return autograd::Grads{scatter(c.grad, dim, c.saved(0), 0)};
    });
  return out;
}

DTensor scatter_add(const DTensor& x, int64_t dim, const DTensor& index, const DTensor& src) {
  const OpSchema schema(OpId::ScatterAdd, {&x.spec(), &index.spec(), &src.spec()}, {dim});
  const DTensor* inputs[] = {&x, &index, &src};
  DTensor out = run(schema, kScatterAdd, inputs, [dim](int, const Tensor* const* t, const OutputSharding&) {
    return scatter_add(*t[0], dim, *t[1], *t[2]);
  });
  if (autograd::recording({&x, &src}))
    autograd::record(out, "scatter_add", {&x, &index, &src}, {index},
                     [dim, src_shape = src.shape()](const autograd::Context& c) {
                       autograd::Grads g(3);
                       if (c.needs(0)) g[0] = c.grad;
                       if (c.needs(2)) g[2] = pad_to(gather(c.grad, dim, c.saved(0)), src_shape);
                       return g;
                     });
  return out;
}

DTensor index_add(const DTensor& x, int64_t dim, const DTensor& index, const DTensor& source,
                  Scalar alpha) {
  const OpSchema schema(OpId::IndexAdd, {&x.spec(), &index.spec(), &source.spec()},
                        {dim, static_cast<int64_t>(alpha.kind())});
  const DTensor* inputs[] = {&x, &index, &source};
  DTensor out = run(schema, kIndexAdd, inputs,
                    [dim, alpha](int, const Tensor* const* t, const OutputSharding&) {
                      return index_add(*t[0], dim, *t[1], *t[2], alpha);
                    });
  if (autograd::recording({&x, &source}))
    autograd::record(out, "index_add", {&x, &index, &source}, {index},
                     [dim, alpha, source_shape = source.shape()](const autograd::Context& c) {
                       autograd::Grads g(3);
                       if (c.needs(0)) g[0] = c.grad;
                       if (c.needs(2)) {
                         // A 0-d x acts as 1-d of size 1 (as in the plain op).
                         const bool scalar = c.grad.dim() == 0;
                         const DTensor grad = scalar ? reshape(c.grad, Shape{1}) : c.grad;
                         DTensor rows = index_select(grad, scalar ? 0 : dim, c.saved(0));
                         if (scalar) rows = reshape(rows, source_shape);
                         g[2] = mul(rows, alpha);
                       }
                       return g;
                     });
  return out;
}

DTensor index_put(const DTensor& x, const std::vector<std::optional<DTensor>>& indices,
                  const DTensor& values, bool accumulate) {
  OpSchema schema(OpId::IndexPut, {&x.spec(), &values.spec()});
  const DTensor* inputs[kMaxInputs] = {&x, &values};
  const auto [entries, mask] = push_indices(indices, schema, inputs);
  schema.push_arg(accumulate ? 1 : 0);
  schema.push_arg(entries);
  schema.push_arg(mask);
  DTensor out = run(schema, kIndexPut, inputs, [&](int, const Tensor* const* t, const OutputSharding&) {
    return index_put(*t[0], local_indices(entries, mask, t, 2), *t[1], accumulate);
  });
  if (autograd::recording({&x, &values})) {
    std::vector<DTensor> saved;
    for (const std::optional<DTensor>& i : indices)
      if (i) saved.push_back(*i);
    autograd::record(
        out, "index_put", {&x, &values}, saved,
        [entries, mask, accumulate, values_shape = values.shape()](const autograd::Context& c) {
          std::vector<std::optional<DTensor>> idx;
          size_t next = 0;
          for (int64_t k = 0; k < entries; ++k)
            idx.push_back(((mask >> k) & 1) != 0 ? std::optional<DTensor>(c.saved(next++))
                                                 : std::nullopt);
          autograd::Grads g(2);
          if (c.needs(0)) {
            const DTensor zero = zeros(Shape{}, c.grad.mesh(),
                                       Placements(static_cast<size_t>(c.grad.mesh().ndim()),
                                                  Replicate()),
                                       c.grad.dtype());
            g[0] = accumulate ? c.grad : index_put(c.grad, idx, zero, false);
          }
          if (c.needs(1)) g[1] = autograd::sum_to(index_get(c.grad, idx), values_shape);
          return g;
        });
  }
  return out;
}

}  // namespace dtensor
