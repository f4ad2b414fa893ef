// View ops on DTensors: view, reshape, flatten, squeeze, unsqueeze, permute,
// transpose, t, expand, narrow, slice, select, chunk and split.
//
// Every view moves elements without changing them, so each Partial kind
// passes through unchanged (the view of a sum of pieces is the sum of the
// viewed pieces) and Replicate stays Replicate. What needs care is Shard:
//   - view/reshape (and flatten, squeeze, unsqueeze, which are reshapes)
//     group the input and output dims into the smallest runs holding the
//     same elements in the same order ([8, 6] -> [48] is one group, [8, 6]
//     -> [4, 2, 6] two). A shard of a group's outermost dim (of size > 1)
//     may become a shard of the group's outermost output dim, but only when
//     every rank's shard covers the same flat range of the group before and
//     after; the chunks of ceil(L / n) do not line up in general ([5, 4] ->
//     [20] on 4 ranks: rows 2,2,1,0 are 8,8,4,0 elements, not 5,5,5,5), so
//     the rule checks the whole candidate rank by rank, nested shardings
//     included, and otherwise gathers first. A shard of an inner dim of a
//     group never stays (its elements are not contiguous in the result).
//   - permute/transpose/t renumber the sharded dims.
//   - expand keeps a shard of a dim whose size is kept; a broadcast dim
//     (1 -> n) must be replicated.
//   - narrow/slice/select gather the dim they cut (its chunks would no longer
//     be the ceil(L / n) chunks of the result); other dims keep their shards.
//   - An op that returns its input as it is (a full-range slice or narrow, a
//     view, reshape or expand to the same shape, a squeeze of a dim that is
//     not 1, an identity permutation) keeps the input's layout, whatever it
//     is (OpRule::keeps_layout): it is free, as in PyTorch, whose slice
//     keeps the input's sharding for a full-range slice. So does a cut to
//     nothing (every chunk of nothing is empty).
//
// The output shape of each op comes from running the plain Tensor op on a
// tensor that has a shape and no data (views only touch metadata), so the
// shape rules and error messages are exactly the plain op's; the dispatcher
// adds the placements. Locally, view and reshape both reshape (copying a
// shard whose strides need it): unlike Tensor::view, DTensor view never fails
// on strides, since a shard's strides are an accident of how it was made.
// Output specs record contiguous strides, like every other DTensor op.
//
// Every op here records its backward (autograd): reshapes reshape the
// gradient back, permutes apply the inverse permutation, expand sums over
// the expanded dims, and narrow/slice/select place the gradient into zeros
// of the input's shape with slice_backward/select_backward, an op of its
// own (below) that keeps the gradient's shards on the other dims. chunk and
// split are narrows, so each piece is differentiable and the gradients of
// several pieces add up.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {

// ---- shared helpers ---------------------------------------------------------------

// A tensor of x's shape and dtype without data, for running the plain view
// ops' shape logic and checks.
Tensor shape_only(const DTensorSpec& x) {
  return Tensor(nullptr, x.dtype(), x.shape(), contiguous_strides(x.shape()), 0);
}

TensorMeta contiguous_meta(const Tensor& t) { return {t.shape(), contiguous_strides(t.shape()), t.dtype()}; }

// args[from..] of the schema as a shape or dim list.
DimVector args_from(const OpSchema& s, int from) {
  DimVector v;
  v.assign(s.args + from, s.args + s.num_args);
  return v;
}

// A candidate keeping each Partial kind the input has. Kinds the input lacks
// are not offered: R -> P costs nothing locally, and the chooser would then
// be free to turn a replicated input into a partial output for no gain.
void view_partial_strategies(const DTensorSpec& x, std::vector<DimStrategy>& c) {
  bool seen[4] = {};
  for (const Placement& p : x.placements()) {
    if (!p.is_partial() || seen[static_cast<int>(p.reduce_op())]) continue;
    seen[static_cast<int>(p.reduce_op())] = true;
    c.push_back({{p}, p});
  }
}

// Runs checks that happen before dispatch (the plain op's own, on a
// shape-only tensor) and rethrows a failure with x's placements, in the form
// the dispatcher gives shape errors.
template <class F>
void check_like_plain(const DTensor& x, F&& checks) {
  try {
    checks();
  } catch (const Error& e) {
    DT_THROW(e.what(), " (DTensor placements ", to_string(x.placements()), " on ", x.mesh(), ")");
  }
}

