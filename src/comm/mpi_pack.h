// Internal to the MPI backend (src/comm/mpi_*.cc): a shard's bytes as MPI
// sees them. The MPI datatype and op of a dtype, checked MPI calls and
// counts, and the two ways a piece of a shard reaches MPI: described in
// place by a derived datatype (a block along one dim, a box), which is how
// every redistribution step runs, or packed into one buffer, which only
// scatter and the native reduce_scatter still do.
// Counts and displacements are MPI ints: more than 2^31-1 elements in a
// piece (or before one, in a buffer) is an error.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtensor/placement.h"
#include "dtensor/tensor.h"

namespace dtensor::mpi_detail {

MPI_Datatype mpi_type(DType d);

// bool + bool is logical or (as in PyTorch and the simulated backend).
MPI_Op mpi_op(ReduceOp op, DType d);

// Throws naming `call` and MPI's message unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);

// n as an MPI count; throws naming `coll` past INT_MAX.
int count_of(int64_t n, const char* coll);

std::byte* bytes_of(const Tensor& t);

// The n chunks of t along dim (Tensor::chunk) packed one after the other
// into one contiguous buffer; counts[i] = elements of chunk i. No copy when
// each chunk is one block of t already (nothing before dim) and t is contiguous.
Tensor pack_chunks(const Tensor& t, int64_t n, int64_t dim, std::vector<int>& counts,
                   const char* coll);

// A committed datatype for the block [start, start + len) along dim of a
// contiguous tensor of `whole` shape (a subarray; one element's type when
// the block is empty, with count 0 at the call).
MPI_Datatype block_type(const Shape& whole, int64_t dim, int64_t start, int64_t len,
                        MPI_Datatype base);

// A committed datatype for the box [start, start + size) of a contiguous
// tensor of `whole` shape (a 0-d tensor: its one element).
MPI_Datatype box_type(const Shape& whole, const Shape& start, const Shape& size,
                      MPI_Datatype base);

// The displacements of buffers of these counts laid one after the other.
std::vector<int> displacements(const std::vector<int>& counts);

}  // namespace dtensor::mpi_detail
