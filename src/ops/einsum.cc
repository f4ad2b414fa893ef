// einsum on DTensors: the contraction of tensor/einsum.h with DTensor ops,
// so each step's layout comes from that op's rule (sum, permute, reshape,
// expand, mm, bmm) and the backward from theirs. Examples: "bij,bjk->bik"
// with b sharded on both stays sharded on b without communication;
// "ij,jk->ik" with j sharded on both gives Partial(sum).
#include "tensor/einsum.h"

#include "dtensor/ops.h"

namespace dtensor {

namespace {

struct DTensorOps {
  static const Shape& shape(const DTensor& t) { return t.shape(); }
  static DTensor sum(const DTensor& t, const DimVector& dims, bool keepdim = false) {
    return dtensor::sum(t, dims, keepdim);
  }
  static DTensor permute(const DTensor& t, const DimVector& dims) { return dtensor::permute(t, dims); }
  static DTensor reshape(const DTensor& t, const Shape& s) { return dtensor::reshape(t, s); }
  static DTensor expand(const DTensor& t, const Shape& s) { return dtensor::expand(t, s); }
  static DTensor mm(const DTensor& a, const DTensor& b) { return dtensor::mm(a, b); }
  static DTensor bmm(const DTensor& a, const DTensor& b) { return dtensor::bmm(a, b); }
};

}  // namespace

DTensor einsum(const std::string& equation, const std::vector<DTensor>& operands) {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const DTensor& t : operands) {
    DT_CHECK(t.defined(), "einsum(): undefined operand");
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  const einsum_detail::Equation eq = einsum_detail::parse(equation, shapes);
  einsum_detail::check_dtypes(dtypes);
  for (size_t i = 1; i < operands.size(); ++i)
    DT_CHECK(operands[i].mesh() == operands[0].mesh(), "einsum(): operands live on different "
             "meshes: ", operands[0].mesh(), " and ", operands[i].mesh());
  // A lone operand whose labels stay in order comes back as itself (PyTorch
  // returns a view there too).
  return einsum_detail::contract<DTensorOps>(eq, operands);
}

}  // namespace dtensor
