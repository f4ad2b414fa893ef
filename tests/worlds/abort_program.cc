// An exception escaping main on one rank must end the whole MPI job with
// that rank's message, not leave the other ranks waiting in a collective.
// Rank 1 throws; the others enter an all_reduce that rank 1 never joins.
#include <stdexcept>

#include "dtensor/dtensor.h"

int main(int argc, char** argv) {
  using namespace dtensor;
  World world = World::mpi(&argc, &argv);
  DeviceMesh mesh(world, {world.size()});
  if (world.rank() == 1) throw std::runtime_error("boom from rank 1");
  DTensor d = distribute_tensor(Tensor::ones({4}), mesh, {Partial()});
  d.full_tensor();  // blocks forever without the abort
  return 0;
}
