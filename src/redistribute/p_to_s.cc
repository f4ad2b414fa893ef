// P(op) -> S(d): reduce_scatter along d — reduce, and each rank keeps only
// its own chunk (half the traffic of all_reduce + chunk). Merged over a
// flattened group only in ascending mesh-dim order: the flattened group is
// row-major over its dims, so its chunk index a*n_b + b equals the nested
// index only when the outer dim chunks first; and only when the flat
// chunking of the length equals the nested one (the planner checks).
#include "comm/backend.h"
#include "comm/fold_temp.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost partial_to_shard_cost(double bytes, const Group& g, double base_us) {
  return {reduce_scatter_cost(bytes, g.n, g.link, base_us), bytes,
          bytes / static_cast<double>(g.n), fold_temp::reduce_scatter_temp(g.n, bytes)};
}

LocalTensor partial_to_shard(const LocalTensor& in, const Group& g, ReduceOp op, double divisor,
                             int64_t to_dim) {
  return divide_shards(g.mesh.world().backend().reduce_scatter(in, g.mesh, g.dim, op, to_dim),
                       divisor);
}

}  // namespace dtensor::redistribute_detail
