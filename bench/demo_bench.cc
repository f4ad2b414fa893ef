// The model of `dtensor demo` (tools/demo_model.h): one forward pass of the
// tensor-parallel transformer on a 2x4 (dp, tp) mesh of 8 simulated ranks,
// against the same model on full tensors in one process (the reference the
// demo verifies against). In the simulated world one process computes every
// rank's shards, so the two do the same arithmetic (plus the replicated
// work tensor parallelism adds) and the ratio is what dispatch, sharding
// propagation and the simulated collectives cost on top.
//
// Sizes: the demo's default (batch 4, seq 16, hidden 64: small shards, so
// per-op overhead dominates) and a larger one (batch 8, seq 128, hidden 512:
// compute dominates).
#include <benchmark/benchmark.h>

#include "demo_model.h"

namespace {

using namespace dtensor;
using dtensor::cli::ModelConfig;

ModelConfig config_of(const benchmark::State& state) {
  ModelConfig c;
  if (state.range(0) == 1) {
    c.batch = 8;
    c.seq = 128;
    c.hidden = 512;
    c.heads = 8;
    c.vocab = 4096;
  }
  return c;
}

void BM_DemoForward_DTensor(benchmark::State& state) {
  const ModelConfig c = config_of(state);
  const auto w = cli::make_weights(c, 1234);
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 4}, {"dp", "tp"});
  const cli::ParallelTransformer model(c, w, mesh, 0, 1);
  const DTensor ids = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 7), mesh,
                                        model.input_placements());
  const DTensor targets = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 8),
                                            mesh, model.input_placements());
  NoGradGuard inference;  // the demo's forward pass records no graph
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(ids, targets));
}
BENCHMARK(BM_DemoForward_DTensor)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_DemoForward_Reference(benchmark::State& state) {
  const ModelConfig c = config_of(state);
  const auto w = cli::make_weights(c, 1234);
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 7);
  const Tensor targets = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 8);
  for (auto _ : state) benchmark::DoNotOptimize(cli::reference_forward(c, w, ids, targets));
}
BENCHMARK(BM_DemoForward_Reference)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
