// Validator cases of the reductions (src/ops/reduction.cc) on [4, 5, 2]:
// one dim, two dims, all dims, keepdim.
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

template <class F>
OpCase reduction(std::string name, OpId id, F f, double tol = 0) {
  return {std::move(name), id, {{kX}},
          [f](const Tensors& x) { return f(x[0]); },
          [f](const DTensors& x) { return f(x[0]); }, tol};
}

}  // namespace

void add_reduction_cases(std::vector<OpCase>& c) {
  c.push_back(reduction("sum(1)", OpId::Sum, [](const auto& x) { return sum(x, {1}); }));
  c.push_back(reduction("sum(0,2,keepdim)", OpId::Sum,
                        [](const auto& x) { return sum(x, {0, 2}, true); }));
  c.push_back(reduction("sum()", OpId::Sum, [](const auto& x) { return sum(x); }));
  c.push_back(reduction("mean(1)", OpId::Mean, [](const auto& x) { return mean(x, {1}); }, kFloat));
  c.push_back(reduction("mean()", OpId::Mean, [](const auto& x) { return mean(x); }, kFloat));
  c.push_back(reduction("prod(2)", OpId::Prod, [](const auto& x) { return prod(x, {2}); }));
  c.push_back(reduction("amax(1)", OpId::Amax, [](const auto& x) { return amax(x, {1}); }));
  c.push_back(reduction("amax()", OpId::Amax, [](const auto& x) { return amax(x); }));
  c.push_back(reduction("amin(0,keepdim)", OpId::Amin,
                        [](const auto& x) { return amin(x, {0}, true); }));
  c.push_back(reduction("var(1)", OpId::Var, [](const auto& x) { return var(x, {1}); }, kFloat));
  c.push_back(reduction("argmax(1)", OpId::Argmax, [](const auto& x) { return argmax(x, 1); }));
  c.push_back(reduction("argmin(0)", OpId::Argmin, [](const auto& x) { return argmin(x, 0); }));
}

}  // namespace dtensor::rules
