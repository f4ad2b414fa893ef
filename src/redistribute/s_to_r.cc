// S(d) -> R: all_gather the shards along tensor dim d. Uneven shards
// concatenate to the parent's length because shards are contiguous chunks in
// group order. Merged over a flattened group only when the flat chunking
// equals the nested one (the planner checks), since the gather concatenates
// in flattened group order.
#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost shard_to_replicate_cost(double bytes, const Group& g, double base_us) {
  const double gathered = bytes * static_cast<double>(g.n);
  return {all_gather_cost(gathered, g.n, g.link, base_us), gathered, gathered};
}

LocalTensor shard_to_replicate(const LocalTensor& in, const Group& g, int64_t dim) {
  return g.mesh.world().backend().all_gather(in, g.mesh, g.dim, dim);
}

}  // namespace dtensor::redistribute_detail
