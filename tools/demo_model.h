// The model of `dtensor demo`: a small GPT-style transformer (token and
// position embedding, L blocks of causal self-attention and a GELU MLP,
// each behind a LayerNorm with a residual, a final LayerNorm, an output
// projection and the cross-entropy loss), written twice: on full tensors in
// one process (the reference) and on DTensors with the layers of
// parallel.h (data parallel over one mesh dim, tensor parallel over the
// other). Both read the same full weights, made from one seed.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/parallel.h"

namespace dtensor::cli {

struct ModelConfig {
  int64_t batch = 4;
  int64_t seq = 16;
  int64_t hidden = 64;
  int64_t heads = 8;
  int64_t layers = 2;
  int64_t vocab = 256;
  // Activations between blocks sharded on the sequence dim over tp (norms
  // on slices; all_gather + reduce_scatter instead of all_reduce).
  bool sequence_parallel = true;
  // vocab_parallel_cross_entropy on the vocabulary-sharded logits instead of
  // gathering them for cross_entropy.
  bool loss_parallel = true;
};

struct BlockWeights {
  Tensor ln1_w, ln1_b, wq, wk, wv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
};

struct ModelWeights {
  Tensor token, position;  // (vocab, hidden), (seq, hidden)
  std::vector<BlockWeights> blocks;
  Tensor lnf_w, lnf_b, head;  // head: (vocab, hidden)
};

// Weights of the config's shapes from `seed` (scaled so activations stay
// of order one); every process makes the same values.
ModelWeights make_weights(const ModelConfig& config, uint64_t seed);

// The forward pass on full tensors: logits (batch, seq, vocab) and the mean
// cross-entropy of `targets` (batch, seq).
std::pair<Tensor, Tensor> reference_forward(const ModelConfig& config, const ModelWeights& w,
                                            const Tensor& ids, const Tensor& targets);

// The same model laid out on `mesh`: mesh dim `tp` is tensor parallel; a
// second mesh dim (`dp`, or -1 for none) is data parallel (batch-sharded
// inputs, replicated weights).
class ParallelTransformer {
 public:
  ParallelTransformer(const ModelConfig& config, const ModelWeights& w, const DeviceMesh& mesh,
                      int dp, int tp);

  // ids and targets (batch, seq) int64, laid out as input_placements().
  // `section` (may be empty) is called with the name of each part of the
  // model as the forward pass enters it: "embedding", "block0.attention",
  // "block0.mlp", ..., "head", "loss".
  std::pair<DTensor, DTensor> forward(
      const DTensor& ids, const DTensor& targets,
      const std::function<void(const std::string&)>& section = {}) const;

  // S(0) on dp, Replicate on tp.
  Placements input_placements() const;

  struct Parameter {
    std::string name;
    std::string style;  // "column-parallel", "row-parallel", ...
    const DTensor* value;
  };
  // Block 0's and the others'; blocks after 0 are laid out like block 0.
  std::vector<Parameter> parameters(bool all_blocks) const;

 private:
  struct Block {
    // The norms: sequence-parallel layers, or replicated weights for
    // layer_norm on replicated activations.
    std::optional<SequenceParallelLayerNorm> sp_ln1, sp_ln2;
    std::optional<DTensor> ln1_w, ln1_b, ln2_w, ln2_b;
    ColumnParallelLinear wq, wk, wv;
    RowParallelLinear wo;
    ColumnParallelLinear w1;
    RowParallelLinear w2;
  };
  DTensor norm(const DTensor& x, const std::optional<SequenceParallelLayerNorm>& sp,
               const std::optional<DTensor>& w, const std::optional<DTensor>& b) const;

  ModelConfig config_;
  DeviceMesh mesh_;
  int dp_, tp_;
  VocabParallelEmbedding token_;
  DTensor position_;
  DTensor causal_mask_;  // (seq, seq) bool, true above the diagonal
  std::vector<Block> blocks_;
  std::optional<SequenceParallelLayerNorm> sp_lnf_;
  std::optional<DTensor> lnf_w_, lnf_b_;
  ColumnParallelLinear head_;
};

}  // namespace dtensor::cli
