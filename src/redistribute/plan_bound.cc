// The lower bound that steers the search (A*): the cost the target still
// forces from a state, never more.
#include <algorithm>
#include <bit>
#include <cmath>

#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

// A* needs a lower bound on the cost from a state to the target that
// never overestimates (so the path found is a cheapest one) and drops
// along an edge by no more than the edge costs (consistency: so no state
// needs settling twice, and a settled state's cost, peak and steps are
// final). lower_bound adds up two parts, each from collectives the
// target forces, and each collective's cost is split so that no part of
// it is counted twice:
//
// 1. Dims whose target is not R that shard tensor dim d past the part of
//    d's split order the state shares with the target: a split order is a
//    stack (a new shard splits last, only the last splitter may leave), so
//    each of them has to leave d by an all_gather or all_to_all including
//    it (shard_cover_ per d: the cheapest split of them into groups, a
//    ring pass each on the fewest bytes such a collective is charged).
// 2. Partials the target lacks need a reduction, and dims bound for R
//    that shard now a last all_gather (as do Partials bound for R reduced
//    by a reduce_scatter). last_collectives() prices them on the bytes
//    each can run on: after a last gather only the dims that may still
//    shard divide the bytes, so the last gathers in time run on the most
//    bytes, and a reduction is cheap only where dims that must be gathered
//    again shard during it. This part is what sees bandwidth: a bound
//    charging every collective the fewest bytes any state holds left wide
//    plateaus of free chunks that A* swept (issue 18's slowest layouts).
//
// A merged gather may hold members of both parts, one collective with one
// base: so its base is counted on one side only, and the bound is the
// larger of the two ways to choose (without merging no collective is
// shared, and both parts count their bases). Free steps (R -> S, R -> P)
// only add members or drop dividers, so they never lower the bound.
// Size-1 dims move nothing and count nowhere.
void Planner::init_cover() {
  const Placements& src = from_.placements();
  const Placements& dst = to_.placements();
  // A Partial both ends hold stays one (no R -> P brings it back), so its
  // mesh dim never shards.
  double shards = 1;
  for (int i = 0; i < nd_; ++i) {
    if (size_[i] == 1) continue;
    live_ |= 1u << i;
    if (src[i].is_partial() && src[i] == dst[i] && !options_.allow_new_partial) continue;
    shards *= static_cast<double>(size_[i]);
    if (dst[i].is_replicate()) {
      to_replicate_ |= 1u << i;
    } else {
      other_shards_ *= static_cast<double>(size_[i]);
      other_mask_ |= 1u << i;
    }
  }
  min_bytes_ = global_bytes_ / shards;
  // last_collectives' tables grow as 3^|R dims| x 2^|Partials| (and the
  // other way round), one per Partial mask met: with many Partials (all
  // of a 5-d mesh reduced, say) they cost more than the states they
  // prune, and the coarse bound of issue 18 plans such layouts faster.
  int np = 0, nr = 0;
  for (int i = 0; i < nd_; ++i) {
    np += size_[i] > 1 && src[i].is_partial() && src[i] != dst[i];
    nr += to_replicate_ >> i & 1;
  }
  const double per_table = std::pow(3.0, nr) * std::pow(2.0, np) +
                           std::pow(2.0, nr) * std::pow(3.0, np);
  if (per_table * std::pow(2.0, np + 1) > kMaxBoundWork) {
    coarse_ = true;
    return;
  }
  const uint32_t all = 1u << nd_;
  // The group size and the slowest link of every mask of mesh dims, which
  // the floors below and last_collectives' tables ask for in their inner
  // loops.
  for (uint32_t dims = 1; dims < all; ++dims) {
    const int low = std::countr_zero(dims);
    const uint32_t rest = dims & (dims - 1);
    mask_n_[dims] = size_[low] * (rest ? mask_n_[rest] : 1);
    LinkCost link = link_[low];
    if (rest) {
      link.bandwidth_gbps = std::min(link.bandwidth_gbps, mask_link_[rest].bandwidth_gbps);
      link.latency_us = std::max(link.latency_us, mask_link_[rest].latency_us);
    }
    mask_link_[dims] = link;
  }
  double shard_floor[1u << kMaxDims], bare_floor[1u << kMaxDims];
  for (uint32_t dims = 1; dims < all; ++dims) {
    shard_floor[dims] = bare_floor[dims] = kNoCover;
    if ((dims & ~live_) != 0) continue;
    const bool single = one_dim(dims);
    if (!single && !options_.merge) continue;
    const int64_t n = group_size(dims);
    const LinkCost link = slowest_link(dims);
    const double nb = min_bytes_ * static_cast<double>(n);
    // An all_gather is charged the gathered bytes (x n); one mesh dim may
    // leave by an all_to_all, charged its input.
    shard_floor[dims] = all_gather_cost(single ? min_bytes_ : nb, n, link, base_us_) * kMargin;
    bare_floor[dims] = all_gather_cost(single ? min_bytes_ : nb, n, link, 0) * kMargin;
  }
  cheapest_cover(shard_floor, shard_cover_);
  cheapest_cover(options_.merge ? bare_floor : shard_floor, bare_cover_);
  // The target's split orders, size-1 dims left out.
  for (int64_t d = 0; d < from_.ndim(); ++d)
    for (int64_t j : shard_split_order(dst, d))
      if (size_[j] > 1) target_order_[d].push_back(static_cast<int>(j));
}

