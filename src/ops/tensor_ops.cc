// Joining, copying, filling and indexing DTensors: cat, stack, clone,
// contiguous, zeros_like/ones_like/full_like, index_select.
//
// cat/stack: inputs sharded alike on a dim other than the joined one stay
// sharded (their shards line up: the inputs agree on every other dim);
// the joined dim is gathered. Joining commutes with every reduction taken
// elementwise, so inputs that are all Partial of one kind stay Partial.
// clone/contiguous keep every placement. *_like keep shardings; a Partial
// input gives a replicated output (every rank fills the whole value).
// index_select picks rows: a sharded non-indexed dim passes, a sharded
// index shards the result along the indexed dim, and picking commutes with
// every Partial.
//
// Autograd: cat/stack give each input its narrow/select of the gradient,
// clone/contiguous pass it through, index_select adds the gradient's rows
// into zeros at the index with index_select_backward (an op of its own,
// below); *_like outputs do not depend on values and record nothing.
#include <algorithm>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {


// Like PyTorch, cat skips 1-d empty inputs (a common "start" value).
bool skipped(const Shape& s) { return s.size() == 1 && s[0] == 0; }

// Schema args of cat/stack: the dim as given.
TensorMeta cat_meta(const OpSchema& s) {
  int ref = -1;
  DType dtype = s.input(0).dtype();
  for (int i = 0; i < s.num_inputs; ++i) {
    dtype = promote_types(dtype, s.input(i).dtype());
    if (ref < 0 && !skipped(s.input(i).shape())) ref = i;
  }
  if (ref < 0) return {Shape{0}, Shape{1}, dtype};
  const Shape& r = s.input(ref).shape();
  DT_CHECK(!r.empty(), "cat: zero-dimensional tensors cannot be concatenated");
  const int64_t dim = wrap_dim(s.args[0], static_cast<int64_t>(r.size()), "cat");
  Shape out = r;
  int64_t total = 0;
  for (int i = 0; i < s.num_inputs; ++i) {
    const Shape& t = s.input(i).shape();
    if (skipped(t)) continue;
    DT_CHECK(t.size() == r.size(), "cat: tensor ", i, " has shape ", t, ", expected ", r.size(),
             " dims like ", r);
    for (size_t d = 0; d < t.size(); ++d)
      DT_CHECK(static_cast<int64_t>(d) == dim || t[d] == r[d],
               "cat: sizes must match except in dim ", dim, ": tensor ", i, " has shape ", t,
               ", expected ", r);
    total += t[dim];
  }
  out[dim] = total;
  return {out, contiguous_strides(out), dtype};
}

void cat_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const int64_t nd = static_cast<int64_t>(out.shape.size());
  const int64_t dim = nd == 0 ? 0 : wrap_dim(s.args[0], nd, "cat");
  auto each = [&](auto placement_of, Placement o) {
    DimStrategy st;
    for (int i = 0; i < s.num_inputs; ++i)
      st.in[i] = skipped(s.input(i).shape()) ? Replicate() : placement_of();
    st.out = o;
    c.push_back(st);
  };
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) each([d] { return Shard(d); }, Shard(d));
  for (ReduceOp op : kAllOps) each([op] { return Partial(op); }, Partial(op));
  each([] { return Replicate(); }, Replicate());
}

TensorMeta stack_meta(const OpSchema& s) {
  const Shape& first = s.input(0).shape();
  const int64_t dim = wrap_dim(s.args[0], static_cast<int64_t>(first.size()) + 1, "stack");
  DType dtype = s.input(0).dtype();
  for (int i = 0; i < s.num_inputs; ++i) {
    DT_CHECK(s.input(i).shape() == first, "stack: tensor ", i, " has shape ", s.input(i).shape(),
             ", expected ", first, " like tensor 0");
    dtype = promote_types(dtype, s.input(i).dtype());
  }
  Shape out = first;
  out.insert(static_cast<size_t>(dim), s.num_inputs);
  return {out, contiguous_strides(out), dtype};
}

void stack_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const int64_t nd = static_cast<int64_t>(out.shape.size());
  const int64_t dim = wrap_dim(s.args[0], nd, "stack");
  auto each = [&](Placement in, Placement o) {
    DimStrategy st;
    for (int i = 0; i < s.num_inputs; ++i) st.in[i] = in;
    st.out = o;
    c.push_back(st);
  };
  for (int64_t d = 0; d + 1 < nd; ++d) each(Shard(d), Shard(d >= dim ? d + 1 : d));
  for (ReduceOp op : kAllOps) each(Partial(op), Partial(op));
  each(Replicate(), Replicate());
}

