// Validator cases of the views (src/ops/view.cc) on [4, 5, 2] and a
// broadcastable [4, 1, 2]. flatten, squeeze, unsqueeze and transpose
// dispatch View / Permute and are checked under those ids.
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;
const Shape kX{4, 5, 2};

// Tensor views are methods, DTensor views functions: one case from both.
template <class P, class D>
OpCase view_case(std::string name, OpId id, P plain, D dist, Shape shape = kX) {
  return {std::move(name), id, {{std::move(shape)}},
          [plain](const Tensors& x) { return plain(x[0]).contiguous(); },
          [dist](const DTensors& x) { return dist(x[0]); }};
}

}  // namespace

void add_view_cases(std::vector<OpCase>& c) {
  c.push_back(view_case("view[4,10]", OpId::View, [](const Tensor& x) { return x.reshape({4, 10}); },
                        [](const DTensor& x) { return reshape(x, {4, 10}); }));
  c.push_back(view_case("view[20,2]", OpId::View, [](const Tensor& x) { return x.reshape({20, 2}); },
                        [](const DTensor& x) { return reshape(x, {20, 2}); }));
  c.push_back(view_case("view[2,2,5,2]", OpId::View,
                        [](const Tensor& x) { return x.reshape({2, 2, 5, 2}); },
                        [](const DTensor& x) { return reshape(x, {2, 2, 5, 2}); }));
  c.push_back(view_case("flatten", OpId::View, [](const Tensor& x) { return x.flatten(); },
                        [](const DTensor& x) { return flatten(x); }));
  c.push_back(view_case("unsqueeze(1)", OpId::View, [](const Tensor& x) { return x.unsqueeze(1); },
                        [](const DTensor& x) { return unsqueeze(x, 1); }));
  c.push_back(view_case("squeeze(1)", OpId::View, [](const Tensor& x) { return x.squeeze(1); },
                        [](const DTensor& x) { return squeeze(x, 1); }, {4, 1, 2}));
  c.push_back(view_case("permute(2,0,1)", OpId::Permute,
                        [](const Tensor& x) { return x.permute({2, 0, 1}); },
                        [](const DTensor& x) { return permute(x, {2, 0, 1}); }));
  c.push_back(view_case("transpose(0,2)", OpId::Permute,
                        [](const Tensor& x) { return x.transpose(0, 2); },
                        [](const DTensor& x) { return transpose(x, 0, 2); }));
  c.push_back(view_case("expand", OpId::Expand, [](const Tensor& x) { return x.expand({4, 3, 2}); },
                        [](const DTensor& x) { return expand(x, {4, 3, 2}); }, {4, 1, 2}));
  c.push_back(view_case("narrow(1,1,3)", OpId::Narrow,
                        [](const Tensor& x) { return x.narrow(1, 1, 3); },
                        [](const DTensor& x) { return narrow(x, 1, 1, 3); }));
  c.push_back(view_case("slice(1,1,5,2)", OpId::Slice,
                        [](const Tensor& x) { return x.slice(1, 1, 5, 2); },
                        [](const DTensor& x) { return slice(x, 1, 1, 5, 2); }));
  c.push_back(view_case("select(1,2)", OpId::Select, [](const Tensor& x) { return x.select(1, 2); },
                        [](const DTensor& x) { return select(x, 1, 2); }));
}

}  // namespace dtensor::rules
