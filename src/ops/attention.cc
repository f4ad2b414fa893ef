// scaled_dot_product_attention on DTensors: one op for the forward and one
// for the gradient of each of query, key and value, both running the
// kernels of tensor/attention.h on every shard.
//
// The layouts that need no communication, per mesh dim:
//  - a batch or head dim sharded alike on every input that has it at full
//    size (an input broadcast along it, size 1 or missing, is replicated):
//    each (batch, head) slice is computed whole on one rank;
//  - the query sequence (query S(-2), the mask's L dim alike when it has a
//    full one, key and value replicated): query rows are independent, but
//    the causal mask compares global positions, so the kernel gets the
//    shard's global query offset from the query's spec (without it every
//    rank would mask as rank 0 and be silently wrong);
//  - value's last dim: output column c reads value column c only;
//  - a Partial(sum|avg) value against replicated query and key: the output
//    P v is linear in v, so each piece gives the same Partial's piece.
// The key/value sequence is never left sharded: each query's softmax
// normalizes over all keys, so a shard of keys gives wrong probabilities
// (ring attention would trade row maxima and sums between ranks). A
// Partial query, key or mask is reduced first: softmax is not linear.
//
// The backward reads the same layouts backwards: an input sharded like the
// output gets a gradient sharded alike; an input replicated against a
// sharded query sequence, value column or broadcast batch dim sums over
// the rows its rank holds, a Partial(sum) gradient; and gradients are
// linear in the output's gradient, so a Partial(sum|avg) one passes. A
// float mask's gradient (the scores' gradient) follows the same rules; a
// bool mask has none.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/autocast.h"
#include "tensor/attention.h"

namespace dtensor {

using namespace dispatch;

namespace {

constexpr const char* kName = "scaled_dot_product_attention";

// Forward schema: inputs query, key, value[, mask]; args is_causal, has_mask.
// Backward schema: inputs query, key, value, grad[, mask]; args which,
// is_causal, has_mask.
struct Layout {
  bool is_causal = false;
  bool has_mask = false;
  int mask_input = 3;
};

Layout layout_of(const OpSchema& s) {
  if (s.op == OpId::ScaledDotProductAttention) return {s.args[0] != 0, s.args[1] != 0, 3};
  return {s.args[1] != 0, s.args[2] != 0, 4};
}

// The plain op's checks on the global shapes; the output's shape.
Shape output_shape(const OpSchema& s) {
  const Layout l = layout_of(s);
  const DTensorSpec &q = s.input(0), &k = s.input(1), &v = s.input(2);
  const DTensorSpec* mask = l.has_mask ? &s.input(l.mask_input) : nullptr;
  return detail::sdpa_output_shape(kName, q.shape(), q.dtype(), k.shape(), k.dtype(), v.shape(),
                                   v.dtype(), mask ? &mask->shape() : nullptr,
                                   mask ? mask->dtype() : DType::Bool, 0.0, l.is_causal);
}

TensorMeta sdpa_meta(const OpSchema& s) {
  const Shape out = output_shape(s);
  return {out, contiguous_strides(out), s.input(0).dtype()};
}

// Input x's placement when the output's dim j is sharded: x's matching dim
// (aligned from the right) when x has it at full size, else replicated
// (x is broadcast along it).
Placement aligned_with_out(const DTensorSpec& x, const Shape& out, int64_t j) {
  const int64_t d = j - (static_cast<int64_t>(out.size()) - x.ndim());
  if (d < 0 || x.shape()[static_cast<size_t>(d)] != out[static_cast<size_t>(j)]) return kR;
  return Shard(d);
}

// The per-mesh-dim candidates of the file comment for the inputs query,
// key, value and the mask (at `mask_input`), grad (input 3) in backward;
// out_of(kind, candidate, output dim j of a Batch candidate) names the
// result's placement.
enum class Kind { Batch, QuerySeq, ValueCols, PartialValue, PartialGrad };

template <class Out>
void candidates(const OpSchema& s, const Shape& out, std::vector<DimStrategy>& c, Out&& out_of) {
  const Layout l = layout_of(s);
  const bool backward = s.op == OpId::ScaledDotProductAttentionBackward;
  const int64_t n = static_cast<int64_t>(out.size());
  const DTensorSpec &q = s.input(0), &v = s.input(2);
  auto with_mask = [&](DimStrategy st, int64_t j) {
    if (l.has_mask) st.in[l.mask_input] = aligned_with_out(s.input(l.mask_input), out, j);
    return st;
  };
  for (int64_t j = 0; j + 2 < n; ++j) {
    DimStrategy st = with_mask({}, j);
    for (int i = 0; i < 3; ++i) st.in[i] = aligned_with_out(s.input(i), out, j);
    if (backward) st.in[3] = Shard(j);
    st.out = out_of(Kind::Batch, st, j);
    c.push_back(st);
  }
  DimStrategy seq = with_mask({}, n - 2);
  seq.in[0] = Shard(q.ndim() - 2);
  if (backward) seq.in[3] = Shard(n - 2);
  seq.out = out_of(Kind::QuerySeq, seq, -1);
  c.push_back(seq);
  DimStrategy cols;
  cols.in[2] = Shard(v.ndim() - 1);
  if (backward) cols.in[3] = Shard(n - 1);
  cols.out = out_of(Kind::ValueCols, cols, -1);
  c.push_back(cols);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    DimStrategy pv;
    pv.in[2] = Partial(op);
    pv.out = out_of(Kind::PartialValue, pv, -1);
    c.push_back(pv);
    if (backward) {
      DimStrategy pg;
      pg.in[3] = Partial(op);
      pg.out = out_of(Kind::PartialGrad, pg, -1);
      c.push_back(pg);
    }
  }
  DimStrategy all_r;
  all_r.out = kR;
  c.push_back(all_r);
}

void sdpa_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const int64_t n = static_cast<int64_t>(out.shape.size());
  candidates(s, out.shape, c, [&](Kind kind, const DimStrategy& st, int64_t j) -> Placement {
    switch (kind) {
      case Kind::Batch: return Shard(j);
      case Kind::QuerySeq: return Shard(n - 2);
      case Kind::ValueCols: return Shard(n - 1);
      case Kind::PartialValue: return st.in[2];
      default: return kR;
    }
  });
}

