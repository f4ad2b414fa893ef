// The GPT of models/gpt.h: its modules, weights, plan and loss.
#include "dtensor/models/gpt.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/error.h"
#include "dtensor/ops.h"

namespace dtensor::models {

namespace {

// Recipes, not tensors: under nn::MetaDeviceGuard no process makes a
// whole weight.
nn::Init init(const Shape& shape, uint64_t seed, double scale) {
  return nn::Init::normal(shape, seed, scale);
}

// LayerNorm weights near (1, 0) but not exactly, so a misplaced weight shows.
nn::Init norm_weight(int64_t n, uint64_t seed) { return nn::Init::normal({n}, seed, 0.1, 1.0); }

// True above the diagonal: position i may not attend to j > i.
Tensor causal_mask(int64_t seq) {
  Tensor rows = Tensor::arange(seq).reshape({seq, 1});
  Tensor cols = Tensor::arange(seq).reshape({1, seq});
  return gt(cols, rows);
}

constexpr double kMasked = -1e9;

// Llama 3's rotary base and RMSNorm epsilon (torchtitan's rope_theta,
// norm_eps).
constexpr double kRopeTheta = 500000;
constexpr double kRmsEps = 1e-5;

// cos and sin of position p times theta^(-2i / head_dim), (seq, 1,
// head_dim / 2) float32, computed in double (torchtitan's
// precompute_freqs_cis, whose float32 angles round once more).
std::pair<Tensor, Tensor> rotary_tables(int64_t seq, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<double> c(static_cast<size_t>(seq * half)), s(c.size());
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(p) *
          std::pow(kRopeTheta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      c[static_cast<size_t>(p * half + i)] = std::cos(angle);
      s[static_cast<size_t>(p * half + i)] = std::sin(angle);
    }
  return {Tensor::from_vector(c).reshape({seq, 1, half}).to(DType::Float32),
          Tensor::from_vector(s).reshape({seq, 1, half}).to(DType::Float32)};
}

// t (b, s, n, head_dim) with each feature pair (2i, 2i + 1) rotated by the
// angle of its position and i: (re, im) * (cos, sin) as complex numbers.
// The tables take t's dtype (a bf16 activation stays bf16).
DTensor rotate(const DTensor& t, const DTensor& cos_table, const DTensor& sin_table) {
  const int64_t b = t.shape()[0], s = t.shape()[1], n = t.shape()[2], hd = t.shape()[3];
  const DTensor c = cos_table.dtype() == t.dtype() ? cos_table : cos_table.to(t.dtype());
  const DTensor sn = sin_table.dtype() == t.dtype() ? sin_table : sin_table.to(t.dtype());
  const DTensor pairs = reshape(t, {b, s, n, hd / 2, 2});
  const DTensor re = select(pairs, 4, 0), im = select(pairs, 4, 1);
  return reshape(stack({re * c - im * sn, re * sn + im * c}, 4), {b, s, n, hd});
}

// (b, s, kv, hd) -> (b, s, kv * rep, hd), kv head j serving query heads
// j * rep ... j * rep + rep - 1 (torchtitan's repeat_kv). A kv dim sharded
// over tp stays sharded: each rank's query heads read its own kv heads.
DTensor repeat_kv(const DTensor& t, int64_t rep) {
  if (rep == 1) return t;
  const int64_t b = t.shape()[0], s = t.shape()[1], kv = t.shape()[2], hd = t.shape()[3];
  return reshape(expand(unsqueeze(t, 3), {b, s, kv, rep, hd}), {b, s, kv * rep, hd});
}

// With grouped-query attention every rank must hold whole kv heads (the
// query heads it computes read only those): the mesh dims that shard the
// projection's features must divide `count`.
void check_whole_heads(const DTensor& projected, int64_t count, const char* what) {
  const DeviceMesh& mesh = projected.mesh();
  for (int d = 0; d < mesh.ndim(); ++d) {
    const Placement& p = projected.placements()[static_cast<size_t>(d)];
    if (!p.is_shard() || (p.dim() != -1 && p.dim() != projected.dim() - 1)) continue;
    DT_CHECK(count % mesh.size(d) == 0, "Attention: ", what, " ", count,
             " must be a multiple of the tensor-parallel size ", mesh.size(d), " (mesh dim ", d,
             " shards wq, wk and wv): grouped-query attention keeps each rank's heads whole");
  }
}

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

void check_config(const GPTConfig& c) {
  DT_CHECK(c.batch > 0 && c.seq > 0 && c.hidden > 0 && c.heads > 0 && c.layers >= 0 && c.vocab > 0,
           "GPT: batch, seq, hidden, heads and vocab must be positive and layers >= 0, got batch ",
           c.batch, ", seq ", c.seq, ", hidden ", c.hidden, ", heads ", c.heads, ", layers ",
           c.layers, ", vocab ", c.vocab);
  DT_CHECK(c.kv_heads >= 0 && c.ffn >= 0, "GPT: kv_heads and ffn must be >= 0 (0: the default), ",
           "got kv_heads ", c.kv_heads, ", ffn ", c.ffn);
  DT_CHECK(c.style == ModelStyle::GPT || c.style == ModelStyle::Llama, "GPT: unknown style ",
           static_cast<int>(c.style));
  DT_CHECK(c.hidden % c.heads == 0, "GPT: hidden ", c.hidden, " must be a multiple of heads ",
           c.heads);
  DT_CHECK(c.heads % c.num_kv_heads() == 0, "GPT: heads ", c.heads,
           " must be a multiple of kv_heads ", c.num_kv_heads(),
           " (each key/value head serves a whole group of query heads)");
  DT_CHECK(c.style != ModelStyle::Llama || (c.hidden / c.heads) % 2 == 0,
           "GPT: the rotary embedding of the llama style needs an even head dim, got hidden ",
           c.hidden, " / heads ", c.heads, " = ", c.hidden / c.heads);
  if (c.ffn == 0) checked_mul(4, c.hidden, "GPT: the MLP's width 4 x hidden");
}

// Every tensor the constructor keeps, each block's `layers` times, so that
// all the sizes are checked before the first parameter is made.
std::vector<PlannedTensor> planned_tensors(const GPTConfig& c) {
  const int64_t h = c.hidden, f = c.ffn_hidden(), l = c.layers;
  const int64_t l2 = checked_mul(2, l, "GPT: layers"), l3 = checked_mul(3, l, "GPT: layers");
  const int64_t kv = (h / c.heads) * c.num_kv_heads();
  if (c.style == ModelStyle::Llama)
    return {{"tok.weight", {c.vocab, h}},
            {"blocks.N.ln1 and ln2 weights", {h}, DType::Float32, l2},
            {"blocks.N.attention.wq and wo weights", {h, h}, DType::Float32, l2},
            {"blocks.N.attention.wk and wv weights", {kv, h}, DType::Float32, l2},
            {"blocks.N.mlp.w1, w2 and w3 weights", {f, h}, DType::Float32, l3},
            {"rotary tables", {c.seq, h / c.heads}},
            {"lnf.weight", {h}},
            {"head.weight", {c.vocab, h}}};
  const int64_t l4 = checked_mul(4, l, "GPT: layers");
  return {{"pos", {c.seq, h}},
          {"tok.weight", {c.vocab, h}},
          {"blocks.N.ln1 and ln2 weights and biases", {h}, DType::Float32, l4},
          {"blocks.N.attention.wq and wo weights", {h, h}, DType::Float32, l2},
          {"blocks.N.attention.wk and wv weights", {kv, h}, DType::Float32, l2},
          {"blocks.N.attention.wo.bias", {h}, DType::Float32, l},
          {"blocks.N.attention causal mask", {c.seq, c.seq}, DType::Bool, l},
          {"blocks.N.mlp.w1 and w2 weights", {f, h}, DType::Float32, l2},
          {"blocks.N.mlp.w1.bias", {f}, DType::Float32, l},
          {"blocks.N.mlp.w2.bias", {h}, DType::Float32, l},
          {"lnf.weight and bias", {h}, DType::Float32, 2},
          {"head.weight", {c.vocab, h}}};
}

}  // namespace

const char* to_string(ModelStyle style) { return style == ModelStyle::Llama ? "llama" : "gpt"; }

Attention::Attention(const DeviceMesh& mesh, const GPTConfig& config, const nn::Init& wq,
                     const nn::Init& wk, const nn::Init& wv, const nn::Init& wo,
                     const std::optional<nn::Init>& bo,
                     const std::optional<std::pair<DTensor, DTensor>>& rope)
    : nn::Module(mesh), heads_(config.heads), kv_heads_(config.num_kv_heads()), seq_(config.seq) {
  // Llama's attention is causal by construction (is_causal): no mask to keep.
  if (config.style == ModelStyle::GPT)
    causal_mask_ = distribute_tensor(causal_mask(config.seq), mesh, replicated(mesh));
  if (rope) cos_ = rope->first, sin_ = rope->second;
  wq_ = register_module("wq", std::make_unique<nn::Linear>(mesh, wq, std::nullopt));
  wk_ = register_module("wk", std::make_unique<nn::Linear>(mesh, wk, std::nullopt));
  wv_ = register_module("wv", std::make_unique<nn::Linear>(mesh, wv, std::nullopt));
  wo_ = register_module("wo", std::make_unique<nn::Linear>(mesh, wo, bo));
}

DTensor Attention::forward(const DTensor& x) {
  DT_CHECK(x.dim() == 3 && x.shape()[1] == seq_, "Attention: input must be (batch, seq = ", seq_,
           ", hidden), got shape ", x.shape());
  const int64_t b = x.shape()[0], s = x.shape()[1], h = x.shape()[2], nh = heads_, hd = h / nh;
  const int64_t kv = kv_heads_, rep = nh / kv;
  // (b, s, n * hd) sharded on the features over tp -> (b, s, n, hd) sharded
  // on the heads: no communication when every rank's features are whole heads.
  DTensor q = reshape((*wq_)(x), {b, s, nh, hd});
  const DTensor k_features = (*wk_)(x), v_features = (*wv_)(x);
  if (rep > 1) {
    check_whole_heads(k_features, kv, "kv_heads");
    check_whole_heads(v_features, kv, "kv_heads");
  }
  DTensor k = reshape(k_features, {b, s, kv, hd}), v = reshape(v_features, {b, s, kv, hd});
  if (cos_) {
    q = rotate(q, *cos_, *sin_);
    k = rotate(k, *cos_, *sin_);
  }
  q = transpose(q, 1, 2);
  k = transpose(repeat_kv(k, rep), 1, 2);
  v = transpose(repeat_kv(v, rep), 1, 2);
  DTensor o;
  if (causal_mask_) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    DTensor scores = masked_fill(matmul(q, transpose(k, 2, 3)) * scale, *causal_mask_, kMasked);
    o = matmul(softmax(scores, -1), v);
  } else {
    // One fused op saving only q, k and v for backward (a flash
    // attention's memory), as torchtitan's Llama calls it.
    o = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true);
  }
  return (*wo_)(reshape(transpose(o, 1, 2), {b, s, h}));
}

