// Internal: runtime choice of the vector instruction set for hot loops.
//
// The library is built for baseline x86-64 (SSE2) unless DTENSOR_NATIVE is
// set, yet most machines it runs on have AVX2 or AVX-512. simd_dispatch(f)
// runs f() through one of three copies of the same code, compiled for
// AVX-512, AVX2 or the baseline, picked once from the CPU:
//
//   detail::simd_dispatch([&] { for (...) softmax_row(x, y, n); });
//
// Each copy is a template wrapper carrying a target attribute plus
// `flatten`, which inlines every call inside f (the row kernels, their
// lambdas, the functors) into the wrapper, so the whole loop nest is
// compiled for that instruction set. Calls that cannot be inlined (libm,
// other translation units) run their ordinary code.
//
// The copies give the same bits: they perform the same IEEE operations in
// the same order. Reductions are written with explicit lanes (the compiler
// may not reassociate floating point), exp is one polynomial for every
// path, and FMA contraction is off in the files that dispatch (the pragma
// below) because the AVX-512 target enables FMA and GCC contracts a*b+c by
// default in C++ (even with -std=c++20). tests/tensor/threads_test.cc checks
// every level against the others bit for bit.
//
// DTENSOR_SIMD=baseline|avx2|avx512 in the environment, or
// set_simd_level() (tests), caps the level; it never goes above the CPU's.
#pragma once

// Files that call simd_dispatch put this first, before any include:
//   #pragma GCC optimize("fp-contract=off")
// (a pragma cannot be issued from a macro portably, hence the note).

namespace dtensor::detail {

enum class SimdLevel : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU (and OS) supports.
SimdLevel simd_cpu_level();
// The level kernels run at: the CPU's, capped by DTENSOR_SIMD or the last
// set_simd_level().
SimdLevel simd_level();
// Caps the level (for tests and benchmarks); clamped to simd_cpu_level().
// Takes effect for the next dispatch; not for use while kernels run.
void set_simd_level(SimdLevel level);
const char* simd_level_name(SimdLevel level);

// Under AddressSanitizer (the sanitizer build, at -Og) the copies are not
// flattened: f's code is then compiled once and shared by the three
// wrappers. -Og vectorises nothing, so the flattened copies differed only
// in instruction encoding and the sanitizers checked the same accesses
// three times, while forcing every walk, kernel and functor inline under
// instrumentation took most of that build's compile time (src/tensor/
// reduce.cc alone: 480 s of CPU). The Release build keeps the copies, and
// tests/tensor/threads_test.cc compares their bits there.
#if defined(__SANITIZE_ADDRESS__)
#define DTENSOR_SIMD_FLATTEN
#else
#define DTENSOR_SIMD_FLATTEN flatten
#endif

// The AVX-512 subset every AVX-512 CPU since Skylake-SP has.
template <class F>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,bmi2"), DTENSOR_SIMD_FLATTEN)) void
run_avx512(F& f) {
  f();
}
template <class F>
__attribute__((target("avx2,bmi2"), DTENSOR_SIMD_FLATTEN)) void run_avx2(F& f) {
  f();
}
template <class F>
__attribute__((DTENSOR_SIMD_FLATTEN)) void run_baseline(F& f) {
  f();
}

template <class F>
void simd_dispatch(F&& f) {
  switch (simd_level()) {
    case SimdLevel::kAvx512: run_avx512(f); return;
    case SimdLevel::kAvx2: run_avx2(f); return;
    case SimdLevel::kBaseline: break;
  }
  run_baseline(f);
}

// For kernels dispatched run by run rather than around a whole loop nest:
// f through simd_dispatch when its run of n elements is long enough to pay
// for picking the level (a relaxed load and a switch), else f's baseline
// code inline. The copies give the same bits, so which one ran never shows.
// Only the run's loop is copied per instruction set, not the walk around it.
inline constexpr long kSimdMinRun = 16;
template <class F>
void simd_dispatch_run(long n, F&& f) {
  if (n >= kSimdMinRun) simd_dispatch(f);
  else f();
}

}  // namespace dtensor::detail
