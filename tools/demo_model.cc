// The demo's transformer, on full tensors and on DTensors (demo_model.h).
#include "demo_model.h"

#include <cmath>

#include "dtensor/error.h"

namespace dtensor::cli {

namespace {

Tensor init(const Shape& shape, uint64_t seed, double scale) {
  return Tensor::randn(shape, seed) * scale;
}

// LayerNorm weights near (1, 0) but not exactly, so a misplaced weight shows.
Tensor norm_weight(int64_t n, uint64_t seed) { return 1.0 + init({n}, seed, 0.1); }

// True above the diagonal: position i may not attend to j > i.
Tensor causal_mask(int64_t seq) {
  Tensor rows = Tensor::arange(seq).reshape({seq, 1});
  Tensor cols = Tensor::arange(seq).reshape({1, seq});
  return gt(cols, rows);
}

constexpr double kMasked = -1e9;

}  // namespace

ModelWeights make_weights(const ModelConfig& c, uint64_t seed) {
  const int64_t h = c.hidden, f = 4 * c.hidden;
  const double in_h = 1.0 / std::sqrt(static_cast<double>(h));
  const double in_f = 1.0 / std::sqrt(static_cast<double>(f));
  ModelWeights w;
  w.token = init({c.vocab, h}, seed, 1.0);
  w.position = init({c.seq, h}, seed + 1, 0.5);
  for (int64_t l = 0; l < c.layers; ++l) {
    const uint64_t s = seed + 100 * static_cast<uint64_t>(l + 1);
    BlockWeights b;
    b.ln1_w = norm_weight(h, s), b.ln1_b = init({h}, s + 1, 0.1);
    b.wq = init({h, h}, s + 2, in_h), b.wk = init({h, h}, s + 3, in_h);
    b.wv = init({h, h}, s + 4, in_h);
    b.wo = init({h, h}, s + 5, in_h), b.bo = init({h}, s + 6, 0.1);
    b.ln2_w = norm_weight(h, s + 7), b.ln2_b = init({h}, s + 8, 0.1);
    b.w1 = init({f, h}, s + 9, in_h), b.b1 = init({f}, s + 10, 0.1);
    b.w2 = init({h, f}, s + 11, in_f), b.b2 = init({h}, s + 12, 0.1);
    w.blocks.push_back(std::move(b));
  }
  w.lnf_w = norm_weight(h, seed + 2), w.lnf_b = init({h}, seed + 3, 0.1);
  w.head = init({c.vocab, h}, seed + 4, in_h);
  return w;
}

std::pair<Tensor, Tensor> reference_forward(const ModelConfig& c, const ModelWeights& w,
                                            const Tensor& ids, const Tensor& targets) {
  const int64_t b = c.batch, s = c.seq, h = c.hidden, nh = c.heads, hd = h / nh;
  const Tensor mask = causal_mask(s);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // (b, s, h) -> (b, nh, s, hd)
  auto heads = [&](const Tensor& t) { return t.reshape({b, s, nh, hd}).transpose(1, 2); };
  Tensor x = embedding(w.token, ids) + w.position;
  for (const BlockWeights& bw : w.blocks) {
    Tensor n = layer_norm(x, {h}, bw.ln1_w, bw.ln1_b);
    Tensor q = heads(linear(n, bw.wq)), k = heads(linear(n, bw.wk)), v = heads(linear(n, bw.wv));
    Tensor scores = masked_fill(matmul(q, k.transpose(2, 3)) * scale, mask, kMasked);
    Tensor o = matmul(softmax(scores, -1), v).transpose(1, 2).reshape({b, s, h});
    x = x + linear(o, bw.wo, bw.bo);
    n = layer_norm(x, {h}, bw.ln2_w, bw.ln2_b);
    x = x + linear(gelu(linear(n, bw.w1, bw.b1)), bw.w2, bw.b2);
  }
  Tensor logits = linear(layer_norm(x, {h}, w.lnf_w, w.lnf_b), w.head);
  Tensor loss = cross_entropy(logits.reshape({b * s, c.vocab}), targets.reshape({b * s}));
  return {logits, loss};
}

namespace {

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// Where activations between blocks live on tp.
Placement residual_placement(const ModelConfig& c) {
  return c.sequence_parallel ? Shard(1) : Replicate();
}

}  // namespace

ParallelTransformer::ParallelTransformer(const ModelConfig& c, const ModelWeights& w,
                                         const DeviceMesh& mesh, int dp, int tp)
    : config_(c),
      mesh_(mesh),
      dp_(dp),
      tp_(tp),
      token_(mesh, tp, w.token, residual_placement(c)),
      position_(distribute_tensor(w.position, mesh, replicated(mesh))),
      causal_mask_(distribute_tensor(causal_mask(c.seq), mesh, replicated(mesh))),
      head_(mesh, tp, w.head, std::nullopt, Shard(-1)) {
  DT_CHECK(c.hidden % c.heads == 0, "--hidden ", c.hidden, " must be a multiple of --heads ",
           c.heads);
  DT_CHECK(c.heads % mesh.size(tp) == 0, "--heads ", c.heads,
           " must be a multiple of the tensor-parallel size ", mesh.size(tp),
           " (each rank computes whole attention heads)");
  const Placement out = residual_placement(c);
  for (const BlockWeights& bw : w.blocks) {
    Block b{std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
            ColumnParallelLinear(mesh, tp, bw.wq), ColumnParallelLinear(mesh, tp, bw.wk),
            ColumnParallelLinear(mesh, tp, bw.wv), RowParallelLinear(mesh, tp, bw.wo, bw.bo, out),
            ColumnParallelLinear(mesh, tp, bw.w1, bw.b1),
            RowParallelLinear(mesh, tp, bw.w2, bw.b2, out)};
    if (c.sequence_parallel) {
      b.sp_ln1.emplace(mesh, tp, bw.ln1_w, bw.ln1_b);
      b.sp_ln2.emplace(mesh, tp, bw.ln2_w, bw.ln2_b);
    } else {
      b.ln1_w = distribute_tensor(bw.ln1_w, mesh, replicated(mesh));
      b.ln1_b = distribute_tensor(bw.ln1_b, mesh, replicated(mesh));
      b.ln2_w = distribute_tensor(bw.ln2_w, mesh, replicated(mesh));
      b.ln2_b = distribute_tensor(bw.ln2_b, mesh, replicated(mesh));
    }
    blocks_.push_back(std::move(b));
  }
  if (c.sequence_parallel) {
    sp_lnf_.emplace(mesh, tp, w.lnf_w, w.lnf_b);
  } else {
    lnf_w_ = distribute_tensor(w.lnf_w, mesh, replicated(mesh));
    lnf_b_ = distribute_tensor(w.lnf_b, mesh, replicated(mesh));
  }
}

Placements ParallelTransformer::input_placements() const {
  Placements p = replicated(mesh_);
  if (dp_ >= 0) p[static_cast<size_t>(dp_)] = Shard(0);
  return p;
}

DTensor ParallelTransformer::norm(const DTensor& x,
                                  const std::optional<SequenceParallelLayerNorm>& sp,
                                  const std::optional<DTensor>& w,
                                  const std::optional<DTensor>& b) const {
  if (sp) return (*sp)(x);
  return layer_norm(x, {config_.hidden}, w, b);
}

std::pair<DTensor, DTensor> ParallelTransformer::forward(
    const DTensor& ids, const DTensor& targets,
    const std::function<void(const std::string&)>& section) const {
  const ModelConfig& c = config_;
  const int64_t b = c.batch, s = c.seq, h = c.hidden, nh = c.heads, hd = h / nh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  auto enter = [&](const std::string& name) {
    if (section) section(name);
  };
  // (b, s, h) sharded on h over tp -> (b, nh, s, hd) sharded on the heads.
  auto heads = [&](const DTensor& t) { return transpose(reshape(t, {b, s, nh, hd}), 1, 2); };

  enter("embedding");
  DTensor x = token_(ids) + position_;
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& bl = blocks_[l];
    const std::string name = "block" + std::to_string(l);
    enter(name + ".attention");
    // Gather the normed slices once (sequence parallel) for q, k and v.
    DTensor n = with_placement(norm(x, bl.sp_ln1, bl.ln1_w, bl.ln1_b), tp_, Replicate());
    DTensor q = heads(bl.wq(n)), k = heads(bl.wk(n)), v = heads(bl.wv(n));
    DTensor scores = masked_fill(matmul(q, transpose(k, 2, 3)) * scale, causal_mask_, kMasked);
    DTensor o = reshape(transpose(matmul(softmax(scores, -1), v), 1, 2), {b, s, h});
    x = x + bl.wo(o);
    enter(name + ".mlp");
    n = norm(x, bl.sp_ln2, bl.ln2_w, bl.ln2_b);
    x = x + bl.w2(gelu(bl.w1(n)));
  }
  enter("head");
  DTensor logits = head_(norm(x, sp_lnf_, lnf_w_, lnf_b_));
  enter("loss");
  DTensor loss = c.loss_parallel
                     ? vocab_parallel_cross_entropy(logits, targets, tp_)
                     : cross_entropy(reshape(logits, {b * s, c.vocab}), reshape(targets, {b * s}));
  return {logits, loss};
}

