// Validator cases of the structural ops (src/ops/structural.cc) on
// [4, 5, 2]. Last in the table: cases are seeded by their index.
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

template <class F>
OpCase structural_case(std::string name, OpId id, F f) {
  return {std::move(name),
          id,
          {{kX}},
          [f](const Tensors& x) { return f(x[0]); },
          [f](const DTensors& x) { return f(x[0]); }};
}

}  // namespace

void add_structural_cases(std::vector<OpCase>& c) {
  c.push_back(structural_case("flip(0,2)", OpId::Flip, [](const auto& x) {
    return flip(x, {0, 2});
  }));
  c.push_back(structural_case("roll((2,-1),(1,2))", OpId::Roll, [](const auto& x) {
    return roll(x, {2, -1}, {1, 2});
  }));
  // Integer-valued floats in [-9, 9]: a product of five is exact in float32.
  c.push_back(
      structural_case("cumprod(1)", OpId::Cumprod, [](const auto& x) { return cumprod(x, 1); }));
  c.push_back(structural_case("diagonal(-1,0,1)", OpId::Diagonal,
                              [](const auto& x) { return diagonal(x, -1, 0, 1); }));
}

}  // namespace dtensor::rules
