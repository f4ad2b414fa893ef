// Redistribution over MPI against the raw MPI call on the same buffers.
// Run it under MPI: `mpirun -np 4 build/bin/mpi_bench` (make bench does).
//
// BM_<move>/<KiB per rank>: a float32 DTensor of 1024 columns on a 1-d mesh
// of the 4 processes, `KiB per rank` of it in each process's input shard
// (16 KiB, 1 MiB, 64 MiB; the small size shows the per-call overhead),
// redistributed S(0)->R (MPI_Allgather), P->R (MPI_Allreduce), P->S(0)
// (MPI_Reduce_scatter_block) and S(0)->S(1) (MPI_Alltoall). The raw call
// runs on the shard's own buffer into a preallocated output; the DTensor
// path also plans (cached), allocates its output, exchanges the shard
// lengths where shards may be uneven (all_gather, all_to_all), and for
// S(0)->S(1) moves strided column blocks (subarray datatypes) where the raw
// call moves contiguous rows. P->R and P->S(0) are dtensor's deterministic
// reductions (an exchange of the pieces and a fold in member order, bit
// for bit the simulated world's) against the MPI library's native ones;
// with DTENSOR_MPI_NATIVE_REDUCE=1 in the environment dtensor makes the
// native calls too, which measures its own overhead alone. Counters: raw_us
// and dtensor_us per call, ratio = dtensor / raw, overhead_us = dtensor - raw.
//
// BM_PP_to_RR_2x2: (P, P) -> (R, R) on a 2x2 mesh: one all_reduce over the
// flattened group of both mesh dims (merged) against one per mesh dim.
//
// Every process runs the same fixed number of iterations (a collective
// needs all of them); only rank 0 reports.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "bench_util.h"
#include "dtensor/dtensor.h"

namespace {

using namespace dtensor;

constexpr int64_t kCols = 1024;

World& world() {
  static World w = World::mpi();
  return w;
}

// Microseconds per call of f over `calls` calls, all processes starting
// together (rank 0's clock).
template <class F>
double us_per_call(F&& f, int calls) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
}

// The best of kRounds alternating measurements of a and b (after one warm
// call each: plans, communicators, allocations): with more processes than
// cores the spread between runs is large, and the minimum is the figure
// least disturbed by the other processes.
constexpr int kRounds = 5;
template <class A, class B>
std::pair<double, double> best_of(A&& a, B&& b, int calls) {
  a();
  b();
  double best_a = 1e300, best_b = 1e300;
  for (int r = 0; r < kRounds; ++r) {
    best_a = std::min(best_a, us_per_call(a, calls));
    best_b = std::min(best_b, us_per_call(b, calls));
  }
  return {best_a, best_b};
}

int calls_for(int64_t kib) { return kib >= 64 * 1024 ? 5 : kib >= 1024 ? 50 : 1000; }

void report(benchmark::State& state, double raw_us, double dtensor_us) {
  state.counters["raw_us"] = raw_us;
  state.counters["dtensor_us"] = dtensor_us;
  state.counters["ratio"] = dtensor_us / raw_us;
  state.counters["overhead_us"] = dtensor_us - raw_us;
}

enum class Move { ShardToReplicate, PartialToReplicate, PartialToShard, ShardToShard };

