// SimBackend — the collectives of a simulated world, where every rank of the
// mesh lives in this process. Each collective is computed from the shards
// directly; groups (or senders) may run in parallel on the thread pool, but
// every output byte has one writer and reductions fold in group-rank order,
// so results are deterministic, bit-identical on every rank of a group and
// the same on any thread count.
//
// Outputs never share memory with the inputs or with each other: every rank
// gets its own contiguous tensor, so an in-place op on one rank's result can
// never leak into another rank's (as it could not across real processes).
// The output holds exactly the ranks of the mesh; input shards of ranks
// outside the mesh are ignored.
//
// Bytes recorded per call (record_collective): the largest input shard, in
// bytes, that any participating rank hands in — for broadcast and scatter
// that is the root's shard. With uneven shards this is the padded size a
// real backend moves per rank (ceil-chunked shards are padded to the largest
// one), matching the cost model's "bytes per rank".
#pragma once

#include "comm/backend.h"
#include "world/shard_map.h"

namespace dtensor {

class SimBackend final : public Backend {
 public:
  LocalTensor all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                         int64_t gather_dim) override;
  LocalTensor all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                         ReduceOp op) override;
  LocalTensor reduce_scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                             ReduceOp op, int64_t scatter_dim) override;
  LocalTensor all_to_all(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                         int64_t split_dim, int64_t concat_dim) override;
  // Only the root's shard is read; the other members' shards may be missing
  // or undefined (under MPI they would be receive buffers).
  LocalTensor broadcast(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                        int64_t root) override;
  LocalTensor scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim, int64_t root,
                      int64_t scatter_dim) override;
  // In its own file, sim_box_exchange.cc.
  LocalTensor exchange_boxes(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                             const BoxRoutes& routes) override;
};

namespace detail {

// The collectives that only copy (all_gather, all_to_all, broadcast,
// scatter, the box exchange) stay on the calling thread below this many
// bytes: a copy is bound by memory bandwidth, which a second thread
// shares. On the 2-core test machine the pool made them up to 2.2x slower
// below 4-16 MiB (docs/PERFORMANCE.md, "Simulated collectives"). The
// reductions also fold and keep the kernels' threshold (parallel_items).
// `bytes` counts what the copies read once: a fan-out of one source to n
// members (all_gather's result, a broadcast) counts the source once, since
// its n copies read it from cache.
inline constexpr int64_t kParallelCopyBytes = int64_t{8} << 20;

inline void parallel_copies(int64_t items, int64_t bytes, ChunkFn body) {
  if (bytes < kParallelCopyBytes) return body(0, items);
  parallel_items(items, bytes, std::move(body));
}

}  // namespace detail

}  // namespace dtensor
