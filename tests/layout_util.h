// Helpers for tests of layouts: DTensors with Partial placements built from
// known pieces, and random placements.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>
#include <random>

#include "dtensor/dtensor.h"

namespace dtensor::testing {

// Integer-valued float data: sums of partial pieces are exact in any order.
inline Tensor int_valued(const Shape& shape, uint64_t seed) {
  return Tensor::randint(-50, 50, shape, seed).to(DType::Float32);
}

// Small multiples of 1/8: exact in float32, and so are the sums of the
// Partial pieces make_dtensor builds from them.
inline Tensor small_valued(const Shape& shape, uint64_t seed) {
  return int_valued(shape, seed) / 8.0;
}

// Class indices in [0, classes), with about one in five set to ignore_index.
inline Tensor class_targets(const Shape& shape, int64_t classes, int64_t ignore_index,
                            uint64_t seed) {
  Tensor t = Tensor::randint(0, classes, shape, seed);
  Tensor drop = lt(Tensor::rand(shape, seed + 1), 0.2);
  return masked_fill(t, drop, ignore_index);
}

// A DTensor with the given (possibly Partial) placements whose full value is
// `full`. Partial pieces are known: for sum, member 0 of each group holds
// full - (n-1)k and the others k (k integer-valued); avg: every member holds
// full; max/min: member 0 holds full, the others full -/+ 7.
inline DTensor make_dtensor(const Tensor& full, const DeviceMesh& mesh, const Placements& pl,
                            uint64_t seed) {
  Placements base = pl;
  for (Placement& p : base)
    if (p.is_partial()) p = Replicate();
  DTensor d = distribute_tensor(full, mesh, base);
  LocalTensor local = d.local();
  for (size_t i = 0; i < pl.size(); ++i) {
    if (!pl[i].is_partial()) continue;
    const int md = static_cast<int>(i);
    const ReduceOp op = pl[i].reduce_op();
    local = local.map([&](int rank, const Tensor& t) {
      const int64_t g = mesh.group_index(rank, md);
      const int64_t n = mesh.size(md);
      if (op == ReduceOp::Sum) {
        Tensor k = int_valued(t.shape(), seed + 17 * i).to(t.dtype());
        return g == 0 ? t - k * static_cast<double>(n - 1) : k.clone();
      }
      if (op == ReduceOp::Avg || g == 0) return t;
      return op == ReduceOp::Max ? t - 7.0 : t + 7.0;
    });
  }
  return DTensor(DTensorSpec(mesh, pl, full.shape(), full.dtype()), local);
}

// A linear op keeps a Partial(sum) input partial (x / 10, mean, dropout,
// attention's v), so each piece's result is rounded at the piece's own
// magnitude before the pieces are summed; make_dtensor's pieces reach
// hundreds over several mesh dims while the values stay near 10. The
// absolute error this can add: one rounding per piece at the largest
// magnitude a piece can have (member 0 holds t - (n-1)k, |k| <= 50, over
// each Partial(sum) mesh dim in turn). Depends only on the full tensor and
// the layout, so every rank of an MPI run allows the same. 0 for integer
// dtypes and layouts without Partial(sum).
inline double partial_sum_rounding(const Tensor& full, const DeviceMesh& mesh,
                                   const Placements& pl) {
  if (!is_floating(full.dtype()) || full.numel() == 0) return 0;
  double pieces = 1, growth = 0;  // growth: what the k's add to the largest piece
  for (size_t i = 0; i < pl.size(); ++i) {
    if (!pl[i].is_partial() || pl[i].reduce_op() != ReduceOp::Sum) continue;
    const double n = static_cast<double>(mesh.size(static_cast<int>(i)));
    pieces *= n;
    growth += 50 * (n - 1);
  }
  if (pieces == 1) return 0;  // most cases: no pass over the tensor
  const double largest = amax(abs(full.to(DType::Float64))).item<double>() + growth;
  const double eps = full.dtype() == DType::Float64 ? 0x1p-52 : 0x1p-23;
  return 2 * eps * pieces * largest;
}

// A random mesh shape of 1-4 dims with at most max_ranks ranks: sizes 1-4
// mostly, sometimes up to 8, so that 3-d and 4-d meshes of 12-64 ranks
// (2x2x4, 3x2x2, 2x2x2x2, 4x4x4, 2x3x4, ...) come up as often as small ones.
// Draws again until the shape fits.
inline Shape random_mesh(std::mt19937& rng, int64_t max_ranks) {
  for (;;) {
    Shape mesh_shape;
    const int mesh_nd = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < mesh_nd; ++i)
      mesh_shape.push_back(rng() % 8 == 0 ? 1 + rng() % 8 : 1 + rng() % 4);
    if (mesh_shape.product() <= max_ranks) return mesh_shape;
  }
}

// A random tensor shape of rank 1-4 with sizes 0-9, so that uneven and empty
// shards occur.
inline Shape random_small_shape(std::mt19937& rng) {
  Shape shape;
  const int nd = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < nd; ++i) shape.push_back(rng() % 10);
  return shape;
}

