// einsum on plain tensors, and the equation parser the DTensor einsum
// shares (tensor/einsum.h says how the contraction is built from ops).
#include "tensor/einsum.h"

#include <algorithm>

#include "tensor/half_compute.h"

namespace dtensor {

namespace einsum_detail {

namespace {

int label_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  return -1;
}

char char_of(int label) {
  return static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26));
}

// One term ("ij", "...ij"): its letter labels and where the ellipsis was
// (-1 when absent), in the position among the letters.
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

Term parse_term(const std::string& eq, size_t begin, size_t end) {
  Term t;
  for (size_t i = begin; i < end; ++i) {
    const char c = eq[i];
    if (c == '.') {
      DT_CHECK(i + 3 <= end && eq.compare(i, 3, "...") == 0,
               "einsum(): found '.' that is not part of any ellipsis ('...') at index ", i,
               " of '", eq, "'");
      DT_CHECK(t.ellipsis_at < 0, "einsum(): found more than one ellipsis ('...') in one "
               "subscript of '", eq, "'");
      t.ellipsis_at = static_cast<int>(t.letters.size());
      i += 2;
      continue;
    }
    DT_CHECK(label_of(c) >= 0, "einsum(): invalid subscript '", std::string(1, c), "' at index ",
             i, " of '", eq, "': subscripts must be letters in [a-zA-Z]");
    t.letters.push_back(label_of(c));
  }
  return t;
}

}  // namespace

Equation parse(const std::string& equation, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  DT_CHECK(!shapes.empty(), "einsum(): must provide at least one operand");
  const size_t arrow = eq.find("->");
  // A stray '-' or '>' (or a second "->") is an invalid subscript for parse_term.
  const size_t lhs_end = arrow == std::string::npos ? eq.size() : arrow;
  std::vector<Term> terms;
  for (size_t begin = 0;;) {
    const size_t comma = std::min(eq.find(',', begin), lhs_end);
    terms.push_back(parse_term(eq, begin, comma));
    if (comma >= lhs_end) break;
    begin = comma + 1;
  }
  DT_CHECK(terms.size() == shapes.size(), "einsum(): '", equation, "' specifies ", terms.size(),
           " operands but ", shapes.size(), " were given");
  Equation out;
  out.size.assign(kEllipsisBase + kMaxDims, -1);
  int64_t ellipsis_dims = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t nd = static_cast<int64_t>(shapes[i].size());
    const int64_t letters = static_cast<int64_t>(terms[i].letters.size());
    if (terms[i].ellipsis_at < 0)
      DT_CHECK(nd == letters, "einsum(): the number of subscripts in the equation (", letters,
               ") does not match the number of dimensions (", nd, ") for operand ", i,
               " and no ellipsis was given");
    else
      DT_CHECK(nd >= letters, "einsum(): the number of subscripts in the equation (", letters,
               ") is more than the number of dimensions (", nd, ") for operand ", i);
    if (terms[i].ellipsis_at >= 0) ellipsis_dims = std::max(ellipsis_dims, nd - letters);
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const int64_t e = static_cast<int64_t>(shapes[i].size() - t.letters.size());
    std::vector<int> labels;
    for (size_t k = 0; k <= t.letters.size(); ++k) {
      if (static_cast<int>(k) == t.ellipsis_at)
        for (int64_t j = 0; j < e; ++j)
          labels.push_back(kEllipsisBase + static_cast<int>(ellipsis_dims - e + j));
      if (k < t.letters.size()) {
        DT_CHECK(!has(labels, t.letters[k]), "einsum(): subscript ", char_of(t.letters[k]),
                 " is repeated for operand ", i, " of '", equation,
                 "': taking a diagonal is not supported");
        labels.push_back(t.letters[k]);
      }
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      int64_t& s = out.size[static_cast<size_t>(labels[d])];
      const int64_t n = shapes[i][d];
      DT_CHECK(s < 0 || s == n || s == 1 || n == 1, "einsum(): operands do not broadcast: ",
               labels[d] < kEllipsisBase ? std::string("subscript ") + char_of(labels[d])
                                         : std::string("an ellipsis dim"),
               " has size ", n, " for operand ", i, " which does not broadcast with previously "
               "seen size ", s);
      if (s < 0 || s == 1) s = n;
    }
    out.inputs.push_back(labels);
  }
  auto count = [&](int l) {
    int c = 0;
    for (const auto& in : out.inputs) c += has(in, l) ? 1 : 0;
    return c;
  };
  auto push_ellipsis = [&] {
    for (int64_t j = 0; j < ellipsis_dims; ++j)
      out.output.push_back(kEllipsisBase + static_cast<int>(j));
  };
  if (arrow == std::string::npos) {
    push_ellipsis();
    for (int l = 0; l < kEllipsisBase; ++l)
      if (count(l) == 1) out.output.push_back(l);
    return out;
  }
  const Term t = parse_term(eq, arrow + 2, eq.size());
  for (size_t k = 0; k <= t.letters.size(); ++k) {
    if (static_cast<int>(k) == t.ellipsis_at) push_ellipsis();
    if (k == t.letters.size()) break;
    const int l = t.letters[k];
    DT_CHECK(!has(out.output, l), "einsum(): output subscript ", char_of(l),
             " appears more than once in the output of '", equation, "'");
    DT_CHECK(count(l) > 0, "einsum(): output subscript ", char_of(l),
             " does not appear in the equation for any input operand of '", equation, "'");
    out.output.push_back(l);
  }
  return out;
}

}  // namespace einsum_detail

