// Shape ops on DTensors: repeat, tile, unbind, split with sizes, pad, and the
// new_* / empty_like factories (einsum is in einsum.cc).
//
//  - repeat/tile: a dim repeated once keeps its shard (renumbered past new
//    leading dims); a repeated dim is gathered, since the copies of a shard
//    are not one contiguous chunk of the result. Repeating copies elements,
//    so it commutes with every elementwise reduction: each Partial passes.
//  - pad: a dim without padding keeps its shard; a padded (or cropped) dim
//    is gathered. Every rank fills the pad with the same value, so
//    Partial(avg|max|min) pass for any value (the avg, max or min of n
//    copies of v is v), and Partial(sum) passes only when the value is 0
//    (n copies of v sum to n·v). reflect/replicate only copy elements:
//    every Partial passes.
//  - unbind/split: select/narrow pieces (their rules and backward); a
//    sharded `dim` is gathered once up front, not once per piece (split:
//    not at all when each piece is all of `dim` or empty, which keep it).
//  - repeat by ones and pad by zeros return the input as it is: they keep
//    its layout, whatever it is (OpRule::keeps_layout), and copy each shard.
//  - new_*: replicated on x's mesh; empty_like keeps x's shards, a Partial
//    x gives Replicate (like zeros_like).
//
// Backward (autograd): repeat sums the gradient over the copies (each
// repeated dim reshaped to (r, n) and summed over r); constant pad pads the
// gradient with the negated pads (a crop where it padded, zeros where it
// cropped); reflect/replicate add each output element's gradient back to
// the input element it copied (index_select_backward per padded dim).
#include <algorithm>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "tensor/shape.h"

namespace dtensor {

using namespace dispatch;

namespace {

// A candidate keeping each Partial kind the input has (for which `passes`
// holds). Kinds the input lacks are not offered: R -> P is free locally and
// would let the chooser make a replicated input partial for no gain.
template <class Passes>
void partial_strategies(const DTensorSpec& x, std::vector<DimStrategy>& c, Passes passes) {
  bool seen[4] = {};
  for (const Placement& p : x.placements()) {
    if (!p.is_partial() || seen[static_cast<int>(p.reduce_op())]) continue;
    seen[static_cast<int>(p.reduce_op())] = true;
    if (passes(p.reduce_op())) c.push_back({{p}, p});
  }
}

DimVector args_of(const OpSchema& s, int from) {
  DimVector v;
  v.assign(s.args + from, s.args + s.num_args);
  return v;
}

// ---- repeat (OpId::Repeat; args: the repeats) -------------------------------------------

TensorMeta repeat_meta(const OpSchema& s) {
  const Shape out = repeat_shape(s.input(0).shape(), args_of(s, 0));
  return {out, contiguous_strides(out), s.input(0).dtype()};
}

void repeat_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const int64_t lead = static_cast<int64_t>(out.shape.size()) - x.ndim();
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (s.args[lead + d] == 1) c.push_back({{Shard(d)}, Shard(d + lead)});
  partial_strategies(x, c, [](ReduceOp) { return true; });
  c.push_back({{Replicate()}, Replicate()});
}

// Repeating every dim once copies x as it is.
constexpr OpRule kRepeat{.name = "repeat", .output_meta = repeat_meta,
                         .strategies = repeat_strategies, .keeps_layout = keeps_shape};

// The gradient of repeat: g (of the repeated shape) summed over the copies
// to `shape`.
DTensor repeat_backward(DTensor g, const Shape& shape, const DimVector& repeats) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t lead = static_cast<int64_t>(repeats.size()) - nd;
  if (lead > 0) {
    DimVector leading;
    for (int64_t d = 0; d < lead; ++d) leading.push_back(d);
    g = sum(g, leading);
  }
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t r = repeats[lead + d], n = shape[d];
    if (r == 1) continue;
    // The gradient's sizes now: dims < d summed back already, d and later not.
    Shape now;
    for (int64_t k = 0; k < nd; ++k) now.push_back(k < d ? shape[k] : shape[k] * repeats[lead + k]);
    if (nd < kMaxDims) {
      // (..., r·n, ...) -> (..., r, n, ...): copy k of element i is at k·n + i.
      Shape split;
      for (int64_t k = 0; k < nd; ++k) {
        if (k == d) split.push_back(r);
        split.push_back(k == d ? n : now[k]);
      }
      g = sum(reshape(g, split), {d});
    } else {
      // No room for one more dim: (outer, r, n·inner), summed, and back.
      int64_t outer = 1, inner = 1;
      for (int64_t k = 0; k < d; ++k) outer *= now[k];
      for (int64_t k = d + 1; k < nd; ++k) inner *= now[k];
      now[d] = n;
      g = reshape(sum(reshape(g, {outer, r, n * inner}), {1}), now);
    }
  }
  return g;
}

