// Throughput of the row-wise NN ops and reductions on a 4096 x 4096 float32
// tensor (64 MiB), reported as bytes moved per second (read + write).
//
// softmax over the last dim is the reference figure. clone() moves the same
// bytes with a plain copy and allocates its output the same way, so it is the
// ceiling an op that reads and writes the tensor once can reach here.
#include <benchmark/benchmark.h>

#include "dtensor/tensor.h"

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

constexpr int64_t kTensorBytes = kN * kN * static_cast<int64_t>(sizeof(float));

void BM_clone(benchmark::State& state) {
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = x.clone();
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

void BM_softmax_last_dim(benchmark::State& state) {
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::softmax(x, -1);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

void BM_log_softmax_last_dim(benchmark::State& state) {
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
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::softmax(x, 0);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTensorBytes);
}

void BM_sum_last_dim(benchmark::State& state) {
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::sum(x, {-1});
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_sum_dim0(benchmark::State& state) {
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::sum(x, {0});
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_amax_last_dim(benchmark::State& state) {
  const Tensor& x = input();
  for (auto _ : state) {
    Tensor y = dtensor::amax(x, {-1});
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

void BM_layer_norm(benchmark::State& state) {
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
  const Tensor& x = input();
  const Tensor t = Tensor::randint(0, kN, {kN}, 4);
  for (auto _ : state) {
    Tensor y = dtensor::cross_entropy(x, t);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kTensorBytes);
}

BENCHMARK(BM_clone)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax_last_dim)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_log_softmax_last_dim)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax_dim0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sum_last_dim)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sum_dim0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_amax_last_dim)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_norm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cross_entropy)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
