// Tests of the caching allocator under Storage (src/tensor/allocator.h):
// size classes, reuse across near sizes, the byte limit and its LRU
// eviction, release, threads allocating and freeing each other's blocks, and
// the refusal of sizes beyond physical memory.
#include "tensor/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/tensor.h"

using namespace dtensor;
using namespace dtensor::detail;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;
#else
constexpr bool kCaching = true;
#endif

constexpr size_t kMiB = size_t{1} << 20;

// Each test starts from an empty cache under a known limit and leaves the
// process's limit as it found it.
class Allocator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kCaching) GTEST_SKIP() << "nothing is cached under AddressSanitizer";
    saved_limit_ = cache_limit();
    release_cached_blocks();
    set_cache_limit(256 * kMiB);
  }
  void TearDown() override {
    if (!kCaching) return;
    release_cached_blocks();
    set_cache_limit(saved_limit_);
  }

 private:
  size_t saved_limit_ = 0;
};

}  // namespace

TEST(AllocatorClasses, BlockSizesAreAlignedAndTight) {
  size_t previous = 0;
  for (size_t n = 0; n < (size_t{1} << 24); n = n < 4096 ? n + 1 : n + n / 7 + 1) {
    const size_t b = block_size(n);
    ASSERT_GE(b, std::max<size_t>(n, 1)) << n;
    ASSERT_EQ(b % 64, 0u) << n;
    ASSERT_GE(b, previous) << n;  // classes grow with the request
    // At most a fifth of a block is padding (beyond the 64-byte rounding).
    if (kCaching && n > 256) {
      ASSERT_LE(b, n + n / 4) << n;
    }
    previous = b;
  }
  if (kCaching) {
    EXPECT_EQ(block_size(1), 64u);
    EXPECT_EQ(block_size(257), 320u);
    EXPECT_EQ(block_size(512), 512u);
    EXPECT_EQ(block_size(513), 640u);
    EXPECT_EQ(block_size(64 * kMiB + 1), 80 * kMiB);
  }
}

TEST(AllocatorClasses, AllocationsAreAlignedAndWritable) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{4097}, size_t{300000}, 3 * kMiB}) {
    void* p = allocate(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    std::memset(p, 0xab, block_size(n));
    deallocate(p, n);
  }
}

// Blocks of 4 MiB and more start on a 2 MiB boundary (so the kernel can back
// them with transparent huge pages) and are whole: every byte writable, and
// freeing them to the OS (release) unmaps exactly what was mapped.
TEST_F(Allocator, LargeBlocksAreHugePageAligned) {
  for (size_t n : {4 * kMiB, 5 * kMiB + 3, 64 * kMiB - 100}) {
    void* p = allocate(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 * kMiB), 0u) << n;
    std::memset(p, 0x5a, block_size(n));
    deallocate(p, n);
  }
  release_cached_blocks();
  // Below the threshold, page alignment is all an mmap gives.
  void* q = allocate(3 * kMiB);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  deallocate(q, 3 * kMiB);
}

TEST_F(Allocator, ReusesBlocksOfNearSizes) {
  // One size class per (small, large) pair: a freed block serves the other.
  for (auto [first, second] : {std::pair<size_t, size_t>{1000, 1010}, {100000, 99000},
                               {3 * kMiB - 4096, 3 * kMiB}, {64 * kMiB, 64 * kMiB - 100}}) {
    ASSERT_EQ(block_size(first), block_size(second));
    void* p = nullptr;
    {
      Storage s(first);
      p = s.data();
    }
    const AllocatorStats before = allocator_stats();
    Storage t(second);
    EXPECT_EQ(t.data(), p) << first << " then " << second;
    const AllocatorStats after = allocator_stats();
    EXPECT_EQ(after.hits, before.hits + 1);
    EXPECT_EQ(after.misses, before.misses);
  }
}

TEST_F(Allocator, TensorResultsReuseFreedBlocks) {
  const Tensor a = Tensor::randn({8, 8}, 1);
  const Tensor b = Tensor::randn({8, 8}, 2);
  { Tensor warm = add(a, b); }
  const AllocatorStats before = allocator_stats();
  for (int i = 0; i < 100; ++i) {
    Tensor c = add(a, b);
    ASSERT_FLOAT_EQ(c.data_ptr<float>()[63], a.data_ptr<float>()[63] + b.data_ptr<float>()[63]);
  }
  EXPECT_EQ(allocator_stats().misses, before.misses);
}

