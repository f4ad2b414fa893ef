// Elementwise throughput: add of two 16M-float tensors (allocating and in
// place) against memcpy of the same 64 MiB, the yardstick for a memory-bound
// kernel; plus a broadcast add and a transposed (non-contiguous) add for
// information. Bytes processed count every byte read or written once.
//
// Each runs at 1 and 2 threads (the argument: dtensor's set_num_threads;
// the memcpy yardstick splits its copy over that many std::threads), so
// every op can be read against the bandwidth limit at the same thread count.
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/threads.h"
#include "tensor/transpose.h"

namespace {

using dtensor::Tensor;
namespace detail = dtensor::detail;

constexpr int64_t kN = int64_t{1} << 24;  // 16M floats = 64 MiB
constexpr int64_t kBytes = kN * static_cast<int64_t>(sizeof(float));

void use_threads(benchmark::State& state) { dtensor::set_num_threads(static_cast<int>(state.range(0))); }

// memcpy between preallocated buffers: reads 64 MiB, writes 64 MiB.
void BM_Memcpy64MiB(benchmark::State& state) {
  use_threads(state);
  std::vector<float> src(kN, 1.0f), dst(kN, 0.0f);
  const int threads = static_cast<int>(state.range(0));
  const int64_t part = kN / threads;
  for (auto _ : state) {
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t)
      helpers.emplace_back([&, t] { std::memcpy(dst.data() + t * part, src.data() + t * part, part * sizeof(float)); });
    std::memcpy(dst.data(), src.data(), part * sizeof(float));
    for (std::thread& h : helpers) h.join();
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_Memcpy64MiB)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// add(a, b): reads 2 x 64 MiB, writes a freshly allocated 64 MiB result
// (whose first touch costs page faults unless the allocator reuses memory).
void BM_AddAllocating(benchmark::State& state) {
  use_threads(state);
  const Tensor a = Tensor::randn({kN}, 1);
  const Tensor b = Tensor::randn({kN}, 2);
  for (auto _ : state) {
    Tensor c = dtensor::add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kBytes);
}
BENCHMARK(BM_AddAllocating)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Tensor::empty + fill_ of 64 MiB: what a fresh result costs before any
// arithmetic (allocation and first-touch page faults), to read
// BM_AddAllocating against.
void BM_EmptyAndFill64MiB(benchmark::State& state) {
  use_threads(state);
  for (auto _ : state) {
    Tensor c = Tensor::empty({kN});
    c.fill_(0);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_EmptyAndFill64MiB)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// a += b: reads 2 x 64 MiB, writes 64 MiB in place (no allocation).
void BM_AddInPlace(benchmark::State& state) {
  use_threads(state);
  Tensor a = Tensor::randn({kN}, 1);
  const Tensor b = Tensor::randn({kN}, 2);
  for (auto _ : state) {
    a += b;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * kBytes);
}
BENCHMARK(BM_AddInPlace)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// a + 1.5: the scalar rides in the kernel, not as a broadcast tensor.
void BM_AddScalarInPlace(benchmark::State& state) {
  use_threads(state);
  Tensor a = Tensor::randn({kN}, 1);
  for (auto _ : state) {
    a += 1.5;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_AddScalarInPlace)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// (4096, 4096) + (4096): rows plus a row vector; the vector stays in cache.
void BM_AddBroadcastRow(benchmark::State& state) {
  use_threads(state);
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor row = Tensor::randn({4096}, 2);
  for (auto _ : state) {
    Tensor c = dtensor::add(a, row);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_AddBroadcastRow)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// (4096, 4096) + (4096, 1): each row plus one value (the stride-0 path).
void BM_AddBroadcastColumn(benchmark::State& state) {
  use_threads(state);
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor col = Tensor::randn({4096, 1}, 2);
  for (auto _ : state) {
    Tensor c = dtensor::add(a, col);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_AddBroadcastColumn)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// a.t() + b with a (4096, 4096): one operand walks memory with a 16 KiB
// stride, so this measures the strided path and cache/TLB misses.
void BM_AddTransposed(benchmark::State& state) {
  use_threads(state);
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor b = Tensor::randn({4096, 4096}, 2);
  const Tensor at = a.t();
  for (auto _ : state) {
    Tensor c = dtensor::add(at, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kBytes);
}
BENCHMARK(BM_AddTransposed)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// x.clone() of a contiguous tensor: Tensor::copy_'s memmove plus a fresh
// 64 MiB result.
void BM_CloneContiguous(benchmark::State& state) {
  use_threads(state);
  const Tensor a = Tensor::randn({kN}, 1);
  for (auto _ : state) {
    Tensor c = a.clone();
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_CloneContiguous)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// exp and sigmoid of float32: a polynomial vectorised in the loop
// (row_math.h, exp_f32) rather than one libm call per element.
void unary_op(benchmark::State& state, Tensor (*op)(const Tensor&)) {
  use_threads(state);
  const Tensor a = Tensor::randn({kN}, 1);
  for (auto _ : state) {
    Tensor c = op(a);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
void BM_Exp(benchmark::State& state) {
  unary_op(state, [](const Tensor& a) { return exp(a); });
}
BENCHMARK(BM_Exp)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_Sigmoid(benchmark::State& state) {
  unary_op(state, [](const Tensor& a) { return sigmoid(a); });
}
BENCHMARK(BM_Sigmoid)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// a.t().contiguous(): a transposing copy, through the tiled walk.
void BM_ContiguousOfTransposed(benchmark::State& state) {
  use_threads(state);
  const Tensor a = Tensor::randn({4096, 4096}, 1);
  const Tensor at = a.t();
  for (auto _ : state) {
    Tensor c = at.contiguous();
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_ContiguousOfTransposed)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The floor for a.t().contiguous() on this machine: a hand-written
// transposing copy of 4096x4096 floats between preallocated, huge-page
// buffers, 8x8 blocks through AVX2 registers straight from source to
// destination, in 256x256 blocks (the fastest of the block shapes tried).
// No staging, no threads, no allocation: what the memory system allows a
// transpose, to read BM_ContiguousOfTransposed against. The 8x8 register
// blocks are the library's (detail::transpose_tile at the AVX2 level).
void raw_transpose(const float* s, float* d, int64_t n) {
  constexpr int64_t kBlock = 256;
  const int64_t row = n * static_cast<int64_t>(sizeof(float));
  for (int64_t rb = 0; rb < n; rb += kBlock)
    for (int64_t cb = 0; cb < n; cb += kBlock)
      for (int64_t c = cb; c < cb + kBlock; c += 8)
        for (int64_t r = rb; r < rb + kBlock; r += 8)
          detail::transpose_tile(4, reinterpret_cast<const char*>(s + r * n + c), row,
                                 reinterpret_cast<char*>(d + c * n + r), row, 8, 8);
}

void BM_RawTransposeAvx2(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("no AVX2");
    return;
  }
  constexpr int64_t n = 4096;
  auto huge = [] {
    void* p = std::aligned_alloc(int64_t{1} << 21, kBytes);
    madvise(p, kBytes, MADV_HUGEPAGE);
    std::memset(p, 0, kBytes);
    return static_cast<float*>(p);
  };
  float* src = huge();
  float* dst = huge();
  for (int64_t i = 0; i < kN; ++i) src[i] = static_cast<float>(i);
  for (auto _ : state) {
    raw_transpose(src, dst, n);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  if (dst[1] != src[n]) state.SkipWithError("raw transpose is wrong");
  std::free(src);
  std::free(dst);
  state.SetBytesProcessed(state.iterations() * 2 * kBytes);
}
BENCHMARK(BM_RawTransposeAvx2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