int64_t Planner::group_size(uint32_t dims) const { return dims ? mask_n_[dims] : 1; }

// DeviceMesh::link of a group: the least bandwidth and the largest
// latency of its dims (worked out once per mask in init_cover, without
// the mesh's lock). REQUIRES: dims != 0.
LinkCost Planner::slowest_link(uint32_t dims) const { return mask_link_[dims]; }

// out[m]: the cheapest split of the dims m into groups priced by floor;
// each split is counted once, by the group holding m's lowest dim.
void Planner::cheapest_cover(const double* floor, double* out) const {
  const uint32_t all = 1u << nd_;
  out[0] = 0;
  for (uint32_t m = 1; m < all; ++m) {
    out[m] = kNoCover;
    if ((m & ~live_) != 0) continue;
    const uint32_t low = m & (~m + 1);
    for (uint32_t sub = m; sub != 0; sub = (sub - 1) & m)
      if ((sub & low) && floor[sub] < kNoCover)
        out[m] = std::min(out[m], floor[sub] + out[m ^ sub]);
  }
}

// Part 2 of the bound: the least the last all_gathers of the dims
// `gather` (bound for R, sharding now) and the reductions of the dims
// `partial` (Partial now, the target not) can cost, given the bytes each runs
// on. It is the cheapest plan of a relaxed problem, solved backwards from
// the target: a reverse state (t, q) says which dims bound for R have
// their last gather later (t) and which Partials their reduction later
// (q). At any time the dims that may shard are the other dims that may
// ever shard (other_shards_; Partials bound for S only once reduced) and
// t's dims that are not still Partial, so
// - a last gather of g runs with t \ q still sharding after it, and is
//   charged its output;
// - a reduction of r runs with t \ (q + r) sharding, charged its input,
//   one ring pass where all of r is gathered later or bound for S (a
//   reduce_scatter), two otherwise (an all_reduce; only an all_gather
//   turns S into R).
// The answer is the least over reverse states holding `gather`, all of
// `partial` reduced; dims now R whose target is R may join t (chunked
// and gathered again) when that makes the rest cheaper. Every real plan
// maps onto such a sequence with the same or more bytes at each step, so
// this never overestimates. Tables by partial (both choices of bases), made
// on first use: one search meets few Partial masks.
// Both of lower_bound's values (the gather bases counted and not) come
// from one lookup: it asks for both of every state it meets.
Planner::LastCost Planner::last_collectives(uint32_t gather, uint32_t partial) const {
  if (gather == 0 && partial == 0) return {};
  // Most states share their Partials with the state before: the last
  // table used is asked first.
  if (last_table_.key == partial) return last_table_.table[gather];
  for (const auto& [mask, table] : last_collectives_)
    if (mask == partial) {
      last_table_ = {partial, table.data()};
      return table[gather];
    }
  last_collectives_.emplace_back(partial, last_collectives_table(partial));
  last_table_ = {partial, last_collectives_.back().second.data()};
  return last_table_.table[gather];
}

