// Neural-network math on DTensors: softmax, log_softmax, layer_norm,
// rms_norm, nll_loss, cross_entropy and embedding. The local kernels are the
// plain Tensor ops; the strategies say which dims may stay sharded.
//
// A row-wise op (softmax over `dim`, a norm over the trailing dims) needs
// each row whole on one rank, so those dims are gathered and every other dim
// passes through. The losses are per-target sums, so batch or spatial dims
// sharded alike on input and target give sharded per-target losses, or
// partial sums of them. A lookup is linear in the table, so a Partial table
// gives a Partial output, and a row-sharded table gives a Partial(sum) in
// which every rank fills only the rows it owns (PyTorch's MaskPartial).
#include <algorithm>
#include <limits>
#include <string>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/autocast.h"
#include "tensor/half_compute.h"
#include "ops/dims.h"

namespace dtensor {

using namespace dispatch;

namespace {


// "input dtype must be floating point" as the plain NN ops word it.
void check_floating(DType dtype, const char* op, const char* hint = "") {
  DT_CHECK(is_floating(dtype), op, ": input dtype must be floating point (float32 or float64), got ",
           dtype, hint);
}

// The plain op's shape error with the placements appended, the way the
// dispatcher words errors of output_meta (for checks made outside it).
template <class F>
void with_placements(const char* op, const DTensor& a, const DTensor& b, F&& check) {
  try {
    check();
  } catch (const Error& e) {
    const std::string msg = e.what();
    const std::string prefix = std::string(op) + ": ";
    DT_THROW(msg.rfind(prefix, 0) == 0 ? "" : prefix, msg, " (DTensor placements ",
             to_string(a.placements()), " and ", to_string(b.placements()), " on ", a.mesh(),
             ")");
  }
}

// ---- softmax / log_softmax ------------------------------------------------------
// args: dim (normalised when in range; output_meta raises the plain error otherwise).

TensorMeta softmax_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  const char* op = s.op == OpId::Softmax ? "softmax" : "log_softmax";
  check_floating(x.dtype(), op, "; convert the input with .to(DType::Float32) first");
  wrap_dim(s.args[0], std::max<int64_t>(x.ndim(), 1), op);
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

void softmax_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    if (d != s.args[0]) c.push_back({{Shard(d)}, Shard(d)});
  c.push_back({{kR}, kR});
}

constexpr OpRule kSoftmax{"softmax", softmax_meta, softmax_strategies};
constexpr OpRule kLogSoftmax{"log_softmax", softmax_meta, softmax_strategies};

// The dims a softmax over `dim` reduces in its backward (all of a 0-d x).
DimVector softmax_dims(const DTensor& x, int64_t dim) {
  return x.dim() == 0 ? DimVector{} : DimVector{wrap_dim_if_valid(dim, x.dim())};
}

// ---- layer_norm / rms_norm --------------------------------------------------------
// args: k = len(normalized_shape), its k sizes, has_weight, has_bias.
// Inputs: x, then weight and bias when given.

struct NormArgs {
  Shape normalized_shape;
  bool has_weight = false, has_bias = false;
};

NormArgs norm_args(const OpSchema& s) {
  NormArgs a;
  const int64_t k = s.args[0];
  for (int64_t i = 0; i < k; ++i) a.normalized_shape.push_back(s.args[1 + i]);
  a.has_weight = s.args[1 + k] != 0;
  a.has_bias = s.args[2 + k] != 0;
  return a;
}

// The checks of the plain op's check_norm_shapes, on global shapes.
TensorMeta norm_meta(const OpSchema& s) {
  const char* op = s.op == OpId::LayerNorm ? "layer_norm" : "rms_norm";
  const DTensorSpec& x = s.input(0);
  const NormArgs a = norm_args(s);
  const Shape& ns = a.normalized_shape;
  check_floating(x.dtype(), op);
  const size_t k = ns.size();
  DT_CHECK(k >= 1, op, ": normalized_shape must have at least one dim, got ", ns);
  bool ok = k <= x.shape().size();
  for (size_t i = 0; ok && i < k; ++i) ok = ns[i] == x.shape()[x.shape().size() - k + i];
  DT_CHECK(ok, op, ": normalized_shape ", ns,
           " does not match the trailing dims of the input of shape ", x.shape(),
           " (expected an input of shape [*, ", to_string(ns).substr(1), ")");
  int next = 1;
  if (a.has_weight) {
    const Shape& w = s.input(next++).shape();
    DT_CHECK(w == ns, op, ": weight of shape ", w, " does not match normalized_shape ", ns);
  }
  if (a.has_bias) {
    const Shape& b = s.input(next).shape();
    DT_CHECK(b == ns, op, ": bias of shape ", b, " does not match normalized_shape ", ns);
  }
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

// Leading dims stay sharded; weight and bias (inputs 1, 2) are replicated
// (DimStrategy's default placement).
// Over a replicated x the output is linear in (weight, bias) together and
// monotone in bias alone: Partial(sum|avg) parameters give that Partial
// (a replicated one taken as a Partial: R -> P is local), and a
// Partial(max|min) bias beside a replicated weight gives that Partial.
void norm_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const int64_t lead = static_cast<int64_t>(out.shape.size()) - s.args[0];
  for (int64_t d = 0; d < lead; ++d) c.push_back({{Shard(d)}, Shard(d)});
  const bool has_w = s.args[s.num_args - 2] != 0, has_b = s.args[s.num_args - 1] != 0;
  auto params = [&](Placement w, Placement b, Placement o) {
    if (has_w && has_b) c.push_back({{kR, w, b}, o});
    else if (has_w) c.push_back({{kR, w}, o});
    else if (has_b) c.push_back({{kR, b}, o});
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
    if (has_w || op == ReduceOp::Avg) params(Partial(op), Partial(op), Partial(op));
  if (has_b)
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) params(kR, Partial(op), Partial(op));
  c.push_back({{kR}, kR});
}

constexpr OpRule kLayerNorm{"layer_norm", norm_meta, norm_strategies};
constexpr OpRule kRmsNorm{"rms_norm", norm_meta, norm_strategies};

// Runs a norm: builds the schema from x, the optional parameters and the
// normalized shape; kernel(x, weight, bias) gets undefined tensors for
// parameters not given.
template <class F>
DTensor run_norm(OpId id, const OpRule& rule, const DTensor& x, const Shape& normalized_shape,
                 const std::optional<DTensor>& weight, const std::optional<DTensor>& bias,
                 F&& kernel) {
  OpSchema schema(id, {&x.spec()}, {static_cast<int64_t>(normalized_shape.size())});
  for (int64_t n : normalized_shape) schema.push_arg(n);
  schema.push_arg(weight ? 1 : 0);
  schema.push_arg(bias ? 1 : 0);
  const DTensor* inputs[3] = {&x};
  int n = 1;
  if (weight) {
    schema.push_input(&weight->spec());
    inputs[n++] = &*weight;
  }
  if (bias) {
    schema.push_input(&bias->spec());
    inputs[n++] = &*bias;
  }
  const bool has_w = weight.has_value(), has_b = bias.has_value();
  return run(schema, rule, inputs, [&](int, const Tensor* const* t, const OutputSharding&) {
    int i = 1;
    const Tensor w = has_w ? *t[i++] : Tensor();
    const Tensor b = has_b ? *t[i] : Tensor();
    return kernel(*t[0], w, b);
  });
}

// ---- 16-bit backwards in float32 -------------------------------------------------
// PyTorch's CPU kernels for the backwards of softmax, log_softmax and the
// norms take 16-bit tensors in float32 (ATen's opmath type) and round each
// gradient once. The formulas here do the same: in_opmath() widens the
// gradient and each saved tensor once, the formula's ops run in float32,
// and each gradient rounds back to its input's dtype once (`.to(dtype)`,
// nothing for a float32 or float64 input). Run op by op in 16 bits, each of
// a norm's dozen steps rounded its result and the next widened it again
// (and each mean widened a whole tensor).
DTensor in_opmath(const DTensor& t) { return t.to(compute_dtype(t.dtype())); }

// The backward of a norm over the trailing dims, written with DTensor ops so
// that it keeps the forward's layout: a batch- or sequence-sharded x gives
// a gradient sharded alike (the statistics are per row), and the weight's
// and bias's gradients, sums over the leading dims, come out Partial(sum)
// over the mesh dims those are sharded on (PyTorch's SequenceParallel
// norms). The statistics are recomputed from the saved x rather than kept:
// they cost one pass, and a norm's input is saved anyway.
//
// layer_norm: y = xhat * w + b, xhat = (x - mean) * rstd, and
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)), gy = g * w;
// rms_norm: xhat = x * rstd, dx = rstd * (gy - xhat * mean(gy * xhat)).
void record_norm(DTensor& out, bool layer, const DTensor& x, const Shape& normalized_shape,
                 const std::optional<DTensor>& weight, const std::optional<DTensor>& bias,
                 double eps) {
  std::vector<const DTensor*> inputs = {&x, weight ? &*weight : nullptr};
  if (layer) inputs.push_back(bias ? &*bias : nullptr);
  if (!autograd::recording(inputs)) return;
  std::vector<DTensor> saved = {x};
  if (weight) saved.push_back(*weight);
  const DType x_dtype = x.dtype(), w_dtype = weight ? weight->dtype() : x.dtype();
  const DType b_dtype = bias ? bias->dtype() : x.dtype();
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const int64_t lead = x.dim() - k;
  DimVector dims, lead_dims;
  for (int64_t d = 0; d < x.dim(); ++d) (d < lead ? lead_dims : dims).push_back(d);
  const size_t n_inputs = inputs.size();
  const bool has_weight = weight.has_value();
  autograd::record(
      out, layer ? "layer_norm" : "rms_norm", inputs, std::move(saved),
      [=](const autograd::Context& c) {
        const DTensor xs = in_opmath(c.saved(0));
        const DTensor grad = in_opmath(c.grad);
        const DTensor xc = layer ? sub(xs, mean(xs, dims, true)) : xs;
        const DTensor rstd = rsqrt(add(mean(mul(xc, xc), dims, true), eps));
        const DTensor xhat = mul(xc, rstd);
        // Sums over the leading dims (none: the gradient as it is).
        auto over_rows = [&](const DTensor& t) { return lead_dims.empty() ? t : sum(t, lead_dims); };
        autograd::Grads g(n_inputs);
        if (c.needs(0)) {
          const DTensor gy = has_weight ? mul(grad, in_opmath(c.saved(1))) : grad;
          DTensor inner = sub(gy, mul(xhat, mean(mul(gy, xhat), dims, true)));
          if (layer) inner = sub(inner, mean(gy, dims, true));
          g[0] = mul(rstd, inner).to(x_dtype);
        }
        if (n_inputs > 1 && c.needs(1)) g[1] = over_rows(mul(grad, xhat)).to(w_dtype);
        if (n_inputs > 2 && c.needs(2)) g[2] = over_rows(grad).to(b_dtype);
        return g;
      });
}

