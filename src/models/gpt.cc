// The GPT of models/gpt.h: its modules, weights, plan and loss.
#include "dtensor/models/gpt.h"

#include <cmath>
#include <string>
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

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

void check_config(const GPTConfig& c) {
  DT_CHECK(c.batch > 0 && c.seq > 0 && c.hidden > 0 && c.heads > 0 && c.layers >= 0 && c.vocab > 0,
           "GPT: batch, seq, hidden, heads and vocab must be positive and layers >= 0, got batch ",
           c.batch, ", seq ", c.seq, ", hidden ", c.hidden, ", heads ", c.heads, ", layers ",
           c.layers, ", vocab ", c.vocab);
  DT_CHECK(c.hidden % c.heads == 0, "GPT: hidden ", c.hidden, " must be a multiple of heads ",
           c.heads);
  checked_mul(4, c.hidden, "GPT: the MLP's width 4 x hidden");
}

// Every tensor the constructor keeps, each block's `layers` times, so that
// all the sizes are checked before the first parameter is made.
std::vector<PlannedTensor> planned_tensors(const GPTConfig& c) {
  const int64_t h = c.hidden, f = 4 * c.hidden, l = c.layers;
  const int64_t l2 = checked_mul(2, l, "GPT: layers"), l4 = checked_mul(4, l, "GPT: layers");
  return {{"pos", {c.seq, h}},
          {"tok.weight", {c.vocab, h}},
          {"blocks.N.ln1 and ln2 weights and biases", {h}, DType::Float32, l4},
          {"blocks.N.attention.wq, wk, wv and wo weights", {h, h}, DType::Float32, l4},
          {"blocks.N.attention.wo.bias", {h}, DType::Float32, l},
          {"blocks.N.attention causal mask", {c.seq, c.seq}, DType::Bool, l},
          {"blocks.N.mlp.w1 and w2 weights", {f, h}, DType::Float32, l2},
          {"blocks.N.mlp.w1.bias", {f}, DType::Float32, l},
          {"blocks.N.mlp.w2.bias", {h}, DType::Float32, l},
          {"lnf.weight and bias", {h}, DType::Float32, 2},
          {"head.weight", {c.vocab, h}}};
}

}  // namespace

Attention::Attention(const DeviceMesh& mesh, const GPTConfig& config, const nn::Init& wq,
                     const nn::Init& wk, const nn::Init& wv, const nn::Init& wo,
                     const nn::Init& bo)
    : nn::Module(mesh),
      heads_(config.heads),
      causal_mask_(distribute_tensor(causal_mask(config.seq), mesh, replicated(mesh))) {
  wq_ = register_module("wq", std::make_unique<nn::Linear>(mesh, wq, std::nullopt));
  wk_ = register_module("wk", std::make_unique<nn::Linear>(mesh, wk, std::nullopt));
  wv_ = register_module("wv", std::make_unique<nn::Linear>(mesh, wv, std::nullopt));
  wo_ = register_module("wo", std::make_unique<nn::Linear>(mesh, wo, bo));
}

DTensor Attention::forward(const DTensor& x) {
  DT_CHECK(x.dim() == 3 && x.shape()[1] == causal_mask_.shape()[0],
           "Attention: input must be (batch, seq = ", causal_mask_.shape()[0],
           ", hidden), got shape ", x.shape());
  const int64_t b = x.shape()[0], s = x.shape()[1], h = x.shape()[2], nh = heads_, hd = h / nh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // (b, s, h) sharded on h over tp -> (b, nh, s, hd) sharded on the heads:
  // no communication when every rank's features are whole heads.
  auto split_heads = [&](const DTensor& t) { return transpose(reshape(t, {b, s, nh, hd}), 1, 2); };
  DTensor q = split_heads((*wq_)(x)), k = split_heads((*wk_)(x)), v = split_heads((*wv_)(x));
  DTensor scores = masked_fill(matmul(q, transpose(k, 2, 3)) * scale, causal_mask_, kMasked);
  DTensor o = reshape(transpose(matmul(softmax(scores, -1), v), 1, 2), {b, s, h});
  return (*wo_)(o);
}

