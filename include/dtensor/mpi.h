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

}  // namespace dtensor
