// R -> P(op): local, no communication. For sum the rank at coordinate 0 of
// the group keeps x and the others hold zeros, so the pieces add up to x
// exactly in any dtype (PyTorch divides instead, x/n on every rank, which
// for floats need not sum back to x's bits); avg, max and min keep x.
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost replicate_to_partial_cost(double bytes) { return {0, 0, bytes}; }

LocalTensor replicate_to_partial(const LocalTensor& in, const Group& g, ReduceOp op) {
  if (op != ReduceOp::Sum) return in;
  return in.map([&](int rank, const Tensor& t) {
    return g.mesh.group_index(rank, g.dim) == 0 ? t.clone() : zeros_like(t);
  });
}

}  // namespace dtensor::redistribute_detail
