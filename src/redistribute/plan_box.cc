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
void Planner::prefer_box_exchange(std::vector<RedistributeStep>& steps) const {
  // A plan of local steps only never becomes a collective, even a lighter
  // one: under MPI it would make every rank wait for the others.
  if (std::all_of(steps.begin(), steps.end(),
                  [](const RedistributeStep& s) { return s.kind == StepKind::Local; }))
    return;
  double cost = 0;
  for (const RedistributeStep& s : steps) cost += s.cost_us;
  const double cost_eps = 1e-9 * std::max(1.0, cost);
  // Working the exchange out visits every (receiver, source box) pair: on
  // 64 ranks two thirds of a cold plan. Skip it when even its floor loses.
  if (box_exchange_floor(cost + cost_eps) > cost + cost_eps) return;
  // Its routes come with it (one pass over the pieces): most candidates
  // that get this far win (63% of the sweep's), and a second pass for the
  // winners cost a quarter of their plan.
  std::optional<RedistributeStep> box = box_exchange_step_with_routes(from_, to_, base_us_);
  if (!box) return;
  // Over several mesh dims it runs on their flattened group, which must
  // exist or be allowed to be made, as for a merged collective.
  if (box->mesh_dims.size() > 1) {
    MeshDimMask roots = 0;
    for (int64_t i : box->mesh_dims) roots |= mesh_.root_dims(static_cast<int>(i));
    if (!mesh_.find_flattened(roots) && (!auto_flatten_ || !options_.merge)) return;
  }
  double peak = bytes_of(from_.placements());
  for (const RedistributeStep& s : steps) peak = std::max(peak, s.peak_bytes);
  // On a tie in cost, memory decides only against a plan of several
  // collectives, which passes intermediate layouts. Against one collective
  // (S(1) -> R's all_gather) it saves nothing: a collective writes
  // straight into its output too, and the named collective is the one real
  // backends implement best.
  int collectives = 0;
  for (const RedistributeStep& s : steps) collectives += s.kind != StepKind::Local;
  const double peak_eps = 1e-9 * std::max(1.0, peak);
  if (box->cost_us < cost - cost_eps ||
      (collectives > 1 && box->cost_us <= cost + cost_eps && box->peak_bytes < peak - peak_eps)) {
    // Its pieces go with it: a cached plan then runs it without geometry.
    steps = {std::move(*box)};
  }
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
double Planner::box_exchange_floor(double enough) const {
  const Placements& src = from_.placements();
  for (const Placements* p : {&src, &to_.placements()})
    for (const Placement& q : *p)
      if (q.is_partial()) return 0;  // no box exchange: not a bound
  const int64_t td = from_.ndim();
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
      const ShardExtent e = from_.extent(c);
      if (e.local_shape[d] > 0)
        v.emplace_back(e.global_offset[d], e.global_offset[d] + e.local_shape[d]);
    }
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  const double item = static_cast<double>(itemsize(from_.dtype()));
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
    const ShardExtent own = from_.extent(holders[k]);
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
        if (!(splitters[d] >> i & 1)) continue;
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
