// Debugging aids: CommDebugMode counts the collectives run while it is alive;
// VerifyMode checks every op and redistribution against the same computation
// on replicated data; visualize_sharding shows which rank holds which part of
// a tensor.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dtensor/spec.h"

namespace dtensor {

enum class CollectiveKind : uint8_t {
  AllGather, AllReduce, ReduceScatter, AllToAll, Broadcast, Scatter, BoxExchange
};
inline constexpr int kNumCollectiveKinds = 7;
// "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "broadcast", "scatter",
// "box_exchange"
const char* to_string(CollectiveKind kind);

// One collective as a single rank sees it: its kind, the mesh dim it ran
// over (of the mesh it was given, a flattened one included; -1 for a
// box_exchange, which spans the whole mesh), the bytes each rank handed to
// it (the largest shard of the call) and the dtype they travelled in.
struct CollectiveRecord {
  CollectiveKind kind = CollectiveKind::AllGather;
  int mesh_dim = -1;
  int64_t bytes = 0;
  DType dtype = DType::Float32;
  bool operator==(const CollectiveRecord&) const = default;
};
// "all_reduce mesh dim 0 bfloat16 32 bytes", "box_exchange float32 8 bytes".
std::string to_string(const CollectiveRecord& record);

// While alive, counts every collective the backends run (one per call, as a
// single rank would see it, however many ranks the process holds), the
// bytes each rank sends into it and the dtype they travel in, keeps a
// record of each (collectives(): 24 bytes apiece, so a mode alive for a
// long run grows with it), and adds up the estimated cost of every
// redistribution plan run (the cost model of redistribute.h). Modes nest:
// each counts what runs in its lifetime. A mode counts only what the thread
// that made it runs (as PyTorch's CommDebugMode, a thread-local dispatch
// mode): collectives of other threads, e.g. another simulated job in the
// same process, are not its own. Its readers may be called from any thread.
class CommDebugMode {
 public:
  CommDebugMode();
  ~CommDebugMode();
  CommDebugMode(const CommDebugMode&) = delete;
  CommDebugMode& operator=(const CommDebugMode&) = delete;

  int64_t count(CollectiveKind kind) const;
  // Of this kind, in this dtype.
  int64_t count(CollectiveKind kind, DType dtype) const;
  int64_t total_count() const;
  // Bytes per rank handed to collectives of this kind (in this dtype).
  int64_t bytes(CollectiveKind kind) const;
  int64_t bytes(CollectiveKind kind, DType dtype) const;
  // Every collective counted, in the order they ran.
  std::vector<CollectiveRecord> collectives() const;
  // The planner's estimate (µs) summed over the plans run, and their number
  // (redistribute calls and the redistributions ops make of their inputs).
  double planned_cost_us() const;
  int64_t plans_run() const;
  // Wall time this thread spent inside the backend's collectives, in
  // seconds: under MPI the time its process waited in MPI calls (moving
  // the data, and waiting for slower ranks) with the packing around them;
  // in the simulated world the time spent computing every rank's part.
  double collective_seconds() const;
  // A table: one line per kind and dtype that ran (a kind that did not run:
  // one line, dtype "-", count 0) with its count and bytes, then the total:
  //   collective      dtype     count  bytes
  //   all_gather      bfloat16      1     16
  //   all_reduce      -             0      0
  std::string table() const;
  // {"all_gather":1,"all_reduce":0,...,"total":1}
  std::string json() const;

 private:
  friend void record_collective(CollectiveKind kind, int64_t bytes_per_rank, DType dtype,
                                int mesh_dim);
  friend void record_plan_run(double cost_us);
  friend class CollectiveTimer;
  std::thread::id owner_;  // the thread whose collectives this mode counts
  std::array<int64_t, kNumCollectiveKinds> counts_{};
  std::array<int64_t, kNumCollectiveKinds> bytes_{};
  std::vector<CollectiveRecord> records_;
  double planned_cost_us_ = 0;
  int64_t plans_run_ = 0;
  double collective_seconds_ = 0;
};

// Held by a backend for the whole of each collective call: its wall time
// goes to the CommDebugModes of the thread (collective_seconds), once for
// calls inside calls. Costs one atomic load when no mode is alive.
class CollectiveTimer {
 public:
  CollectiveTimer();
  ~CollectiveTimer();
  CollectiveTimer(const CollectiveTimer&) = delete;
  CollectiveTimer& operator=(const CollectiveTimer&) = delete;

