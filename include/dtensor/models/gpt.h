// A small GPT-style transformer as an nn::Module tree: token embedding and
// a learnt position embedding, L blocks of causal self-attention and a GELU
// MLP, each behind a LayerNorm with a residual, a final LayerNorm and an
// output projection. The model `dtensor demo` runs and the tests and
// benchmarks train, and, with GPTConfig::style = Llama, the Llama
// architecture `dtensor train --model llama` and `dtensor estimate
// --preset llama3-8b` run.
//
//   models::GPT model(mesh, config, /*seed=*/1234);   // parameters Replicate
//   parallelize_module(model, tp, models::gpt_tensor_parallel_plan(config, true));
//   DTensor logits = model(ids);                      // ids (batch, seq) int64
//   DTensor loss = models::gpt_loss(logits, targets);
//
// Options beyond GPT-2's (the defaults are GPT-2's, so a config that sets
// none of them is the model it always was, bit for bit):
//  - kv_heads: grouped-query attention. wk and wv project to kv_heads *
//    head_dim features (head_dim = hidden / heads); each key/value head
//    serves heads / kv_heads consecutive query heads (k and v expanded as
//    torchtitan's repeat_kv). 0 means heads (multi-head attention).
//  - ffn: the MLP's width; 0 means 4 * hidden.
//  - style = Llama: RMSNorm (eps 1e-5) in place of LayerNorm, a SwiGLU MLP
//    w2(silu(w1 x) * w3 x), rotary position embedding (RoPE, theta
//    500000 as Llama 3, on interleaved feature pairs as torchtitan's
//    apply_rotary_emb) on q and k in place of the learnt position table,
//    causal scaled_dot_product_attention, and no biases anywhere.
//
// Module names (for plans): tok, blocks.N.{ln1, attention.{wq,wk,wv,wo},
// ln2, mlp.{w1,w2}}, lnf, head, and blocks.N.mlp.w3 for Llama; GPT's
// position table is the root's parameter "pos". GPT's wq, wk, wv and head
// have no bias. The same model on a 1-rank mesh (World::simulated(1)) is
// the one-process reference of a parallel run: every process makes the
// same weights from the seed.
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/nn.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor::models {

enum class ModelStyle {
  GPT,    // LayerNorm, GELU MLP, learnt positions, biases (GPT-2)
  Llama,  // RMSNorm, SwiGLU MLP, rotary positions, no biases (Llama 2/3)
};

struct GPTConfig {
  int64_t batch = 4;
  int64_t seq = 16;
  int64_t hidden = 64;
  int64_t heads = 8;
  int64_t layers = 2;
  int64_t vocab = 256;
  int64_t kv_heads = 0;  // 0: heads
  int64_t ffn = 0;       // 0: 4 * hidden
  ModelStyle style = ModelStyle::GPT;

  int64_t num_kv_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int64_t ffn_hidden() const { return ffn == 0 ? 4 * hidden : ffn; }
};

// "gpt" or "llama".
const char* to_string(ModelStyle style);

// Causal self-attention on (batch, seq, hidden). With the projections
// column-parallel (wq, wk, wv) and row-parallel (wo), each rank computes
// whole heads when `heads` (and `kv_heads`) is a multiple of the tp size;
// with grouped-query attention a kv_heads that is not throws at forward.
class Attention : public nn::Module {
 public:
  // `rope`: the rotary tables (cos, sin), shared by every block; none for
  // GPT. `bo`: wo's bias (none for Llama).
  Attention(const DeviceMesh& mesh, const GPTConfig& config, const nn::Init& wq, const nn::Init& wk,
            const nn::Init& wv, const nn::Init& wo, const std::optional<nn::Init>& bo,
            const std::optional<std::pair<DTensor, DTensor>>& rope = std::nullopt);
  DTensor forward(const DTensor& x) override;

 private:
  int64_t heads_, kv_heads_, seq_;
  nn::Linear *wq_, *wk_, *wv_, *wo_;
  std::optional<DTensor> causal_mask_;  // GPT: (seq, seq) bool, true above the diagonal
  std::optional<DTensor> cos_, sin_;    // Llama: (seq, 1, head_dim / 2) float32
};

// GPT: w2(gelu(w1(x))), with biases; Llama (SwiGLU): w2(silu(w1(x)) *
// w3(x)), without. w1 and w3 (ffn, hidden), w2 (hidden, ffn).
class MLP : public nn::Module {
 public:
  MLP(const DeviceMesh& mesh, const nn::Init& w1, const nn::Init& b1, const nn::Init& w2,
      const nn::Init& b2);
  MLP(const DeviceMesh& mesh, const nn::Init& w1, const nn::Init& w2, const nn::Init& w3);
  DTensor forward(const DTensor& x) override;

 private:
  nn::Linear *w1_, *w2_, *w3_ = nullptr;
};

// x + attention(ln1(x)), then + mlp(ln2(.)); the norms are nn::LayerNorm
// (GPT) or nn::RMSNorm (Llama).
class Block : public nn::Module {
 public:
  explicit Block(const DeviceMesh& mesh) : nn::Module(mesh) {}
  DTensor forward(const DTensor& x) override;

 private:
  friend class GPT;
  nn::Module *ln1_ = nullptr, *ln2_ = nullptr;
  Attention* attention_ = nullptr;
  MLP* mlp_ = nullptr;
};

// The blocks "0", "1", ... run in order.
class Blocks : public nn::Module {
 public:
  explicit Blocks(const DeviceMesh& mesh) : nn::Module(mesh) {}
  DTensor forward(const DTensor& x) override;
  Block& add(std::unique_ptr<Block> block);

 private:
  std::vector<Block*> blocks_;
};

class GPT : public nn::Module {
 public:
  // Weights from `seed`, scaled so activations stay of order one (norm
  // weights near 1 but not exactly, so a misplaced one shows). Under an
  // nn::MetaDeviceGuard every parameter is meta until materialize().
  // Throws dtensor::Error naming the sizes when the config is not a model
  // (hidden not a multiple of heads, heads not of kv_heads, an odd head
  // dim with rotary positions).
  GPT(const DeviceMesh& mesh, const GPTConfig& config, uint64_t seed = 1234);
  // ids (batch, seq) int64 -> logits (batch, seq, vocab).
  DTensor forward(const DTensor& ids) override;
  const GPTConfig& config() const { return config_; }

 private:
  GPTConfig config_;
  nn::Embedding* tok_;
  DTensor* pos_ = nullptr;  // GPT only
  Blocks* blocks_;
  nn::Module* lnf_;
  nn::Linear* head_;
};

// The Megatron plan for GPT: a vocabulary-parallel tok, column-parallel
// wq/wk/wv/w1 (and Llama's w3) and head, row-parallel wo/w2. With
// sequence_parallel the activations between blocks are Shard(1) on tp (tok
// and the row-parallel outputs reduce-scatter, the norms are
// SequenceParallel, attention's input is all-gathered once for q, k and v,
// the head's input gathered); with loss_parallel the head's logits stay
// Shard(-1) on tp (for vocab_parallel_cross_entropy), else Replicate.
// The plan names the modules of `config`'s style (the overload without one:
// GPT's).
ParallelizePlan gpt_tensor_parallel_plan(const GPTConfig& config, bool sequence_parallel,
                                         bool loss_parallel = true);
ParallelizePlan gpt_tensor_parallel_plan(bool sequence_parallel, bool loss_parallel = true);

// The mean cross-entropy of logits (batch, seq, vocab) against targets
// (batch, seq) int64: vocab_parallel_cross_entropy over the mesh dim where
// the logits are sharded on the vocabulary, else cross_entropy. Replicate.
DTensor gpt_loss(const DTensor& logits, const DTensor& targets);

}  // namespace dtensor::models
