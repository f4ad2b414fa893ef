// The DTensor factories: zeros, ones, full, empty, and those whose values
// depend on the position, linspace and eye. Each held rank allocates only
// its own shard (all of them checked against the memory limit before the
// first is made), cut from the global values by the shard's global offset,
// so every layout gives the values of the plain Tensor factory; a
// shape-only world gets the layout without values. A Partial(sum) mesh dim
// holds the values on the first rank of each group and zeros on the others
// (the pieces sum to them); the other Partials hold them everywhere.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/ops.h"

namespace dtensor {
namespace {

// shard_of(extent, sum_zero) makes one rank's shard; sum_zero says that the
// rank is not the first of its group on some Partial(sum) mesh dim.
template <class F>
DTensor make_by_shards(const char* op, const Shape& shape, const DeviceMesh& mesh,
                       const Placements& placements, DType dtype, F&& shard_of) {
  DTensorSpec spec(mesh, placements, shape, dtype);              // validates
  if (mesh.world().is_shape_only()) return DTensor::meta(spec);  // shapes, no values
  std::vector<PlannedTensor> shards;
  for (int r : mesh.held_ranks())
    shards.push_back(
        {"the shard of rank " + std::to_string(r), spec.extent_of_rank(r)->local_shape, dtype});
  check_allocation(op, shards);
  LocalTensor local;
  for (int r : mesh.held_ranks()) {
    bool sum_zero = false;
    for (size_t k = 0; k < spec.placements().size(); ++k) {
      const Placement& p = spec.placements()[k];
      if (p.is_partial() && p.reduce_op() == ReduceOp::Sum &&
          mesh.group_index(r, static_cast<int>(k)) != 0)
        sum_zero = true;
    }
    local.set(r, shard_of(*spec.extent_of_rank(r), sum_zero));
  }
  return DTensor(std::move(spec), std::move(local));
}

// zeros, ones, full (value), empty (no value: the shards as allocated).
DTensor factory(const char* op, const Shape& shape, const DeviceMesh& mesh,
                const Placements& placements, DType dtype, std::optional<Scalar> value) {
  return make_by_shards(op, shape, mesh, placements, dtype,
                        [&](const ShardExtent& e, bool sum_zero) {
                          if (!value) return Tensor::empty(e.local_shape, dtype);
                          return Tensor::full(e.local_shape, sum_zero ? Scalar(0) : *value, dtype);
                        });
}

}  // namespace

DTensor zeros(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
              DType dtype) {
  return factory("zeros", shape, mesh, placements, dtype, Scalar(0));
}
DTensor ones(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
             DType dtype) {
  return factory("ones", shape, mesh, placements, dtype, Scalar(1));
}
DTensor full(const Shape& shape, Scalar value, const DeviceMesh& mesh, const Placements& placements,
             DType dtype) {
  return factory("full", shape, mesh, placements, dtype, value);
}
DTensor empty(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
              DType dtype) {
  return factory("empty", shape, mesh, placements, dtype, std::nullopt);
}

DTensor linspace(double start, double end, int64_t steps, const DeviceMesh& mesh,
                 const Placements& placements, DType dtype) {
  // The 1-d values once (checks steps), each shard a copy of its range.
  const Tensor values = linspace(start, end, steps, dtype);
  return make_by_shards("linspace", {steps}, mesh, placements, dtype,
                        [&](const ShardExtent& e, bool sum_zero) {
                          if (sum_zero) return Tensor::zeros(e.local_shape, dtype);
                          return values.narrow(0, e.global_offset[0], e.local_shape[0]).clone();
                        });
}

DTensor eye(int64_t n, std::optional<int64_t> m, const DeviceMesh& mesh,
            const Placements& placements, DType dtype) {
  eye(0, 0, dtype);  // the dtype's check, before any shape is made
  const int64_t cols = m.value_or(n);
  DT_CHECK(n >= 0, "eye: n must be greater or equal to 0, got ", n);
  DT_CHECK(cols >= 0, "eye: m must be greater or equal to 0, got ", cols);
  return make_by_shards("eye", {n, cols}, mesh, placements, dtype,
                        [&](const ShardExtent& e, bool sum_zero) {
                          // The global diagonal i == j crosses this block at column - row =
                          // row offset - column offset.
                          Tensor block = Tensor::zeros(e.local_shape, dtype);
                          if (!sum_zero)
                            diagonal(block, e.global_offset[0] - e.global_offset[1]).fill_(1);
                          return block;
                        });
}

}  // namespace dtensor
