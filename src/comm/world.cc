// World — the ranks a program runs on and which of them this process holds:
// the simulated world, and what every world shares. The MPI world lives in
// mpi_world.cc (built with MPI); without MPI, World::mpi says so.
#include "dtensor/world.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/sim_backend.h"
#include "comm/world_impl.h"
#include "dtensor/error.h"

namespace dtensor {

World World::simulated(int size) {
  DT_CHECK(size >= 1, "World::simulated: size must be >= 1, got ", size);
  std::vector<int> held(static_cast<size_t>(size));
  std::iota(held.begin(), held.end(), 0);
  return World(std::make_shared<Impl>(size, std::move(held), std::make_unique<SimBackend>(),
                                      /*simulated=*/true));
}

bool World::launched_by_mpi() {
  // Open MPI's mpirun, and PMI/PMIx launchers (MPICH's hydra, Slurm's srun).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

World World::from_launcher(int simulated_size, int* argc, char*** argv) {
  if (launched_by_mpi() && mpi_available()) return mpi(argc, argv);
  return simulated(simulated_size);
}

int World::size() const { return impl_->size; }

const std::vector<int>& World::held_ranks() const { return impl_->held; }

bool World::holds(int rank) const {
  if (impl_->simulated) return rank >= 0 && rank < impl_->size;
  return std::binary_search(impl_->held.begin(), impl_->held.end(), rank);
}

bool World::is_simulated() const { return impl_->simulated; }

Backend& World::backend() const { return *impl_->backend; }

int World::rank() const { return impl_->simulated ? 0 : impl_->held.front(); }

#ifndef DTENSOR_HAVE_MPI
bool World::mpi_available() { return false; }

World World::mpi(int*, char***) {
  DT_THROW("World::mpi: this dtensor was built without MPI; install libopenmpi-dev and "
           "openmpi-bin and rebuild (CMake option DTENSOR_MPI=AUTO or ON)");
}
#endif

}  // namespace dtensor
