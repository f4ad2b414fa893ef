// Internal to the MPI backend (src/comm/mpi_*.cc): the desync check
// (DTENSOR_MPI_CHECK=1, or MpiBackend::set_desync_check; see mpi_backend.h).
// Before each collective the members of its group exchange a Call record
// of what they are about to call, point to point on a communicator of
// their own (never mixed with collective data), and every member raises the
// same dtensor::Error, naming both sides, when the records differ, instead
// of hanging or exchanging garbage. At a group's first use the records are
// compared before its communicator is created, so ranks that disagree on
// the group never meet in MPI_Comm_create_group. With the check on, the
// sizes a collective receives are then checked against what the senders
// announced (check_received_lengths here; broadcast's and scatter's header
// beside that header in mpi_backend.cc).
#pragma once

#include <cstdint>

#include "comm/mpi_backend.h"

namespace dtensor::mpi_detail {

using Kind = MpiBackend::Kind;
using Call = MpiBackend::Call;

// The record of a call of `kind` on shard t (null: not known here, as on a
// non-root member of broadcast or scatter). dim_a and dim_b as in Call;
// free_dim: the dim whose length may differ between members (-1: none).
Call make_call(Kind kind, int mesh_dim, int group_size, int64_t first_rank, const Tensor* t,
               int64_t dim_a, int64_t dim_b, int64_t free_dim, int reduce_op = -1);

}  // namespace dtensor::mpi_detail
