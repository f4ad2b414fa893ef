// The elementary redistribution transforms: each changes the placement of
// ONE mesh dim and is one small named unit (one file each) with its
// collective. The straightforward planner (redistribute.cc) composes them.
//
// Every transform takes the shards laid out by `from` and returns the shards
// of from.with_placements(placements with [mesh_dim] replaced). Nesting rule:
// several mesh dims sharding the same tensor dim chunk it left to right, so
// only the innermost (right-most) of them can be gathered, split or moved;
// the transforms check this and throw when it is violated.
#pragma once

#include "dtensor/local_tensor.h"
#include "dtensor/spec.h"

namespace dtensor::redistribute_detail {

// S(d) -> R: all_gather along d.                               (s_to_r.cc)
LocalTensor shard_to_replicate(const LocalTensor& in, const DTensorSpec& from, int mesh_dim);
// S(a) -> S(b): all_to_all, split along b, concatenate along a. (s_to_s.cc)
LocalTensor shard_to_shard(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                           int64_t to_dim);
// P(op) -> R: all_reduce.                                      (p_to_r.cc)
LocalTensor partial_to_replicate(const LocalTensor& in, const DTensorSpec& from, int mesh_dim);
// P(op) -> S(d): reduce_scatter along d.                       (p_to_s.cc)
LocalTensor partial_to_shard(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                             int64_t to_dim);
// R -> S(d): keep the own chunk, no communication.             (r_to_s.cc)
LocalTensor replicate_to_shard(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                               int64_t to_dim);
// R -> P(op): sum keeps x/n (floating) or x on the group's first rank and
// zeros elsewhere (integers, so the sum stays exact); avg/max/min keep x.
//                                                              (r_to_p.cc)
LocalTensor replicate_to_partial(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                                 ReduceOp op);

// Applies the one transform from from.placements()[mesh_dim] to `to`
// (identity when equal). Throws for S->P and P(a)->P(b), naming the mesh dim
// and both placements.
LocalTensor apply_transform(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                            Placement to);

// Throws unless no mesh dim after mesh_dim shards tensor dim d (see the
// nesting rule above). `what` names the transform for the message.
void check_innermost(const DTensorSpec& spec, int mesh_dim, int64_t d, const char* what);

// Redistributes shards laid out by `from` to `to`, mesh dim by mesh dim.
// allow_new_partial: whether R -> P may be used (distribute_tensor may, a
// user's redistribute may not).
LocalTensor redistribute_local(const LocalTensor& in, const DTensorSpec& from, const Placements& to,
                               bool allow_new_partial);

}  // namespace dtensor::redistribute_detail
