// The elementary redistribution transforms: each changes the placement of
// one mesh dim (or, merged, of several mesh dims as one flattened group) and
// is one small named unit, one file each, holding its cost under the model
// of SEMANTICS.md and its execution side by side. The planner (plan.cc)
// decides which transforms apply and composes them; the executor
// (execute.cc) is the only caller of the execution functions.
//
// Bytes walk: a plan charges each collective for the bytes per rank of the
// state it runs in, b = global bytes / number of shards; each cost function
// returns the cost and the b of the state after the step.
//
// Nesting rule (checked by the planner, not here): several mesh dims
// sharding the same tensor dim chunk it in their split order (left to right
// unless the placements carry shard orders, spec.h), so only the last of
// them can be gathered or moved; a transform that starts sharding a tensor
// dim chunks the local piece, so its mesh dim becomes the last in the order.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "dtensor/local_tensor.h"
#include "dtensor/mesh.h"
#include "dtensor/redistribute.h"

namespace dtensor::redistribute_detail {

// The ranks a step talks across: mesh dim `dim` of `mesh` (a flattened
// group is dim 0 of the flattened 1-d mesh). n = mesh.size(dim).
struct Group {
  DeviceMesh mesh;
  int dim = 0;
  int64_t n = 1;
  LinkCost link;
};

struct TransformCost {
  double cost_us = 0;
  double bytes_charged = 0;  // what the collective moves per rank
  double bytes_after = 0;    // b of the state after the step
  // Bytes per rank the backends hold during the step besides its input and
  // output: a reduction's receive buffer under MPI (comm/fold_temp.h).
  double temp_bytes = 0;
};

// S(d) -> R: all_gather along d; charged for the gathered bytes b*n.  (s_to_r.cc)
TransformCost shard_to_replicate_cost(double bytes, const Group& g, double base_us);
LocalTensor shard_to_replicate(const LocalTensor& in, const Group& g, int64_t dim);

// S(a) -> S(b): all_to_all, split along b, concatenate along a.      (s_to_s.cc)
TransformCost shard_to_shard_cost(double bytes, const Group& g, double base_us);
LocalTensor shard_to_shard(const LocalTensor& in, const Group& g, int64_t from_dim,
                           int64_t to_dim);

// P(op) -> R: all_reduce, then / divisor (merged sum+avg).            (p_to_r.cc)
TransformCost partial_to_replicate_cost(double bytes, const Group& g, double base_us);
LocalTensor partial_to_replicate(const LocalTensor& in, const Group& g, ReduceOp op,
                                 double divisor);

// P(op) -> S(d): reduce_scatter along d, then / divisor.             (p_to_s.cc)
TransformCost partial_to_shard_cost(double bytes, const Group& g, double base_us);
LocalTensor partial_to_shard(const LocalTensor& in, const Group& g, ReduceOp op, double divisor,
                             int64_t to_dim);

// R -> S(d): keep the own chunk; free.                               (r_to_s.cc)
TransformCost replicate_to_shard_cost(double bytes, const Group& g);
LocalTensor replicate_to_shard(const LocalTensor& in, const Group& g, int64_t to_dim);

// R -> P(op): local and free. Sum keeps x/n (floating) or x on the group's
// first rank and zeros elsewhere (integers, so the sum stays exact);
// avg/max/min keep x.                                                 (r_to_p.cc)
TransformCost replicate_to_partial_cost(double bytes);
LocalTensor replicate_to_partial(const LocalTensor& in, const Group& g, ReduceOp op);

// S/R -> S/R in one step: every rank receives its target box's pieces
// straight from ranks that hold them (an all_to_allv of boxes over the
// mesh dims data crosses).                                      (box_exchange.cc)
// A piece: the box [start, start + size) of the global tensor, sent from
// mesh coordinate `from` to `to` (row-major linear indices).
struct BoxPiece {
  int64_t from = 0, to = 0;
  Shape start, size;
};
// The pieces from layout `from` to `to`, grouped by receiver: each target
// byte is in exactly one piece. nullopt when either end has a Partial, or
// when there are more than max_pairs (holder, receiver) pairs to intersect.
std::optional<std::vector<BoxPiece>> box_pieces(const DTensorSpec& from, const DTensorSpec& to,
                                                size_t max_pairs = size_t{1} << 16);
// The same pieces, handed one by one to visit(from, to, start, size) (the
// box as tensor-dim arrays) without storing them; false where box_pieces
// gives nullopt.
using PieceVisitor =
    std::function<void(int64_t from, int64_t to, const int64_t* start, const int64_t* size)>;
bool for_each_box_piece(const DTensorSpec& from, const DTensorSpec& to, size_t max_pairs,
                        const PieceVisitor& visit);
// The one-step plan from `from` to `to` as a box exchange, with its cost and
// peak; nullopt when box_pieces has none or nothing changes. Its mesh dims:
// those whose placement changes or that data crosses (every dim when the
// shard orders of the untouched ones would be renumbered).
std::optional<RedistributeStep> box_exchange_step(const DTensorSpec& from, const DTensorSpec& to,
                                                  double base_us);
// Runs it over g, the (flattened) group of the step's mesh dims.
LocalTensor box_exchange(const LocalTensor& in, const Group& g, const DTensorSpec& from,
                         const DTensorSpec& to);

// Divides every shard by `divisor` (no-op for 1), in place.
// REQUIRES: no other handle shares the shards' storage (a collective's output).
LocalTensor divide_shards(LocalTensor in, double divisor);

}  // namespace dtensor::redistribute_detail
