// The tensor-parallel layers of parallel.h: each one lays out its
// parameters once, then per call moves its input's tp placement to the one
// it computes on, runs the DTensor ops, and moves the output's tp placement
// to the one asked for. The ops' sharding propagation does the rest (and
// needs no communication for the pairings the layers are designed for).
#include "dtensor/parallel.h"

#include <string>

#include "dtensor/error.h"

namespace dtensor {

namespace {

void check_tp(const DeviceMesh& mesh, int tp, const char* layer) {
  DT_CHECK(tp >= 0 && tp < mesh.ndim(), layer, ": tensor-parallel mesh dim ", tp,
           " is out of range for a mesh of ", mesh.ndim(), " dims (", mesh.to_string(), ")");
}

// Replicate on every mesh dim but tp, `on_tp` there.
// A parameter: `full` laid out by `placements`, a leaf that requires grad
// (as an nn.Parameter). A floating parameter only: integer tables cannot.
DTensor parameter(const Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  DTensor p = distribute_tensor(full, mesh, placements);
  if (full.dtype() == DType::Float32 || full.dtype() == DType::Float64) p.requires_grad_();
  return p;
}

Placements param_placements(const DeviceMesh& mesh, int tp, Placement on_tp) {
  Placements p(static_cast<size_t>(mesh.ndim()), Replicate());
  p[static_cast<size_t>(tp)] = on_tp;
  return p;
}

void check_rank(const Tensor& t, int64_t ndim, const char* layer, const char* what,
                const char* expected) {
  DT_CHECK(t.dim() == ndim, layer, ": ", what, " must be ", expected, ", got shape ", t.shape());
}

void check_output(Placement p, const char* layer) {
  DT_CHECK(p.is_replicate() || p.is_shard() || p == Partial(), layer,
           ": output placement must be Replicate, Shard(d) or Partial(sum), got ", to_string(p));
}

}  // namespace

DTensor with_placement(const DTensor& x, int mesh_dim, Placement p) {
  DT_CHECK(mesh_dim >= 0 && mesh_dim < x.mesh().ndim(), "with_placement: mesh dim ", mesh_dim,
           " is out of range for a mesh of ", x.mesh().ndim(), " dims (", x.mesh().to_string(), ")");
  if (p.is_shard() && p.dim() < 0) {
    DT_CHECK(p.dim() + x.dim() >= 0, "with_placement: ", to_string(p), " names no dim of a ",
             x.dim(), "-d tensor of shape ", x.shape());
    p = Shard(p.dim() + x.dim());
  }
  if (x.placements()[static_cast<size_t>(mesh_dim)] == p) return x;
  Placements to = x.placements();
  to[static_cast<size_t>(mesh_dim)] = p;
  return x.redistribute(to);
}

// ---- ColumnParallelLinear ----

ColumnParallelLinear::ColumnParallelLinear(const DeviceMesh& mesh, int tp, const Tensor& weight,
                                           const std::optional<Tensor>& bias, Placement output)
    : tp_((check_tp(mesh, tp, "ColumnParallelLinear"), tp)),
      output_((check_output(output, "ColumnParallelLinear"), output)),
      weight_((check_rank(weight, 2, "ColumnParallelLinear", "weight", "(out, in)"),
               parameter(weight, mesh, param_placements(mesh, tp, Shard(0))))) {
  if (bias) {
    DT_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0),
             "ColumnParallelLinear: bias must be (out) = (", weight.size(0), "), got shape ",
             bias->shape());
    bias_ = parameter(*bias, mesh, param_placements(mesh, tp, Shard(0)));
  }
}

