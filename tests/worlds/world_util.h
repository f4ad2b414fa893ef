// The tests of tests/worlds/ are written once and run on both worlds: in
// `world_tests` on World::simulated(8), in `mpi_world_tests` on the calling
// process's rank of `mpirun -np N` (4 and 8 in ctest). A test body must
// therefore only read the shards this process holds, and skip meshes it
// takes no part in (after drawing the same random numbers as every rank).
#pragma once

#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::testing {

// The world of this test program (defined by sim_world.cc or mpi_main.cc).
World test_world();

// Mesh shapes that fit the world: {4}, {2, 2}, and with 6 or more ranks
// {2, 3}; with 8, {2, 4} too.
inline std::vector<Shape> test_meshes(const World& world) {
  std::vector<Shape> out = {{4}, {2, 2}};
  if (world.size() >= 6) out.push_back({2, 3});
  if (world.size() >= 8) out.push_back({2, 4});
  return out;
}

// Whether this process holds a rank of the mesh (always, when simulated).
inline bool takes_part(const DeviceMesh& mesh) {
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) return true;
  return false;
}

}  // namespace dtensor::testing
