// Validator cases of scaled_dot_product_attention (src/ops/attention.cc):
// batch 2, heads 3, query length 5, key length 4, head dim 2.
#include "rules/cases.h"

namespace dtensor::rules {

void add_attention_cases(std::vector<OpCase>& c) {
  using dispatch::OpId;
  constexpr double kFloat = 1e-4;
  const Shape q{2, 3, 5, 2}, kv{2, 3, 4, 2};
  for (bool causal : {false, true}) {
    c.push_back({causal ? "sdpa(causal)" : "sdpa", OpId::ScaledDotProductAttention,
                 {{q}, {kv}, {kv}},
                 [causal](const Tensors& t) {
                   return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.0, causal);
                 },
                 [causal](const DTensors& t) {
                   return scaled_dot_product_attention(t[0], t[1], t[2], std::nullopt, 0.0,
                                                       causal);
                 },
                 kFloat});
  }
}

}  // namespace dtensor::rules
