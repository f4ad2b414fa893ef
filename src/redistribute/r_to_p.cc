// R -> P(op): local, no communication. For sum each rank keeps x/n so the
// pieces add up to x (integers: x on the group's first rank and zeros
// elsewhere, which stays exact); avg, max and min keep x.
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost replicate_to_partial_cost(double bytes) { return {0, 0, bytes}; }

LocalTensor replicate_to_partial(const LocalTensor& in, const Group& g, ReduceOp op) {
  if (op != ReduceOp::Sum) return in;
  return in.map([&](int rank, const Tensor& t) {
    if (is_floating(t.dtype())) return div(t, Scalar(static_cast<double>(g.n)));
    return g.mesh.group_index(rank, g.dim) == 0 ? t.clone() : zeros_like(t);
  });
}

}  // namespace dtensor::redistribute_detail
