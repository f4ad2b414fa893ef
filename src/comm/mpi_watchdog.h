// CollectiveMonitor — what each rank of an MPI world is doing, for the
// collective timeout (watchdog) and for a rank that exits while others wait.
//
// Every rank publishes, at the start and end of each collective, a small
// record (which collective, which group, its call number on that group, or
// "exited") in a shared-memory window over the ranks of its node
// (MPI_Win_allocate_shared), so a rank can read its node's peers with plain
// loads: no message per collective, and no MPI call from the watchdog
// thread (the world runs at MPI_THREAD_FUNNELED). Ranks on another node are
// not visible; what is said about them is "unknown".
//
// The watchdog is one thread per process. When a collective has not ended
// DTENSOR_COLLECTIVE_TIMEOUT seconds (default 600) after it began, it prints
// "dtensor: rank R: collective timeout: ..." naming the collective, the mesh
// dim, the group's ranks and, for the ranks of this node, the ones that did
// not arrive and what they are doing instead, then _exit(1)s: the launcher
// (mpirun) sees a rank fail and ends the job.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mpi.h>
#include <string>
#include <vector>

namespace dtensor {

// One rank's published state (in shared memory; written only by its rank,
// read by the others of its node under a sequence lock).
struct RankSlot {
  static constexpr int kMaxRanks = 64;  // group members kept for the exit check
  std::atomic<uint64_t> version{0};     // odd while being written
  std::atomic<int64_t> state{0};        // kIdle, kInCollective, kExited
  std::atomic<int64_t> kind{-1};        // MpiBackend::Kind of the current or last collective
  std::atomic<int64_t> mesh_dim{-1};
  std::atomic<uint64_t> group{0};       // hash of the group's ranks
  std::atomic<int64_t> seq{0};          // call number of that collective on its group (1-based)
  std::atomic<int64_t> group_size{0};
  std::atomic<int32_t> ranks[kMaxRanks];  // the group's first kMaxRanks ranks
};

class CollectiveMonitor {
 public:
  enum State : int64_t { kIdle = 0, kInCollective = 1, kExited = 2 };

  // A plain copy of a slot, read consistently.
  struct Snapshot {
    int64_t state = kIdle, kind = -1, mesh_dim = -1, seq = 0, group_size = 0;
    uint64_t group = 0;
    std::vector<int> ranks;
  };

  // comm: the world's communicator (collective over it). The shared window
  // is optional: when the MPI library cannot make one, peers are "unknown".
  explicit CollectiveMonitor(MPI_Comm comm);
  ~CollectiveMonitor();
  CollectiveMonitor(const CollectiveMonitor&) = delete;
  CollectiveMonitor& operator=(const CollectiveMonitor&) = delete;

  // The calling rank enters collective #seq of the group `ranks` (hash
  // `group`; the vector outlives the monitor). Cheap: a few atomic stores,
  // no lock and no clock (the watchdog thread times the collective from
  // when it first sees it, so a timeout fires up to a tenth late).
  void enter(int kind, int mesh_dim, const std::vector<int>* ranks, uint64_t group, int64_t seq);
  void leave();
  // This rank has exited (the watchdog and the exit check of peers see it).
  void mark_exited();

  // A node peer blocked in a collective that includes this rank but that
  // this rank never entered ("rank P waits in ... (call #s on it; this rank
  // made n)"), or "" when there is none. my_seq(group hash) gives this
  // rank's number of calls on a group (0: never used).
  template <class SeqOf>
  std::string peer_waiting_on_me(const SeqOf& my_seq) const;

  // What rank r (of the world's communicator) is doing, as seen from
  // collective `kind`, call #seq on group `group`: "arrived", or why not.
  std::string member_state(int r, int kind, uint64_t group, int64_t seq, bool* arrived) const;

  // Called by the watchdog thread: the message to die with, or "" when the
  // current collective (if any) is within the timeout.
  std::string overdue(std::chrono::steady_clock::time_point now, double timeout_s);

  int rank() const { return rank_; }
  bool read_slot(int r, Snapshot& out) const;

 private:
  void publish(int64_t state, int kind, int mesh_dim, const std::vector<int>* ranks,
               uint64_t group, int64_t seq);

  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0;
  RankSlot* mine_ = nullptr;          // in the window, or own_ when there is none
  std::vector<RankSlot*> slots_;      // by world rank; nullptr: not on this node
  RankSlot own_;

  // The current collective, written by the calling thread and read by the
  // watchdog thread: gen_ changes at every enter, so the watchdog can tell
  // a collective that lasts from a new one in the same place.
  std::atomic<uint64_t> gen_{0};
  std::atomic<bool> active_{false};
  std::atomic<int> kind_{-1};
  std::atomic<int> mesh_dim_{-1};
  std::atomic<const std::vector<int>*> ranks_{nullptr};
  std::atomic<uint64_t> group_{0};
  std::atomic<int64_t> seq_{0};
  // The watchdog thread's own: the collective it last saw, and since when.
  uint64_t seen_gen_ = 0;
  std::chrono::steady_clock::time_point seen_since_;
};

// The collective timeout in seconds, process-wide (<= 0: no timeout; set
// to inf, it reads 0). Starts from DTENSOR_COLLECTIVE_TIMEOUT, or 600.
double collective_timeout_seconds();
void set_collective_timeout_seconds(double seconds);

// Name of MpiBackend::Kind k ("all_reduce", ...).
const char* collective_kind_name(int k);

// 64-bit hash of a group's ranks (FNV-1a).
uint64_t group_hash(const std::vector<int>& ranks);

// Prints "dtensor: rank R: <text>" on stderr with one write (safe to call
// from any thread while others print).
void print_rank_message(int rank, const std::string& text);

// ---- template ----------------------------------------------------------------

template <class SeqOf>
std::string CollectiveMonitor::peer_waiting_on_me(const SeqOf& my_seq) const {
  for (int r = 0; r < static_cast<int>(slots_.size()); ++r) {
    if (r == rank_ || slots_[r] == nullptr) continue;
    Snapshot s;
    if (!read_slot(r, s) || s.state != kInCollective) continue;
    if (s.group_size > RankSlot::kMaxRanks) continue;  // membership not known
    bool member = false;
    for (int m : s.ranks) member = member || m == rank_;
    if (!member) continue;
    const int64_t mine = my_seq(s.group);
    if (s.seq <= mine) continue;  // this rank was there; the peer is just leaving
    std::string ranks;
    for (size_t i = 0; i < s.ranks.size(); ++i) ranks += (i ? ", " : "") + std::to_string(s.ranks[i]);
    return "rank " + std::to_string(r) + " waits for it in " + collective_kind_name(static_cast<int>(s.kind)) +
           " over mesh dim " + std::to_string(s.mesh_dim) + " (ranks " + ranks + "; call #" +
           std::to_string(s.seq) + " on that group, this rank made " + std::to_string(mine) + ")";
  }
  return "";
}

}  // namespace dtensor
