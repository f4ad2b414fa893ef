// instructions: the dispatch paths, counted in instructions under callgrind
// (bench/instructions.sh runs it and prints the table). Wall time on a
// shared machine is too noisy to guard a path of a few hundred
// nanoseconds; instruction counts repeat exactly for the same binary.
//
// Each case runs once to warm every cache (propagation, plans, allocator),
// then `repeat` times between CALLGRIND_ZERO_STATS and a dump named
// "NAME REPEAT"; the script divides the dump's total by REPEAT. Outside
// valgrind the client requests do nothing, so the program also runs as a
// smoke test.
//
// The DTensor cases run on a simulated world of 4 ranks with 8x8 shards,
// so each includes 4 local kernels; the "local" cases count those kernels
// alone, and the script reports overhead = DTensor - local. The last case
// is a whole training step, so that what no single op shows (hooks,
// FSDP's buffers, autograd, the optimizer) is counted too.
//
// bench/instructions.baseline holds these counts for CI's gate: a renamed
// or new case needs `bench/instructions.sh --update` (docs/testing.md,
// "The instruction-count gate").
#include <valgrind/callgrind.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"

using namespace dtensor;

namespace {

void measure(const char* name, const std::function<void()>& body, int repeat = 1000) {
  const std::string dump = std::string(name) + " " + std::to_string(repeat);
  body();  // warm
  CALLGRIND_ZERO_STATS;
  for (int i = 0; i < repeat; ++i) body();
  CALLGRIND_DUMP_STATS_AT(dump.c_str());
  std::printf("%s\n", name);
}

// One step of `dtensor train`'s loop (zero_grad, forward, loss, backward,
// clip_grad_norm_, AdamW) on its default layout, FSDP over dp and tensor +
// sequence parallel over tp on a 2x2 simulated mesh, with a GPT small
// enough that callgrind counts a step in a fraction of a second: every op
// and collective of the real step runs, on tiny shards.
struct TrainStep {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}};
  std::unique_ptr<models::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  DTensor ids, targets;

  TrainStep() {
    models::GPTConfig c;
    c.batch = 4, c.seq = 8, c.hidden = 32, c.heads = 4, c.layers = 1, c.vocab = 35;
    model = std::make_unique<models::GPT>(mesh, c, 1234);
    parallelize_module(*model, 1, models::gpt_tensor_parallel_plan(c, true));
    for (auto& [name, m] : model->named_modules())
      if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos) fully_shard(*m);
    fully_shard(*model);
    std::vector<std::pair<std::string, DTensor>> params;
    for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, *p);
    optimizer = std::make_unique<optim::AdamW>(std::move(params), optim::AdamOptions{});
    const Placements batch{Shard(0), Replicate()};
    ids = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 7), mesh, batch);
    targets = distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 8), mesh, batch);
  }

  void step() {
    optimizer->zero_grad();
    models::gpt_loss((*model)(ids), targets).backward();
    optim::clip_grad_norm_(optimizer->params(), 1.0);
    optimizer->step();
  }
};

}  // namespace

int main() {
  World world = World::simulated(4);
  DeviceMesh mesh(world, {4});
  const DTensor a = distribute_tensor(Tensor::randn({32, 8}, 1), mesh, {Shard(0)});
  const DTensor b = distribute_tensor(Tensor::randn({32, 8}, 2), mesh, {Shard(0)});
  const DTensor w = distribute_tensor(Tensor::randn({8, 8}, 3), mesh, {Replicate()});
  DTensor acc = distribute_tensor(Tensor::zeros({32, 8}), mesh, {Shard(0)});
  const Tensor x = Tensor::randn({8, 8}, 4), y = Tensor::randn({8, 8}, 5);
  Tensor xs = x.clone();

  measure("tensor.add", [&] { (void)(x + y); });
  measure("tensor.mm", [&] { (void)mm(x, y); });
  measure("tensor.add_", [&] { xs.add_(y); });
  measure("tensor.sum", [&] { (void)sum(x, {1}); });
  measure("tensor.view", [&] { (void)x.view({64}); });
  measure("local.add", [&] {
    (void)a.local().zip(b.local(), [](int, const Tensor& p, const Tensor& q) { return p + q; });
  });
  measure("local.mm", [&] {
    (void)a.local().zip(w.local(), [](int, const Tensor& p, const Tensor& q) { return mm(p, q); });
  });
  measure("local.sum", [&] {
    (void)a.local().map([](int, const Tensor& p) { return sum(p, {1}); });
  });
  measure("local.view", [&] {
    (void)a.local().map([](int, const Tensor& p) { return p.view({1, 8, 8}); });
  });
  measure("local.add_", [&] {
    acc.local().for_each([&](int r, const Tensor& p) { Tensor(p).add_(b.local().shard(r)); });
  });
  measure("dtensor.add", [&] { (void)(a + b); });
  measure("dtensor.mm", [&] { (void)mm(a, w); });
  measure("dtensor.sum", [&] { (void)sum(a, {1}); });
  measure("dtensor.view", [&] { (void)a.view({4, 8, 8}); });
  measure("dtensor.add_", [&] { acc.add_(b); });
  measure("dtensor.add.cache_miss", [&] {
    clear_sharding_prop_cache();
    (void)(a + b);
  });
  measure("dtensor.redistribute.S0_to_R", [&] { (void)a.redistribute({Replicate()}); });
  measure("dtensor.redistribute.S0_to_S1", [&] { (void)a.redistribute({Shard(1)}); });

  TrainStep train;
  const auto step = [&] { train.step(); };
  measure("train.step.fsdp_tp_2x2", step, /*repeat=*/4);
  return 0;
}
