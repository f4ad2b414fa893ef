// Internal: a test-and-set lock for short critical sections that are almost
// never contended (a thread's allocator cache, the lookups of the plan and
// propagation caches).
//
// Why not std::mutex: an uncontended pthread mutex costs a few dozen
// instructions to lock and unlock, a noticeable share of an op on small
// shards (a DTensor add of 8x8 shards costs about 1,000 instructions over
// its kernels); this costs a handful. A waiter yields its core rather than
// sleeping, so the sections it guards must stay short: no I/O, no waiting
// on other threads.
#pragma once

#include <atomic>
#include <thread>

namespace dtensor::detail {

class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace dtensor::detail
