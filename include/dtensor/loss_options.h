// F.cross_entropy's and F.nll_loss's whole argument lists (class weights,
// label smoothing, class-probability targets) and F.embedding's
// padding_idx, for Tensors and DTensors. Each is composed from ops that
// have DTensor rules and gradients (log_softmax, nll_loss, embedding, mul,
// sum, where), so every layout those ops take works, and a DTensor's
// gradient is the composition's, with PyTorch 1.13's formulas:
//   weighted nll: loss_i = -w[t_i] * lp[i, t_i]; Mean divides the sum by
//     the sum of w[t_i] over the targets that are not ignore_index;
//   label smoothing e over C classes: (1 - e) * nll + e / C * smooth, with
//     smooth_i = -sum_c w_c lp[i, c] (0 at ignored targets), reduced as nll
//     is (Mean over the same denominator);
//   probability targets p (the input's shape, floating): p is smoothed to
//     p (1 - e) + e / C, loss_i = -sum_c w_c p[i, c] lp[i, c], and Mean
//     divides by the number of samples (numel / C), whatever the weights.
// The vocabulary-parallel loss (parallel.h) has its own fused kernel and
// takes weights but not label smoothing.
#pragma once

#include <optional>

#include "dtensor/ops.h"
#include "dtensor/tensor.h"

namespace dtensor {

// T is Tensor or DTensor (the weight is of the input's layer).
template <class T>
struct LossOptions {
  Reduction reduction = Reduction::Mean;
  // Targets equal to it count for nothing (class-index targets only; a
  // probability target needs it negative, as PyTorch's check).
  int64_t ignore_index = -100;
  // A floating weight per class (shape (C)), cast to the input's dtype.
  std::optional<T> weight = std::nullopt;
  // In [0, 1]; cross_entropy only.
  double label_smoothing = 0.0;
};

// input (C), (N, C) or (N, C, d1, ...) of log-probabilities, target of
// int64 class indices of shape (), (N) or (N, d1, ...).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const LossOptions<Tensor>& options);
DTensor nll_loss(const DTensor& log_probs, const DTensor& target,
                 const LossOptions<DTensor>& options);
// logits as nll_loss's input; target class indices as nll_loss's, or class
// probabilities of the logits' shape and a floating dtype.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const LossOptions<Tensor>& options);
DTensor cross_entropy(const DTensor& logits, const DTensor& target,
                      const LossOptions<DTensor>& options);

// embedding(weight, indices) whose rows at padding_idx (negative counts
// from the end of the table) get no gradient from the lookup, as
// F.embedding's padding_idx; the values are the plain lookup's.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx);
DTensor embedding(const DTensor& weight, const DTensor& indices,
                  std::optional<int64_t> padding_idx);

}  // namespace dtensor