// ---- view, reshape, flatten, squeeze, unsqueeze (OpId::View) ----------------------

// args[0] of an OpId::View schema: the public op that built it; the rest are
// that op's arguments as given (a shape with its -1, or dims). The schema
// thus differs whenever the result may, and each op checks with its own
// messages.
enum class ViewKind : int64_t { View, Reshape, Flatten, Squeeze, SqueezeDim, Unsqueeze };

TensorMeta view_meta(const OpSchema& s) {
  const Tensor x = shape_only(s.input(0));
  switch (static_cast<ViewKind>(s.args[0])) {
    case ViewKind::View: return contiguous_meta(x.view(args_from(s, 1)));
    case ViewKind::Reshape: return contiguous_meta(x.reshape(args_from(s, 1)));
    case ViewKind::Flatten: return contiguous_meta(x.flatten(s.args[1], s.args[2]));
    case ViewKind::Squeeze: return contiguous_meta(x.squeeze());
    case ViewKind::SqueezeDim: return contiguous_meta(x.squeeze(s.args[1]));
    case ViewKind::Unsqueeze: return contiguous_meta(x.unsqueeze(s.args[1]));
  }
  DT_THROW("internal error: unknown view kind ", s.args[0]);
}

// Input dims [i0, i1) and output dims [j0, j1) that hold the same elements
// in the same order. One side is empty for a size-1 dim that appears or
// disappears.
struct DimGroup {
  int i0, i1, j0, j1;
};

struct DimGroups {
  DimGroup at[2 * kMaxDims];
  int size = 0;
};

// The minimal groups of a reshape of `in` to `out`.
// REQUIRES: in.product() == out.product() > 0 (so every size is >= 1).
DimGroups group_dims(const Shape& in, const Shape& out) {
  DimGroups g;
  const int a = static_cast<int>(in.size()), b = static_cast<int>(out.size());
  int i = 0, j = 0;
  while (i < a || j < b) {
    // A size-1 dim facing a size > 1 dim (or nothing) is a group on its own.
    if (i < a && in[i] == 1 && (j == b || out[j] != 1)) {
      g.at[g.size++] = {i, i + 1, j, j};
      ++i;
      continue;
    }
    if (j < b && out[j] == 1 && (i == a || in[i] != 1)) {
      g.at[g.size++] = {i, i, j, j + 1};
      ++j;
      continue;
    }
    // Both sides have a dim here: the products of what follows are equal,
    // so growing the smaller side always ends on equal products.
    const int i0 = i, j0 = j;
    int64_t f = in[i++], t = out[j++];
    while (f != t) {
      if (f < t) f *= in[i++];
      else t *= out[j++];
    }
    g.at[g.size++] = {i0, i, j0, j};
  }
  return g;
}

// The first dim of [lo, hi) with size > 1 (lo when all are 1).
int outermost(const Shape& shape, int lo, int hi) {
  for (int k = lo; k < hi; ++k)
    if (shape[k] > 1) return k;
  return lo;
}

// The flat (row-major) range of a group's elements that a shard covers.
struct FlatRange {
  int64_t start = 0, size = 0;
  friend bool operator==(const FlatRange& a, const FlatRange& b) {
    return a.start == b.start && a.size == b.size;
  }
};

// The range that shard `e` covers within dims [lo, hi) of `shape`, or
// nullopt when its elements are not one contiguous range there. An empty
// shard gives {0, 0}; a group with no dims on this side, {0, 1}.
std::optional<FlatRange> flat_range(const Shape& shape, const ShardExtent& e, int lo, int hi) {
  FlatRange r{0, 1};
  for (int k = lo; k < hi; ++k) r.size *= e.local_shape[k];
  if (r.size == 0) return FlatRange{};
  // Contiguous: inside the innermost cut dim everything is whole, outside it
  // the shard is one index wide.
  bool cut = false;
  int64_t stride = 1;
  for (int k = hi - 1; k >= lo; --k) {
    if (cut && e.local_shape[k] != 1) return std::nullopt;
    if (e.local_shape[k] != shape[k]) cut = true;
    r.start += e.global_offset[k] * stride;
    stride *= shape[k];
  }
  return r;
}

