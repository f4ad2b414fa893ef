// DTensor — one logical (global) tensor laid out over a DeviceMesh by one
// placement per mesh dim, holding the local shards of the ranks this process
// holds. This header is the core the other headers build on (the DTensor
// class, distribute_tensor, from_local, and the ops of ops.h); a program
// includes the umbrella dtensor/dtensor.h, which gives the whole API.
//
//   World world = World::simulated(4);
//   DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
//   DTensor d = distribute_tensor(Tensor::randn({8, 6}, 0), mesh, {Shard(0), Replicate()});
//   DTensor r = d.redistribute({Replicate(), Shard(1)});   // all_gather, then local chunk
//   Tensor full = r.full_tensor();                          // == the original
//
// Redistribution runs a min-cost plan (redistribute.h) of the elementary
// transforms of docs/redistribution.md (S->R all_gather, S(i)->S(j) all_to_all, P->R
// all_reduce, P->S reduce_scatter, R->S local chunk), merging collectives
// over flattened mesh dims where that gives the same result; a user may not
// introduce a Partial that the source did not already have on that mesh dim.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "dtensor/autograd.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"
#include "dtensor/local_tensor.h"
#include "dtensor/mesh.h"
#include "dtensor/placement.h"
#include "dtensor/redistribute.h"
#include "dtensor/spec.h"
#include "dtensor/tensor.h"
#include "dtensor/world.h"

namespace dtensor {

namespace autograd {
struct Meta;
struct MetaAccess;
}  // namespace autograd

class DTensor {
 public:
  // An empty DTensor (no mesh, no data), so that DTensors can sit in
  // std::vector, std::map or a struct before they are assigned. defined()
  // is false; anything else asked of it (its spec, shape, an op) throws
  // dtensor::Error saying it is empty.
  DTensor() = default;
  // REQUIRES: local holds, for every held rank of the mesh, the shard the
  // spec assigns to it (from_local and distribute_tensor check this).
  DTensor(const DTensorSpec& spec, LocalTensor local);
  DTensor(DTensorSpec&& spec, LocalTensor local);

  // A DTensor on the meta device: the layout of `spec`, each held rank's
  // shard a meta Tensor (a shape, no memory). What a module built under
  // nn::MetaDeviceGuard holds until Module::materialize() fills it.
  static DTensor meta(const DTensorSpec& spec);

  // Whether this DTensor holds a tensor (false only when default-constructed).
  bool defined() const { return spec_.has_value(); }
  // Whether its shards are on the meta device (DTensor::meta): the layout
  // is known, the values are not. redistribute() moves only the layout (no
  // communication); ops that read values throw.
  bool is_meta() const;
  // Whether its shards are meta tensors that hold no memory yet
  // (Storage::is_deferred): a parameter made under nn::MetaDeviceGuard
  // until materialize(), any meta tensor of a world with data.
  bool is_deferred() const;
  const DTensorSpec& spec() const {
    if (!spec_) [[unlikely]] throw_empty();
    return *spec_;
  }
  const DeviceMesh& mesh() const { return spec().mesh(); }
  const Placements& placements() const { return spec().placements(); }
  // The global shape.
  const Shape& shape() const { return spec().shape(); }
  DType dtype() const { return spec().dtype(); }
  int64_t dim() const { return spec().ndim(); }
  // The global size of dim d (negative counts from the end).
  int64_t size(int64_t d) const;
  // Elements of the global tensor.
  int64_t numel() const;
  // The same tensor converted to `dtype` shard by shard (itself when the
  // dtype matches). Placements are kept, except that an integral or bool
  // target reduces Partial(sum|avg) first (truncated pieces do not sum to
  // the truncated sum). Differentiable between floating dtypes.
  DTensor to(DType dtype) const;

