// LocalTensor — the shards of one DTensor held by this process, by rank.
//
// In the simulated world it holds a shard for every rank of the mesh; under
// MPI, the one shard of this process's rank. Code that works on local data
// loops over the held shards with for_each / map, so the same code is right
// in both worlds (this is PyTorch's "LocalTensor" mode).
//
// Shards are kept in a vector sorted by rank. Finding a rank is O(1) when
// the held ranks are evenly spaced (all ranks of a simulated world, the
// ranks of a sub-mesh, the one rank of an MPI process) and a binary search
// otherwise; set() is O(1) when ranks arrive in ascending order, as every
// collective and op produces them.
#pragma once

#include <utility>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {

class LocalTensor {
 public:
  LocalTensor() = default;
  // From (rank, shard) pairs; throws dtensor::Error unless the ranks are
  // strictly ascending.
  explicit LocalTensor(std::vector<std::pair<int, Tensor>> sorted_shards);

  // Adds (or replaces) the shard of `rank`.
  void set(int rank, Tensor shard);
  bool holds(int rank) const;
  // The shard of `rank`; throws when this process does not hold it.
  const Tensor& shard(int rank) const;
  Tensor& shard(int rank);
  // Held ranks, ascending.
  std::vector<int> ranks() const;
  size_t size() const { return shards_.size(); }
  bool empty() const { return shards_.empty(); }

  // f(rank, const Tensor&) for each held shard, in rank order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [rank, t] : shards_) f(rank, t);
  }
  // A LocalTensor of f(rank, const Tensor&) -> Tensor for each held shard.
  template <class F>
  LocalTensor map(F&& f) const {
    LocalTensor out;
    out.shards_.reserve(shards_.size());
    for (const auto& [rank, t] : shards_) out.shards_.emplace_back(rank, f(rank, t));
    out.step_ = step_;
    out.count_ranks();
    return out;
  }

  // A LocalTensor of f(rank, const Tensor& mine, const Tensor& other's) for
  // each held shard. REQUIRES: other holds the same ranks.
  template <class F>
  LocalTensor zip(const LocalTensor& other, F&& f) const {
    LocalTensor out;
    out.shards_.reserve(shards_.size());
    for (size_t i = 0; i < shards_.size(); ++i)
      out.shards_.emplace_back(shards_[i].first, f(shards_[i].first, shards_[i].second,
                                                   other.shards_[i].second));
    out.step_ = step_;
    out.count_ranks();
    return out;
  }

  const std::vector<std::pair<int, Tensor>>& shards() const { return shards_; }

  // Gives every shard memory of its own, as separate processes have: a shard
  // whose storage a lower rank's shard (or `also`, when given) uses is
  // replaced by a clone. Returns how many shards were cloned. Costs a scan
  // of the storage pointers when nothing is shared. DTensor's constructor
  // calls it, so no two ranks of a DTensor ever share a Storage.
  int unshare(const Storage* also = nullptr);

  // While a RankMemoryTracker runs (memory.h), counts each shard's storage
  // on its rank (once: one counted already keeps its rank); one load and a
  // branch otherwise. Every way of putting a shard in calls it; a caller
  // that built shards under a detail::RankCountingPause calls it after.
  void count_ranks() const;

 private:
  // The index of `rank` in shards_, or -1.
  int64_t find(int rank) const;
  void update_step();

  std::vector<std::pair<int, Tensor>> shards_;  // sorted by rank
  // shards_[i].first == shards_[0].first + i * step_ for every i when
  // step_ > 0 (evenly spaced ranks); 0 when they are not.
  int step_ = 0;
};

}  // namespace dtensor