void view_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const Shape& in = x.shape();
  const int64_t a = x.ndim(), b = static_cast<int64_t>(out.shape.size());
  if (in.product() == 0) {
    // No elements, so every layout holds its (empty) shards alike: keep the
    // shard on the dim that lines up (from the front, else from the back),
    // and otherwise replicate the empty output.
    for (int64_t d = 0; d < a; ++d) {
      bool front = d < b, back = d + b - a >= 0;
      for (int64_t k = 0; k <= d && front; ++k) front = in[k] == out.shape[k];
      for (int64_t k = d; k < a && back; ++k) back = in[k] == out.shape[k + b - a];
      c.push_back({{Shard(d)}, front ? Shard(d) : back ? Shard(d + b - a) : Replicate()});
    }
  } else {
    const DimGroups g = group_dims(in, out.shape);
    for (int k = 0; k < g.size; ++k) {
      const DimGroup& grp = g.at[k];
      if (grp.i0 == grp.i1 || grp.j0 == grp.j1) continue;
      c.push_back({{Shard(outermost(in, grp.i0, grp.i1))}, Shard(outermost(out.shape, grp.j0, grp.j1))});
    }
  }
  view_partial_strategies(x, c);
  c.push_back({{Replicate()}, Replicate()});
}

// Whether every rank's input shard is, group by group, the same flat range
// as its output shard, so that a local reshape gives the output shard. One
// mesh dim at a time cannot tell: whether chunks line up depends on the
// other mesh dims sharding the same group (nested chunking).
bool view_accepts(const OpSchema& s, const TensorMeta& out, const Placements* in_pl,
                  const Placements& out_pl) {
  const DTensorSpec& x = s.input(0);
  if (x.shape().product() == 0) return true;
  bool sharded = false;
  for (const Placement& p : in_pl[0]) sharded = sharded || p.is_shard();
  for (const Placement& p : out_pl) sharded = sharded || p.is_shard();
  if (!sharded) return true;
  const DTensorSpec from = x.with_placements(in_pl[0]);
  const DTensorSpec to(x.mesh(), out_pl, out);
  const DimGroups g = group_dims(x.shape(), out.shape);
  const Shape mesh_shape = x.mesh().shape();
  DimVector coord(mesh_shape.size(), 0);
  for (;;) {
    const ShardExtent ea = from.extent(coord), eb = to.extent(coord);
    for (int k = 0; k < g.size; ++k) {
      const DimGroup& grp = g.at[k];
      const auto ra = flat_range(x.shape(), ea, grp.i0, grp.i1);
      const auto rb = flat_range(out.shape, eb, grp.j0, grp.j1);
      if (!ra || !rb || !(*ra == *rb)) return false;
    }
    int m = static_cast<int>(mesh_shape.size()) - 1;
    while (m >= 0 && ++coord[m] == mesh_shape[m]) coord[m--] = 0;
    if (m < 0) return true;
  }
}

constexpr OpRule view_rule(const char* name) {
  return {.name = name, .output_meta = view_meta, .strategies = view_strategies,
          .accepts = view_accepts, .views = true, .keeps_layout = keeps_shape};
}
constexpr OpRule kView = view_rule("view");
constexpr OpRule kReshape = view_rule("reshape");
constexpr OpRule kFlatten = view_rule("flatten");
constexpr OpRule kSqueeze = view_rule("squeeze");
constexpr OpRule kUnsqueeze = view_rule("unsqueeze");

// Reshapes each shard to the output's local shape. The shards of an even
// split share one geometry, so the view's strides are worked out on the
// first shard and reused for every later shard of the same shape and
// strides (the rule's `views` keeps the loop in rank order on this thread).
// A reshape that had to copy is not reused.
DTensor run_view(const OpSchema& schema, const OpRule& rule, const DTensor& x) {
  const DTensor* inputs[] = {&x};
  bool known = false;  // whether in_shape/in_strides -> out_shape/out_strides is a view seen
  Shape in_shape, in_strides, out_shape, out_strides;
  return run(schema, rule, inputs, [&](int rank, const Tensor* const* t, const OutputSharding& s) {
    const Tensor& in = *t[0];
    const Shape shape = output_local_shape(s, rank);
    if (known && shape == out_shape && in.shape() == in_shape && in.strides() == in_strides)
      return Tensor(in.storage(), in.dtype(), shape, out_strides, in.storage_offset());
    Tensor out = in.reshape(shape);
    if (!known && out.storage() == in.storage() && out.storage_offset() == in.storage_offset()) {
      known = true;
      in_shape = in.shape();
      in_strides = in.strides();
      out_shape = shape;
      out_strides = out.strides();
    }
    return out;
  });
}

