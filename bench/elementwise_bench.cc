// Elementwise throughput: add of two 16M-float tensors (allocating and in
// place) against memcpy of the same 64 MiB, the yardstick for a memory-bound
// kernel; plus a broadcast add and a transposed (non-contiguous) add for
// information. Bytes processed count every byte read or written once.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "dtensor/tensor.h"

namespace {

using dtensor::Tensor;

constexpr int64_t kN = int64_t{1} << 24;  // 16M floats = 64 MiB
constexpr int64_t kBytes = kN * static_cast<int64_t>(sizeof(float));

// memcpy between preallocated buffers: reads 64 MiB, writes 64 MiB.
void BM_Memcpy64MiB(benchmark::State& state) {
  std::vector<float> src(kN, 1.0f), dst(kN, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_Memcpy64MiB)->Unit(benchmark::kMillisecond);

// add(a, b): reads 2 x 64 MiB, writes a freshly allocated 64 MiB result
// (whose first touch costs page faults unless the allocator reuses memory).
void BM_AddAllocating(benchmark::State& state) {
  const Tensor a = Tensor::randn({kN}, 1);
  const Tensor b = Tensor::randn({kN}, 2);
  for (auto _ : state) {
    Tensor c = dtensor::add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kBytes);
}
BENCHMARK(BM_AddAllocating)->Unit(benchmark::kMillisecond);

// Tensor::empty + fill_ of 64 MiB: what a fresh result costs before any
// arithmetic (allocation and first-touch page faults), to read
// BM_AddAllocating against.
void BM_EmptyAndFill64MiB(benchmark::State& state) {
  for (auto _ : state) {
    Tensor c = Tensor::empty({kN});
    c.fill_(0);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_EmptyAndFill64MiB)->Unit(benchmark::kMillisecond);

// a += b: reads 2 x 64 MiB, writes 64 MiB in place (no allocation).
void BM_AddInPlace(benchmark::State& state) {
  Tensor a = Tensor::randn({kN}, 1);
  const Tensor b = Tensor::randn({kN}, 2);
  for (auto _ : state) {
    a += b;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * kBytes);
}
BENCHMARK(BM_AddInPlace)->Unit(benchmark::kMillisecond);

// a + 1.5: the scalar rides in the kernel, not as a broadcast tensor.
void BM_AddScalarInPlace(benchmark::State& state) {
  Tensor a = Tensor::randn({kN}, 1);
  for (auto _ : state) {
    a += 1.5;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_AddScalarInPlace)->Unit(benchmark::kMillisecond);

// (4096, 4096) + (4096): rows plus a row vector; the vector stays in cache.
void BM_AddBroadcastRow(benchmark::State& state) {
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor row = Tensor::randn({4096}, 2);
  for (auto _ : state) {
    Tensor c = dtensor::add(a, row);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_AddBroadcastRow)->Unit(benchmark::kMillisecond);

// (4096, 4096) + (4096, 1): each row plus one value (the stride-0 path).
void BM_AddBroadcastColumn(benchmark::State& state) {
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor col = Tensor::randn({4096, 1}, 2);
  for (auto _ : state) {
    Tensor c = dtensor::add(a, col);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_AddBroadcastColumn)->Unit(benchmark::kMillisecond);

// a.t() + b with a (4096, 4096): one operand walks memory with a 16 KiB
// stride, so this measures the strided path and cache/TLB misses.
void BM_AddTransposed(benchmark::State& state) {
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor b = Tensor::randn({4096, 4096}, 2);
  const Tensor at = a.t();
  for (auto _ : state) {
    Tensor c = dtensor::add(at, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kBytes);
}
BENCHMARK(BM_AddTransposed)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
