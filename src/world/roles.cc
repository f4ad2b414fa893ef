// A shape-only world's roles (roles.h): the grid, the first partition by
// first-or-not coordinates, and its refinement by local shapes.
#include "world/roles.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "dtensor/error.h"

namespace dtensor {

namespace {

// Holds each role's lowest rank, and only those.
void hold_stand_ins(World::Impl& w) {
  const size_t n = static_cast<size_t>(w.size);
  // role -> its lowest rank (the first roles are bit masks, up to 2^ndim - 1)
  std::vector<int> first(static_cast<size_t>(*std::max_element(w.role.begin(), w.role.end())) + 1,
                         -1);
  w.stand_in.assign(n, -1);
  w.held.clear();
  for (size_t r = 0; r < n; ++r) {
    int& f = first[static_cast<size_t>(w.role[r])];
    if (f < 0) {
      f = static_cast<int>(r);
      w.held.push_back(f);
    }
    w.stand_in[r] = f;
  }
  ++w.roles_epoch;
}

}  // namespace

void WorldRoles::note_grid(const World& world, const Shape& shape, const std::vector<int>& ranks) {
  World::Impl& w = *world.impl_;
  if (!w.shape_only || !w.grid_ranks.empty() || static_cast<int64_t>(ranks.size()) != w.size)
    return;
  w.grid_shape = shape;
  w.grid_ranks = ranks;
  if (!w.roles_pending) return;
  // The step made tensors of every rank before: it starts again by roles.
  activate(w);
  throw RolesChanged();
}

bool WorldRoles::begin(const World& world) {
  World::Impl& w = *world.impl_;
  if (!w.shape_only) return false;
  DT_CHECK(!w.roles_active && !w.roles_pending,
           "estimate::profile: the world already computes by roles");
  // A step that makes its mesh starts the roles then (note_grid).
  if (w.grid_ranks.empty())
    w.roles_pending = true;
  else
    activate(w);
  return true;
}

void WorldRoles::activate(World::Impl& w) {
  w.roles_pending = false;
  // Role of a rank: bit d set when its coordinate on grid dim d is 0.
  const size_t ndim = w.grid_shape.size();
  w.role.assign(static_cast<size_t>(w.size), 0);
  for (size_t p = 0; p < w.grid_ranks.size(); ++p) {
    int64_t rest = static_cast<int64_t>(p), bits = 0;
    for (size_t d = ndim; d-- > 0;) {
      if (rest % w.grid_shape[d] == 0) bits |= int64_t{1} << d;
      rest /= w.grid_shape[d];
    }
    w.role[static_cast<size_t>(w.grid_ranks[p])] = static_cast<int>(bits);
  }
  w.roles_active = true;
  hold_stand_ins(w);
}

bool WorldRoles::refine(const World& world, const std::function<Shape(int rank)>& key) {
  World::Impl& w = *world.impl_;
  DT_CHECK(w.roles_active, "WorldRoles::refine: the world does not compute by roles");
  std::map<std::pair<int, std::vector<int64_t>>, int> ids;
  std::vector<int> role(w.role.size());
  for (size_t r = 0; r < role.size(); ++r) {
    const Shape k = key(static_cast<int>(r));
    role[r] = ids.try_emplace({w.role[r], std::vector<int64_t>(k.begin(), k.end())},
                              static_cast<int>(ids.size()))
                  .first->second;
  }
  if (ids.size() == w.held.size()) return false;
  w.role = std::move(role);
  hold_stand_ins(w);
  return true;
}

void WorldRoles::end(const World& world) {
  World::Impl& w = *world.impl_;
  w.roles_pending = false;
  if (!w.roles_active) return;
  w.roles_active = false;
  w.role.clear();
  w.stand_in.clear();
  w.held.resize(static_cast<size_t>(w.size));
  std::iota(w.held.begin(), w.held.end(), 0);
  ++w.roles_epoch;
}

std::vector<int> WorldRoles::stand_ins(const World& world) {
  const World::Impl& w = *world.impl_;
  if (w.roles_active) return w.stand_in;
  std::vector<int> out(static_cast<size_t>(w.size));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

}  // namespace dtensor
