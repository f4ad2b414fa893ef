// World — the handle every World shares: the size, the held ranks, which
// rank this process is, and the backend behind it. The worlds themselves are
// made where their backends live: World::simulated in src/comm/sim_world.cc,
// World::mpi in src/comm/mpi_world.cc (built with MPI).
#include "dtensor/world.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "world/world_impl.h"

namespace dtensor {

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
  // A simulated world holds every rank, but a shape-only one computing by
  // roles only the stand-ins (world/roles.h).
  if (impl_->simulated && !impl_->roles_active) return rank >= 0 && rank < impl_->size;
  return std::binary_search(impl_->held.begin(), impl_->held.end(), rank);
}

bool World::is_simulated() const { return impl_->simulated; }

bool World::is_shape_only() const { return impl_->shape_only; }

Backend& World::backend() const { return *impl_->backend; }

int World::rank() const { return impl_->simulated ? 0 : impl_->held.front(); }

}  // namespace dtensor