  // The shards held by this process.
  const LocalTensor& local() const { return local_; }
  // The shard of `rank`. REQUIRES: this process holds it.
  Tensor to_local(int rank) const { return local_.shard(rank); }
  // The shard of the only rank this process holds (MPI); throws in a
  // simulated world holding several ranks (use to_local(rank) there).
  Tensor to_local() const;
  // Whether `other` has this spec and, on every rank this process holds,
  // the same storage and start (copies of one DTensor, or a view onto the
  // same elements); true when this process holds no rank.
  bool same_shards(const DTensor& other) const;

  // The global tensor (all-gathers and reduces as needed), as every rank sees it.
  Tensor full_tensor() const;
  // The same tensor with other placements, moved by the cheapest plan under
  // the mesh's cost model (see redistribute.h; plans are cached). Throws for
  // S->P, P(a)->P(b), or a Partial introduced on a mesh dim that was not
  // already that Partial.
  DTensor redistribute(const Placements& placements,
                       const RedistributeOptions& options = {}) const;
  // REQUIRES: mesh == this->mesh() (redistributing across meshes is not supported yet).
  DTensor redistribute(const DeviceMesh& mesh, const Placements& placements,
                       const RedistributeOptions& options = {}) const;

  // ---- autograd (autograd.h) ------------------------------------------------------
  // Copies of a DTensor share its gradient state (a copy is the same tensor,
  // as a second Python name is), provided requires_grad_ ran before the copy.
  bool requires_grad() const;
  // Makes this leaf require (or stop requiring) gradients; only leaves,
  // and only floating dtypes, may. Returns *this.
  DTensor& requires_grad_(bool requires_grad = true);
  // Not made by a recorded op (a tensor that does not require grad is a leaf too).
  bool is_leaf() const;
  // Whether `other` is this tensor: a copy that shares its gradient state
  // (both require grad, copied after requires_grad_()). Python's `is`.
  bool is_same(const DTensor& other) const {
    return autograd_ != nullptr && autograd_ == other.autograd_;
  }
  // The gradient accumulated by backward() (leaves, and tensors that
  // retain_grad()); nullopt before the first backward or after zero_grad().
  std::optional<DTensor> grad() const;
  // Replaces the gradient (nullopt clears it); its shape, dtype and mesh
  // must be this tensor's.
  void set_grad(std::optional<DTensor> grad);
  // Clears the gradient (set_to_none, PyTorch's default).
  void zero_grad() { set_grad(std::nullopt); }
  // A non-leaf that requires grad keeps its gradient in grad() too.
  void retain_grad() const;
  // The same data, out of the graph (does not require grad).
  DTensor detach() const;
  // The name of the op that made this tensor ("" for a leaf).
  const char* grad_fn_name() const;
  // Gradients of this tensor with respect to the leaves that made it, added
  // into their grad(). `gradient` defaults to ones for a one-element tensor
  // (anything else needs one). The graph is freed unless retain_graph.
  void backward(const std::optional<DTensor>& gradient = std::nullopt,
                bool retain_graph = false) const;

