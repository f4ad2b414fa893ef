// Planning a run before renting its cluster (docs/estimate.md): the exact
// memory and collectives of every rank of a step, from a program run on a
// World::shape_only, which has shapes but no data.
//
//   World world = World::shape_only(1024);
//   estimate::Profile p = estimate::profile(world, [&] {
//     ... build the model on a mesh of `world`, lay it out, and run a step,
//     calling estimate::phase("backward") etc. between its parts ...
//   });
//   p.ranks[r].memory.peak          // bytes, exact
//   p.ranks[r].collectives          // kind, dtype, bytes, group, in order
//
// The same program on World::simulated or under MPI gives the same
// figures (tests/worlds/estimate_test.cc checks them equal), so a profile
// of a shape-only world is what the real run will hold and send.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/debug.h"
#include "dtensor/memory.h"

namespace dtensor::estimate {

// A rank's memory just after one event of the step (Profile::memory_histories).
struct MemorySample {
  int64_t now = 0;   // bytes of the rank's tensors (RankMemoryTracker)
  int64_t peak = 0;  // their high-water mark from the profile's start on
  bool operator==(const MemorySample&) const = default;
};

// One rank's part of a profiled step.
struct RankProfile {
  int rank = 0;
  RankPeak memory;  // bytes of the rank's tensors (RankMemoryTracker): now, peak
  std::vector<RankCollective> collectives;  // in the order the rank ran them
  // Where each phase (Profile::phases) starts in `collectives`.
  std::vector<size_t> phase_starts;
  // The rank's memory over the step: Profile::memory_histories[memory_history]
  // (-1 when the profile was not asked for it).
  int memory_history = -1;
};

struct Profile {
  // Each rank the world holds, ascending; in a shape-only world computing
  // by roles, one rank of each role (ProfileOptions::roles).
  std::vector<RankProfile> ranks;
  std::vector<std::vector<int>> groups;  // RankCollective::group's world ranks
  std::vector<std::string> phases;       // the names phase() was given, in order
  // The step as one stream (StepEvent: ops with their FLOPs and bytes in a
  // shape-only world, collectives, waits), and where each phase starts in it.
  std::vector<StepEvent> events;
  std::vector<size_t> phase_events;
  // By roles: each world rank's stand-in, the rank of `ranks` whose
  // figures it has (its memory and its collectives, in its own groups);
  // empty when every rank was computed. How many times the step ran (a
  // layout that split the roles runs it again).
  std::vector<int> stand_in;
  int runs = 1;
  // The mesh dim's groups each of `groups` is one of (CollectiveTrace),
  // by which group_of finds a rank's own.
  std::vector<int> group_partition;
  std::vector<GroupPartition> partitions;
  // With profile(..., memory_timeline): the memory of the ranks after each
  // event, one sample per event (memory_histories[h][i]: after events[i]).
  // Ranks whose samples all agree share one history, so that its size
  // follows the distinct ranks (the roles), not the ranks: 1,024 ranks of
  // one role over 20,000 events keep 20,000 samples, not 20 million.
  std::vector<std::vector<MemorySample>> memory_histories;