DTensor view_to(ViewKind kind, const OpRule& rule, const DTensor& x, const Shape& shape) {
  OpSchema schema(OpId::View, {&x.spec()}, {static_cast<int64_t>(kind)});
  for (int64_t v : shape) schema.push_arg(v);
  return run_view(schema, rule, x);
}

// ---- permute, transpose, t (OpId::Permute) ----------------------------------------

// args[0]: the public op; the rest its arguments as given.
enum class PermuteKind : int64_t { Permute, Transpose, T };

TensorMeta permute_meta(const OpSchema& s) {
  const Tensor x = shape_only(s.input(0));
  switch (static_cast<PermuteKind>(s.args[0])) {
    case PermuteKind::Permute: return contiguous_meta(x.permute(args_from(s, 1)));
    case PermuteKind::Transpose: return contiguous_meta(x.transpose(s.args[1], s.args[2]));
    case PermuteKind::T: return contiguous_meta(x.t());
  }
  DT_THROW("internal error: unknown permute kind ", s.args[0]);
}

// Output dim i is input dim perm[i]. REQUIRES: permute_meta accepted s.
DimVector permutation(const OpSchema& s) {
  const int64_t nd = s.input(0).ndim();
  DimVector perm;
  for (int64_t i = 0; i < nd; ++i) perm.push_back(i);
  switch (static_cast<PermuteKind>(s.args[0])) {
    case PermuteKind::Permute:
      for (int64_t i = 0; i < nd; ++i) perm[i] = wrap_dim(s.args[1 + i], nd, "permute");
      break;
    case PermuteKind::Transpose:
      if (nd > 0) std::swap(perm[wrap_dim(s.args[1], nd, "transpose")],
                            perm[wrap_dim(s.args[2], nd, "transpose")]);
      break;
    case PermuteKind::T:
      if (nd == 2) std::swap(perm[0], perm[1]);
      break;
  }
  return perm;
}

void permute_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DimVector perm = permutation(s);
  for (size_t i = 0; i < perm.size(); ++i) c.push_back({{Shard(perm[i])}, Shard(static_cast<int64_t>(i))});
  view_partial_strategies(s.input(0), c);
  c.push_back({{Replicate()}, Replicate()});
}

// Every dim stays where it is (transpose(d, d), t() of a 1-d tensor).
bool identity_permutation(const OpSchema& s, const TensorMeta&) {
  const DimVector perm = permutation(s);
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

constexpr OpRule permute_rule(const char* name) {
  return {.name = name, .output_meta = permute_meta, .strategies = permute_strategies,
          .meta_kernel = true, .keeps_layout = identity_permutation};
}
constexpr OpRule kPermute = permute_rule("permute");
constexpr OpRule kTranspose = permute_rule("transpose");
constexpr OpRule kT = permute_rule("t");

// ---- expand (OpId::Expand) -----------------------------------------------------------

// args: the target shape as given (-1 keeps a size).
TensorMeta expand_meta(const OpSchema& s) {
  return contiguous_meta(shape_only(s.input(0)).expand(args_from(s, 0)));
}

// A dim keeping its size keeps its shard (renumbered past the new leading
// dims); a broadcast dim has no shard candidate, so it is gathered: each
// rank needs the one row to repeat it over its whole output.
void expand_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const Shape& in = s.input(0).shape();
  const int64_t lead = static_cast<int64_t>(out.shape.size() - in.size());
  for (int64_t k = 0; k < static_cast<int64_t>(in.size()); ++k)
    if (in[k] == out.shape[k + lead]) c.push_back({{Shard(k)}, Shard(k + lead)});
  // Copies of a partial piece sum (or max, ...) to copies of the value.
  view_partial_strategies(s.input(0), c);
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kExpand{.name = "expand", .output_meta = expand_meta,
                         .strategies = expand_strategies, .meta_kernel = true,
                         .keeps_layout = keeps_shape};

// ---- narrow, slice, select (OpId::Narrow, Slice, Select) ---------------------------------

// args: dim, then the op's numbers, as given.
TensorMeta cut_meta(const OpSchema& s) {
  const Tensor x = shape_only(s.input(0));
  const int64_t* a = s.args;
  switch (s.op) {
    case OpId::Narrow: return contiguous_meta(x.narrow(a[0], a[1], a[2]));
    case OpId::Slice: return contiguous_meta(x.slice(a[0], a[1], a[2], a[3]));
    default: return contiguous_meta(x.select(a[0], a[1]));
  }
}

// The cut dim has no shard candidate (it is gathered; but see
// cut_keeps_layout); select drops it, so later dims move down by one.
void cut_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const int64_t d = wrap_dim(s.args[0], x.ndim(), "narrow");
  const bool drops = s.op == OpId::Select;
  for (int64_t k = 0; k < x.ndim(); ++k)
    if (k != d) c.push_back({{Shard(k)}, Shard(drops && k > d ? k - 1 : k)});
  view_partial_strategies(x, c);
  c.push_back({{Replicate()}, Replicate()});
}

