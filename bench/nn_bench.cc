// Throughput of the row-wise NN ops and reductions on a 4096 x 4096 float32
// tensor (64 MiB), reported as bytes moved per second (read + write).
//
// softmax over the last dim is the reference figure. clone() moves the same
// bytes with a plain copy and allocates its output the same way, so it is the
// ceiling an op that reads and writes the tensor once can reach here.
//
// Every benchmark runs at 1 and 2 threads (the argument: dtensor's
// set_num_threads); DTENSOR_SIMD=baseline|avx2 in the environment caps the
// SIMD level, to see what the runtime dispatch gains. bench/compare_peers.py
// times the same ops in NumPy and torch.
#include <benchmark/benchmark.h>

#include "dtensor/tensor.h"
#include "dtensor/threads.h"

namespace {

using dtensor::DType;
using dtensor::Tensor;

constexpr int64_t kN = 4096;

const Tensor& input() {
  static const Tensor x = Tensor::randn({kN, kN}, 1, 0, DType::Float32);
  return x;
}

void set_bytes(benchmark::State& state, int64_t bytes_per_iteration) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iteration);
}

// The thread count a benchmark runs at: its argument.
void use_threads(benchmark::State& state) { dtensor::set_num_threads(static_cast<int>(state.range(0))); }

constexpr int64_t kTensorBytes = kN * kN * static_cast<int64_t>(sizeof(float));

void BM_clone(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = x.clone();
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

void BM_softmax_last_dim(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::softmax(x, -1);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

void BM_log_softmax_last_dim(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::log_softmax(x, -1);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

// Over dim 0: the column kernel (no transpose), for information.
void BM_softmax_dim0(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::softmax(x, 0);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

void BM_sum_last_dim(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::sum(x, {-1});
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_sum_dim0(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::sum(x, {0});
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_amax_last_dim(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::amax(x, {-1});
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_layer_norm(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  const Tensor w = Tensor::randn({kN}, 2, 0, DType::Float32);
  const Tensor b = Tensor::randn({kN}, 3, 0, DType::Float32);
  for (auto _ : state) {
    Tensor y = dtensor::layer_norm(x, {kN}, w, b);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

// Fused per row: reads the logits once and writes nothing of their size.
void BM_cross_entropy(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  const Tensor t = Tensor::randint(0, kN, {kN}, 4);
  for (auto _ : state) {
    Tensor y = dtensor::cross_entropy(x, t);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

// Full reductions: fixed 64K-element blocks, merged in block order.
void BM_sum_all(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::sum(x);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_amax_all(benchmark::State& state) {
  use_threads(state);
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::amax(x);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

// A language-model loss: 4096 rows over a 32000-word vocabulary (500 MiB
// of logits).
void BM_cross_entropy_vocab32000(benchmark::State& state) {
  use_threads(state);
  static const Tensor x = Tensor::randn({kN, 32000}, 5, 0, DType::Float32);
  const Tensor t = Tensor::randint(0, 32000, {kN}, 6);
  for (auto _ : state) {
    Tensor y = dtensor::cross_entropy(x, t);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kN * 32000 * static_cast<int64_t>(sizeof(float)));
}

BENCHMARK(BM_clone)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_softmax_last_dim)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_log_softmax_last_dim)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_softmax_dim0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sum_last_dim)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sum_dim0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_amax_last_dim)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_layer_norm)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_cross_entropy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sum_all)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_amax_all)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_cross_entropy_vocab32000)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
