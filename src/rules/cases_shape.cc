// Validator cases of the shape ops (src/ops/shape.cc) and einsum.
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

template <class F>
OpCase shape_case(std::string name, std::optional<OpId> id, F f) {
  return {std::move(name), id, {{kX}},
          [f](const Tensors& x) { return f(x[0]); },
          [f](const DTensors& x) { return f(x[0]); }};
}

}  // namespace

void add_shape_cases(std::vector<OpCase>& c) {
  c.push_back(shape_case("repeat(1,2,1)", OpId::Repeat,
                   [](const auto& x) { return repeat(x, {1, 2, 1}); }));
  c.push_back(shape_case("tile(2,1,1,1)", OpId::Repeat,
                   [](const auto& x) { return tile(x, {2, 1, 1, 1}); }));
  c.push_back(shape_case("pad(1,1)", OpId::Pad, [](const auto& x) { return pad(x, {1, 1}); }));
  c.push_back(shape_case("pad(0,0,1,2,value)", OpId::Pad,
                   [](const auto& x) { return pad(x, {0, 0, 1, 2}, "constant", Scalar(3.0)); }));
  c.push_back(shape_case("pad(reflect)", OpId::Pad,
                   [](const auto& x) { return pad(x, {1, 1}, "reflect"); }));
  c.push_back({"einsum(bij,bjk->bik)", std::nullopt, {{{2, 5, 4}}, {{2, 4, 3}}},
               [](const Tensors& x) { return einsum("bij,bjk->bik", {x[0], x[1]}); },
               [](const DTensors& x) { return einsum("bij,bjk->bik", {x[0], x[1]}); }});
  c.push_back({"einsum(ij,kj->ik)", std::nullopt, {{{5, 4}}, {{3, 4}}},
               [](const Tensors& x) { return einsum("ij,kj->ik", {x[0], x[1]}); },
               [](const DTensors& x) { return einsum("ij,kj->ik", {x[0], x[1]}); }});
  c.push_back({"unbind(1)[2]", std::nullopt, {{kX}},
               [](const Tensors& x) { return unbind(x[0], 1)[2]; },
               [](const DTensors& x) { return unbind(x[0], 1)[2]; }});
}

}  // namespace dtensor::rules
