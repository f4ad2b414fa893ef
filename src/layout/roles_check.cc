// check_roles (roles_check.h): a new layout is compared rank by rank with
// its stand-ins, once; most layouts split evenly and are passed at a glance.
#include "layout/roles_check.h"

#include <mutex>
#include <unordered_set>

#include "world/roles.h"

namespace dtensor::detail {

namespace {

struct SpecHash {
  size_t operator()(const DTensorSpec& s) const { return s.hash(); }
};

struct Checked {
  std::mutex mu;
  std::unordered_set<DTensorSpec, SpecHash> specs;
  uint64_t epoch = 0;
};

Checked& checked() {
  static Checked c;
  return c;
}

// Whether every rank holds the same local shape: no dim is split unevenly
// (each split of a dim divides it; nested even splits stay even).
bool splits_evenly(const DTensorSpec& spec) {
  const Shape& shape = spec.shape();
  std::vector<int64_t> ways(shape.size(), 1);
  const Placements& ps = spec.placements();
  for (size_t d = 0; d < ps.size(); ++d)
    if (ps[d].is_shard())
      ways[static_cast<size_t>(ps[d].dim())] *= spec.mesh().size(static_cast<int>(d));
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] % ways[i] != 0) return false;
  return true;
}

}  // namespace

void check_roles(const DTensorSpec& spec) {
  const World& world = spec.mesh().world();
  Checked& c = checked();
  {
    std::lock_guard lock(c.mu);
    if (c.epoch != WorldRoles::epoch(world)) {
      c.specs.clear();
      c.epoch = WorldRoles::epoch(world);
    }
    if (c.specs.contains(spec)) return;
  }
  // The mesh's members and the others (which hold nothing of it) are not
  // alike either.
  const DeviceMesh& mesh = spec.mesh();
  if (!splits_evenly(spec) || mesh.root().size() != world.size()) {
    const auto key = [&](int rank) {
      const std::optional<ShardExtent> e = spec.extent_of_rank(rank);
      return e ? e->local_shape : Shape{-1};
    };
    for (int r = 0; r < world.size(); ++r) {
      const int s = WorldRoles::stand_in(world, r);
      if (s == r || key(r) == key(s)) continue;
      WorldRoles::refine(world, key);
      throw RolesChanged();
    }
  }
  std::lock_guard lock(c.mu);
  c.specs.insert(spec);
}

void forget_role_checks() {
  Checked& c = checked();
  std::lock_guard lock(c.mu);
  c.specs.clear();
  c.epoch = 0;
}

}  // namespace dtensor::detail
