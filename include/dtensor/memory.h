// Memory: what each rank holds, by category, and what the process used at
// its peak (PyTorch's fsdp2_mem_tracker and torch.cuda.memory_stats).
//
//   MemoryTracker tracker(model, &optimizer);   // starts the peaks from now
//   DTensor loss = loss_fn(model(x), y);
//   tracker.after_forward(loss);                // activations saved for backward
//   loss.backward();
//   optimizer.step();
//   MemoryReport r = tracker.report();          // parameters, gradients, state, peaks
//   std::cout << r.table();
//
// The categories are exact byte counts of each held rank's tensors, each
// storage once (a view or a tied parameter is not counted twice):
// parameters (the model's shards), gradients, optimizer state (its buffers),
// and activations: what the graph behind the loss keeps for backward at the
// end of forward, less the parameters themselves (FSDP's unsharded
// parameters are gathered again in backward, so they are not kept).
// The peaks are measured, by dtensor's allocator, for the whole process
// (every rank it holds: one under MPI): bytes allocated (live tensors,
// rounded up to the allocator's size classes) and reserved (those plus the
// freed blocks it caches for reuse, what the resident set grows by), and
// the peaks of two categories the code that allocates names (MemoryScope):
// fully_shard's unsharded parameters (gathered for forward and backward,
// and reshard_after_forward=k's kept pieces) and its communication buffers
// (the flat buffers its all_gathers and reduce_scatters run on, received
// pieces, and gradient accumulation's unsynced flat gradients).
// Temporaries of ops are in the peaks but in no category.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/distributed_tensor.h"

namespace dtensor {

namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}

// The allocator's figures for this process (PyTorch's memory_allocated(),
// max_memory_allocated(), memory_reserved(), max_memory_reserved()).
struct MemoryStats {
  int64_t allocated = 0;
  int64_t peak_allocated = 0;
  int64_t reserved = 0;
  int64_t peak_reserved = 0;
  // The bytes of MemoryCategory::UnshardedParameters and
  // CommunicationBuffers live now, and their peaks (each its own: they
  // need not peak at one moment).
  int64_t unsharded_parameters = 0;
  int64_t peak_unsharded_parameters = 0;
  int64_t communication_buffers = 0;
  int64_t peak_communication_buffers = 0;
};

// What the memory of the tensors made on this thread in a MemoryScope is
// for, counted apart in MemoryStats until each storage dies (PyTorch's
// fsdp2_mem_tracker counts FSDP's all_gather and reduce_scatter buffers so).
enum class MemoryCategory : uint8_t { None = 0, UnshardedParameters = 1, CommunicationBuffers = 2 };
// Tensors allocated on this thread while it lives count in `category`;
// scopes nest (the innermost counts).
class MemoryScope {
 public:
  explicit MemoryScope(MemoryCategory category);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  uint8_t previous_;
};
MemoryStats memory_stats();
// Starts the peaks again from now (reset_peak_memory_stats()).
void reset_peak_memory_stats();
// The process's resident set now and its high-water mark (Linux's VmRSS
// and VmHWM); 0 where they cannot be read.
int64_t resident_bytes();
int64_t peak_resident_bytes();
// Starts the high-water mark again from the resident set now (Linux's
// /proc/self/clear_refs); false where that is not possible.
bool reset_peak_resident();

struct RankMemory {
  int rank = 0;
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t activations = 0;
  // The report's line for this rank, under header().
  std::string row() const;
  static const char* header();
};
// Bytes as the report prints them: "12.34 MiB".
std::string mib_text(int64_t bytes);

struct MemoryReport {
  std::vector<RankMemory> ranks;  // each rank this process holds, in order
  MemoryStats process;            // peaks since the tracker started
  // What the allocator reserved and the resident set when the tracker
  // started, and the resident set's high-water mark since (0 when it could
  // not be reset): the resident set grows by about
  // process.peak_reserved - reserved_at_start.
  int64_t reserved_at_start = 0;
  int64_t resident_at_start = 0;
  int64_t peak_resident = 0;
  // One line per held rank (its categories), then the process's
  // peaks.
  std::string table() const;
  // {"rank":..,"parameters":..,...,"peak_allocated":..,...}
  std::string json() const;
};

// Memory by rank, as each rank's own process would count it: while a
// RankMemoryTracker lives, every storage that some LocalTensor holds as
// rank r's shard (an op's output, a collective's result, fully_shard's
// flat buffers, optimizer state, a parameter made after it started)
// counts on r, at its exact bytes, from then until it is freed; a view
// or a second holder does not count it again. Temporaries that kernels
// make and free inside one op are not counted; collectives' internal
// buffers neither. The figures are the same in the simulated world,
// under MPI and in a shape-only world (World::shape_only), which is how
// `dtensor estimate` gives a rank's exact peak without its data.
struct RankPeak {
  int rank = 0;
  int64_t now = 0, peak = 0;  // bytes of the rank's tensors, and their high-water mark
  // The peaks of fully_shard's two categories (MemoryScope), each its own.
  int64_t peak_unsharded_parameters = 0;
  int64_t peak_communication_buffers = 0;
  bool operator==(const RankPeak&) const = default;
};
class RankMemoryTracker {
 public:
  // Starts counting for the ranks of `world` (one tracker at a time:
  // throws while another lives). Tensors made before are not counted.
  explicit RankMemoryTracker(const World& world);
  ~RankMemoryTracker();
  RankMemoryTracker(const RankMemoryTracker&) = delete;
  RankMemoryTracker& operator=(const RankMemoryTracker&) = delete;
  // Each rank this process holds, ascending.
  std::vector<RankPeak> ranks() const;
  // Starts the peaks again from the bytes held now.
  void reset_peaks();

 private:
  World world_;
};

class MemoryTracker {
 public:
  // Resets the peaks (reset_peak_memory_stats, reset_peak_resident) and
  // reads the resident set.
  explicit MemoryTracker(nn::Module& model, const optim::Optimizer* optimizer = nullptr);
  // Counts the activations the graph behind `loss` keeps for backward; call
  // it after forward, before backward (which frees them).
  void after_forward(const DTensor& loss);
  // The categories now (parameters, gradients, optimizer state: call it
  // after the step, before zero_grad), the activations of the last
  // after_forward, and the peaks since construction.
  MemoryReport report() const;

 private:
  nn::Module& model_;
  const optim::Optimizer* optimizer_;
  std::vector<std::pair<int, int64_t>> activations_;
  int64_t reserved_at_start_ = 0;
  int64_t resident_at_start_ = 0;
  bool resident_reset_ = false;
};

}  // namespace dtensor