TensorMeta contiguous_like(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

// clone/contiguous (args empty) keep Partials; *_like (one arg) replicate them.
void copy_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    c.push_back({{Shard(d)}, Shard(d)});
  for (ReduceOp op : kAllOps)
    c.push_back({{Partial(op)}, s.op == OpId::FullLike ? Replicate() : Partial(op)});
  c.push_back({{Replicate()}, Replicate()});
}

TensorMeta index_select_meta(const OpSchema& s) {
  const DTensorSpec &x = s.input(0), &index = s.input(1);
  DT_CHECK(index.dtype() == DType::Int64, "index_select: index must be int64, got ",
           index.dtype());
  DT_CHECK(index.ndim() <= 1, "index_select: index must be 0-d or 1-d, got shape ",
           index.shape());
  DT_CHECK(x.ndim() > 0, "index_select: input must have at least 1 dim, got a 0-d tensor");
  const int64_t dim = wrap_dim(s.args[0], x.ndim(), "index_select");
  Shape out = x.shape();
  out[dim] = index.shape().product();
  return {out, contiguous_strides(out), x.dtype()};
}

void index_select_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const int64_t dim = wrap_dim(s.args[0], x.ndim(), "index_select");
  const Placement r = Replicate();
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != dim) c.push_back({{Shard(d), r}, Shard(d)});
  if (s.input(1).ndim() == 1) c.push_back({{r, Shard(0)}, Shard(dim)});
  for (ReduceOp op : kAllOps) c.push_back({{Partial(op), r}, Partial(op)});
  c.push_back({{r, r}, r});
}

// index_select_backward: inputs (grad, index), args (dim normalised, the
// input's size along dim).
TensorMeta index_select_backward_meta(const OpSchema& s) {
  const DTensorSpec &g = s.input(0), &index = s.input(1);
  DT_CHECK(index.dtype() == DType::Int64, "index_select_backward: index must be int64, got ",
           index.dtype());
  DT_CHECK(index.ndim() <= 1, "index_select_backward: index must be 0-d or 1-d, got shape ",
           index.shape());
  const int64_t dim = s.args[0];
  DT_CHECK(dim >= 0 && dim < g.ndim() && g.shape()[dim] == index.shape().product(),
           "index_select_backward: the gradient of shape ", g.shape(), " must have ",
           index.shape().product(), " rows (the index's) along dim ", dim);
  Shape out = g.shape();
  out[dim] = s.args[1];
  return {out, contiguous_strides(out), g.dtype()};
}

// Other dims keep their shards; rows sharded with their indices give each
// rank a partial sum of the rows it holds; adding rows is linear, so
// Partial(sum|avg) passes (max/min do not: repeated indices add).
void index_select_backward_strategies(const OpSchema& s, const TensorMeta&,
                                      std::vector<DimStrategy>& c) {
  const DTensorSpec& g = s.input(0);
  const int64_t dim = s.args[0];
  const Placement r = Replicate();
  for (int64_t d = 0; d < g.ndim(); ++d)
    if (d != dim) c.push_back({{Shard(d), r}, Shard(d)});
  if (s.input(1).ndim() == 1) c.push_back({{Shard(dim), Shard(0)}, Partial(ReduceOp::Sum)});
  bool seen[4] = {};
  for (const Placement& p : g.placements()) {
    if (!p.is_partial() || seen[static_cast<int>(p.reduce_op())]) continue;
    seen[static_cast<int>(p.reduce_op())] = true;
    if (p.reduce_op() == ReduceOp::Sum || p.reduce_op() == ReduceOp::Avg)
      c.push_back({{p, r}, p});
  }
  c.push_back({{r, r}, r});
}

constexpr OpRule kCat{"cat", cat_meta, cat_strategies};
constexpr OpRule kStack{"stack", stack_meta, stack_strategies};
constexpr OpRule kClone{.name = "clone", .output_meta = contiguous_like,
                        .strategies = copy_strategies, .meta_kernel = true};
constexpr OpRule kContiguous{.name = "contiguous", .output_meta = contiguous_like,
                             .strategies = copy_strategies, .meta_kernel = true};