// ---- pad (OpId::Pad; args: mode, has_value, value == 0, the pads) ----------------------

enum PadArg { kPadMode, kPadHasValue, kPadZero, kPadList };

std::vector<int64_t> pads_of(const OpSchema& s) {
  return std::vector<int64_t>(s.args + kPadList, s.args + s.num_args);
}

const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Replicate: return "replicate";
  }
  return "?";
}

PadPlan pad_plan_of(const OpSchema& s) {
  return pad_plan(s.input(0).shape(), pads_of(s),
                  mode_name(static_cast<PadMode>(s.args[kPadMode])), s.args[kPadHasValue] != 0);
}

TensorMeta pad_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  const PadPlan p = pad_plan_of(s);
  DT_CHECK(p.mode == PadMode::Constant || x.dtype() != DType::Bool, "pad: mode ",
           mode_name(p.mode), " expects a numeric dtype, got bool");
  return {p.out, contiguous_strides(p.out), x.dtype()};
}

void pad_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const PadPlan p = pad_plan_of(s);
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (p.lo[d] == 0 && p.hi[d] == 0) c.push_back({{Shard(d)}, Shard(d)});
  const bool zero = s.args[kPadZero] != 0;
  partial_strategies(x, c, [&](ReduceOp op) {
    return p.mode != PadMode::Constant || op != ReduceOp::Sum || zero;
  });
  c.push_back({{Replicate()}, Replicate()});
}

// No pad anywhere copies x as it is (a crop on one side and a pad on the
// other keeps the shape and is no identity).
bool pads_nothing(const OpSchema& s, const TensorMeta&) {
  for (int i = kPadList; i < s.num_args; ++i)
    if (s.args[i] != 0) return false;
  return true;
}

constexpr OpRule kPad{.name = "pad", .output_meta = pad_meta, .strategies = pad_strategies,
                      .keeps_layout = pads_nothing};

// One schema holds kMaxArgs - kPadList pads; more (5+ padded dims) are
// applied in two constant pads, which compose exactly.
constexpr size_t kMaxPads = (kMaxArgs - kPadList) / 2 * 2;

DTensor pad_once(const DTensor& x, const std::vector<int64_t>& pads, const std::string& mode,
                 std::optional<Scalar> value) {
  PadMode m = PadMode::Constant;
  if (mode == "reflect") m = PadMode::Reflect;
  else if (mode == "replicate") m = PadMode::Replicate;
  else if (mode != "constant") pad_plan(x.shape(), pads, mode, value.has_value());  // throws
  const bool zero = !value || value->to_double() == 0.0;
  OpSchema schema(OpId::Pad, {&x.spec()},
                  {static_cast<int64_t>(m), value ? 1 : 0, zero ? 1 : 0});
  for (int64_t v : pads) schema.push_arg(v);
  const DTensor* inputs[] = {&x};
  return run(schema, kPad, inputs, [&](int rank, const Tensor* const* t, const OutputSharding& s) {
    // An empty shard of an unpadded dim would fail reflect/replicate's
    // non-empty check, which holds for the global tensor; its result is
    // empty too. (A constant pad of an empty shard is not: it is all value.)
    if (m != PadMode::Constant && t[0]->numel() == 0) return Tensor::zeros(output_local_shape(s, rank), x.dtype());
    return pad(*t[0], pads, mode, value);
  });
}

