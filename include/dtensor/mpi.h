// MPI interop: a World over a communicator the program already has (a
// sub-communicator of a larger job, or MPI_COMM_WORLD after the program's
// own MPI_Init). Include only in programs built against MPI; everything else
// needs only World::mpi() from world.h.
//
//   MPI_Comm half;
//   MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, rank, &half);
//   dtensor::World world = dtensor::world_from_mpi_comm(half);
#pragma once

#include <mpi.h>

#include "dtensor/world.h"

namespace dtensor {

// A World of comm's ranks holding this process's rank in comm. The
// communicator is duplicated (dtensor's traffic never mixes with the
// program's); comm itself stays the program's. REQUIRES: MPI is initialised.
World world_from_mpi_comm(MPI_Comm comm);

// The desync check of an MPI world (also on when DTENSOR_MPI_CHECK=1 is set
// at start): before each collective the members of its group exchange what
// they are about to call (kind, mesh dim, group, shapes, dtype, op) and, on
// a mismatch, every member raises a dtensor::Error naming both sides
// instead of hanging or exchanging garbage. Costs one small allgather per
// collective; for debugging. REQUIRES: world is an MPI world.
void set_mpi_desync_check(const World& world, bool on);
bool mpi_desync_check(const World& world);

// The collective timeout of this process's MPI worlds, in seconds (default
// 600, like NCCL's; also set by DTENSOR_COLLECTIVE_TIMEOUT=<seconds> at
// start; 0 or inf turns it off, and then reads 0). A collective that has not completed after it
// ends the whole job: the rank prints "dtensor: rank R: collective timeout:
// ..." naming the collective, the mesh dim, the group's ranks and, for ranks
// on its node, the ones that did not arrive and what they do instead, then
// exits with status 1, which makes mpirun end the other ranks. Watched by a
// thread that makes no MPI call; the cost per collective is a lock and a few
// stores.
// REQUIRES: seconds >= 0, not NaN (0 or inf: off); otherwise throws, keeping the setting.
void set_mpi_collective_timeout(double seconds);
double mpi_collective_timeout();

}  // namespace dtensor
