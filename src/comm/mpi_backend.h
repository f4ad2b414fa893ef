// MpiBackend — the collectives of an MPI world, where this process holds
// exactly one rank (its MPI rank in the world's communicator).
//
// Each collective runs over the calling rank's group of the mesh dim, on a
// communicator made for that group (MPI_Comm_create_group, collective over
// the group's members only) the first time the group is used and cached for
// the life of the world. A flattened mesh dim is one more group: since every
// rank runs the same plan, all members create it at the same call.
//
// The MPI calls: all_gather -> MPI_Allgatherv (MPI_Alltoallw into a
// subarray of the result per member when a dim comes before the gather
// dim), all_to_all -> MPI_Alltoallw, broadcast -> MPI_Bcast, scatter ->
// MPI_Scatterv, exchange_boxes -> MPI_Alltoallw with a subarray datatype
// per nonempty box. Reductions are not left to MPI_Allreduce /
// MPI_Reduce_scatter, whose order of terms is the library's (and whose
// MPI_MAX / MPI_MIN drop NaN): reduce_scatter sends chunk j of every
// member's shard to member j (MPI_Alltoallw, in rounds of a bounded size:
// fold_temp.h), which folds the n chunks in member order with the
// simulated backend's kernel (reduce_kernel.h); all_reduce is that over n
// flat pieces of the shard, then MPI_Allgatherv of the folded pieces in
// place. The bytes moved are a ring algorithm's, and the results are bit
// for bit the simulated world's.
// DTENSOR_MPI_NATIVE_REDUCE=1 in the environment (read once) uses the
// native calls instead (avg: sum, then divide).
// Pieces along a dim other than the leading one are described in place by
// derived datatypes (no packed copy) except by scatter, which packs the
// root's chunks with one copy.
// Uneven shards need their sizes: all_gather and all_to_all first exchange
// one int64 per member (MPI_Allgather); broadcast and scatter send the
// root's shape first.
//
// A rank that is not in the mesh takes no part and gets an empty result.
//
// Desync check (the environment variable DTENSOR_MPI_CHECK=1, or
// set_desync_check): before each collective the members exchange what they
// are about to call (kind, mesh dim, group, the call's number on the group,
// dims, op, root, dtype, shape) and every member raises the same
// dtensor::Error, naming both sides, if they differ, instead of hanging or
// exchanging garbage. The records travel point to point on a communicator
// of their own (never mixed with collective data), and at the first use of
// a group they are compared before its communicator is created, so ranks
// that disagree on the group never meet in MPI_Comm_create_group. With the
// check on, the sizes a collective receives (all_gather's lengths,
// broadcast's and scatter's shape) are also checked against what the
// senders announced.
//
// Watchdog: every collective is watched by a CollectiveMonitor
// (mpi_watchdog.h) from its first line to its return; one that has not
// ended after DTENSOR_COLLECTIVE_TIMEOUT seconds ends the job, naming the
// collective, the group and the ranks that did not arrive.
//
// The code: the collectives in mpi_backend.cc; datatypes and packing in
// mpi_pack.h, the deterministic reductions in mpi_fold.h, the desync check
// in mpi_desync.h (all internal).
#pragma once

#include <map>
#include <memory>
#include <mpi.h>
#include <utility>
#include <vector>

