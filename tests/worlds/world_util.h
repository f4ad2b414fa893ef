// The tests of tests/worlds/ are written once and run on both worlds: in
// `world_tests` on World::simulated(64) (DTENSOR_TEST_WORLD_SIZE changes
// it), in `mpi_world_tests` on the calling process's rank of `mpirun -np N`
// (4, 8 and 12 in ctest). A test body must
// therefore only read the shards this process holds, and skip meshes it
// takes no part in (after drawing the same random numbers as every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::testing {

// The world of this test program (defined by sim_world.cc or mpi_main.cc).
World test_world();

// Mesh shapes of 1-4 dims that fit the world, from {4} and {2, 2} up to
// 3-d and 4-d meshes of 12-64 ranks: bugs that show only on meshes of 3+
// dims and more than 8 ranks have happened.
inline std::vector<Shape> test_meshes(const World& world) {
  const std::vector<Shape> all = {{4},       {2, 2},    {2, 3},       {2, 4},       {2, 2, 2},
                                  {3, 2, 2}, {2, 3, 2}, {2, 2, 4},    {2, 2, 2, 2}, {4, 4},
                                  {2, 3, 4}, {4, 4, 4}, {2, 2, 4, 4}, {3, 1, 4, 5}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (s.product() <= world.size()) out.push_back(s);
  return out;
}

// splitmix64's finaliser: a well-mixed 64-bit hash, for test inputs that
// every rank draws alike.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The random bits of element e of rank r's input in test case `seed`.
inline uint64_t input_bits(uint64_t seed, int r, int64_t e) {
  return splitmix64(splitmix64(seed * 1000003u + static_cast<uint64_t>(r)) +
                    static_cast<uint64_t>(e));
}

// Whether this process holds a rank of the mesh (always, when simulated).
inline bool takes_part(const DeviceMesh& mesh) {
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) return true;
  return false;
}

}  // namespace dtensor::testing
