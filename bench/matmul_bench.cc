// dtensor::mm against a direct cblas_sgemm on the same float32 buffers.
//
// mm allocates its output on every call and checks shapes/layouts; the direct
// call writes into a preallocated buffer. Their ratio is the overhead of the
// Tensor layer (target: direct/ours throughput >= 0.95 at 1024). Set
// OPENBLAS_NUM_THREADS to compare single- and multi-threaded BLAS.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include "dtensor/tensor.h"

namespace {

using dtensor::DType;
using dtensor::Tensor;

void set_flops(benchmark::State& state, int64_t n) {
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_dtensor_mm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = Tensor::randn({n, n}, 1, 0, DType::Float32);
  const Tensor b = Tensor::randn({n, n}, 2, 0, DType::Float32);
  for (auto _ : state) {
    Tensor c = dtensor::mm(a, b);
    benchmark::DoNotOptimize(c.raw_data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

void BM_direct_sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = Tensor::randn({n, n}, 1, 0, DType::Float32);
  const Tensor b = Tensor::randn({n, n}, 2, 0, DType::Float32);
  Tensor c = Tensor::empty({n, n}, DType::Float32);
  const int ni = static_cast<int>(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f,
                a.data_ptr<float>(), ni, b.data_ptr<float>(), ni, 0.0f, c.data_ptr<float>(), ni);
    benchmark::DoNotOptimize(c.raw_data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

// 1024 is the reference size; 256 shows the per-call overhead (allocation,
// checks) more, 4096 large-matrix behaviour (for information). Real time, not
// CPU time: OpenBLAS's worker threads do the work.
BENCHMARK(BM_dtensor_mm)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_direct_sgemm)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