// A narrow or slice that takes all of its dim (0..L-1 in order: the only
// way to keep L elements) returns x; one that takes nothing leaves every
// chunk of its dim empty. Both keep x's layout, the cut dim's shards
// included, and cut_locally cuts each shard to all or nothing.
bool cut_keeps_layout(const OpSchema& s, const TensorMeta& out) {
  if (s.op == OpId::Select) return false;
  const DTensorSpec& x = s.input(0);
  const int64_t d = wrap_dim(s.args[0], x.ndim(), "narrow");
  return out.shape[d] == 0 || out.shape[d] == x.shape()[d];
}

constexpr OpRule cut_rule(const char* name) {
  return {.name = name, .output_meta = cut_meta, .strategies = cut_strategies,
          .meta_kernel = true, .keeps_layout = cut_keeps_layout};
}
constexpr OpRule kNarrow = cut_rule("narrow");
constexpr OpRule kSlice = cut_rule("slice");
constexpr OpRule kSelect = cut_rule("select");

// Runs a narrow or slice whose kernel `cut` takes the global arguments; a
// cut of all or nothing takes all or nothing of each shard instead (its dim
// may be sharded then, and a global start means nothing in a shard).
template <class Cut>
DTensor cut_locally(const OpSchema& schema, const OpRule& rule, const DTensor& x, int64_t dim,
                    Cut cut) {
  const DTensor* inputs[] = {&x};
  return run(schema, rule, inputs, [&](int, const Tensor* const* t, const OutputSharding& s) {
    const int64_t d = wrap_dim(dim, x.dim(), rule.name);
    if (s.output.shape()[d] == 0) return t[0]->narrow(d, 0, 0);
    if (s.output.shape()[d] == x.shape()[d]) return *t[0];
    return cut(*t[0]);
  });
}

// ---- slice_backward, select_backward (OpId::SliceBackward) ---------------------------

// args: dim of the result (normalised), start (normalised), step, the
// result's size along dim, and 1 for select (the gradient lacks dim) or 0.
enum SliceBackwardArg { kSbDim, kSbStart, kSbStep, kSbLength, kSbSelect };

TensorMeta slice_backward_meta(const OpSchema& s) {
  const DTensorSpec& g = s.input(0);
  const int64_t* a = s.args;
  Shape out = g.shape();
  if (a[kSbSelect] != 0) {
    DT_CHECK(a[kSbStart] >= 0 && a[kSbStart] < a[kSbLength], "select_backward: index ",
             a[kSbStart], " out of range for dim ", a[kSbDim], " of size ", a[kSbLength]);
    out.insert(static_cast<size_t>(a[kSbDim]), a[kSbLength]);
  } else {
    const int64_t m = g.shape()[a[kSbDim]];
    DT_CHECK(m == 0 || (a[kSbStart] >= 0 && a[kSbStart] + (m - 1) * a[kSbStep] < a[kSbLength]),
             "slice_backward: a gradient of ", m, " elements along dim ", a[kSbDim],
             " from start ", a[kSbStart], " by step ", a[kSbStep], " does not fit a dim of size ",
             a[kSbLength]);
    out[a[kSbDim]] = a[kSbLength];
  }
  return {out, contiguous_strides(out), g.dtype()};
}

