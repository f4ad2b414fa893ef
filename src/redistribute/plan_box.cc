// The box exchange as a candidate beside the search (box_exchange.cc makes
// and runs the step).
#include <algorithm>
#include <cmath>

#include "redistribute/box_exchange.h"
#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

// Between layouts without Partial, one box exchange (box_exchange.cc)
// replaces the searched path when it is cheaper, or as cheap and lighter
// in memory: it passes through no intermediate layout, which no path of
// one-mesh-dim steps can avoid (issue 18). It is a candidate beside the
// search rather than an edge of it: it spans any set of mesh dims and
// its cost depends on both ends, not on one state.
//
// The exchange may start from the source or from a layout one local step
// away (free_layouts): chunking a replicated mesh dim
// first leaves each replica one part of what it held, so the pieces a
// receiver needs come from several replicas and the busiest sender sends
// less. On a [13, 2, 13] tensor over 2x2x2, R,S(1),S(1) -> S(1),S(0),S(2)
// costs 8.41 us as one exchange and 7.80 us after R -> S(0) on mesh dim 0
// (issue 41). With these candidates a plan is never dearer than a local
// step followed by the search's plan or one exchange (the triangle
// inequality over them, plan_triangle_test.cc).
void Planner::prefer_box_exchange(std::vector<RedistributeStep>& steps) const {
  // A plan of local steps only never becomes a collective, even a lighter
  // one: under MPI it would make every rank wait for the others.
  if (std::all_of(steps.begin(), steps.end(),
                  [](const RedistributeStep& s) { return s.kind == StepKind::Local; }))
    return;
  double cost = 0;
  for (const RedistributeStep& s : steps) cost += s.cost_us;
  const double cost_eps = 1e-9 * std::max(1.0, cost);
  double peak = bytes_of(from_.placements());
  for (const RedistributeStep& s : steps) peak = std::max(peak, s.peak_bytes);
  // On a tie in cost, memory decides only against a plan of several
  // collectives, which passes intermediate layouts. Against one collective
  // (S(1) -> R's all_gather) it saves nothing: a collective writes
  // straight into its output too, and the named collective is the one real
  // backends implement best.
  int collectives = 0;
  for (const RedistributeStep& s : steps) collectives += s.kind != StepKind::Local;
  // The best exchange so far: its cost, peak and steps.
  double best_cost = 0, best_peak = 0;
  std::optional<std::vector<RedistributeStep>> best;
  size_t best_from = 0;  // its free layout
  auto beats = [&](double c, double pk, size_t n) {
    const double c_eps = 1e-9 * std::max(1.0, best ? best_cost : cost);
    if (!best) {
      const double peak_eps = 1e-9 * std::max(1.0, peak);
      return c < cost - c_eps || (collectives > 1 && c <= cost + c_eps && pk < peak - peak_eps);
    }
    if (c < best_cost - c_eps) return true;
    if (c > best_cost + c_eps) return false;
    const double peak_eps = 1e-9 * std::max(1.0, best_peak);
    return pk < best_peak - peak_eps || (pk <= best_peak + peak_eps && n < best->size());
  };
  const std::vector<FreeLayout> free = free_layouts();
  for (size_t k = 0; k < free.size(); ++k) {
    const FreeLayout& f = free[k];
    const double enough = (best ? best_cost : cost) + cost_eps;
    // Working an exchange out visits every (receiver, source box) pair: on
    // 64 ranks two thirds of a cold plan. Skip it when even its floor
    // loses, and skip the layouts one step away all at once when a floor
    // that holds for all their exchanges does.
    if (k == 1 && box_exchange_floor(from_, enough, true) > enough) break;
    const DTensorSpec from = k == 0 ? from_ : from_.with_placements(f.placements);
    if (box_exchange_floor(from, enough) > enough) continue;
    // Priced without its pieces (box_exchange_step); only the winner's
    // routes are worked out, below.
    std::optional<RedistributeStep> box = box_exchange_step(from, to_, base_us_);
    if (!box) continue;
    // Over several mesh dims it runs on their flattened group, which must
    // exist or be allowed to be made, as for a merged collective.
    if (box->mesh_dims.size() > 1) {
      MeshDimMask roots = 0;
      for (int64_t i : box->mesh_dims) roots |= mesh_.root_dims(static_cast<int>(i));
      if (!mesh_.find_flattened(roots) && (!auto_flatten_ || !options_.merge)) continue;
    }
    std::vector<RedistributeStep> path;
    if (f.mesh_dim >= 0)
      path.push_back(single_step(from_.placements(), f.mesh_dim, f.q, f.placements));
    double pk = std::max(bytes_of(from_.placements()), box->peak_bytes);
    for (const RedistributeStep& s : path) pk = std::max(pk, s.peak_bytes);
    if (!beats(box->cost_us, pk, path.size() + 1)) continue;
    best_cost = box->cost_us;
    best_peak = pk;
    path.push_back(std::move(*box));
    best = std::move(path);
    best_from = k;
  }
  if (!best) return;
  // Its pieces go with it: a cached plan then runs it without geometry.
  const DTensorSpec from =
      best_from == 0 ? from_ : from_.with_placements(free[best_from].placements);
  std::optional<RedistributeStep> box = box_exchange_step_with_routes(from, to_, base_us_);
  DT_CHECK(box && box->cost_us == best->back().cost_us,
           "redistribute: internal error: the box exchange from ", from.to_string(), " to ",
           to_.to_string(), " priced without its pieces differs from the one they make");
  best->back() = std::move(*box);
  steps = std::move(*best);
}

