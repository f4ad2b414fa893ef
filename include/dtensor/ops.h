// Tensor ops on DTensors. Each op propagates the layout: it picks, among the
// op's candidate input/output placements, the one whose input
// redistributions cost least under the planner's cost model (a candidate
// needing no redistribution wins when there is one), redistributes the
// inputs that need it, runs the plain Tensor op on every held shard, and
// wraps the result with the output placements. The choice is cached by the
// op's schema (op, input specs, layout-relevant arguments).
//
//   DTensor y = mm(x, w);            // (S(0),R) x R -> S(0), no communication
//   DTensor s = sum(y, {1});         // S(1) summed over dim 1 -> P(sum)
//
// Inputs must live on the same mesh. A plain Tensor next to a DTensor is
// accepted when it has one element (it is then a replicated value); a
// plain Tensor of any other shape only inside an implicit_replication
// scope (it is then taken as replicated: every rank must hold the same
// tensor), else dtensor::Error says to distribute it. Shape errors carry the plain op's message
// plus the placements. An op whose rule has no candidate for the given
// layouts computes on Replicate and says so once in debug_notes().
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/distributed_tensor.h"

namespace dtensor {

// While alive, plain Tensors of any shape mix with DTensors in the binary
// ops (add, sub, mul, div, their operators and in-place forms) as
// Replicate, as PyTorch's implicit_replication() context does: the caller
// promises every rank passes the same tensor. Per thread; nests.
class ImplicitReplication {
 public:
  ImplicitReplication();
  ~ImplicitReplication();
  ImplicitReplication(const ImplicitReplication&) = delete;
  ImplicitReplication& operator=(const ImplicitReplication&) = delete;

