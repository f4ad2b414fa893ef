// The current rank (dtensor.current_rank): which rank "this process" is for
// the calls that PyTorch answers from one rank's point of view
// (DTensor.to_local(), from_local of one tensor, DeviceMesh.get_rank(),
// get_local_rank(), get_coordinate()). Under MPI a process holds one rank
// and that is its current rank. A simulated world holds every rank, so
// those calls need `with dtensor.current_rank(r):` to say which one; the
// rest of the API (ops, collectives, local_shards()) still acts for all.
// Per thread, as the other modes are.
#pragma once

#include <optional>

#include "dtensor/dtensor.h"

namespace dtensor::python {

// The rank of the innermost current_rank block of this thread, if any.
std::optional<int> current_rank_override();

// The rank `world` acts as for `what`: the current_rank block's (which the
// world must hold), else the only rank this process holds; throws
// dtensor::Error naming `what` when a simulated world holds several ranks
// and no block chose one.
int current_rank_of(const World& world, const char* what);

}  // namespace dtensor::python