// ---- nll_loss ------------------------------------------------------------------
// args: reduction (None or Sum: Mean is composed from these), whether the
// op is reached through cross_entropy (for its name in errors).

// The checks of the plain op's check_loss_shapes, on global shapes.
void check_loss_shapes(const Shape& is, DType in_dtype, const Shape& ts, DType t_dtype,
                       const char* op) {
  DT_CHECK(is_floating(in_dtype), op,
           ": input dtype must be floating point (float32 or float64), got ", in_dtype);
  DT_CHECK(t_dtype == DType::Int64, op, ": target must hold int64 class indices, got ", t_dtype);
  if (is.size() == 1) {
    DT_CHECK(ts.empty(), op, ": for an input of shape ", is,
             " (a single sample of C classes) the target must be 0-d, got shape ", ts);
    return;
  }
  DT_CHECK(is.size() >= 2, op, ": input must have shape (C), (N, C) or (N, C, d1, ...), got ",
           is);
  Shape expected;
  expected.push_back(is[0]);
  for (size_t k = 2; k < is.size(); ++k) expected.push_back(is[k]);
  DT_CHECK(ts == expected, op, ": target of shape ", ts, " does not match input of shape ", is,
           " (expected target shape ", expected, ")");
}

const char* loss_name(const OpSchema& s) { return s.args[1] != 0 ? "cross_entropy" : "nll_loss"; }