namespace {

// x made Replicate on mesh dim `tp` for a layer that computes on the full
// input, with its gradient brought back to x's own layout on tp (Partial as
// Replicate): the partial input gradients of the ranks' slices are summed
// there - Megatron's all_reduce in backward, or its reduce_scatter when x
// arrives sequence-sharded - even when the forward had nothing to move.
DTensor replicated_with_reduced_grad(const DTensor& x, int tp) {
  Placements to = x.placements();
  to[static_cast<size_t>(tp)] = Replicate();
  RedistributeOptions options;
  options.grad_placements = x.placements();
  for (Placement& p : *options.grad_placements)
    if (p.is_partial()) p = Replicate();
  return x.redistribute(to, options);
}

}  // namespace

DTensor ColumnParallelLinear::operator()(const DTensor& x) const {
  const DTensor in = replicated_with_reduced_grad(x, tp_);
  const DTensor y = bias_ ? linear(in, weight_, *bias_) : linear(in, weight_);
  return with_placement(y, tp_, output_);
}

// ---- RowParallelLinear ----

RowParallelLinear::RowParallelLinear(const DeviceMesh& mesh, int tp, const Tensor& weight,
                                     const std::optional<Tensor>& bias, Placement output)
    : tp_((check_tp(mesh, tp, "RowParallelLinear"), tp)),
      output_((check_output(output, "RowParallelLinear"), output)),
      weight_((check_rank(weight, 2, "RowParallelLinear", "weight", "(out, in)"),
               parameter(weight, mesh, param_placements(mesh, tp, Shard(1))))) {
  if (bias) {
    DT_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0),
             "RowParallelLinear: bias must be (out) = (", weight.size(0), "), got shape ",
             bias->shape());
    bias_ = parameter(*bias, mesh, param_placements(mesh, tp, Replicate()));
  }
}

DTensor RowParallelLinear::operator()(const DTensor& x) const {
  const DTensor in = with_placement(x, tp_, Shard(-1));
  const DTensor y = bias_ ? linear(in, weight_, *bias_) : linear(in, weight_);
  return with_placement(y, tp_, output_);
}

// ---- VocabParallelEmbedding ----

VocabParallelEmbedding::VocabParallelEmbedding(const DeviceMesh& mesh, int tp,
                                               const Tensor& table, Placement output)
    : tp_((check_tp(mesh, tp, "VocabParallelEmbedding"), tp)),
      output_((check_output(output, "VocabParallelEmbedding"), output)),
      table_((check_rank(table, 2, "VocabParallelEmbedding", "table", "(vocab, dim)"),
              parameter(table, mesh, param_placements(mesh, tp, Shard(0))))) {}

DTensor VocabParallelEmbedding::operator()(const DTensor& ids) const {
  DT_CHECK(ids.dtype() == DType::Int64, "VocabParallelEmbedding: ids must be int64, got ",
           dtype_short_name(ids.dtype()), " of shape ", ids.shape());
  const DTensor y = embedding(table_, with_placement(ids, tp_, Replicate()));
  return with_placement(y, tp_, output_);
}

// ---- SequenceParallelLayerNorm ----

SequenceParallelLayerNorm::SequenceParallelLayerNorm(const DeviceMesh& mesh, int tp,
                                                     const Tensor& weight, const Tensor& bias,
                                                     int64_t sequence_dim, double eps)
    : tp_((check_tp(mesh, tp, "SequenceParallelLayerNorm"), tp)),
      sequence_dim_(sequence_dim),
      eps_(eps),
      weight_((check_rank(weight, 1, "SequenceParallelLayerNorm", "weight", "(dim)"),
               parameter(weight, mesh, param_placements(mesh, tp, Replicate())))),
      bias_((check_rank(bias, 1, "SequenceParallelLayerNorm", "bias", "(dim)"),
             parameter(bias, mesh, param_placements(mesh, tp, Replicate())))) {
  DT_CHECK(bias.shape() == weight.shape(), "SequenceParallelLayerNorm: bias shape ", bias.shape(),
           " differs from weight shape ", weight.shape());
}

