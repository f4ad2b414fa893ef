// P(op) -> R on one mesh dim: all_reduce with the placement's reduce op.
#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

LocalTensor partial_to_replicate(const LocalTensor& in, const DTensorSpec& from, int mesh_dim) {
  const ReduceOp op = from.placements()[mesh_dim].reduce_op();
  return from.mesh().world().backend().all_reduce(in, from.mesh(), mesh_dim, op);
}

}  // namespace dtensor::redistribute_detail