// The layouts one local step away: a mesh dim of more than one rank going
// from R to S(d), as the search takes it (single_edges: between natural
// ends only where no later mesh dim splits d, so the layouts stay
// natural). One step, not every layout local steps reach: those number
// (tensor dims + 1)^(replicated mesh dims), 125 on a 4-d mesh with three
// replicated dims, and an exchange costs ~10 us to work out there, while
// the floor rarely rules one out (it sees the receivers, and a free
// layout's gain is at the senders). Size-1 mesh dims are left alone: they
// hold no data, so an exchange from a layout that differs only there
// costs the same.
std::vector<Planner::FreeLayout> Planner::free_layouts() const {
  std::vector<FreeLayout> out;
  const Placements& src = from_.placements();
  out.push_back({src, -1, Replicate()});
  const int64_t ndim = from_.ndim();
  for (int i = 0; i < nd_; ++i) {
    if (size_[i] == 1 || !src[i].is_replicate()) continue;
    for (int64_t e = 0; e < ndim; ++e) {
      // single_edges' rule: between natural ends a new shard only right of
      // the live mesh dims splitting its dim.
      if (!ordered_ && sharded_after(src, i, e)) continue;
      out.push_back({after(src, i, Shard(e)), i, Shard(e)});
    }
  }
  return out;
}