// A random tensor shape of rank 1-4 for a mesh of mesh_ranks ranks: sizes
// 0-9, and on big meshes sometimes up to 2-3x the mesh's rank count, so that
// deep nested chunkings are uneven without being mostly empty.
inline Shape random_shape_for(std::mt19937& rng, int64_t mesh_ranks) {
  Shape shape = random_small_shape(rng);
  for (int64_t& s : shape)
    if (mesh_ranks > 8 && rng() % 3 == 0) s = static_cast<int64_t>(rng() % (3 * mesh_ranks + 1));
  if (shape.product() > 4096) shape[0] = std::min<int64_t>(shape[0], 3);
  return shape;
}

// A random placement: R, S(d < ndim), or (allow_partial) P(random op).
inline Placement random_placement(std::mt19937& rng, int64_t ndim, bool allow_partial) {
  const int k = static_cast<int>(rng() % (allow_partial ? 4 : 3));
  if (k == 0) return Replicate();
  if (k == 3) {
    const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
    return Partial(ops[rng() % 4]);
  }
  return Shard(static_cast<int64_t>(rng() % ndim));
}

// Random source placements (Partials of one kind, or sum mixed with avg)
// and targets that keep some of the source's Partials.
inline std::pair<Placements, Placements> random_placement_pair(std::mt19937& rng, int mesh_ndim,
                                                               int64_t ndim) {
  Placements from, to;
  std::optional<ReduceOp> kind;
  for (int i = 0; i < mesh_ndim; ++i) {
    Placement p = random_placement(rng, ndim, true);
    if (p.is_partial()) {
      const bool compatible =
          !kind || *kind == p.reduce_op() ||
          ((*kind == ReduceOp::Sum || *kind == ReduceOp::Avg) &&
           (p.reduce_op() == ReduceOp::Sum || p.reduce_op() == ReduceOp::Avg));
      if (!kind) kind = p.reduce_op();
      if (!compatible) p = Partial(*kind);
    }
    from.push_back(p);
  }
  for (int i = 0; i < mesh_ndim; ++i) {
    Placement p = random_placement(rng, ndim, false);
    if (from[i].is_partial() && rng() % 3 == 0) p = from[i];
    to.push_back(p);
  }
  return {from, to};
}

// `p` with, for each tensor dim sharded by two or more mesh dims, about
// every other time a random split order (shard order, spec.h); the result
// may equal the natural order, which DTensorSpec then normalizes away.
inline Placements with_random_orders(std::mt19937& rng, Placements p) {
  for (int64_t d = 0; d < kMaxDims; ++d) {
    std::vector<size_t> dims;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i].is_shard(d)) dims.push_back(i);
    if (dims.size() < 2 || rng() % 2 == 0) continue;
    std::vector<int64_t> order(dims.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t k = 0; k < dims.size(); ++k) p[dims[k]] = Shard(d, order[k]);
  }
  return p;
}

// Random placements without Partial for an `nd`-d tensor on a mesh of
// `mesh_nd` dims: each mesh dim Replicate about one time in three, else
// Shard of a random dim (always Replicate for a 0-d tensor), then random
// split orders where a dim is sharded twice or more.
inline Placements random_shard_or_replicate(std::mt19937& rng, int mesh_nd, int64_t nd) {
  Placements p;
  for (int i = 0; i < mesh_nd; ++i)
    p.push_back(rng() % 3 == 0 || nd == 0 ? Replicate() : Shard(static_cast<int64_t>(rng() % nd)));
  return with_random_orders(rng, p);
}

// A planner test's mesh of `nd` dims: sizes 1-4 and at most 64 ranks (one
// dim: 1-8).
inline Shape random_planner_mesh(std::mt19937& rng, int nd) {
  if (nd == 1) return Shape{1 + static_cast<int64_t>(rng() % 8)};
  for (;;) {
    Shape s;
    for (int i = 0; i < nd; ++i) s.push_back(1 + static_cast<int64_t>(rng() % 4));
    if (s.product() <= 64) return s;
  }
}

// The default topology (one host for <= 8 ranks), small hosts so that outer
// dims cross them, or explicit and uneven per-dim links, so that a planner
// meets groups whose dims differ in bandwidth and latency.
inline void random_topology(std::mt19937& rng, DeviceMesh& mesh) {
  Topology t = mesh.topology();
  switch (rng() % 3) {
    case 0: break;
    case 1: t.devices_per_host = int64_t{1} << (rng() % 4); break;
    default:
      for (int i = 0; i < mesh.ndim(); ++i)
        t.per_dim.push_back(LinkCost{5.0 + static_cast<double>(rng() % 300),
                                     0.1 + static_cast<double>(rng() % 40) / 10});
  }
  mesh.set_topology(t);
}

// Tensor shapes of rank 1-4 for planner tests: of `kinds` (3 or more)
// equally likely kinds, the last is dims up to 4096 (bandwidth decides
// between plans), the one before dims up to 64 (as the bench draws them),
// and the rest small dims 0-9 (uneven and empty shards).
inline Shape random_planner_shape(std::mt19937& rng, int kinds) {
  const int nd = 1 + static_cast<int>(rng() % 4);
  const int kind = static_cast<int>(rng() % static_cast<unsigned>(kinds));
  Shape s;
  for (int i = 0; i < nd; ++i) {
    if (kind < kinds - 2) s.push_back(static_cast<int64_t>(rng() % 10));
    else if (kind == kinds - 2) s.push_back(1 + static_cast<int64_t>(rng() % 64));
    else s.push_back(1 + static_cast<int64_t>(rng() % 4096));
  }
  return s;
}

}  // namespace dtensor::testing
