// Validator cases of the neural-network math (src/ops/nn.cc).
#include "rules/cases.h"

namespace dtensor::rules {

void add_nn_cases(std::vector<OpCase>& c) {
  using dispatch::OpId;
  constexpr double kFloat = 1e-4;
  const Shape x{4, 5, 2};
  c.push_back({"softmax(1)", OpId::Softmax, {{x}},
               [](const Tensors& t) { return softmax(t[0], 1); },
               [](const DTensors& t) { return softmax(t[0], 1); }, kFloat});
  c.push_back({"log_softmax(2)", OpId::LogSoftmax, {{x}},
               [](const Tensors& t) { return log_softmax(t[0], 2); },
               [](const DTensors& t) { return log_softmax(t[0], 2); }, kFloat});
  c.push_back({"layer_norm", OpId::LayerNorm, {{x}, {{2}}, {{2}}},
               [](const Tensors& t) { return layer_norm(t[0], {2}, t[1], t[2]); },
               [](const DTensors& t) { return layer_norm(t[0], {2}, t[1], t[2]); }, kFloat});
  c.push_back({"rms_norm", OpId::RmsNorm, {{x}, {{2}}},
               [](const Tensors& t) { return rms_norm(t[0], {2}, t[1]); },
               [](const DTensors& t) { return rms_norm(t[0], {2}, t[1]); }, kFloat});
  c.push_back({"nll_loss(mean)", OpId::NllLoss, {{{6, 5}}, {{6}, InputKind::Index, 5}},
               [](const Tensors& t) { return nll_loss(t[0], t[1]); },
               [](const DTensors& t) { return nll_loss(t[0], t[1]); }, kFloat});
  c.push_back({"nll_loss(sum)", OpId::NllLoss, {{{6, 5}}, {{6}, InputKind::Index, 5}},
               [](const Tensors& t) { return nll_loss(t[0], t[1], Reduction::Sum); },
               [](const DTensors& t) { return nll_loss(t[0], t[1], Reduction::Sum); }});
  c.push_back({"nll_loss(none)", OpId::NllLoss, {{{6, 5}}, {{6}, InputKind::Index, 5}},
               [](const Tensors& t) { return nll_loss(t[0], t[1], Reduction::None); },
               [](const DTensors& t) { return nll_loss(t[0], t[1], Reduction::None); }});
  c.push_back({"cross_entropy", std::nullopt, {{{6, 5}}, {{6}, InputKind::Index, 5}},
               [](const Tensors& t) { return cross_entropy(t[0], t[1]); },
               [](const DTensors& t) { return cross_entropy(t[0], t[1]); }, kFloat});
  c.push_back({"embedding", OpId::Embedding, {{{7, 3}}, {{4, 2}, InputKind::Index, 7}},
               [](const Tensors& t) { return embedding(t[0], t[1]); },
               [](const DTensors& t) { return embedding(t[0], t[1]); }});
  c.push_back({"dropout", OpId::Dropout, {{x}},
               [](const Tensors& t) {
                 const Tensor keep = ge(Tensor::rand(t[0].shape(), 11), 0.25);
                 return div(where(keep, t[0], 0.0), 0.75);
               },
               [](const DTensors& t) { return dropout(t[0], 0.25, 11); }, kFloat});
}

}  // namespace dtensor::rules