  // ---- method forms of the ops of ops.h (x.sum() is sum(x)) ---------------------------
  DTensor sum(const DimVector& dims = {}, bool keepdim = false) const;
  DTensor mean(const DimVector& dims = {}, bool keepdim = false) const;
  DTensor amax(const DimVector& dims = {}, bool keepdim = false) const;
  DTensor amin(const DimVector& dims = {}, bool keepdim = false) const;
  DTensor prod(const DimVector& dims = {}, bool keepdim = false) const;
  DTensor var(const DimVector& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  DTensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  DTensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  DTensor matmul(const DTensor& other) const;
  DTensor mm(const DTensor& other) const;
  DTensor bmm(const DTensor& other) const;
  DTensor view(const Shape& shape) const;
  DTensor reshape(const Shape& shape) const;
  DTensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  DTensor squeeze() const;
  DTensor squeeze(int64_t dim) const;
  DTensor unsqueeze(int64_t dim) const;
  DTensor permute(const DimVector& dims) const;
  DTensor transpose(int64_t d0, int64_t d1) const;
  // The transpose of a 2-d tensor (0-d and 1-d: itself).
  DTensor t() const;
  DTensor expand(const Shape& shape) const;
  // torch.Tensor.view_as / expand_as / type_as: view(other.shape()),
  // expand(other.shape()), to(other.dtype()) (their layouts and gradients).
  DTensor view_as(const DTensor& other) const { return view(other.shape()); }
  DTensor expand_as(const DTensor& other) const { return expand(other.shape()); }
  DTensor type_as(const DTensor& other) const { return to(other.dtype()); }
  DTensor narrow(int64_t dim, int64_t start, int64_t length) const;
  DTensor select(int64_t dim, int64_t index) const;
  std::vector<DTensor> chunk(int64_t n, int64_t dim = 0) const;
  std::vector<DTensor> split(int64_t split_size, int64_t dim = 0) const;
  DTensor contiguous() const;
  DTensor clone() const;
  DTensor neg() const;
  DTensor abs() const;
  DTensor exp() const;
  DTensor log() const;
  DTensor sqrt() const;
  DTensor rsqrt() const;
  DTensor tanh() const;
  DTensor sigmoid() const;
  DTensor relu() const;
  DTensor pow(Scalar exponent) const;
  DTensor softmax(int64_t dim) const;
  DTensor log_softmax(int64_t dim) const;

  // ---- in place (src/ops/inplace.cc) ----------------------------------------------
  // The result is written into this DTensor's own shards: its placements and
  // storage stay, and every shard's version counter moves (a tensor saved
  // for backward and changed since makes backward() throw). Operands are
  // redistributed to what this layout needs under the out-of-place op's
  // rule (ops.h): a Partial(sum) self adding a replicated value gets it on
  // one rank of each group, not on all; mul_ by a replicated factor keeps
  // Partial(sum). When the op would need this tensor to move (clamp_ of a
  // Partial(sum), add_ to a Partial(max) of anything but a replicated value,
  // a broadcast that grows self) dtensor::Error names the op, the
  // placements and the layout the out-of-place op would take: redistribute
  // first. Operands must live on the same mesh.
  // Autograd: in grad mode a leaf that requires grad may not be changed
  // (update parameters under NoGradGuard); otherwise, when this tensor or
  // an operand requires grad, the op is recorded and this tensor (with the
  // copies sharing its gradient state) becomes its output. Not tracked:
  // changes through another DTensor sharing the shards' memory (a view).
  // Returns *this.
  DTensor& add_(const DTensor& other, Scalar alpha = 1);  // this += alpha * other
  DTensor& sub_(const DTensor& other, Scalar alpha = 1);
  DTensor& mul_(const DTensor& other);
  DTensor& div_(const DTensor& other);
  DTensor& add_(Scalar other);
  DTensor& sub_(Scalar other);
  DTensor& mul_(Scalar other);
  DTensor& div_(Scalar other);
  // A plain Tensor operand mixes as in the out-of-place ops (ops.h): one
  // element always, any other shape inside an implicit_replication scope.
  DTensor& add_(const Tensor& other, Scalar alpha = 1);
  DTensor& sub_(const Tensor& other, Scalar alpha = 1);
  DTensor& mul_(const Tensor& other);
  DTensor& div_(const Tensor& other);
  // src broadcast to this shape and converted to this dtype.
  DTensor& copy_(const DTensor& src);
  DTensor& copy_(const Tensor& src);
  DTensor& fill_(Scalar value);
  DTensor& zero_();
  // this += value * t1 * t2, this += value * t1 / t2.
  DTensor& addcmul_(const DTensor& t1, const DTensor& t2, Scalar value = 1);
  DTensor& addcdiv_(const DTensor& t1, const DTensor& t2, Scalar value = 1);
  // this += weight * (end - this).
  DTensor& lerp_(const DTensor& end, Scalar weight);
  DTensor& lerp_(const DTensor& end, const DTensor& weight);
  // Values below min become min, then values above max become max (NaN
  // stays). Partial(max|min) and shards are kept; Partial(sum|avg) throw.
  DTensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  // Tensor bounds (an undefined one is absent): max(this, min), then
  // min(., max), NaN-propagating as torch's; the bounds move to a layout
  // maximum/minimum's rule allows next to this one (src/ops/inplace_more.cc).
  DTensor& clamp_(const DTensor& min, const DTensor& max);
  // value wherever mask (bool, broadcast to this shape) is true.
  DTensor& masked_fill_(const DTensor& mask, Scalar value);
  DTensor& operator+=(const DTensor& other) { return add_(other); }
  DTensor& operator-=(const DTensor& other) { return sub_(other); }
  DTensor& operator*=(const DTensor& other) { return mul_(other); }
  DTensor& operator/=(const DTensor& other) { return div_(other); }
  DTensor& operator+=(Scalar other) { return add_(other); }
  DTensor& operator-=(Scalar other) { return sub_(other); }
  DTensor& operator*=(Scalar other) { return mul_(other); }
  DTensor& operator/=(Scalar other) { return div_(other); }
  DTensor& operator+=(const Tensor& other) { return add_(other); }
  DTensor& operator-=(const Tensor& other) { return sub_(other); }
  DTensor& operator*=(const Tensor& other) { return mul_(other); }
  DTensor& operator/=(const Tensor& other) { return div_(other); }

 private:
  friend struct autograd::MetaAccess;
  [[noreturn]] static void throw_empty();
  std::optional<DTensorSpec> spec_;
  LocalTensor local_;
  std::shared_ptr<autograd::Meta> autograd_;  // null until it requires grad
};

// Every held rank keeps its part of `full`. Without src_rank each rank cuts
// its part from its own `full` (no communication; all ranks must pass the
// same tensor); with src_rank, `full` as held by src_rank is sent out a mesh
// dim at a time (a scatter over each Shard dim, then a broadcast of the
// pieces over the others), so each rank receives only its part. Partial
// placements split the value as R->P does. The DTensor's shards are its own:
// no shard shares memory with `full` or with another rank's shard.
DTensor distribute_tensor(const Tensor& full, const DeviceMesh& mesh, const Placements& placements,
                          std::optional<int> src_rank = std::nullopt);

struct FromLocalOptions {
  // The global shape; needed for uneven shards. Without a shape, shards are
  // assumed even: global size = local size x shards on that dim.
  std::optional<Shape> shape = std::nullopt;
  // The global strides. Only the contiguous (row-major) strides of the
  // global shape are supported; anything else throws.
  std::optional<Shape> stride = std::nullopt;
  // Check that every shard has the shape and dtype the spec gives it. When
  // false the shards are trusted here, and a wrong shape is caught (as an
  // Error naming the rank, its shape and the expected one) when the data is
  // used: by full_tensor, redistribute and ops that move their inputs.
  bool run_check = true;
  // Autograd: the result is a leaf that requires grad, and its gradient is
  // moved to `grad_placements` before it is added into grad(), so that
  // grad().local() is the gradient of the shards given. Unset: the
  // placements given, with Partial as Replicate (PyTorch's from_local
  // backward: Shard stays Shard, Replicate stays Replicate - an all_reduce
  // when the gradient arrives Partial - and Partial becomes Replicate).
  bool requires_grad = false;
  std::optional<Placements> grad_placements = std::nullopt;
};

// A DTensor from the shards this process holds (one per held rank of the
// mesh). As in PyTorch the shard of a rank is not copied: it aliases the
// tensor given for that rank (as under MPI, where it is the process's own
// tensor). A tensor given for several ranks is copied for all but the
// lowest, so that ranks never share memory.
DTensor from_local(const LocalTensor& local, const DeviceMesh& mesh, const Placements& placements,
                   const FromLocalOptions& options = {});
// The same, with the shard of each held rank made by make_shard(rank).
DTensor from_local(const std::function<Tensor(int rank)>& make_shard, const DeviceMesh& mesh,
                   const Placements& placements, const FromLocalOptions& options = {});

std::string visualize_sharding(const DTensor& d);

}  // namespace dtensor

// Ops on DTensors (add, mm, sum, ...), part of the core.
#include "dtensor/ops.h"