TEST_F(Allocator, EvictsLeastRecentlyFreedFirst) {
  // Large classes go straight to the shared pool, so the order is exact.
  set_cache_limit(3 * kMiB);
  const size_t a_size = kMiB, b_size = kMiB + kMiB / 4, c_size = kMiB + kMiB / 2;
  void* a = allocate(a_size);
  void* b = allocate(b_size);
  void* c = allocate(c_size);
  deallocate(a, a_size);
  deallocate(b, b_size);
  const AllocatorStats full = allocator_stats();
  EXPECT_EQ(full.bytes_cached, a_size + b_size);
  deallocate(c, c_size);  // 3.75 MiB > 3 MiB: a, the oldest, goes
  AllocatorStats s = allocator_stats();
  EXPECT_EQ(s.evictions, full.evictions + 1);
  EXPECT_EQ(s.bytes_evicted, full.bytes_evicted + a_size);
  EXPECT_EQ(s.bytes_cached, b_size + c_size);

  // b and c are still there; a's size misses.
  void* c2 = allocate(c_size);
  void* b2 = allocate(b_size);
  EXPECT_EQ(c2, c);
  EXPECT_EQ(b2, b);
  const uint64_t misses = allocator_stats().misses;
  void* a2 = allocate(a_size);
  EXPECT_EQ(allocator_stats().misses, misses + 1);

  // Reuse makes a block recent again: free b, a, c; take b back and free it:
  // now a is the oldest and the next overflow evicts it, not b.
  deallocate(b2, b_size);
  deallocate(a2, a_size);
  void* b3 = allocate(b_size);
  EXPECT_EQ(b3, b2);
  deallocate(b3, b_size);
  s = allocator_stats();
  deallocate(c2, c_size);
  EXPECT_EQ(allocator_stats().bytes_evicted, s.bytes_evicted + a_size);
  EXPECT_EQ(allocate(b_size), b3);
  deallocate(b3, b_size);
}

