// P(op) -> R: all_reduce with the placement's reduce op. A merged sum+avg
// group reduces with sum and then divides by the product of the avg dims'
// sizes: avg over a dim is sum/n, and the sums commute, so
// avg_A(sum_B(x)) = sum_{A,B}(x) / |A| exactly as the nested reductions.
#include "comm/backend.h"
#include "comm/fold_temp.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

TransformCost partial_to_replicate_cost(double bytes, const Group& g, double base_us) {
  return {all_reduce_cost(bytes, g.n, g.link, base_us), bytes, bytes,
          fold_temp::all_reduce_temp(g.n, bytes)};
}

LocalTensor partial_to_replicate(const LocalTensor& in, const Group& g, ReduceOp op,
                                 double divisor) {
  return divide_shards(g.mesh.world().backend().all_reduce(in, g.mesh, g.dim, op), divisor);
}

LocalTensor divide_shards(LocalTensor in, double divisor) {
  if (divisor == 1) return in;
  // In place: the shards are the fresh output of the reduction, so dividing
  // them needs no second copy of the result (it would raise the step's peak
  // memory by its output).
  for (int rank : in.ranks()) in.shard(rank).div_(Scalar(divisor));
  return in;
}

}  // namespace dtensor::redistribute_detail
