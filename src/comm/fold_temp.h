// What a reduction holds under MPI besides its input and output: the pieces
// it receives before folding them in member order (mpi_fold.cc). Shared
// with the planner (plan_price.cc, price()), whose peak-memory model must agree
// with what the backend allocates.
//
// A large all_reduce receives the others' parts of its share into its own
// result, where their folded pieces arrive afterwards: nothing besides input
// and output. A reduce_scatter's output has no such room: it receives in
// rounds of at most slot_bytes(n) from each member, folded into the output
// before the next round, so its temporary is bounded by the group size, not
// by the tensor (a 64 MiB reduce_scatter on 4 ranks holds 4 x 256 KiB, not
// 48 MiB). Each round is one more collective call; slots of 256 KiB keep
// that latency small next to the bytes. A small all_reduce gathers every
// member's whole shard in one exchange (latency, not bytes, is its cost),
// bounded the same way: shards of at most 64 KiB, n of them within
// kBudgetBytes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dtensor::fold_temp {

// The receive buffer of one round, all members' slots together.
constexpr int64_t kBudgetBytes = int64_t{1} << 20;
// A floor on one member's slot, so a round on a large group still moves
// enough bytes to pay for its latency (64 ranks: 64 x 16 KiB).
constexpr int64_t kMinSlotBytes = int64_t{16} << 10;
// all_reduce of shards up to this size (and n of them within kBudgetBytes):
// one MPI_Allgather of whole shards and a fold of all n on every member;
// 16 KiB on 4 processes: 0.71x MPI_Allreduce against 1.16x with the two
// exchanges (docs/PERFORMANCE.md).
constexpr int64_t kSmallAllReduceBytes = int64_t{64} << 10;

// Bytes received from one member per round.
inline int64_t slot_bytes(int64_t n) {
  return std::max(kBudgetBytes / std::max<int64_t>(n, 1), kMinSlotBytes);
}

inline bool small_all_reduce(int64_t n, int64_t shard_bytes) {
  return n > 1 && shard_bytes <= kSmallAllReduceBytes && n * shard_bytes <= kBudgetBytes;
}

// The temporaries of an all_reduce of `shard_bytes` per member over n:
// every member's shard (small), or none (large; pieces of fewer than one
// element per member, a tensor smaller than the group, take n - 1 elements).
inline double all_reduce_temp(int64_t n, double shard_bytes) {
  if (n <= 1) return 0;
  const bool small = small_all_reduce(n, static_cast<int64_t>(shard_bytes));
  return small ? static_cast<double>(n) * shard_bytes : 0;
}

// The temporaries of a reduce_scatter: a slot for every member, the own one
// included (its chunk is strided when the scatter dim is not the leading
// one). Pieces are taken as b/n (an even split; Tensor::chunk's ceil may
// make one up to a row of the dim larger).
inline double reduce_scatter_temp(int64_t n, double shard_bytes) {
  if (n <= 1) return 0;
  const double piece = shard_bytes / static_cast<double>(n);
  return static_cast<double>(n) * std::min(static_cast<double>(slot_bytes(n)), piece);
}

}  // namespace dtensor::fold_temp
