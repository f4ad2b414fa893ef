// One program, two ways to run it: `build/bin/example_both_worlds` holds
// the 4 ranks in this process (the simulated world); under
// `mpirun -np 4 build/bin/example_both_worlds` each process is one rank.
// Nothing but the World differs. docs/mpi.md walks through it.
#include <dtensor/dtensor.h>

#include <iostream>
#include <sstream>

using namespace dtensor;

int main(int argc, char** argv) {
  World world = World::from_launcher(/*simulated_size=*/4, &argc, &argv);
  if (world.size() != 4) {
    std::cerr << "this example needs 4 ranks, got " << world.size()
              << "; run it alone or with mpirun -np 4\n";
    return 2;
  }
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  // Every rank makes the same global tensor (same seed) and keeps its part;
  // 7 rows over dp = 2 give uneven shards of 4 and 3 rows.
  Tensor x = Tensor::randn({7, 6}, /*seed=*/0);
  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});

  CommDebugMode comm;
  DTensor r = d.redistribute({Replicate(), Shard(1)});  // all_gather over dp
  const int64_t gathers = comm.count(CollectiveKind::AllGather);
  const bool same = equal(r.full_tensor(), x);          // a collective: every rank calls it

  // The ranks this process holds: all 4 when simulated, its own under MPI.
  // One write per process, so the lines of different processes do not mix.
  std::ostringstream out;
  for (int rank : world.held_ranks()) {
    out << (world.is_simulated() ? "simulated" : "MPI") << " rank " << rank << " of "
        << world.size() << " " << *mesh.coordinate(rank) << ": S(0),S(1) shard "
        << d.to_local(rank).shape() << " -> R,S(1) shard " << r.to_local(rank).shape() << ", "
        << gathers << " all_gather, full_tensor == x: " << (same ? "yes" : "no") << "\n";
  }
  std::cout << out.str() << std::flush;
  return same && gathers == 1 ? 0 : 1;
}
