// States and the moves between them: the state a change of one mesh dim
// leads to (the nesting rule of shard orders), and the edges the search
// follows from a state, single-dim and merged (the merge rules).
#include <algorithm>

#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

// No mesh dim after `mesh_dim` in tensor dim d's split order (other than
// size-1 dims) shards d: mesh_dim's chunks are adjacent pieces of one
// range, so it may gather them or give them up.
bool Planner::last_in_order(const Placements& p, int mesh_dim, int64_t d) const {
  if (!ordered(p)) return !sharded_after(p, mesh_dim, d);
  const DimVector seq = shard_split_order(p, d);
  bool after = false;
  for (int64_t j : seq) {
    if (j == mesh_dim) after = true;
    else if (after && size_[j] > 1) return false;
  }
  return true;
}

// The state after mesh dim i goes to q; a shard becomes the last to
// split its tensor dim (what every transform that starts sharding does).
Placements Planner::after(const Placements& cur, int i, Placement q) const {
  // The common case, kept cheap: a natural state stays natural unless a
  // new shard lands left of a mesh dim already splitting its dim. Between
  // natural ends size-1 dims are not counted (they split nothing, and the
  // search never leaves natural states); with an ordered end they are, so
  // that every state is the one the appends really give and the target's
  // order for them stays reachable.
  auto later = [&](int64_t d) {
    for (int j = i + 1; j < nd_; ++j)
      if ((ordered_ || size_[j] > 1) && cur[j].is_shard(d)) return true;
    return false;
  };
  if (!ordered(cur) && !(q.is_shard() && later(q.dim()))) {
    Placements next = cur;
    next[i] = q.is_shard() ? Shard(q.dim()) : q;
    return next;
  }
  if (q.is_shard()) {
    int64_t k = 0;
    for (size_t j = 0; j < cur.size(); ++j)
      if (static_cast<int>(j) != i && cur[j].is_shard(q.dim())) ++k;
    q = Shard(q.dim(), k);
  }
  return replace_placements(cur, DimVector{i}, Placements{q});
}

void Planner::single_edges(const Placements& cur, std::vector<Move>& out) const {
  const Placements& dst = to_.placements();
  const int64_t ndim = from_.ndim();
  // Asked of every edge, so worked out once per state: a move to R or S
  // keeps valid Partials valid, and the mesh dims (of more than one rank)
  // sharding each tensor dim answer sharded_after with one shift.
  const bool valid = valid_partials(cur);
  uint32_t sharding[kMaxDims] = {};
  for (int j = 0; j < nd_; ++j)
    if (size_[j] > 1 && cur[j].is_shard()) sharding[cur[j].dim()] |= 1u << j;
  // Made in place. Between natural ends the move changes mesh dim i alone:
  // may_take keeps a new shard right of the live dims splitting its dim,
  // so after() would renumber nothing (its common case, without the call).
  auto add = [&](int i, Placement q) {
    out.push_back(single_move(cur, i, q, cur));
    Placements& next = out.back().next;
    if (ordered_) next = after(cur, i, q);
    else next[i] = q.is_shard() ? Shard(q.dim()) : q;
    if ((!valid || q.is_partial()) && !valid_partials(next)) out.pop_back();
  };
  for (int i = 0; i < nd_; ++i) {
    const Placement p = cur[i];
    if (size_[i] == 1) {
      // Nothing moves: go straight to the target placement, at the place
      // in its split order the target gives it (the others may not be
      // there yet; then a later free step puts it right).
      if (p != dst[i]) {
        Placements next = replace_placements(cur, DimVector{i}, Placements{dst[i]});
        if (!valid_partials(next)) continue;
        out.push_back(single_move(cur, i, dst[i], next));
      }
      continue;
    }
    // A new shard is always the last to split its dim, so any tensor dim
    // may be taken; only the last splitter of a dim may give it up.
    // Between natural layouts the search stays in natural states (a new
    // shard only right of the mesh dims splitting its dim): an ordered
    // detour only has to be undone again, and the states it would add
    // made cold plans about 4x slower.
    auto may_take = [&](int64_t e) { return ordered_ || (sharding[e] >> (i + 1)) == 0; };
    if (p.is_shard()) {
      if (!last_in_order(cur, i, p.dim())) continue;
      add(i, Replicate());
      for (int64_t e = 0; e < ndim; ++e)
        if (e != p.dim() && may_take(e)) add(i, Shard(e));
    } else if (p.is_partial()) {
      // A Partial the target keeps must never leave: without
      // allow_new_partial no edge makes a Partial again, so every state
      // past such a move is a dead end (the issue-44 pair's kept P(sum)
      // on a mesh dim of 4 was most of its states).
      if (p == dst[i] && prune_kept_) continue;
      add(i, Replicate());
      for (int64_t e = 0; e < ndim; ++e)
        if (may_take(e)) add(i, Shard(e));
    } else {
      for (int64_t e = 0; e < ndim; ++e)
        if (may_take(e)) add(i, Shard(e));
      if (options_.allow_new_partial && dst[i].is_partial()) add(i, dst[i]);
    }
  }
}

