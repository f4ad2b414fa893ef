// 16-bit elementwise ops against float32, per element: add, add of a
// scalar, exp, relu, and the conversions both ways, on 4M-element tensors
// (16 MiB in float32: past the caches), one thread. The items/s counter is
// elements per second, so 1e9 / items_per_second is ns per element; the
// issue 40 bound is a bfloat16 op within 1.2x of float32's time per element
// (it moves half the bytes). Read the three dtypes of one op side by side:
//
//   DTENSOR_NUM_THREADS=1 build/bin/half_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "dtensor/tensor.h"

namespace {

using dtensor::DType;
using dtensor::Tensor;

constexpr int64_t kN = int64_t{1} << 22;

template <class F>
void run(benchmark::State& state, DType dtype, F op) {
  const Tensor a = Tensor::randn({kN}, 1, 0, dtype);
  const Tensor b = Tensor::randn({kN}, 2, 0, dtype);
  for (auto _ : state) {
    Tensor c = op(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * kN);
}

void BM_Add(benchmark::State& state, DType dtype) {
  run(state, dtype, [](const Tensor& a, const Tensor& b) { return dtensor::add(a, b); });
}
void BM_AddScalar(benchmark::State& state, DType dtype) {
  run(state, dtype, [](const Tensor& a, const Tensor&) { return dtensor::add(a, 0.5); });
}
void BM_Exp(benchmark::State& state, DType dtype) {
  run(state, dtype, [](const Tensor& a, const Tensor&) { return dtensor::exp(a); });
}
void BM_Relu(benchmark::State& state, DType dtype) {
  run(state, dtype, [](const Tensor& a, const Tensor&) { return dtensor::relu(a); });
}
// float32 -> dtype and dtype -> float32 (float32's rows copy).
void BM_ToFromFloat32(benchmark::State& state, DType dtype) {
  run(state, DType::Float32, [dtype](const Tensor& a, const Tensor&) { return a.to(dtype); });
}
void BM_ToFloat32(benchmark::State& state, DType dtype) {
  run(state, dtype, [](const Tensor& a, const Tensor&) { return a.to(DType::Float32); });
}

#define DTYPES(bm)                                                     \
  BENCHMARK_CAPTURE(bm, f32, DType::Float32)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(bm, bf16, DType::BFloat16)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(bm, f16, DType::Float16)->Unit(benchmark::kMillisecond)
DTYPES(BM_Add);
DTYPES(BM_AddScalar);
DTYPES(BM_Exp);
DTYPES(BM_Relu);
BENCHMARK_CAPTURE(BM_ToFromFloat32, bf16, DType::BFloat16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ToFromFloat32, f16, DType::Float16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ToFloat32, bf16, DType::BFloat16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ToFloat32, f16, DType::Float16)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