DTensor SequenceParallelLayerNorm::operator()(const DTensor& x) const {
  DT_CHECK(x.dim() >= 2 && sequence_dim_ >= -x.dim() && sequence_dim_ < x.dim() - 1 &&
               sequence_dim_ != -1,
           "SequenceParallelLayerNorm: sequence dim ", sequence_dim_,
           " must be a dim before the normalised last dim of the input of shape ", x.shape());
  const DTensor in = with_placement(x, tp_, Shard(sequence_dim_));
  return layer_norm(in, {weight_.shape()[0]}, weight_, bias_, eps_);
}

// ---- vocab_parallel_cross_entropy ----

DTensor vocab_parallel_cross_entropy(const DTensor& logits, const DTensor& target, int tp,
                                     int64_t ignore_index) {
  const char* op = "vocab_parallel_cross_entropy";
  check_tp(logits.mesh(), tp, op);
  DT_CHECK(logits.dim() >= 1 && target.dim() == logits.dim() - 1, op,
           ": logits (..., classes) and target (...) must differ by the class dim, got logits ",
           logits.shape(), " and target ", target.shape());
  DT_CHECK(target.dtype() == DType::Int64, op, ": target must be int64 class indices, got ",
           dtype_short_name(target.dtype()));
  const int64_t c = logits.dim() - 1;
  const int64_t classes = logits.shape()[c];
  // Every rank of a tp group sees the same targets (Replicate on tp), so a
  // bad one is reported by the whole group, as cross_entropy would report it.
  const DTensor tgt = with_placement(target, tp, Replicate());
  tgt.local().for_each([&](int, const Tensor& t) {
    for (int64_t v : t.contiguous().to_vector<int64_t>())
      DT_CHECK(v == ignore_index || (v >= 0 && v < classes), op, ": target ", v,
               " is out of bounds: expected a class index in [0, ", classes,
               ") or ignore_index (", ignore_index, ")");
  });
  // log softmax over the sharded class dim, in the numerically stable form:
  // z = logits - max, loss = log(sum(exp(z))) - z[target].
  const DTensor z_in = with_placement(logits, tp, Shard(c));
  // The max only shifts the logits for stability: the loss does not depend
  // on it, so it is a constant for autograd (Megatron's choice too), which
  // spares backward an amax gradient that sums to zero.
  const DTensor max =
      with_placement(amax(z_in.detach(), {c}, /*keepdim=*/true), tp, Replicate());
  const DTensor z = z_in - max;
  const DTensor log_sum =
      log(with_placement(sum(exp(z), {c}, /*keepdim=*/true), tp, Replicate()));
  // z[target]: every rank compares the class indices it holds with the
  // targets; only the owner of a target's class contributes a non-zero (an
  // ignored target, outside [0, classes), matches no class).
  const Placements class_layout = param_placements(logits.mesh(), tp, Shard(0));
  const DTensor class_ids = distribute_tensor(Tensor::arange(classes), logits.mesh(), class_layout);
  const DTensor hit = eq(class_ids, unsqueeze(tgt, -1));
  const DTensor picked = with_placement(sum(where(hit, z, 0.0), {c}, true), tp, Replicate());
  // As cross_entropy's mean: ignored targets add nothing and are not
  // counted (all ignored: 0/0 = NaN, as in PyTorch). The summed losses and
  // the count travel in one tensor of two elements, so a batch sharded over
  // other mesh dims costs one all_reduce, as a plain mean does.
  const DTensor counts = ne(tgt, ignore_index);
  const DTensor losses = squeeze(log_sum - picked, c);
  const DTensor parts = stack({where(counts, losses, 0.0), where(counts, ones_like(losses), 0.0)});
  DimVector token_dims;
  for (int64_t d = 1; d < parts.dim(); ++d) token_dims.push_back(d);
  const DTensor totals =
      (token_dims.empty() ? parts : sum(parts, token_dims))
          .redistribute(Placements(static_cast<size_t>(logits.mesh().ndim()), Replicate()));
  return div(select(totals, 0, 0), select(totals, 0, 1));
}

}  // namespace dtensor
