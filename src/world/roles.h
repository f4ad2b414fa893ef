// The roles of a shape-only world (estimate::profile): ranks that hold the
// same local shapes and run the same collectives are computed once, by one
// of them, their stand-in, which the world holds in place of all of them.
//
// A shape-only world of n ranks holds every rank until a profile asks for
// roles (begin). The first mesh made over all n ranks is the world's grid
// (made before the profile or by its step: the roles start with it);
// the first partition puts two ranks in one role when, on every dim of
// the grid, they are both first (coordinate 0) or both not: code that
// treats a group's first member apart (Replicate -> Partial keeps the
// value there) then never meets a stand-in of the other kind. Each role's
// lowest rank stands in for it and is the only one held: the backend
// answers a collective with the stand-ins' shapes for the members it does
// not hold (sim_backend.cc), and every DTensor made is checked to have,
// on each rank, the local shape of its stand-in (dtensor/roles_check.cc).
// A layout where they differ (an uneven shard) refines the partition by
// that local shape and makes the profile run the step again: the roles
// only ever split, so what was checked stays true.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/world.h"
#include "world/world_impl.h"

namespace dtensor {

// Thrown when the roles change under a running step: the grid was made
// (the roles start) or a layout split them (layout/roles_check.h).
// estimate::profile then runs the step again from its start, with the
// roles held from there. Not a dtensor::Error, so that code catching those
// lets it through.
struct RolesChanged : std::exception {
  const char* what() const noexcept override {
    return "estimate::profile: the ranks' roles changed; the step runs again";
  }
};

struct WorldRoles {
  // Called by every root DeviceMesh: the first over all ranks of a
  // shape-only world is its grid (shape, world ranks row-major). Made by a
  // step the roles wait for, it starts them and throws RolesChanged.
  static void note_grid(const World& w, const Shape& shape, const std::vector<int>& ranks);
  // Whether the world computes by roles now.
  static bool active(const World& w) { return w.impl_->roles_active; }
  // The rank whose figures `rank` has (itself when held).
  static int stand_in(const World& w, int rank) {
    return w.impl_->roles_active ? w.impl_->stand_in[static_cast<size_t>(rank)] : rank;
  }
  // Bumped by every begin, refine and end: what was checked under an
  // older epoch may be checked again.
  static uint64_t epoch(const World& w) { return w.impl_->roles_epoch; }
  // Starts computing by roles, or, before the grid is made, from when it
  // is; false (nothing changes) when the world is not shape-only.
  static bool begin(const World& w);
  // Splits each role by key(rank) (a local shape) and holds the new
  // stand-ins; returns whether any role split.
  static bool refine(const World& w, const std::function<Shape(int rank)>& key);
  // Holds every rank again.
  static void end(const World& w);
  // rank -> stand-in for every rank (identity when not active).
  static std::vector<int> stand_ins(const World& w);

 private:
  static void activate(World::Impl& w);
};

}  // namespace dtensor
