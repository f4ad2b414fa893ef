// The plan cache: plans keyed by (source spec, target spec, options, mesh
// configuration), least recently used evicted beyond the capacity. The key
// carries the mesh's config_version (topology, auto-flattening) and, when
// planning may not create groups, its flatten_version, since registering a
// group then changes which merges are possible. Entries go with their mesh:
// when the last user handle of a mesh root is dropped (mesh/mesh_cache.h).
#include <functional>

#include "common/lru_cache.h"
#include "mesh/mesh_cache.h"
#include "redistribute/plan_internal.h"

namespace dtensor {

namespace {

struct Key {
  DTensorSpec from;
  DTensorSpec to;
  uint8_t flags;
  uint64_t config_version;
  uint64_t flatten_version;
  size_t hash;

  friend bool operator==(const Key& a, const Key& b) {
    return a.hash == b.hash && a.flags == b.flags && a.config_version == b.config_version &&
           a.flatten_version == b.flatten_version && a.from == b.from && a.to == b.to;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash; }
};

using PlanCache = LruCache<Key, RedistributePlan, KeyHash, std::equal_to<Key>>;

PlanCache& cache();

// A mesh root lost its last user: its plans can never be asked for again.
void drop_root(const void* root) {
  cache().erase_if([root](const Key& k, const RedistributePlan& plan) {
    return MeshCacheAccess::root_id(k.from.mesh()) == root ||
           MeshCacheAccess::root_id(k.to.mesh()) == root ||
           MeshCacheAccess::root_id(plan.from.mesh()) == root;
  });
}

PlanCache& cache() {
  static PlanCache* c = [] {
    on_root_released(drop_root);
    return new PlanCache(4096);  // never destroyed: usable during exit
  }();
  return *c;
}

Key make_key(const DTensorSpec& from, const DTensorSpec& to, const RedistributeOptions& options) {
  const bool auto_flatten = options.auto_flatten.value_or(from.mesh().auto_flatten());
  const uint8_t flags = static_cast<uint8_t>(auto_flatten | options.allow_new_partial << 1 |
                                             !options.search << 2 | !options.merge << 3 |
                                             !options.box_exchange << 4);
  const uint64_t config = from.mesh().config_version();
  const uint64_t flat = auto_flatten ? 0 : from.mesh().flatten_version();
  size_t h = from.hash() * 0x9E3779B97F4A7C15ull ^ to.hash();
  h = h * 31 + flags;
  h = h * 31 + static_cast<size_t>(config);
  h = h * 31 + static_cast<size_t>(flat);
  return Key{from, to, flags, config, flat, h};
}

}  // namespace

std::shared_ptr<const RedistributePlan> plan_redistribute(const DTensorSpec& from,
                                                          const DTensorSpec& to,
                                                          const RedistributeOptions& options) {
  Key key = make_key(from, to, options);
  if (auto hit = cache().find(key)) return hit;
  // Plan outside the cache's lock; two threads missing at once plan twice, harmlessly.
  auto plan = std::make_shared<const RedistributePlan>(
      redistribute_detail::build_plan(from, to, options));
  // The cache's handles must not keep the mesh (and its World) alive.
  MeshCacheAccess::hold(plan->from.mesh());
  MeshCacheAccess::hold(plan->to.mesh());
  cache().insert(std::move(key), plan, [](const Key& k) {
    MeshCacheAccess::hold(k.from.mesh());
    MeshCacheAccess::hold(k.to.mesh());
  });
  return plan;
}

double redistribute_cost(const DTensorSpec& from, const DTensorSpec& to) {
  if (from == to) return 0;
  return plan_redistribute(from, to)->cost_us;
}

PlanCacheInfo redistribute_plan_cache_info() { return cache().info<CacheInfo>(); }

void clear_redistribute_plan_cache() { cache().clear(); }

}  // namespace dtensor