namespace {

struct TensorOps {
  static const Shape& shape(const Tensor& t) { return t.shape(); }
  static Tensor sum(const Tensor& t, const DimVector& dims, bool keepdim = false) {
    return dtensor::sum(t, dims, keepdim);
  }
  static Tensor permute(const Tensor& t, const DimVector& dims) { return t.permute(dims); }
  static Tensor reshape(const Tensor& t, const Shape& s) { return t.reshape(s); }
  static Tensor expand(const Tensor& t, const Shape& s) { return t.expand(s); }
  static Tensor mm(const Tensor& a, const Tensor& b) { return dtensor::mm(a, b); }
  static Tensor bmm(const Tensor& a, const Tensor& b) { return dtensor::bmm(a, b); }
};

}  // namespace

void einsum_detail::check_dtypes(const std::vector<DType>& dtypes) {
  for (size_t i = 0; i < dtypes.size(); ++i) {
    DT_CHECK(dtypes[i] == dtypes[0], "einsum(): operands must have one dtype: operand 0 is ",
             dtypes[0], ", operand ", i, " is ", dtypes[i]);
    DT_CHECK(dtypes[i] != DType::Bool, "einsum(): bool operands are not supported (as in "
             "PyTorch); convert to int64 or a floating dtype");
  }
}

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : operands) {
    DT_CHECK(t.defined(), "einsum(): undefined operand");
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  const einsum_detail::Equation eq = einsum_detail::parse(equation, shapes);
  einsum_detail::check_dtypes(dtypes);
  if (detail::is_half_tensor(operands[0])) {
    // In float32, each pair's product and sums accumulating there, rounded
    // once at the end; but a result that is a view of the widened operand
    // (a lone one, no sum) is taken on the operand itself, to stay a view.
    const std::vector<Tensor> wide = detail::widen(operands);
    const Tensor out = einsum_detail::contract<TensorOps>(eq, wide);
    if (out.storage() == wide[0].storage()) return einsum_detail::contract<TensorOps>(eq, operands);
    return detail::round_to(out, dtypes[0]);
  }
  // A lone operand whose labels stay in order comes back as a view of
  // itself, as in PyTorch.
  return einsum_detail::contract<TensorOps>(eq, operands);
}

}  // namespace dtensor