// ---- backward ------------------------------------------------------------------

// The schema input whose gradient the backward op makes (args[0] is a
// detail::SdpaInput; the mask is input 4).
int input_of(const OpSchema& s) {
  return static_cast<detail::SdpaInput>(s.args[0]) == detail::SdpaInput::Mask
             ? 4
             : static_cast<int>(s.args[0]);
}

TensorMeta sdpa_backward_meta(const OpSchema& s) {
  const Shape out = output_shape(s);
  const DTensorSpec& g = s.input(3);
  DT_CHECK(g.shape() == out && g.dtype() == s.input(0).dtype(), kName,
           ": the output's gradient must have the output's shape ", out, " and dtype ",
           s.input(0).dtype(), ", got ", g.shape(), " and ", g.dtype());
  const DTensorSpec& x = s.input(input_of(s));
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

void sdpa_backward_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const int w = input_of(s);
  const Shape out = output_shape(s);
  candidates(s, out, c, [&](Kind kind, const DimStrategy& st, int64_t) -> Placement {
    switch (kind) {
      // Sharded like the output, or replicated (broadcast along the batch
      // dim, or whole against sharded query rows or value columns): then the
      // rank's rows summed, a partial sum.
      case Kind::Batch:
      case Kind::QuerySeq:
      case Kind::ValueCols: return st.in[w].is_shard() ? st.in[w] : Partial();
      // grad_v = P^T grad does not read v; the others are linear in it.
      case Kind::PartialValue: return w == 2 ? kR : st.in[2];
      case Kind::PartialGrad: return st.in[3];
      default: return kR;
    }
  });
}

constexpr OpRule kSdpa{kName, sdpa_meta, sdpa_strategies};
constexpr OpRule kSdpaBackward{"scaled_dot_product_attention_backward", sdpa_backward_meta,
                               sdpa_backward_strategies};

// The global index of the first query row `rank` holds.
int64_t query_offset(const OutputSharding& s, int rank) {
  const DTensorSpec& q = *s.input_targets[0];
  return q.extent_of_rank(rank)->global_offset[static_cast<size_t>(q.ndim() - 2)];
}

