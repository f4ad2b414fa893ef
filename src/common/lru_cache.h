// A thread-safe LRU cache of shared immutable values with hit/miss counters,
// used by the plan cache (src/redistribute/) and the sharding-propagation
// cache (src/dispatch/). Lookups may use a probe type other than Key when
// Hash and Equal are transparent, so a hit need not build (copy) a key.
// Every DTensor op looks its sharding up here, so a hit takes a spin lock
// (common/spin_lock.h) rather than a mutex; the sections under it are a
// hash lookup, a list splice or an eviction, except erase_if's walk over
// the entries (a mesh going away, rare).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "common/spin_lock.h"

namespace dtensor {

template <class Key, class Value, class Hash, class Equal>
class LruCache {
 public:
  explicit LruCache(int64_t capacity) : capacity_(capacity) {}

  // The cached value, or nullptr; counts a hit or a miss.
  template <class Probe>
  std::shared_ptr<const Value> find(const Probe& probe) {
    std::lock_guard<detail::SpinLock> lock(mu_);
    auto it = index_.find(probe);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  // Adds the value unless the key is already there (two threads that missed
  // at once both computed it; the first one stays), evicting the least
  // recently used entry beyond the capacity.
  // `hold` is called on both stored copies of the key (the list's and the
  // index's), e.g. to mark the meshes they hold as the cache's.
  void insert(Key key, std::shared_ptr<const Value> value) {
    insert(std::move(key), std::move(value), [](const Key&) {});
  }
  template <class Hold>
  void insert(Key key, std::shared_ptr<const Value> value, Hold&& hold) {
    std::lock_guard<detail::SpinLock> lock(mu_);
    if (index_.find(key) != index_.end()) return;
    lru_.emplace_front(std::move(key), std::move(value));
    hold(lru_.front().first);
    hold(index_.emplace(lru_.front().first, lru_.begin()).first->first);
    if (static_cast<int64_t>(index_.size()) > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  // Drops the entries for which pred(key, value) holds; returns how many.
  // The entries are destroyed after the lock is released.
  template <class Pred>
  int64_t erase_if(Pred pred) {
    std::list<Entry> dropped;
    {
      std::lock_guard<detail::SpinLock> lock(mu_);
      for (auto it = lru_.begin(); it != lru_.end();) {
        auto next = std::next(it);
        if (pred(it->first, *it->second)) {
          index_.erase(it->first);
          dropped.splice(dropped.end(), lru_, it);
        }
        it = next;
      }
    }
    return static_cast<int64_t>(dropped.size());
  }

  // The counters as an Info of {hits, misses, size, capacity}: the public
  // CacheInfo (redistribute.h), which lives above this room.
  template <class Info>
  Info info() const {
    std::lock_guard<detail::SpinLock> lock(mu_);
    return {hits_, misses_, static_cast<int64_t>(index_.size()), capacity_};
  }

  // Drops every entry and zeroes the counters.
  void clear() {
    std::lock_guard<detail::SpinLock> lock(mu_);
    index_.clear();
    lru_.clear();
    hits_ = misses_ = 0;
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<const Value>>;
  const int64_t capacity_;
  mutable detail::SpinLock mu_;
  std::list<Entry> lru_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash, Equal> index_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace dtensor
