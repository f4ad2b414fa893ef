// Data-parallel training steps of an MLP of 4 blocks (Linear 256 -> 256 +
// relu) on a simulated world of 4 ranks (mesh {4}), batch 64 sharded over
// dp: forward, backward and an SGD step on the local shards.
//
//   BM_Step/0  no wrapper (parameters Replicate, gradients left Partial)
//   BM_Step/1  replicate (gradients all-reduced, one per parameter)
//   BM_Step/2  fully_shard on each block and the root, reshard_after_forward
//   BM_Step/3  fully_shard without reshard_after_forward
//
// Counters: param_bytes, the parameter bytes per rank between steps;
// saved_bytes, what the graph holds for backward after forward
// (graph_memory, per rank); collectives, per step.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/fsdp.h"

namespace {

using namespace dtensor;

constexpr int kRanks = 4;
constexpr int64_t kHidden = 256, kBatch = 64;

class Block : public nn::Module {
 public:
  Block(const DeviceMesh& mesh, uint64_t seed) : Module(mesh) {
    fc = register_module("fc", std::make_unique<nn::Linear>(mesh, kHidden, kHidden, true, seed));
  }
  DTensor forward(const DTensor& x) override { return relu((*fc)(x)); }
  nn::Linear* fc;
};

class Mlp : public nn::Module {
 public:
  explicit Mlp(const DeviceMesh& mesh) : Module(mesh) {
    for (int i = 0; i < 4; ++i) {
      std::string name = "b";
      name += std::to_string(i);
      blocks.push_back(register_module(name, std::make_unique<Block>(mesh, i)));
    }
  }
  DTensor forward(const DTensor& x) override {
    DTensor h = x;
    for (Block* b : blocks) h = (*b)(h);
    return h;
  }
  std::vector<Block*> blocks;
};

void BM_Step(benchmark::State& state) {
  World world = World::simulated(kRanks);
  DeviceMesh mesh(world, {kRanks});
  Mlp net(mesh);
  const int mode = static_cast<int>(state.range(0));
  if (mode == 1) replicate(net);
  if (mode >= 2) {
    FullyShardOptions o;
    o.reshard_after_forward = mode == 2;
    for (Block* b : net.blocks) fully_shard(*b, o);
    fully_shard(net, o);
  }
  const DTensor x = distribute_tensor(Tensor::randn({kBatch, kHidden}, 1), mesh, {Shard(0)});
  int64_t saved = 0, collectives = 0;
  for (auto _ : state) {
    CommDebugMode comm;
    DTensor loss = mean(net(x));
    saved = graph_memory(loss).saved_bytes / kRanks;
    loss.backward();
    NoGradGuard no_grad;
    for (auto& [name, p] : net.named_parameters()) {
      const DTensor g = *p->grad();
      for (const auto& [rank, shard] : p->local().shards()) {
        Tensor s = shard;
        if (g.placements() == p->placements()) s.sub_(g.to_local(rank) * 0.01);
      }
      p->zero_grad();
    }
    collectives = comm.total_count();
  }
  int64_t param_bytes = 0;
  for (auto& [name, p] : net.named_parameters())
    param_bytes += static_cast<int64_t>(p->local().shards().front().second.nbytes());
  state.counters["param_bytes"] = static_cast<double>(param_bytes);
  state.counters["saved_bytes"] = static_cast<double>(saved);
  state.counters["collectives"] = static_cast<double>(collectives);
}
BENCHMARK(BM_Step)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