constexpr OpRule kZerosLike{"zeros_like", contiguous_like, copy_strategies};
constexpr OpRule kOnesLike{"ones_like", contiguous_like, copy_strategies};
constexpr OpRule kFullLike{"full_like", contiguous_like, copy_strategies};
constexpr OpRule kIndexSelect{"index_select", index_select_meta, index_select_strategies};
constexpr OpRule kIndexSelectBackward{"index_select_backward", index_select_backward_meta,
                                      index_select_backward_strategies};

// Zeros of the input's shape with grad's rows along dim (normalised) added at index.
DTensor run_index_select_backward(const DTensor& grad, int64_t dim, int64_t length,
                                  const DTensor& index) {
  const OpSchema schema(OpId::IndexSelectBackward, {&grad.spec(), &index.spec()}, {dim, length});
  const DTensor* inputs[] = {&grad, &index};
  return run(schema, kIndexSelectBackward, inputs,
             [=](int rank, const Tensor* const* t, const OutputSharding& s) {
               const Tensor& g = *t[0];
               Tensor out = Tensor::zeros(output_local_shape(s, rank), g.dtype());
               const std::vector<int64_t> idx = t[1]->to_vector<int64_t>();
               for (size_t k = 0; k < idx.size(); ++k) {
                 DT_CHECK(idx[k] >= -length && idx[k] < length, "index_select_backward: index ",
                          idx[k], " out of range for dim ", dim, " of size ", length);
                 const int64_t i = idx[k] < 0 ? idx[k] + length : idx[k];
                 out.select(dim, i).add_(g.select(dim, static_cast<int64_t>(k)));
               }
               return out;
             });
}

// Records the backward of a join along `dim` (normalised): each input gets
// its piece of the gradient via piece(grad, input number, offset, size).
template <class Piece>
void record_join(DTensor& out, const char* name, const std::vector<DTensor>& tensors,
                 Piece piece) {
  std::vector<const DTensor*> inputs;
  for (const DTensor& x : tensors) inputs.push_back(&x);
  if (!autograd::recording(inputs)) return;
  std::vector<Shape> shapes;
  for (const DTensor& x : tensors) shapes.push_back(x.shape());
  autograd::record(out, name, inputs, {}, [shapes, piece](const autograd::Context& c) {
    autograd::Grads g(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i)
      if (c.needs(i)) g[i] = piece(c.grad, i, shapes[i]);
    return g;
  });
}

// Joins up to kMaxInputs tensors with `join` on the local shards.
template <class F>
DTensor join(OpId id, const OpRule& rule, const std::vector<DTensor>& tensors, int64_t dim,
             F plain_join) {
  DT_CHECK(!tensors.empty(), rule.name, ": expected a non-empty list of tensors");
  OpSchema schema(id, {}, {dim});
  const DTensor* inputs[kMaxInputs];
  for (size_t i = 0; i < tensors.size(); ++i) {
    schema.push_input(&tensors[i].spec());
    inputs[i] = &tensors[i];
  }
  return run(schema, rule, inputs, [&](int, const Tensor* const* t, const OutputSharding&) {
    std::vector<Tensor> locals;
    locals.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) locals.push_back(*t[i]);
    return plain_join(locals, dim);
  });
}

DTensor fill_like(const OpRule& rule, const DTensor& x, Scalar value) {
  const OpSchema schema(OpId::FullLike, {&x.spec()}, {static_cast<int64_t>(value.kind())});
  const DTensor* inputs[] = {&x};
  return run(schema, rule, inputs, [&](int rank, const Tensor* const*, const OutputSharding& s) {
    return Tensor::full(output_local_shape(s, rank), value, x.dtype());
  });
}

}  // namespace

DTensor cat(const std::vector<DTensor>& tensors, int64_t dim) {
  if (tensors.size() <= static_cast<size_t>(kMaxInputs)) {
    DTensor out = join(OpId::Cat, kCat, tensors, dim,
                       [](const std::vector<Tensor>& t, int64_t d) { return cat(t, d); });
    // Input i's rows start where the earlier (not skipped) inputs' end.
    std::vector<int64_t> offsets;
    int64_t d = 0, at = 0;
    for (const DTensor& x : tensors)
      if (!skipped(x.shape())) {
        d = wrap_dim(dim, x.dim(), "cat");
        break;
      }
    for (const DTensor& x : tensors) {
      offsets.push_back(at);
      if (!skipped(x.shape())) at += x.shape()[d];
    }
    record_join(out, "cat", tensors,
                [d, offsets](const DTensor& g, size_t i, const Shape& shape) {
                  // A skipped 1-d empty input gets an empty gradient.
                  if (skipped(shape)) return reshape(narrow(g, d, 0, 0), Shape{0});
                  return narrow(g, d, offsets[i], shape[d]);
                });
    return out;
  }
  // More inputs than a schema holds: join them in groups, then the groups.
  // A group of skipped 1-d empty inputs only is joined on dim 0 (`dim` may
  // not exist for it); its empty result is skipped in turn.
  std::vector<DTensor> groups;
  for (size_t i = 0; i < tensors.size(); i += kMaxInputs) {
    const size_t end = std::min(tensors.size(), i + kMaxInputs);
    const bool all_skipped = std::all_of(tensors.begin() + i, tensors.begin() + end,
                                         [](const DTensor& x) { return skipped(x.shape()); });
    groups.push_back(cat(std::vector<DTensor>(tensors.begin() + i, tensors.begin() + end),
                         all_skipped ? 0 : dim));
  }
  return cat(groups, dim);
}

