// In-place DTensor ops against their out-of-place forms and against the
// same local in-place op run by hand on every held shard: an SGD step
// (p += -lr * g under NoGradGuard) on small (8x8 per shard) and larger
// (256x256 per shard) parameters sharded over a simulated world of 4
// ranks, mul_ by a scalar, and add_ of a replicated tensor to a
// Partial(sum) (the operand made Partial on one rank per group).
// overhead_ns = DTensor time - hand-written local time, per call.
#include <benchmark/benchmark.h>

#include "bench_util.h"
#include "dtensor/dtensor.h"

namespace {

using namespace dtensor;
using dtensor::bench::ns_per_call;

struct Fixture {
  explicit Fixture(int64_t rows_per_rank, int64_t cols)
      : p(distribute_tensor(Tensor::randn({4 * rows_per_rank, cols}, 1), mesh, {Shard(0)})),
        g(distribute_tensor(Tensor::randn({4 * rows_per_rank, cols}, 2), mesh, {Shard(0)})),
        r(distribute_tensor(Tensor::randn({4 * rows_per_rank, cols}, 3), mesh, {Replicate()})),
        partial(from_local([&](int) { return Tensor::randn({4 * rows_per_rank, cols}, 4); }, mesh,
                           {Partial()})) {}
  World world = World::simulated(4);
  DeviceMesh mesh{world, {4}};
  DTensor p, g, r, partial;
};

template <class D, class L>
void run(benchmark::State& state, D&& dtensor_op, L&& local_op) {
  NoGradGuard no_grad;
  const double local_ns = ns_per_call(local_op);
  for (auto _ : state) dtensor_op();
  const double dtensor_ns = ns_per_call(dtensor_op);
  state.counters["local_ns"] = local_ns;
  state.counters["overhead_ns"] = dtensor_ns - local_ns;
}

void local_sgd(Fixture& f) {
  for (size_t i = 0; i < f.p.local().size(); ++i) {
    Tensor t = f.p.local().shards()[i].second;
    t.add_(mul(f.g.local().shards()[i].second, -0.01));
  }
}

void BM_SgdStepInPlace(benchmark::State& state) {
  Fixture f(state.range(0), state.range(0));
  run(state, [&] { f.p.add_(f.g, -0.01); }, [&] { local_sgd(f); });
}
BENCHMARK(BM_SgdStepInPlace)->Arg(8)->Arg(256);

void BM_SgdStepOutOfPlace(benchmark::State& state) {
  Fixture f(state.range(0), state.range(0));
  run(state, [&] { f.p = f.p - f.g * 0.01; }, [&] { local_sgd(f); });
}
BENCHMARK(BM_SgdStepOutOfPlace)->Arg(8)->Arg(256);

void BM_MulScalarInPlace(benchmark::State& state) {
  Fixture f(state.range(0), state.range(0));
  run(state, [&] { f.p.mul_(0.999); }, [&] {
    for (const auto& [rank, s] : f.p.local().shards()) {
      Tensor t = s;
      t.mul_(0.999);
    }
  });
}
BENCHMARK(BM_MulScalarInPlace)->Arg(8)->Arg(256);

void BM_PartialAddReplicated(benchmark::State& state) {
  Fixture f(state.range(0), state.range(0));
  run(state, [&] { f.partial.add_(f.r); }, [&] {
    // By hand: only the first rank adds.
    Tensor t = f.partial.local().shards()[0].second;
    t.add_(f.r.local().shards()[0].second);
  });
}
BENCHMARK(BM_PartialAddReplicated)->Arg(8)->Arg(256);

}  // namespace

BENCHMARK_MAIN();
