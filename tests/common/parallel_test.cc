// The thread pool (src/common/parallel.h) and the thread setting
// (dtensor/threads.h): chunks, nesting, errors, and LocalTensor's O(1) rank
// lookup that the parallel rank loop leans on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "dtensor/error.h"
#include "dtensor/local_tensor.h"
#include "dtensor/threads.h"
#include "world/shard_map.h"

namespace dtensor {
namespace {

// Restores the thread setting a test changes.
class ThreadsTest : public ::testing::Test {
 protected:
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = num_threads();
};

TEST_F(ThreadsTest, ChunksCoverTheRangeOnceInFixedPieces) {
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 5, 64, 1000, 1001}) {
      for (int64_t grain : {1, 7, 64, 2000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::vector<std::pair<int64_t, int64_t>> seen(static_cast<size_t>((n + grain - 1) / grain));
        detail::parallel_for(n, grain, [&](int64_t b, int64_t e) {
          seen[static_cast<size_t>(b / grain)] = {b, e};
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << i;
        // The chunks are [k*grain, min(n, (k+1)*grain)) whatever the threads.
        for (size_t k = 0; k < seen.size(); ++k) {
          EXPECT_EQ(seen[k].first, static_cast<int64_t>(k) * grain);
          EXPECT_EQ(seen[k].second, std::min<int64_t>(n, (static_cast<int64_t>(k) + 1) * grain));
        }
      }
    }
  }
}

TEST_F(ThreadsTest, UsesSeveralThreadsAndNestedLoopsRunInline) {
  set_num_threads(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> nested_inline{0};
  detail::parallel_for(64, 1, [&](int64_t, int64_t) {
    EXPECT_TRUE(detail::in_parallel_region());
    EXPECT_EQ(detail::threads_available(), 1);
    const auto me = std::this_thread::get_id();
    detail::parallel_for(8, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() == me) nested_inline++;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(me);
  });
  EXPECT_FALSE(detail::in_parallel_region());
  EXPECT_EQ(nested_inline, 64 * 8);
  EXPECT_GT(ids.size(), 1u);  // 64 sleeping chunks on 4 threads
}

TEST_F(ThreadsTest, TheLowestFailingChunksErrorReachesTheCaller) {
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    std::atomic<int> ran{0};
    try {
      detail::parallel_for(40, 1, [&](int64_t b, int64_t) {
        ran++;
        if (b == 7 || b == 30) throw std::runtime_error("chunk " + std::to_string(b));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk 7");
    }
    if (threads > 1) {
      EXPECT_EQ(ran, 40);  // the others still ran
    }
  }
  // The pool is usable afterwards.
  std::atomic<int> n{0};
  detail::parallel_for(10, 1, [&](int64_t, int64_t) { n++; });
  EXPECT_EQ(n, 10);
}

TEST_F(ThreadsTest, TwoProgramThreadsCanRunRegionsAtOnce) {
  set_num_threads(3);
  std::atomic<int64_t> total{0};
  auto job = [&] {
    for (int r = 0; r < 50; ++r)
      detail::parallel_for(100, 3, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread a(job), b(job);
  a.join();
  b.join();
  EXPECT_EQ(total, 2 * 50 * 100);
}

TEST_F(ThreadsTest, BadSettingsAreRefused) {
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(5000), Error);
  try {
    set_num_threads(-2);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-2"), std::string::npos) << e.what();
  }
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  detail::parallel_for(4, 1, [&](int64_t, int64_t) { EXPECT_THROW(set_num_threads(3), Error); });
}

TEST_F(ThreadsTest, MapShardsKeepsRanksAndOrderOnAnyThreadCount) {
  LocalTensor in;
  for (int r = 0; r < 64; ++r) in.set(r, Tensor::full({128, 128}, r));  // 4 MiB in all
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    const LocalTensor out = detail::map_shards(in, [] { return int64_t{128 * 128 * 4}; }, [&](int64_t i) {
      return in.shards()[static_cast<size_t>(i)].second.clone();
    });
    ASSERT_EQ(out.size(), 64u);
    for (int r = 0; r < 64; ++r) EXPECT_EQ(out.shard(r).to_vector<float>()[5], r);
  }
}

TEST(LocalTensorLookup, EvenlySpacedAndIrregularRanks) {
  // Sub-mesh ranks (stride 32), inserted out of order.
  LocalTensor t;
  for (int r : {64, 0, 96, 32}) t.set(r, Tensor::full({1}, r));
  EXPECT_EQ(t.ranks(), (std::vector<int>{0, 32, 64, 96}));
  for (int r : {0, 32, 64, 96}) EXPECT_EQ(t.shard(r).to_vector<float>()[0], r);
  for (int r : {-32, 1, 31, 33, 128, 95}) EXPECT_FALSE(t.holds(r)) << r;
  // An irregular set falls back to searching.
  t.set(5, Tensor::full({1}, 5));
  EXPECT_EQ(t.ranks(), (std::vector<int>{0, 5, 32, 64, 96}));
  for (int r : {0, 5, 32, 64, 96}) EXPECT_EQ(t.shard(r).to_vector<float>()[0], r);
  EXPECT_FALSE(t.holds(6));
  EXPECT_THROW(t.shard(6), Error);
  // Replacing keeps the set.
  t.set(32, Tensor::full({1}, -1));
  EXPECT_EQ(t.shard(32).to_vector<float>()[0], -1);
  EXPECT_EQ(t.size(), 5u);
  // The constructor wants ascending ranks.
  std::vector<std::pair<int, Tensor>> bad{{3, Tensor()}, {1, Tensor()}};
  EXPECT_THROW(LocalTensor{bad}, Error);
  LocalTensor one(std::vector<std::pair<int, Tensor>>{{7, Tensor::full({1}, 7)}});
  EXPECT_TRUE(one.holds(7));
  EXPECT_FALSE(one.holds(8));
}

}  // namespace
}  // namespace dtensor
