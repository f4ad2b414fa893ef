// The current rank (dtensor.current_rank): which rank "this process" is for
// the calls that PyTorch answers from one rank's point of view
// (DTensor.to_local(), from_local of one tensor, DeviceMesh.get_rank(),
// get_local_rank(), get_coordinate()). Under MPI a process holds one rank
// and that is its current rank. A simulated world holds every rank, so
// those calls need `with dtensor.current_rank(r):` to say which one; the
// rest of the API (ops, collectives, local_shards()) still acts for all.
// Per thread, as the other modes are. Outside a block, the Python package
// answers those calls with a dtensor.RankLocal: one value per held rank
// (python/dtensor/_rank_local.py).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "dtensor/dtensor.h"

namespace dtensor::python {

// The rank of the innermost current_rank block of this thread, if any.
std::optional<int> current_rank_override();

// The rank `world` acts as for `what`: the current_rank block's (which the
// world must hold), else the only rank this process holds; throws
// dtensor::Error naming `what` when a simulated world holds several ranks
// and no block chose one.
int current_rank_of(const World& world, const char* what);

// A dtensor.RankLocal's {rank: value}; nullopt for any other object.
std::optional<pybind11::dict> rank_local_values(pybind11::handle obj);

// The shards a Python value gives for the ranks of `mesh` this process
// holds: one Tensor (or array) for every held rank (inside current_rank,
// that rank's; the others get copies), a dict {rank: tensor} or a
// RankLocal of them, or a sequence in held-rank order (dtensor.cc).
LocalTensor local_from_python(pybind11::handle obj, const DeviceMesh& mesh);

// Whether a Python value is a rank's local tensor (a Tensor, or a
// RankLocal of them) rather than a DTensor: what a module or loss takes as
// each rank's own part (PyTorch's plain tensors under SPMD).
bool is_local_value(pybind11::handle obj);

// `local` (see is_local_value) as a DTensor on `mesh` with `placements`,
// from_local's way; the global shape assumes even shards, as PyTorch's
// from_local does without shape=.
DTensor local_value_as_dtensor(pybind11::handle local, const DeviceMesh& mesh,
                               const Placements& placements);

}  // namespace dtensor::python