 private:
  int64_t start_ns_ = -1;  // -1: not timing (no mode, or an outer call times)
};

// One collective as one rank took part in it (CollectiveTrace).
struct RankCollective {
  CollectiveKind kind = CollectiveKind::AllGather;
  DType dtype = DType::Float32;
  // The bytes of the rank's input shard; for broadcast and scatter, of
  // what it receives (its output).
  int64_t bytes = 0;
  int group = 0;  // CollectiveTrace::group(group): its group's world ranks
  bool operator==(const RankCollective&) const = default;
};

// The step as one stream, in the order the thread ran it, for estimates of
// its time (estimate.h): each collective call once (as CommDebugMode
// counts it: the largest input shard's bytes, and the group of its first
// member), and, in a shape-only world, each op whose kernel it skipped,
// with the most FLOPs and bytes (inputs read plus output written) of any
// rank's shard. A collective fully_shard started early (prefetch, async
// reduce_scatter) is `started`, and the point where it was waited for is
// a Wait event naming it.
struct StepEvent {
  enum class Type : uint8_t { Op, Collective, Wait };
  Type type = Type::Op;
  const char* op = nullptr;  // Op: the op's name
  CollectiveKind kind = CollectiveKind::AllGather;
  DType dtype = DType::Float32;  // Op: its output's
  bool started = false;  // Collective: started early, waited for by a later Wait
  int group = -1;        // Collective: CollectiveTrace::group
  int64_t bytes = 0;
  double flops = 0;     // Op
  int64_t waits = -1;   // Wait: the index of the collective it waits for
};

// While alive, records for each rank this process holds the collectives
// it takes part in, in order, as the rank's own process sees them: the
// same lists in the simulated world, under MPI (each process its rank's)
// and in a shape-only world. What the tests compare worlds by, and what
// `dtensor estimate` times. It records what the thread that made it runs
// (as CommDebugMode); one per thread at a time (a second throws).
// The groups of one mesh dim: a collective's group, for every world rank
// (estimate::Profile::group_of finds a rank's group by it).
struct GroupPartition {
  std::vector<std::vector<int>> groups;  // mesh.groups(dim)
  std::vector<int> of_rank;              // world rank -> index in groups, -1: in none
};

class CollectiveTrace {
 public:
  CollectiveTrace();
  ~CollectiveTrace();
  CollectiveTrace(const CollectiveTrace&) = delete;
  CollectiveTrace& operator=(const CollectiveTrace&) = delete;
  // The collectives of `rank`, in order (empty when it took part in none).
  const std::vector<RankCollective>& of(int rank) const;
  // The world ranks of group i, in group order.
  const std::vector<int>& group(int i) const;
  int groups() const { return static_cast<int>(groups_.size()); }
  // The mesh dim's groups group i is one of (an index into partitions()).
  int partition_of(int i) const { return group_partition_[static_cast<size_t>(i)]; }
  const std::vector<GroupPartition>& partitions() const { return partitions_; }
  // The step as one stream (StepEvent).
  const std::vector<StepEvent>& events() const { return events_; }

  // For backends, through trace_collective; returns the group's index.
  int add(CollectiveKind kind, DType dtype, const std::vector<int>& group, const DeviceMesh& mesh,
          int mesh_dim, const std::function<int64_t(size_t member)>& bytes);
  void add_event(const StepEvent& e) {
    events_.push_back(e);
    if (after_event_) after_event_();
  }
  // Called after each event is added (estimate::profile samples each
  // rank's memory there when asked for a memory timeline). A hook rather
  // than the samples themselves: the trace knows nothing of memory, and a
  // trace without a hook pays one test per event.
  void set_after_event(std::function<void()> hook) { after_event_ = std::move(hook); }

 private:
  int partition(const DeviceMesh& mesh, int mesh_dim);

