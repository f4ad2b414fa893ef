// Tensor parallelism through a plan: the parallel styles of PyTorch's
// torch.distributed.tensor.parallel applied to an nn::Module tree by
// parallelize_module.
//
//   nn::Module& model = ...;                         // written as on one device
//   parallelize_module(model, /*tp_mesh_dim=*/1, {
//       {"tok", RowwiseParallel{.output_layouts = Shard(1)}},
//       {"blocks.*.attention.wq", ColwiseParallel{}},
//       {"blocks.*.attention.wo", RowwiseParallel{.output_layouts = Shard(1)}},
//       {"blocks.*.ln1", SequenceParallel{}}, ...});
//
// A style redistributes its module's parameters on the tp mesh dim only
// (every other mesh dim keeps its placement, so a data-parallel dim stays
// as it was) by assigning new leaves through named_parameters()' pointers,
// and registers forward hooks that move the input's and the output's
// placement on the tp mesh dim; the module's forward() is unchanged.
// Backward runs Megatron's collectives: a column-parallel module sums its
// input gradient over tp into the input's own layout (one all_reduce, or a
// reduce_scatter when the input arrived sequence-sharded), a row-parallel
// one needs none for its input.
//
// Differences from PyTorch: inputs and outputs are always DTensors, so
// there is no use_local_output (an nn::Module returns a DTensor), and
// `input_layouts` does not wrap a local tensor: when given, an input that
// arrives otherwise on tp is first moved to it. Layouts name the tp mesh
// dim's placement only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dtensor/nn.h"
#include "dtensor/parallel.h"

namespace dtensor {

// Column-parallel: nn::Linear W (out, in) Shard(0) and its bias Shard(0) on
// tp, input made Replicate (all-gathered when sharded), output Shard(-1)
// (each rank's output features). On nn::Embedding: the table (num, dim)
// Shard(1), ids made Replicate, output Shard(-1).
struct ColwiseParallel {
  std::optional<Placement> input_layouts = std::nullopt;
  Placement output_layouts = Shard(-1);
};

// Row-parallel: nn::Linear W Shard(1) on tp, bias Replicate (added once,
// before the reduction), input made Shard(-1), output Replicate (an
// all_reduce; Shard(d) reduce-scatters, the entry of a sequence-parallel
// region; Partial() leaves the sum to the caller). On nn::Embedding
// (vocabulary parallel): the table Shard(0), ids made Replicate, each rank
// fills the ids in its rows (a masked Partial), output as for a Linear.
struct RowwiseParallel {
  std::optional<Placement> input_layouts = std::nullopt;
  Placement output_layouts = Replicate();
};

// Sequence-parallel nn::LayerNorm or nn::RMSNorm: weight (and bias) Replicate on tp, input
// made Shard(sequence_dim) (free from Replicate; nothing after a
// reduce-scattering row-parallel module), each rank normalising its slice
// of the sequence; the output stays Shard(sequence_dim). Its parameters get
// Partial(sum) gradients over tp.
struct SequenceParallel {
  int64_t sequence_dim = 1;
};

// Any module: the input moved to `desired_input_layouts` on tp before
// forward() (after being moved to `input_layouts` if given). Backward
// brings the gradient back to the input's own tp placement.
struct PrepareModuleInput {
  std::optional<Placement> input_layouts = std::nullopt;
  Placement desired_input_layouts = Replicate();
};

// Any module: the output moved to `desired_output_layouts` on tp.
struct PrepareModuleOutput {
  std::optional<Placement> output_layouts = std::nullopt;
  Placement desired_output_layouts = Replicate();
};

using ParallelStyle = std::variant<ColwiseParallel, RowwiseParallel, SequenceParallel,
                                   PrepareModuleInput, PrepareModuleOutput>;

// "ColwiseParallel(output_layouts=S(-1))", ...
std::string to_string(const ParallelStyle& style);

// Dotted module names to styles, applied in order. Each dot-separated part
// is matched as Python's fnmatch matches it, as PyTorch's
// parallelize_module does: `*` any run of characters within the part,
// `?` any one, `[seq]` / `[!seq]` one in / not in seq (ranges like `1-3`).
// "blocks.*.mlp.w1" matches "blocks.0.mlp.w1" but not "blocks.0.x.mlp.w1";
// "blocks.[0-1].attention.w?" the q, k, v and o projections of the first
// two blocks; "" names the root.
using ParallelizePlan = std::vector<std::pair<std::string, ParallelStyle>>;

// Applies `style` to `module` (named `name` in messages), the tp mesh dim
// being `tp_mesh_dim` of the module's mesh. Throws dtensor::Error for a
// style on a module type it does not support.
struct ParallelizeOptions {
  // The dtype the styles' gradient reductions run in: the moves of their
  // inputs and outputs are redistributes with this backward_dtype, so
  // Megatron's all-reduce of an input gradient (and sequence parallelism's
  // reduce-scatter) reduces in it, e.g. float32 gradients of bfloat16
  // activations (MixedPrecisionPolicy::reduce_dtype of the same step).
  // Unset: the gradient's own dtype.
  std::optional<DType> reduce_dtype = std::nullopt;
};

void apply_style(nn::Module& module, const std::string& name, int tp_mesh_dim,
                 const ParallelStyle& style, const ParallelizeOptions& options = {});

// Applies each plan entry to every module of `root` its name matches.
// Throws dtensor::Error, before changing anything, for an entry matching no
// module or a tp mesh dim out of range; and (from apply_style) for a style
// on an unsupported module type.
// REQUIRES: the parameters are not yet held by an optimizer (it would keep
// the old leaves); parallelize before making one, as in PyTorch.
void parallelize_module(nn::Module& root, int tp_mesh_dim, const ParallelizePlan& plan,
                        const ParallelizeOptions& options = {});

// The style of the plan's last entry matching `module_name`, if any.
std::optional<ParallelStyle> style_for(const ParallelizePlan& plan,
                                       const std::string& module_name);

// Whether `name` matches the plan pattern `pattern` (see ParallelizePlan).
bool module_name_matches(const std::string& pattern, const std::string& name);

}  // namespace dtensor
