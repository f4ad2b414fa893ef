// Helpers the benchmark programs share.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
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
