// The caching allocator under Storage (see allocator.h for the contract).
//
// Why cache at all: a fresh block costs more than most kernels that fill it.
// Below glibc's mmap threshold, freeing the top of the heap trims it and the
// next allocation grows it again, faulting its pages back in (a 64 KiB
// redistribute took 15x a memcpy of its bytes); above it, every block is a
// fresh mmap whose pages fault in 4 KiB at a time (an allocating add of 64 MiB
// took 7x a memcpy). Tensor programs allocate the same few sizes over and
// over (one step's activations), so a cache keyed by size class nearly always
// hits.
//
// Why size classes rather than exact sizes: shards of uneven splits, the
// last batch of an epoch and padded buffers differ by a few bytes; with exact
// matching each new size missed and, once the old cache was full, nothing new
// was cached at all.
//
// Why a cache per thread for small blocks: the thread pool runs the kernels
// of several simulated ranks at once, and small tensors are allocated far more
// often than large ones; the thread's own lock is uncontended except while
// another thread releases, trims or reads statistics. Large blocks are few,
// and one shared pool lets any thread reuse any of them.
#include "tensor/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/parallel.h"
#include "common/spin_lock.h"
#include "dtensor/error.h"
#include "dtensor/tensor.h"

namespace dtensor::detail {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheEnabled = false;
#else
constexpr bool kCacheEnabled = true;
#endif

constexpr size_t kAlign = 64;  // AVX-512 loads and cache lines
// Classes up to this size use the thread caches and malloc; larger ones the
// shared pool and mmap.
constexpr size_t kSmallMax = size_t{256} << 10;
// A thread's cache holds at most this (or a sixteenth of the limit, so that
// a small limit is not eaten up by the threads' caches).
constexpr size_t kThreadCacheMax = size_t{2} << 20;
// Larger requests are refused (their class size would overflow).
constexpr size_t kMaxRequest = size_t{1} << 62;
// Classes 0-3 are 64..256 bytes; then 4 per power of two, up to 2^64.
constexpr int kNumClasses = 4 + 4 * (64 - 8);

int size_class(size_t n) {
  if (n <= 256) return n <= 64 ? 0 : static_cast<int>((n - 1) / 64);
  const int k = 63 - __builtin_clzll(n - 1);  // 2^k < n <= 2^(k+1), k >= 8
  const size_t quarter = size_t{1} << (k - 2);
  return 4 + (k - 8) * 4 + static_cast<int>((n - 1 - (size_t{1} << k)) / quarter);
}

size_t class_bytes(int cls) {
  if (cls < 4) return static_cast<size_t>(cls + 1) * 64;
  const int k = (cls - 4) / 4 + 8;
  return (size_t{1} << k) + static_cast<size_t>((cls - 4) % 4 + 1) * (size_t{1} << (k - 2));
}

size_t round_to_align(size_t n) { return (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign; }

// Blocks of at least this many bytes are mapped on a 2 MiB boundary and
// offered to the kernel for transparent huge pages (MADV_HUGEPAGE; NumPy
// does the same from 4 MiB): a 64 MiB tensor then faults in 32 times instead
// of 16384, and a walk across its rows (a transposed operand) misses the TLB
// far less. Where THP is off, the advice is ignored.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeMin = size_t{4} << 20;

void* map_huge_aligned(size_t bytes) {
  // Map a huge page more than asked, keep the aligned middle, unmap the rest:
  // the block is then exactly [p, p + bytes) for munmap.
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned > base) munmap(raw, aligned - base);
  const uintptr_t end = base + span, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
#if defined(MADV_HUGEPAGE)
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

void* system_alloc(size_t bytes) {
  // Under ASan everything comes from malloc, which ASan tracks (it does not
  // poison unmapped pages of an mmap).
  if (!kCacheEnabled || bytes <= kSmallMax) return std::aligned_alloc(kAlign, bytes);
  if (bytes >= kHugeMin) return map_huge_aligned(bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void system_free(void* p, size_t bytes) {
  if (!kCacheEnabled || bytes <= kSmallMax) {
    std::free(p);
  } else {
    munmap(p, bytes);
  }
}

// A cached block describes itself in its first bytes (every block has at
// least 64), so the free lists need no memory of their own.
struct FreeBlock {
  FreeBlock* older;  // the owner's recency list
  FreeBlock* newer;
  FreeBlock* prev;   // the list of its class
  FreeBlock* next;
  size_t bytes;
  int cls;
};
static_assert(sizeof(FreeBlock) <= kAlign);

// Free blocks by class, newest first, and all of them by the order they were
// freed in. Not synchronised: each owner holds its own mutex.
class FreeLists {
 public:
  void push(void* p, int cls, size_t bytes) {
    auto* b = static_cast<FreeBlock*>(p);
    b->bytes = bytes;
    b->cls = cls;
    b->newer = nullptr;
    b->older = newest_;
    (newest_ != nullptr ? newest_->newer : oldest_) = b;
    newest_ = b;
    b->prev = nullptr;
    b->next = heads_[cls];
    if (b->next != nullptr) b->next->prev = b;
    heads_[cls] = b;
    bytes_ += bytes;
  }
  // The most recently freed block of the class (the likeliest to be in the
  // CPU's cache), or nullptr.
  FreeBlock* pop(int cls) {
    FreeBlock* b = heads_[cls];
    if (b != nullptr) unlink(b);
    return b;
  }
  FreeBlock* pop_oldest() {
    FreeBlock* b = oldest_;
    if (b != nullptr) unlink(b);
    return b;
  }
  size_t bytes() const { return bytes_; }

 private:
  void unlink(FreeBlock* b) {
    (b->older != nullptr ? b->older->newer : oldest_) = b->newer;
    (b->newer != nullptr ? b->newer->older : newest_) = b->older;
    (b->prev != nullptr ? b->prev->next : heads_[b->cls]) = b->next;
    if (b->next != nullptr) b->next->prev = b->prev;
    bytes_ -= b->bytes;
  }

  FreeBlock* heads_[kNumClasses] = {};
  FreeBlock* oldest_ = nullptr;
  FreeBlock* newest_ = nullptr;
  size_t bytes_ = 0;
};

// Blocks popped from a FreeLists, chained through `next` to be moved or
// freed once the lists' mutex is released.
struct Chain {
  FreeBlock* head = nullptr;
  size_t bytes = 0;
  size_t count = 0;
  void add(FreeBlock* b) {
    b->next = head;
    head = b;
    bytes += b->bytes;
    ++count;
  }
};

// The lock of a thread's cache (common/spin_lock.h). Its owner takes it on
// every allocation and free, other threads only to drain or read the cache
// (release, a lower limit, statistics), so it is almost never contended: a
// test-and-set costs a few instructions where a pthread mutex costs dozens,
// a tenth of what an 8x8 add costs in all.
struct ThreadCache {
  SpinLock mu;
  FreeLists lists;
  uint64_t hits = 0;  // under mu
};

// Lock order: registry_mu, then a thread's mu, then pool_mu.
struct Allocator {
  Allocator();

  std::mutex pool_mu;
  FreeLists pool;  // the shared pool, under pool_mu
  uint64_t hits = 0, misses = 0, evictions = 0, bytes_evicted = 0;  // under pool_mu

  std::mutex registry_mu;
  std::vector<ThreadCache*> threads;  // under registry_mu

  // Bytes in the pool and all thread caches. A block is counted before it
  // is pushed, so the sum never exceeds `limit`.
  std::atomic<size_t> held{0};
  std::atomic<size_t> limit;
  // Bytes of the blocks handed out and not yet freed, and their high-water
  // mark since the process started or reset_peak_bytes_allocated(). Beside
  // `held`, whose cache line every allocation and free writes already.
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak{0};
  // The high-water mark of allocated + held (the blocks taken from the
  // system and not returned: PyTorch's reserved memory). It grows only when
  // a block comes from the system, so only misses update it.
  std::atomic<size_t> peak_reserved{0};
};

void count_allocated(Allocator& a, size_t bytes) {
  const size_t now = a.allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = a.peak.load(std::memory_order_relaxed);
  while (now > peak && !a.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// After a block came from the system (not the cache).
void count_reserved(Allocator& a) {
  const size_t now = a.allocated.load(std::memory_order_relaxed) + a.held.load(std::memory_order_relaxed);
  size_t peak = a.peak_reserved.load(std::memory_order_relaxed);
  while (now > peak &&
         !a.peak_reserved.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void count_freed(Allocator& a, size_t bytes) {
  a.allocated.fetch_sub(bytes, std::memory_order_relaxed);
}

// "2G", "512M", "1048576"; throws on anything else.
size_t parse_bytes(const char* name, const char* text) {
  const std::string s = text;
  size_t pos = 0;
  unsigned long long value = 0;
  bool ok = !s.empty() && std::isdigit(static_cast<unsigned char>(s[0]));
  if (ok) {
    try {
      value = std::stoull(s, &pos);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  int shift = 0;
  if (ok && pos < s.size()) {
    switch (std::toupper(static_cast<unsigned char>(s[pos]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      default: ok = false;
    }
    ok = ok && pos + 1 == s.size() && value <= (SIZE_MAX >> shift);
  }
  DT_CHECK(ok, name, ": expected a number of bytes, optionally with a suffix K, M or G ",
           "(1073741824, 512M, 2G; 0 turns the cache off), got '", s, "'");
  return static_cast<size_t>(value) << shift;
}

Allocator::Allocator() {
  const char* text = std::getenv("DTENSOR_CACHE_BYTES");
  limit = text != nullptr && *text != '\0' ? parse_bytes("DTENSOR_CACHE_BYTES", text)
                                           : physical_memory_bytes() / 4;
}

Allocator& allocator() {
  static Allocator* a = new Allocator();  // never destroyed: storages may outlive statics
  return *a;
}

// Frees a chain of popped blocks; they are no longer counted in `held`.
void free_chain(Chain chain) {
  for (FreeBlock* b = chain.head; b != nullptr;) {
    FreeBlock* next = b->next;
    system_free(b, b->bytes);
    b = next;
  }
}

// Returns the least recently freed blocks of the shared pool to the system
// until `wanted` bytes are gone or the pool is empty; the bytes freed.
size_t evict(Allocator& a, size_t wanted) {
  Chain chain;
  {
    std::lock_guard<std::mutex> lock(a.pool_mu);
    while (chain.bytes < wanted) {
      FreeBlock* b = a.pool.pop_oldest();
      if (b == nullptr) break;
      chain.add(b);
    }
    a.held.fetch_sub(chain.bytes, std::memory_order_relaxed);
    a.evictions += chain.count;
    a.bytes_evicted += chain.bytes;
  }
  free_chain(chain);  // munmap outside the lock: it can take a while
  return chain.bytes;
}

// Counts `bytes` as held if the limit allows, evicting from the shared pool
// to make room; false when the block cannot be cached.
bool reserve(Allocator& a, size_t bytes) {
  size_t held = a.held.load(std::memory_order_relaxed);
  for (;;) {
    const size_t limit = a.limit.load(std::memory_order_relaxed);
    if (bytes > limit) return false;
    if (held > limit - bytes) {
      if (evict(a, held - (limit - bytes)) == 0) return false;  // the rest is in thread caches
      held = a.held.load(std::memory_order_relaxed);
      continue;
    }
    if (a.held.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed)) return true;
  }
}

// Moves the oldest blocks of a thread's cache to the shared pool until it
// holds at most `keep` bytes.
// REQUIRES: tc->mu is held.
void spill(Allocator& a, ThreadCache* tc, size_t keep) {
  if (tc->lists.bytes() <= keep) return;
  std::lock_guard<std::mutex> lock(a.pool_mu);
  while (tc->lists.bytes() > keep) {
    FreeBlock* b = tc->lists.pop_oldest();
    a.pool.push(b, b->cls, b->bytes);
  }
}

size_t thread_cache_max(const Allocator& a) {
  return std::min(kThreadCacheMax, a.limit.load(std::memory_order_relaxed) / 16);
}

// The calling thread's cache: registered on first use, and at thread exit
// emptied into the shared pool and dropped. The pointer is trivially
// destructible, so it stays readable while other thread_locals (which may
// own tensors) are destroyed; after the owner's destructor it is null and
// `t_cache_retired` sends blocks straight to the shared pool.
thread_local ThreadCache* t_cache = nullptr;
thread_local bool t_cache_retired = false;

struct ThreadCacheOwner {
  ~ThreadCacheOwner() {
    ThreadCache* tc = t_cache;
    t_cache = nullptr;
    t_cache_retired = true;
    if (tc == nullptr) return;
    Allocator& a = allocator();
    {
      std::lock_guard<std::mutex> registry(a.registry_mu);
      a.threads.erase(std::find(a.threads.begin(), a.threads.end(), tc));
      std::lock_guard<SpinLock> lock(tc->mu);
      spill(a, tc, 0);
      std::lock_guard<std::mutex> pool(a.pool_mu);
      a.hits += tc->hits;  // keeps the counts of exited threads
    }
    delete tc;
  }
};

[[gnu::noinline]] ThreadCache* new_thread_cache(Allocator& a) {
  if (t_cache_retired) return nullptr;
  thread_local ThreadCacheOwner owner;
  auto* tc = new ThreadCache();
  {
    std::lock_guard<std::mutex> registry(a.registry_mu);
    a.threads.push_back(tc);
  }
  t_cache = tc;
  return tc;
}

inline ThreadCache* thread_cache(Allocator& a) {
  if (t_cache != nullptr) [[likely]] return t_cache;
  return new_thread_cache(a);
}

// Empties every thread's cache into `chain` (to_system) or into the pool.
// REQUIRES: a.registry_mu is held.
void drain_threads(Allocator& a, Chain* to_system) {
  for (ThreadCache* tc : a.threads) {
    std::lock_guard<SpinLock> lock(tc->mu);
    if (to_system == nullptr) {
      spill(a, tc, 0);
    } else {
      while (FreeBlock* b = tc->lists.pop_oldest()) to_system->add(b);
    }
  }
}

}  // namespace

size_t block_size(size_t nbytes) {
  if (!kCacheEnabled) return round_to_align(nbytes);
  return class_bytes(size_class(nbytes));
}

void* allocate(size_t nbytes) {
  if (nbytes > kMaxRequest) return nullptr;
  Allocator& a = allocator();
  if (!kCacheEnabled) {
    void* p = std::aligned_alloc(kAlign, round_to_align(nbytes));
    if (p != nullptr) {
      count_allocated(a, round_to_align(nbytes));
      count_reserved(a);
    }
    return p;
  }
  const int cls = size_class(nbytes);
  const size_t bytes = class_bytes(cls);
  if (bytes <= kSmallMax) {
    if (ThreadCache* tc = thread_cache(a)) {
      std::lock_guard<SpinLock> lock(tc->mu);
      if (FreeBlock* b = tc->lists.pop(cls)) {
        ++tc->hits;
        a.held.fetch_sub(bytes, std::memory_order_relaxed);
        count_allocated(a, bytes);
        return b;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(a.pool_mu);
    if (FreeBlock* b = a.pool.pop(cls)) {
      ++a.hits;
      a.held.fetch_sub(bytes, std::memory_order_relaxed);
      count_allocated(a, bytes);
      return b;
    }
    ++a.misses;
  }
  void* p = system_alloc(bytes);
  if (p != nullptr) {
    count_allocated(a, bytes);
    count_reserved(a);
  }
  return p;
}

void deallocate(void* p, size_t nbytes) {
  if (p == nullptr) return;
  Allocator& a = allocator();
  if (!kCacheEnabled) {
    count_freed(a, round_to_align(nbytes));
    std::free(p);
    return;
  }
  const int cls = size_class(nbytes);
  const size_t bytes = class_bytes(cls);
  count_freed(a, bytes);
  if (!reserve(a, bytes)) {
    system_free(p, bytes);
    return;
  }
  if (bytes <= kSmallMax) {
    if (ThreadCache* tc = thread_cache(a)) {
      std::lock_guard<SpinLock> lock(tc->mu);
      tc->lists.push(p, cls, bytes);
      const size_t max = thread_cache_max(a);
      if (tc->lists.bytes() > max) spill(a, tc, max / 2);
      return;
    }
  }
  std::lock_guard<std::mutex> lock(a.pool_mu);
  a.pool.push(p, cls, bytes);
}

size_t release_cached_blocks() {
  if (!kCacheEnabled) return 0;
  Allocator& a = allocator();
  Chain chain;
  {
    std::lock_guard<std::mutex> registry(a.registry_mu);
    drain_threads(a, &chain);
    std::lock_guard<std::mutex> lock(a.pool_mu);
    while (FreeBlock* b = a.pool.pop_oldest()) chain.add(b);
    a.held.fetch_sub(chain.bytes, std::memory_order_relaxed);
  }
  free_chain(chain);
#if defined(__GLIBC__)
  malloc_trim(0);  // the small blocks went back to malloc; let it return them too
#endif
  return chain.bytes;
}

size_t cache_limit() { return allocator().limit.load(std::memory_order_relaxed); }

void set_cache_limit(size_t bytes) {
  Allocator& a = allocator();
  a.limit.store(bytes, std::memory_order_relaxed);
  if (a.held.load(std::memory_order_relaxed) <= bytes) return;
  {
    // The pool's recency order is the one eviction follows, so the threads'
    // (newer) blocks join it first.
    std::lock_guard<std::mutex> registry(a.registry_mu);
    drain_threads(a, nullptr);
  }
  for (;;) {
    const size_t held = a.held.load(std::memory_order_relaxed);
    if (held <= bytes || evict(a, held - bytes) == 0) break;
  }
}

AllocatorStats allocator_stats() {
  Allocator& a = allocator();
  AllocatorStats s;
  std::lock_guard<std::mutex> registry(a.registry_mu);
  for (ThreadCache* tc : a.threads) {
    std::lock_guard<SpinLock> lock(tc->mu);
    s.hits += tc->hits;
  }
  std::lock_guard<std::mutex> lock(a.pool_mu);
  s.hits += a.hits;
  s.misses = a.misses;
  s.evictions = a.evictions;
  s.bytes_evicted = a.bytes_evicted;
  s.bytes_cached = a.held.load(std::memory_order_relaxed);
  s.limit = a.limit.load(std::memory_order_relaxed);
  s.bytes_allocated = a.allocated.load(std::memory_order_relaxed);
  s.peak_bytes_allocated = a.peak.load(std::memory_order_relaxed);
  s.peak_bytes_reserved = a.peak_reserved.load(std::memory_order_relaxed);
  return s;
}

namespace {

// Bytes by category now and their high-water marks (category 0 unused).
std::atomic<size_t> category_now[kMemoryCategories];
std::atomic<size_t> category_peak[kMemoryCategories];

}  // namespace

// The thread's category lives with the thread pool, which hands it to the
// workers of a parallel region (common/parallel.h).
uint8_t memory_category() { return thread_memory_category(); }
void set_memory_category(uint8_t category) { thread_memory_category() = category; }

void count_category(uint8_t c, size_t bytes) {
  const size_t now = category_now[c].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = category_peak[c].load(std::memory_order_relaxed);
  while (now > peak &&
         !category_peak[c].compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void uncount_category(uint8_t c, size_t bytes) {
  category_now[c].fetch_sub(bytes, std::memory_order_relaxed);
}

CategoryBytes category_bytes(uint8_t c) {
  return {category_now[c].load(std::memory_order_relaxed),
          category_peak[c].load(std::memory_order_relaxed)};
}

void reset_peak_bytes_allocated() {
  Allocator& a = allocator();
  const size_t allocated = a.allocated.load(std::memory_order_relaxed);
  a.peak.store(allocated, std::memory_order_relaxed);
  a.peak_reserved.store(allocated + a.held.load(std::memory_order_relaxed),
                        std::memory_order_relaxed);
  for (int c = 0; c < kMemoryCategories; ++c)
    category_peak[c].store(category_now[c].load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
}

}  // namespace dtensor::detail