// One table of last_collectives, by the mask of gathers.
std::vector<Planner::LastCost> Planner::last_collectives_table(uint32_t partial) const {
  const uint32_t u = to_replicate_;
  // Partials bound for S may shard once reduced (a reduce_scatter leaves
  // them sharding), so they divide the bytes of what runs after their
  // reduction; the other dims outside u that may shard always do.
  const uint32_t to_shard = partial & ~u;
  const double always = other_shards_ / static_cast<double>(group_size(to_shard));
  const uint32_t all = 1u << nd_;
  // q is stored compacted to `partial`'s bits, above t's.
  int pdims[kMaxDims];
  int np = 0;
  for (int i = 0; i < nd_; ++i)
    if (partial >> i & 1) pdims[np++] = i;
  auto expand = [&](uint32_t c) {
    uint32_t q = 0;
    for (int k = 0; k < np; ++k)
      if (c >> k & 1) q |= 1u << pdims[k];
    return q;
  };
  // Both choices of gather bases in one pass: the same events reach the
  // same reverse states, only a gather's price differs.
  std::vector<LastCost> dist(static_cast<size_t>(all) << np, LastCost{kNoCover, kNoCover});
  dist[0] = {0, 0};
  auto bytes_with = [&](uint32_t sharding) {
    return global_bytes_ / (always * static_cast<double>(group_size(sharding)));
  };
  // A collective's price depends only on its kind, its mesh dims and its
  // bytes, set by the dims dividing them (`always`'s, which are those of
  // other_mask_ but the Partials bound for S, and `sharding`: disjoint,
  // and their product exact in doubles); the tables of one plan (one per
  // Partial mask met) ask for the same ones again, so they are remembered
  // per plan (the cost model's calls were a fifth of the slowest 4-d pairs).
  const size_t span = size_t{1} << (2 * nd_);
  if (ring_memo_.empty()) ring_memo_.assign(4 * span, -1);
  const uint32_t dividing = other_mask_ & ~to_shard;
  auto ring = [&](int kind, uint32_t dims, uint32_t sharding) {
    const size_t key = static_cast<size_t>(dividing | sharding) << nd_ | dims;
    double& memo = ring_memo_[static_cast<size_t>(kind) * span + key];
    if (memo < 0) {
      const double bytes = bytes_with(sharding);
      const int64_t n = group_size(dims);
      const LinkCost link = slowest_link(dims);
      switch (kind) {
        case 0:
          memo = all_gather_cost(bytes, n, link, base_us_) * kMargin;
          break;
        case 1:
          memo = all_gather_cost(bytes, n, link, 0) * kMargin;
          break;
        case 2:
          memo = reduce_scatter_cost(bytes, n, link, base_us_) * kMargin;
          break;
        default:
          memo = all_reduce_cost(bytes, n, link, base_us_) * kMargin;
          break;
      }
    }
    return memo;
  };
  auto relax = [&](size_t to, double bare, double based) {
    dist[to].bare = std::min(dist[to].bare, bare);
    dist[to].based = std::min(dist[to].based, based);
  };
  // Events only add bits, so ascending indices are a topological order.
  for (size_t idx = 0; idx < dist.size(); ++idx) {
    if (dist[idx].based >= kNoCover) continue;
    const uint32_t t = static_cast<uint32_t>(idx) & (all - 1);
    const uint32_t qc = static_cast<uint32_t>(idx >> nd_);
    const uint32_t q = expand(qc);
    const LastCost here = dist[idx];
    // A last gather: of dims not yet placed, not a Partial reduced later.
    const uint32_t can_gather = u & ~t & ~q;
    const uint32_t out_sharding = (t | to_shard) & ~q;
    for (uint32_t g = can_gather; g != 0; g = (g - 1) & can_gather) {
      if (!options_.merge && !one_dim(g)) continue;
      const double based = ring(0, g, out_sharding);
      // Without merging no collective is shared: both count the bases.
      const double bare = options_.merge ? ring(1, g, out_sharding) : based;
      relax(idx | g, here.bare + bare, here.based + based);
    }
    // A reduction of Partials not yet placed.
    const uint32_t can_reduce = ((1u << np) - 1) & ~qc;
    for (uint32_t rc = can_reduce; rc != 0; rc = (rc - 1) & can_reduce) {
      if (!options_.merge && !one_dim(rc)) continue;
      const uint32_t r = expand(rc);
      const bool scatter = (r & ~(t | to_shard)) == 0;
      const double c = ring(scatter ? 2 : 3, r, (t | to_shard) & ~(q | r));
      relax(idx | static_cast<size_t>(rc) << nd_, here.bare + c, here.based + c);
    }
  }
  // All of `partial` reduced; the least over t holding each mask.
  std::vector<LastCost> best(all, LastCost{kNoCover, kNoCover});
  const size_t done = static_cast<size_t>((1u << np) - 1) << nd_;
  for (uint32_t t = 0; t < all; ++t)
    if ((t & ~u) == 0) best[t] = dist[done | t];
  for (int i = 0; i < nd_; ++i) {
    if (!(u >> i & 1)) continue;
    for (uint32_t t = 0; t < all; ++t)
      if ((t & ~u) == 0 && !(t >> i & 1)) {
        best[t].bare = std::min(best[t].bare, best[t | 1u << i].bare);
        best[t].based = std::min(best[t].based, best[t | 1u << i].based);
      }
  }
  return best;
}