// The gradient's dims other than the cut one keep their shards (renumbered
// past an inserted select dim); the cut dim is gathered, since the
// gradient's chunks of it are not the chunks of the result (but see
// slice_backward_keeps_layout).
void slice_backward_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& g = s.input(0);
  const int64_t d = s.args[kSbDim];
  const bool inserts = s.args[kSbSelect] != 0;
  for (int64_t k = 0; k < g.ndim(); ++k) {
    if (inserts) c.push_back({{Shard(k)}, Shard(k >= d ? k + 1 : k)});
    else if (k != d) c.push_back({{Shard(k)}, Shard(k)});
  }
  view_partial_strategies(g, c);
  c.push_back({{Replicate()}, Replicate()});
}

// The gradient of a full-range slice is the result; of an empty one, zeros,
// which chunk alike in any layout (the kernel copies nothing then).
bool slice_backward_keeps_layout(const OpSchema& s, const TensorMeta& out) {
  if (s.args[kSbSelect] != 0) return false;
  const int64_t m = s.input(0).shape()[s.args[kSbDim]];
  return m == 0 || m == out.shape[s.args[kSbDim]];
}

constexpr OpRule kSliceBackward{.name = "slice_backward", .output_meta = slice_backward_meta,
                                .strategies = slice_backward_strategies,
                                .keeps_layout = slice_backward_keeps_layout};

DTensor run_slice_backward(const DTensor& grad, int64_t d, int64_t start, int64_t step,
                           int64_t length, bool select_dim) {
  const OpSchema schema(OpId::SliceBackward, {&grad.spec()},
                        {d, start, step, length, select_dim ? 1 : 0});
  const DTensor* inputs[] = {&grad};
  return run(schema, kSliceBackward, inputs,
             [=](int rank, const Tensor* const* t, const OutputSharding& s) {
               Tensor out = Tensor::zeros(output_local_shape(s, rank), t[0]->dtype());
               if (select_dim) {
                 out.select(d, start).copy_(*t[0]);
               } else {
                 const int64_t m = t[0]->shape()[d];
                 if (m > 0) out.slice(d, start, start + (m - 1) * step + 1, step).copy_(*t[0]);
               }
               return out;
             });
}

// Python-style start of slice [start:end] on a dim of size n.
int64_t slice_start(int64_t start, int64_t n) {
  return std::clamp<int64_t>(start < 0 ? start + n : start, 0, n);
}

// ---- autograd ------------------------------------------------------------------------

// Records the backward of a reshape of x: the gradient reshaped back.
DTensor reshaped_back(DTensor out, const char* name, const DTensor& x) {
  if (autograd::recording({&x}))
    autograd::record(out, name, {&x}, {}, [shape = x.shape()](const autograd::Context& c) {
      return autograd::Grads{reshape(c.grad, shape)};
    });
  return out;
}

// Records the backward of slice(x, d, start, ...) with d, start normalised.
DTensor sliced_back(DTensor out, const char* name, const DTensor& x, int64_t d, int64_t start,
                    int64_t step) {
  if (autograd::recording({&x}))
    autograd::record(out, name, {&x}, {},
                     [shape = x.shape(), d, start, step](const autograd::Context& c) {
                       return autograd::Grads{
                           run_slice_backward(c.grad, d, start, step, shape[d], false)};
                     });
  return out;
}

// Pieces [start, start + length) of x along dim d (normalised). x is moved
// once to the layout narrow needs (the layout depends on d only), so the
// pieces cost one gather of d at most, not one each.
std::vector<DTensor> narrow_pieces(const DTensor& x, int64_t d,
                                   const std::vector<std::pair<int64_t, int64_t>>& pieces) {
  std::vector<DTensor> out;
  if (pieces.empty()) return out;
  const OpSchema first(OpId::Narrow, {&x.spec()}, {d, pieces[0].first, pieces[0].second});
  auto s = propagate(first, kNarrow);
  const DTensor src = s->needs_redistribute ? prepare_input(x, *s, 0) : x;
  out.reserve(pieces.size());
  for (const auto& [start, length] : pieces) out.push_back(narrow(src, d, start, length));
  return out;
}

}  // namespace

DTensor view(const DTensor& x, const Shape& shape) {
  return reshaped_back(view_to(ViewKind::View, kView, x, shape), "view", x);
}