// Edges that run one collective over the flattened group of several mesh
// dims at once, so the search prices merges like any other step: a merged
// all_reduce may beat a reduce_scatter + all_gather path only when the
// search sees both. Each edge is checked as the run of single steps it
// replaces (all_gather inner dims first, reduce_scatter outer first).
void Planner::merged_edges(const Placements& cur, std::vector<Move>& out) const {
  // Partials the target keeps stay out of every reduction (single_edges).
  const Placements& dst = to_.placements();
  uint32_t partial_dims = 0;
  for (int i = 0; i < nd_; ++i)
    if (size_[i] > 1 && cur[i].is_partial() && (cur[i] != dst[i] || !prune_kept_))
      partial_dims |= 1u << i;
  // Every subset of `dims` with two or more members.
  auto for_subsets = [](uint32_t dims, auto&& f) {
    for (uint32_t sub = dims; sub != 0; sub = (sub - 1) & dims)
      if (!one_dim(sub)) f(sub);
  };
  // The mesh dims of `sub` in the order their single steps to q would
  // run, or false when one of them breaks the nesting rule on the way:
  // new shards in ascending mesh dims (each then splits after the earlier
  // ones), gathers from the last in d's split order back (descending mesh
  // dims when that order is natural). `next` is the state after the run.
  DimVector order;
  Placements next;
  auto run_of = [&](uint32_t sub, Placement q, int64_t d, bool gather) {
    order.clear();
    next = cur;
    if (gather) {
      const DimVector seq = shard_split_order(cur, d);
      for (size_t k = seq.size(); k-- > 0;)
        if (sub >> seq[k] & 1) order.push_back(seq[k]);
    } else {
      for (int i = 0; i < nd_; ++i)
        if (sub >> i & 1) order.push_back(i);
    }
    for (int64_t m : order) {
      const int i = static_cast<int>(m);
      if (gather && !last_in_order(next, i, d)) return false;
      if (!gather && !ordered_ && q.is_shard() && sharded_after(next, i, d)) return false;
      next = after(next, i, q);
    }
    return true;
  };
  auto add = [&](uint32_t sub, StepKind kind, Placement q) {
    out.push_back(Move{next, 0, 0, sub, true, kind, q});
  };
  for_subsets(partial_dims, [&](uint32_t sub) {
    // Reductions have no nesting rule: tensor dim -1 is sharded nowhere.
    if (!run_of(sub, Replicate(), -1, /*gather=*/false)) return;
    if (!mergeable(cur, sub, order, StepKind::AllReduce, -1)) return;
    add(sub, StepKind::AllReduce, Replicate());
  });
  for (int64_t d = 0; d < from_.ndim(); ++d) {
    for_subsets(partial_dims, [&](uint32_t sub) {
      if (!run_of(sub, Shard(d), d, /*gather=*/false)) return;
      if (!valid_partials(next) || !mergeable(cur, sub, order, StepKind::ReduceScatter, d))
        return;
      add(sub, StepKind::ReduceScatter, Shard(d));
    });
    uint32_t shard_dims = 0;
    for (int i = 0; i < nd_; ++i)
      if (size_[i] > 1 && cur[i].is_shard(d)) shard_dims |= 1u << i;
    for_subsets(shard_dims, [&](uint32_t sub) {
      if (!run_of(sub, Replicate(), d, /*gather=*/true)) return;
      if (!mergeable(cur, sub, order, StepKind::AllGather, d)) return;
      out.push_back(Move{next, 0, 0, sub, true, StepKind::AllGather, Replicate()});
    });
  }
}

