// The tests of kernels that must give the same bits at every thread count
// and SIMD level (threads_test.cc, transpose_test.cc): the levels this CPU
// runs, and a fixture that puts back the thread count and level a test
// changed.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "dtensor/threads.h"
#include "tensor/simd.h"

namespace dtensor::testing {

// The SIMD levels this CPU has, lowest first.
inline std::vector<detail::SimdLevel> simd_levels() {
  using detail::SimdLevel;
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kBaseline, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (l <= detail::simd_cpu_level()) out.push_back(l);
  return out;
}

// Restores the thread count and SIMD level a test changed.
class ThreadsAndSimdTest : public ::testing::Test {
 protected:
  void SetUp() override { threads_ = num_threads(); }
  void TearDown() override {
    set_num_threads(threads_);
    detail::set_simd_level(detail::SimdLevel::kAvx512);
  }

 private:
  int threads_ = 1;
};

}  // namespace dtensor::testing
