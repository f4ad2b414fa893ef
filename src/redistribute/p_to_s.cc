// P(op) -> S(d) on one mesh dim: reduce_scatter along d — reduce, and each
// rank keeps only its own chunk (half the traffic of all_reduce + chunk).
#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

LocalTensor partial_to_shard(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                             int64_t to_dim) {
  check_innermost(from, mesh_dim, to_dim, "P->S (reduce_scatter)");
  const ReduceOp op = from.placements()[mesh_dim].reduce_op();
  return from.mesh().world().backend().reduce_scatter(in, from.mesh(), mesh_dim, op, to_dim);
}

}  // namespace dtensor::redistribute_detail