MLP::MLP(const DeviceMesh& mesh, const nn::Init& w1, const nn::Init& b1, const nn::Init& w2,
         const nn::Init& b2)
    : nn::Module(mesh) {
  w1_ = register_module("w1", std::make_unique<nn::Linear>(mesh, w1, b1));
  w2_ = register_module("w2", std::make_unique<nn::Linear>(mesh, w2, b2));
}

DTensor MLP::forward(const DTensor& x) { return (*w2_)(gelu((*w1_)(x))); }

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
  const int64_t h = c.hidden, f = 4 * c.hidden;
  const double in_h = 1.0 / std::sqrt(static_cast<double>(h));
  const double in_f = 1.0 / std::sqrt(static_cast<double>(f));
  pos_ = register_parameter("pos", init({c.seq, h}, seed + 1, 0.5));
  tok_ = register_module("tok", std::make_unique<nn::Embedding>(mesh, init({c.vocab, h}, seed, 1.0)));
  blocks_ = register_module("blocks", std::make_unique<Blocks>(mesh));
  for (int64_t l = 0; l < c.layers; ++l) {
    const uint64_t s = seed + 100 * static_cast<uint64_t>(l + 1);
    auto block = std::make_unique<Block>(mesh);
    Block& b = *block;
    b.ln1_ = b.register_module(
        "ln1", std::make_unique<nn::LayerNorm>(mesh, norm_weight(h, s), init({h}, s + 1, 0.1)));
    b.attention_ = b.register_module(
        "attention",
        std::make_unique<Attention>(mesh, c, init({h, h}, s + 2, in_h), init({h, h}, s + 3, in_h),
                                    init({h, h}, s + 4, in_h), init({h, h}, s + 5, in_h),
                                    init({h}, s + 6, 0.1)));
    b.ln2_ = b.register_module(
        "ln2", std::make_unique<nn::LayerNorm>(mesh, norm_weight(h, s + 7), init({h}, s + 8, 0.1)));
    b.mlp_ = b.register_module(
        "mlp", std::make_unique<MLP>(mesh, init({f, h}, s + 9, in_h), init({f}, s + 10, 0.1),
                                     init({h, f}, s + 11, in_f), init({h}, s + 12, 0.1)));
    blocks_->add(std::move(block));
  }
  lnf_ = register_module("lnf", std::make_unique<nn::LayerNorm>(mesh, norm_weight(h, seed + 2),
                                                                init({h}, seed + 3, 0.1)));
  head_ = register_module("head", std::make_unique<nn::Linear>(mesh, init({c.vocab, h}, seed + 4, in_h),
                                                               std::nullopt));
}

DTensor GPT::forward(const DTensor& ids) {
  DT_CHECK(ids.dim() == 2 && ids.shape()[1] == config_.seq && ids.dtype() == DType::Int64,
           "GPT: ids must be int64 (batch, seq = ", config_.seq, "), got ",
           dtype_short_name(ids.dtype()), " of shape ", ids.shape());
  DTensor x = (*tok_)(ids) + *pos_;
  return (*head_)((*lnf_)((*blocks_)(x)));
}

ParallelizePlan gpt_tensor_parallel_plan(bool sequence_parallel, bool loss_parallel) {
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
  if (sequence_parallel) {
    plan.push_back({"blocks.*.ln1", SequenceParallel{}});
    plan.push_back({"blocks.*.ln2", SequenceParallel{}});
    plan.push_back({"lnf", SequenceParallel{}});
    // Gather the normed slices once for q, k and v, instead of once each.
    plan.push_back({"blocks.*.attention", PrepareModuleInput{.input_layouts = Shard(1),
                                                             .desired_input_layouts = Replicate()}});
  }
  return plan;
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
