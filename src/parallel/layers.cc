// The tensor-parallel layers of parallel.h: each one is an nn module with
// the parallel style of tensor_parallel.h that lays it out (styles.cc), so
// the layers and parallelize_module share one mechanism. Also
// with_placement and the vocabulary-parallel cross entropy.
#include "dtensor/parallel.h"

#include <string>

#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor {

namespace {

void check_tp(const DeviceMesh& mesh, int tp, const char* layer) {
  DT_CHECK(tp >= 0 && tp < mesh.ndim(), layer, ": tensor-parallel mesh dim ", tp,
           " is out of range for a mesh of ", mesh.ndim(), " dims (", mesh.to_string(), ")");
}

// Replicate on every mesh dim but tp, `on_tp` there.
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
    // Keep a shard order (S(-1)[k]) when naming the dim from the front.
    p = p.shard_order() < 0 ? Shard(p.dim() + x.dim()) : Shard(p.dim() + x.dim(), p.shard_order());
  }
  if (x.placements()[static_cast<size_t>(mesh_dim)] == p) return x;
  Placements to = x.placements();
  to[static_cast<size_t>(mesh_dim)] = p;
  return x.redistribute(to);
}

// ---- the layers: a module with a style applied ----

namespace {

std::optional<Tensor> checked_bias(const std::optional<Tensor>& bias, const Tensor& weight,
                                   const char* layer) {
  if (bias)
    DT_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0), layer, ": bias must be (out) = (",
             weight.size(0), "), got shape ", bias->shape());
  return bias;
}

// The module on mesh dim tp, with `style` applied (named after the layer in
// messages).
template <class M>
std::shared_ptr<M> styled(std::shared_ptr<M> module, int tp, const ParallelStyle& style,
                          const char* layer) {
  apply_style(*module, layer, tp, style);
  return module;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const DeviceMesh& mesh, int tp, const Tensor& weight,
                                           const std::optional<Tensor>& bias, Placement output) {
  const char* layer = "ColumnParallelLinear";
  check_tp(mesh, tp, layer);
  check_output(output, layer);
  check_rank(weight, 2, layer, "weight", "(out, in)");
  module_ = styled(std::make_shared<nn::Linear>(mesh, weight, checked_bias(bias, weight, layer)), tp,
                   ColwiseParallel{.output_layouts = output}, layer);
}

DTensor ColumnParallelLinear::operator()(const DTensor& x) const { return (*module_)(x); }
const DTensor& ColumnParallelLinear::weight() const { return module_->weight(); }
const DTensor* ColumnParallelLinear::bias() const { return module_->bias(); }

RowParallelLinear::RowParallelLinear(const DeviceMesh& mesh, int tp, const Tensor& weight,
                                     const std::optional<Tensor>& bias, Placement output) {
  const char* layer = "RowParallelLinear";
  check_tp(mesh, tp, layer);
  check_output(output, layer);
  check_rank(weight, 2, layer, "weight", "(out, in)");
  module_ = styled(std::make_shared<nn::Linear>(mesh, weight, checked_bias(bias, weight, layer)), tp,
                   RowwiseParallel{.output_layouts = output}, layer);
}

DTensor RowParallelLinear::operator()(const DTensor& x) const { return (*module_)(x); }
const DTensor& RowParallelLinear::weight() const { return module_->weight(); }
const DTensor* RowParallelLinear::bias() const { return module_->bias(); }

VocabParallelEmbedding::VocabParallelEmbedding(const DeviceMesh& mesh, int tp, const Tensor& table,
                                               Placement output) {
  const char* layer = "VocabParallelEmbedding";
  check_tp(mesh, tp, layer);
  check_output(output, layer);
  check_rank(table, 2, layer, "table", "(vocab, dim)");
  module_ = styled(std::make_shared<nn::Embedding>(mesh, table), tp,
                   RowwiseParallel{.output_layouts = output}, layer);
}

DTensor VocabParallelEmbedding::operator()(const DTensor& ids) const { return (*module_)(ids); }
const DTensor& VocabParallelEmbedding::weight() const { return module_->weight(); }

SequenceParallelLayerNorm::SequenceParallelLayerNorm(const DeviceMesh& mesh, int tp,
                                                     const Tensor& weight, const Tensor& bias,
                                                     int64_t sequence_dim, double eps) {
  const char* layer = "SequenceParallelLayerNorm";
  check_tp(mesh, tp, layer);
  check_rank(weight, 1, layer, "weight", "(dim)");
  check_rank(bias, 1, layer, "bias", "(dim)");
  DT_CHECK(bias.shape() == weight.shape(), layer, ": bias shape ", bias.shape(),
           " differs from weight shape ", weight.shape());
  module_ = styled(std::make_shared<nn::LayerNorm>(mesh, weight, bias, eps), tp,
                   SequenceParallel{.sequence_dim = sequence_dim}, layer);
}

DTensor SequenceParallelLayerNorm::operator()(const DTensor& x) const { return (*module_)(x); }
const DTensor& SequenceParallelLayerNorm::weight() const { return module_->weight(); }
const DTensor& SequenceParallelLayerNorm::bias() const { return module_->bias(); }

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