DTensor reshape(const DTensor& x, const Shape& shape) {
  return reshaped_back(view_to(ViewKind::Reshape, kReshape, x, shape), "reshape", x);
}

DTensor flatten(const DTensor& x, int64_t start_dim, int64_t end_dim) {
  const OpSchema schema(OpId::View, {&x.spec()},
                        {static_cast<int64_t>(ViewKind::Flatten), start_dim, end_dim});
  return reshaped_back(run_view(schema, kFlatten, x), "flatten", x);
}

DTensor squeeze(const DTensor& x) {
  const OpSchema schema(OpId::View, {&x.spec()}, {static_cast<int64_t>(ViewKind::Squeeze)});
  return reshaped_back(run_view(schema, kSqueeze, x), "squeeze", x);
}

DTensor squeeze(const DTensor& x, int64_t dim) {
  const OpSchema schema(OpId::View, {&x.spec()}, {static_cast<int64_t>(ViewKind::SqueezeDim), dim});
  return reshaped_back(run_view(schema, kSqueeze, x), "squeeze", x);
}

DTensor unsqueeze(const DTensor& x, int64_t dim) {
  const OpSchema schema(OpId::View, {&x.spec()}, {static_cast<int64_t>(ViewKind::Unsqueeze), dim});
  return reshaped_back(run_view(schema, kUnsqueeze, x), "unsqueeze", x);
}

DTensor permute(const DTensor& x, const DimVector& dims) {
  OpSchema schema(OpId::Permute, {&x.spec()}, {static_cast<int64_t>(PermuteKind::Permute)});
  for (int64_t d : dims) schema.push_arg(d);
  DTensor out =
      run_unary(schema, kPermute, x, [&](int, const Tensor& t) { return t.permute(dims); });
  if (autograd::recording({&x})) {
    // The inverse permutation: input dim dims[i] came to output dim i.
    DimVector inverse(dims.size(), 0);
    for (size_t i = 0; i < dims.size(); ++i)
      inverse[wrap_dim(dims[i], x.dim(), "permute")] = static_cast<int64_t>(i);
    autograd::record(out, "permute", {&x}, {}, [inverse](const autograd::Context& c) {
      return autograd::Grads{permute(c.grad, inverse)};
    });
  }
  return out;
}

DTensor transpose(const DTensor& x, int64_t d0, int64_t d1) {
  const OpSchema schema(OpId::Permute, {&x.spec()},
                        {static_cast<int64_t>(PermuteKind::Transpose), d0, d1});
  DTensor out = run_unary(schema, kTranspose, x,
                          [&](int, const Tensor& t) { return t.transpose(d0, d1); });
  if (autograd::recording({&x}))
    autograd::record(out, "transpose", {&x}, {}, [d0, d1](const autograd::Context& c) {
      return autograd::Grads{transpose(c.grad, d0, d1)};
    });
  return out;
}

DTensor t(const DTensor& x) {
  const OpSchema schema(OpId::Permute, {&x.spec()}, {static_cast<int64_t>(PermuteKind::T)});
  DTensor out = run_unary(schema, kT, x, [](int, const Tensor& t) { return t.t(); });
  if (autograd::recording({&x}))
    autograd::record(out, "t", {&x}, {}, [](const autograd::Context& c) {
      return autograd::Grads{t(c.grad)};
    });
  return out;
}

DTensor expand(const DTensor& x, const Shape& shape) {
  OpSchema schema(OpId::Expand, {&x.spec()});
  for (int64_t v : shape) schema.push_arg(v);
  const DTensor* inputs[] = {&x};
  DTensor out =
      run(schema, kExpand, inputs, [](int rank, const Tensor* const* t, const OutputSharding& s) {
        return t[0]->expand(output_local_shape(s, rank));
      });
  if (autograd::recording({&x}))
    autograd::record(out, "expand", {&x}, {}, [shape = x.shape()](const autograd::Context& c) {
      return autograd::Grads{autograd::sum_to(c.grad, shape)};
    });
  return out;
}

DTensor narrow(const DTensor& x, int64_t dim, int64_t start, int64_t length) {
  const OpSchema schema(OpId::Narrow, {&x.spec()}, {dim, start, length});
  DTensor out = cut_locally(schema, kNarrow, x, dim,
                            [&](const Tensor& t) { return t.narrow(dim, start, length); });
  if (!autograd::recording({&x})) return out;
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  return sliced_back(std::move(out), "narrow", x, d, start < 0 ? start + x.shape()[d] : start, 1);
}

