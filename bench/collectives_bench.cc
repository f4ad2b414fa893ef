// Simulated collectives against memcpy: all_gather and all_reduce on a world
// of 8 held ranks over a 1-d mesh of 8, each rank ending with 64 MiB, versus
// memcpy of the same 8 x 64 MiB into preallocated buffers. In a simulated
// world a collective is pure data movement, so memcpy is its speed limit:
// the ratio of GB/s says how close the backend gets. Bytes processed count
// the bytes delivered to all ranks (8 x 64 MiB) for all three.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "comm/backend.h"
#include "dtensor/local_tensor.h"
#include "dtensor/mesh.h"
#include "dtensor/world.h"

namespace {

using namespace dtensor;

constexpr int kRanks = 8;
constexpr int64_t kBytesPerRank = int64_t{64} << 20;  // each rank's result
constexpr int64_t kFloatsPerRank = kBytesPerRank / static_cast<int64_t>(sizeof(float));
constexpr int64_t kDelivered = kRanks * kBytesPerRank;

// Copies one 64 MiB source into 8 destinations: the bytes an all_gather or
// all_reduce of 8 ranks must at least write.
void BM_Memcpy8x64MiB(benchmark::State& state) {
  std::vector<char> src(kBytesPerRank, 1);
  std::vector<std::vector<char>> dst(kRanks, std::vector<char>(kBytesPerRank, 0));
  for (auto _ : state) {
    for (auto& d : dst) std::memcpy(d.data(), src.data(), kBytesPerRank);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kDelivered);
}
BENCHMARK(BM_Memcpy8x64MiB)->Unit(benchmark::kMillisecond)->UseRealTime();

// Shards of 8 MiB; every rank receives the 64 MiB concatenation.
void BM_AllGather8Ranks64MiB(benchmark::State& state) {
  World world = World::simulated(kRanks);
  DeviceMesh mesh(world, Shape{kRanks});
  LocalTensor in;
  for (int r = 0; r < kRanks; ++r) in.set(r, Tensor::randn({kFloatsPerRank / kRanks}, r));
  for (auto _ : state) {
    LocalTensor out = world.backend().all_gather(in, mesh, 0, 0);
    benchmark::DoNotOptimize(out.shard(kRanks - 1).raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kDelivered);
}
BENCHMARK(BM_AllGather8Ranks64MiB)->Unit(benchmark::kMillisecond)->UseRealTime();

// 64 MiB per rank in, the 64 MiB sum out on every rank.
void BM_AllReduceSum8Ranks64MiB(benchmark::State& state) {
  World world = World::simulated(kRanks);
  DeviceMesh mesh(world, Shape{kRanks});
  LocalTensor in;
  for (int r = 0; r < kRanks; ++r) in.set(r, Tensor::randn({kFloatsPerRank}, r));
  for (auto _ : state) {
    LocalTensor out = world.backend().all_reduce(in, mesh, 0, ReduceOp::Sum);
    benchmark::DoNotOptimize(out.shard(kRanks - 1).raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kDelivered);
}
BENCHMARK(BM_AllReduceSum8Ranks64MiB)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