// The adjoint of reflect/replicate: each padded dim's gradient added back
// to the input positions it copied, last padded dim first (the forward
// gathered the first padded dim first).
DTensor pad_copy_backward(DTensor g, const Shape& shape, const PadPlan& p) {
  const Placements all_r(static_cast<size_t>(g.mesh().ndim()), Replicate());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (p.lo[d] == 0 && p.hi[d] == 0) continue;
    const DTensor index =
        distribute_tensor(pad_index_for(shape[d], p.lo[d], p.hi[d], p.mode), g.mesh(), all_r);
    Shape unpadded;  // the shape before dim d was padded
    for (int64_t k = 0; k < static_cast<int64_t>(shape.size()); ++k)
      unpadded.push_back(k == d ? shape[k] : g.shape()[k]);
    g = index_select_backward(g, unpadded, d, index);
  }
  return g;
}

// ---- empty_like (OpId::EmptyLike) -------------------------------------------------------

TensorMeta same_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

void like_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    c.push_back({{Shard(d)}, Shard(d)});
  partial_strategies(s.input(0), c, [](ReduceOp) { return true; });
  for (DimStrategy& st : c)
    if (st.out.is_partial()) st.out = Replicate();
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kEmptyLike{"empty_like", same_meta, like_strategies};

// x with every mesh dim that shards tensor dim d replicated (one gather).
DTensor gathered_on(const DTensor& x, int64_t d) {
  Placements p = x.placements();
  bool sharded = false;
  for (Placement& q : p)
    if (q.is_shard(d)) q = Replicate(), sharded = true;
  return sharded ? x.redistribute(p) : x;
}

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

}  // namespace

DTensor repeat(const DTensor& x, const DimVector& repeats) {
  OpSchema schema(OpId::Repeat, {&x.spec()});
  for (int64_t r : repeats) schema.push_arg(r);
  DTensor out = run_unary(schema, kRepeat, x,
                          [&](int, const Tensor& t) { return repeat(t, repeats); });
  if (autograd::recording({&x}))
    autograd::record(out, "repeat", {&x}, {},
                     [shape = x.shape(), repeats](const autograd::Context& c) {
                       return autograd::Grads{repeat_backward(c.grad, shape, repeats)};
                     });
  return out;
}

DTensor tile(const DTensor& x, const DimVector& reps) {
  return repeat(x, tile_repeats(x.dim(), reps));
}