TensorMeta nll_meta(const OpSchema& s) {
  const DTensorSpec& lp = s.input(0);
  const DTensorSpec& t = s.input(1);
  check_loss_shapes(lp.shape(), lp.dtype(), t.shape(), t.dtype(), loss_name(s));
  const Shape out = static_cast<Reduction>(s.args[0]) == Reduction::None ? t.shape() : Shape{};
  return {out, contiguous_strides(out), lp.dtype()};
}

// Batch dim 0 and spatial dims k >= 2 of the input (k - 1 of the target)
// sharded alike: per-target losses sharded (None) or partial sums (Sum). The
// loss is linear in the log-probabilities, and an ignored target gives 0 on
// every rank, so a Partial(sum|avg) input against a replicated target stays
// Partial. The class dim is gathered.
void nll_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const bool none = static_cast<Reduction>(s.args[0]) == Reduction::None;
  const int64_t nd = s.input(0).ndim();
  for (int64_t k = 0; k < nd; ++k) {
    if (k == 1 || nd < 2) continue;
    const int64_t tk = k == 0 ? 0 : k - 1;
    c.push_back({{Shard(k), Shard(tk)}, none ? Shard(tk) : Partial()});
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
    c.push_back({{Partial(op), kR}, Partial(op)});
  c.push_back({{kR, kR}, kR});
}