DTensor sdpa_backward(detail::SdpaInput which, const DTensor& grad, const DTensor& q,
                      const DTensor& k, const DTensor& v, const std::optional<DTensor>& mask,
                      bool is_causal, double scale) {
  OpSchema schema(OpId::ScaledDotProductAttentionBackward,
                  {&q.spec(), &k.spec(), &v.spec(), &grad.spec()},
                  {static_cast<int64_t>(which), is_causal ? 1 : 0, mask ? 1 : 0});
  if (mask) schema.push_input(&mask->spec());
  const DTensor* inputs[5] = {&q, &k, &v, &grad, mask ? &*mask : nullptr};
  const bool has_mask = mask.has_value();
  return run(schema, kSdpaBackward, inputs,
             [&](int rank, const Tensor* const* t, const OutputSharding& s) {
               return detail::sdpa_backward(which, *t[3], *t[0], *t[1], *t[2],
                                            has_mask ? *t[4] : Tensor(), is_causal, scale,
                                            query_offset(s, rank));
             });
}

}  // namespace

DTensor scaled_dot_product_attention(const DTensor& query, const DTensor& key,
                                     const DTensor& value, const std::optional<DTensor>& attn_mask,
                                     double dropout_p, bool is_causal,
                                     std::optional<double> scale) {
  if (auto d = autocast_detail::lower_to({&query, &key, &value})) {
    // A float mask is added to the scores: it follows them; a bool one stays.
    std::optional<DTensor> mask = attn_mask;
    if (mask && autocast_detail::lowers(*mask, *d)) mask = mask->to(*d);
    return scaled_dot_product_attention(autocast_detail::lower(query, *d),
                                        autocast_detail::lower(key, *d),
                                        autocast_detail::lower(value, *d), mask, dropout_p,
                                        is_causal, scale);
  }
  DT_CHECK(dropout_p == 0.0, kName,
           ": dropout_p must be 0 (attention dropout is not supported), got ", dropout_p);
  OpSchema schema(OpId::ScaledDotProductAttention, {&query.spec(), &key.spec(), &value.spec()},
                  {is_causal ? 1 : 0, attn_mask ? 1 : 0});
  if (attn_mask) schema.push_input(&attn_mask->spec());
  const DTensor* inputs[4] = {&query, &key, &value, attn_mask ? &*attn_mask : nullptr};
  const double sc = detail::sdpa_scale(query.shape().empty() ? 0 : query.shape().back(), scale);
  const bool has_mask = attn_mask.has_value();
  DTensor out = run(schema, kSdpa, inputs,
                    [&](int rank, const Tensor* const* t, const OutputSharding& s) {
                      return detail::sdpa_forward(*t[0], *t[1], *t[2],
                                                  has_mask ? *t[3] : Tensor(), is_causal, sc,
                                                  query_offset(s, rank));
                    });
  // A float mask is added to the scores, so it has a gradient (PyTorch's);
  // a bool one selects and has none.
  const bool float_mask = has_mask && attn_mask->dtype() != DType::Bool;
  const std::vector<const DTensor*> differentiable = {&query, &key, &value,
                                                      float_mask ? &*attn_mask : nullptr};
  if (autograd::recording(differentiable)) {
    std::vector<DTensor> saved = {query, key, value};
    if (attn_mask) saved.push_back(*attn_mask);
    autograd::record(out, kName, differentiable, std::move(saved),
                     [is_causal, sc, has_mask, float_mask](const autograd::Context& c) {
                       const std::optional<DTensor> mask =
                           has_mask ? std::optional<DTensor>(c.saved(3)) : std::nullopt;
                       autograd::Grads g(4);
                       for (int i = 0; i < 4; ++i)
                         if ((i < 3 || float_mask) && c.needs(static_cast<size_t>(i)))
                           g[static_cast<size_t>(i)] = sdpa_backward(
                               static_cast<detail::SdpaInput>(i), c.grad, c.saved(0), c.saved(1),
                               c.saved(2), mask, is_causal, sc);
                       return g;
                     });
  }
  return out;
}

}  // namespace dtensor
