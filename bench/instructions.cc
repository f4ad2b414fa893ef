// instructions: the dispatch paths, counted in instructions under callgrind
// (bench/instructions.sh runs it and prints the table). Wall time on a
// shared machine is too noisy to guard a path of a few hundred
// nanoseconds; instruction counts repeat exactly for the same binary.
//
// Each case runs once to warm every cache (propagation, plans, allocator),
// then kRepeat times between CALLGRIND_ZERO_STATS and a dump named after
// it; the script divides the dump's total by kRepeat. Outside valgrind the
// client requests do nothing, so the program also runs as a smoke test.
//
// The DTensor cases run on a simulated world of 4 ranks with 8x8 shards,
// so each includes 4 local kernels; the "local" cases count those kernels
// alone, and the script reports overhead = DTensor - local.
#include <valgrind/callgrind.h>

#include <cstdio>
#include <functional>
#include <string>

#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

constexpr int kRepeat = 1000;

void measure(const char* name, const std::function<void()>& body) {
  body();  // warm
  CALLGRIND_ZERO_STATS;
  for (int i = 0; i < kRepeat; ++i) body();
  CALLGRIND_DUMP_STATS_AT(name);
  std::printf("%s\n", name);
}

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
  return 0;
}