constexpr OpRule kNllLoss{"nll_loss", nll_meta, nll_strategies};
constexpr OpRule kCrossEntropyNll{"cross_entropy", nll_meta, nll_strategies};

// nll_loss with reduction None or Sum.
DTensor nll_unreduced(const DTensor& log_probs, const DTensor& target, Reduction reduction,
                      int64_t ignore_index, bool cross_entropy) {
  const OpSchema schema(OpId::NllLoss, {&log_probs.spec(), &target.spec()},
                        {static_cast<int64_t>(reduction), cross_entropy ? 1 : 0});
  const DTensor* inputs[2] = {&log_probs, &target};
  return run(schema, cross_entropy ? kCrossEntropyNll : kNllLoss, inputs,
             [&](int, const Tensor* const* t, const OutputSharding&) {
               try {
                 return nll_loss(*t[0], *t[1], reduction, ignore_index);
               } catch (const Error& e) {
                 // An out-of-range target: name the op the user called.
                 const std::string msg = e.what();
                 if (!cross_entropy || msg.rfind("nll_loss: ", 0) != 0) throw;
                 DT_THROW("cross_entropy: ", msg.substr(10));
               }
             });
}

DTensor nll_impl(const DTensor& log_probs, const DTensor& target, Reduction reduction,
                 int64_t ignore_index, bool cross_entropy) {
  if (reduction != Reduction::Mean)
    return nll_unreduced(log_probs, target, reduction, ignore_index, cross_entropy);
  // Mean = the summed loss over the number of targets that count: both
  // reduce without communication when the batch is sharded (the sum stays a
  // Partial(sum); the count, a small all_reduce). Zero counted targets give
  // 0/0 = NaN, as the plain op does; float / int64 keeps the input's dtype.
  const DTensor total = nll_unreduced(log_probs, target, Reduction::Sum, ignore_index,
                                      cross_entropy);
  const DTensor counted = sum(ne(target, ignore_index));
  return div(total, counted);
}

// ---- nll_loss backward ------------------------------------------------------------
// The gradient of nll_loss with respect to the log-probabilities: -g at each
// counted target's class, 0 elsewhere (ignored targets included). Inputs:
// the gradient (the target's shape for reduction None, else 0-d; Mean's
// division by the count is done before) and the target. args: classes,
// whether the input was 1-d (C), whether the reduction was None.

TensorMeta nll_backward_meta(const OpSchema& s) {
  const Shape& ts = s.input(1).shape();
  Shape out;
  if (s.args[1] != 0) {
    out.push_back(s.args[0]);
  } else {
    for (size_t k = 0; k < ts.size(); ++k) {
      out.push_back(ts[k]);
      if (k == 0) out.push_back(s.args[0]);
    }
  }
  return {out, contiguous_strides(out), s.input(0).dtype()};
}

