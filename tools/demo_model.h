// The model of `dtensor demo`: the GPT of dtensor/models/gpt.h, laid out by
// gpt_tensor_parallel_plan on a (dp, tp) mesh (data parallel over dp: the
// batch is sharded there) and checked against the same model on a 1-rank
// mesh. Both make the same weights from one seed.
#pragma once

#include "dtensor/models/gpt.h"

namespace dtensor::cli {

struct ModelConfig : models::GPTConfig {
  // Activations between blocks sharded on the sequence dim over tp (norms
  // on slices; all_gather + reduce_scatter instead of all_reduce).
  bool sequence_parallel = true;
  // vocab_parallel_cross_entropy on the vocabulary-sharded logits instead of
  // gathering them for cross_entropy.
  bool loss_parallel = true;
};

}  // namespace dtensor::cli
