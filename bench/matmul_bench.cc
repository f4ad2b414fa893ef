// dtensor::mm in float32 and bfloat16 against direct library calls on the
// same buffers: OpenBLAS's cblas_sgemm (as it loads on this CPU: the
// context line "openblas_core" names the kernels it picked) and oneDNN's
// dnnl_sgemm, which dtensor's float32 products run.
//
// mm allocates its output on every call and checks shapes/layouts; the direct
// calls write into a preallocated buffer. mm / dnnl_sgemm is the overhead of
// the Tensor layer, mm bf16 / mm f32 the gain of the CPU's bf16
// instructions (tensor/onednn_gemm.h). For one thread against one thread:
// DTENSOR_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 (oneDNN's).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "dtensor/tensor.h"

namespace {

using dtensor::DType;
using dtensor::Tensor;

void set_flops(benchmark::State& state, int64_t n) {
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

extern "C" char* openblas_get_corename();

void BM_dtensor_mm(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  const Tensor a = Tensor::randn({n, n}, 1, 0, dtype);
  const Tensor b = Tensor::randn({n, n}, 2, 0, dtype);
  for (auto _ : state) {
    Tensor c = dtensor::mm(a, b);
    benchmark::DoNotOptimize(c.raw_data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

void BM_openblas_sgemm(benchmark::State& state) {
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

void BM_onednn_sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = Tensor::randn({n, n}, 1, 0, DType::Float32);
  const Tensor b = Tensor::randn({n, n}, 2, 0, DType::Float32);
  Tensor c = Tensor::empty({n, n}, DType::Float32);
  for (auto _ : state) {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(), n, 0.0f,
               c.data_ptr<float>(), n);
    benchmark::DoNotOptimize(c.raw_data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

// 1024 is the reference size; 256 shows the per-call overhead (allocation,
// checks) more, 2048 is the size issue 40 names. Real time, not CPU time:
// with more than one thread, worker threads do the work.
#define SIZES Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime()
BENCHMARK_CAPTURE(BM_dtensor_mm, f32, DType::Float32)->SIZES;
BENCHMARK_CAPTURE(BM_dtensor_mm, bf16, DType::BFloat16)->SIZES;
BENCHMARK(BM_onednn_sgemm)->SIZES;
BENCHMARK(BM_openblas_sgemm)->SIZES;

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
