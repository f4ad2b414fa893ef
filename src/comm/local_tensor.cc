// LocalTensor — the shards this process holds, kept in a vector sorted by
// rank. A sorted vector rather than a map: a process holds at most a few
// dozen ranks (one under MPI), so lookups are a short binary search and
// iteration in rank order is free.
#include "dtensor/local_tensor.h"

#include <algorithm>
#include <sstream>

namespace dtensor {

namespace {

using Shards = std::vector<std::pair<int, Tensor>>;

template <class V>
auto find_rank(V& shards, int rank) {
  return std::lower_bound(shards.begin(), shards.end(), rank,
                          [](const auto& entry, int r) { return entry.first < r; });
}

[[noreturn]] void throw_not_held(const Shards& shards, int rank) {
  std::ostringstream held;
  for (size_t i = 0; i < shards.size(); ++i) held << (i ? ", " : "") << shards[i].first;
  DT_THROW("LocalTensor: rank ", rank, " is not held here (held: ",
           shards.empty() ? std::string("none") : held.str(), ")");
}

}  // namespace

void LocalTensor::set(int rank, Tensor shard) {
  auto it = find_rank(shards_, rank);
  if (it != shards_.end() && it->first == rank) {
    it->second = std::move(shard);
  } else {
    shards_.emplace(it, rank, std::move(shard));
  }
}

bool LocalTensor::holds(int rank) const {
  auto it = find_rank(shards_, rank);
  return it != shards_.end() && it->first == rank;
}

const Tensor& LocalTensor::shard(int rank) const {
  auto it = find_rank(shards_, rank);
  if (it == shards_.end() || it->first != rank) throw_not_held(shards_, rank);
  return it->second;
}

Tensor& LocalTensor::shard(int rank) {
  auto it = find_rank(shards_, rank);
  if (it == shards_.end() || it->first != rank) throw_not_held(shards_, rank);
  return it->second;
}

int LocalTensor::unshare(const Storage* also) {
  const size_t n = shards_.size();
  if (n == 0 || (n == 1 && also == nullptr)) return 0;
  if (n <= 16) {
    // The common case (every op's result), without allocating: pairwise.
    int cloned = 0;
    for (size_t i = 0; i < n; ++i) {
      Tensor& t = shards_[i].second;
      const Storage* st = t.storage().get();
      if (st == nullptr) continue;
      bool taken = st == also;
      for (size_t j = 0; j < i && !taken; ++j) taken = shards_[j].second.storage().get() == st;
      if (taken) {
        t = t.clone();
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
    if (const Storage* st = shards_[i].second.storage().get()) seen.emplace_back(st, i);
  }
  std::sort(seen.begin(), seen.end());
  int cloned = 0;
  for (size_t k = 0; k < seen.size(); ++k) {
    const bool taken = seen[k].first == also || (k > 0 && seen[k].first == seen[k - 1].first);
    if (!taken) continue;
    Tensor& t = shards_[seen[k].second].second;
    t = t.clone();
    ++cloned;
  }
  return cloned;
}

std::vector<int> LocalTensor::ranks() const {
  std::vector<int> out;
  out.reserve(shards_.size());
  for (const auto& entry : shards_) out.push_back(entry.first);
  return out;
}

}  // namespace dtensor
