// R -> S(d): every rank keeps its own chunk; no communication.
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost replicate_to_shard_cost(double bytes, const Group& g) {
  return {0, 0, bytes / static_cast<double>(g.n)};
}

LocalTensor replicate_to_shard(const LocalTensor& in, const Group& g, int64_t to_dim) {
  return in.map([&](int rank, const Tensor& t) {
    const ChunkRange c = chunk_range(t.size(to_dim), g.n, g.mesh.group_index(rank, g.dim));
    // A copy, so the shard does not keep the whole replica's storage alive.
    return t.narrow(to_dim, c.start, c.size).clone();
  });
}

}  // namespace dtensor::redistribute_detail