MLP::MLP(const DeviceMesh& mesh, const nn::Init& w1, const nn::Init& b1, const nn::Init& w2,
         const nn::Init& b2)
    : nn::Module(mesh) {
  w1_ = register_module("w1", std::make_unique<nn::Linear>(mesh, w1, b1));
  w2_ = register_module("w2", std::make_unique<nn::Linear>(mesh, w2, b2));
}

MLP::MLP(const DeviceMesh& mesh, const nn::Init& w1, const nn::Init& w2, const nn::Init& w3)
    : nn::Module(mesh) {
  w1_ = register_module("w1", std::make_unique<nn::Linear>(mesh, w1, std::nullopt));
  w2_ = register_module("w2", std::make_unique<nn::Linear>(mesh, w2, std::nullopt));
  w3_ = register_module("w3", std::make_unique<nn::Linear>(mesh, w3, std::nullopt));
}

DTensor MLP::forward(const DTensor& x) {
  if (w3_) return (*w2_)(silu((*w1_)(x)) * (*w3_)(x));
  return (*w2_)(gelu((*w1_)(x)));
}

DTensor Block::forward(const DTensor& x) {
  DTensor y = x + (*attention_)((*ln1_)(x));
  return y + (*mlp_)((*ln2_)(y));
}

Block& Blocks::add(std::unique_ptr<Block> block) {
  Block* raw = register_module(std::to_string(blocks_.size()), std::move(block));
  blocks_.push_back(raw);
  return *raw;
}