 private:
  bool previous_;
};
using implicit_replication = ImplicitReplication;
// Whether an ImplicitReplication is alive on this thread.
bool implicit_replication_enabled();

// ---- factories -------------------------------------------------------------------
// torch.distributed.tensor.zeros/ones/full/empty: each held rank allocates
// only its own shard, all of them checked together (check_allocation)
// before the first is made. A Partial(sum) placement holds the value on the
// first rank of each group and zeros on the others (the pieces sum to it);
// other Partials hold it everywhere. empty leaves the data uninitialized.
DTensor zeros(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
              DType dtype = DType::Float32);
DTensor ones(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
             DType dtype = DType::Float32);
DTensor full(const Shape& shape, Scalar value, const DeviceMesh& mesh,
             const Placements& placements, DType dtype = DType::Float32);
DTensor empty(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
              DType dtype = DType::Float32);

// PyTorch's repr: "DTensor(full_tensor=..., device_mesh=..., placements=...,
// shape=..., dtype=...)". When this process holds every rank of the mesh
// (the simulated world) it prints the full tensor; otherwise (MPI) only
// this process's shard as local_tensor=..., since gathering would be a
// collective every rank must join and printing is often done on one rank.
std::ostream& operator<<(std::ostream& os, const DTensor& d);

// ---- pointwise (broadcasting, type promotion as on Tensors) -------------------
// add/sub keep Partial(sum|avg) when both inputs have it or one is
// replicated (taken as a Partial locally, as PyTorch does); mul/div keep
// Partial(sum|avg) against a Replicate factor (div: numerator only);
// maximum/minimum keep Partial(max)/Partial(min); other ops reduce first.
DTensor add(const DTensor& a, const DTensor& b);
DTensor sub(const DTensor& a, const DTensor& b);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor minimum(const DTensor& a, const DTensor& b);
// With a scalar: mul/div keep Partial(sum|avg); add/sub do not (adding c to
// every piece of a sum adds n*c).
DTensor add(const DTensor& a, Scalar b);
DTensor sub(const DTensor& a, Scalar b);
DTensor sub(Scalar a, const DTensor& b);
DTensor mul(const DTensor& a, Scalar b);
DTensor div(const DTensor& a, Scalar b);
DTensor div(Scalar a, const DTensor& b);
// With a plain Tensor: one element, or any shape in an implicit_replication
// scope (a replicated value); other shapes throw.
DTensor add(const DTensor& a, const Tensor& b);
DTensor sub(const DTensor& a, const Tensor& b);
DTensor mul(const DTensor& a, const Tensor& b);
DTensor div(const DTensor& a, const Tensor& b);
DTensor add(const Tensor& a, const DTensor& b);
DTensor sub(const Tensor& a, const DTensor& b);
DTensor mul(const Tensor& a, const DTensor& b);
DTensor div(const Tensor& a, const DTensor& b);

DTensor operator+(const DTensor& a, const DTensor& b);
DTensor operator-(const DTensor& a, const DTensor& b);
DTensor operator*(const DTensor& a, const DTensor& b);
DTensor operator/(const DTensor& a, const DTensor& b);
DTensor operator+(const DTensor& a, Scalar b);
DTensor operator-(const DTensor& a, Scalar b);
DTensor operator*(const DTensor& a, Scalar b);
DTensor operator/(const DTensor& a, Scalar b);
DTensor operator+(Scalar a, const DTensor& b);
DTensor operator-(Scalar a, const DTensor& b);
DTensor operator*(Scalar a, const DTensor& b);
DTensor operator/(Scalar a, const DTensor& b);
DTensor operator+(const DTensor& a, const Tensor& b);
DTensor operator-(const DTensor& a, const Tensor& b);
DTensor operator*(const DTensor& a, const Tensor& b);
DTensor operator/(const DTensor& a, const Tensor& b);
DTensor operator+(const Tensor& a, const DTensor& b);
DTensor operator-(const Tensor& a, const DTensor& b);
DTensor operator*(const Tensor& a, const DTensor& b);
DTensor operator/(const Tensor& a, const DTensor& b);
DTensor operator-(const DTensor& x);

// neg keeps Partial(sum|avg); the others need the value, so they reduce first.
DTensor neg(const DTensor& x);
DTensor abs(const DTensor& x);
DTensor exp(const DTensor& x);
DTensor log(const DTensor& x);
DTensor sqrt(const DTensor& x);
DTensor rsqrt(const DTensor& x);
DTensor tanh(const DTensor& x);
DTensor sigmoid(const DTensor& x);
DTensor erf(const DTensor& x);
DTensor relu(const DTensor& x);
DTensor gelu(const DTensor& x, GeluApprox approximate = GeluApprox::None);
// x * sigmoid(x), the SwiGLU MLP's gate.
DTensor silu(const DTensor& x);
// ---- more pointwise math (src/ops/pointwise_math.cc), as the Tensor ops --------
// Every shard passes. Partial(max|min) pass through the non-decreasing ones
// defined everywhere: floor, round, sign, expm1, softplus. log1p is
// increasing but NaN below -1 (a piece there would poison the max), so it
// reduces the Partial first, like the others.
DTensor sin(const DTensor& x);
DTensor cos(const DTensor& x);
DTensor log1p(const DTensor& x);
DTensor expm1(const DTensor& x);
DTensor square(const DTensor& x);
DTensor sign(const DTensor& x);
DTensor floor(const DTensor& x);
DTensor round(const DTensor& x, int64_t decimals = 0);
DTensor softplus(const DTensor& x, Scalar beta = 1, Scalar threshold = 20);
DTensor isnan(const DTensor& x);
DTensor logical_not(const DTensor& x);
DTensor logical_and(const DTensor& a, const DTensor& b);
DTensor logical_or(const DTensor& a, const DTensor& b);
DTensor logical_xor(const DTensor& a, const DTensor& b);
// addcmul and addcdiv are linear in (input, t1) together: Partial(sum|avg)
// input and t1 with a replicated t2 stay Partial; adding a replicated term
// keeps Partial(avg|max|min) input. lerp is linear in (input, end) for a
// replicated weight.
DTensor addcmul(const DTensor& input, const DTensor& t1, const DTensor& t2, Scalar value = 1);
DTensor addcdiv(const DTensor& input, const DTensor& t1, const DTensor& t2, Scalar value = 1);
DTensor lerp(const DTensor& input, const DTensor& end, Scalar weight);
DTensor lerp(const DTensor& input, const DTensor& end, const DTensor& weight);
// gelu's gradient, grad * gelu'(x), in one pass (PyTorch's gelu_backward):
// what gelu's autograd runs. Linear in grad: a Partial(sum|avg) grad with a
// replicated x stays Partial.
DTensor gelu_backward(const DTensor& grad, const DTensor& x,
                      GeluApprox approximate = GeluApprox::None);
DTensor pow(const DTensor& x, Scalar exponent);

// Comparisons give bool DTensors.
DTensor eq(const DTensor& a, const DTensor& b);
DTensor ne(const DTensor& a, const DTensor& b);
DTensor lt(const DTensor& a, const DTensor& b);
DTensor le(const DTensor& a, const DTensor& b);
DTensor gt(const DTensor& a, const DTensor& b);
DTensor ge(const DTensor& a, const DTensor& b);
DTensor eq(const DTensor& a, Scalar b);
DTensor ne(const DTensor& a, Scalar b);
DTensor lt(const DTensor& a, Scalar b);
DTensor le(const DTensor& a, Scalar b);
DTensor gt(const DTensor& a, Scalar b);
DTensor ge(const DTensor& a, Scalar b);

// Elementwise comparisons (PyTorch's): bool DTensors, not a bool. Compare
// values with equal(a.full_tensor(), b.full_tensor()).
DTensor operator==(const DTensor& a, const DTensor& b);
DTensor operator!=(const DTensor& a, const DTensor& b);
DTensor operator<(const DTensor& a, const DTensor& b);
DTensor operator<=(const DTensor& a, const DTensor& b);
DTensor operator>(const DTensor& a, const DTensor& b);
DTensor operator>=(const DTensor& a, const DTensor& b);
DTensor operator==(const DTensor& a, Scalar b);
DTensor operator!=(const DTensor& a, Scalar b);
DTensor operator<(const DTensor& a, Scalar b);
DTensor operator<=(const DTensor& a, Scalar b);
DTensor operator>(const DTensor& a, Scalar b);
DTensor operator>=(const DTensor& a, Scalar b);

// cond ? a : b elementwise (broadcasting). Partial a and b of the same kind
// stay Partial against a replicated cond (selection commutes with the sum).
DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b);
DTensor where(const DTensor& cond, const DTensor& a, Scalar b);
DTensor masked_fill(const DTensor& x, const DTensor& mask, Scalar value);

