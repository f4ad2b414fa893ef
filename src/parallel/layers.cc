// The tensor-parallel layers of parallel.h: each one is an nn module with
// the parallel style of tensor_parallel.h that lays it out (styles.cc), so
// the layers and parallelize_module share one mechanism. Also
// with_placement and the vocabulary-parallel cross entropy.
#include "dtensor/parallel.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/graph.h"
#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/tensor_parallel.h"
#include "parallel/vocab_ce_kernel.h"
#include "tensor/dispatch.h"

namespace dtensor {

namespace {

void check_tp(const DeviceMesh& mesh, int tp, const char* layer) {
  DT_CHECK(tp >= 0 && tp < mesh.ndim(), layer, ": tensor-parallel mesh dim ", tp,
           " is out of range for a mesh of ", mesh.ndim(), " dims (", mesh.to_string(), ")");
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

DTensor with_placement(const DTensor& x, int mesh_dim, Placement p,
                       const RedistributeOptions& options) {
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
  return x.redistribute(to, options);
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
//
// Fused: one pass over each row of each rank's class slice (the local max,
// the sum of exps against it, the target's logit when the rank owns its
// class; vocab_ce_kernel.cc), then small tensors of the targets' shape
// cross the tp group: the global max (an all_reduce max), the rescaled sums
// (an all_reduce sum), and the mean's total and count (one all_reduce of two
// doubles over every mesh dim, merged with the data-parallel one).

namespace {

// A shard placement with its dim counted from the front (order kept).
Placement front_dim(Placement p, int64_t ndim) {
  if (!p.is_shard() || p.dim() >= 0) return p;
  return p.shard_order() < 0 ? Shard(p.dim() + ndim) : Shard(p.dim() + ndim, p.shard_order());
}

// The logits' layout the loss works on: Shard(c) on tp; on the other mesh
// dims the logits' own placement, except that a Partial or a split of the
// class dim becomes Replicate, so that every rank of a tp group holds whole
// rows of its class slice and the tp group alone covers the classes.
Placements class_layout(const Placements& given, int tp, int64_t c) {
  Placements p = given;
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = front_dim(p[i], c + 1);
    if (static_cast<int>(i) == tp)
      p[i] = Shard(c);
    else if (p[i].is_partial() || p[i].is_shard(c))
      p[i] = Replicate();
  }
  return p;
}

// The layout of per-token values (the targets' shape) matching a
// class_layout: the token dims split as the logits' are, so that a rank's
// rows of logits and its targets are the same tokens; Replicate on tp.
Placements token_layout(const Placements& classes, int tp) {
  Placements p = classes;
  p[static_cast<size_t>(tp)] = Replicate();
  return p;
}

// `layout` with `on_tp` on mesh dim tp.
Placements with_tp(Placements layout, int tp, Placement on_tp) {
  layout[static_cast<size_t>(tp)] = on_tp;
  return layout;
}

// x with placements p, itself when it has them already (S(-1) and S(ndim-1)
// are the same layout: no redistribute, and x keeps its own spelling).
DTensor moved_to(const DTensor& x, const Placements& p) {
  const Placements& have = x.placements();
  bool same = have.size() == p.size();
  for (size_t i = 0; same && i < p.size(); ++i)
    same = front_dim(have[i], x.dim()) == front_dim(p[i], x.dim());
  return same ? x : x.redistribute(p);
}

// Whether x is of a World::shape_only, where the kernels below do not run:
// the same DTensors and collectives are made of meta shards.
bool shapes_only(const DTensor& x) { return x.mesh().world().is_shape_only(); }

// A DTensor of the targets' shape (dtype `dtype`) with `placements`, whose
// shard on each held rank is make(rank) (a meta tensor of its shape in a
// shape-only world, where make is not called).
template <class F>
DTensor token_tensor(const DTensor& like, const Placements& placements, DType dtype, F&& make) {
  const bool meta = shapes_only(like);
  return DTensor(DTensorSpec(like.mesh(), placements, like.shape(), dtype),
                 like.local().map([&](int rank, const Tensor& t) {
                   return meta ? Tensor::meta(t.shape(), dtype) : make(rank);
                 }));
}

// One rank's local pass (vocab_ce_row_stats), each of its targets' local
// shape: the row max and picked logit in the logits' dtype, the sum of exps
// in double (it stays on this process).
struct RowStats {
  Tensor max, sum, picked;
};

// Rank `rank`'s entry of what vocab_parallel_cross_entropy worked out per
// held rank (`what` names it for the internal error).
template <class T>
const T& of_rank(const std::vector<std::pair<int, T>>& per_rank, int rank, const char* what) {
  for (const auto& [r, v] : per_rank)
    if (r == rank) return v;
  DT_THROW("internal error: ", "vocab_parallel_cross_entropy has no ", what, " of rank ", rank);
}

// The gradient of the loss w.r.t. the logits z, shard by shard: row r's is
// coef_r * (softmax(z) - onehot(target)) with coef_r = g_r * w_r / count
// (g_r the incoming gradient: one number, or the row's own for reduction
// None; w_r the row's weight, 0 when ignored), with the count of the
// rank's own mesh (a sub-mesh's views count their own targets: one number
// per process would be one view's in a simulated world, which holds them
// all, and each process's own under MPI). Brings what it is given to the
// forward's layouts first (a no-op except under VerifyMode, which hands it
// replicated copies).
DTensor vocab_ce_backward(const DTensor& grad, const DTensor& z_saved, const DTensor& tgt_saved,
                          const DTensor& max_saved, const DTensor& sum_saved,
                          const DTensor& weight_saved, int tp, int64_t ignore_index,
                          Reduction reduction, const std::vector<std::pair<int, double>>& counts) {
  const int64_t c = z_saved.dim() - 1;
  const Placements classes = class_layout(z_saved.placements(), tp, c);
  const DTensor z = moved_to(z_saved, classes);
  const Placements tokens = token_layout(classes, tp);
  const DTensor tgt = moved_to(tgt_saved, tokens);
  const DTensor mx = moved_to(max_saved, tokens);
  const DTensor sm = moved_to(sum_saved, tokens);
  const DTensor wt = moved_to(weight_saved, tokens);
  const bool per_row = reduction == Reduction::None;
  const DTensor g = moved_to(
      grad, per_row ? tokens : Placements(static_cast<size_t>(grad.mesh().ndim()), Replicate()));
  if (shapes_only(z))
    return DTensor(z.spec(), z.local().map([](int, const Tensor& shard) {
      return Tensor::meta(shard.shape(), shard.dtype());
    }));
  LocalTensor out;
  detail::dispatch_floating(z.dtype(), "vocab_parallel_cross_entropy", [&]<class T>() {
    out = z.local().map([&](int rank, const Tensor& shard) {
      const Tensor x = shard.contiguous();
      const Tensor t = tgt.to_local(rank).contiguous();
      const Tensor m = mx.to_local(rank).contiguous();
      const Tensor s = sm.to_local(rank).contiguous();
      const std::vector<double> w = wt.to_local(rank).contiguous().to_vector<double>();
      const std::vector<double> gv = g.to_local(rank).to(DType::Float64).contiguous().to_vector<double>();
      // The mean's count of targets (their weights' sum), or 1.
      const double count = of_rank(counts, rank, "count");
      std::vector<double> coefs(w.size());
      for (size_t r = 0; r < w.size(); ++r) coefs[r] = gv[per_row ? r : 0] / count * w[r];
      Tensor gz = Tensor::empty(x.shape(), x.dtype());
      const int64_t n = x.shape()[static_cast<size_t>(c)];
      const int64_t offset = z.spec().extent_of_rank(rank)->global_offset[static_cast<size_t>(c)];
      detail::vocab_ce_grad<T>(x.data_ptr<T>(), t.numel(), n, offset, t.data_ptr<int64_t>(),
                               ignore_index, m.data_ptr<T>(), s.data_ptr<T>(), coefs.data(),
                               gz.data_ptr<T>());
      return gz;
    });
  });
  return DTensor(z.spec(), std::move(out));
}

}  // namespace

DTensor vocab_parallel_cross_entropy(const DTensor& logits, const DTensor& target, int tp,
                                     int64_t ignore_index) {
  return vocab_parallel_cross_entropy(logits, target, tp, {.ignore_index = ignore_index});
}

DTensor vocab_parallel_cross_entropy(const DTensor& logits, const DTensor& target, int tp,
                                     const VocabParallelLossOptions& o) {
  const char* op = "vocab_parallel_cross_entropy";
  check_tp(logits.mesh(), tp, op);
  DT_CHECK(logits.dim() >= 1 && target.dim() == logits.dim() - 1, op,
           ": logits and target must differ by the class dim, got logits ", logits.shape(),
           " and target ", target.shape());
  DT_CHECK(target.dtype() == DType::Int64, op, ": target must be int64 class indices, got ",
           dtype_short_name(target.dtype()));
  DT_CHECK(is_floating(logits.dtype()), op, ": logits must be of a floating dtype, got ",
           dtype_short_name(logits.dtype()));
  DT_CHECK(target.mesh() == logits.mesh(), op, ": logits and target must be on one mesh, got ",
           logits.mesh().to_string(), " and ", target.mesh().to_string());
  const int64_t class_dim = wrap_dim(o.class_dim, logits.dim(), op);
  // Classes elsewhere than last (F.cross_entropy's (N, C, d1, ...)): moved
  // last by a view, which autograd carries back; the target is the logits'
  // shape without them either way.
  if (class_dim != logits.dim() - 1) {
    DimVector perm;
    for (int64_t d = 0; d < logits.dim(); ++d)
      if (d != class_dim) perm.push_back(d);
    perm.push_back(class_dim);
    VocabParallelLossOptions last = o;
    last.class_dim = -1;
    return vocab_parallel_cross_entropy(permute(logits, perm), target, tp, last);
  }
  for (int64_t d = 0; d < target.dim(); ++d)
    DT_CHECK(target.shape()[d] == logits.shape()[d], op, ": target ", target.shape(),
             " must be the logits' shape ", logits.shape(), " without the class dim");
  // The 16-bit floats compute in float32 (the widened logits, softmax
  // statistics and gradient) and the loss is rounded once, as cross_entropy.
  if (is_half(logits.dtype()))
    return vocab_parallel_cross_entropy(logits.to(DType::Float32), target, tp, o)
        .to(logits.dtype());
  const DeviceMesh& mesh = logits.mesh();
  const int64_t c = logits.dim() - 1;
  const int64_t classes = logits.shape()[c];
  // The class weights, whole on every rank in double (one number per class).
  std::vector<double> class_weight;
  if (o.weight) {
    DT_CHECK(o.weight->dim() == 1 && o.weight->shape()[0] == classes && is_floating(o.weight->dtype()),
             op, ": weight must be floating of shape [", classes, "] (one per class), got ",
             dtype_short_name(o.weight->dtype()), " of shape ", o.weight->shape());
    DT_CHECK(o.weight->mesh() == mesh, op, ": weight must be on the logits' mesh ",
             mesh.to_string(), ", got ", o.weight->mesh().to_string());
    class_weight = o.weight->full_tensor().to(DType::Float64).to_vector<double>();
  }
  // A redistribute that autograd records when the layout has to move: the
  // gradient then goes back to the logits' own layout, as from any op.
  const Placements class_slices = class_layout(logits.placements(), tp, c);
  const DTensor z = moved_to(logits, class_slices);
  const Placements tokens = token_layout(class_slices, tp);
  const DTensor tgt = moved_to(target.detach(), tokens);
  // Every rank of a tp group sees the same targets (Replicate on tp), so a
  // bad one is reported by the whole group, as cross_entropy would report it.
  const int64_t ignore_index = o.ignore_index;
  const bool meta = shapes_only(logits);
  if (!meta) tgt.local().for_each([&](int, const Tensor& t) {
    for (int64_t v : t.contiguous().to_vector<int64_t>())
      DT_CHECK(v == ignore_index || (v >= 0 && v < classes), op, ": target ", v,
               " is out of bounds: expected a class index in [0, ", classes,
               ") or ignore_index (", ignore_index, ")");
  });
  // Each row's weight: its class's (1 without weights), 0 when ignored.
  const DTensor row_weight = token_tensor(tgt, tokens, DType::Float64, [&](int rank) {
    std::vector<double> w;
    for (int64_t v : tgt.to_local(rank).contiguous().to_vector<int64_t>())
      w.push_back(v == ignore_index ? 0.0 : o.weight ? class_weight[static_cast<size_t>(v)] : 1.0);
    return Tensor::from_vector(w, tgt.to_local(rank).shape());
  });
  const DType dtype = logits.dtype();
  DTensor loss, global_max, global_sum;
  std::vector<std::pair<int, double>> counts;  // per held rank, ascending
  detail::dispatch_floating(dtype, op, [&]<class T>() {
    // The local pass: per rank, the row max, sum of exps (double, kept on
    // this process) and the picked logit, each of the targets' local shape.
    std::vector<std::pair<int, RowStats>> stats;
    if (!meta) z.local().for_each([&](int rank, const Tensor& shard) {
      const Tensor x = shard.contiguous();
      const Tensor t = tgt.to_local(rank).contiguous();
      const int64_t n = x.shape()[static_cast<size_t>(c)];
      const int64_t offset = z.spec().extent_of_rank(rank)->global_offset[static_cast<size_t>(c)];
      RowStats s{Tensor::empty(t.shape(), dtype), Tensor::empty(t.shape(), DType::Float64),
              Tensor::empty(t.shape(), dtype)};
      detail::vocab_ce_row_stats<T>(x.data_ptr<T>(), t.numel(), n, offset, t.data_ptr<int64_t>(),
                                    ignore_index, s.max.data_ptr<T>(), s.sum.data_ptr<double>(),
                                    s.picked.data_ptr<T>());
      stats.emplace_back(rank, std::move(s));
    });
    auto of = [&](int rank) -> const RowStats& { return of_rank(stats, rank, "statistics"); };
    // The global max M: an all_reduce max over tp.
    global_max = token_tensor(tgt, with_tp(tokens, tp, Partial(ReduceOp::Max)), dtype,
                       [&](int rank) { return of(rank).max; })
              .redistribute(tokens);
    // S = sum over tp of s_r * exp(m_r - M): an all_reduce sum. Each rank
    // also keeps M - z[target] for the targets it owns, in double (the
    // difference of two nearby large numbers is exact there; a float sum of
    // logits would lose the loss under them when the logits are large),
    // weighted by the row's weight.
    std::vector<std::pair<int, std::vector<double>>> owned;
    global_sum = token_tensor(tgt, with_tp(tokens, tp, Partial()), dtype, [&](int rank) {
              const RowStats& s = of(rank);
              const Tensor m = global_max.to_local(rank).contiguous();
              const Tensor t = tgt.to_local(rank).contiguous();
              const T* mg = m.data_ptr<T>();
              const T* ml = s.max.data_ptr<T>();
              const double* sl = s.sum.data_ptr<double>();
              const T* pk = s.picked.data_ptr<T>();
              const int64_t* tv = t.data_ptr<int64_t>();
              const Tensor& shard = z.to_local(rank);
              const int64_t n = shard.shape()[static_cast<size_t>(c)];
              const int64_t offset =
                  z.spec().extent_of_rank(rank)->global_offset[static_cast<size_t>(c)];
              Tensor out = Tensor::empty(t.shape(), dtype);
              T* out_v = out.data_ptr<T>();
              std::vector<double> own(static_cast<size_t>(t.numel()), 0.0);
              for (int64_t r = 0; r < t.numel(); ++r) {
                // An empty class slice (or rows of -inf) adds nothing, and
                // exp(-inf - M) must not turn into NaN when M is -inf too.
                out_v[r] = sl[r] == 0 ? T(0)
                                      : static_cast<T>(sl[r] * std::exp(static_cast<double>(ml[r]) -
                                                                        static_cast<double>(mg[r])));
                if (tv[r] != ignore_index && tv[r] >= offset && tv[r] < offset + n)
                  own[static_cast<size_t>(r)] = static_cast<double>(mg[r]) - static_cast<double>(pk[r]);
              }
              owned.emplace_back(rank, std::move(own));
              return out;
            }).redistribute(tokens);
    auto owned_of = [&](int rank) -> const std::vector<double>& {
      return of_rank(owned, rank, "terms");
    };
    if (o.reduction == Reduction::None) {
      // Per target: w (log S + M - z[target]), the owned terms summed over
      // tp (one all_reduce of a tensor of the targets' shape).
      const DTensor terms = token_tensor(tgt, with_tp(tokens, tp, Partial()), DType::Float64,
                                         [&](int rank) {
                                           return Tensor::from_vector(owned_of(rank),
                                                                      tgt.to_local(rank).shape());
                                         })
                                .redistribute(tokens);
      loss = token_tensor(tgt, tokens, dtype, [&](int rank) {
        const std::vector<double> t = terms.to_local(rank).contiguous().to_vector<double>();
        const std::vector<double> w = row_weight.to_local(rank).contiguous().to_vector<double>();
        const Tensor s = global_sum.to_local(rank).contiguous();
        const T* sv = s.data_ptr<T>();
        Tensor out = Tensor::empty(tgt.to_local(rank).shape(), dtype);
        T* ov = out.data_ptr<T>();
        for (size_t r = 0; r < t.size(); ++r)
          ov[r] = w[r] == 0 ? T(0)
                            : static_cast<T>(w[r] * (std::log(static_cast<double>(sv[r])) + t[r]));
        counts.emplace_back(rank, 1.0);
        return out;
      });
      return;
    }
    // The mean or sum: loss per token = w (log S + M - z[target]). The first
    // rank of each tp group adds the w log S and the weights, every rank its
    // owned w (M - z[target]); the total and the weights' sum then go in one
    // all_reduce over the tp dim and the dims the tokens are split on.
    Placements partial_sums = tokens;
    for (size_t i = 0; i < partial_sums.size(); ++i)
      if (static_cast<int>(i) == tp || partial_sums[i].is_shard()) partial_sums[i] = Partial();
    const DTensor totals =
        DTensor(DTensorSpec(mesh, partial_sums, Shape{2}, DType::Float64),
                tgt.local().map([&](int rank, const Tensor&) {
                  if (meta) return Tensor::meta({2}, DType::Float64);
                  const std::vector<double> w =
                      row_weight.to_local(rank).contiguous().to_vector<double>();
                  const std::vector<double>& own = owned_of(rank);
                  double total = 0, counted = 0;
                  for (size_t r = 0; r < w.size(); ++r) total += w[r] * own[r];
                  if ((*mesh.coordinate(rank))[static_cast<size_t>(tp)] == 0) {
                    const Tensor s = global_sum.to_local(rank).contiguous();
                    const T* sv = s.data_ptr<T>();
                    for (size_t r = 0; r < w.size(); ++r) {
                      if (w[r] == 0) continue;
                      total += w[r] * std::log(static_cast<double>(sv[r]));
                      counted += w[r];
                    }
                  }
                  return Tensor::from_vector(std::vector<double>{total, counted});
                }))
            .redistribute(Placements(static_cast<size_t>(mesh.ndim()), Replicate()));
    // As cross_entropy's mean: ignored targets add nothing and are not
    // counted (all ignored: 0/0 = NaN, as in PyTorch); a weighted mean
    // divides by the targets' weights.
    const bool mean = o.reduction == Reduction::Mean;
    LocalTensor out = totals.local().map([&](int rank, const Tensor& tt) {
      if (meta) return Tensor::meta({}, dtype);
      const std::vector<double> v = tt.to_vector<double>();
      counts.emplace_back(rank, mean ? v[1] : 1.0);
      return Tensor::scalar(mean ? v[0] / v[1] : v[0], dtype);
    });
    loss = DTensor(DTensorSpec(mesh, Placements(static_cast<size_t>(mesh.ndim()), Replicate()),
                               Shape{}, dtype),
                   std::move(out));
  });
  // One backward node for the whole loss; the targets get no gradient.
  if (autograd::recording({&z}))
    autograd::record(loss, op, {&z}, {z, tgt, global_max, global_sum, row_weight},
                     [tp, ignore_index, reduction = o.reduction, counts](const autograd::Context& ctx) {
                       return autograd::Grads{vocab_ce_backward(
                           ctx.grad, ctx.saved(0), ctx.saved(1), ctx.saved(2), ctx.saved(3),
                           ctx.saved(4), tp, ignore_index, reduction, counts)};
                     });
  return loss;
}

}  // namespace dtensor
