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
//
// BM_*_Paired: both models in one run, a step of each in turn, and the
// median of the per-iteration ratios (bench::paired, bench_util.h).
//
// The loss alone (BM_VocabLoss_*): vocab_parallel_cross_entropy on the
// demo's logits shape, laid out as the demo's head gives them (batch on dp,
// classes on tp), against the composed version it replaced, kept here as
// the reference (about a dozen DTensor ops: amax, sub, exp, sum, log, eq
// against an arange, where, stack, ...).
#include <benchmark/benchmark.h>

#include <ratio>

#include "bench_util.h"
#include "dtensor/models/gpt.h"
#include "dtensor/parallel.h"

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
  auto step = [&] { return models::gpt_loss(s.model(s.ids), s.targets); };
  benchmark::DoNotOptimize(step());  // warm-up, see train_step
  for (auto _ : state) benchmark::DoNotOptimize(step());
}

void train_step(benchmark::State& state, const Shape& mesh_shape) {
  World world = World::simulated(static_cast<int>(mesh_shape.product()));
  DeviceMesh mesh(world, mesh_shape);
  Setup s(mesh, config_of(state));
  auto step = [&] {
    models::gpt_loss(s.model(s.ids), s.targets).backward();
    for (auto& [name, p] : s.model.named_parameters()) p->zero_grad();
  };
  // One step before timing: the first fills the propagation and plan caches
  // and faults in the allocator's blocks (at hidden 512 the 2x4 model's
  // first step took 2.3-2.6 s of CPU against 0.8 s for the next ones, and a
  // run whose estimate took one iteration reported that step alone).
  step();
  for (auto _ : state) step();
}

// The composed vocab-parallel cross entropy the library had before the
// fused one (same contract, three all_reduces on tp plus the mean's).
DTensor composed_vocab_parallel_cross_entropy(const DTensor& logits, const DTensor& target, int tp,
                                              int64_t ignore_index = -100) {
  const int64_t c = logits.dim() - 1;
  const int64_t classes = logits.shape()[c];
  const DTensor tgt = with_placement(target, tp, Replicate());
  tgt.local().for_each([&](int, const Tensor& t) {
    for (int64_t v : t.contiguous().to_vector<int64_t>())
      DT_CHECK(v == ignore_index || (v >= 0 && v < classes), "composed: target ", v);
  });
  const DTensor z_in = with_placement(logits, tp, Shard(c));
  const DTensor max = with_placement(amax(z_in.detach(), {c}, /*keepdim=*/true), tp, Replicate());
  const DTensor z = z_in - max;
  const DTensor log_sum = log(with_placement(sum(exp(z), {c}, /*keepdim=*/true), tp, Replicate()));
  Placements class_layout(static_cast<size_t>(logits.mesh().ndim()), Replicate());
  class_layout[static_cast<size_t>(tp)] = Shard(0);
  const DTensor class_ids = distribute_tensor(Tensor::arange(classes), logits.mesh(), class_layout);
  const DTensor hit = eq(class_ids, unsqueeze(tgt, -1));
  const DTensor picked = with_placement(sum(where(hit, z, 0.0), {c}, true), tp, Replicate());
  const DTensor counts = ne(tgt, ignore_index);
  const DTensor losses = squeeze(log_sum - picked, c);
  const DTensor parts = stack({where(counts, losses, 0.0), where(counts, ones_like(losses), 0.0)});
  DimVector token_dims;
  for (int64_t d = 1; d < parts.dim(); ++d) token_dims.push_back(d);
  const DTensor totals =
      (token_dims.empty() ? parts : sum(parts, token_dims))
          .redistribute(Placements(static_cast<size_t>(logits.mesh().ndim()), Replicate()));
  return div(select(totals, 0, 0), select(totals, 0, 1));
}

// The demo's logits (batch, seq, vocab) on the 2x4 mesh: S(0) on dp, S(-1)
// on tp; the targets S(0) on dp. `backward`: forward and backward (a
// training step's share), else forward under NoGradGuard (the demo's).
void vocab_loss(benchmark::State& state, bool fused, bool backward) {
  const models::GPTConfig c = config_of(state);
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 4});
  DTensor logits = distribute_tensor(Tensor::randn({c.batch, c.seq, c.vocab}, 3), mesh,
                                     {Shard(0), Shard(2)});
  const DTensor targets = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 4), mesh,
                                            {Shard(0), Replicate()});
  auto loss = [&] {
    return fused ? vocab_parallel_cross_entropy(logits, targets, 1)
                 : composed_vocab_parallel_cross_entropy(logits, targets, 1);
  };
  if (backward) {
    logits.requires_grad_();
    for (auto _ : state) {
      loss().backward();
      logits.zero_grad();
    }
  } else {
    NoGradGuard inference;
    for (auto _ : state) benchmark::DoNotOptimize(loss());
  }
}

void BM_VocabLoss_Composed(benchmark::State& state) { vocab_loss(state, false, false); }
void BM_VocabLoss_Fused(benchmark::State& state) { vocab_loss(state, true, false); }
void BM_VocabLossBackward_Composed(benchmark::State& state) { vocab_loss(state, false, true); }
void BM_VocabLossBackward_Fused(benchmark::State& state) { vocab_loss(state, true, true); }
BENCHMARK(BM_VocabLoss_Composed)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_VocabLoss_Fused)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_VocabLossBackward_Composed)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_VocabLossBackward_Fused)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_DemoForward_DTensor(benchmark::State& state) { forward(state, {2, 4}); }
void BM_DemoForward_OneRank(benchmark::State& state) { forward(state, {1}); }
void BM_GPTTrainStep_DTensor(benchmark::State& state) { train_step(state, {2, 4}); }
void BM_GPTTrainStep_OneRank(benchmark::State& state) { train_step(state, {1}); }
// 2x4 and 1 rank alternately in one run (bench::paired).
void BM_DemoForward_Paired(benchmark::State& state) {
  World w8 = World::simulated(8), w1 = World::simulated(1);
  DeviceMesh m8(w8, {2, 4}), m1(w1, {1});
  Setup s8(m8, config_of(state)), s1(m1, config_of(state));
  NoGradGuard inference;
  auto step8 = [&] { benchmark::DoNotOptimize(models::gpt_loss(s8.model(s8.ids), s8.targets)); };
  auto step1 = [&] { benchmark::DoNotOptimize(models::gpt_loss(s1.model(s1.ids), s1.targets)); };
  step8();
  step1();
  bench::paired<std::milli>(state, step8, "sharded_ms", step1, "one_rank_ms");
}
void BM_GPTTrainStep_Paired(benchmark::State& state) {
  World w8 = World::simulated(8), w1 = World::simulated(1);
  DeviceMesh m8(w8, {2, 4}), m1(w1, {1});
  Setup s8(m8, config_of(state)), s1(m1, config_of(state));
  auto step_of = [](Setup& s) {
    models::gpt_loss(s.model(s.ids), s.targets).backward();
    for (auto& [name, p] : s.model.named_parameters()) p->zero_grad();
  };
  auto step8 = [&] { step_of(s8); };
  auto step1 = [&] { step_of(s1); };
  step8();
  step1();
  bench::paired<std::milli>(state, step8, "sharded_ms", step1, "one_rank_ms");
}

BENCHMARK(BM_DemoForward_DTensor)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DemoForward_OneRank)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GPTTrainStep_DTensor)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GPTTrainStep_OneRank)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DemoForward_Paired)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GPTTrainStep_Paired)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