// The forward's strategies read backwards: batch and spatial dims sharded
// alike on gradient (None) and target give a gradient sharded alike; a
// scalar gradient (Sum, Mean) is replicated against a sharded target. The
// scatter is linear in g and puts 0 wherever no target points, so a
// Partial(sum|avg) g against a replicated target stays Partial.
void nll_backward_strategies(const OpSchema& s, const TensorMeta& out,
                             std::vector<DimStrategy>& c) {
  const bool none = s.args[2] != 0;
  const int64_t nd = static_cast<int64_t>(out.shape.size());
  for (int64_t k = 0; k < nd && nd >= 2; ++k) {
    if (k == 1) continue;
    const int64_t tk = k == 0 ? 0 : k - 1;
    c.push_back({{none ? Shard(tk) : kR, Shard(tk)}, Shard(k)});
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
    c.push_back({{Partial(op), kR}, Partial(op)});
  c.push_back({{kR, kR}, kR});
}

constexpr OpRule kNllLossBackward{"nll_loss_backward", nll_backward_meta,
                                  nll_backward_strategies};

// The class dim is whole on every rank (no strategy shards it), so the
// local scatter compares the local targets with 0..C-1.
DTensor nll_loss_backward(const DTensor& grad, const DTensor& target, const Shape& input_shape,
                          int64_t ignore_index, bool none) {
  const bool one_d = input_shape.size() == 1;
  const int64_t classes = input_shape[one_d ? 0 : 1];
  const OpSchema schema(OpId::NllLossBackward, {&grad.spec(), &target.spec()},
                        {classes, one_d ? 1 : 0, none ? 1 : 0});
  const DTensor* inputs[2] = {&grad, &target};
  return run(schema, kNllLossBackward, inputs,
             [&](int, const Tensor* const* t, const OutputSharding&) {
               Shape class_shape(input_shape.size(), 1);
               class_shape[one_d ? 0 : 1] = classes;
               const Tensor cls = Tensor::arange(classes).view(class_shape);
               const Tensor tgt = one_d ? *t[1] : t[1]->unsqueeze(1);
               const Tensor hit = masked_fill(eq(cls, tgt), eq(tgt, ignore_index), false);
               const Tensor g = neg(*t[0]);
               return where(hit, none && !one_d ? g.unsqueeze(1) : g, 0.0).contiguous();
             });
}

// nll_loss as one differentiable node over the log-probabilities (its
// forward, Mean's division included, records nothing of its own).
DTensor nll_recorded(const DTensor& log_probs, const DTensor& target, Reduction reduction,
                     int64_t ignore_index, bool cross_entropy) {
  DTensor out = [&] {
    NoGradGuard no_grad;
    return nll_impl(log_probs, target, reduction, ignore_index, cross_entropy);
  }();
  if (autograd::recording({&log_probs}))
    autograd::record(
        out, "nll_loss", {&log_probs}, {target},
        [reduction, ignore_index, shape = log_probs.shape()](const autograd::Context& c) {
          const DTensor& t = c.saved(0);
          // Mean: each counted target's share is g / count. With no target
          // counted the gradient is 0 whatever the divisor (as in PyTorch);
          // 1 keeps the pieces of a Partial g finite.
          DTensor g = c.grad;
          if (reduction == Reduction::Mean) {
            const DTensor count = sum(ne(t, ignore_index));
            g = div(g, where(ne(count, 0), count, 1));
          }
          return autograd::Grads{
              nll_loss_backward(g, t, shape, ignore_index, reduction == Reduction::None)};
        });
  return out;
}

// ---- embedding -----------------------------------------------------------------

TensorMeta embedding_meta(const OpSchema& s) {
  const DTensorSpec& w = s.input(0);
  const DTensorSpec& idx = s.input(1);
  DT_CHECK(w.ndim() == 2, "embedding: weight must be 2-d (num_embeddings, dim), got shape ",
           w.shape());
  DT_CHECK(idx.dtype() == DType::Int64, "embedding: indices must be int64, got ", idx.dtype());
  Shape out = idx.shape();
  out.push_back(w.shape()[1]);
  return {out, contiguous_strides(out), w.dtype()};
}

// Per mesh dim: indices sharded -> output sharded alike; table sharded on
// its columns -> output sharded on its last dim; table row-sharded ->
// Partial(sum), each rank filling the indices in its own rows. A lookup only
// selects rows, so it commutes with every reduction of a Partial table
// (sum and avg by linearity, max and min elementwise).
void embedding_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const int64_t nd = s.input(1).ndim();
  for (int64_t k = 0; k < nd; ++k) c.push_back({{kR, Shard(k)}, Shard(k)});
  c.push_back({{Shard(1), kR}, Shard(static_cast<int64_t>(out.shape.size()) - 1)});
  c.push_back({{Shard(0), kR}, Partial()});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    c.push_back({{Partial(op), kR}, Partial(op)});
  c.push_back({{kR, kR}, kR});
}

constexpr OpRule kEmbedding{"embedding", embedding_meta, embedding_strategies};

