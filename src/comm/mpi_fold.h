// Internal to the MPI backend (src/comm/mpi_*.cc): the deterministic
// reductions. reduce_scatter and all_reduce do not leave the sum to
// MPI_Reduce_scatter / MPI_Allreduce, whose order of terms is the MPI
// library's (and whose MPI_MAX / MPI_MIN drop NaN): member j receives piece
// j of every member's shard and folds them in member order with
// reduce_kernel.h, the kernel the simulated backend uses, so both worlds
// give the same bits. What is received before folding is bounded by the
// group size (fold_temp.h), not by the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/around.h"
#include "comm/mpi_backend.h"
#include "dtensor/spec.h"

namespace dtensor::mpi_detail {

// A reduction's pieces: the shard seen as [outer, len, inner] (around.h);
// piece j is rows [ranges[j].start, + size) of len under every outer index,
// taken in memory order, and member j folds piece j of every member's shard.
struct Pieces {
  Around a;
  std::vector<ChunkRange> ranges;
  int64_t row(int j) const { return ranges[j].size * a.inner; }  // elements per outer index
  int64_t elems(int j) const { return a.outer * row(j); }
  // Element e of piece j, as an element offset in the shard.
  int64_t at(int j, int64_t e) const {
    const int64_t w = row(j);
    return (e / w) * a.len * a.inner + ranges[j].start * a.inner + e % w;
  }
  // Whether piece j is one run of the shard (nothing before the dim, or the
  // whole dim), so it can be read in place.
  bool flat(int j) const { return a.outer == 1 || ranges[j].size == a.len || elems(j) == 0; }
};

// Where the pieces of this member's share land before they are folded: by
// default a receive buffer of a slot per member (fold_temp.h); all_reduce
// passes its result instead, since member k's part of this member's share
// can wait where member k's folded piece arrives later.
struct Landing {
  std::byte* base = nullptr;   // the buffer the slots lie in
  std::vector<std::byte*> at;  // at[k]: member k's slot (k != this member)
  int64_t room = 0;            // elements in every slot, the same on every member
};

// Folds piece `me` of every member's shard, in member order, into `out`
// (elems(me) elements). The pieces arrive in rounds (MPI_Alltoallw, each
// range of a shard described in place by piece_range_type: no packed copy),
// each folded before the next, so what is received at a time is bounded by
// the slots: fold_temp::slot_bytes(n) per member, or the room of a landing
// area. Every element is folded on its own in the same order whatever the
// rounds, so the bits are those of one exchange of whole pieces, and of the
// simulated backend. The own piece is read where it lies when it is one run
// of the shard; otherwise the same call copies it into a slot of its own.
void exchange_and_fold(const void* shard, const Pieces& p, DType dtype, ReduceOp op,
                       const MpiBackend::Group& g, void* out, const char* coll,
                       const Landing* landing = nullptr);

}  // namespace dtensor::mpi_detail
