// The simulated world: all ranks in this process, their collectives run by
// the SimBackend. Without MPI, World::mpi says so here (mpi_world.cc makes
// the MPI world when built with it); the World handle is src/world/world.cc.
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/sim_backend.h"
#include "dtensor/error.h"
#include "dtensor/world.h"
#include "world/world_impl.h"

namespace dtensor {

World World::simulated(int size) {
  DT_CHECK(size >= 1, "World::simulated: size must be >= 1, got ", size);
  std::vector<int> held(static_cast<size_t>(size));
  std::iota(held.begin(), held.end(), 0);
  return World(std::make_shared<Impl>(size, std::move(held), std::make_unique<SimBackend>(),
                                      /*simulated=*/true));
}

// The same backend: each collective, given meta shards, validates and
// records itself as for data and returns the shapes (sim_backend.cc).
World World::shape_only(int size) {
  DT_CHECK(size >= 1, "World::shape_only: size must be >= 1, got ", size);
  std::vector<int> held(static_cast<size_t>(size));
  std::iota(held.begin(), held.end(), 0);
  return World(std::make_shared<Impl>(size, std::move(held), std::make_unique<SimBackend>(),
                                      /*simulated=*/true, /*shape_only=*/true));
}

#ifndef DTENSOR_HAVE_MPI
bool World::mpi_available() { return false; }

World World::mpi(int*, char***) {
  DT_THROW("World::mpi: this dtensor was built without MPI; install libopenmpi-dev and "
           "openmpi-bin and rebuild (CMake option DTENSOR_MPI=AUTO or ON)");
}
#endif

}  // namespace dtensor