#include "comm/backend.h"
#include "comm/mpi_watchdog.h"

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
  LocalTensor exchange_boxes(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                             const BoxRoutes& routes) override;
  // MPI_Iallgather; wait() is MPI_Wait, watched by the collective monitor
  // as a collective of its own (the call number of its start).
  std::unique_ptr<Pending> start_all_gather_flat(const LocalTensor& in, const DeviceMesh& mesh,
                                                 int mesh_dim) override;
  // MPI_Ialltoall of the pieces; wait() is MPI_Wait (watched as above)
  // and the fold in member order (reduce_kernel.h), as reduce_scatter's.
  std::unique_ptr<Pending> start_reduce_scatter_flat(const LocalTensor& in, const DeviceMesh& mesh,
                                                     int mesh_dim, ReduceOp op) override;

  void set_desync_check(bool on) { check_ = on; }
  bool desync_check() const { return check_; }

  // The collectives, as named in desync and timeout messages.
  enum class Kind : int32_t {
    AllGather, AllReduce, ReduceScatter, AllToAll, Broadcast, Scatter, BoxExchange
  };

  // What a member is about to call (exchanged by the desync check). -1 in
  // dtype/ndim means "not known here" (a non-root member of
  // broadcast/scatter) and matches anything; a shape entry of -1 is a dim
  // allowed to differ (the gather or concat dim), whose actual length is
  // free_len.
  struct Call {
    int32_t magic = 0;  // kCallMagic: a record, not stray bytes
    int32_t kind = 0;
    int32_t mesh_dim = 0;
    int32_t group_size = 0;
    int32_t dtype = -1;
    int32_t ndim = -1;
    int32_t reduce_op = -1;
    int32_t created = 0;  // 1: the group's communicator exists on the sender
    int64_t dim_a = -1;       // gather / scatter / split dim, or the root
    int64_t dim_b = -1;       // concat dim
    int64_t first_rank = -1;  // the group's first rank: which group this is
    int64_t seq = 0;          // the call's number on its group (1-based)
    uint64_t group = 0;       // hash of the group's ranks
    int64_t free_len = -1;    // the sender's length along the free dim
    int64_t shape[kMaxDims] = {};
  };

  // The calling rank's group of a mesh dim: its communicator, its index in
  // the group, its size, its ranks, and this call's number on it. While a
  // Group lives, the collective is watched (the watchdog's timeout runs).
  struct Group {
    MPI_Comm comm = MPI_COMM_NULL;
    int index = 0;
    int size = 1;
    const std::vector<int>* ranks = nullptr;
    int64_t seq = 0;
    uint64_t hash = 0;
    // Ends the watched span when the Group goes (move-only).
    struct Watch {
      CollectiveMonitor* monitor = nullptr;
      Watch() = default;
      explicit Watch(CollectiveMonitor* m) : monitor(m) {}
      Watch(Watch&& o) noexcept : monitor(o.monitor) { o.monitor = nullptr; }
      Watch& operator=(Watch&& o) noexcept {
        std::swap(monitor, o.monitor);
        return *this;
      }
      ~Watch() {
        if (monitor != nullptr) monitor->leave();
      }
    } watch;
  };

 private:
  // nullopt-like: size 0 when this rank is not in the mesh. Starts watching
  // the collective `kind`; with the check on, at the group's first use,
  // compares the members' calls before creating the communicator.
  Group group_of(const DeviceMesh& mesh, int mesh_dim, Kind kind);
  // The desync check (see above): raises on every member when they differ.
  void check_same_call(const Group& g, const Call& mine, const DeviceMesh& mesh, int rank);
  // Sends `mine` to the group's other members and returns every member's
  // record (in group order), on ctrl_.
  std::vector<Call> exchange_calls(const Group& g, const Call& mine);
  // With the check on: the lengths along the free dim that arrived in the
  // data exchange are the ones the members announced in the check.
  void check_received_lengths(const Group& g, const std::vector<int64_t>& lens,
                              const DeviceMesh& mesh, const char* coll, const char* what) const;
  // Same for the root's header of broadcast/scatter (defined beside it).
  template <class Header>
  void check_received_header(const Group& g, const Header& h, int root, const DeviceMesh& mesh,
                             const char* coll) const;

  struct GroupState {
    MPI_Comm comm = MPI_COMM_NULL;
    int64_t seq = 0;  // calls made on the group so far
    uint64_t hash = 0;
  };

  MPI_Comm world_;
  MPI_Comm ctrl_ = MPI_COMM_NULL;  // the desync check's records
  int rank_ = 0;
  bool check_ = false;
  std::map<std::vector<int>, GroupState> comms_;  // by the group's ranks
  std::vector<Call> last_calls_;  // the records of the last check, by group index
  std::unique_ptr<CollectiveMonitor> monitor_;

 public:
  // This rank's number of calls on the group of hash h (0: never used).
  int64_t calls_on(uint64_t h) const;
  CollectiveMonitor& monitor() { return *monitor_; }
};

}  // namespace dtensor