  std::vector<StepEvent> events_;
  std::function<void()> after_event_;
  std::vector<std::vector<RankCollective>> by_rank_;
  std::vector<std::vector<int>> groups_;
  std::vector<int> group_partition_;
  // A group is interned with its partition: the same ranks may be a group
  // of two mesh dims whose other groups differ.
  std::map<std::pair<int, std::vector<int>>, int> group_ids_;
  std::vector<GroupPartition> partitions_;
  std::vector<std::pair<DeviceMesh, int>> partition_keys_;  // a few: searched in turn
};

// The trace of this thread, or null (one thread-local load).
CollectiveTrace* collective_trace();
// Called by backends, when collective_trace() is not null, once for each
// group of a collective over `mesh_dim` of `mesh` they run a part of: the
// group's world ranks in group order and bytes(i), member i's bytes
// (RankCollective::bytes); the trace keeps the members this process
// holds. Not inside VerifyMode's checks.
void trace_collective(CollectiveKind kind, DType dtype, const std::vector<int>& group,
                      const DeviceMesh& mesh, int mesh_dim,
                      const std::function<int64_t(size_t member)>& bytes);
// Called by backends once per collective call (after its groups'
// trace_collective): the StepEvent, with the first group's members.
// Returns the event's index (-1 when no trace runs).
int64_t trace_call(CollectiveKind kind, DType dtype, int64_t bytes, const std::vector<int>& group,
                   const DeviceMesh& mesh, int mesh_dim);
// While alive on a thread, the collectives its backend calls are traced as
// started early (Backend::start_*'s defaults run the blocking call inside one).
class TraceStarted {
 public:
  TraceStarted();
  ~TraceStarted();
  TraceStarted(const TraceStarted&) = delete;
  TraceStarted& operator=(const TraceStarted&) = delete;
};
// A started collective (event index `event`) is waited for now.
void trace_wait(int64_t event);
// A shape-only world's op whose kernel did not run.
void trace_op(const char* name, double flops, int64_t bytes, DType dtype);

// Called by backends for each collective they run: the bytes each rank
// hands in (the largest shard of the call), their dtype, and the mesh dim
// (normalised to 0..ndim-1; -1 for a box_exchange).
void record_collective(CollectiveKind kind, int64_t bytes_per_rank, DType dtype, int mesh_dim);
// Called by the plan executor for each plan it runs.
void record_plan_run(double cost_us);
// Whether this thread's collectives are watched: a CommDebugMode is alive
// (on any thread; one atomic load) or a CollectiveTrace records this
// thread's. A shortcut that skips collectives a program would run under
// MPI (DTensor::full_tensor in a simulated world) is taken only when not.
bool collectives_observed();

// While alive (or for the whole program when the environment variable
// DTENSOR_VERIFY is set), every DTensor op and every redistribute checks
// its result against the single-process reference: an op is run again on
// its inputs redistributed to Replicate (its kernel on the full tensors),
// a redistribution must keep the tensor's value. A mismatch throws
// dtensor::Error naming the op, the input placements and the largest
// difference. Floating-point results agree within |got - want| <= 1e-5 +
// 1e-4·|want| (reductions may sum in another order); others exactly.
// Costs a full_tensor() of every input and output, so it is for tests and
// debugging. The checks' own collectives are not counted by CommDebugMode
// and leave no debug notes; their sharding-propagation lookups do count in
// sharding_prop_cache_info(). Modes nest. Under MPI every rank must verify
// the same ops (they do when every rank makes the same VerifyMode or sets
// the same environment); a mismatch throws on the ranks that see it, which
// ends the job unless caught.
class VerifyMode {
 public:
  VerifyMode();
  ~VerifyMode();
  VerifyMode(const VerifyMode&) = delete;
  VerifyMode& operator=(const VerifyMode&) = delete;
  // How many ops and redistributions were checked while this mode was
  // alive (this thread's and others').
  int64_t checks() const;

 private:
  friend void record_verification();
  int64_t checks_ = 0;
};

// Whether a VerifyMode is alive or DTENSOR_VERIFY is set.
bool verify_enabled();

// Notes the library leaves once per distinct text for someone debugging
// layouts, e.g. "argmax: no sharding rule for placements S(0); computed on
// Replicate". With the environment variable DTENSOR_DEBUG set they are also
// printed to stderr as they happen. Thread-safe.
std::vector<std::string> debug_notes();
void clear_debug_notes();
// Adds a note unless the same text was noted before.
void note_once(const std::string& note);

// A table of which rank (and mesh coordinate) holds which index range of
// each tensor dim, e.g. for mesh 2, shape [4, 2], S(0):
//   rank  coord  dim 0     dim 1   local shape
//   0     [0]    [0, 2)    [0, 2)  [2, 2]
//   1     [1]    [2, 4)    [0, 2)  [2, 2]
// Partial placements are noted ("partial sum over mesh dim 1").
std::string visualize_sharding(const DTensorSpec& spec);

}  // namespace dtensor
