// The redistribution planner: a shortest-path search over placement states.
//
// A state is one placement per mesh dim; the data of every state is fully
// determined by its placements, so a plan is any path from the source to the
// target state whose edges are valid transforms. An edge changes one mesh
// dim (S->R all_gather, S->S all_to_all, P->R all_reduce, P->S
// reduce_scatter, R->S and R->P local) when the nesting rule allows it: only
// the last mesh dim in a tensor dim's split order (the right-most one when
// the order is natural) may gather it or move it to another dim, and a mesh
// dim that starts sharding a tensor dim becomes the last in its split order
// (the transforms chunk the local piece, i.e. split after every earlier
// splitter). So states carry shard orders (spec.h): R->S(0) on mesh dim 0
// of R,S(0) reaches S(0)[1],S(0)[0], and S(0)[1],S(0)[0] -> R,S(0) is one
// all_gather over mesh dim 0. With merging on, an edge may also be one collective
// over the flattened group of several mesh dims (all_reduce, reduce_scatter
// or all_gather) when the result is identical: same reduce op or sum with
// avg; reduce_scatter outer dim first and all_gather inner dim first; the
// flattened chunking equal to the nested one; the group exists or may be
// created. Edge weights are the cost model's; a state's bytes per rank are
// global bytes / number of shards. A* (Dijkstra steered by an admissible
// lower bound, see lower_bound) gives the cheapest path, ties broken by the
// lower peak memory, then by fewer steps; the per-dim baseline path is one
// of the paths searched, so the search never does worse than it.
//
// The search is the one place that decides merging: an earlier design also
// merged runs of steps after the search, and once the search returned
// merged steps that pass read them as single-dim ones and built wrong plans
// on meshes of 3+ dims. Every plan is then replayed on the shard boxes of
// every mesh coordinate (plan_check.cc) before it is returned, so a planner
// bug is an error, never a wrong tensor.
//
// Mesh dims of size 1 move no data: any change on them is a free local
// step, and they are ignored by the nesting rule.
#include <algorithm>

#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

namespace {

[[noreturn]] void throw_not_allowed(const DTensorSpec& from, int mesh_dim, Placement to,
                                    const char* why) {
  DT_THROW("redistribute: cannot go from ", to_string(from.placements()[mesh_dim]), " to ",
           to_string(to), " on mesh dim ", mesh_dim, " (", why, "); from ",
           to_string(from.placements()), " on ", from.mesh());
}

}  // namespace

Planner::Planner(const DTensorSpec& from, const DTensorSpec& to, const RedistributeOptions& options,
                 SearchMode mode, size_t max_states)
    : from_(from),
      to_(to),
      mesh_(from.mesh()),
      options_(options),
      mode_(mode),
      max_states_(max_states),
      scratch_{from.mesh(), 0, 1, {}} {
  nd_ = mesh_.ndim();
  auto_flatten_ = options.auto_flatten.value_or(mesh_.auto_flatten());
  base_us_ = mesh_.topology().base_us;
  for (int i = 0; i < nd_; ++i) {
    size_[i] = mesh_.size(i);
    link_[i] = mesh_.link(mesh_.root_dims(i));
  }
  global_bytes_ = static_cast<double>(from.global_bytes());
  ordered_ = has_shard_order(from.placements()) || has_shard_order(to.placements());
  floating_ = is_floating(from.dtype());
  prune_kept_ = mode_ == SearchMode::Pruned && !options_.allow_new_partial;
  if (mode_ == SearchMode::Pruned) {
    init_cover();
    init_twins();
  }
  if (mode_ == SearchMode::CoarsePruned || coarse_) init_coarse_bound();
}

RedistributePlan Planner::plan() {
  validate();
  RedistributePlan out{from_, to_, {}, 0, {}, {}};
  std::vector<RedistributeStep> steps;
  if (from_.placements() != to_.placements()) {
    // Merging is decided in one place, the search: merged collectives are
    // edges of it, priced like the others. Past max_states_, or with the
    // search off, the plan is the per-dim path, unmerged.
    std::optional<std::vector<RedistributeStep>> found;
    if (options_.search) found = search();
    steps = found ? std::move(*found) : per_dim_steps();
    order_all_reduces(steps);
    if (found && options_.box_exchange) prefer_box_exchange(steps);
  }
  out.output_bytes = bytes_of(to_.placements());
  out.peak_bytes = bytes_of(from_.placements());
  for (RedistributeStep& s : steps) {
    out.peak_bytes = std::max(out.peak_bytes, s.peak_bytes);
    if (s.mesh_dims.size() > 1) name_group(s);
    if (s.kind != StepKind::Local) ++out.counts[static_cast<int>(s.kind)];
    out.cost_us += s.cost_us;
    if (!s.group.empty() &&
        std::find(out.groups.begin(), out.groups.end(), s.group) == out.groups.end())
      out.groups.push_back(s.group);
  }
  out.steps = std::move(steps);
  return out;
}

// The messages users see for forbidden moves.
void Planner::validate() const {
  DT_CHECK(from_.mesh() == to_.mesh(), "redistribute: source mesh ", from_.mesh(),
           " differs from target mesh ", to_.mesh(),
           "; redistributing between meshes is not supported");
  DT_CHECK(from_.meta() == to_.meta(), "redistribute: source ", from_.to_string(),
           " and target ", to_.to_string(), " describe different tensors");
  const Placements& src = from_.placements();
  const Placements& dst = to_.placements();
  for (int i = 0; i < nd_; ++i) {
    if (src[i] == dst[i]) continue;
    if (src[i].is_shard() && dst[i].is_partial())
      throw_not_allowed(from_, i, dst[i], "a shard cannot become a partial");
    if (src[i].is_partial() && dst[i].is_partial())
      throw_not_allowed(from_, i, dst[i], "a partial cannot change its reduce op");
    if (dst[i].is_partial() && !options_.allow_new_partial)
      throw_not_allowed(from_, i, dst[i],
                        "redistribute may not introduce a Partial the source does not have");
  }
}

// all_reduces over disjoint mesh dims commute and leave the bytes
// unchanged, so a run of them is one plan in any order: put each run in
// ascending mesh-dim order, so that equal plans read alike whichever the
// search happened to settle first.
void Planner::order_all_reduces(std::vector<RedistributeStep>& steps) {
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j < steps.size() && steps[j].kind == StepKind::AllReduce) ++j;
    std::stable_sort(steps.begin() + i, steps.begin() + j, [](const auto& a, const auto& b) {
      return a.mesh_dims[0] < b.mesh_dims[0];
    });
    i = j == i ? i + 1 : j;
  }
}

// Names (and, when auto-flattening, creates) the group of a merged step.
void Planner::name_group(RedistributeStep& s) const {
  MeshDimMask roots = 0;
  std::vector<int> dims;
  for (int64_t i : s.mesh_dims) {
    roots |= mesh_.root_dims(static_cast<int>(i));
    dims.push_back(static_cast<int>(i));
  }
  if (auto found = mesh_.find_flattened(roots)) {
    s.group = *found;
    return;
  }
  DeviceMesh flat = mesh_.flatten(dims);  // auto-flattening: register it
  s.group = flat.names()[0];
  s.created_group = true;
}

RedistributePlan build_plan(const DTensorSpec& from, const DTensorSpec& to,
                            const RedistributeOptions& options, SearchMode mode,
                            size_t max_states) {
  RedistributePlan plan = Planner(from, to, options, mode, max_states).plan();
  check_plan(plan);
  return plan;
}

}  // namespace dtensor::redistribute_detail
