// R -> S(d) on one mesh dim: every rank keeps its own chunk; no communication.
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

LocalTensor replicate_to_shard(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                               int64_t to_dim) {
  check_innermost(from, mesh_dim, to_dim, "R->S (local chunk)");
  const DeviceMesh& mesh = from.mesh();
  const int64_t n = mesh.size(mesh_dim);
  return in.map([&](int rank, const Tensor& t) {
    const ChunkRange c = chunk_range(t.size(to_dim), n, mesh.group_index(rank, mesh_dim));
    // A copy, so the shard does not keep the whole replica's storage alive.
    return t.narrow(to_dim, c.start, c.size).clone();
  });
}

}  // namespace dtensor::redistribute_detail
