// The MPI backend's deterministic reductions: exchange and fold in member
// order (see mpi_fold.h).
#include "comm/mpi_fold.h"

#include <algorithm>

#include "comm/fold_temp.h"
#include "comm/mpi_pack.h"
#include "comm/reduce_kernel.h"

namespace dtensor::mpi_detail {

namespace {

// A committed datatype for elements [e0, e1) of piece j, in piece order,
// displaced in bytes from the shard's start: the rest of a row, whole rows
// (a vector), the start of a row. Three blocks at most, however many rows.
// REQUIRES: e0 < e1.
MPI_Datatype piece_range_type(const Pieces& p, int j, int64_t e0, int64_t e1, MPI_Datatype base,
                              int64_t isz, const char* coll) {
  const int64_t w = p.row(j), stride = p.a.len * p.a.inner;
  int counts[3];
  MPI_Aint displs[3];
  MPI_Datatype types[3];
  MPI_Datatype rows = MPI_DATATYPE_NULL;
  int blocks = 0;
  auto run = [&](int64_t from, int64_t count, MPI_Datatype type) {
    counts[blocks] = count_of(count, coll);
    displs[blocks] = static_cast<MPI_Aint>(p.at(j, from) * isz);
    types[blocks++] = type;
  };
  if (e0 / w == (e1 - 1) / w) {
    run(e0, e1 - e0, base);  // within one row
  } else {
    const int64_t first_whole = (e0 + w - 1) / w, end_whole = e1 / w;
    if (e0 % w != 0) run(e0, w - e0 % w, base);
    if (end_whole > first_whole) {
      check_mpi(MPI_Type_vector(count_of(end_whole - first_whole, coll), count_of(w, coll),
                                count_of(stride, coll), base, &rows),
                "MPI_Type_vector");
      run(first_whole * w, 1, rows);
    }
    if (e1 % w != 0) run(end_whole * w, e1 % w, base);
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_struct(blocks, counts, displs, types, &type), "MPI_Type_create_struct");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  if (rows != MPI_DATATYPE_NULL) MPI_Type_free(&rows);
  return type;
}

// A committed datatype for `count` elements at `disp` bytes from the buffer
// given to MPI: displacements travel as MPI_Aint, past the 2 GiB of the
// int byte displacements of MPI_Alltoallw.
MPI_Datatype run_at(int count, MPI_Aint disp, MPI_Datatype base) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_struct(1, &count, &disp, &base, &type), "MPI_Type_create_struct");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  return type;
}

}  // namespace

void exchange_and_fold(const void* shard, const Pieces& p, DType dtype, ReduceOp op,
                       const MpiBackend::Group& g, void* out, const char* coll,
                       const Landing* landing) {
  const int n = g.size, me = g.index;
  const int64_t isz = static_cast<int64_t>(itemsize(dtype));
  int64_t most = 0;
  for (int k = 0; k < n; ++k) most = std::max(most, p.elems(k));
  if (most == 0) return;
  const bool own_in_place = p.flat(me);
  if (landing != nullptr && (landing->room == 0 || !own_in_place)) landing = nullptr;
  const int64_t slot =
      std::min(landing != nullptr ? landing->room : fold_temp::slot_bytes(n) / isz, most);
  // Without a landing area, member k's slot in a receive buffer (the own
  // one, if any, last).
  auto slot_of = [&](int k) { return k == me ? n - 1 : k < me ? k : k - 1; };
  const Tensor buffer =
      landing != nullptr ? Tensor() : Tensor::empty({(own_in_place ? n - 1 : n) * slot}, dtype);
  const auto* src = static_cast<const std::byte*>(shard);
  auto* recv_base = landing != nullptr ? landing->base : static_cast<std::byte*>(buffer.raw_data());
  auto recv_at = [&](int k) {
    return landing != nullptr ? landing->at[k]
                              : static_cast<std::byte*>(buffer.raw_data()) + slot_of(k) * slot * isz;
  };
  const MPI_Datatype base = mpi_type(dtype);
  // Every piece one run (nothing before the dim: all_reduce, or a leading
  // scatter dim): counts and element displacements (MPI_Alltoallv), which
  // Open MPI ran faster than the same moves as one-block datatypes of
  // MPI_Alltoallw (64 MiB all_reduce on 4 processes, alternating runs:
  // ~90-130 against ~130 ms).
  // (Counts and displacements are then MPI ints, as for MPI_Allgatherv.)
  const bool runs = p.a.outer == 1 && own_in_place;
  const size_t un = static_cast<size_t>(n);
  std::vector<int> send_counts(un), recv_counts(un), zeros(un, 0), send_displs(un), recv_displs(un);
  std::vector<MPI_Datatype> send_types(un, base), recv_types(un, base);
  std::vector<const void*> in(un);
  for (int64_t e0 = 0; e0 < most; e0 += slot) {
    const int64_t mine = std::clamp<int64_t>(p.elems(me) - e0, 0, slot);
    for (int k = 0; k < n; ++k) {
      const int64_t theirs = std::clamp<int64_t>(p.elems(k) - e0, 0, slot);
      const bool local = k == me && own_in_place;
      send_types[k] = recv_types[k] = base;
      send_counts[k] = recv_counts[k] = send_displs[k] = recv_displs[k] = 0;
      in[k] = local ? src + (mine > 0 ? p.at(me, e0) : 0) * isz : recv_at(k);
      if (local) continue;
      if (runs) {
        send_counts[k] = count_of(theirs, coll);
        send_displs[k] = theirs > 0 ? count_of(p.at(k, e0), coll) : 0;
        recv_counts[k] = count_of(mine, coll);
        recv_displs[k] = count_of((recv_at(k) - recv_base) / isz, coll);
        continue;
      }
      if (theirs > 0) {
        send_types[k] = piece_range_type(p, k, e0, e0 + theirs, base, isz, coll);
        send_counts[k] = 1;
      }
      if (mine > 0) {
        recv_types[k] = run_at(count_of(mine, coll), recv_at(k) - recv_base, base);
        recv_counts[k] = 1;
      }
    }
    int rc = MPI_SUCCESS;
    if (runs && n > 1) {
      rc = MPI_Alltoallv(shard, send_counts.data(), send_displs.data(), base, recv_base,
                         recv_counts.data(), recv_displs.data(), base, g.comm);
    } else if (!runs) {
      rc = MPI_Alltoallw(shard, send_counts.data(), zeros.data(), send_types.data(), recv_base,
                         recv_counts.data(), zeros.data(), recv_types.data(), g.comm);
      for (int k = 0; k < n; ++k) {
        if (send_counts[k] > 0) MPI_Type_free(&send_types[k]);
        if (recv_counts[k] > 0) MPI_Type_free(&recv_types[k]);
      }
    }
    check_mpi(rc, runs ? "MPI_Alltoallv" : "MPI_Alltoallw");
    if (mine > 0)
      reduce_kernel::fold(dtype, op, in.data(), in.size(), static_cast<std::byte*>(out) + e0 * isz,
                          mine);
  }
}

}  // namespace dtensor::mpi_detail
