// The per-dim plan (the order of the core issue): what the planner returns
// with the search off or past its budget, and one of the paths the search
// weighs, so that it never does worse.
#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

// Unshard from the innermost mesh dim out (with, transitively, every later
// mesh dim sharding a tensor dim that an earlier changing dim touches),
// reducing partials bound for Replicate; then reshard outermost first.
std::vector<RedistributeStep> Planner::per_dim_steps() const {
  if (has_shard_order(from_.placements()) || has_shard_order(to_.placements()))
    return per_dim_ordered_steps();
  const Placements& src = from_.placements();
  const Placements& dst = to_.placements();
  bool via_replicate[kMaxDims] = {};
  for (int i = 0; i < nd_; ++i) via_replicate[i] = src[i].is_shard() && dst[i].is_replicate();
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < nd_; ++i) {
      const bool moves = src[i] != dst[i] || via_replicate[i];
      if (!moves) continue;
      for (int j = i + 1; j < nd_; ++j) {
        if (via_replicate[j] || !src[j].is_shard()) continue;
        const int64_t d = src[j].dim();
        if (src[i].is_shard(d) || dst[i].is_shard(d)) {
          via_replicate[j] = true;
          changed = true;
        }
      }
    }
  }
  std::vector<RedistributeStep> out;
  Placements cur = src;
  for (int i = nd_ - 1; i >= 0; --i) {
    if (via_replicate[i] && cur[i].is_shard()) push_single(cur, i, Replicate(), out);
    else if (cur[i].is_partial() && dst[i].is_replicate()) push_single(cur, i, Replicate(), out);
  }
  for (int i = 0; i < nd_; ++i)
    if (cur[i] != dst[i]) push_single(cur, i, dst[i], out);
  return out;
}

// The per-dim path when either end has shard orders: for each tensor dim
// keep the longest common prefix of the two split orders, gather the rest
// of the source's from its last splitter back, reduce partials bound for
// Replicate, then split in the target's order (each new shard splits
// last, so appending the target's remaining splitters in order rebuilds
// its order exactly), then the local R -> P.
std::vector<RedistributeStep> Planner::per_dim_ordered_steps() const {
  const Placements& src = from_.placements();
  const Placements& dst = to_.placements();
  std::vector<RedistributeStep> out;
  Placements cur = src;
  size_t common[kMaxDims] = {};
  for (int64_t d = 0; d < from_.ndim(); ++d) {
    const DimVector s = shard_split_order(src, d), t = shard_split_order(dst, d);
    size_t& k = common[d];
    while (k < s.size() && k < t.size() && s[k] == t[k]) ++k;
    for (size_t j = s.size(); j-- > k;) push_single(cur, static_cast<int>(s[j]), Replicate(), out);
  }
  for (int i = nd_ - 1; i >= 0; --i)
    if (cur[i].is_partial() && dst[i].is_replicate()) push_single(cur, i, Replicate(), out);
  for (int64_t d = 0; d < from_.ndim(); ++d) {
    const DimVector t = shard_split_order(dst, d);
    for (size_t j = common[d]; j < t.size(); ++j)
      push_single(cur, static_cast<int>(t[j]), Shard(d), out);
  }
  for (int i = 0; i < nd_; ++i)
    if (cur[i] != dst[i]) push_single(cur, i, dst[i], out);
  return out;
}

void Planner::push_single(Placements& cur, int i, Placement q,
                          std::vector<RedistributeStep>& out) const {
  Placements next = after(cur, i, q);
  out.push_back(single_step(cur, i, q, next));
  cur = std::move(next);
}

}  // namespace dtensor::redistribute_detail
