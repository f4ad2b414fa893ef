// LocalTensor — the shards this process holds, kept in a vector sorted by
// rank: iteration in rank order is free, and with the ranks' spacing known
// (step_) a lookup is one division, whether the process holds one rank
// (MPI) or thousands (a simulated world).
#include "dtensor/local_tensor.h"

#include <algorithm>
#include <sstream>

#include "tensor/allocator.h"

namespace dtensor {

namespace {

using Shards = std::vector<std::pair<int, Tensor>>;

[[noreturn]] void throw_not_held(const Shards& shards, int rank) {
  std::ostringstream held;
  for (size_t i = 0; i < shards.size(); ++i) held << (i ? ", " : "") << shards[i].first;
  DT_THROW("LocalTensor: rank ", rank, " is not held here (held: ",
           shards.empty() ? std::string("none") : held.str(), ")");
}

}  // namespace

LocalTensor::LocalTensor(std::vector<std::pair<int, Tensor>> sorted_shards)
    : shards_(std::move(sorted_shards)) {
  for (size_t i = 1; i < shards_.size(); ++i) {
    DT_CHECK(shards_[i - 1].first < shards_[i].first, "LocalTensor: ranks must be strictly ",
             "ascending, got rank ", shards_[i].first, " after rank ", shards_[i - 1].first);
  }
  update_step();
  count_ranks();
}

void LocalTensor::count_ranks() const {
  if (!detail::rank_counting()) [[likely]]
    return;
  for (const auto& [rank, t] : shards_)
    if (t.storage() != nullptr) t.storage()->count_on_rank(rank);
}

// Recomputes step_ after an insertion in the middle (the rare case).
void LocalTensor::update_step() {
  const size_t n = shards_.size();
  step_ = n < 2 ? 1 : shards_[1].first - shards_[0].first;
  for (size_t i = 2; i < n && step_ > 0; ++i) {
    if (shards_[i].first - shards_[i - 1].first != step_) step_ = 0;
  }
}

int64_t LocalTensor::find(int rank) const {
  const int64_t n = static_cast<int64_t>(shards_.size());
  if (n == 0) return -1;
  const int64_t off = static_cast<int64_t>(rank) - shards_[0].first;
  if (step_ > 0) {
    if (off < 0 || off % step_ != 0 || off / step_ >= n) return -1;
    return off / step_;
  }
  auto it = std::lower_bound(shards_.begin(), shards_.end(), rank,
                             [](const auto& entry, int r) { return entry.first < r; });
  return it != shards_.end() && it->first == rank ? it - shards_.begin() : -1;
}

void LocalTensor::set(int rank, Tensor shard) {
  if (detail::rank_counting() && shard.storage() != nullptr) [[unlikely]]
    shard.storage()->count_on_rank(rank);
  if (const int64_t i = find(rank); i >= 0) {
    shards_[static_cast<size_t>(i)].second = std::move(shard);
    return;
  }
  if (shards_.empty() || rank > shards_.back().first) {  // ascending: O(1)
    const int gap = shards_.empty() ? 0 : rank - shards_.back().first;
    shards_.emplace_back(rank, std::move(shard));
    if (shards_.size() == 1) step_ = 1;
    else if (shards_.size() == 2) step_ = gap;
    else if (step_ != gap) step_ = 0;
    return;
  }
  auto it = std::lower_bound(shards_.begin(), shards_.end(), rank,
                             [](const auto& entry, int r) { return entry.first < r; });
  shards_.emplace(it, rank, std::move(shard));
  update_step();
}

bool LocalTensor::holds(int rank) const { return find(rank) >= 0; }

const Tensor& LocalTensor::shard(int rank) const {
  const int64_t i = find(rank);
  if (i < 0) throw_not_held(shards_, rank);
  return shards_[static_cast<size_t>(i)].second;
}

Tensor& LocalTensor::shard(int rank) {
  const int64_t i = find(rank);
  if (i < 0) throw_not_held(shards_, rank);
  return shards_[static_cast<size_t>(i)].second;
}

namespace {

// LocalTensor::unshare once some shard's storage has another reference.
[[gnu::noinline]] int unshare_shared(std::vector<std::pair<int, Tensor>>& shards,
                                     const Storage* also) {
  const size_t n = shards.size();
  if (n <= 16) {
    // A handful of shards (a replicated input handed to every rank), without
    // allocating: pairwise, over the pointers gathered once (a shard is a
    // few cache lines apart from the next).
    const Storage* st[16];
    for (size_t i = 0; i < n; ++i) st[i] = shards[i].second.storage().get();
    int cloned = 0;
    for (size_t i = 0; i < n; ++i) {
      if (st[i] == nullptr) continue;
      bool taken = st[i] == also;
      for (size_t j = 0; j < i && !taken; ++j) taken = st[j] == st[i];
      if (taken) {
        Tensor& t = shards[i].second;
        t = t.clone();
        st[i] = t.storage().get();
        ++cloned;
      }
    }
    return cloned;
  }
  // (storage, index) sorted by storage then index: within a run of one
  // storage the first entry is the lowest rank, which keeps it (unless it is
  // `also`'s). A handful of shards is the common case, but a simulated world
  // may hold thousands, hence a sort rather than pairwise comparison.
  std::vector<std::pair<const Storage*, size_t>> seen;
  seen.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (const Storage* st = shards[i].second.storage().get()) seen.emplace_back(st, i);
  }
  std::sort(seen.begin(), seen.end());
  int cloned = 0;
  for (size_t k = 0; k < seen.size(); ++k) {
    const bool taken = seen[k].first == also || (k > 0 && seen[k].first == seen[k - 1].first);
    if (!taken) continue;
    Tensor& t = shards[seen[k].second].second;
    t = t.clone();
    ++cloned;
  }
  return cloned;
}

}  // namespace

int LocalTensor::unshare(const Storage* also) {
  const size_t n = shards_.size();
  if (n == 0 || (n == 1 && also == nullptr)) return 0;
  // A shard that holds the only reference to its storage shares it with no
  // one (`also` belongs to a live tensor, which holds a reference too). A
  // kernel's fresh results are all like that, so an op's output costs one
  // look at each count instead of the pairwise comparison or the sort; the
  // rest is out of line (its frame cost every op's result ~20 instructions).
  for (size_t i = 0; i < n; ++i) {
    const std::shared_ptr<Storage>& st = shards_[i].second.storage();
    if (st != nullptr && st.use_count() != 1) {
      const int cloned = unshare_shared(shards_, also);
      if (cloned > 0) count_ranks();  // the copies are the ranks' own
      return cloned;
    }
  }
  return 0;
}

std::vector<int> LocalTensor::ranks() const {
  std::vector<int> out;
  out.reserve(shards_.size());
  for (const auto& entry : shards_) out.push_back(entry.first);
  return out;
}

}  // namespace dtensor