DTensor slice(const DTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const OpSchema schema(OpId::Slice, {&x.spec()}, {dim, start, end, step});
  DTensor out = cut_locally(schema, kSlice, x, dim,
                            [&](const Tensor& t) { return t.slice(dim, start, end, step); });
  if (!autograd::recording({&x})) return out;
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  return sliced_back(std::move(out), "slice", x, d, slice_start(start, x.shape()[d]), step);
}

DTensor select(const DTensor& x, int64_t dim, int64_t index) {
  const OpSchema schema(OpId::Select, {&x.spec()}, {dim, index});
  DTensor out =
      run_unary(schema, kSelect, x, [&](int, const Tensor& t) { return t.select(dim, index); });
  if (autograd::recording({&x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "select");
    const int64_t i = index < 0 ? index + x.shape()[d] : index;
    autograd::record(out, "select", {&x}, {},
                     [shape = x.shape(), d, i](const autograd::Context& c) {
                       return autograd::Grads{run_slice_backward(c.grad, d, i, 1, shape[d], true)};
                     });
  }
  return out;
}

DTensor slice_backward(const DTensor& grad, const Shape& input_shape, int64_t dim, int64_t start,
                       int64_t end, int64_t step) {
  int64_t d = 0;
  Shape want;
  check_like_plain(grad, [&] {
    const Tensor x(nullptr, grad.dtype(), input_shape, contiguous_strides(input_shape), 0);
    want = x.slice(dim, start, end, step).shape();
    d = wrap_dim(dim, x.dim(), "slice_backward");
  });
  DT_CHECK(grad.shape() == want, "slice_backward: the gradient has shape ", grad.shape(),
           ", expected ", want, " (slice [", start, ":", end, ":", step, "] of dim ", dim,
           " of shape ", input_shape, ")");
  return run_slice_backward(grad, d, slice_start(start, input_shape[d]), step, input_shape[d],
                            false);
}

DTensor select_backward(const DTensor& grad, const Shape& input_shape, int64_t dim,
                        int64_t index) {
  int64_t d = 0;
  Shape want;
  check_like_plain(grad, [&] {
    const Tensor x(nullptr, grad.dtype(), input_shape, contiguous_strides(input_shape), 0);
    want = x.select(dim, index).shape();
    d = wrap_dim(dim, x.dim(), "select_backward");
  });
  DT_CHECK(grad.shape() == want, "select_backward: the gradient has shape ", grad.shape(),
           ", expected ", want, " (select ", index, " of dim ", dim, " of shape ", input_shape,
           ")");
  return run_slice_backward(grad, d, index < 0 ? index + input_shape[d] : index, 1,
                            input_shape[d], true);
}

// The pieces of Tensor::chunk: n of ceil(L / n), trailing ones short or empty.
std::vector<DTensor> chunk(const DTensor& x, int64_t n, int64_t dim) {
  int64_t d = 0;
  check_like_plain(x, [&] {
    shape_only(x.spec()).chunk(n, dim);
    d = wrap_dim(dim, x.dim(), "chunk");
  });
  std::vector<std::pair<int64_t, int64_t>> pieces;
  pieces.reserve(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const ChunkRange piece = chunk_range(x.shape()[d], n, r);
    pieces.emplace_back(piece.start, piece.size);
  }
  return narrow_pieces(x, d, pieces);
}

// The pieces of Tensor::split: split_size each, the last may be shorter; an
// empty dim gives x itself.
std::vector<DTensor> split(const DTensor& x, int64_t split_size, int64_t dim) {
  int64_t d = 0;
  check_like_plain(x, [&] {
    shape_only(x.spec()).split(split_size, dim);
    d = wrap_dim(dim, x.dim(), "split");
  });
  const int64_t len = x.shape()[d];
  if (len == 0) return {x};
  std::vector<std::pair<int64_t, int64_t>> pieces;
  for (int64_t start = 0; start < len; start += split_size)
    pieces.emplace_back(start, std::min(split_size, len - start));
  return narrow_pieces(x, d, pieces);
}

}  // namespace dtensor
