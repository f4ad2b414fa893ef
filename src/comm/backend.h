// Backend — the collectives, and the only place that knows whether ranks live
// in this process (sim) or in other processes (MPI: src/comm/mpi_backend.h).
//
// Every collective runs over the groups of one mesh dim (which may be a
// flattened dim covering several root dims): for each held rank r of the
// mesh, its group is mesh.group(r, mesh_dim) and its index in the group is
// i = mesh.group_index(r, mesh_dim); n is the group size. Input and output
// are LocalTensors holding one shard per held rank of the mesh. Shards may
// differ in size along the dims named (uneven and empty shards are normal);
// on every other dim they agree.
//
// Reductions give the same result on every rank of the group, combined in
// group order (((s0 op s1) op s2) ...) element by element, by both backends
// with one kernel (src/comm/reduce_kernel.h): a reduction gives the same
// bits in the simulated world and under MPI at any process count. Avg is
// the sum divided by n (floating dtypes only); max and min propagate NaN;
// integer sums wrap; bool sum is logical or. (Under MPI,
// DTENSOR_MPI_NATIVE_REDUCE=1 trades this for the MPI library's own
// reduction, whose order of terms is its own; see mpi_backend.h.)
//
// Each call records itself once with record_collective (debug.h).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dtensor/debug.h"
#include "dtensor/local_tensor.h"
#include "dtensor/mesh.h"
#include "dtensor/placement.h"

namespace dtensor {

// One piece of a box exchange: the box of `size` that starts at from_start
// in the shard of world rank `from` and lands at to_start in the output of
// world rank `to` (from == to: a local copy).
struct BoxMove {
  int from = 0;
  int to = 0;
  Shape size;
  Shape from_start;
  Shape to_start;
};

// What a box exchange does (src/redistribute/box_exchange.cc makes it from
// two layouts): the shape of every output, by world rank, and the pieces.
// Each output byte is the target of exactly one move.
struct BoxRoutes {
  std::vector<std::pair<int, Shape>> outputs;
  std::vector<BoxMove> moves;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Rank i gets cat(shard of group member 0, ..., member n-1) along gather_dim.
  virtual LocalTensor all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                 int64_t gather_dim) = 0;
  // Every rank gets the reduction of the group's shards (same shape required).
  virtual LocalTensor all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                 ReduceOp op) = 0;
  // The reduction of the group's shards (same shape), of which rank i keeps
  // chunk i of n along scatter_dim (Tensor::chunk: trailing chunks may be
  // short or empty).
  virtual LocalTensor reduce_scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                     ReduceOp op, int64_t scatter_dim) = 0;
  // Rank j splits its shard into n chunks along split_dim (Tensor::chunk) and
  // sends chunk i to member i; rank i gets the chunks it received, in group
  // order, concatenated along concat_dim. REQUIRES: split_dim != concat_dim.
  virtual LocalTensor all_to_all(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                 int64_t split_dim, int64_t concat_dim) = 0;
  // An all_to_allv of boxes: every rank of the mesh listed in routes.outputs
  // gets a fresh tensor of its shape, filled by the moves to it, each read
  // from its sender's shard. Ranks talk only to the peers they share a move
  // with. REQUIRES: the two ends of every move are in one group of mesh_dim;
  // the moves to a rank tile its output (checked by the planner, plan_check.cc).
  virtual LocalTensor exchange_boxes(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                     const BoxRoutes& routes) = 0;
  // Every rank gets the shard of group member `root`.
  virtual LocalTensor broadcast(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                int64_t root) = 0;
  // Member `root`'s shard is chunked n ways along scatter_dim (Tensor::chunk);
  // rank i gets chunk i. Other members' input shards are ignored (may be undefined).
  virtual LocalTensor scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                              int64_t root, int64_t scatter_dim) = 0;

  // A collective started now whose result wait() gives (once): the same as
  // the blocking call's, bit for bit. Dropped unwaited, it still completes
  // (the destructor waits). Started collectives keep the order of calls:
  // every rank starts and runs its collectives in one order, as for the
  // blocking ones.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual LocalTensor wait() = 0;
    // Lets the transfer advance without waiting for it (MPI_Test: an MPI
    // library without a progress thread moves data only inside its calls).
    virtual void progress() {}
  };
  // all_gather along dim 0 of 1-d shards of one length on every member
  // (fully_shard's flat buffers), started: the MPI world issues
  // MPI_Iallgather and returns at once, so the caller computes while the
  // data moves; this default (the simulated world) runs it to its end now.
  virtual std::unique_ptr<Pending> start_all_gather_flat(const LocalTensor& in,
                                                         const DeviceMesh& mesh, int mesh_dim) {
    const TraceStarted started;
    return std::make_unique<Done>(all_gather(in, mesh, mesh_dim, 0), last_traced(),
                                  sent(in, mesh, mesh_dim));
  }
  // reduce_scatter along dim 0 of 1-d shards whose length the group size
  // divides (fully_shard's flat gradients), started: the MPI world posts
  // the exchange (MPI_Ialltoall) and folds what arrived in member order at
  // wait(), the bits of the blocking call, so backward computes while the
  // gradients move; it holds a receive buffer the size of the input until
  // then. This default (the simulated world) runs it to its end now.
  virtual std::unique_ptr<Pending> start_reduce_scatter_flat(const LocalTensor& in,
                                                             const DeviceMesh& mesh, int mesh_dim,
                                                             ReduceOp op) {
    const TraceStarted started;
    return std::make_unique<Done>(reduce_scatter(in, mesh, mesh_dim, op, 0), last_traced(),
                                  sent(in, mesh, mesh_dim));
  }

 protected:
  // The event a started collective was traced as (StepEvent), or -1.
  static int64_t last_traced() {
    const CollectiveTrace* t = collective_trace();
    return t == nullptr ? -1 : static_cast<int64_t>(t->events().size()) - 1;
  }
  // What a started collective's sender keeps until it is waited for: its
  // input, as a transfer in flight reads it (MPI's send buffer; none for
  // a group of one, which copies at once). Kept by a Done, so that a
  // rank's memory (RankMemoryTracker) is the same as under MPI.
  static LocalTensor sent(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim) {
    return mesh.size(mesh_dim) > 1 ? in : LocalTensor{};
  }
  class Done final : public Pending {
   public:
    Done(LocalTensor result, int64_t event, LocalTensor sent = {})
        : result_(std::move(result)), sent_(std::move(sent)), event_(event) {}
    LocalTensor wait() override {
      trace_wait(event_);
      sent_ = LocalTensor{};
      return std::move(result_);
    }

   private:
    LocalTensor result_;
    LocalTensor sent_;
    int64_t event_;
  };
};

}  // namespace dtensor
