// A direct-loop einsum for tests (every assignment of the labels, the
// product of the operands' elements added to the output's), independent of
// the library's parser and contraction; and random equations to check
// einsum against it. Letters only (no ellipsis) and no repeated label
// within an operand.
#pragma once

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor::testing {

struct RandomEinsum {
  std::string equation;
  std::vector<Shape> shapes;
};

// 1-3 operands of 0-3 distinct labels from "abcdeB", sizes 1-4 (0 now and
// then, 1 sometimes on one operand only, to broadcast); the output
// implicit, or explicit: a random subset of the labels in random order.
inline RandomEinsum random_einsum(std::mt19937& rng) {
  const std::string pool = "abcdeB";
  std::map<char, int64_t> size;
  for (char c : pool) size[c] = rng() % 10 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 4);
  RandomEinsum r;
  const int n = 1 + static_cast<int>(rng() % 3);
  std::string used;
  for (int i = 0; i < n; ++i) {
    std::string labels = pool;
    std::shuffle(labels.begin(), labels.end(), rng);
    labels.resize(rng() % 4);
    Shape shape;
    for (char c : labels) {
      shape.push_back(rng() % 8 == 0 ? 1 : size[c]);
      if (used.find(c) == std::string::npos) used += c;
    }
    r.equation += (i ? "," : "") + labels;
    r.shapes.push_back(shape);
  }
  if (rng() % 3 != 0) {
    std::shuffle(used.begin(), used.end(), rng);
    used.resize(rng() % (used.size() + 1));
    r.equation += "->" + used;
  }
  return r;
}

// einsum by loops over every assignment of the labels, in float64.
inline Tensor einsum_reference(const std::string& equation, const std::vector<Tensor>& ops) {
  const size_t arrow = equation.find("->");
  std::vector<std::string> terms;
  std::string lhs = equation.substr(0, arrow), out;
  for (size_t b = 0;;) {
    const size_t c = lhs.find(',', b);
    terms.push_back(lhs.substr(b, c == std::string::npos ? std::string::npos : c - b));
    if (c == std::string::npos) break;
    b = c + 1;
  }
  std::map<char, int64_t> size, count;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const int64_t n = ops[i].shape()[d];
      // Size-1 dims broadcast against the others' size.
      int64_t& s = size.try_emplace(terms[i][d], 1).first->second;
      if (n != 1) s = n;
      ++count[terms[i][d]];
    }
  if (arrow != std::string::npos) {
    out = equation.substr(arrow + 2);
  } else {
    // Implicit: labels seen once, upper case before lower case.
    for (char c = 'A'; c <= 'Z'; ++c)
      if (count[c] == 1) out += c;
    for (char c = 'a'; c <= 'z'; ++c)
      if (count[c] == 1) out += c;
  }
  std::string labels;
  for (const auto& [c, n] : size) labels += c;
  Shape out_shape;
  for (char c : out) out_shape.push_back(size[c]);
  std::vector<std::vector<double>> data;
  for (const Tensor& t : ops) data.push_back(t.contiguous().to_vector<double>());
  std::vector<double> result(static_cast<size_t>(out_shape.product()), 0.0);
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  bool any = true;
  for (char c : labels) any = any && size[c] > 0;
  while (any) {
    double p = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const int64_t n = ops[i].shape()[d];
        flat = flat * n + (n == 1 ? 0 : at[terms[i][d]]);
      }
      p *= data[i][static_cast<size_t>(flat)];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    result[static_cast<size_t>(o)] += p;
    size_t k = labels.size();
    while (k > 0 && ++at[labels[k - 1]] == size[labels[k - 1]]) at[labels[--k]] = 0;
    if (k == 0) break;
  }
  return Tensor::from_vector(result, out_shape);
}

}  // namespace dtensor::testing
