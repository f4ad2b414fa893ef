// The memory allocator under Storage: what a fresh result costs.
//
// BM_Add8x8: a plain add of two 8x8 float32 tensors, where allocating the
// result is a large part of the work. Its instruction count is measured
// under callgrind (docs/PERFORMANCE.md, "Memory allocator"):
//   valgrind --tool=callgrind --toggle-collect='*add_8x8_once*'
//            build/bin/allocator_bench --add8x8_calls=100000
// and the Ir of the collected part divided by the calls.
//
// BM_S0ToR/<bytes>: a float32 tensor of <bytes> sharded S(0) over a 1-d mesh
// of a simulated world of 4 ranks, redistributed to R: every rank ends with
// its own <bytes> result, so the output is 4 x <bytes>. Beside it, the
// counter vs_memcpy is the time per redistribute over that of memcpy of the
// same 4 x <bytes> into preallocated buffers, measured in the same run (in a
// simulated world a collective is pure data movement: memcpy is its limit),
// and faults is the minor page faults per redistribute.
// The _after1GiB variant first empties the cache, then allocates and frees
// 1 GiB of tensors of other sizes (1 to 17 MiB, none the size of a result),
// which filled the old exact-size cache (1 GiB, never evicting) so that every
// later large result page-faulted.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "dtensor/dtensor.h"

#if __has_include("tensor/allocator.h")
#include "tensor/allocator.h"
#define DTENSOR_HAVE_ALLOCATOR 1
#endif

namespace {

using namespace dtensor;

constexpr int kRanks = 4;

// Kept out of line so that callgrind can collect exactly one add per call.
[[gnu::noinline]] void add_8x8_once(const Tensor& a, const Tensor& b) {
  Tensor c = add(a, b);
  benchmark::DoNotOptimize(c.raw_data());
}

void BM_Add8x8(benchmark::State& state) {
  const Tensor a = Tensor::randn({8, 8}, 1);
  const Tensor b = Tensor::randn({8, 8}, 2);
  for (auto _ : state) add_8x8_once(a, b);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Add8x8);

// Allocates tensors of sizes that no result below has (1 MiB plus an odd
// number of 64 KiB steps, up to 17 MiB) until 1 GiB is live, then frees them
// all: the freed blocks go to the cache, as a program's other tensors would.
void allocate_1gib_of_other_sizes() {
  release_cached_memory();  // as in a program whose first gigabyte held other sizes
  std::vector<Tensor> live;
  int64_t total = 0;
  for (int64_t i = 0; total < (int64_t{1} << 30); ++i) {
    const int64_t bytes = (int64_t{1} << 20) + (2 * (i % 128) + 1) * (int64_t{64} << 10);
    live.push_back(Tensor::empty({bytes / 4}));  // never touched: costs no page faults
    total += bytes;
  }
}

// ns per memcpy of `bytes` into each of kRanks preallocated buffers.
double memcpy_out_ns(int64_t bytes) {
  std::vector<char> src(static_cast<size_t>(bytes), 1);
  std::vector<std::vector<char>> dst(kRanks, std::vector<char>(static_cast<size_t>(bytes), 0));
  const int calls = static_cast<int>(std::max<int64_t>(20, (int64_t{4} << 30) / (kRanks * bytes) / 8));
  return bench::ns_per_call(
      [&] {
        for (auto& d : dst) std::memcpy(d.data(), src.data(), static_cast<size_t>(bytes));
        benchmark::ClobberMemory();
      },
      calls);
}

// Minor page faults of the process so far.
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

void run_s0_to_r(benchmark::State& state, bool polluted) {
  const int64_t bytes = state.range(0);
  if (polluted) allocate_1gib_of_other_sizes();
  World world = World::simulated(kRanks);
  DeviceMesh mesh(world, Shape{kRanks});
  const int64_t cols = 256;
  const DTensor d =
      distribute_tensor(Tensor::randn({bytes / 4 / cols, cols}, 3), mesh, {Shard(0)});
  const double memcpy_before_ns = memcpy_out_ns(bytes);
  // Once untimed: the first call plans the redistribution and pays for
  // whatever a program pays only once.
  benchmark::DoNotOptimize(d.redistribute({Replicate()}).to_local(0).raw_data());
  const long faults0 = minor_faults();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    DTensor r = d.redistribute({Replicate()});
    benchmark::DoNotOptimize(r.to_local(kRanks - 1).raw_data());
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double iterations = static_cast<double>(state.iterations());
  const double faults = static_cast<double>(minor_faults() - faults0) / iterations;
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations;
  // The machine may be shared: the faster of two memcpy runs, one on each
  // side of the loop, is the less disturbed yardstick.
  const double memcpy_ns = std::min(memcpy_before_ns, memcpy_out_ns(bytes));
  state.counters["memcpy_us"] = memcpy_ns / 1e3;
  state.counters["vs_memcpy"] = ns / memcpy_ns;
  // Page faults do not depend on the load: a result in a reused block
  // faults nothing, a fresh one faults every 4 KiB page.
  state.counters["faults"] = faults;
#if DTENSOR_HAVE_ALLOCATOR
  const detail::AllocatorStats stats = detail::allocator_stats();
  state.counters["cached_MiB"] = static_cast<double>(stats.bytes_cached) / (1 << 20);
#endif
  state.SetBytesProcessed(state.iterations() * kRanks * bytes);
}

void BM_S0ToR(benchmark::State& state) { run_s0_to_r(state, false); }
void BM_S0ToR_after1GiB(benchmark::State& state) { run_s0_to_r(state, true); }
BENCHMARK(BM_S0ToR)->Arg(64 << 10)->Arg(64 << 20)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_S0ToR_after1GiB)
    ->Arg(64 << 10)
    ->Arg(64 << 20)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // --add8x8_calls=N: only N adds, for callgrind (see the top).
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--add8x8_calls=", 0) != 0) continue;
    const long calls = std::atol(arg.c_str() + 15);
    const Tensor a = Tensor::randn({8, 8}, 1);
    const Tensor b = Tensor::randn({8, 8}, 2);
    for (int w = 0; w < 100; ++w) benchmark::DoNotOptimize(add(a, b).raw_data());  // warm
    for (long c = 0; c < calls; ++c) add_8x8_once(a, b);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