// Indices out of range of the whole table raise the plain op's error (which
// names the table's shape: the global one, not a shard's). Negative ids
// are out of range, as in PyTorch.
void check_indices(const std::vector<int64_t>& idx, const Shape& table) {
  for (int64_t v : idx)
    DT_CHECK(v >= 0 && v < table[0], "embedding: index ", v,
             " is out of range: expected an id in [0, ", table[0], ") for a table of shape ",
             table);
}

// The lookup of a rank holding rows [first, first + rows) of the table:
// indices owned elsewhere give zero rows.
Tensor masked_embedding(const Tensor& weight, const Tensor& indices, int64_t first,
                        const Shape& table) {
  std::vector<int64_t> idx = indices.to_vector<int64_t>();
  check_indices(idx, table);
  const int64_t rows = weight.shape()[0];
  std::vector<bool> others(idx.size());  // whether another rank owns index i
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t v = idx[i];
    others[i] = v < first || v >= first + rows;
    idx[i] = others[i] ? 0 : v - first;
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  if (rows == 0) return Tensor::zeros(out_shape, weight.dtype());
  const Tensor out = embedding(weight, Tensor::from_vector(idx, indices.shape()));
  // A fill, not a product: the stand-in row 0 may hold inf or NaN.
  return masked_fill(out, Tensor::from_vector(others, indices.shape()).unsqueeze(-1), false);
}

// ---- embedding backward ------------------------------------------------------------
// The gradient of the table: the gradient's rows added into zeros (V, D) at
// their indices (duplicates add up). Inputs: the gradient (indices.shape +
// (D)) and the indices; args: V, and a bit per mesh dim on which the table
// is row-sharded.
//
// Per mesh dim: replicated gradient and indices -> the table's rows sharded,
// each rank adding only the indices it owns (the vocab-parallel table's
// gradient stays S(0): nothing of the table's size moves), or replicated;
// gradient sharded on D -> S(1); gradient and indices sharded alike ->
// Partial(sum) of each rank's own additions; a Partial(sum|avg) gradient
// stays Partial (linear). Rows are sharded exactly where the table is, so
// that its gradient adds into grad() without a move.

TensorMeta embedding_backward_meta(const OpSchema& s) {
  const Shape out = {s.args[0], s.input(0).shape().back()};
  return {out, contiguous_strides(out), s.input(0).dtype()};
}

void embedding_backward_strategies(const OpSchema& s, const TensorMeta&,
                                   std::vector<DimStrategy>& c) {
  const int64_t nd = s.input(1).ndim();
  c.push_back({{kR, kR}, Shard(0)});
  c.push_back({{kR, kR}, kR});
  c.push_back({{Shard(nd), kR}, Shard(1)});
  for (int64_t k = 0; k < nd; ++k) c.push_back({{Shard(k), Shard(k)}, Partial()});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
    c.push_back({{Partial(op), kR}, Partial(op)});
}

// Rows sharded on exactly the mesh dims the table's rows are.
bool embedding_backward_accepts(const OpSchema& s, const TensorMeta&, const Placements*,
                                const Placements& out) {
  for (size_t m = 0; m < out.size(); ++m)
    if (out[m].is_shard(0) != (((s.args[1] >> m) & 1) != 0)) return false;
  return true;
}

constexpr OpRule kEmbeddingBackward{"embedding_backward", embedding_backward_meta,
                                    embedding_backward_strategies, embedding_backward_accepts};

// The block of rows [first, first + out_shape[0]) of the table's gradient.
template <class T>
void add_rows(const Tensor& grad, const std::vector<int64_t>& idx, int64_t first, Tensor& out) {
  const int64_t rows = out.shape()[0], cols = out.shape()[1];
  const T* g = grad.data_ptr<T>();
  T* o = out.data_ptr<T>();
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t r = idx[i] - first;
    if (r < 0 || r >= rows) continue;
    for (int64_t j = 0; j < cols; ++j) o[r * cols + j] += g[static_cast<int64_t>(i) * cols + j];
  }
}