void BM_Redistribute(benchmark::State& state, Move move) {
  const int64_t kib = state.range(0);
  const int n = world().size();
  DeviceMesh mesh(world(), {n});
  const int64_t rows = kib * 1024 / 4 / kCols;  // per rank
  const bool partial = move == Move::PartialToReplicate || move == Move::PartialToShard;
  const Shape global{partial ? rows : rows * n, kCols};
  const Tensor local = Tensor::rand({rows, kCols}, 7 + world().rank());
  LocalTensor shards;
  shards.set(world().rank(), local);
  const Placements from = {partial ? Partial() : Shard(0)};
  const DTensor d(DTensorSpec(mesh, from, global), shards);
  Placements to;
  switch (move) {
    case Move::ShardToReplicate:
    case Move::PartialToReplicate: to = {Replicate()}; break;
    case Move::PartialToShard: to = {Shard(0)}; break;
    case Move::ShardToShard: to = {Shard(1)}; break;
  }
  const int count = static_cast<int>(local.numel());
  Tensor out = Tensor::empty({move == Move::ShardToReplicate ? rows * n
                              : move == Move::PartialToShard ? rows / n : rows,
                              kCols});
  auto raw = [&] {
    float* src = local.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    switch (move) {
      case Move::ShardToReplicate:
        MPI_Allgather(src, count, MPI_FLOAT, dst, count, MPI_FLOAT, MPI_COMM_WORLD);
        break;
      case Move::PartialToReplicate:
        MPI_Allreduce(src, dst, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Move::PartialToShard:
        MPI_Reduce_scatter_block(src, dst, count / n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Move::ShardToShard:
        MPI_Alltoall(src, count / n, MPI_FLOAT, dst, count / n, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    }
  };
  auto dist = [&] { return d.redistribute(to); };
  const int calls = calls_for(kib);
  for (auto _ : state) benchmark::DoNotOptimize(dist());
  const auto [raw_us, dtensor_us] = best_of(raw, dist, calls);
  report(state, raw_us, dtensor_us);
}

// Counters: merged_us and unmerged_us per call, ratio = merged / unmerged.
void BM_AllReduce2x2(benchmark::State& state) {
  DeviceMesh mesh(world(), {2, 2});
  const int64_t kib = state.range(0);
  const int64_t rows = kib * 1024 / 4 / kCols;
  LocalTensor shards;
  shards.set(world().rank(), Tensor::rand({rows, kCols}, 3 + world().rank()));
  const DTensor d(DTensorSpec(mesh, {Partial(), Partial()}, Shape{rows, kCols}), shards);
  RedistributeOptions merged, unmerged;  // the planner's choice: one merged all_reduce
  unmerged.merge = false;
  auto run_merged = [&] { return d.redistribute({Replicate(), Replicate()}, merged); };
  auto run_unmerged = [&] { return d.redistribute({Replicate(), Replicate()}, unmerged); };
  for (auto _ : state) benchmark::DoNotOptimize(run_merged());
  const auto [m, u] = best_of(run_merged, run_unmerged, calls_for(kib));
  state.counters["merged_us"] = m;
  state.counters["unmerged_us"] = u;
  state.counters["ratio"] = m / u;
}

const int64_t kSizesKiB[] = {16, 1024, 64 * 1024};

void register_all() {
  const std::pair<const char*, Move> moves[] = {
      {"BM_S0_to_R", Move::ShardToReplicate},
      {"BM_P_to_R", Move::PartialToReplicate},
      {"BM_P_to_S0", Move::PartialToShard},
      {"BM_S0_to_S1", Move::ShardToShard}};
  for (const auto& [name, move] : moves)
    for (int64_t kib : kSizesKiB)
      benchmark::RegisterBenchmark(name, BM_Redistribute, move)
          ->Arg(kib)->Iterations(calls_for(kib))->Unit(benchmark::kMicrosecond);
  for (int64_t kib : kSizesKiB)
    benchmark::RegisterBenchmark("BM_PP_to_RR_2x2", BM_AllReduce2x2)
        ->Arg(kib)->Iterations(calls_for(kib))->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  World w = World::mpi(&argc, &argv);
  world() = w;
  if (w.size() != 4 && w.rank() == 0)
    std::fprintf(stderr, "mpi_bench: meant for 4 processes (mpirun -np 4), running on %d\n",
                 w.size());
  benchmark::Initialize(&argc, argv);
  register_all();
  dtensor::bench::run_benchmarks(w.rank() == 0);
  benchmark::Shutdown();
  return 0;
}