// The bound of issue 18, kept to measure the one above against (the
// bench's before/after): per class, the cheapest collective its costliest
// member can be part of, a ring pass of the fewest bytes any state holds.
void Planner::init_coarse_bound() {
  double min_bytes = global_bytes_;
  for (int i = 0; i < nd_; ++i) min_bytes /= static_cast<double>(size_[i]);
  for (int i = 0; i < nd_; ++i)
    lb_[i] = size_[i] > 1
                 ? all_gather_cost(min_bytes, size_[i], link_[i], base_us_) * (1 - 1e-9)
                 : 0;
}

double Planner::coarse_bound(const Placements& p) const {
  const Placements& dst = to_.placements();
  double partial = 0, total = 0;
  double shard[kMaxDims] = {};
  for (int i = 0; i < nd_; ++i) {
    if (size_[i] == 1) continue;
    if (p[i].is_partial()) {
      if (p[i] != dst[i]) partial = std::max(partial, lb_[i]);
    } else if (p[i].is_shard() && !dst[i].is_shard(p[i].dim())) {
      double& s = shard[p[i].dim()];
      s = std::max(s, lb_[i]);
    }
  }
  for (double s : shard) total += s;
  return total + partial;
}

double Planner::lower_bound(const Placements& p) const {
  if (mode_ == SearchMode::Exhaustive) return 0;
  if (mode_ == SearchMode::CoarsePruned || coarse_) return coarse_bound(p);
  const Placements& dst = to_.placements();
  uint32_t partial = 0, gather = 0;
  uint32_t leave[kMaxDims] = {};  // part 1, per tensor dim: splitters that must leave it
  // A splitter bound for R belongs to part 2, any other past the common
  // prefix of the split orders to part 1.
  auto must_leave = [&](int i, int64_t d) {
    if (to_replicate_ >> i & 1) gather |= 1u << i;
    else leave[d] |= 1u << i;
  };
  if (!ordered(p)) {
    // A natural state splits each tensor dim in ascending mesh dims; walk
    // them once, matching each against the target's order.
    size_t matched[kMaxDims] = {};
    bool diverged[kMaxDims] = {};
    for (int i = 0; i < nd_; ++i) {
      if (size_[i] == 1) continue;
      if (p[i].is_partial()) {
        if (p[i] != dst[i]) partial |= 1u << i;
      } else if (p[i].is_shard()) {
        const int64_t d = p[i].dim();
        const auto& t = target_order_[d];
        if (!diverged[d] && matched[d] < t.size() && t[matched[d]] == i) {
          ++matched[d];
        } else {
          diverged[d] = true;
          must_leave(i, d);
        }
      }
    }
  } else {
    for (int i = 0; i < nd_; ++i)
      if (size_[i] > 1 && p[i].is_partial() && p[i] != dst[i]) partial |= 1u << i;
    for (int64_t d = 0; d < from_.ndim(); ++d) {
      const auto& t = target_order_[d];
      size_t k = 0;
      bool diverged = false;
      for (int64_t j : shard_split_order(p, d)) {
        if (size_[j] == 1) continue;
        if (!diverged && k < t.size() && t[k] == j) {
          ++k;
        } else {
          diverged = true;
          must_leave(static_cast<int>(j), d);
        }
      }
    }
  }
  double leaving = 0, leaving_bare = 0;
  for (int64_t d = 0; d < from_.ndim(); ++d) {
    leaving += shard_cover_[leave[d]];
    leaving_bare += bare_cover_[leave[d]];
  }
  const LastCost last = last_collectives(gather, partial);
  if (!options_.merge) {  // no collective is shared: every part counts its bases
    return leaving + last.based;
  }
  // A gather of part 2 may hold splitters of part 1, one collective with
  // one base: the base goes to one side, and the bound is the larger.
  return std::max(leaving + last.bare, leaving_bare + last.based);
}

}  // namespace dtensor::redistribute_detail
