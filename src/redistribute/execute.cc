// The plan executor: each step becomes the transform it names, over one mesh
// dim or over the flattened group of several. Each step's input is let go
// as soon as the step has made its output, so at most one step's input and
// output are alive at a time (besides the caller's tensor, which the caller
// holds): the peak the plan reports (RedistributePlan::peak_bytes).
#include <optional>

#include "dtensor/debug.h"
#include "dtensor/error.h"
#include "dtensor/world.h"
#include "redistribute/box_exchange.h"
#include "redistribute/plan_internal.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

namespace {

StepObserver observer = nullptr;
void* observer_context = nullptr;

Group group_of(const DeviceMesh& mesh, const RedistributeStep& s) {
  if (s.mesh_dims.size() == 1) {
    const int d = static_cast<int>(s.mesh_dims[0]);
    return Group{mesh, d, mesh.size(d), {}};
  }
  std::vector<int> dims(s.mesh_dims.begin(), s.mesh_dims.end());
  DeviceMesh flat = mesh.flatten(dims);
  return Group{flat, 0, flat.size(0), {}};
}

// The layout before step k: the plan's source with steps 0..k-1 applied.
DTensorSpec spec_before(const RedistributePlan& plan, size_t k) {
  Placements p = plan.from.placements();
  for (size_t j = 0; j < k; ++j) p = replace_placements(p, plan.steps[j].mesh_dims, plan.steps[j].to);
  return plan.from.with_placements(p);
}

LocalTensor run_step(const RedistributePlan& plan, size_t k, const LocalTensor& in) {
  const RedistributeStep& s = plan.steps[k];
  if (s.group_size == 1) return in;  // a size-1 group moves nothing
  const Group g = group_of(plan.from.mesh(), s);
  switch (s.kind) {
    case StepKind::BoxExchange: {
      // The planner works the pieces out with the plan; a step built by
      // hand has none.
      if (s.box_routes) return box_exchange(in, g, plan.from.mesh(), *s.box_routes);
      const DTensorSpec before = spec_before(plan, k);
      return box_exchange(in, g, before,
                          before.with_placements(
                              replace_placements(before.placements(), s.mesh_dims, s.to)));
    }
    case StepKind::AllGather: return shard_to_replicate(in, g, s.tensor_dim);
    case StepKind::AllToAll: return shard_to_shard(in, g, s.tensor_dim, s.to_tensor_dim);
    case StepKind::AllReduce: return partial_to_replicate(in, g, s.op, s.divisor);
    case StepKind::ReduceScatter: return partial_to_shard(in, g, s.op, s.divisor, s.tensor_dim);
    case StepKind::Local:
      if (s.to[0].is_shard()) return replicate_to_shard(in, g, s.tensor_dim);
      if (s.to[0].is_partial()) return replicate_to_partial(in, g, s.op);
      return in;
  }
  return in;
}

}  // namespace

LocalTensor execute_plan(const RedistributePlan& plan, const LocalTensor& in) {
  record_plan_run(plan.cost_us);
  // The first step reads the caller's tensor in place; every later one
  // reads the previous step's output, which the assignment below frees
  // (its last reference) once the step has made its own.
  LocalTensor local;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    LocalTensor next = run_step(plan, k, k == 0 ? in : local);
    if (observer != nullptr) observer(observer_context, k, k == 0 ? in : local, next);
    local = std::move(next);
  }
  if (plan.steps.empty()) local = in;
  // Each shard that arrived has the shape the target layout gives it. Under
  // MPI, ranks whose calls got out of step (a skipped or swapped
  // full_tensor) can meet in collectives over different tensors; when the
  // tensors differ only along the gathered dim, which may legitimately be
  // uneven, neither MPI nor the desync check notices, and the shard
  // would carry on with the wrong size. A simulated world runs every rank
  // through the same calls, so it cannot get out of step: checked only
  // under MPI, where it costs about 60 ns (one extent) per redistribute.
  if (plan.to.mesh().world().is_simulated()) return local;
  local.for_each([&](int rank, const Tensor& t) {
    const std::optional<ShardExtent> extent = plan.to.extent_of_rank(rank);
    if (!extent || !t.defined()) return;
    DT_CHECK(t.shape() == extent->local_shape, "redistribute ", plan.from.placements(), " -> ",
             plan.to.placements(), " of ", plan.to.shape(), " on ", plan.to.mesh().to_string(),
             ": rank ", rank, " received a shard of shape ", t.shape(), " where the layout gives ",
             extent->local_shape, " (the ranks' collectives met over different tensors: a "
             "collective desync, such as a full_tensor() skipped or swapped on some rank)");
  });
  return local;
}

void set_step_observer(StepObserver f, void* context) {
  observer = f;
  observer_context = context;
}

}  // namespace dtensor::redistribute_detail
