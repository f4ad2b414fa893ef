// The dispatch level behind simd_dispatch (simd.h).
#include "tensor/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "dtensor/error.h"

namespace dtensor::detail {
namespace {

SimdLevel detect() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wide
  // registers (XGETBV), so a level it reports is usable.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("bmi2")) {
    return SimdLevel::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) return SimdLevel::kAvx2;
  return SimdLevel::kBaseline;
}

SimdLevel from_env(SimdLevel cpu) {
  const char* v = std::getenv("DTENSOR_SIMD");
  if (v == nullptr || *v == '\0') return cpu;
  SimdLevel want = cpu;
  if (std::strcmp(v, "baseline") == 0) want = SimdLevel::kBaseline;
  else if (std::strcmp(v, "avx2") == 0) want = SimdLevel::kAvx2;
  else if (std::strcmp(v, "avx512") == 0) want = SimdLevel::kAvx512;
  else DT_THROW("DTENSOR_SIMD=", v, " is not a level (expected baseline, avx2 or avx512)");
  return want < cpu ? want : cpu;
}

std::atomic<int> level{-1};  // -1: not chosen yet

}  // namespace

SimdLevel simd_cpu_level() {
  static const SimdLevel cpu = detect();
  return cpu;
}

SimdLevel simd_level() {
  int l = level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = static_cast<int>(from_env(simd_cpu_level()));
    level.store(l, std::memory_order_relaxed);
  }
  return static_cast<SimdLevel>(l);
}

void set_simd_level(SimdLevel want) {
  const SimdLevel cpu = simd_cpu_level();
  level.store(static_cast<int>(want < cpu ? want : cpu), std::memory_order_relaxed);
}

const char* simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kBaseline: break;
  }
  return "baseline";
}

}  // namespace dtensor::detail
