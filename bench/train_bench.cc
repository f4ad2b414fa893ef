// One training step (zero_grad, forward, loss, backward, clip_grad_norm_,
// AdamW step) of the GPT of `dtensor train` (models/gpt.h, its default
// size: batch 8, seq 32, hidden 64, 4 heads, 2 blocks, vocabulary 35) in
// each parallelism scheme, against the same step on one rank. In the
// simulated world one process computes every rank's shards, so the ratio
// is what sharding propagation, the hooks, FSDP's flat buffers and the
// simulated collectives cost on top of the same arithmetic.
//
// Counters: collectives and bytes per rank handed to them in one step
// (CommDebugMode), and for the data-parallel schemes the analytic minimum
// of those bytes: DDP all-reduces every gradient once (4 P bytes for P
// float parameters); FSDP all-gathers every parameter's shard forward and,
// for the blocks it frees, backward (4 P / n each) and reduce-scatters
// every gradient once (4 P in).
#include <benchmark/benchmark.h>

#include <memory>

#include "dtensor/debug.h"
#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"
#include "tensor/allocator.h"

namespace {

using namespace dtensor;

enum Scheme { kOneRank, kFsdpTp, kDdpTp, kFsdp, kDdp, kTp };

struct Run {
  World world;
  DeviceMesh mesh;
  std::unique_ptr<models::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  DTensor ids, targets;

  static Shape mesh_shape(Scheme s) {
    switch (s) {
      case kOneRank:
        return {1};
      case kFsdpTp:
      case kDdpTp:
        return {2, 2};
      default:
        return {4};
    }
  }

  static models::GPTConfig default_config() {
    models::GPTConfig c;
    c.batch = 8, c.seq = 32, c.hidden = 64, c.heads = 4, c.layers = 2, c.vocab = 35;
    return c;
  }

  explicit Run(Scheme s) : Run(s, mesh_shape(s), default_config()) {}

  // The GPT of config c on a mesh of `shape` in scheme s, with FSDP's
  // mixed-precision policy mp where s shards with FSDP.
  Run(Scheme s, const Shape& shape, const models::GPTConfig& c, MixedPrecisionPolicy mp = {})
      : world(World::simulated(static_cast<int>(shape.product()))), mesh(world, shape) {
    model = std::make_unique<models::GPT>(mesh, c, 1234);
    const bool tp = s == kFsdpTp || s == kDdpTp || s == kTp;
    const int tp_dim = mesh.ndim() - 1;
    if (tp) parallelize_module(*model, tp_dim, models::gpt_tensor_parallel_plan(true));
    if (s == kFsdpTp || s == kFsdp) {
      FullyShardOptions options;
      options.mp_policy = mp;
      for (auto& [name, m] : model->named_modules())
        if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos)
          fully_shard(*m, options);
      fully_shard(*model, options);
    }
    if (s == kDdpTp || s == kDdp) replicate(*model);
    std::vector<std::pair<std::string, DTensor>> params;
    for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, *p);
    optimizer = std::make_unique<optim::AdamW>(std::move(params), optim::AdamOptions{});
    Placements in(static_cast<size_t>(mesh.ndim()), Replicate());
    if (s != kOneRank && s != kTp) in[0] = Shard(0);
    ids = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 7), mesh, in);
    targets = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 8), mesh, in);
  }

  void step() {
    optimizer->zero_grad();
    models::gpt_loss((*model)(ids), targets).backward();
    optim::clip_grad_norm_(optimizer->params(), 1.0);
    optimizer->step();
  }

  // The step again, with the most bytes its tensors held above what was
  // allocated when it began (the parameters, the optimizer's state): once
  // at the loss, before backward (activations saved for backward and the
  // gathered parameters of the blocks not yet freed), and over the whole
  // step. Every rank of the simulated world together (one process).
  std::pair<double, double> step_peaks() {
    optimizer->zero_grad();
    const size_t base = detail::allocator_stats().bytes_allocated;
    detail::reset_peak_bytes_allocated();
    DTensor loss = models::gpt_loss((*model)(ids), targets);
    const size_t forward = detail::allocator_stats().peak_bytes_allocated - base;
    loss.backward();
    optim::clip_grad_norm_(optimizer->params(), 1.0);
    optimizer->step();
    const size_t whole = detail::allocator_stats().peak_bytes_allocated - base;
    return {static_cast<double>(forward), static_cast<double>(whole)};
  }
};

void BM_TrainStep(benchmark::State& state) {
  const auto scheme = static_cast<Scheme>(state.range(0));
  Run run(scheme);
  run.step();  // warm the caches
  for (auto _ : state) run.step();
  CommDebugMode comm;
  run.step();
  int64_t params = 0, root_params = 0;
  for (auto& [name, p] : run.model->named_parameters()) {
    params += p->shape().product();
    if (name.rfind("blocks.", 0) != 0) root_params += p->shape().product();
  }
  state.counters["collectives"] = static_cast<double>(comm.total_count());
  int64_t bytes = 0;
  for (int k = 0; k < kNumCollectiveKinds; ++k) bytes += comm.bytes(static_cast<CollectiveKind>(k));
  state.counters["bytes_per_rank"] = static_cast<double>(bytes);
  const double n = static_cast<double>(run.mesh.size(0)), p4 = 4.0 * static_cast<double>(params);
  if (scheme == kDdp) state.counters["min_bytes"] = p4;
  if (scheme == kFsdp)
    state.counters["min_bytes"] = p4 / n + 4.0 * static_cast<double>(params - root_params) / n + p4;
}

// The mixed-precision step of issue 40: FSDP over 2 simulated ranks, the
// GPT at a size where the products dominate (hidden 512, 4 blocks of 8
// heads, batch 32, seq 64), float32 against MixedPrecisionPolicy{param
// bfloat16, reduce float32} (what `dtensor train --scheme fsdp --mesh 2
// --mixed-precision bf16` runs). Read the two side by side. Its counters:
// bytes per rank of FSDP's all-gathers and reduce-scatters, and the peaks of
// Run::step_peaks (bytes above the step's start, both ranks together).
void BM_MixedPrecisionStep(benchmark::State& state, bool bf16) {
  models::GPTConfig c;
  c.batch = 32, c.seq = 64, c.hidden = 512, c.heads = 8, c.layers = 4, c.vocab = 35;
  MixedPrecisionPolicy mp;
  if (bf16) {
    mp.param_dtype = DType::BFloat16;
    mp.reduce_dtype = DType::Float32;
  }
  Run run(kFsdp, {2}, c, mp);
  run.step();  // warm the caches
  for (auto _ : state) run.step();
  CommDebugMode comm;
  const auto [forward_peak, step_peak] = run.step_peaks();
  state.counters["all_gather_bytes"] = static_cast<double>(comm.bytes(CollectiveKind::AllGather));
  state.counters["reduce_scatter_bytes"] =
      static_cast<double>(comm.bytes(CollectiveKind::ReduceScatter));
  state.counters["forward_peak_bytes"] = forward_peak;
  state.counters["step_peak_bytes"] = step_peak;
}
BENCHMARK_CAPTURE(BM_MixedPrecisionStep, f32, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MixedPrecisionStep, bf16, true)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_TrainStep)
    ->ArgName("scheme")  // 0 one rank, 1 fsdp+tp 2x2, 2 ddp+tp 2x2, 3 fsdp 4, 4 ddp 4, 5 tp 4
    ->DenseRange(0, 5)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