TEST_F(Allocator, NeverHoldsMoreThanTheLimit) {
  set_cache_limit(kMiB);
  std::mt19937_64 rng(7);
  std::vector<std::pair<void*, size_t>> live;
  for (int i = 0; i < 2000; ++i) {
    const size_t n = std::uniform_int_distribution<size_t>(1, 600000)(rng);
    live.emplace_back(allocate(n), n);
    if (live.size() > 8 || rng() % 2 == 0) {
      const size_t k = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      deallocate(live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_LE(allocator_stats().bytes_cached, kMiB);
  }
  for (auto [p, n] : live) deallocate(p, n);
  EXPECT_LE(allocator_stats().bytes_cached, kMiB);

  // A block larger than the whole limit is never kept.
  void* big = allocate(2 * kMiB);
  deallocate(big, 2 * kMiB);
  EXPECT_LE(allocator_stats().bytes_cached, kMiB);

  // Lowering the limit evicts down to it; 0 caches nothing.
  set_cache_limit(0);
  EXPECT_EQ(allocator_stats().bytes_cached, 0u);
  void* p = allocate(1000);
  deallocate(p, 1000);
  EXPECT_EQ(allocator_stats().bytes_cached, 0u);
}

TEST_F(Allocator, ReleaseReturnsEverythingCached) {
  std::vector<std::pair<void*, size_t>> blocks;
  size_t total = 0;
  for (size_t n : {size_t{100}, size_t{5000}, size_t{200000}, 2 * kMiB, 9 * kMiB}) {
    blocks.emplace_back(allocate(n), n);
    total += block_size(n);
  }
  for (auto [p, n] : blocks) deallocate(p, n);
  EXPECT_EQ(allocator_stats().bytes_cached, total);
  EXPECT_EQ(release_cached_memory(), total);
  EXPECT_EQ(allocator_stats().bytes_cached, 0u);
  EXPECT_EQ(release_cached_memory(), 0u);
}

TEST_F(Allocator, BlocksOfAnExitedThreadAreReused) {
  void* p = nullptr;
  std::thread([&] {
    p = allocate(4000);
    deallocate(p, 4000);  // into this thread's cache, which moves to the pool at exit
  }).join();
  EXPECT_EQ(allocator_stats().bytes_cached, block_size(4000));
  void* q = allocate(4000);
  EXPECT_EQ(q, p);
  deallocate(q, 4000);
}

// Threads allocate blocks of mixed sizes, stamp them, and free half of their
// own and blocks other threads handed over: a block handed out twice, or
// reused while live, shows up as a broken stamp.
TEST_F(Allocator, ThreadsAllocateAndFreeEachOthersBlocks) {
  set_cache_limit(8 * kMiB);  // small enough that eviction runs concurrently too
  constexpr int kThreads = 8;
  constexpr int kSteps = 4000;
  struct Block {
    uint64_t* p;
    size_t n;
    uint64_t stamp;
  };
  std::mutex handed_mu;
  std::vector<Block> handed;
  auto check_and_free = [](const Block& b) {
    EXPECT_EQ(b.p[0], b.stamp);
    EXPECT_EQ(b.p[block_size(b.n) / 8 - 1], b.stamp);
    deallocate(b.p, b.n);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<Block> own;
      for (int i = 0; i < kSteps; ++i) {
        // Mostly small, sometimes above the 256 KiB split.
        const size_t n = rng() % 16 == 0 ? std::uniform_int_distribution<size_t>(256 << 10, 3 << 20)(rng)
                                         : std::uniform_int_distribution<size_t>(8, 70000)(rng);
        Block b{static_cast<uint64_t*>(allocate(n)), n,
                (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(i)};
        ASSERT_NE(b.p, nullptr);
        b.p[0] = b.stamp;
        b.p[block_size(n) / 8 - 1] = b.stamp;
        if (rng() % 2 == 0) {
          std::lock_guard<std::mutex> lock(handed_mu);
          handed.push_back(b);
        } else {
          own.push_back(b);
        }
        if (own.size() > 16) {
          check_and_free(own.front());
          own.erase(own.begin());
        }
        Block other{nullptr, 0, 0};
        {
          std::lock_guard<std::mutex> lock(handed_mu);
          if (handed.size() > 32) {
            other = handed.back();
            handed.pop_back();
          }
        }
        if (other.p != nullptr) check_and_free(other);
      }
      for (const Block& b : own) check_and_free(b);
    });
  }
  for (auto& th : threads) th.join();
  for (const Block& b : handed) check_and_free(b);
  const AllocatorStats s = allocator_stats();
  EXPECT_LE(s.bytes_cached, 8 * kMiB);
  EXPECT_GT(s.hits, 0u);
  EXPECT_EQ(release_cached_memory(), s.bytes_cached);
}

// bytes_allocated follows the blocks handed out (cached or not), and the
// peak since a reset is the most of it. Other threads of this test program
// allocate nothing while it runs (gtest runs one test at a time).
TEST(AllocatorCounts, AllocatedBytesAndTheirPeak) {
  reset_peak_bytes_allocated();
  const AllocatorStats s0 = allocator_stats();
  EXPECT_EQ(s0.peak_bytes_allocated, s0.bytes_allocated);
  {
    void* a = allocate(4000);
    void* b = allocate(6 * kMiB);  // a large block
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    const AllocatorStats s1 = allocator_stats();
    EXPECT_EQ(s1.bytes_allocated - s0.bytes_allocated, block_size(4000) + block_size(6 * kMiB));
    EXPECT_EQ(s1.peak_bytes_allocated, s1.bytes_allocated);
    deallocate(b, 6 * kMiB);
    deallocate(a, 4000);
  }
  const AllocatorStats s2 = allocator_stats();
  EXPECT_EQ(s2.bytes_allocated, s0.bytes_allocated);
  EXPECT_EQ(s2.peak_bytes_allocated - s0.bytes_allocated, block_size(4000) + block_size(6 * kMiB));
  reset_peak_bytes_allocated();
  EXPECT_EQ(allocator_stats().peak_bytes_allocated, s0.bytes_allocated);
}

TEST(AllocatorLimits, SizesBeyondPhysicalMemoryThrow) {
  const size_t physical = physical_memory_bytes();
  if (physical >= (size_t{1} << 50)) GTEST_SKIP() << "a machine with a petabyte of memory";
  const size_t asked = physical + 1;
  try {
    Storage s(asked);
    FAIL() << "a storage of " << asked << " bytes was allocated";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(asked) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(physical) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("physical memory"), std::string::npos) << what;
  }
  // The allocator itself refuses what no size class can hold.
  EXPECT_EQ(allocate(SIZE_MAX), nullptr);
}
