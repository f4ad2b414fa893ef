// Validator cases of the scans, sorting, logical reductions and norms
// (src/ops/scan.cc, src/ops/norm.cc) on [4, 5, 2].
#include <cmath>

#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

template <class F>
OpCase on_x(std::string name, std::optional<OpId> id, F f, double tol = 0,
            InputKind kind = InputKind::Values) {
  return {std::move(name), id, {{kX, kind}},
          [f](const Tensors& x) { return f(x[0]); },
          [f](const DTensors& x) { return f(x[0]); }, tol};
}

}  // namespace

void add_scan_cases(std::vector<OpCase>& c) {
  c.push_back(on_x("cumsum(1)", OpId::Cumsum, [](const auto& x) { return cumsum(x, 1); }));
  c.push_back(on_x("sort(1).values", OpId::SortIndices,
                   [](const auto& x) { return sort(x, 1).values; }));
  c.push_back(on_x("sort(0,desc).indices", OpId::SortIndices,
                   [](const auto& x) { return sort(x, 0, true, true).indices; }));
  c.push_back(on_x("topk(2,1).values", OpId::TopkIndices,
                   [](const auto& x) { return topk(x, 2, 1).values; }));
  c.push_back(on_x("logsumexp(1)", OpId::Logsumexp,
                   [](const auto& x) { return logsumexp(x, {1}); }, kFloat));
  // Data with zeros often enough that all/any of a row is sometimes false/true.
  c.push_back(on_x("all(1)", OpId::All, [](const auto& x) { return all(x, {1}); }, 0,
                   InputKind::FewZeros));
  c.push_back(on_x("any(1)", OpId::Any, [](const auto& x) { return any(x, {1}); }, 0,
                   InputKind::FewNonzeros));
  c.push_back(on_x("vector_norm(2,1)", OpId::NormPart,
                   [](const auto& x) { return vector_norm(x, 2, {1}); }, kFloat));
  c.push_back(on_x("vector_norm(1)", OpId::NormPart,
                   [](const auto& x) { return vector_norm(x, 1); }, kFloat));
  c.push_back(on_x("vector_norm(inf,0)", OpId::NormPart,
                   [](const auto& x) { return vector_norm(x, INFINITY, {0}); }));
}

}  // namespace dtensor::rules