// Whether the partial ops of `dims` can run as one reduction.
bool Planner::mergeable_ops(const Placements& cur, uint32_t dims) const {
  std::optional<ReduceOp> first;
  bool mixed = false;
  for (int i = 0; i < nd_; ++i) {
    if (!(dims >> i & 1)) continue;
    const ReduceOp op = cur[i].reduce_op();
    if (!first) first = op;
    else if (op != *first) {
      if (!is_sum_or_avg(op) || !is_sum_or_avg(*first)) return false;
      mixed = true;
    }
  }
  return !mixed || floating_;  // the sum+avg divisor needs a floating dtype
}

// Whether the single-dim steps of `kind` over the mesh dims `order` (in
// execution order) may run as one collective over the flattened group of
// `dims` from state `cur`: the merge rules of docs/redistribution.md.
bool Planner::mergeable(const Placements& cur, uint32_t dims, const DimVector& order,
                        StepKind kind, int64_t d) const {
  if (!may_merge(dims)) return false;
  if (kind == StepKind::AllReduce) return mergeable_ops(cur, dims);
  for (size_t k = 1; k < order.size(); ++k) {
    // reduce_scatter nests outer first (ascending); all_gather unnests
    // inner first (descending). The flattened group is row-major over
    // ascending dims either way.
    const bool ascending = order[k] > order[k - 1];
    if (ascending != (kind == StepKind::ReduceScatter)) return false;
  }
  if (kind == StepKind::ReduceScatter && !mergeable_ops(cur, dims)) return false;
  // The run ordering above makes the merged dims split d last, in
  // ascending mesh dims: the row-major order of the flattened group.
  return same_chunking(cur, dims, d);
}

// Whether chunking tensor dim d over the mesh dims `dims` (ascending, as
// one flattened group) gives exactly the pieces nested chunking gives, for
// every piece the other mesh dims splitting d (in p, in their order) leave.
// Always true when the lengths divide evenly; PyTorch skips this check for
// all_gather and corrupts uneven shards.
bool Planner::same_chunking(const Placements& p, uint32_t dims, int64_t d) const {
  // Lengths divisible by every mesh dim's size together chunk evenly
  // however they nest.
  int64_t all = 1;
  for (int i = 0; i < nd_; ++i) all *= size_[i];
  if (from_.shape()[d] % all == 0) return true;
  uint64_t key = static_cast<uint64_t>(d) | static_cast<uint64_t>(dims) << 4;
  int shift = 12;
  if (!ordered(p)) {
    // A natural order is ascending, so the splitters' mask says it all
    // (bits 44+, apart from an order's; with no splitter both keys agree,
    // as they mean the same).
    for (int j = 0; j < nd_; ++j)
      if (size_[j] > 1 && !(dims >> j & 1) && p[j].is_shard(d)) key |= uint64_t{1} << (44 + j);
  } else {
    for (int64_t j : shard_split_order(p, d)) {
      if (size_[j] == 1 || (dims >> j & 1)) continue;
      key |= static_cast<uint64_t>(j + 1) << shift;
      shift += 4;
    }
  }
  auto [it, fresh] = chunking_.try_emplace(key, false);
  if (fresh) it->second = chunks_alike(p, dims, d);
  return it->second;
}

bool Planner::chunks_alike(const Placements& p, uint32_t dims, int64_t d) const {
  int64_t ns[kMaxDims];
  int levels = 0;
  int64_t total = 1;
  for (int i = 0; i < nd_; ++i)
    if (dims >> i & 1) {
      ns[levels++] = size_[i];
      total *= size_[i];
    }
  std::vector<int64_t> lens{from_.shape()[d]};
  for (int64_t j : shard_split_order(p, d)) {
    if (size_[j] == 1 || (dims >> j & 1)) continue;
    std::vector<int64_t> next;
    for (int64_t len : lens)
      for (int64_t r = 0; r < size_[j]; ++r) next.push_back(chunk_range(len, size_[j], r).size);
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    lens = std::move(next);
  }
  // Piece r of the flattened group is, nested, piece digit_k of ns[k] at
  // each level k, its digits r in mixed radix (ns[0] the most significant).
  for (int64_t len : lens)
    for (int64_t r = 0; r < total; ++r) {
      int64_t piece = len, rest = r, below = total;
      for (int k = 0; k < levels; ++k) {
        below /= ns[k];
        piece = chunk_range(piece, ns[k], rest / below).size;
        rest %= below;
      }
      if (piece != chunk_range(len, total, r).size) return false;
    }
  return true;
}

}  // namespace dtensor::redistribute_detail
