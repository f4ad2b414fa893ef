// Internal: einsum as a sequence of existing ops, written once for Tensor
// (tensor/einsum.cc) and DTensor (ops/einsum.cc).
//
// The equation is parsed into integer labels per operand dim; operands are
// then contracted left to right. Before each pairwise contraction, labels
// that neither the other operand, a later operand nor the output needs are
// summed away; the pair is permuted to (batch, free, contracted) and
// (batch, contracted, free), reshaped to three (or two) dims and
// multiplied with bmm (or mm). On DTensors every step is an op with its own
// sharding rule, so layouts come from the view, reduction and matmul rules
// (a batch dim sharded on both stays sharded; a contracted dim sharded on
// both gives Partial(sum)) and the backward from theirs.
#pragma once

#include <string>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor::einsum_detail {

// Labels: 0-25 'A'-'Z', 26-51 'a'-'z' (PyTorch's order for the implicit
// output), 52 + k the k-th broadcast dim an ellipsis stands for.
inline constexpr int kEllipsisBase = 52;

struct Equation {
  std::vector<std::vector<int>> inputs;  // one label per dim of each operand
  std::vector<int> output;
  std::vector<int64_t> size;  // per label (after broadcasting size-1 dims)
};

// Parses and checks `equation` against the operands' shapes; throws
// dtensor::Error naming the equation and what is wrong.
Equation parse(const std::string& equation, const std::vector<Shape>& shapes);

// Operands of one dtype, not bool (bmm's); throws naming them otherwise.
void check_dtypes(const std::vector<DType>& dtypes);

inline bool has(const std::vector<int>& labels, int l) {
  for (int x : labels)
    if (x == l) return true;
  return false;
}

// The einsum of `ops` under `eq`. O provides, for the tensor type T:
// shape(t), sum(t, dims), permute(t, dims), reshape(t, shape),
// expand(t, shape), mm(a, b), bmm(a, b).
template <class O, class T>
T contract(const Equation& eq, std::vector<T> ops) {
  // Sums the labels of (t, labels) that `keep` rejects, in one reduction.
  auto sum_unneeded = [&](T& t, std::vector<int>& labels, auto keep) {
    DimVector dims;
    std::vector<int> rest;
    for (size_t d = 0; d < labels.size(); ++d) {
      if (keep(labels[d])) rest.push_back(labels[d]);
      else dims.push_back(static_cast<int64_t>(d));
    }
    if (!dims.empty()) t = O::sum(t, dims);
    labels = rest;
  };
  // t's dims in the order `want` (a permutation of labels), then reshaped.
  auto arrange = [&](const T& t, const std::vector<int>& labels, const std::vector<int>& want,
                     const Shape& shape) {
    DimVector perm;
    bool identity = true;
    for (int l : want) {
      for (size_t d = 0; d < labels.size(); ++d)
        if (labels[d] == l) perm.push_back(static_cast<int64_t>(d));
      identity = identity && perm.back() == static_cast<int64_t>(perm.size() - 1);
    }
    T out = identity ? t : O::permute(t, perm);
    return O::shape(out) == shape ? out : O::reshape(out, shape);
  };
  // Whether label l is needed by the output or an operand after `i`.
  auto needed_after = [&](size_t i, int l) {
    if (has(eq.output, l)) return true;
    for (size_t j = i + 1; j < eq.inputs.size(); ++j)
      if (has(eq.inputs[j], l)) return true;
    return false;
  };

  T cur = ops[0];
  std::vector<int> cl = eq.inputs[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    T b = ops[i];
    std::vector<int> bl = eq.inputs[i];
    sum_unneeded(cur, cl, [&](int l) { return needed_after(i, l) || has(bl, l); });
    sum_unneeded(b, bl, [&](int l) { return needed_after(i, l) || has(cl, l); });
    std::vector<int> batch, contracted, free_a, free_b;
    for (int l : cl) {
      if (!has(bl, l)) free_a.push_back(l);
      else (needed_after(i, l) ? batch : contracted).push_back(l);
    }
    for (int l : bl)
      if (!has(cl, l)) free_b.push_back(l);
    // Size-1 dims broadcast: a contracted one sums the other side's dim
    // (sum_j a * b_j = a * sum_j b_j); a batch one is expanded.
    auto size_in = [&](const T& t, const std::vector<int>& labels, int l) {
      for (size_t d = 0; d < labels.size(); ++d)
        if (labels[d] == l) return O::shape(t)[d];
      return int64_t{1};
    };
    auto pos = [](const std::vector<int>& labels, int l) {
      for (size_t d = 0; d < labels.size(); ++d)
        if (labels[d] == l) return static_cast<int64_t>(d);
      return int64_t{-1};
    };
    for (int l : contracted) {
      const int64_t sa = size_in(cur, cl, l), sb = size_in(b, bl, l);
      if (sa == sb) continue;
      if (sa == 1) b = O::sum(b, {pos(bl, l)}, true);
      else cur = O::sum(cur, {pos(cl, l)}, true);
    }
    for (int l : batch) {
      const int64_t sa = size_in(cur, cl, l), sb = size_in(b, bl, l);
      if (sa == sb) continue;
      Shape s = sa == 1 ? O::shape(cur) : O::shape(b);
      if (sa == 1) s[pos(cl, l)] = sb, cur = O::expand(cur, s);
      else s[pos(bl, l)] = sa, b = O::expand(b, s);
    }
    auto product = [&](const T& t, const std::vector<int>& t_labels, const std::vector<int>& ls) {
      int64_t p = 1;
      for (int l : ls) p = checked_mul(p, size_in(t, t_labels, l), "einsum: size");
      return p;
    };
    const int64_t nb = product(cur, cl, batch), m = product(cur, cl, free_a);
    const int64_t k = product(cur, cl, contracted), n = product(b, bl, free_b);
    std::vector<int> a_order = batch, b_order = batch;
    a_order.insert(a_order.end(), free_a.begin(), free_a.end());
    a_order.insert(a_order.end(), contracted.begin(), contracted.end());
    b_order.insert(b_order.end(), contracted.begin(), contracted.end());
    b_order.insert(b_order.end(), free_b.begin(), free_b.end());
    Shape out_shape;
    std::vector<int> out_labels = batch;
    for (int l : batch) out_shape.push_back(size_in(cur, cl, l));
    for (int l : free_a) out_shape.push_back(size_in(cur, cl, l)), out_labels.push_back(l);
    for (int l : free_b) out_shape.push_back(size_in(b, bl, l)), out_labels.push_back(l);
    T prod = batch.empty()
                 ? O::mm(arrange(cur, cl, a_order, Shape{m, k}), arrange(b, bl, b_order, Shape{k, n}))
                 : O::bmm(arrange(cur, cl, a_order, Shape{nb, m, k}),
                          arrange(b, bl, b_order, Shape{nb, k, n}));
    cur = O::shape(prod) == out_shape ? prod : O::reshape(prod, out_shape);
    cl = out_labels;
  }
  sum_unneeded(cur, cl, [&](int l) { return has(eq.output, l); });
  return arrange(cur, cl, eq.output, [&] {
    Shape s;
    for (int l : eq.output)
      for (size_t d = 0; d < cl.size(); ++d)
        if (cl[d] == l) s.push_back(O::shape(cur)[d]);
    return s;
  }());
}

}  // namespace dtensor::einsum_detail
