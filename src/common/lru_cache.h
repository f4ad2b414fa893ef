// A thread-safe LRU cache of shared immutable values with hit/miss counters,
// used by the plan cache (src/redistribute/) and the sharding-propagation
// cache (src/dispatch/). Lookups may use a probe type other than Key when
// Hash and Equal are transparent, so a hit need not build (copy) a key.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "dtensor/redistribute.h"  // CacheInfo

namespace dtensor {

template <class Key, class Value, class Hash, class Equal>
class LruCache {
 public:
  explicit LruCache(int64_t capacity) : capacity_(capacity) {}

  // The cached value, or nullptr; counts a hit or a miss.
  template <class Probe>
  std::shared_ptr<const Value> find(const Probe& probe) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(probe);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  // Adds the value unless the key is already there (two threads that missed
  // at once both computed it; the first one stays), evicting the least
  // recently used entry beyond the capacity.
  void insert(Key key, std::shared_ptr<const Value> value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.find(key) != index_.end()) return;
    lru_.emplace_front(std::move(key), std::move(value));
    index_.emplace(lru_.front().first, lru_.begin());
    if (static_cast<int64_t>(index_.size()) > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  CacheInfo info() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, misses_, static_cast<int64_t>(index_.size()), capacity_};
  }

  // Drops every entry and zeroes the counters.
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    lru_.clear();
    hits_ = misses_ = 0;
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<const Value>>;
  const int64_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash, Equal> index_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace dtensor
