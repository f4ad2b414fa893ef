// Internal: the caching allocator under Storage.
//
// Every block is 64-byte aligned and rounded up to a size class: multiples of
// 64 bytes up to 256 bytes, then four classes per doubling (320, 384, 448,
// 512, 640, ...), so a request wastes at most a fifth of its block and sizes
// within a class share blocks. A freed block is kept for the next request of
// its class instead of going back to the system:
//   - classes up to 256 KiB first go to a cache of the freeing thread (at most
//     2 MiB, or a sixteenth of the limit), whose oldest blocks spill into the
//     shared pool; allocating looks in the thread's cache, then the pool;
//   - larger classes go to the shared pool (one mutex) and come from mmap, so
//     that evicting one returns its pages to the system at once (munmap).
// The bytes held by all caches together never exceed the limit: a block
// freed when the cache is full first evicts the least recently freed blocks
// of the shared pool, and is itself returned to the system if that is not
// enough. The limit is DTENSOR_CACHE_BYTES when set (bytes, or with a suffix
// K, M or G for KiB, MiB or GiB; 0 turns caching off), otherwise a quarter of
// the physical memory; set_cache_limit changes it.
//
// Thread safety: every function may be called from any thread; a block may
// be freed on another thread than the one that allocated it.
// Under AddressSanitizer nothing is cached, so that a use after free is
// reported rather than landing in a recycled block.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtensor::detail {

// A 64-byte aligned block of at least nbytes (0 counts as 1), or nullptr
// when the system has no memory left.
void* allocate(size_t nbytes);
// Returns a block to the cache (or the system).
// REQUIRES: p came from allocate(nbytes) with the same nbytes.
void deallocate(void* p, size_t nbytes);

// The size of the block allocate(nbytes) returns: nbytes rounded up to its
// size class.
size_t block_size(size_t nbytes);

// Returns every cached block to the system; the bytes released.
size_t release_cached_blocks();

// The most bytes the caches may hold (0: nothing is cached).
size_t cache_limit();
// Sets it, evicting the least recently freed blocks until the caches fit.
void set_cache_limit(size_t bytes);

struct AllocatorStats {
  size_t bytes_cached = 0;    // held in all caches now
  size_t limit = 0;           // cache_limit()
  uint64_t hits = 0;          // allocations served from a cache
  uint64_t misses = 0;        // allocations that went to the system
  uint64_t evictions = 0;     // cached blocks returned to the system to stay within the limit
  uint64_t bytes_evicted = 0;
  // Bytes of the blocks handed out and not yet freed (every tensor's
  // storage; block sizes, so rounded up to the size class), and their most
  // since the process started or the last reset_peak_bytes_allocated():
  // PyTorch's memory_allocated() and max_memory_allocated(). One process,
  // so in the simulated world the sum over its ranks.
  size_t bytes_allocated = 0;
  size_t peak_bytes_allocated = 0;
  // The most of bytes_allocated + bytes_cached (blocks held from the
  // system): PyTorch's max_memory_reserved(), what the resident set grows by.
  size_t peak_bytes_reserved = 0;
};
// Counts since the process started (threads that exited included).
AllocatorStats allocator_stats();
// Starts the high-water marks again from the bytes allocated (and
// reserved) now (PyTorch's reset_peak_memory_stats()), the categories'
// too.
void reset_peak_bytes_allocated();

// What a storage's memory is for, as the code making it says (MemoryScope,
// memory.h): 0 none, then MemoryCategory's values. A storage takes the
// calling thread's category when its memory is allocated and counts its
// block (block_size) there until it dies.
constexpr int kMemoryCategories = 3;
uint8_t memory_category();
void set_memory_category(uint8_t category);
void count_category(uint8_t category, size_t bytes);
void uncount_category(uint8_t category, size_t bytes);
struct CategoryBytes {
  size_t now = 0;
  size_t peak = 0;  // since the process started or reset_peak_bytes_allocated()
};
CategoryBytes category_bytes(uint8_t category);

// Bytes by rank (memory.h's RankMemoryTracker): while a tracker runs, a
// storage some LocalTensor holds as rank r's shard counts on r, by its
// category, until it dies. The counts are exact bytes (no size classes):
// what a rank's tensors hold, the same in every world. count_rank returns
// the tracker's epoch (0 when none runs), which the storage hands back to
// uncount_rank, so a storage outliving its tracker is not taken from the
// next one.
uint8_t count_rank(int rank, uint8_t category, size_t bytes);
void uncount_rank(uint8_t epoch, int rank, uint8_t category, size_t bytes);
// Per rank: bytes now and peak, in all (index 0) and by category (1, 2).
struct RankBytes {
  int64_t now[kMemoryCategories] = {};
  int64_t peak[kMemoryCategories] = {};
};
// Starts a tracker over ranks [0, ranks) (the previous one must have
// stopped); stop_rank_counting ends it.
void start_rank_counting(int ranks);
void stop_rank_counting();
bool rank_counting();
// While alive on this thread, nothing counts on a rank: distribute_tensor
// lays out the caller's tensor, which is no rank's, then counts the
// shards it made (LocalTensor::count_ranks).
class RankCountingPause {
 public:
  RankCountingPause();
  ~RankCountingPause();
  RankCountingPause(const RankCountingPause&) = delete;
  RankCountingPause& operator=(const RankCountingPause&) = delete;
};
RankBytes rank_bytes(int rank);
void reset_rank_peaks();

}  // namespace dtensor::detail