DTensor embedding_backward(const DTensor& grad, const DTensor& indices, int64_t rows,
                           int64_t row_sharded) {
  const OpSchema schema(OpId::EmbeddingBackward, {&grad.spec(), &indices.spec()},
                        {rows, row_sharded});
  const DTensor* inputs[2] = {&grad, &indices};
  return run(schema, kEmbeddingBackward, inputs,
             [&](int rank, const Tensor* const* t, const OutputSharding& s) {
               const ShardExtent e = *s.output.extent_of_rank(rank);
               Tensor out = Tensor::zeros(e.local_shape, s.output.dtype());
               if (out.numel() == 0) return out;
               const std::vector<int64_t> idx = t[1]->to_vector<int64_t>();
               if (t[0]->dtype() == DType::Float64) {
                 add_rows<double>(t[0]->contiguous(), idx, e.global_offset[0], out);
                 return out;
               }
               // float32, and the 16-bit floats summed in float32 and rounded
               // once (PyTorch's CPU kernel adds in the 16-bit type, rounding
               // at every repeated index).
               Tensor acc = detail::widen(out);
               add_rows<float>(detail::widen(*t[0]).contiguous(), idx, e.global_offset[0], acc);
               return detail::round_to(acc, out.dtype());
             });
}

}  // namespace

DTensor softmax(const DTensor& x, int64_t dim) {
  const OpSchema schema(OpId::Softmax, {&x.spec()}, {wrap_dim_if_valid(dim, x.dim())});
  DTensor out =
      run_unary(schema, kSoftmax, x, [&](int, const Tensor& t) { return softmax(t, dim); });
  if (autograd::recording({&x}))
    autograd::record(out, "softmax", {&x}, {out},
                     [dims = softmax_dims(x, dim)](const autograd::Context& c) {
                       const DTensor y = in_opmath(c.saved(0));
                       const DTensor g = in_opmath(c.grad);
                       return autograd::Grads{
                           mul(y, sub(g, sum(mul(g, y), dims, true))).to(c.saved(0).dtype())};
                     });
  return out;
}

DTensor log_softmax(const DTensor& x, int64_t dim) {
  const OpSchema schema(OpId::LogSoftmax, {&x.spec()}, {wrap_dim_if_valid(dim, x.dim())});
  DTensor out = run_unary(schema, kLogSoftmax, x,
                          [&](int, const Tensor& t) { return log_softmax(t, dim); });
  if (autograd::recording({&x}))
    autograd::record(out, "log_softmax", {&x}, {out},
                     [dims = softmax_dims(x, dim)](const autograd::Context& c) {
                       const DTensor y = in_opmath(c.saved(0));
                       const DTensor g = in_opmath(c.grad);
                       return autograd::Grads{
                           sub(g, mul(exp(y), sum(g, dims, true))).to(c.saved(0).dtype())};
                     });
  return out;
}

// `t` with its shards of the last `trailing` dims gathered (a
// differentiable redistribute), or t itself when none is sharded there. A
// norm computes over its normalized dims whole, so the rule gathers them
// anyway; doing it here, as its own autograd step, makes backward run on
// the gathered values saved for it (no collective: the gradient goes back
// to the shards by a local cut) instead of recomputing the statistics from
// the sharded input (2 all_gathers, 3 all_reduces and 2 reduce_scatters
// for a layer_norm on a 1-d mesh, where PyTorch, which saves the
// redistributed input, runs none).
DTensor gathered_trailing(const DTensor& t, int64_t trailing) {
  Placements to = t.placements();
  bool sharded = false;
  for (Placement& p : to)
    if (p.is_shard() && p.dim() >= t.dim() - trailing) p = Replicate(), sharded = true;
  return sharded ? t.redistribute(normalize_shard_orders(to)) : t;
}

std::optional<DTensor> gathered_param(const std::optional<DTensor>& t) {
  if (!t) return t;
  return gathered_trailing(*t, t->dim());
}

// Whether x's trailing dims are the normalized shape (else the op's own
// checks report the mismatch, naming x's placements as given).
bool trails(const DTensor& x, const Shape& normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k > x.dim()) return false;
  for (int64_t i = 0; i < k; ++i)
    if (x.shape()[static_cast<size_t>(x.dim() - k + i)] != normalized_shape[static_cast<size_t>(i)])
      return false;
  return true;
}

DTensor layer_norm(const DTensor& x_in, const Shape& normalized_shape,
                   const std::optional<DTensor>& weight_in,
                   const std::optional<DTensor>& bias_in, double eps) {
  const bool ok = trails(x_in, normalized_shape);
  const DTensor x =
      ok ? gathered_trailing(x_in, static_cast<int64_t>(normalized_shape.size())) : x_in;
  const std::optional<DTensor> weight = ok ? gathered_param(weight_in) : weight_in;
  const std::optional<DTensor> bias = ok ? gathered_param(bias_in) : bias_in;
  DTensor out = run_norm(OpId::LayerNorm, kLayerNorm, x, normalized_shape, weight, bias,
                         [&](const Tensor& t, const Tensor& w, const Tensor& b) {
                           return layer_norm(t, normalized_shape, w, b, eps);
                         });
  record_norm(out, true, x, normalized_shape, weight, bias, eps);
  return out;
}

