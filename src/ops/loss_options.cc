// loss_options.h: the losses' and embedding's full PyTorch arguments,
// composed from ops that exist on both layers under the same names (one
// template serves Tensor and DTensor).
#include "dtensor/loss_options.h"

#include "dtensor/distributed_tensor.h"

namespace dtensor {

namespace {

// The class dim of a loss input: 0 for a single sample (C), else 1.
template <class T>
int64_t loss_class_dim(const T& x) {
  return x.dim() == 1 ? 0 : 1;
}

// The weight checked and shaped to broadcast against the input along its
// class dim ((C) -> (1, C, 1, ...)), in the input's dtype.
template <class T>
T loss_class_weight(const T& weight, const T& input, const char* op) {
  const int64_t c = input.size(loss_class_dim(input));
  DT_CHECK(weight.dim() == 1 && weight.size(0) == c, op,
           ": weight must hold one value per class, of shape (", c, "), got shape ",
           weight.shape());
  DT_CHECK(is_floating(weight.dtype()), op, ": weight must be floating, got ", weight.dtype());
  Shape s(static_cast<size_t>(input.dim()), 1);
  s[static_cast<size_t>(loss_class_dim(input))] = c;
  return weight.to(input.dtype()).reshape(s);
}

// w[t] where t counts, 0 where t is ignore_index (shape of the target).
template <class T>
T loss_target_weights(const T& weight, const T& target, int64_t ignore_index) {
  const T counts = ne(target, ignore_index);
  const T safe = where(counts, target, 0);
  const T w = embedding(weight.reshape(Shape{-1, 1}), safe).reshape(target.shape());
  return where(counts, w, 0.0);
}

template <class T>
T loss_reduced(const T& loss, Reduction r) {
  return r == Reduction::None ? loss : sum(loss);
}

template <class T>
T nll_with_options(const T& log_probs, const T& target, const LossOptions<T>& o, const char* op) {
  if (!o.weight) return nll_loss(log_probs, target, o.reduction, o.ignore_index);
  const T w = loss_class_weight(*o.weight, log_probs, op).reshape(Shape{-1});
  const T per = nll_loss(log_probs, target, Reduction::None, o.ignore_index);
  const T wt = loss_target_weights(w, target, o.ignore_index);
  const T loss = mul(per, wt);
  if (o.reduction != Reduction::Mean) return loss_reduced(loss, o.reduction);
  return div(sum(loss), sum(wt));
}

template <class T>
T cross_entropy_with_options(const T& logits, const T& target, const LossOptions<T>& o) {
  const double e = o.label_smoothing;
  DT_CHECK(e >= 0.0 && e <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ", e);
  const int64_t cd = loss_class_dim(logits);
  if (is_floating(target.dtype())) {
    DT_CHECK(target.shape() == logits.shape(), "cross_entropy: a probability target must have ",
             "the input's shape ", logits.shape(), ", got ", target.shape());
    DT_CHECK(o.ignore_index < 0,
             "cross_entropy: ignore_index is not supported for a probability (floating) target, "
             "got ignore_index=",
             o.ignore_index);
    const int64_t c = logits.size(cd);
    const T lp = log_softmax(logits, cd);
    T p = target.to(lp.dtype());
    if (e > 0) p = add(mul(p, 1.0 - e), e / static_cast<double>(c));
    T prod = mul(lp, p);
    if (o.weight) prod = mul(prod, loss_class_weight(*o.weight, logits, "cross_entropy"));
    switch (o.reduction) {
      case Reduction::None:
        return neg(sum(prod, DimVector{cd}));
      case Reduction::Sum:
        return neg(sum(prod));
      case Reduction::Mean:
        return div(neg(sum(prod)), static_cast<double>(logits.numel() / std::max<int64_t>(c, 1)));
    }
  }
  if (!o.weight && e == 0) return cross_entropy(logits, target, o.reduction, o.ignore_index);
  const T lp = log_softmax(logits, cd);
  const T nll = nll_with_options(lp, target, o, "cross_entropy");
  if (e == 0) return nll;
  const int64_t c = logits.size(cd);
  const T w = o.weight ? loss_class_weight(*o.weight, logits, "cross_entropy") : T();
  const T counts = ne(target, o.ignore_index);
  const T smooth = where(counts, neg(sum(o.weight ? mul(lp, w) : lp, DimVector{cd})), 0.0);
  T ret = loss_reduced(smooth, o.reduction);
  if (o.reduction == Reduction::Mean)
    ret = div(ret, o.weight ? sum(loss_target_weights(w.reshape(Shape{-1}), target, o.ignore_index))
                            : sum(counts));
  return add(mul(nll, 1.0 - e), mul(ret, e / static_cast<double>(c)));
}

// padding_idx as an index into the table's rows.
int64_t embedding_padding_row(int64_t padding_idx, int64_t rows) {
  DT_CHECK(padding_idx >= -rows && padding_idx < rows,
           "embedding: padding_idx must be within the table's ", rows, " rows, got ", padding_idx);
  return padding_idx < 0 ? padding_idx + rows : padding_idx;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const LossOptions<Tensor>& o) {
  DT_CHECK(o.label_smoothing == 0.0, "nll_loss: label_smoothing is cross_entropy's argument");
  return nll_with_options(log_probs, target, o, "nll_loss");
}
DTensor nll_loss(const DTensor& log_probs, const DTensor& target, const LossOptions<DTensor>& o) {
  DT_CHECK(o.label_smoothing == 0.0, "nll_loss: label_smoothing is cross_entropy's argument");
  return nll_with_options(log_probs, target, o, "nll_loss");
}
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions<Tensor>& o) {
  return cross_entropy_with_options(logits, target, o);
}
DTensor cross_entropy(const DTensor& logits, const DTensor& target, const LossOptions<DTensor>& o) {
  return cross_entropy_with_options(logits, target, o);
}

// A plain Tensor records no gradient: only the index is checked.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  if (padding_idx && weight.dim() == 2) embedding_padding_row(*padding_idx, weight.size(0));
  return embedding(weight, indices);
}

// The lookup's rows at padding_idx are taken from a detached copy of the
// output: the same values, but their gradient stops there, so the table's
// padding row receives none (where() sends each element's gradient to the
// branch it took).
DTensor embedding(const DTensor& weight, const DTensor& indices,
                  std::optional<int64_t> padding_idx) {
  DTensor out = embedding(weight, indices);
  if (!padding_idx || weight.dim() != 2) return out;
  const int64_t row = embedding_padding_row(*padding_idx, weight.size(0));
  if (!out.requires_grad()) return out;
  return where(eq(indices, row).unsqueeze(-1), out.detach(), out);
}

}  // namespace dtensor
