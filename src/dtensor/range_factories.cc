// The factories whose values depend on the position: linspace and eye on a
// mesh. Each held rank holds only its own shard, cut from the global
// values by the shard's global offset, so every layout gives the values of
// the plain Tensor factory. As zeros(): a Partial(sum) mesh dim holds the
// values on the first rank of each group and zeros on the others (the
// pieces sum to them); other Partials hold them everywhere.
#include "dtensor/ops.h"

namespace dtensor {
namespace {

// Whether `rank` holds zeros under a Partial(sum) of `spec` (not the first
// rank of its group on some Partial(sum) mesh dim).
bool holds_sum_zeros(const DTensorSpec& spec, int rank) {
  for (size_t k = 0; k < spec.placements().size(); ++k) {
    const Placement& p = spec.placements()[k];
    if (p.is_partial() && p.reduce_op() == ReduceOp::Sum &&
        spec.mesh().group_index(rank, static_cast<int>(k)) != 0)
      return true;
  }
  return false;
}

// shard_of(extent) makes a rank's shard of the global values.
template <class F>
DTensor positional_factory(const char* op, const Shape& shape, const DeviceMesh& mesh,
                           const Placements& placements, DType dtype, F&& shard_of) {
  DTensorSpec spec(mesh, placements, shape, dtype);  // validates
  if (mesh.world().is_shape_only()) return DTensor::meta(spec);
  std::vector<PlannedTensor> shards;
  for (int r : mesh.held_ranks())
    shards.push_back(
        {"the shard of rank " + std::to_string(r), spec.extent_of_rank(r)->local_shape, dtype});
  check_allocation(op, shards);
  LocalTensor local;
  for (int r : mesh.held_ranks()) {
    const ShardExtent e = *spec.extent_of_rank(r);
    local.set(r, holds_sum_zeros(spec, r) ? Tensor::zeros(e.local_shape, dtype) : shard_of(e));
  }
  return DTensor(std::move(spec), std::move(local));
}

}  // namespace

DTensor linspace(double start, double end, int64_t steps, const DeviceMesh& mesh,
                 const Placements& placements, DType dtype) {
  // The 1-d values once (checks steps), each shard a copy of its range.
  const Tensor values = linspace(start, end, steps, dtype);
  return positional_factory("linspace", {steps}, mesh, placements, dtype,
                            [&](const ShardExtent& e) {
                              return values.narrow(0, e.global_offset[0], e.local_shape[0]).clone();
                            });
}

DTensor eye(int64_t n, std::optional<int64_t> m, const DeviceMesh& mesh,
            const Placements& placements, DType dtype) {
  eye(0, 0, dtype);  // the dtype's check, before any shape is made
  const int64_t cols = m.value_or(n);
  DT_CHECK(n >= 0, "eye: n must be greater or equal to 0, got ", n);
  DT_CHECK(cols >= 0, "eye: m must be greater or equal to 0, got ", cols);
  return positional_factory("eye", {n, cols}, mesh, placements, dtype, [&](const ShardExtent& e) {
    // The global diagonal i == j crosses this block at column - row =
    // row offset - column offset.
    Tensor block = Tensor::zeros(e.local_shape, dtype);
    diagonal(block, e.global_offset[0] - e.global_offset[1]).fill_(1);
    return block;
  });
}

}  // namespace dtensor