// ---- matrix products -------------------------------------------------------------
// (S(0),R)·R -> S(0); R·S(1) -> S(1); S(1)·S(0) -> Partial(sum);
// Partial(sum)·R -> Partial(sum); batch dims sharded alike pass through.
DTensor mm(const DTensor& a, const DTensor& b);
DTensor addmm(const DTensor& bias, const DTensor& a, const DTensor& b, Scalar beta = 1,
              Scalar alpha = 1);
DTensor bmm(const DTensor& a, const DTensor& b);
DTensor baddbmm(const DTensor& bias, const DTensor& a, const DTensor& b, Scalar beta = 1,
                Scalar alpha = 1);
DTensor matmul(const DTensor& a, const DTensor& b);
// x @ weight^T (+ bias); weight (out, in) sharded on dim 0 is the column-
// parallel layer (output sharded on its last dim), on dim 1 the row-parallel
// one (output Partial(sum)).
DTensor linear(const DTensor& x, const DTensor& weight);
DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias);

// ---- reductions (dims: all when empty; negative allowed) --------------------------
// Over a sharded dim: sum -> Partial(sum); mean -> Partial(avg) when the dim
// splits evenly, else Partial(sum) of local sums divided by the global count;
// amax/amin -> Partial(max/min). prod, var, argmax and argmin gather a
// sharded reduced dim first. Kept dims stay sharded.
DTensor sum(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
DTensor mean(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
DTensor prod(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
DTensor amax(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
DTensor amin(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
DTensor var(const DTensor& x, const DimVector& dims = {}, int64_t correction = 1,
            bool keepdim = false);
DTensor argmax(const DTensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
DTensor argmin(const DTensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// ---- scans, sorting, logical reductions -------------------------------------------
// Dims the op does not work along stay sharded (renumbered when reduced
// dims are dropped). cumsum gathers `dim`; it is linear, so Partial(sum)
// passes (and Partial(avg) for floating inputs). sort and topk gather
// `dim` and reduce Partials first; values and indices come out alike, and
// the input is moved once for both. logsumexp gathers a sharded reduced
// dim and reduces Partials first. all / any over a sharded dim give
// Partial(min) / Partial(max) bool outputs (an empty shard holds true /
// false); Partial inputs are reduced first.
DTensor cumsum(const DTensor& x, int64_t dim);
ValuesIndices<DTensor> sort(const DTensor& x, int64_t dim = -1, bool descending = false,
                            bool stable = false);
ValuesIndices<DTensor> topk(const DTensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                            bool sorted = true);
DTensor logsumexp(const DTensor& x, const DimVector& dims, bool keepdim = false);
DTensor all(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
DTensor any(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);
// ---- structural ops (as the Tensor versions in tensor.h) ----------------------------
// flip, roll, cumprod work along some dims: the other dims stay sharded and
// those dims are gathered. flip and roll move elements, so every Partial
// passes (a permutation commutes with any elementwise reduction); cumprod
// is not linear, so Partials reduce first. roll without dims rolls the
// flattened tensor (reshape's layouts). cumprod's gradient is one op with
// cumprod's layouts (a Partial(sum|avg) gradient against a replicated input
// stays Partial: it is linear in the gradient).
DTensor flip(const DTensor& x, const DimVector& dims);
DTensor roll(const DTensor& x, const DimVector& shifts, const DimVector& dims = {});
DTensor cumprod(const DTensor& x, int64_t dim);
// sort's indices (sort's layouts).
DTensor argsort(const DTensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// Composed of unsqueeze, mul and sum, so the layouts are theirs: outer of
// a S(0) a gives S(0), of a S(0) b gives S(1), Partial(sum) against a
// replicated vector stays Partial(sum); dot of two vectors sharded alike
// gives Partial(sum) (each rank sums its own products).
DTensor outer(const DTensor& a, const DTensor& b);
DTensor dot(const DTensor& a, const DTensor& b);
// Factories as zeros(): each rank makes only its own shard (a Partial(sum)
// placement holds the values on the first rank of each group, zeros on the
// others).
DTensor linspace(double start, double end, int64_t steps, const DeviceMesh& mesh,
                 const Placements& placements, DType dtype = DType::Float32);
DTensor eye(int64_t n, std::optional<int64_t> m, const DeviceMesh& mesh,
            const Placements& placements, DType dtype = DType::Float32);
// Dims other than dim1 and dim2 stay sharded (renumbered); dim1 and dim2
// are gathered; every Partial passes (picking elements). Its gradient puts
// the gradient on the diagonal of zeros, with the same layouts.
DTensor diagonal(const DTensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// The output's shape depends on the values: x is gathered to Replicate
// (Partials reduced) and every rank computes the same replicated result.
DTensor nonzero(const DTensor& x);
// sqrt(var) with var's layouts; the gradient is PyTorch's (0 where the
// result is 0, not the NaN of sqrt's).
DTensor std(const DTensor& x, const DimVector& dims = {}, int64_t correction = 1,
            bool keepdim = false);
// max(x) / min(x): amax / amin over every dim (Partial(max|min) of sharded
// dims; the gradient is split evenly among ties, as PyTorch's). Along dim:
// `dim` is gathered and Partials reduced (as argmax), x moved once for both
// outputs; the values' gradient goes to the index. max(a, b): maximum.
DTensor max(const DTensor& x);
DTensor min(const DTensor& x);
ValuesIndices<DTensor> max(const DTensor& x, int64_t dim, bool keepdim = false);
ValuesIndices<DTensor> min(const DTensor& x, int64_t dim, bool keepdim = false);
DTensor max(const DTensor& a, const DTensor& b);
DTensor min(const DTensor& a, const DTensor& b);
// ---- norms (as the Tensor versions in tensor.h) ------------------------------------
// Kept dims stay sharded. A reduced dim that is sharded leaves each rank
// with its shard's part of the norm, reduced by ONE collective: for ord 0
// and 1 the output is Partial(sum) (counts, sums of |x|), for inf
// Partial(max), for -inf Partial(min) (of local max/min |x|), so no data
// moves at all; for any other ord the local sums of |x|^ord are
// all-reduced (one all_reduce, over the flattened group when several mesh
// dims shard reduced dims) before the root 1/ord is taken, and the output
// is Replicate on those mesh dims. Partial inputs do not pass through (the
// norm of a sum is not the sum of norms): they are reduced first.
DTensor vector_norm(const DTensor& x, double ord = 2, const DimVector& dims = {},
                    bool keepdim = false);
DTensor norm(const DTensor& x, double p = 2, const DimVector& dims = {}, bool keepdim = false);

// ---- views -------------------------------------------------------------------------
// view/reshape track which input dims become which output dims: a sharded
// dim that is split or merged stays sharded when it is the outermost part
// and the chunks line up (always when it splits evenly); otherwise it is
// gathered first. Locally the shard is reshaped (copied when its strides
// need it), so view never fails on strides. A view op that returns x as it
// is (a view, reshape or expand to the same shape, a full-range narrow or
// slice, transpose(x, d, d)) keeps x's layout and shards, with no
// communication, whatever the layout.
DTensor view(const DTensor& x, const Shape& shape);
DTensor reshape(const DTensor& x, const Shape& shape);
DTensor flatten(const DTensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
DTensor squeeze(const DTensor& x);
DTensor squeeze(const DTensor& x, int64_t dim);
DTensor unsqueeze(const DTensor& x, int64_t dim);
DTensor permute(const DTensor& x, const DimVector& dims);
DTensor transpose(const DTensor& x, int64_t d0, int64_t d1);
DTensor t(const DTensor& x);
// Broadcast dims (size 1 -> n) must be replicated; others pass through.
DTensor expand(const DTensor& x, const Shape& shape);
// On a sharded dim these gather that dim first (unless they take all of it,
// or none: then its shard stays); other dims pass through.
DTensor narrow(const DTensor& x, int64_t dim, int64_t start, int64_t length);
DTensor slice(const DTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
DTensor select(const DTensor& x, int64_t dim, int64_t index);
std::vector<DTensor> chunk(const DTensor& x, int64_t n, int64_t dim = 0);
std::vector<DTensor> split(const DTensor& x, int64_t split_size, int64_t dim = 0);
// The gradients of slice/narrow and select (PyTorch's slice_backward and
// select_backward): `grad` placed where slice(x, dim, start, end, step) or
// select(x, dim, index) of an x of `input_shape` took its elements, zeros
// elsewhere. Dims other than `dim` keep their shards and Partials pass
// (zeros are zeros in every piece); a sharded `dim` is gathered.
DTensor slice_backward(const DTensor& grad, const Shape& input_shape, int64_t dim, int64_t start,
                       int64_t end, int64_t step = 1);
DTensor select_backward(const DTensor& grad, const Shape& input_shape, int64_t dim, int64_t index);

// ---- joining, copies, indexing -------------------------------------------------------
// Inputs sharded alike on a dim other than `dim` stay sharded; `dim` itself
// is gathered. Partials of one kind stay Partial.
DTensor cat(const std::vector<DTensor>& tensors, int64_t dim = 0);
DTensor stack(const std::vector<DTensor>& tensors, int64_t dim = 0);
DTensor clone(const DTensor& x);
DTensor contiguous(const DTensor& x);
// Same layout as x (a Partial x gives a replicated result).
DTensor zeros_like(const DTensor& x);
DTensor ones_like(const DTensor& x);
DTensor full_like(const DTensor& x, Scalar value);
// index is a 1-d int64 DTensor; sharded index -> output sharded on dim.
DTensor index_select(const DTensor& x, int64_t dim, const DTensor& index);
// The gradient of index_select (PyTorch's index_select_backward): zeros of
// `input_shape` with grad's rows along `dim` added at `index` (repeated
// indices add up). Other dims keep their shards; grad sharded on `dim`
// with a sharded index gives Partial(sum) (each rank adds its own rows);
// Partial(sum|avg) grads stay Partial.
DTensor index_select_backward(const DTensor& grad, const Shape& input_shape, int64_t dim,
                              const DTensor& index);

// ---- shape ops: repeat, tile, unbind, split, pad, new_*, einsum ---------------------------
// PyTorch's semantics and checks, as the plain Tensor ops of the same names.
// repeat/tile: a dim repeated once keeps its shard; a repeated dim is
// gathered (the copies of a shard are not one chunk of the result); every
// Partial passes (copying commutes with the reduction). Repeating once (and
// pad by nothing) keeps any layout as it is.
DTensor repeat(const DTensor& x, const DimVector& repeats);
DTensor tile(const DTensor& x, const DimVector& reps);
// select/narrow pieces (their rules and gradients); a sharded `dim` is
// gathered once up front, not once per piece (split: not at all when each
// piece is all of `dim` or empty). split(x, {2}) is the int
// overload (pieces of 2): pass a std::vector for one size.
std::vector<DTensor> unbind(const DTensor& x, int64_t dim = 0);
std::vector<DTensor> split(const DTensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// Unpadded dims keep their shards; a padded or cropped dim is gathered.
// Every rank fills the same value, so Partial(avg|max|min) pass for any
// value and Partial(sum) only for a 0 value; reflect/replicate pass every
// Partial (they copy elements).
DTensor pad(const DTensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant",
            std::optional<Scalar> value = std::nullopt);
// torch.Tensor.new_*: on x's mesh, x's dtype unless given. Of x's own
// shape it keeps x's shards (Partial becomes Replicate), as PyTorch's
// new_factory_strategy; of any other shape it is replicated.
DTensor new_empty(const DTensor& x, const Shape& shape, std::optional<DType> dtype = std::nullopt);
DTensor new_zeros(const DTensor& x, const Shape& shape, std::optional<DType> dtype = std::nullopt);
DTensor new_ones(const DTensor& x, const Shape& shape, std::optional<DType> dtype = std::nullopt);
DTensor new_full(const DTensor& x, const Shape& shape, Scalar value,
                 std::optional<DType> dtype = std::nullopt);
// x's layout, uninitialised (a Partial x gives Replicate, like zeros_like).
DTensor empty_like(const DTensor& x);
// Contracted pairwise (left to right) with sum, permute, reshape, expand
// and mm/bmm, so the layouts are theirs: a batch label sharded alike on
// both operands stays sharded, a contracted label sharded alike gives
// Partial(sum), a label summed while sharded gives Partial(sum).
DTensor einsum(const std::string& equation, const std::vector<DTensor>& operands);
// ---- clamping, triangles, gather/scatter, indexed updates --------------------------------
// clamp is elementwise: every shard passes. It is non-decreasing, so
// Partial(max|min) pass too (max_r clamp(a_r) = clamp(max_r a_r));
// Partial(sum|avg) are reduced first. At least one bound must be given.
DTensor clamp(const DTensor& x, std::optional<Scalar> min,
              std::optional<Scalar> max = std::nullopt);
DTensor clamp_min(const DTensor& x, Scalar min);
DTensor clamp_max(const DTensor& x, Scalar max);
// tril/triu of the last two dims: every dim may stay sharded (each shard is
// cut at the diagonal shifted by its global row and column offsets); every
// Partial passes (all pieces are zeroed at the same positions, and any
// reduction of zeros is zero).
DTensor tril(const DTensor& x, int64_t diagonal = 0);
DTensor triu(const DTensor& x, int64_t diagonal = 0);
// gather: a dim d != dim stays sharded when x and index are sharded alike
// on it with equal sizes; an index sharded on `dim` against a replicated x
// gives an output sharded alike; x Partial (any kind) with a replicated
// index stays Partial (gather picks elements); otherwise inputs are moved.
DTensor gather(const DTensor& x, int64_t dim, const DTensor& index);
// scatter / scatter_add: a dim d != dim stays sharded when x, index and src
// are sharded alike on it with equal sizes. With a replicated index,
// Partial x and src of one kind stay Partial: scatter for every kind (the
// write is linear and commutes with max/min), scatter_add for sum and avg;
// scatter_add also keeps Partial(max|min) x against a replicated src (the
// same amount is added to every piece), and Partial(sum) x with index and
// src sharded alike on `dim` (each rank adds its part of src). scatter of
// a value keeps Partial(avg|max|min) x (not sum: every piece would hold
// the value). Duplicate indices: the last write in index order.
DTensor scatter(const DTensor& x, int64_t dim, const DTensor& index, const DTensor& src);
DTensor scatter(const DTensor& x, int64_t dim, const DTensor& index, Scalar value);
DTensor scatter_add(const DTensor& x, int64_t dim, const DTensor& index, const DTensor& src);
// index_add: dims other than `dim` stay sharded when x and source are
// sharded alike (index replicated); linear in (x, source), so Partial(sum)
// or Partial(avg) on both with a replicated index stays Partial; Partial(
// max|min) x against a replicated source stays Partial; Partial(sum) x
// with the index sharded and source sharded alike on `dim` stays
// Partial(sum) (each rank adds its own slices).
DTensor index_add(const DTensor& x, int64_t dim, const DTensor& index, const DTensor& source,
                  Scalar alpha = 1);
// index_put with int64 index tensors (bool masks: plain Tensors only, their
// shape depends on the data). Dims not indexed stay sharded, with values
// sharded alike on the matching dim (or replicated where values broadcast
// over it); indexed dims and index tensors are replicated. Partial x and
// values of one kind stay Partial: sum/avg when accumulating, every kind
// when writing; accumulating into Partial(max|min) x keeps it against
// replicated values.
DTensor index_put(const DTensor& x, const std::vector<std::optional<DTensor>>& indices,
                  const DTensor& values, bool accumulate = false);

// ---- neural-network math ---------------------------------------------------------------
// Sharded on a dim other than `dim`: stays sharded; `dim` is gathered.
DTensor softmax(const DTensor& x, int64_t dim);
DTensor log_softmax(const DTensor& x, int64_t dim);
// Sharded on leading (batch, sequence) dims: stays sharded; the normalized
// dims are gathered; weight and bias are replicated.
DTensor layer_norm(const DTensor& x, const Shape& normalized_shape,
                   const std::optional<DTensor>& weight = std::nullopt,
                   const std::optional<DTensor>& bias = std::nullopt, double eps = 1e-5);
DTensor rms_norm(const DTensor& x, const Shape& normalized_shape,
                 const std::optional<DTensor>& weight = std::nullopt,
                 std::optional<double> eps = std::nullopt);
// Batch-sharded inputs: Reduction::None stays sharded, Sum gives
// Partial(sum), Mean divides the reduced sum by the count of targets that
// are not ignore_index.
DTensor nll_loss(const DTensor& log_probs, const DTensor& target,
                 Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
DTensor cross_entropy(const DTensor& logits, const DTensor& target,
                      Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
// weight (V, D), indices int64 of any shape -> indices.shape + (D). A row-
// sharded table gives a Partial(sum) output: each rank looks up the indices
// in its own rows and leaves zeros for the others (PyTorch's masked partial).
DTensor embedding(const DTensor& weight, const DTensor& indices);

// ---- attention ----------------------------------------------------------------------
// scaled_dot_product_attention as on Tensors (tensor.h). Without
// communication: batch/head dims sharded alike on query, key, value (and the
// mask where it has the dim; a broadcast size-1 dim replicated) -> output
// sharded alike (tensor-parallel heads); the query sequence sharded (query
// S(-2), the mask's L dim alike, key and value replicated) -> output S(-2),
// the causal mask placed at each shard's global query offset; value sharded
// on its last dim -> output S(-1); a Partial(sum|avg) value with replicated
// query and key -> output Partial of the same kind (the probabilities weigh
// each piece linearly). A sharded key/value sequence would need a softmax
// across ranks (ring attention): it is gathered, as are Partial queries,
// keys and masks. The backward is one DTensor op per input with the same
// layouts (an input replicated against a sharded query sequence or head
// dim, or a broadcast one, gets a Partial(sum) gradient). A float mask gets
// a gradient (the scores' gradient, as PyTorch's); a bool mask none.
DTensor scaled_dot_product_attention(const DTensor& query, const DTensor& key,
                                     const DTensor& value,
                                     const std::optional<DTensor>& attn_mask = std::nullopt,
                                     double dropout_p = 0.0, bool is_causal = false,
                                     std::optional<double> scale = std::nullopt);

// ---- random (layout-invariant) -----------------------------------------------------------
// Element i (row-major) of the global tensor is Tensor::rand(shape, seed)'s
// element i whatever the placements: each rank makes only its own shard.
// Placements must be Shard or Replicate. Without a seed, the seed is
// next_seed() (the global generator below).
DTensor rand(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
             std::optional<uint64_t> seed = std::nullopt, DType dtype = DType::Float32);
DTensor randn(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
              std::optional<uint64_t> seed = std::nullopt, DType dtype = DType::Float32);
// x * mask / (1 - p) with mask = rand(x.shape, seed) >= p, the same global
// mask whatever x's placements (seed: next_seed() when not given).
DTensor dropout(const DTensor& x, double p, std::optional<uint64_t> seed = std::nullopt);

// The global generator (torch.manual_seed): what a random op or module made
// without a seed draws from (rand, randn, dropout, nn::Linear, ...). Each
// such call takes the next seed of a fixed sequence that depends only on
// the manual_seed given and the number of draws since, never on the rank:
// the processes of an SPMD program make the same calls in the same order,
// so they draw the same seeds, and the MPI world and the simulated world
// get the same values (still layout-invariant, as with an explicit seed).
// Two unseeded calls get different values (two nn::Linear of one shape get
// different weights). Calls given a seed neither use nor advance it. The
// default seed is PyTorch's (67280421310721). Thread-safe, but draws from
// several threads come in whatever order the threads make them.
void manual_seed(uint64_t seed);
// The seed of the last manual_seed (the default before any).
uint64_t initial_seed();
// Advances the generator: the seed for one draw.
uint64_t next_seed();
// The generator's whole state, to replay draws (torch.get_rng_state /
// set_rng_state): activation checkpointing recomputes a forward with the
// seeds it drew the first time.
struct RngState {
  uint64_t seed = 0;
  uint64_t draws = 0;
  bool operator==(const RngState&) const = default;
};
RngState get_rng_state();
void set_rng_state(const RngState& state);

using ShardingPropCacheInfo = CacheInfo;
// Counters of the sharding-propagation cache.
ShardingPropCacheInfo sharding_prop_cache_info();
void clear_sharding_prop_cache();

}  // namespace dtensor
