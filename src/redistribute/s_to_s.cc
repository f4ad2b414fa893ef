// S(a) -> S(b): all_to_all. Every rank splits its shard into n chunks along
// b and sends chunk i to member i, which concatenates what it receives along
// a: it ends with the whole (parent) extent of a and its own chunk of b.
// Never merged over flattened groups (SEMANTICS.md).
#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost shard_to_shard_cost(double bytes, const Group& g, double base_us) {
  return {all_to_all_cost(bytes, g.n, g.link, base_us), bytes, bytes};
}

LocalTensor shard_to_shard(const LocalTensor& in, const Group& g, int64_t from_dim,
                           int64_t to_dim) {
  return g.mesh.world().backend().all_to_all(in, g.mesh, g.dim, /*split_dim=*/to_dim,
                                             /*concat_dim=*/from_dim);
}

}  // namespace dtensor::redistribute_detail
