// Redistribution planning — how dtensor moves a DTensor from one layout to
// another at the least cost (docs/redistribution.md: the cost model, the
// search and merging, with worked examples).
//
// A plan is a list of steps, each one collective (or a local op) over one
// mesh dim or over a flattened group of several. The planner searches the
// placement states for the cheapest path under the topology cost model of
// the mesh (DeviceMesh::topology()); an edge is one mesh-dim transform, or
// one collective over the flattened group of several mesh dims where the
// result is identical to the steps it replaces. Every plan is replayed on
// the shard boxes of every mesh coordinate before it is returned, so a
// planner bug throws instead of moving data wrongly. Plans are immutable,
// cached by (source spec, target spec, options, mesh configuration) and
// shared; the cache is thread-safe.
//
//   auto plan = plan_redistribute(d.spec(), d.spec().with_placements({Replicate(), Shard(1)}));
//   std::cout << plan->explain();        // one line per step and the total
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/spec.h"

namespace dtensor {

// ---- Cost model (times in microseconds) ----
//
// bytes: bytes per rank the collective is charged for (b x 2^30 in the
// formulas of docs/redistribution.md); n: ranks in the group; base: Topology::base_us.
double all_gather_cost(double bytes, int64_t n, LinkCost link, double base_us = 6.6);
double reduce_scatter_cost(double bytes, int64_t n, LinkCost link, double base_us = 6.6);
double all_reduce_cost(double bytes, int64_t n, LinkCost link, double base_us = 6.6);
double all_to_all_cost(double bytes, int64_t n, LinkCost link, double base_us = 6.6);

// ---- Plans ----

struct BoxRoutes;  // a box exchange's pieces (src/comm/backend.h)

// BoxExchange: S/R -> S/R in one all_to_allv of boxes (docs/redistribution.md).
enum class StepKind : uint8_t { AllGather, AllReduce, ReduceScatter, AllToAll, Local, BoxExchange };
inline constexpr int kNumStepKinds = 6;
// "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "local", "box_exchange"
const char* to_string(StepKind kind);

struct RedistributeStep {
  StepKind kind = StepKind::Local;
  // The mesh dims the step changes, ascending (several: a merged collective
  // over the flattened group of those dims, row-major over them).
  DimVector mesh_dims;
  // The placements of those mesh dims before and after the step, shard
  // orders included: replace_placements(state, mesh_dims, to) (placement.h)
  // is the state after (the other mesh dims may be renumbered in their
  // split order, e.g. S(0)[1],S(0)[0] -> R,S(0) gathering mesh dim 0).
  Placements from, to;
  // all_gather / reduce_scatter / R->S: the tensor dim gathered or split;
  // all_to_all: the tensor dim sharded before (concatenated) ...
  int64_t tensor_dim = -1;
  // ... and after (split). -1 when unused.
  int64_t to_tensor_dim = -1;
  // all_reduce / reduce_scatter: the reduction run (sum for a merged
  // sum+avg), then the result divided by `divisor` (the product of the avg
  // dims' sizes in a merged sum+avg; 1 otherwise).
  ReduceOp op = ReduceOp::Sum;
  double divisor = 1;
  // Group size, and the bytes per rank the cost model charges.
  int64_t group_size = 1;
  double bytes = 0;
  double cost_us = 0;
  // Bytes per rank live while the step runs: its input, its output and the
  // temporaries a backend makes for it (docs/redistribution.md, "Peak
  // memory"); under the model's bytes per rank, global bytes / shards.
  double peak_bytes = 0;
  // Name of the flattened group a merged step runs over ("" for one mesh
  // dim), and whether planning created it (auto-flattening).
  std::string group;
  bool created_group = false;
  // BoxExchange: its pieces, by mesh coordinate (row-major), made once with
  // the plan so that running a cached plan does no geometry. Internal
  // (src/redistribute/box_exchange.h); null in a step built by hand, which
  // the executor then works out.
  std::shared_ptr<const BoxRoutes> box_routes;
};

struct RedistributePlan {
  DTensorSpec from;
  DTensorSpec to;
  std::vector<RedistributeStep> steps;
  double cost_us = 0;
  // Names of the flattened groups the plan runs collectives over.
  std::vector<std::string> groups;
  // Collectives by kind (index: StepKind; Local steps are not collectives).
  std::array<int, kNumStepKinds> counts{};
  // Bytes per rank of the output, and the most any step holds live at once
  // (the max of the steps' peak_bytes; the source's bytes when there is no
  // step). The executor frees each intermediate as soon as the next step
  // has consumed it, so no more than one step's input and output (and its
  // temporaries) are alive at a time, besides the caller's tensor. Among
  // plans of equal cost the planner picks the lowest peak.
  double output_bytes = 0;
  double peak_bytes = 0;

  int count(StepKind kind) const { return counts[static_cast<int>(kind)]; }
  int num_collectives() const;
  // Human-readable: a header, one line per step, the total and the peak memory.
  std::string explain() const;
};

struct RedistributeOptions {
  // Whether the planner may create the flattened groups it merges
  // collectives over; unset: the mesh's auto_flatten().
  std::optional<bool> auto_flatten = std::nullopt;
  // Whether R -> P may be planned (distribute_tensor uses it; a user's
  // redistribute may not introduce a Partial the source lacks).
  bool allow_new_partial = false;
  // false: plan mesh dim by mesh dim in a fixed order (unshard innermost
  // first, then reshard outermost first), unmerged, instead of searching.
  // For comparisons; the search never does worse than this.
  bool search = true;
  // false: never merge collectives over flattened groups.
  bool merge = true;
  // false: never replace the searched plan by one box exchange (S/R -> S/R
  // in one all_to_allv of boxes). For comparisons.
  bool box_exchange = true;
  // Autograd: the placements the gradient is moved to on its way back to
  // the source. Unset: the source's, with Partial as Replicate (PyTorch's
  // rule; backward never makes a Partial). Planning ignores it.
  std::optional<Placements> grad_placements = std::nullopt;
  // As PyTorch's redistribute(..., forward_dtype, backward_dtype): the
  // tensor is cast to forward_dtype before it moves (the result is of that
  // dtype), and in backward the gradient is cast to backward_dtype before
  // it moves back (then to the source's dtype, which autograd does for
  // every input). A mixed-precision step uses them to move bfloat16
  // activations and reduce their gradients in float32.
  std::optional<DType> forward_dtype = std::nullopt;
  std::optional<DType> backward_dtype = std::nullopt;
};

// The cheapest plan from `from` to `to` under the mesh's cost model.
// REQUIRES: same mesh and tensor meta. Throws dtensor::Error naming the mesh
// dim and both placements for S->P, P(a)->P(b), or (unless allowed) a new
// Partial.
std::shared_ptr<const RedistributePlan> plan_redistribute(const DTensorSpec& from,
                                                          const DTensorSpec& to,
                                                          const RedistributeOptions& options = {});

// The estimated cost (µs) of the cheapest plan; 0 when from == to.
double redistribute_cost(const DTensorSpec& from, const DTensorSpec& to);

// The counters of a cache (plans here; sharding propagation in ops.h).
struct CacheInfo {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t size = 0;
  int64_t capacity = 0;
};
using PlanCacheInfo = CacheInfo;
PlanCacheInfo redistribute_plan_cache_info();
// Drops every cached plan and zeroes the counters.
void clear_redistribute_plan_cache();

}  // namespace dtensor