std::vector<ParallelTransformer::Parameter> ParallelTransformer::parameters(bool all_blocks) const {
  std::vector<Parameter> out;
  out.push_back({"embedding", "vocab-parallel", &token_.weight()});
  out.push_back({"position", "replicated", &position_});
  const size_t n = all_blocks ? blocks_.size() : std::min<size_t>(1, blocks_.size());
  for (size_t l = 0; l < n; ++l) {
    const Block& bl = blocks_[l];
    const std::string p = "block" + std::to_string(l) + ".";
    const char* norm_style = bl.sp_ln1 ? "sequence-parallel" : "replicated";
    out.push_back({p + "ln1.weight", norm_style, bl.sp_ln1 ? &bl.sp_ln1->weight() : &*bl.ln1_w});
    out.push_back({p + "wq", "column-parallel", &bl.wq.weight()});
    out.push_back({p + "wk", "column-parallel", &bl.wk.weight()});
    out.push_back({p + "wv", "column-parallel", &bl.wv.weight()});
    out.push_back({p + "wo", "row-parallel", &bl.wo.weight()});
    out.push_back({p + "wo.bias", "row-parallel (added once)", &*bl.wo.bias()});
    out.push_back({p + "ln2.weight", norm_style, bl.sp_ln2 ? &bl.sp_ln2->weight() : &*bl.ln2_w});
    out.push_back({p + "w1", "column-parallel", &bl.w1.weight()});
    out.push_back({p + "w1.bias", "column-parallel", &*bl.w1.bias()});
    out.push_back({p + "w2", "row-parallel", &bl.w2.weight()});
  }
  out.push_back({"head", "column-parallel (vocab-sharded logits)", &head_.weight()});
  return out;
}

}  // namespace dtensor::cli