DTensor rms_norm(const DTensor& x_in, const Shape& normalized_shape,
                 const std::optional<DTensor>& weight_in, std::optional<double> eps) {
  const bool ok = trails(x_in, normalized_shape);
  const DTensor x =
      ok ? gathered_trailing(x_in, static_cast<int64_t>(normalized_shape.size())) : x_in;
  const std::optional<DTensor> weight = ok ? gathered_param(weight_in) : weight_in;
  DTensor out = run_norm(OpId::RmsNorm, kRmsNorm, x, normalized_shape, weight, std::nullopt,
                         [&](const Tensor& t, const Tensor& w, const Tensor&) {
                           return rms_norm(t, normalized_shape, w, eps);
                         });
  // The plain op's default: the machine epsilon of the dtype x computes in,
  // as in PyTorch (float32's for the 16-bit floats: ATen's opmath type).
  const double e = eps ? *eps
                       : x.dtype() == DType::Float64
                             ? static_cast<double>(std::numeric_limits<double>::epsilon())
                             : static_cast<double>(std::numeric_limits<float>::epsilon());
  record_norm(out, false, x, normalized_shape, weight, std::nullopt, e);
  return out;
}

DTensor nll_loss(const DTensor& log_probs, const DTensor& target, Reduction reduction,
                 int64_t ignore_index) {
  if (autocast_detail::raises({&log_probs}))
    return nll_loss(autocast_detail::raise(log_probs), target, reduction, ignore_index);
  return nll_recorded(log_probs, target, reduction, ignore_index, false);
}

DTensor cross_entropy(const DTensor& logits, const DTensor& target, Reduction reduction,
                      int64_t ignore_index) {
  if (autocast_detail::raises({&logits}))
    return cross_entropy(autocast_detail::raise(logits), target, reduction, ignore_index);
  // The plain op checks the shapes before the log-softmax; so does this, so
  // that errors name cross_entropy rather than the ops it is made of.
  with_placements("cross_entropy", logits, target, [&] {
    check_loss_shapes(logits.shape(), logits.dtype(), target.shape(), target.dtype(),
                      "cross_entropy");
  });
  const DTensor log_probs = log_softmax(logits, logits.dim() == 1 ? 0 : 1);
  return nll_recorded(log_probs, target, reduction, ignore_index, true);
}

DTensor embedding(const DTensor& weight, const DTensor& indices) {
  const OpSchema schema(OpId::Embedding, {&weight.spec(), &indices.spec()});
  const DTensor* inputs[2] = {&weight, &indices};
  DTensor out = run(schema, kEmbedding, inputs,
             [&](int rank, const Tensor* const* t, const OutputSharding& s) {
               const DTensorSpec& w = *s.input_targets[0];
               bool row_sharded = false, col_sharded = false;
               for (const Placement& p : w.placements()) {
                 row_sharded |= p.is_shard(0);
                 col_sharded |= p.is_shard(1);
               }
               if (row_sharded) {
                 // The rows this rank owns, from the table's (input) layout.
                 const int64_t first = w.extent_of_rank(rank)->global_offset[0];
                 return masked_embedding(*t[0], *t[1], first, w.shape());
               }
               // Checked against the whole table, so that the error names
               // its shape rather than a column shard's.
               if (col_sharded) check_indices(t[1]->to_vector<int64_t>(), w.shape());
               return embedding(*t[0], *t[1]);
             });
  if (autograd::recording({&weight})) {
    // The mesh dims the table's rows are sharded on: its gradient is made
    // sharded there too (a layout choice only; the values do not depend on it).
    int64_t row_sharded = 0;
    for (size_t m = 0; m < weight.placements().size(); ++m)
      if (weight.placements()[m].is_shard(0)) row_sharded |= int64_t{1} << m;
    autograd::record(out, "embedding", {&weight}, {indices},
                     [rows = weight.shape()[0], row_sharded](const autograd::Context& c) {
                       return autograd::Grads{
                           embedding_backward(c.grad, c.saved(0), rows, row_sharded)};
                     });
  }
  return out;
}

}  // namespace dtensor
