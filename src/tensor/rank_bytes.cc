// Bytes by rank (allocator.h, memory.h's RankMemoryTracker): a table of
// counters indexed by rank, made when a tracker starts. Storages count on
// the rank of the first LocalTensor that holds them (Storage::count_on_rank)
// and leave at destruction, on any thread: the counters are atomics, and a
// peak moves up by compare-and-swap as the category counters' do.
#include <atomic>
#include <cstdint>
#include <memory>

#include "dtensor/error.h"
#include "tensor/allocator.h"

namespace dtensor::detail {

namespace {

struct RankCounter {
  std::atomic<int64_t> now[kMemoryCategories] = {};
  std::atomic<int64_t> peak[kMemoryCategories] = {};
};

struct RankTable {
  uint8_t epoch = 0;
  int size = 0;
  std::unique_ptr<RankCounter[]> ranks;
};

std::atomic<RankTable*> table{nullptr};
uint8_t last_epoch = 0;
constinit thread_local int paused = 0;

void raise(std::atomic<int64_t>& peak, int64_t now) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void add(RankCounter& c, int index, int64_t bytes) {
  const int64_t now = c.now[index].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (bytes > 0) raise(c.peak[index], now);
}

}  // namespace

uint8_t count_rank(int rank, uint8_t category, size_t bytes) {
  RankTable* t = table.load(std::memory_order_acquire);
  if (t == nullptr || paused > 0 || rank < 0 || rank >= t->size) return 0;
  RankCounter& c = t->ranks[static_cast<size_t>(rank)];
  add(c, 0, static_cast<int64_t>(bytes));
  if (category != 0) add(c, category, static_cast<int64_t>(bytes));
  return t->epoch;
}

void uncount_rank(uint8_t epoch, int rank, uint8_t category, size_t bytes) {
  RankTable* t = table.load(std::memory_order_acquire);
  if (t == nullptr || t->epoch != epoch) return;  // counted by a tracker that has stopped
  RankCounter& c = t->ranks[static_cast<size_t>(rank)];
  add(c, 0, -static_cast<int64_t>(bytes));
  if (category != 0) add(c, category, -static_cast<int64_t>(bytes));
}

void start_rank_counting(int ranks) {
  DT_CHECK(table.load() == nullptr, "RankMemoryTracker: another tracker is running; one at a time");
  auto t = std::make_unique<RankTable>();
  last_epoch = static_cast<uint8_t>(last_epoch == 255 ? 1 : last_epoch + 1);
  t->epoch = last_epoch;
  t->size = ranks;
  t->ranks = std::make_unique<RankCounter[]>(static_cast<size_t>(ranks));
  table.store(t.release(), std::memory_order_release);
}

void stop_rank_counting() { delete table.exchange(nullptr, std::memory_order_acq_rel); }

RankCountingPause::RankCountingPause() { ++paused; }
RankCountingPause::~RankCountingPause() { --paused; }

bool rank_counting() { return table.load(std::memory_order_relaxed) != nullptr; }

RankBytes rank_bytes(int rank) {
  RankBytes out;
  RankTable* t = table.load(std::memory_order_acquire);
  if (t == nullptr || rank < 0 || rank >= t->size) return out;
  const RankCounter& c = t->ranks[static_cast<size_t>(rank)];
  for (int i = 0; i < kMemoryCategories; ++i) {
    out.now[i] = c.now[i].load(std::memory_order_relaxed);
    out.peak[i] = c.peak[i].load(std::memory_order_relaxed);
  }
  return out;
}

void reset_rank_peaks() {
  RankTable* t = table.load(std::memory_order_acquire);
  if (t == nullptr) return;
  for (int r = 0; r < t->size; ++r)
    for (int i = 0; i < kMemoryCategories; ++i)
      t->ranks[r].peak[i].store(t->ranks[r].now[i].load(std::memory_order_relaxed),
                                std::memory_order_relaxed);
}

}  // namespace dtensor::detail
