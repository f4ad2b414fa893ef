// Storage and the memory limits: where a tensor's bytes come from. Memory
// comes from the caching allocator (tensor/allocator.h): a freed block is
// kept for the next request of its size class, so a result costs neither
// malloc's heap trimming nor fresh page faults. A small tensor's data shares
// one block with its control block (Storage::make). Requests beyond the
// machine's physical memory (cgroup limits included) are refused by name,
// one at a time (Storage) or all together before anything is allocated
// (check_allocation).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>

#include "dtensor/tensor.h"
#include "tensor/allocator.h"

namespace dtensor {

size_t release_cached_memory() { return detail::release_cached_blocks(); }

size_t cached_memory_limit() { return detail::cache_limit(); }

void set_cached_memory_limit(size_t bytes) { detail::set_cache_limit(bytes); }

namespace {

// "4294967296 bytes (4.0 GiB)"
std::string bytes_text(size_t bytes) {
  std::ostringstream os;
  os << bytes << " bytes (" << std::fixed << std::setprecision(1)
     << static_cast<double>(bytes) / static_cast<double>(size_t{1} << 30) << " GiB)";
  return os.str();
}

// The first number on the line of /proc/meminfo starting with `key`, in bytes.
std::optional<size_t> meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  const size_t key_len = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, key_len, key) != 0) continue;
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str() + key_len, " %llu", &kib) == 1) return kib * 1024;
  }
  return std::nullopt;
}

// The cgroup (v2, then v1) memory limit of this process, if any.
std::optional<size_t> cgroup_limit_bytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    unsigned long long v = 0;
    if (in >> v && v > 0) return v;  // "max" fails to parse: no limit
  }
  return std::nullopt;
}

}  // namespace

size_t physical_memory_bytes() {
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return SIZE_MAX;  // unknown: no limit
    size_t b = static_cast<size_t>(pages) * static_cast<size_t>(page);
    if (auto limit = cgroup_limit_bytes()) b = std::min(b, *limit);
    return b;
  }();
  return bytes;
}

size_t available_memory_bytes() {
  const size_t physical = physical_memory_bytes();
  const std::optional<size_t> available = meminfo_bytes("MemAvailable:");
  return available ? std::min(*available, physical) : physical;
}

Storage::Storage(size_t nbytes) : data_(nullptr), nbytes_(nbytes) { materialize_bytes(); }

std::shared_ptr<Storage> Storage::meta(size_t nbytes) {
  auto s = std::make_shared<Storage>(Meta{}, nbytes);
  // What it is for, as for memory (a shape-only world counts it by rank);
  // not in the allocator's figures, which count memory.
  s->category_ = detail::memory_category();
  return s;
}

void Storage::count_on_rank(int rank) {
  if (rank_epoch_ != 0 || is_deferred()) return;
  rank_epoch_ = detail::count_rank(rank, category_, nbytes_);
  if (rank_epoch_ != 0) rank_ = rank;
}

void Storage::materialize() {
  if (!is_meta()) return;
  flags_ = static_cast<uint8_t>(flags_ & ~(kMeta | kDeferred));
  materialize_bytes();
}

void Storage::materialize_bytes() {
  const size_t nbytes = nbytes_;
  // Refused before asking the allocator: Linux overcommits, so a block far
  // beyond the machine would be handed out and the process killed once its
  // pages are touched, with no message at all.
  const size_t physical = physical_memory_bytes();
  DT_CHECK(nbytes <= physical, "out of memory: a tensor of ", bytes_text(nbytes),
           " was requested but the machine has ", bytes_text(physical), " of physical memory (",
           bytes_text(available_memory_bytes()), " available)");
  data_ = detail::allocate(nbytes);
  if (data_ == nullptr) {
    DT_THROW("out of memory: allocating a tensor of ", bytes_text(nbytes), " failed (",
             bytes_text(available_memory_bytes()), " available)");
  }
  take_category();
}