DTensor stack(const std::vector<DTensor>& tensors, int64_t dim) {
  if (tensors.size() <= static_cast<size_t>(kMaxInputs)) {
    DTensor out = join(OpId::Stack, kStack, tensors, dim,
                       [](const std::vector<Tensor>& t, int64_t d) { return stack(t, d); });
    const int64_t d = wrap_dim(dim, out.dim(), "stack");
    record_join(out, "stack", tensors, [d](const DTensor& g, size_t i, const Shape&) {
      return select(g, d, static_cast<int64_t>(i));
    });
    return out;
  }
  DT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<DTensor> groups;
  for (size_t i = 0; i < tensors.size(); i += kMaxInputs) {
    const size_t end = std::min(tensors.size(), i + kMaxInputs);
    groups.push_back(stack(std::vector<DTensor>(tensors.begin() + i, tensors.begin() + end), d));
  }
  return cat(groups, d);
}

DTensor clone(const DTensor& x) {
  const OpSchema schema(OpId::Clone, {&x.spec()});
  DTensor out = run_unary(schema, kClone, x, [](int, const Tensor& t) { return t.clone(); });
  if (autograd::recording({&x}))
    autograd::record(out, "clone", {&x}, {},
                     [](const autograd::Context& c) { return autograd::Grads{c.grad}; });
  return out;
}

DTensor contiguous(const DTensor& x) {
  const OpSchema schema(OpId::Contiguous, {&x.spec()});
  DTensor out =
      run_unary(schema, kContiguous, x, [](int, const Tensor& t) { return t.contiguous(); });
  if (autograd::recording({&x}))
    autograd::record(out, "contiguous", {&x}, {},
                     [](const autograd::Context& c) { return autograd::Grads{c.grad}; });
  return out;
}

DTensor zeros_like(const DTensor& x) { return fill_like(kZerosLike, x, 0); }
DTensor ones_like(const DTensor& x) { return fill_like(kOnesLike, x, 1); }
DTensor full_like(const DTensor& x, Scalar value) { return fill_like(kFullLike, x, value); }

DTensor index_select(const DTensor& x, int64_t dim, const DTensor& index) {
  const OpSchema schema(OpId::IndexSelect, {&x.spec(), &index.spec()}, {dim});
  DTensor out =
      run_binary(schema, kIndexSelect, x, index, [dim](int, const Tensor& t, const Tensor& i) {
        return index_select(t, dim, i);
      });
  if (autograd::recording({&x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "index_select");
    autograd::record(out, "index_select", {&x}, {index},
                     [d, length = x.shape()[d]](const autograd::Context& c) {
                       return autograd::Grads{
                           run_index_select_backward(c.grad, d, length, c.saved(0))};
                     });
  }
  return out;
}

DTensor index_select_backward(const DTensor& grad, const Shape& input_shape, int64_t dim,
                              const DTensor& index) {
  const int64_t nd = static_cast<int64_t>(input_shape.size());
  DT_CHECK(nd > 0, "index_select_backward: the input must have at least 1 dim, got shape ",
           input_shape);
  const int64_t d = wrap_dim(dim, nd, "index_select_backward");
  Shape want = input_shape;
  want[d] = index.shape().product();
  DT_CHECK(grad.shape() == want, "index_select_backward: the gradient has shape ", grad.shape(),
           ", expected ", want, " (index_select of dim ", dim, " of shape ", input_shape,
           " by an index of shape ", index.shape(), ")");
  return run_index_select_backward(grad, d, input_shape[d], index);
}

}  // namespace dtensor