// A lower bound on the box exchange's cost (box_exchange.cc: one base, the
// busiest rank's peers times the latency and its bytes over the bandwidth
// of the slowest link among the mesh dims data crosses; 0 when nothing
// crosses), from the two layouts' boxes alone, in O(a few receivers x
// pieces per tensor dim) instead of O(ranks x source boxes); it stops once
// past `enough`. Per receiver q, exactly as the exchange counts them:
// - The source boxes tile the tensor as a grid, the product over tensor
//   dims d of the pieces d's splitters cut (one source box per holder), so
//   the boxes meeting q's target box number prod_d count_d, count_d the
//   nonempty source pieces of d overlapping q's target range on d; q
//   receives from all of them but its own box.
// - It receives its target box but what its own source box already holds.
// - A sender s differs from q on some mesh dim that shards the source
//   (the exchange picks the holder agreeing with q on replicated dims), so
//   for each d where a meeting piece is not q's own, one of d's source
//   splitters is crossed: the link is no better than the best of them, and
//   the step's link (the worst of all it crosses) no better than the worst
//   of those bests.
// With any_link the bound holds for every layout `from` reaches by local
// steps as well: chunking a replicated dim only shrinks a receiver's own
// box (more to receive), splits source pieces (as many peers or more) and
// adds splitters, whose links the bound then takes the best of all.
double Planner::box_exchange_floor(const DTensorSpec& from, double enough, bool any_link) const {
  const Placements& src = from.placements();
  for (const Placements* p : {&src, &to_.placements()})
    for (const Placement& q : *p)
      if (q.is_partial()) return 0;  // no box exchange: not a bound
  const int64_t td = from.ndim();
  // The coordinates that differ only on the mesh dims of `dims` (0 on the
  // others), in row-major order.
  auto coordinates_over = [&](uint32_t dims) {
    std::vector<DimVector> out;
    DimVector c(static_cast<size_t>(nd_), 0);
    for (;;) {
      out.push_back(c);
      int i = nd_ - 1;
      for (; i >= 0; --i) {
        if (!(dims >> i & 1)) continue;
        if (++c[i] < size_[i]) break;
        c[i] = 0;
      }
      if (i < 0) return out;
    }
  };
  // Per tensor dim, the mesh dims splitting it in the source (size > 1).
  uint32_t splitters[kMaxDims] = {};
  for (int i = 0; i < nd_; ++i)
    if (size_[i] > 1 && src[i].is_shard()) splitters[src[i].dim()] |= 1u << i;
  // The nonempty source pieces of each tensor dim, (start, end): d's range
  // in a box depends on the coordinates on d's splitters alone.
  std::vector<std::pair<int64_t, int64_t>> pieces[kMaxDims];
  for (int64_t d = 0; d < td; ++d) {
    auto& v = pieces[d];
    for (const DimVector& c : coordinates_over(splitters[d])) {
      const ShardExtent e = from.extent(c);
      if (e.local_shape[d] > 0)
        v.emplace_back(e.global_offset[d], e.global_offset[d] + e.local_shape[d]);
    }
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  const double item = static_cast<double>(itemsize(from.dtype()));
  double best = 0;
  // Receivers: a few of the target's holders (coordinate 0 on the mesh
  // dims it replicates; one per distinct target box), spread over them:
  // any receiver bounds the busiest rank from below, and on a pair whose
  // exchange wins every one counted is wasted.
  uint32_t target_sharding = 0;
  for (int i = 0; i < nd_; ++i)
    if (size_[i] > 1 && to_.placements()[i].is_shard()) target_sharding |= 1u << i;
  const std::vector<DimVector> holders = coordinates_over(target_sharding);
  constexpr size_t kReceivers = 4;
  const size_t stride = std::max<size_t>(1, holders.size() / kReceivers);
  for (size_t k = 0; k < holders.size() && best <= enough; k += stride) {
    const ShardExtent own = from.extent(holders[k]);
    const ShardExtent want = to_.extent(holders[k]);
    double boxes = 1, volume = 1, kept = 1;
    double latency = 0, inverse_bandwidth = 0;
    for (int64_t d = 0; d < td && boxes > 0; ++d) {
      const int64_t lo = want.global_offset[d], hi = lo + want.local_shape[d];
      const int64_t own_lo = own.global_offset[d], own_hi = own_lo + own.local_shape[d];
      int64_t meeting = 0;
      bool foreign = false;  // a meeting piece that is not q's own
      for (const auto& [s, e] : pieces[d]) {
        if (std::min(e, hi) <= std::max(s, lo)) continue;
        ++meeting;
        foreign = foreign || s != own_lo || e != own_hi || own_hi <= own_lo;
      }
      boxes *= static_cast<double>(meeting);
      volume *= static_cast<double>(hi - lo);
      kept *= static_cast<double>(std::max<int64_t>(0, std::min(hi, own_hi) - std::max(lo, own_lo)));
      if (!foreign) continue;
      double lat = 1e300, inv = 1e300;
      for (int i = 0; i < nd_; ++i) {
        // A free layout's exchange may split d on any live mesh dim.
        if (!(any_link ? size_[i] > 1 : (splitters[d] >> i & 1) != 0)) continue;
        lat = std::min(lat, link_[i].latency_us);
        inv = std::min(inv, 1 / link_[i].bandwidth_gbps);
      }
      if (lat < 1e300) {
        latency = std::max(latency, lat);
        inverse_bandwidth = std::max(inverse_bandwidth, inv);
      }
    }
    const double peers = boxes - (kept > 0 ? 1 : 0);
    if (peers < 1) continue;
    const double bytes = (volume - kept) * item;
    const double floor =
        base_us_ + peers * latency + bytes / 1073741824.0 * inverse_bandwidth * 1e6;
    best = std::max(best, floor * kMargin);
  }
  return best;
}

}  // namespace dtensor::redistribute_detail
