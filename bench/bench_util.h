// Helpers the benchmark programs share.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <type_traits>
#include <vector>

namespace dtensor::bench {

// ns per call of f, measured over a fixed number of calls after a tenth as
// many to warm up: for side-by-side figures (DTensor vs by hand) measured
// in one process, next to Google Benchmark's own timing.
template <class F>
double ns_per_call(F&& f, int calls = 20000) {
  for (int i = 0; i < calls / 10; ++i) f();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / calls;
}

// Calls a() and b() in turn, once each per iteration of `state`, timed
// apart (wall). On a machine whose memory bandwidth moves with its
// neighbours' load, two benchmarks run one after the other can differ by
// more than the gap being measured; calls taken alternately see the same
// load. What a call returns lives until both are timed, so freeing it is
// not counted. Counters: a_name and b_name, each call's median time in
// Unit (std::milli: ms, std::micro: us), and `ratio`, the median of the
// per-iteration ratios a / b.
template <class Unit, class A, class B>
void paired(benchmark::State& state, A&& a, const char* a_name, B&& b, const char* b_name) {
  using Clock = std::chrono::steady_clock;
  auto call = [](auto& f) {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      return 0;
    } else {
      return f();
    }
  };
  std::vector<double> ta, tb, ratio;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    [[maybe_unused]] const auto kept_a = call(a);
    const auto t1 = Clock::now();
    [[maybe_unused]] const auto kept_b = call(b);
    const auto t2 = Clock::now();
    ta.push_back(std::chrono::duration<double, Unit>(t1 - t0).count());
    tb.push_back(std::chrono::duration<double, Unit>(t2 - t1).count());
    ratio.push_back(ta.back() / tb.back());
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  state.counters[a_name] = median(ta);
  state.counters[b_name] = median(tb);
  state.counters["ratio"] = median(ratio);
}

// Runs the registered benchmarks. Under MPI every process runs them (their
// collectives must line up) but only the one that `reports` (rank 0's)
// prints; the others report to a reporter that prints nothing.
inline void run_benchmarks(bool reports) {
  class Silent : public benchmark::BenchmarkReporter {
   public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  };
  if (reports) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
}

}  // namespace dtensor::bench
