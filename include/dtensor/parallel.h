// Tensor-parallel layers: Megatron-LM's layers as small standalone
// classes, each an nn module with one parallel style of tensor_parallel.h
// applied (ColwiseParallel, RowwiseParallel, SequenceParallel): the same
// mechanism parallelize_module uses on a model, for code that wants a layer
// without a module tree. Also loss_parallel (vocab_parallel_cross_entropy)
// and with_placement.
//
// Every layer is built on a mesh and the index of its tensor-parallel mesh
// dim `tp`. Parameters are given as full tensors (every process passes the
// same values, e.g. from one seed) and laid out Replicate on every other
// mesh dim, so a second mesh dim is data parallel: shard the batch there and
// the layers leave it alone. Inputs may arrive in any layout; each layer
// moves only the tp mesh dim to the placement it computes on, which is a
// no-op when consecutive layers agree (the Megatron pairing below).
//
// The Megatron MLP on a (dp, tp) mesh, activations [batch, seq, hidden]:
//
//   ColumnParallelLinear up(mesh, 1, w1, b1);     // W1 S(0): out features split
//   RowParallelLinear down(mesh, 1, w2, b2);      // W2 S(1): in features split
//   DTensor y = down(gelu(up(x)));                // x (S(0), R) -> y (S(0), R)
//   // up's output is S(-1) on tp, exactly what down wants: one all_reduce.
//
// Parameters are leaves that require grad (as nn.Parameter): after
// loss.backward(), layer.weight().grad() holds the gradient, sharded like
// the weight; the replicated ones (a row-parallel bias, a norm's weight)
// get Partial(sum) gradients where each rank saw part of the data. Backward
// runs Megatron's collectives (docs/autograd.md).
//
// With sequence parallelism the activations between blocks are sharded on
// the sequence dim on tp: SequenceParallelLayerNorm runs on those slices,
// ColumnParallelLinear all-gathers its input, and RowParallelLinear with
// output Shard(1) reduce-scatters instead of all-reducing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "dtensor/distributed_tensor.h"
#include "dtensor/ops.h"

namespace dtensor {

namespace nn {
class Linear;
class Embedding;
class LayerNorm;
}  // namespace nn

// x redistributed so that mesh dim `mesh_dim` has placement `p` (a negative
// shard dim counts from the end); the other mesh dims keep theirs. Returns x
// itself when it is already so. `options` are the redistribute's (its
// backward_dtype: the dtype the gradient moves back in).
DTensor with_placement(const DTensor& x, int mesh_dim, Placement p,
                       const RedistributeOptions& options = {});

// Column-parallel Linear (ColwiseParallel; Megatron's ColumnParallelLinear):
// y = x W^T + b with W (out, in) as Shard(0) on tp and b as Shard(0): each
// rank computes its slice of the output features.
// Input: made Replicate on tp first (an all_gather when it arrives sharded,
// e.g. on the sequence dim from a sequence-parallel region).
// Output: on tp, `output` (Shard(-1), the default: the local features, what
// a RowParallelLinear or a per-head attention wants; Replicate gathers them).
// Backward: each rank's slice gives a partial input gradient; they are
// summed into x's own layout on tp (one all_reduce, or one reduce_scatter
// when x arrived sequence-sharded), as Megatron's layer does.
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(const DeviceMesh& mesh, int tp, const Tensor& weight,
                       const std::optional<Tensor>& bias = std::nullopt,
                       Placement output = Shard(-1));
  DTensor operator()(const DTensor& x) const;
  const DTensor& weight() const;
  const DTensor* bias() const;  // null without one

 private:
  std::shared_ptr<nn::Linear> module_;
};

// Row-parallel Linear (RowwiseParallel; Megatron's RowParallelLinear):
// W (out, in) as Shard(1) on tp, so each rank multiplies its slice of the
// input features; the products are Partial(sum) on tp. The bias is
// replicated and added once (on tp coordinate 0, before the reduction).
// Input: made Shard(-1) on tp (nothing to do after a ColumnParallelLinear; a
// local chunk from Replicate).
// Output: on tp, `output`: Replicate (the default: an all_reduce), Shard(d)
// (a reduce_scatter onto dim d: the entry of a sequence-parallel region), or
// Partial() to leave the reduction to the caller.
// Backward: the input gradient needs no collective (after a
// ColumnParallelLinear it is already Shard(-1)); a Shard(d) output's
// gradient is all-gathered back.
class RowParallelLinear {
 public:
  RowParallelLinear(const DeviceMesh& mesh, int tp, const Tensor& weight,
                    const std::optional<Tensor>& bias = std::nullopt,
                    Placement output = Replicate());
  DTensor operator()(const DTensor& x) const;
  const DTensor& weight() const;
  const DTensor* bias() const;  // null without one