void Storage::take_category() {
  category_ = detail::memory_category();
  if (category_ != 0) detail::count_category(category_, detail::block_size(nbytes_));
}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<void> owner)
    : data_(data),
      nbytes_(nbytes),
      owner_(std::make_unique<std::shared_ptr<void>>(std::move(owner))) {
  DT_CHECK(*owner_ != nullptr, "Storage: adopting external memory needs an owner");
  DT_CHECK(data != nullptr || nbytes == 0, "Storage: adopting a null pointer of ", nbytes,
           " bytes");
}

Storage::~Storage() {
  if (rank_epoch_ != 0) detail::uncount_rank(rank_epoch_, rank_, category_, nbytes_);
  if (category_ != 0 && !is_meta()) detail::uncount_category(category_, detail::block_size(nbytes_));
  // Adopted memory: owner_'s release frees (or stops pinning) it. In-block
  // data goes with the control block.
  if (owner_ == nullptr && (flags_ & kInBlock) == 0) detail::deallocate(data_, nbytes_);
}

namespace {

// The block of an in-block storage: the shared_ptr's control block (counts,
// this allocator, the Storage) in the first kHeader bytes, the data after
// it, 64-byte aligned like every block.
constexpr size_t kHeader = 64;

template <class T>
struct InBlockAllocator {
  using value_type = T;
  size_t data_bytes;

  explicit InBlockAllocator(size_t n) : data_bytes(n) {}
  template <class U>
  InBlockAllocator(const InBlockAllocator<U>& other) : data_bytes(other.data_bytes) {}  // NOLINT

  T* allocate(size_t n) {
    // T is the control block, which holds the Storage.
    static_assert(sizeof(T) <= kHeader, "the control block must fit before the data");
    DT_CHECK(n == 1, "internal error: InBlockAllocator allocates one control block, not ", n);
    void* p = detail::allocate(kHeader + data_bytes);
    if (p == nullptr) {
      DT_THROW("out of memory: allocating a tensor of ", bytes_text(data_bytes), " failed (",
               bytes_text(available_memory_bytes()), " available)");
    }
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { detail::deallocate(p, kHeader + data_bytes); }

  template <class U>
  bool operator==(const InBlockAllocator<U>& other) const { return data_bytes == other.data_bytes; }
};

}  // namespace

// The control block starts the block (allocate returned it) and is at most
// kHeader bytes, so the block's start is `this` rounded down to the 64-byte
// alignment, and the data starts kHeader bytes later.
Storage::Storage(InBlock, size_t nbytes)
    : data_(reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(this) & ~uintptr_t{kHeader - 1}) +
            kHeader),
      nbytes_(nbytes),
      flags_(kInBlock) {
  take_category();
}

std::shared_ptr<Storage> Storage::make(size_t nbytes) {
  if (nbytes > kInBlockBytes) return std::make_shared<Storage>(nbytes);
  return std::allocate_shared<Storage>(InBlockAllocator<Storage>(nbytes), InBlock{}, nbytes);
}

void check_allocation(const std::string& op, const std::vector<PlannedTensor>& tensors) {
  const size_t physical = physical_memory_bytes();
  int64_t total = 0;
  for (const PlannedTensor& t : tensors) {
    const std::string what = op + ": " + t.name;
    DT_CHECK(t.copies >= 0, what, ": negative number of copies ", t.copies);
    const int64_t n = checked_numel(t.shape, what.c_str());
    const int64_t bytes = checked_bytes(n, itemsize(t.dtype), (what + ": bytes").c_str());
    const int64_t all = checked_mul(bytes, t.copies, (what + ": bytes of its copies").c_str());
    total = checked_add(total, all, (op + ": bytes of all its tensors").c_str());
    if (static_cast<uint64_t>(total) <= physical) continue;
    std::ostringstream os;
    os << "out of memory: " << what << " of shape " << t.shape << " "
       << dtype_short_name(t.dtype) << " needs " << bytes_text(static_cast<size_t>(bytes));
    if (t.copies != 1) os << " x " << t.copies << " copies";
    if (all != total)
      os << ", " << bytes_text(static_cast<size_t>(total)) << " with the tensors before it";
    DT_THROW(os.str(), ", but the machine has ", bytes_text(physical),
             " of physical memory; nothing was allocated");
  }
}

}  // namespace dtensor
