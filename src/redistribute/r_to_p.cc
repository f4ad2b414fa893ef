// R -> P(op) on one mesh dim: local, no communication. For sum each rank
// keeps x/n so the pieces add up to x (integers: x on the group's first rank
// and zeros elsewhere, which stays exact); avg, max and min keep x.
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

LocalTensor replicate_to_partial(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                                 ReduceOp op) {
  if (op != ReduceOp::Sum) return in;
  const DeviceMesh& mesh = from.mesh();
  const int64_t n = mesh.size(mesh_dim);
  return in.map([&](int rank, const Tensor& t) {
    if (is_floating(t.dtype())) return div(t, Scalar(static_cast<double>(n)));
    return mesh.group_index(rank, mesh_dim) == 0 ? t.clone() : zeros_like(t);
  });
}

}  // namespace dtensor::redistribute_detail
