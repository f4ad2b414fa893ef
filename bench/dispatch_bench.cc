// Dispatch overhead of DTensor ops on a cache hit: the DTensor op against
// the same local op run by hand on every held shard, on tiny tensors (8x8
// per shard) in a simulated world of 4 ranks. overhead_ns = DTensor time -
// local time, per op (the counter is set on the DTensor benchmark from a
// local run measured in the same process just before).
#include <benchmark/benchmark.h>

#include <chrono>

#include "dtensor/dtensor.h"

namespace {

using namespace dtensor;

struct Fixture {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {4}};
  DTensor a = distribute_tensor(Tensor::randn({32, 8}, 1), mesh, {Shard(0)});
  DTensor b = distribute_tensor(Tensor::randn({32, 8}, 2), mesh, {Shard(0)});
  DTensor w = distribute_tensor(Tensor::randn({8, 8}, 3), mesh, {Replicate()});
};

// ns per call of f, measured over a fixed number of calls.
template <class F>
double ns_per_call(F&& f, int calls = 20000) {
  for (int i = 0; i < calls / 10; ++i) f();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / calls;
}

template <class D, class L>
void run(benchmark::State& state, D&& dtensor_op, L&& local_op) {
  const double local_ns = ns_per_call(local_op);
  for (auto _ : state) benchmark::DoNotOptimize(dtensor_op());
  const double dtensor_ns = ns_per_call(dtensor_op);
  state.counters["local_ns"] = local_ns;
  state.counters["overhead_ns"] = dtensor_ns - local_ns;
}

void BM_Add(benchmark::State& state) {
  Fixture f;
  run(state, [&] { return f.a + f.b; },
      [&] { return f.a.local().zip(f.b.local(), [](int, auto& x, auto& y) { return x + y; }); });
}
BENCHMARK(BM_Add);

void BM_Mul(benchmark::State& state) {
  Fixture f;
  run(state, [&] { return f.a * f.b; },
      [&] { return f.a.local().zip(f.b.local(), [](int, auto& x, auto& y) { return x * y; }); });
}
BENCHMARK(BM_Mul);

void BM_Mm(benchmark::State& state) {
  Fixture f;
  run(state, [&] { return mm(f.a, f.w); },
      [&] { return f.a.local().zip(f.w.local(), [](int, auto& x, auto& y) { return mm(x, y); }); });
}
BENCHMARK(BM_Mm);

void BM_Sum(benchmark::State& state) {
  Fixture f;
  run(state, [&] { return sum(f.a, {1}); },
      [&] { return f.a.local().map([](int, auto& x) { return sum(x, {1}); }); });
}
BENCHMARK(BM_Sum);

// Cold propagation: mm on a 2x2x2 mesh, the cache cleared before each call.
void BM_MmColdPropagation(benchmark::State& state) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2});
  DTensor a = distribute_tensor(Tensor::randn({16, 16}, 1), mesh, {Shard(0), Replicate(), Shard(1)});
  DTensor b = distribute_tensor(Tensor::randn({16, 16}, 2), mesh, {Replicate(), Shard(1), Shard(0)});
  for (auto _ : state) {
    state.PauseTiming();
    clear_sharding_prop_cache();
    state.ResumeTiming();
    benchmark::DoNotOptimize(mm(a, b));
  }
}
BENCHMARK(BM_MmColdPropagation)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
