// World::Impl — the shared state behind every World handle: the size, the
// held ranks (ascending) and the Backend that runs the collectives. Made by
// World::simulated (src/comm/sim_world.cc) and World::mpi (mpi_world.cc),
// which include their backend. Backend is only declared here (the world
// sits below the mesh, which the Backend's collectives take), so the world
// holds it by shared_ptr, whose deleter is fixed where the world is made,
// beside a whole Backend. The world is its only owner.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/world.h"

namespace dtensor {

struct World::Impl {
  Impl(int size, std::vector<int> held, std::shared_ptr<Backend> backend, bool simulated,
       bool shape_only = false)
      : size(size),
        held(std::move(held)),
        backend(std::move(backend)),
        simulated(simulated),
        shape_only(shape_only) {}

  int size;
  std::vector<int> held;  // ascending
  std::shared_ptr<Backend> backend;
  bool simulated;
  bool shape_only;  // World::shape_only: tensors are meta, kernels do not run
  // World::shape_only's roles (world/roles.h): the grid, and while
  // roles_active, each rank's role and stand-in; `held` is the stand-ins.
  Shape grid_shape;
  std::vector<int> grid_ranks;
  bool roles_active = false;
  bool roles_pending = false;  // asked for before the grid was made
  std::vector<int> role, stand_in;
  uint64_t roles_epoch = 0;
};

}  // namespace dtensor