DTensor Blocks::forward(const DTensor& x) {
  DTensor y = x;
  for (Block* block : blocks_) y = (*block)(y);
  return y;
}

GPT::GPT(const DeviceMesh& mesh, const GPTConfig& c, uint64_t seed)
    : nn::Module(mesh), config_((check_config(c), c)) {
  // The seeds and scales of the demo's weights since its first version, so
  // its printed losses stay comparable.
  check_parameter_sizes("GPT", planned_tensors(c), 1);
  const bool llama = c.style == ModelStyle::Llama;
  const int64_t h = c.hidden, f = c.ffn_hidden(), kv = (h / c.heads) * c.num_kv_heads();
  const double in_h = 1.0 / std::sqrt(static_cast<double>(h));
  const double in_f = 1.0 / std::sqrt(static_cast<double>(f));
  // A norm of the model's style, its weight (and GPT's bias) from seed.
  auto norm = [&](uint64_t weight_seed, uint64_t bias_seed) -> std::unique_ptr<nn::Module> {
    if (llama) return std::make_unique<nn::RMSNorm>(mesh, norm_weight(h, weight_seed), kRmsEps);
    return std::make_unique<nn::LayerNorm>(mesh, norm_weight(h, weight_seed),
                                           init({h}, bias_seed, 0.1));
  };
  std::optional<std::pair<DTensor, DTensor>> rope;
  if (llama) {
    auto [cos_table, sin_table] = rotary_tables(c.seq, h / c.heads);
    rope.emplace(distribute_tensor(cos_table, mesh, replicated(mesh)),
                 distribute_tensor(sin_table, mesh, replicated(mesh)));
  } else {
    pos_ = register_parameter("pos", init({c.seq, h}, seed + 1, 0.5));
  }
  tok_ = register_module("tok", std::make_unique<nn::Embedding>(mesh, init({c.vocab, h}, seed, 1.0)));
  blocks_ = register_module("blocks", std::make_unique<Blocks>(mesh));
  for (int64_t l = 0; l < c.layers; ++l) {
    const uint64_t s = seed + 100 * static_cast<uint64_t>(l + 1);
    auto block = std::make_unique<Block>(mesh);
    Block& b = *block;
    b.ln1_ = b.register_module("ln1", norm(s, s + 1));
    std::optional<nn::Init> bo;
    if (!llama) bo = init({h}, s + 6, 0.1);
    b.attention_ = b.register_module(
        "attention", std::make_unique<Attention>(
                         mesh, c, init({h, h}, s + 2, in_h), init({kv, h}, s + 3, in_h),
                         init({kv, h}, s + 4, in_h), init({h, h}, s + 5, in_h), bo, rope));
    b.ln2_ = b.register_module("ln2", norm(s + 7, s + 8));
    if (llama)
      b.mlp_ = b.register_module(
          "mlp", std::make_unique<MLP>(mesh, init({f, h}, s + 9, in_h), init({h, f}, s + 11, in_f),
                                       init({f, h}, s + 13, in_h)));
    else
      b.mlp_ = b.register_module(
          "mlp", std::make_unique<MLP>(mesh, init({f, h}, s + 9, in_h), init({f}, s + 10, 0.1),
                                       init({h, f}, s + 11, in_f), init({h}, s + 12, 0.1)));
    blocks_->add(std::move(block));
  }
  lnf_ = register_module("lnf", norm(seed + 2, seed + 3));
  head_ = register_module("head", std::make_unique<nn::Linear>(mesh, init({c.vocab, h}, seed + 4, in_h),
                                                               std::nullopt));
}

