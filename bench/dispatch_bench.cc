// Dispatch overhead of DTensor ops on a cache hit: the DTensor op against
// the same local op run by hand on every held shard, on tiny tensors (8x8
// per shard) in a simulated world of 4 ranks. overhead_ns = DTensor time -
// local time, per op (the counter is set on the DTensor benchmark from a
// local run measured in the same process just before).
//
// Also: cold propagation of addmm on a 2x2x2 mesh (the sharding cache
// cleared before each call; propagate_us = cold - warm call), and a
// 2-layer MLP forward with column/row-parallel weights on a 2x4 mesh
// against the same computation written by hand on the local shards with
// an explicit all_reduce (ratio = DTensor time / hand-written time).
#include <benchmark/benchmark.h>


#include "bench_util.h"
#include "comm/backend.h"
#include "dtensor/dtensor.h"

namespace {

using namespace dtensor;

struct Fixture {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {4}};
  DTensor a = distribute_tensor(Tensor::randn({32, 8}, 1), mesh, {Shard(0)});
  DTensor b = distribute_tensor(Tensor::randn({32, 8}, 2), mesh, {Shard(0)});
  DTensor w = distribute_tensor(Tensor::randn({8, 8}, 3), mesh, {Replicate()});
  DTensor bias = distribute_tensor(Tensor::randn({8}, 4), mesh, {Replicate()});
};

using dtensor::bench::ns_per_call;

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

void BM_Addmm(benchmark::State& state) {
  Fixture f;
  run(state, [&] { return addmm(f.bias, f.a, f.w); }, [&] {
    return f.a.local().zip(f.w.local(), [&](int r, auto& x, auto& y) {
      return addmm(f.bias.to_local(r), x, y);
    });
  });
}
BENCHMARK(BM_Addmm);

void BM_View(benchmark::State& state) {
  Fixture f;
  run(state, [&] { return view(f.a, {32, 2, 4}); },
      [&] { return f.a.local().map([](int, auto& x) { return x.view({8, 2, 4}); }); });
}
BENCHMARK(BM_View);

// Cold propagation: addmm on a 2x2x2 mesh, the sharding cache cleared
// before each call (plans stay cached, as they would in a real program).
void BM_AddmmColdPropagation(benchmark::State& state) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2});
  DTensor bias = distribute_tensor(Tensor::randn({16}, 0), mesh, {Replicate(), Replicate(), Replicate()});
  DTensor a = distribute_tensor(Tensor::randn({16, 16}, 1), mesh, {Shard(0), Replicate(), Shard(1)});
  DTensor b = distribute_tensor(Tensor::randn({16, 16}, 2), mesh, {Replicate(), Shard(1), Shard(0)});
  const double warm_ns = ns_per_call([&] { return addmm(bias, a, b); }, 2000);
  for (auto _ : state) {
    state.PauseTiming();
    clear_sharding_prop_cache();
    state.ResumeTiming();
    benchmark::DoNotOptimize(addmm(bias, a, b));
  }
  const double cold_ns = ns_per_call([&] {
    clear_sharding_prop_cache();
    return addmm(bias, a, b);
  }, 2000);
  state.counters["warm_us"] = warm_ns / 1e3;
  state.counters["propagate_us"] = (cold_ns - warm_ns) / 1e3;
}
BENCHMARK(BM_AddmmColdPropagation)->Unit(benchmark::kMicrosecond);

// y = relu(x W1^T + b1) W2^T + b2 on a (dp=2, tp=4) mesh: x batch-sharded
// over dp, W1/b1 column-parallel and W2 row-parallel over tp; the output is
// all-reduced over tp.
struct Mlp {
  World world = World::simulated(8);
  DeviceMesh mesh{world, {2, 4}, {"dp", "tp"}};
  int64_t batch, d_model, hidden;
  DTensor x, w1, b1, w2, b2;
  Mlp(int64_t batch_, int64_t d_model_, int64_t hidden_)
      : batch(batch_), d_model(d_model_), hidden(hidden_),
        x(distribute_tensor(Tensor::randn({batch, d_model}, 1), mesh, {Shard(0), Replicate()})),
        w1(distribute_tensor(Tensor::randn({hidden, d_model}, 2), mesh, {Replicate(), Shard(0)})),
        b1(distribute_tensor(Tensor::randn({hidden}, 3), mesh, {Replicate(), Shard(0)})),
        w2(distribute_tensor(Tensor::randn({d_model, hidden}, 4), mesh, {Replicate(), Shard(1)})),
        b2(distribute_tensor(Tensor::randn({d_model}, 5), mesh, {Replicate(), Replicate()})) {}

  DTensor forward() const {
    DTensor y = linear(relu(linear(x, w1, b1)), w2, b2);
    return y.redistribute({Shard(0), Replicate()});
  }

  // The same by hand: local linears, b2 added on tp rank 0, an all_reduce over tp.
  LocalTensor by_hand() const {
    LocalTensor partial = x.local().map([&](int r, const Tensor& xs) {
      const Tensor h = relu(linear(xs, w1.to_local(r), b1.to_local(r)));
      if (mesh.group_index(r, 1) == 0) return linear(h, w2.to_local(r), b2.to_local(r));
      return linear(h, w2.to_local(r));
    });
    return world.backend().all_reduce(partial, mesh, 1, ReduceOp::Sum);
  }
};

void BM_MlpDTensor(benchmark::State& state) {
  Mlp m(state.range(0), state.range(1), state.range(2));
  const double hand_ns = ns_per_call([&] { return m.by_hand(); }, 50);
  for (auto _ : state) benchmark::DoNotOptimize(m.forward());
  const double dtensor_ns = ns_per_call([&] { return m.forward(); }, 50);
  state.counters["hand_us"] = hand_ns / 1e3;
  state.counters["dtensor_us"] = dtensor_ns / 1e3;
  state.counters["ratio"] = dtensor_ns / hand_ns;
}
BENCHMARK(BM_MlpDTensor)->Args({64, 256, 1024})->Args({8, 64, 256})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
