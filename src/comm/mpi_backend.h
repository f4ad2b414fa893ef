// MpiBackend — the collectives of an MPI world, where this process holds
// exactly one rank (its MPI rank in the world's communicator).
//
// Each collective runs over the calling rank's group of the mesh dim, on a
// communicator made for that group (MPI_Comm_create_group, collective over
// the group's members only) the first time the group is used and cached for
// the life of the world. A flattened mesh dim is one more group: since every
// rank runs the same plan, all members create it at the same call.
//
// The MPI calls: all_gather -> MPI_Allgatherv, all_to_all -> MPI_Alltoallw,
// broadcast -> MPI_Bcast, scatter -> MPI_Scatterv. Reductions are not left
// to MPI_Allreduce / MPI_Reduce_scatter, whose order of terms is the
// library's (and whose MPI_MAX / MPI_MIN drop NaN): reduce_scatter sends
// chunk j of every member's shard to member j (MPI_Alltoallv), which folds
// the n chunks in member order with the simulated backend's kernel
// (reduce_kernel.h); all_reduce is that over n flat pieces of the shard,
// then MPI_Allgatherv of the folded pieces in place. The bytes moved are a
// ring algorithm's, and the results are bit for bit the simulated world's.
// DTENSOR_MPI_NATIVE_REDUCE=1 in the environment (read once) uses the
// native calls instead (avg: sum, then divide).
// When the dim moved is the leading one the data goes straight from the
// shard into MPI and from MPI into the result; otherwise all_gather,
// reduce_scatter and scatter pack or unpack the pieces with one copy, and
// all_to_all describes them in place with subarray datatypes (no copy).
// Uneven shards need their sizes: all_gather and all_to_all first exchange
// one int64 per member (MPI_Allgather); broadcast and scatter send the
// root's shape first.
//
// A rank that is not in the mesh takes no part and gets an empty result.
//
// Desync check (the environment variable DTENSOR_MPI_CHECK=1, or
// set_desync_check): before each collective the members exchange what they
// are about to call (kind, mesh dim, group, dims, op, root, dtype, shape)
// and every member raises the same dtensor::Error, naming both sides, if
// they differ, instead of hanging or exchanging garbage.
#pragma once

#include <map>
#include <mpi.h>
#include <vector>

#include "comm/backend.h"

namespace dtensor {

class MpiBackend final : public Backend {
 public:
  // comm: the world's communicator; freed with the backend (a dtensor-made
  // duplicate, never the program's own).
  explicit MpiBackend(MPI_Comm comm);
  ~MpiBackend() override;

  LocalTensor all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                         int64_t gather_dim) override;
  LocalTensor all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                         ReduceOp op) override;
  LocalTensor reduce_scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                             ReduceOp op, int64_t scatter_dim) override;
  LocalTensor all_to_all(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                         int64_t split_dim, int64_t concat_dim) override;
  LocalTensor broadcast(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                        int64_t root) override;
  LocalTensor scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim, int64_t root,
                      int64_t scatter_dim) override;

  void set_desync_check(bool on) { check_ = on; }
  bool desync_check() const { return check_; }

  // The calling rank's group of a mesh dim: its communicator, its index in
  // the group and the group's ranks.
  struct Group {
    MPI_Comm comm = MPI_COMM_NULL;
    int index = 0;
    int size = 1;
  };

 private:
  // nullopt-like: size 0 when this rank is not in the mesh.
  Group group_of(const DeviceMesh& mesh, int mesh_dim);

  MPI_Comm world_;
  int rank_ = 0;
  bool check_ = false;
  std::map<std::vector<int>, MPI_Comm> comms_;  // by the group's ranks
};

}  // namespace dtensor