DTensor GPT::forward(const DTensor& ids) {
  DT_CHECK(ids.dim() == 2 && ids.shape()[1] == config_.seq && ids.dtype() == DType::Int64,
           "GPT: ids must be int64 (batch, seq = ", config_.seq, "), got ",
           dtype_short_name(ids.dtype()), " of shape ", ids.shape());
  DTensor x = (*tok_)(ids);
  if (pos_) x = x + *pos_;
  return (*head_)((*lnf_)((*blocks_)(x)));
}

ParallelizePlan gpt_tensor_parallel_plan(const GPTConfig& config, bool sequence_parallel,
                                         bool loss_parallel) {
  const Placement between = sequence_parallel ? Placement(Shard(1)) : Placement(Replicate());
  const Placement logits = loss_parallel ? Placement(Shard(-1)) : Placement(Replicate());
  ParallelizePlan plan = {
      {"tok", RowwiseParallel{.output_layouts = between}},
      {"blocks.*.attention.wq", ColwiseParallel{}},
      {"blocks.*.attention.wk", ColwiseParallel{}},
      {"blocks.*.attention.wv", ColwiseParallel{}},
      {"blocks.*.attention.wo", RowwiseParallel{.output_layouts = between}},
      {"blocks.*.mlp.w1", ColwiseParallel{}},
      {"blocks.*.mlp.w2", RowwiseParallel{.output_layouts = between}},
      {"head", ColwiseParallel{.output_layouts = logits}},
  };
  // SwiGLU's gate and up projections are split alike, so silu(w1 x) * w3 x
  // multiplies matching shards.
  if (config.style == ModelStyle::Llama) plan.push_back({"blocks.*.mlp.w3", ColwiseParallel{}});
  if (sequence_parallel) {
    plan.push_back({"blocks.*.ln1", SequenceParallel{}});
    plan.push_back({"blocks.*.ln2", SequenceParallel{}});
    plan.push_back({"lnf", SequenceParallel{}});
    // Gather the normed slices once for q, k and v, instead of once each.
    plan.push_back({"blocks.*.attention", PrepareModuleInput{.input_layouts = Shard(1),
                                                             .desired_input_layouts = Replicate()}});
    // And once for w1 and w3.
    if (config.style == ModelStyle::Llama)
      plan.push_back({"blocks.*.mlp", PrepareModuleInput{.input_layouts = Shard(1),
                                                         .desired_input_layouts = Replicate()}});
  }
  return plan;
}

ParallelizePlan gpt_tensor_parallel_plan(bool sequence_parallel, bool loss_parallel) {
  return gpt_tensor_parallel_plan(GPTConfig{}, sequence_parallel, loss_parallel);
}

DTensor gpt_loss(const DTensor& logits, const DTensor& targets) {
  DT_CHECK(logits.dim() == 3 && targets.dim() == 2 && targets.shape()[0] == logits.shape()[0] &&
               targets.shape()[1] == logits.shape()[1],
           "gpt_loss: logits (batch, seq, vocab) and targets (batch, seq) expected, got ",
           logits.shape(), " and ", targets.shape());
  for (int d = 0; d < logits.mesh().ndim(); ++d)
    if (logits.placements()[static_cast<size_t>(d)] == Shard(2))
      return vocab_parallel_cross_entropy(logits, targets, d);
  const int64_t tokens = logits.shape()[0] * logits.shape()[1];
  return cross_entropy(reshape(logits, {tokens, logits.shape()[2]}), reshape(targets, {tokens}));
}

}  // namespace dtensor::models
