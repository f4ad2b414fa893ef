// Data parallelism on nn::Module: fully_shard (PyTorch's FSDP2,
// torch.distributed.fsdp.fully_shard) and replicate (PyTorch's composable
// DDP, torch.distributed._composable.replicate).
//
//   for (auto& block : model.blocks) fully_shard(*block);   // bottom-up, as in FSDP2
//   fully_shard(model);                 // the rest: embeddings, head, ...
//   DTensor loss = ...model(x)...;      // x batch-sharded over dp
//   loss.backward();                    // grads on the sharded parameters
//   for (auto& [name, p] : model.named_parameters()) ...   // sharded: step on the shards
//
// fully_shard replaces each parameter it manages by a leaf that holds the
// same value laid out Shard(0) over the data-parallel mesh dims (keeping its
// placement on every other mesh dim, e.g. a tensor-parallel Shard(1)); when
// another mesh dim already shards dim 0, dp splits after it (shard order:
// S(0)[1],S(0)[0] on (dp, tp) for a tp Shard(0) weight). A
// module's managed parameters form one group: before its forward the group
// is all-gathered in ONE collective (one flat buffer per rank: each
// parameter's shard padded to its chunk size), and the module reads the
// unsharded values; after its forward it reads the shards again
// (reshard_after_forward), and backward gathers the group again once, when
// it first needs an unsharded value (saved-tensor hooks, autograd.h). The
// unsharded values are differentiable functions of the sharded leaves:
// the group's backward is ONE reduce_scatter (sum over dp) of the group's
// flat gradient. docs/fsdp.md has what matches FSDP2 and what differs.
//
// replicate keeps the parameters Replicate over the dp dims and makes each
// gradient arrive Replicate there: the Partial(sum) gradient of a
// batch-sharded step is all-reduced (one all_reduce per parameter).
//
// Both are applied once per module, after any tensor parallelism and before
// the optimizer is made. Thread safety: a model is trained by one thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <variant>

#include <optional>
#include <vector>

#include "dtensor/nn.h"

namespace dtensor {

// Mixed precision for fully_shard and replicate, as FSDP2's
// MixedPrecisionPolicy (torch.distributed.fsdp.MixedPrecisionPolicy). The
// sharded parameters, their gradients and the optimizer's state keep the
// parameters' own dtype (float32: the master weights); unset fields change
// nothing.
//   param_dtype: fully_shard casts each shard to it before the all-gather,
//     which then carries it (bfloat16: half the bytes of float32), and the
//     module computes with the gathered values in it. replicate ignores it.
//   reduce_dtype: every gradient reduction of the module's parameters runs
//     in it: fully_shard's reduce-scatter (and the all-reduce of a gradient
//     Partial on a tensor-parallel dim before it), replicate's all-reduce;
//     the result is cast to the parameter's dtype once, after the reduction.
//     Unset: param_dtype's (FSDP2's rule), else the gradient's own.
//   output_dtype: the module's floating outputs are cast to it.
//   cast_forward_inputs: the module's floating input is cast to param_dtype.
// docs/mixed_precision.md has the rounding this gives and what is exact.
struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype = std::nullopt;
  std::optional<DType> reduce_dtype = std::nullopt;
  std::optional<DType> output_dtype = std::nullopt;
  bool cast_forward_inputs = true;
};

struct FullyShardOptions {
  // The data-parallel mesh dims the parameters are sharded over (ascending;
  // several are flattened into one, row-major, as one collective group).
  std::vector<int> mesh_dims = {0};
  // HSDP (FSDP2's fully_shard on a 2-d mesh): data-parallel mesh dims the
  // parameters are replicated over, not sharded (ascending, none of
  // mesh_dims). The batch is split over these too; backward reduce-scatters
  // each group's gradient over mesh_dims, then all-reduces the shard over
  // these (one all_reduce of 1/shard-group of the bytes), as FSDP2's HSDP.
  std::vector<int> replicate_mesh_dims = {};
  // Free the unsharded parameters after forward (gather again in backward).
  // The root (a fully_shard module inside no other, found at its first
  // forward) always keeps them until after backward, as FSDP2 does: its
  // backward starts right away. An int k (FSDP2's int: 1 < k < the dp
  // group's size, dividing it; one dp mesh dim) keeps them sharded over k
  // ranks instead: the dp group's consecutive runs of k ranks (a host's, on
  // a mesh laid out host by host) each hold one copy, 1/k of it per rank,
  // so backward all-gathers over k ranks rather than all of them.
  std::variant<bool, int> reshard_after_forward = true;
  MixedPrecisionPolicy mp_policy = {};
  // FSDP2's shard_placement_fn: the tensor dim each parameter is sharded on
  // over mesh_dims, fn(name, parameter) -> Shard(d), or nullopt for the
  // default Shard(0) (e.g. Shard(1) for weights whose dim 0 is too small to
  // split evenly, or experts' weights). Negative dims count from the end.
  std::function<std::optional<Placement>(const std::string& name, const DTensor& param)>
      shard_placement_fn = nullptr;
  // Prefetch (FSDP2's implicit prefetching): start the all_gather of the
  // group that gathers next before this one computes: in forward the next
  // group in the order of the first forward, in backward the previous one.
  // Under MPI the gather is MPI_Iallgather, so its data moves while this
  // group computes; in the simulated world it runs at once. The values and
  // bits are the same either way; the prefetched group's unsharded
  // parameters are alive one group earlier. A gather outdated by a change
  // of the shards (an optimizer step) is discarded, never used.
  bool prefetch = false;
  // Overlap of the gradients' reduce_scatter with backward (FSDP2's, which
  // always overlaps on its own CUDA stream): a group's reduce_scatter is
  // started when its backward is done and waited for when the next
  // group's starts, or at the end of backward. Under MPI it is an
  // MPI_Ialltoall folded in member order at the wait (the bits of the
  // blocking call), advanced (MPI_Test) as the next group's gradients
  // arrive; one is in flight at a time, and its flat gradient and a
  // receive buffer of that size live until the wait. In the simulated
  // world it runs at once. Off by default: it only pays where the MPI
  // library moves data without the CPU the ranks compute on (a progress
  // thread on spare cores, a network that offloads it); on a machine whose
  // cores all compute, with Open MPI's shared memory, the copies just move
  // into MPI_Test and a step got slower (docs/PERFORMANCE.md).
  bool async_reduce_scatter = false;
};

