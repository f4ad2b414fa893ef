// Validator cases of the views (src/ops/view.cc) on [4, 5, 2] and a
// broadcastable [4, 1, 2]. flatten, squeeze, unsqueeze and transpose
// dispatch View / Permute and are checked under those ids. Besides a
// typical call of each op, the degenerate ones: full-range and empty cuts,
// cuts of a size-1 dim, select at both ends, and views, expands and
// permutes that keep the shape, which must be local on every layout
// (add_degenerate_view_cases, last in the table: a case's data is seeded
// by its place there, check.cc, so new cases go at the end).
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

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

void add_degenerate_view_cases(std::vector<OpCase>& c) {
  // Cuts: the whole dim (as x[:] gives it, and past the end), nothing, and
  // a size-1 dim.
  for (int64_t d = 0; d < 3; ++d) {
    const std::string dim = std::to_string(d);
    c.push_back(view_case("slice(" + dim + ",0,L,1)", OpId::Slice,
                          [d](const Tensor& x) { return x.slice(d, 0, x.size(d), 1); },
                          [d](const DTensor& x) { return slice(x, d, 0, x.size(d), 1); }));
    c.push_back(view_case("narrow(" + dim + ",0,L)", OpId::Narrow,
                          [d](const Tensor& x) { return x.narrow(d, 0, x.size(d)); },
                          [d](const DTensor& x) { return narrow(x, d, 0, x.size(d)); }));
  }
  c.push_back(view_case("slice(-2,-9,9,1)", OpId::Slice,
                        [](const Tensor& x) { return x.slice(-2, -9, 9, 1); },
                        [](const DTensor& x) { return slice(x, -2, -9, 9, 1); }));
  c.push_back(view_case("slice(1,3,3,1)", OpId::Slice, [](const Tensor& x) { return x.slice(1, 3, 3, 1); },
                        [](const DTensor& x) { return slice(x, 1, 3, 3, 1); }));
  c.push_back(view_case("slice(0,-1,1,1)", OpId::Slice,
                        [](const Tensor& x) { return x.slice(0, -1, 1, 1); },
                        [](const DTensor& x) { return slice(x, 0, -1, 1, 1); }));
  c.push_back(view_case("narrow(0,4,0)", OpId::Narrow, [](const Tensor& x) { return x.narrow(0, 4, 0); },
                        [](const DTensor& x) { return narrow(x, 0, 4, 0); }));
  c.push_back(view_case("slice(1,0,1,2)[4,1,2]", OpId::Slice,
                        [](const Tensor& x) { return x.slice(1, 0, 1, 2); },
                        [](const DTensor& x) { return slice(x, 1, 0, 1, 2); }, {4, 1, 2}));
  c.push_back(view_case("narrow(1,1,0)[4,1,2]", OpId::Narrow,
                        [](const Tensor& x) { return x.narrow(1, 1, 0); },
                        [](const DTensor& x) { return narrow(x, 1, 1, 0); }, {4, 1, 2}));
  // select at both ends, and of a size-1 dim.
  c.push_back(view_case("select(1,0)", OpId::Select, [](const Tensor& x) { return x.select(1, 0); },
                        [](const DTensor& x) { return select(x, 1, 0); }));
  c.push_back(view_case("select(1,-1)", OpId::Select, [](const Tensor& x) { return x.select(1, -1); },
                        [](const DTensor& x) { return select(x, 1, -1); }));
  c.push_back(view_case("select(1,0)[4,1,2]", OpId::Select,
                        [](const Tensor& x) { return x.select(1, 0); },
                        [](const DTensor& x) { return select(x, 1, 0); }, {4, 1, 2}));
  // The same shape: views, reshapes, squeezes of dims that are not 1,
  // flattens of one dim, expands, permutes.
  c.push_back(view_case("view[4,5,2]", OpId::View, [](const Tensor& x) { return x.view({4, 5, 2}); },
                        [](const DTensor& x) { return view(x, {4, 5, 2}); }));
  c.push_back(view_case("reshape[-1,5,2]", OpId::View,
                        [](const Tensor& x) { return x.reshape({-1, 5, 2}); },
                        [](const DTensor& x) { return reshape(x, {-1, 5, 2}); }));
  c.push_back(view_case("view[4,1,2]", OpId::View, [](const Tensor& x) { return x.view({4, 1, 2}); },
                        [](const DTensor& x) { return view(x, {4, 1, 2}); }, {4, 1, 2}));
  c.push_back(view_case("squeeze(0)", OpId::View, [](const Tensor& x) { return x.squeeze(0); },
                        [](const DTensor& x) { return squeeze(x, 0); }));
  c.push_back(view_case("squeeze()", OpId::View, [](const Tensor& x) { return x.squeeze(); },
                        [](const DTensor& x) { return squeeze(x); }));
  c.push_back(view_case("flatten(1,1)", OpId::View, [](const Tensor& x) { return x.flatten(1, 1); },
                        [](const DTensor& x) { return flatten(x, 1, 1); }));
  c.push_back(view_case("expand[4,5,2]", OpId::Expand,
                        [](const Tensor& x) { return x.expand({-1, 5, -1}); },
                        [](const DTensor& x) { return expand(x, {-1, 5, -1}); }));
  c.push_back(view_case("expand[4,1,2]", OpId::Expand,
                        [](const Tensor& x) { return x.expand({4, 1, 2}); },
                        [](const DTensor& x) { return expand(x, {4, 1, 2}); }, {4, 1, 2}));
  c.push_back(view_case("transpose(1,1)", OpId::Permute,
                        [](const Tensor& x) { return x.transpose(1, 1); },
                        [](const DTensor& x) { return transpose(x, 1, 1); }));
  c.push_back(view_case("permute(0,1,2)", OpId::Permute,
                        [](const Tensor& x) { return x.permute({0, 1, -1}); },
                        [](const DTensor& x) { return permute(x, {0, 1, -1}); }));
  // The gradient of a full-range slice is the result; of an empty one, zeros.
  auto sliced_into = [](const Tensor& g, int64_t start, int64_t end) {
    Tensor z = Tensor::zeros(kX, g.dtype());
    z.slice(1, start, end, 1).copy_(g);
    return z;
  };
  c.push_back({"slice_backward(1,0,5,1)", OpId::SliceBackward, {{kX}},
               [=](const Tensors& x) { return sliced_into(x[0], 0, 5); },
               [](const DTensors& x) { return slice_backward(x[0], kX, 1, 0, 5, 1); }});
  c.push_back({"slice_backward(1,3,3,1)", OpId::SliceBackward, {{{4, 0, 2}}},
               [=](const Tensors& x) { return sliced_into(x[0], 3, 3); },
               [](const DTensors& x) { return slice_backward(x[0], kX, 1, 3, 3, 1); }});
  // Shape ops (src/ops/shape.cc) that return x as it is.
  c.push_back(view_case("repeat(1,1,1)", OpId::Repeat,
                        [](const Tensor& x) { return repeat(x, {1, 1, 1}); },
                        [](const DTensor& x) { return repeat(x, {1, 1, 1}); }));
  c.push_back(view_case("pad(0,0,0,0)", OpId::Pad,
                        [](const Tensor& x) { return pad(x, {0, 0, 0, 0}); },
                        [](const DTensor& x) { return pad(x, {0, 0, 0, 0}); }));
  c.push_back({"split({5},1)[0]", std::nullopt, {{kX}},
               [](const Tensors& x) { return split(x[0], std::vector<int64_t>{5}, 1)[0].contiguous(); },
               [](const DTensors& x) { return split(x[0], std::vector<int64_t>{5}, 1)[0]; }});
}

}  // namespace dtensor::rules
