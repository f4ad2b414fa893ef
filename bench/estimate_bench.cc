// A plan for a large run (docs/estimate.md): two training steps of a GPT
// (FSDP over dp, tensor + sequence parallel over tp, bf16 parameters,
// AdamW, clipping) on a World::shape_only of dp x tp ranks, under
// estimate::profile, then estimate_time on the h100 preset. The issue's
// bounds: 1,024 ranks (128 x 8) of a 32-layer, hidden-4096 model in under
// 10 s and 2 GB; 16,384 ranks (2,048 x 8) in under 60 s.
//
// By roles (the third argument 1) each role is computed once; 0 computes
// every rank, for comparison.
//
// Counters: ranks, the ranks computed (one per role), how many times the
// step ran (a layout that splits the roles runs it again), the profile's
// collectives per rank, the process's peak resident set (VmHWM, reset
// before each run) in MiB.
//
//   build/bin/estimate_bench --benchmark_filter=Plan/2048/8/1
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/models/gpt.h"

namespace {

using namespace dtensor;

void two_steps(const DeviceMesh& mesh, const models::GPTConfig& c) {
  std::unique_ptr<models::GPT> model;
  {
    nn::MetaDeviceGuard meta;
    model = std::make_unique<models::GPT>(mesh, c, 1);
  }
  parallelize_module(*model, 1, models::gpt_tensor_parallel_plan(true));
  FullyShardOptions o;
  o.mesh_dims = {0};
  o.mp_policy.param_dtype = DType::BFloat16;
  o.mp_policy.reduce_dtype = DType::Float32;
  for (auto& [name, m] : model->named_modules())
    if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos) fully_shard(*m, o);
  fully_shard(*model, o);
  model->materialize();
  std::vector<std::pair<std::string, DTensor>> params;
  for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, *p);
  optim::AdamW optimizer(optim::weight_decay_groups(params), optim::AdamOptions{});
  const DTensorSpec batch(mesh, {Shard(0), Replicate()}, Shape{c.batch, c.seq}, DType::Int64);
  for (int step = 0; step < 2; ++step) {
    estimate::phase("forward");
    DTensor loss = models::gpt_loss((*model)(DTensor::meta(batch)), DTensor::meta(batch));
    estimate::phase("backward");
    loss.backward();
    estimate::phase("optimizer");
    optim::clip_grad_norm_(optimizer.params(), 1.0);
    optimizer.step();
    optimizer.zero_grad();
  }
}

// Args: dp, tp, and whether to compute by roles (ProfileOptions::roles).
void BM_Plan(benchmark::State& state) {
  const int dp = static_cast<int>(state.range(0)), tp = static_cast<int>(state.range(1));
  estimate::ProfileOptions options;
  options.roles = state.range(2) != 0;
  models::GPTConfig c;
  c.layers = 32;
  c.hidden = 4096;
  c.heads = 32;
  c.seq = 4096;
  c.batch = 2 * dp;
  c.vocab = 128256;
  size_t collectives = 0, computed = 0;
  int runs = 0;
  for (auto _ : state) {
    reset_peak_resident();
    const World world = World::shape_only(dp * tp);
    const DeviceMesh mesh(world, {dp, tp}, {"dp", "tp"});
    const estimate::Profile p = estimate::profile(world, [&] { two_steps(mesh, c); }, options);
    const estimate::TimeEstimate t = estimate::estimate_time(p, estimate::cluster_preset("h100"));
    benchmark::DoNotOptimize(t.step);
    collectives = p.ranks.front().collectives.size();
    computed = p.ranks.size();
    runs = p.runs;
  }
  state.counters["computed_ranks"] = static_cast<double>(computed);
  state.counters["runs"] = runs;
  state.counters["ranks"] = dp * tp;
  state.counters["collectives_per_rank"] = static_cast<double>(collectives);
  state.counters["peak_rss_MiB"] = static_cast<double>(peak_resident_bytes()) / (1 << 20);
}
BENCHMARK(BM_Plan)
    ->Args({16, 8, 1})
    ->Args({128, 8, 1})
    ->Args({2048, 8, 1})
    ->Args({16, 8, 0})
    ->Args({128, 8, 0})
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