std::vector<DTensor> unbind(const DTensor& x, int64_t dim) {
  DT_CHECK(x.dim() > 0, "unbind: dimension specified as ", dim,
           " but tensor has no dimensions (DTensor placements ", to_string(x.placements()), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  const DTensor src = gathered_on(x, d);
  std::vector<DTensor> out;
  out.reserve(static_cast<size_t>(x.shape()[d]));
  for (int64_t i = 0; i < x.shape()[d]; ++i) out.push_back(select(src, d, i));
  return out;
}

std::vector<DTensor> split(const DTensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int64_t d = 0;
  try {
    Tensor(nullptr, x.dtype(), x.shape(), contiguous_strides(x.shape()), 0)
        .split_with_sizes(sizes, dim);
    d = wrap_dim(dim, x.dim(), "split");
  } catch (const Error& e) {
    DT_THROW(e.what(), " (DTensor placements ", to_string(x.placements()), " on ", x.mesh(), ")");
  }
  // Pieces of all of d or of nothing keep x's layout (view.cc's cut rule).
  bool cuts = false;
  for (int64_t n : sizes) cuts = cuts || (n != 0 && n != x.shape()[d]);
  const DTensor src = cuts ? gathered_on(x, d) : x;
  std::vector<DTensor> out;
  int64_t start = 0;
  for (int64_t n : sizes) {
    out.push_back(narrow(src, d, start, n));
    start += n;
  }
  return out;
}

DTensor pad(const DTensor& x, const std::vector<int64_t>& pads, const std::string& mode,
            std::optional<Scalar> value) {
  DTensor out;
  if (pads.size() <= kMaxPads || mode != "constant") {
    out = pad_once(x, pads, mode, value);
  } else {
    // Checked whole first, so errors name the pads as given.
    pad_plan(x.shape(), pads, mode, value.has_value());
    // The first kMaxPads pads (the last dims) directly; the rest with those
    // dims rotated to the front, so the remaining pads come first. One
    // backward is recorded below for the whole.
    NoGradGuard no_grad;
    const int64_t nd = x.dim(), k = static_cast<int64_t>(kMaxPads / 2);
    DimVector to_front, back;
    for (int64_t j = nd - k; j < nd; ++j) to_front.push_back(j);
    for (int64_t j = 0; j < nd - k; ++j) to_front.push_back(j);
    for (int64_t j = 0; j < nd; ++j) back.push_back(j < nd - k ? j + k : j - (nd - k));
    const std::vector<int64_t> inner(pads.begin(), pads.begin() + kMaxPads);
    const std::vector<int64_t> outer(pads.begin() + kMaxPads, pads.end());
    out = permute(pad_once(permute(pad_once(x, inner, mode, value), to_front), outer, mode, value),
                  back);
  }
  if (autograd::recording({&x})) {
    const PadPlan p = pad_plan(x.shape(), pads, mode, value.has_value());
    autograd::record(out, "pad", {&x}, {}, [shape = x.shape(), p, pads](const autograd::Context& c) {
      if (p.mode != PadMode::Constant) return autograd::Grads{pad_copy_backward(c.grad, shape, p)};
      std::vector<int64_t> back;
      for (int64_t v : pads) back.push_back(-v);
      return autograd::Grads{pad(c.grad, back)};
    });
  }
  return out;
}

namespace {
// torch.Tensor.new_*'s layout (PyTorch's new_factory_strategy): a tensor of
// x's own shape keeps x's shards, in their order, so a sharded model's new
// buffers cost no memory beyond a shard; Partial becomes Replicate, as
// every rank fills the whole value. Any other shape is replicated.
Placements new_factory_placements(const DTensor& x, const Shape& shape) {
  if (shape != x.shape()) return replicated(x.mesh());
  Placements p = x.placements();
  for (Placement& q : p)
    if (q.is_partial()) q = Replicate();
  return p;
}
}  // namespace

DTensor new_empty(const DTensor& x, const Shape& shape, std::optional<DType> dtype) {
  return empty(shape, x.mesh(), new_factory_placements(x, shape), dtype.value_or(x.dtype()));
}
DTensor new_zeros(const DTensor& x, const Shape& shape, std::optional<DType> dtype) {
  return zeros(shape, x.mesh(), new_factory_placements(x, shape), dtype.value_or(x.dtype()));
}
DTensor new_ones(const DTensor& x, const Shape& shape, std::optional<DType> dtype) {
  return ones(shape, x.mesh(), new_factory_placements(x, shape), dtype.value_or(x.dtype()));
}
DTensor new_full(const DTensor& x, const Shape& shape, Scalar value, std::optional<DType> dtype) {
  return full(shape, value, x.mesh(), new_factory_placements(x, shape), dtype.value_or(x.dtype()));
}

DTensor empty_like(const DTensor& x) {
  const OpSchema schema(OpId::EmptyLike, {&x.spec()});
  const DTensor* inputs[] = {&x};
  // Unchecked: uninitialised data has nothing for VerifyMode to compare.
  return run_unchecked(schema, kEmptyLike, inputs,
                       [&](int rank, const Tensor* const*, const OutputSharding& s) {
                         return Tensor::empty(output_local_shape(s, rank), x.dtype());
                       });
}

}  // namespace dtensor
