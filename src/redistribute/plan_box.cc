// The box exchange as a candidate beside the search (box_exchange.cc makes
// and runs the step).
#include <algorithm>

#include "redistribute/box_exchange.h"
#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

// Between layouts without Partial, one box exchange (box_exchange.cc)
// replaces the searched path when it is cheaper, or as cheap and lighter
// in memory: it passes through no intermediate layout, which no path of
// one-mesh-dim steps can avoid (issue 18). It is a candidate beside the
// search rather than an edge of it: it spans any set of mesh dims and
// its cost depends on both ends, not on one state.
void Planner::prefer_box_exchange(std::vector<RedistributeStep>& steps) const {
  // A plan of local steps only never becomes a collective, even a lighter
  // one: under MPI it would make every rank wait for the others.
  if (std::all_of(steps.begin(), steps.end(),
                  [](const RedistributeStep& s) { return s.kind == StepKind::Local; }))
    return;
  std::optional<RedistributeStep> box = box_exchange_step(from_, to_, base_us_);
  if (!box) return;
  // Over several mesh dims it runs on their flattened group, which must
  // exist or be allowed to be made, as for a merged collective.
  if (box->mesh_dims.size() > 1) {
    MeshDimMask roots = 0;
    for (int64_t i : box->mesh_dims) roots |= mesh_.root_dims(static_cast<int>(i));
    if (!mesh_.find_flattened(roots) && (!auto_flatten_ || !options_.merge)) return;
  }
  double cost = 0, peak = bytes_of(from_.placements());
  for (const RedistributeStep& s : steps) {
    cost += s.cost_us;
    peak = std::max(peak, s.peak_bytes);
  }
  // On a tie in cost, memory decides only against a plan of several
  // collectives, which passes intermediate layouts. Against one collective
  // (S(1) -> R's all_gather) it saves nothing: a collective writes
  // straight into its output too, and the named collective is the one real
  // backends implement best.
  int collectives = 0;
  for (const RedistributeStep& s : steps) collectives += s.kind != StepKind::Local;
  const double cost_eps = 1e-9 * std::max(1.0, cost), peak_eps = 1e-9 * std::max(1.0, peak);
  if (box->cost_us < cost - cost_eps ||
      (collectives > 1 && box->cost_us <= cost + cost_eps && box->peak_bytes < peak - peak_eps)) {
    // Its pieces, once: a cached plan then runs it without geometry.
    box->box_routes = box_routes(from_, to_);
    steps = {std::move(*box)};
  }
}

}  // namespace dtensor::redistribute_detail
