// Validator cases of joining, copying and indexing (src/ops/tensor_ops.cc)
// and of the backward-only ops of views and indexing.
#include "rules/cases.h"

namespace dtensor::rules {

namespace {

using dispatch::OpId;

// slice_backward's reference: zeros of `shape` with the slice set to g.
Tensor sliced_into(const Tensor& g, const Shape& shape, int64_t dim, int64_t start, int64_t end,
                   int64_t step) {
  Tensor z = Tensor::zeros(shape, g.dtype());
  z.slice(dim, start, end, step).copy_(g);
  return z;
}

// index_select_backward's reference: zeros with g's rows added at index.
Tensor index_added(const Tensor& g, const Shape& shape, int64_t dim, const Tensor& index) {
  Tensor z = Tensor::zeros(shape, g.dtype());
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t row = index.select(0, i).item<int64_t>();
    Tensor dst = z.select(dim, row);
    dst.copy_(add(dst, g.select(dim, i)));
  }
  return z;
}

}  // namespace

void add_tensor_cases(std::vector<OpCase>& c) {
  c.push_back({"cat(0)", OpId::Cat, {{kX}, {{3, 5, 2}}},
               [](const Tensors& x) { return cat({x[0], x[1]}, 0); },
               [](const DTensors& x) { return cat({x[0], x[1]}, 0); }});
  c.push_back({"cat(1)", OpId::Cat, {{kX}, {{4, 3, 2}}},
               [](const Tensors& x) { return cat({x[0], x[1]}, 1); },
               [](const DTensors& x) { return cat({x[0], x[1]}, 1); }});
  c.push_back({"stack(1)", OpId::Stack, {{kX}, {kX}},
               [](const Tensors& x) { return stack({x[0], x[1]}, 1); },
               [](const DTensors& x) { return stack({x[0], x[1]}, 1); }});
  c.push_back({"clone", OpId::Clone, {{kX}},
               [](const Tensors& x) { return x[0].clone(); },
               [](const DTensors& x) { return clone(x[0]); }});
  c.push_back({"contiguous", OpId::Contiguous, {{kX}},
               [](const Tensors& x) { return x[0].contiguous(); },
               [](const DTensors& x) { return contiguous(x[0]); }});
  c.push_back({"full_like", OpId::FullLike, {{kX}},
               [](const Tensors& x) { return full_like(x[0], 3); },
               [](const DTensors& x) { return full_like(x[0], 3); }});
  c.push_back({"index_select(1)", OpId::IndexSelect, {{kX}, {{6}, InputKind::Index, 5}},
               [](const Tensors& x) { return index_select(x[0], 1, x[1]); },
               [](const DTensors& x) { return index_select(x[0], 1, x[1]); }});
  c.push_back({"index_select_backward(1)", OpId::IndexSelectBackward,
               {{{4, 6, 2}}, {{6}, InputKind::Index, 5}},
               [](const Tensors& x) { return index_added(x[0], kX, 1, x[1]); },
               [](const DTensors& x) { return index_select_backward(x[0], kX, 1, x[1]); }});
  c.push_back({"slice_backward(1,1,5,2)", OpId::SliceBackward, {{{4, 2, 2}}},
               [](const Tensors& x) { return sliced_into(x[0], kX, 1, 1, 5, 2); },
               [](const DTensors& x) { return slice_backward(x[0], kX, 1, 1, 5, 2); }});
}

}  // namespace dtensor::rules
