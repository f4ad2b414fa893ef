// S(d) -> R on one mesh dim: all_gather the shards along tensor dim d.
#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

LocalTensor shard_to_replicate(const LocalTensor& in, const DTensorSpec& from, int mesh_dim) {
  const int64_t d = from.placements()[mesh_dim].dim();
  check_innermost(from, mesh_dim, d, "S->R (all_gather)");
  // Uneven shards concatenate to the parent's length because shards are
  // contiguous chunks in group order.
  return from.mesh().world().backend().all_gather(in, from.mesh(), mesh_dim, d);
}

}  // namespace dtensor::redistribute_detail
