// ByteCopier (src/tensor/copy_bytes.h) against memcpy: every length from 0
// to 1,100 bytes and lengths around 4, 8 and 16 KiB (the loop's bounds are
// 256 B and 16 KiB), at source and destination offsets aligned to 32 bytes
// and not, on every SIMD level the CPU has. The bytes around the
// destination range must stay as they were: the loop's last 32-byte store
// overlaps bytes it already wrote, never bytes past the end.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/copy_bytes.h"
#include "tensor/simd_threads.h"

using namespace dtensor;

namespace {

using CopyBytesTest = dtensor::testing::ThreadsAndSimdTest;

TEST_F(CopyBytesTest, MatchesMemcpyAtEveryLengthAndOffset) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t base : {detail::kCopyLoopMax, size_t{4096}, size_t{8192}}) {
    for (size_t d = 0; d < 70; ++d) {
      lengths.push_back(base - 35 + d);
    }
  }
  const size_t pad = 64, max_len = detail::kCopyLoopMax + 64;
  std::mt19937 gen(7);
  std::vector<unsigned char> src(max_len + 2 * pad);
  for (unsigned char& b : src) b = static_cast<unsigned char>(gen());
  for (detail::SimdLevel level : dtensor::testing::simd_levels()) {
    detail::set_simd_level(level);
    const detail::ByteCopier copy;
    for (size_t n : lengths) {
      for (size_t so : {size_t{0}, size_t{5}, size_t{32}}) {
        for (size_t dof : {size_t{0}, size_t{13}, size_t{40}}) {
          std::vector<unsigned char> dst(n + 2 * pad + 40);
          for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<unsigned char>(k * 7);
          std::vector<unsigned char> want = dst;
          std::memcpy(want.data() + pad + dof, src.data() + pad + so, n);
          copy(dst.data() + pad + dof, src.data() + pad + so, n);
          ASSERT_EQ(dst, want) << "length " << n << ", source offset " << so
                               << ", destination offset " << dof << ", level "
                               << detail::simd_level_name(level);
        }
      }
    }
  }
}

}  // namespace