  // The index in `ranks` of the entry with `rank`'s figures. Throws for a
  // rank the profile has none of.
  size_t index_of(int rank) const;
  // The world ranks whose figures ranks[i] are (itself and the ranks it
  // stands in for), ascending.
  std::vector<int> ranks_of(size_t i) const;
  // The world ranks of the group of `rank`'s k-th collective, in group
  // order: the group of `rank` among the groups of its stand-in's.
  std::vector<int> group_of(int rank, size_t k) const;
  // Every rank's figures, as if each were computed (the groups of the
  // ranks stood in for added to `groups`): large on many ranks.
  Profile expanded() const;
};

struct ProfileOptions {
  // In a shape-only world, compute each role once (ranks alike in their
  // local shapes and collectives: src/world/roles.h), so that the cost
  // grows with the roles, not the ranks; false computes every rank.
  bool roles = true;
  // Also each rank's bytes after each event (Profile::memory_histories;
  // reading every rank's counters at every event, which a profile without
  // it does not pay).
  bool memory_timeline = false;
};

// Runs step() with a RankMemoryTracker and a CollectiveTrace on `world`:
// everything step() makes counts, the model's parameters included when it
// builds them. Throws what step() throws. By roles, step() may run more
// than once, each run from the start: it must make the tensors it uses
// (meshes may be made before), and none it makes outlives the profile,
// after which the world holds every rank again.
Profile profile(const World& world, const std::function<void()>& step,
                const ProfileOptions& options = {});

// Inside profile()'s step: the collectives from here on belong to phase
// `name` (until the next). Does nothing outside a profile.
void phase(const std::string& name);

// ---- time, estimated ------------------------------------------------------

// A device as the roofline sees it: an op takes the longer of its FLOPs at
// the dtype's peak and its bytes at the memory's bandwidth, each derated
// by an efficiency, plus a fixed cost per op (a kernel launch).
struct Device {
  std::string name;
  double memory = 0;                   // bytes per device
  double peak_flops[kNumDTypes] = {};  // dense matrix products, FLOP/s
  double vector_flops = 0;             // other ops, FLOP/s
  double memory_bandwidth = 0;         // bytes/s
  double matmul_efficiency = 0.7;
  double memory_efficiency = 0.8;
  double op_overhead = 5e-6;  // seconds
  // The part of the device one rank has: 1 for a GPU per rank; on a CPU
  // with more ranks than cores, cores / ranks (they take turns), which
  // divides every op's rate.
  double share = 1;
};

// One level of the network: a message's latency and each rank's bandwidth
// (bytes/s, one direction).
struct Link {
  double latency = 0;
  double bandwidth = 0;
};

// A collective's measured time: `dtensor calibrate` measures them on this
// machine under mpirun; nccl-tests measure them on a GPU cluster
// (parse_nccl_tests).
struct MeasuredCollective {
  CollectiveKind kind = CollectiveKind::AllReduce;
  int ranks = 0;      // the group's size
  int64_t bytes = 0;  // the largest input shard, as StepEvent::bytes
  double seconds = 0;
  int nodes = 1;  // the nodes the group spanned: 1 within a node
};

// Ranks fill nodes in order: rank r is on node r / ranks_per_node.
struct Cluster {
  Device device;
  int ranks_per_node = 8;
  Link within_node, across_nodes;
  // Measured times, by kind, group size and the nodes the group spans: a
  // collective of a kind and size measured on a group of its size over as
  // many nodes takes the time interpolated between the two nearest sizes
  // measured (linearly in bytes; the alpha-beta model beyond the largest
  // and below the smallest, and for groups measured on no such span).
  std::vector<MeasuredCollective> measured;
};

// A cluster as JSON (what `dtensor calibrate` writes and `dtensor
// estimate --calibration` reads): {"device": {"name", "memory",
// "peak_flops": {"float32", "bfloat16", ...}, "vector_flops",
// "memory_bandwidth", "matmul_efficiency", "memory_efficiency",
// "op_overhead", "share"}, "ranks_per_node", "within_node": {"latency",
// "bandwidth"}, "across_nodes": {...}, "measured": [{"kind", "ranks",
// "nodes" (optional, 1), "bytes", "seconds"}, ...]}, seconds, bytes and
// bytes/s. Reading throws naming the field that is missing or wrong.
std::string cluster_json(const Cluster& c);
Cluster cluster_from_json(const std::string& text);

// The measured times in the output of one nccl-tests program
// (github.com/NVIDIA/nccl-tests: all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, alltoall_perf, broadcast_perf), one per row of its
// table: the out-of-place time (dtensor's collectives write a new
// tensor), over a group of the ranks its "#  Rank" lines list (their
// number, and the hosts they ran on as nodes), at StepEvent::bytes: the
// row's size is the larger of a rank's send and receive buffers, so an
// all_gather's is n times the input shard, the others' their input. The
// program is named by its "# Collective test starting:" line or, for
// versions that do not print it, by `file`'s name (all_gather_perf.txt).
// Throws dtensor::Error naming `file`, the line and what was expected
// (not nccl-tests output, a table without its columns, a size or time
// that does not parse, a row with wrong results, a size measured twice,
// a program dtensor has no collective for).
std::vector<MeasuredCollective> parse_nccl_tests(const std::string& text, const std::string& file);

// The built-in devices: "h100" (SXM, NVLink 4 within a node, 400 Gb/s
// InfiniBand per GPU across), "a100" (SXM 80 GB, NVLink 3, 200 Gb/s), and
// "cpu", figures of a 2-core x86 machine like the one the tests run on
// (`dtensor calibrate` measures one). Throws naming them for another name.
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_presets();

// The seconds one collective takes on `group` (world ranks) with `bytes`
// the largest input shard: NCCL's algorithms, ring (all_gather,
// reduce_scatter, all_to_all), ring or tree whichever is faster
// (all_reduce), a binomial tree (broadcast, scatter), over the slowest
// link the group spans. 0 for a group of one.
double collective_seconds(const Cluster& c, CollectiveKind kind, int64_t bytes,
                          const std::vector<int>& group);
// The measured part of collective_seconds: the time Cluster::measured
// gives a collective (of its kind, group size and span, its bytes within
// the sizes measured), or nothing when the model gives it.
std::optional<double> measured_seconds(const Cluster& c, CollectiveKind kind, int64_t bytes,
                                       const std::vector<int>& group);
// The seconds one op takes (StepEvent::Type::Op).
double op_seconds(const Device& d, const StepEvent& op);
// Whether op_seconds times an op (StepEvent::op) at the matrix peak: the
// products (mm, addmm, bmm, baddbmm, matmul, linear, attention).
bool is_matrix_product(const char* op);

// A span of the estimated step on one lane (0: compute, 1: communication).
struct Span {
  int lane = 0;
  double start = 0, end = 0;
  std::string name;
};

// The step's time, estimated from a profile's events: ops run one after
// another on a compute stream, collectives on a communication stream,
// each starting once the ops before it are done and the stream is free;
// a blocking collective holds the compute stream until it ends, one
// started early (fully_shard's prefetch and async reduce_scatter) only
// at the point that waits for it.
struct TimeEstimate {
  double step = 0;                   // seconds
  double compute = 0;                // the compute stream's busy time
  double communication = 0;          // the communication stream's busy time
  double exposed_communication = 0;  // step - compute: what overlap did not hide
  double flops = 0;                  // the step's FLOPs (the busiest rank's shards)
  std::vector<double> phase_starts;  // per profile phase, seconds into the step
  std::vector<Span> timeline;
  // Per profile event, where the compute stream is once the program has
  // issued it (an op or blocking collective done, a started collective
  // queued, a wait over): the time of Profile::memory_histories' samples.
  // 0 for the events before `first_phase`.
  std::vector<double> event_times;
};
// From phase `first_phase` of the profile on (a profile of two steps
// times the second from its first phase); phase_starts has an entry for
// every phase, 0 for those before.
TimeEstimate estimate_time(const Profile& profile, const Cluster& cluster, size_t first_phase = 0);

}  // namespace dtensor::estimate