 private:
  std::shared_ptr<nn::Linear> module_;
};

// Vocabulary-parallel embedding (Megatron's VocabParallelEmbedding;
// RowwiseParallel on nn.Embedding): the table (V, D) as Shard(0) on tp; each
// rank looks the ids up in its own rows and leaves zeros for the others,
// a masked Partial(sum). Ids (int64, any shape) are made Replicate on tp.
// Output: on tp, `output`: Replicate (an all_reduce, the default), Shard(d)
// (a reduce_scatter: sequence parallel), or Partial().
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(const DeviceMesh& mesh, int tp, const Tensor& table,
                         Placement output = Replicate());
  DTensor operator()(const DTensor& ids) const;
  const DTensor& weight() const;

 private:
  std::shared_ptr<nn::Embedding> module_;
};

// A sequence-parallel LayerNorm (SequenceParallel on a norm): weight and
// bias (D) replicated; the input is made Shard(sequence_dim) on tp (nothing
// to do after a reduce-scattering RowParallelLinear; a free local chunk from
// Replicate) and each rank normalises its slice of the sequence, so the
// output stays Shard(sequence_dim). The last dim is the normalised one.
class SequenceParallelLayerNorm {
 public:
  SequenceParallelLayerNorm(const DeviceMesh& mesh, int tp, const Tensor& weight,
                            const Tensor& bias, int64_t sequence_dim = 1, double eps = 1e-5);
  DTensor operator()(const DTensor& x) const;
  const DTensor& weight() const;
  const DTensor& bias() const;

 private:
  std::shared_ptr<nn::LayerNorm> module_;
};

// Cross-entropy on logits sharded on the class (last) dim over tp without
// gathering them (loss_parallel; Megatron's vocab-parallel cross entropy):
// logits (..., V) with Shard(-1) on tp, target int64 (...) of class indices.
// Fused: each rank makes one pass over each row of its slice of the
// classes (its max, its sum of exponentials, the target's logit where it
// owns the class) instead of gathering the logits. Collectives, all of
// tensors of the target's shape or smaller: an all_reduce max over tp (the
// global max), an all_reduce sum over tp (the sum of exponentials), and
// one all_reduce of the mean's total and count over tp and the mesh dims
// the batch is split on. Returns the mean over the targets that are not
// ignore_index (Replicate), equal to cross_entropy(logits.full_tensor()
// .reshape({-1, V}), target.full_tensor().reshape({-1}), Reduction::Mean,
// ignore_index); all ignored gives NaN. Float32 or float64 logits. A
// target outside [0, V) that is not ignore_index throws dtensor::Error.
// Backward: one node, computed on each rank's slice without a collective;
// the logits' gradient is laid out like the logits. On a sub-mesh
// (mesh["tp"]) each view is its own loss: its mean over its own targets.
// The overload with VocabParallelLossOptions adds F.cross_entropy's class
// weights, reductions and class dim (below).
DTensor vocab_parallel_cross_entropy(const DTensor& logits, const DTensor& target, int tp,
                                     int64_t ignore_index = -100);

// F.cross_entropy's other arguments under loss_parallel.
struct VocabParallelLossOptions {
  int64_t ignore_index = -100;
  // Mean (over the targets' weights when weighted), Sum, or None: the loss
  // of each target (0 where ignored), of the target's shape and laid out
  // as the target's tokens (Replicate on tp).
  Reduction reduction = Reduction::Mean;
  // Per-class weights, floating of shape (classes), any layout on the
  // logits' mesh: each target's loss is multiplied by its class's weight.
  std::optional<DTensor> weight = std::nullopt;
  // The class dim: -1 (last, as the model's logits are), or 1 as in
  // F.cross_entropy's (N, C, d1, ...); the target is the logits' shape
  // without it. Sharded on tp wherever it is.
  int64_t class_dim = -1;
};
DTensor vocab_parallel_cross_entropy(const DTensor& logits, const DTensor& target, int tp,
                                     const VocabParallelLossOptions& options);

}  // namespace dtensor
