// A small GPT-style transformer as an nn::Module tree: token embedding and
// a learnt position embedding, L blocks of causal self-attention and a GELU
// MLP, each behind a LayerNorm with a residual, a final LayerNorm and an
// output projection. The model `dtensor demo` runs and the tests and
// benchmarks train.
//
//   models::GPT model(mesh, config, /*seed=*/1234);   // parameters Replicate
//   parallelize_module(model, tp, models::gpt_tensor_parallel_plan(true));
//   DTensor logits = model(ids);                      // ids (batch, seq) int64
//   DTensor loss = models::gpt_loss(logits, targets);
//
// Module names (for plans): tok, blocks.N.{ln1, attention.{wq,wk,wv,wo},
// ln2, mlp.{w1,w2}}, lnf, head; the position table is the root's parameter
// "pos". wq, wk, wv and head have no bias. The same model on a 1-rank mesh
// (World::simulated(1)) is the one-process reference of a parallel run:
// every process makes the same weights from the seed.
#pragma once

#include <cstdint>

#include "dtensor/nn.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor::models {

struct GPTConfig {
  int64_t batch = 4;
  int64_t seq = 16;
  int64_t hidden = 64;
  int64_t heads = 8;
  int64_t layers = 2;
  int64_t vocab = 256;
};

// Causal self-attention on (batch, seq, hidden). With the projections
// column-parallel (wq, wk, wv) and row-parallel (wo), each rank computes
// whole heads when `heads` is a multiple of the tp size.
class Attention : public nn::Module {
 public:
  Attention(const DeviceMesh& mesh, const GPTConfig& config, const nn::Init& wq,
            const nn::Init& wk, const nn::Init& wv, const nn::Init& wo, const nn::Init& bo);
  DTensor forward(const DTensor& x) override;

 private:
  int64_t heads_;
  nn::Linear *wq_, *wk_, *wv_, *wo_;
  DTensor causal_mask_;  // (seq, seq) bool, true above the diagonal; Replicate
};

// w2(gelu(w1(x))), w1 (4 hidden, hidden).
class MLP : public nn::Module {
 public:
  MLP(const DeviceMesh& mesh, const nn::Init& w1, const nn::Init& b1, const nn::Init& w2,
      const nn::Init& b2);
  DTensor forward(const DTensor& x) override;

 private:
  nn::Linear *w1_, *w2_;
};

// x + attention(ln1(x)), then + mlp(ln2(.)).
class Block : public nn::Module {
 public:
  explicit Block(const DeviceMesh& mesh) : nn::Module(mesh) {}
  DTensor forward(const DTensor& x) override;

 private:
  friend class GPT;
  nn::LayerNorm *ln1_ = nullptr, *ln2_ = nullptr;
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
  // Weights from `seed`, scaled so activations stay of order one (LayerNorm
  // weights near 1 but not exactly, so a misplaced one shows). Under an
  // nn::MetaDeviceGuard every parameter is meta until materialize().
  GPT(const DeviceMesh& mesh, const GPTConfig& config, uint64_t seed = 1234);
  // ids (batch, seq) int64 -> logits (batch, seq, vocab).
  DTensor forward(const DTensor& ids) override;
  const GPTConfig& config() const { return config_; }

 private:
  GPTConfig config_;
  nn::Embedding* tok_;
  DTensor* pos_;
  Blocks* blocks_;
  nn::LayerNorm* lnf_;
  nn::Linear* head_;
};

// The Megatron plan for GPT: a vocabulary-parallel tok, column-parallel
// wq/wk/wv/w1 and head, row-parallel wo/w2. With sequence_parallel the
// activations between blocks are Shard(1) on tp (tok and the row-parallel
// outputs reduce-scatter, the norms are SequenceParallel, attention's input
// is all-gathered once for q, k and v, the head's input gathered); with
// loss_parallel the head's logits stay Shard(-1) on tp (for
// vocab_parallel_cross_entropy), else Replicate.
ParallelizePlan gpt_tensor_parallel_plan(bool sequence_parallel, bool loss_parallel = true);

// The mean cross-entropy of logits (batch, seq, vocab) against targets
// (batch, seq) int64: vocab_parallel_cross_entropy over the mesh dim where
// the logits are sharded on the vocabulary, else cross_entropy. Replicate.
DTensor gpt_loss(const DTensor& logits, const DTensor& targets);

}  // namespace dtensor::models
