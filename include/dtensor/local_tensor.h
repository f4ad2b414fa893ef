// LocalTensor — the shards of one DTensor held by this process, by rank.
//
// In the simulated world it holds a shard for every rank of the mesh; under
// MPI, the one shard of this process's rank. Code that works on local data
// loops over the held shards with for_each / map, so the same code is right
// in both worlds (this is PyTorch's "LocalTensor" mode).
#pragma once

#include <utility>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {

class LocalTensor {
 public:
  LocalTensor() = default;

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
    return out;
  }

  const std::vector<std::pair<int, Tensor>>& shards() const { return shards_; }

  // Gives every shard memory of its own, as separate processes have: a shard
  // whose storage a lower rank's shard (or `also`, when given) uses is
  // replaced by a clone. Returns how many shards were cloned. Costs a scan
  // of the storage pointers when nothing is shared. DTensor's constructor
  // calls it, so no two ranks of a DTensor ever share a Storage.
  int unshare(const Storage* also = nullptr);

 private:
  std::vector<std::pair<int, Tensor>> shards_;  // sorted by rank
};

}  // namespace dtensor