// Shards the parameters of `module` (and its descendants) not already
// managed by an inner fully_shard over options.mesh_dims and installs the
// forward hooks that gather and free them. Throws dtensor::Error for a mesh
// dim out of range or repeated, a parameter already sharded on a dp dim or
// Partial anywhere, a 0-d parameter, parameters of several dtypes in one
// group, or a module already fully_shard'ed or replicate'd.
void fully_shard(nn::Module& module, const FullyShardOptions& options = {});

// Whether fully_shard was applied to this module.
bool is_fully_sharded(const nn::Module& module);

// The data-parallel mesh dims of fully_shard (mesh_dims and HSDP's
// replicate_mesh_dims) or replicate applied to this module, ascending;
// empty when neither was. Each rank feeds such a module its own part of the
// batch: in the global view, the batch (dim 0) is Shard(0) over these dims.
// (The Python module call makes a plain-tensor input the rank's part this
// way, as PyTorch's FSDP2 and DDP take each rank's local batch.)
std::vector<int> data_parallel_mesh_dims(const nn::Module& module);

// FSDP2's FSDPModule methods, as free functions on a module fully_shard
// was applied to (anything else throws); with `recurse`, on every
// fully_shard module under it too.
//
// Gradient accumulation without communication: while false, backward
// reduce-scatters nothing and gives the sharded parameters no gradient;
// each group keeps its unsharded flat gradient (a full copy of the
// group's gradients per rank, as FSDP2's unsharded grads), summed over the
// backwards, and the next backward with sync adds it in before its one
// reduce-scatter. The result equals reduce-scattering every backward and
// accumulating the shards, up to float rounding (the sum is taken before
// the reduction instead of after).
void set_requires_gradient_sync(nn::Module& module, bool requires_gradient_sync,
                                bool recurse = true);
// FSDP2's FSDPModule.reshard(): the fully_shard groups of module (and of
// the modules under it with recurse) that hold gathered values drop them,
// and their parameters are the sharded leaves again. A root keeps its
// values from forward until its backward (as FSDP2's); a forward whose
// backward never runs (with grad, then a checkpoint or no backward at all)
// leaves them there. A backward after reshard still has what its graph
// saved. checkpoint::get_state_dict calls it (FSDP2's state-dict hooks do).
// Throws when fully_shard was not applied to module, unless if_any.
void reshard(nn::Module& module, bool recurse = false, bool if_any = false);
// FullyShardOptions::reshard_after_forward, changed from the next forward on.
void set_reshard_after_forward(nn::Module& module, bool reshard_after_forward,
                               bool recurse = true);
// The module's own group's reduced gradients are divided by `factor`
// (> 0), in reduce_dtype, before the cast to the parameters' dtype.
// Default 1: the reduce-scatter sums over dp, which is right for a loss
// that is the global batch's mean (dtensor's losses are DTensors of the
// whole batch). FSDP2 divides by the dp size by default, its loss being a
// per-rank mean; a loss computed per rank and summed would set the dp size
// here to get FSDP2's gradients.
void set_gradient_divide_factor(nn::Module& module, double factor);
// FSDP2's explicit prefetching: once `module` has gathered in forward
// (backward), it starts the gathers of `modules` (each fully_shard'ed), in
// place of the neighbour FullyShardOptions::prefetch would pick. An empty
// list goes back to that. Values and bits are the same either way.
void set_modules_to_forward_prefetch(nn::Module& module, const std::vector<nn::Module*>& modules);
void set_modules_to_backward_prefetch(nn::Module& module, const std::vector<nn::Module*>& modules);
// How many gradient reduce_scatters of this thread's backward fully_shard
// has started and not yet waited for (async_reduce_scatter): 1 while the
// next group's backward computes, 0 once backward has returned. For tests
// and debugging.
size_t reduce_scatters_in_flight();

// Data parallelism without sharding: every parameter of `module` is
// Replicate on `mesh_dims` and its gradient is all-reduced over them, so it
// arrives Replicate (the value of the whole batch's gradient). Throws for a
// mesh dim out of range, a parameter sharded or Partial on a dp dim, or a
// module already fully_shard'ed or replicate'd.
void replicate(nn::Module& module, const std::vector<int>& mesh_dims = {0});

struct ReplicateOptions {
  std::vector<int> mesh_dims = {0};
  // Only reduce_dtype applies: the all-reduce of each gradient runs in it.
  MixedPrecisionPolicy mp_policy = {};
};
void replicate(nn::Module& module, const ReplicateOptions& options);

}  // namespace dtensor
