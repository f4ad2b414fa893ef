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

std::vector<int> LocalTensor::ranks() const {
  std::vector<int> out;
  out.reserve(shards_.size());
  for (const auto& entry : shards_) out.push_back(entry.first);
  return out;
}

}  // namespace dtensor
