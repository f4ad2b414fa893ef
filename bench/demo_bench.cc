// The model of `dtensor demo` (dtensor/models/gpt.h): one forward pass, and
// one training step (forward, loss, backward), of the GPT laid out by
// gpt_tensor_parallel_plan (sequence and loss parallel) on a 2x4 (dp, tp)
// mesh of 8 simulated ranks, against the same model on a 1-rank mesh (the
// reference the demo verifies against). In the simulated world one process
// computes every rank's shards, so the two do the same arithmetic (plus the
// replicated work tensor parallelism adds) and the ratio is what sharding
// propagation, the hooks and the simulated collectives cost on top of the
// same dispatch on one rank.
//
// Sizes: the demo's default (batch 4, seq 16, hidden 64: small shards, so
// per-op overhead dominates) and a larger one (batch 8, seq 128, hidden 512:
// compute dominates).
#include <benchmark/benchmark.h>

#include "dtensor/models/gpt.h"

namespace {

using namespace dtensor;

models::GPTConfig config_of(const benchmark::State& state) {
  models::GPTConfig c;
  if (state.range(0) == 1) {
    c.batch = 8;
    c.seq = 128;
    c.hidden = 512;
    c.heads = 8;
    c.vocab = 4096;
  }
  return c;
}

// The model on `mesh` (2x4: parallelized; 1 rank: the reference), its
// inputs batch-sharded over dp.
Placements input_placements(const DeviceMesh& mesh) {
  Placements in(static_cast<size_t>(mesh.ndim()), Replicate());
  if (mesh.ndim() == 2) in[0] = Shard(0);
  return in;
}

struct Setup {
  models::GPT model;
  DTensor ids, targets;
  Setup(const DeviceMesh& mesh, const models::GPTConfig& c)
      : model(mesh, c, 1234),
        ids(distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 7), mesh,
                              input_placements(mesh))),
        targets(distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 8), mesh,
                                  input_placements(mesh))) {
    if (mesh.ndim() == 2) parallelize_module(model, 1, models::gpt_tensor_parallel_plan(true));
  }
};

void forward(benchmark::State& state, const Shape& mesh_shape) {
  World world = World::simulated(static_cast<int>(mesh_shape.product()));
  DeviceMesh mesh(world, mesh_shape);
  Setup s(mesh, config_of(state));
  NoGradGuard inference;  // the demo's forward pass records no graph
  for (auto _ : state) benchmark::DoNotOptimize(models::gpt_loss(s.model(s.ids), s.targets));
}

void train_step(benchmark::State& state, const Shape& mesh_shape) {
  World world = World::simulated(static_cast<int>(mesh_shape.product()));
  DeviceMesh mesh(world, mesh_shape);
  Setup s(mesh, config_of(state));
  for (auto _ : state) {
    models::gpt_loss(s.model(s.ids), s.targets).backward();
    for (auto& [name, p] : s.model.named_parameters()) p->zero_grad();
  }
}

void BM_DemoForward_DTensor(benchmark::State& state) { forward(state, {2, 4}); }
void BM_DemoForward_OneRank(benchmark::State& state) { forward(state, {1}); }
void BM_GPTTrainStep_DTensor(benchmark::State& state) { train_step(state, {2, 4}); }
void BM_GPTTrainStep_OneRank(benchmark::State& state) { train_step(state, {1}); }
BENCHMARK(BM_DemoForward_DTensor)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DemoForward_OneRank)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GPTTrainStep_DTensor)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GPTTrainStep_OneRank)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
