// The checkpoint checksum is XXH3-64 at every SIMD level the CPU has: the
// values checkpoints already record (computed by Debian's libxxhash 0.8.1),
// for every input-length regime of XXH3 (0, 1-3, 4-8, 9-16, 17-128,
// 129-240 bytes, longer: stripes and blocks), at aligned and unaligned
// addresses. A checkpoint saved on one machine checks on any other.
#include "checkpoint/checksum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "tensor/simd.h"
#include "tensor/simd_threads.h"

namespace checksum_test {

using dtensor::detail::SimdLevel;
namespace ckd = ::dtensor::checkpoint::detail;

using ChecksumTest = dtensor::testing::ThreadsAndSimdTest;

// Bytes ((i * 131 + 7) >> 3) mod 256 from index `from`.
std::vector<unsigned char> pattern(size_t n, size_t from) {
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(((i + from) * 131 + 7) >> 3);
  return out;
}

TEST_F(ChecksumTest, IsXxh3AtEverySimdLevel) {
  // XXH3_64bits of the first n bytes of pattern(n, 0), from libxxhash.
  const std::pair<int64_t, uint64_t> known[] = {
      {0, 0x2d06800538d394c2ULL},       {1, 0xc44bdff4074eecdbULL},
      {3, 0x1a3a66496931073fULL},       {4, 0x280c98d888534be0ULL},
      {8, 0x7d85a1bc47fd2239ULL},       {9, 0x6d64deddef805babULL},
      {16, 0xc5d5eed7a53df7b8ULL},      {17, 0x947bafc2da6a69f5ULL},
      {128, 0x7f17a3f4a09a61c6ULL},     {129, 0x73e51527f6cdf0ceULL},
      {240, 0x5fdf622060a44058ULL},     {241, 0xde294e75b086ff27ULL},
      {1024, 0xd88d47d4c6df242fULL},    {4099, 0xe282c72a3e612a2bULL},
      {1048581, 0x63aad959b2b14703ULL}, {4194307, 0xceb5c0105e27199dULL},
  };
  const std::vector<unsigned char> bytes = pattern(4194307, 0);
  // The same bytes one address further on: the vector loads are unaligned.
  std::vector<unsigned char> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  for (SimdLevel level : dtensor::testing::simd_levels()) {
    dtensor::detail::set_simd_level(level);
    for (const auto& [n, want] : known) {
      EXPECT_EQ(ckd::checksum(bytes.data(), n), want)
          << n << " bytes at " << dtensor::detail::simd_level_name(level);
      EXPECT_EQ(ckd::checksum(shifted.data() + 1, n), want)
          << n << " unaligned bytes at " << dtensor::detail::simd_level_name(level);
    }
  }
}

// Each copy checksum() can pick, called directly, against the baseline on
// every length up to 2 KiB: every short-input path, partial stripes, and a
// whole 1 KiB block with its scramble.
TEST_F(ChecksumTest, TheCopiesAgreeOnEveryShortLength) {
  const std::vector<unsigned char> bytes = pattern(2048, 11);
  const SimdLevel cpu = dtensor::detail::simd_cpu_level();
  for (uint64_t n = 0; n <= bytes.size(); ++n) {
    const uint64_t want = ckd::xxh3_64_baseline(bytes.data(), n);
    if (cpu >= SimdLevel::kAvx2) {
      EXPECT_EQ(ckd::xxh3_64_avx2(bytes.data(), n), want) << n;
    }
    if (cpu >= SimdLevel::kAvx512) {
      EXPECT_EQ(ckd::xxh3_64_avx512(bytes.data(), n), want) << n;
    }
  }
}

}  // namespace checksum_test
