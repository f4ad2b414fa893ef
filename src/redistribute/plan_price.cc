// What a move costs (the cost model's transforms) and the bytes per rank it
// holds live, and the steps of the path the search returns.
#include <bit>

#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

const Planner::GroupInfo& Planner::group_info(uint32_t dims) const {
  GroupInfo& info = groups_[dims];
  if (info.known) return info;
  MeshDimMask roots = 0;
  for (int i = 0; i < nd_; ++i) {
    if (!(dims >> i & 1)) continue;
    info.n *= size_[i];
    roots |= mesh_.root_dims(i);
  }
  info.link = mesh_.link(roots);
  info.may_merge = auto_flatten_ || mesh_.find_flattened(roots).has_value();
  info.known = true;
  return info;
}

Group Planner::group_of(uint32_t dims) const {
  if (one_dim(dims)) {
    const int i = std::countr_zero(dims);
    return Group{mesh_, i, size_[i], link_[i]};
  }
  const GroupInfo& info = group_info(dims);
  return Group{mesh_, 31 - std::countl_zero(dims), info.n, info.link};
}

// The group a collective over `dims` prices with (the transforms' cost
// functions read only n and link), without copying the mesh per edge.
const Group& Planner::scratch_group(uint32_t dims) const {
  if (one_dim(dims)) {
    const int i = std::countr_zero(dims);
    scratch_.n = size_[i];
    scratch_.link = link_[i];
  } else {
    const GroupInfo& info = group_info(dims);
    scratch_.n = info.n;
    scratch_.link = info.link;
  }
  return scratch_;
}

// What changing the mesh dims `dims` from `cur` to `next` by a step of
// `kind` costs, and the bytes per rank it holds live: its input, its
// output and the backends' temporaries (docs/redistribution.md, "Peak
// memory"): the collectives write straight into their outputs; under MPI
// a reduce_scatter (or a small all_reduce) receives the others' pieces
// into a buffer bounded by the group size (TransformCost::temp_bytes,
// comm/fold_temp.h).
Planner::Price Planner::price(StepKind kind, uint32_t dims, double cur_bytes,
                              const Placements& next, Placement q) const {
  Price out;
  out.kind = kind;
  const double b = cur_bytes;
  if (kind == StepKind::Local) {
    const int i = std::countr_zero(dims);
    if (size_[i] == 1) {
      out.peak = b;  // the executor hands the input on
    } else if (q.is_shard()) {
      out.peak = b + bytes_of(next);  // the own chunk, copied
    } else {
      out.peak = q.reduce_op() == ReduceOp::Sum ? 2 * b : b;  // x/n (or zeros) vs x itself
    }
    return out;
  }
  const Group& g = scratch_group(dims);
  TransformCost c;
  switch (kind) {
    case StepKind::AllGather: c = shard_to_replicate_cost(b, g, base_us_); break;
    case StepKind::AllToAll: c = shard_to_shard_cost(b, g, base_us_); break;
    case StepKind::AllReduce: c = partial_to_replicate_cost(b, g, base_us_); break;
    case StepKind::ReduceScatter: c = partial_to_shard_cost(b, g, base_us_); break;
    case StepKind::Local:
    case StepKind::BoxExchange: break;  // not an edge of the search
  }
  out.peak = b + c.bytes_after + c.temp_bytes;
  out.cost_us = c.cost_us;
  out.bytes = c.bytes_charged;
  return out;
}

// The step changing mesh dim i from cur[i] to q (validity checked by the caller).
// `next` is the state after (after(cur, i, q)); s.to holds mesh dim i's
// placement in it, its order included, which is what replace_placements
// needs to rebuild that state.
RedistributeStep Planner::single_step(const Placements& cur, int i, Placement q,
                                      const Placements& next) const {
  RedistributeStep s;
  s.mesh_dims.push_back(i);
  s.from.push_back(cur[i]);
  s.to.push_back(next[i]);
  s.group_size = size_[i];
  const Placement p = cur[i];
  if (p.is_shard()) s.tensor_dim = p.dim();
  if (q.is_shard()) (p.is_shard() ? s.to_tensor_dim : s.tensor_dim) = q.dim();
  if (p.is_partial()) s.op = p.reduce_op();
  if (q.is_partial()) s.op = q.reduce_op();
  const Price pr = price(single_kind(i, p, q), 1u << i, bytes_of(cur), next, q);
  s.kind = pr.kind;
  s.cost_us = pr.cost_us;
  s.bytes = pr.bytes;
  s.peak_bytes = pr.peak;
  return s;
}

// A collective of `kind` over the flattened group of `dims`, every one of
// them going from its cur placement to q.
RedistributeStep Planner::merged_step(const Placements& cur, const Placements& next,
                                      uint32_t dims, StepKind kind, Placement q) const {
  RedistributeStep s;
  s.kind = kind;
  s.group_size = group_info(dims).n;
  bool sum_seen = false, avg_seen = false;
  double avg_product = 1;
  for (int i = 0; i < nd_; ++i) {
    if (!(dims >> i & 1)) continue;
    s.mesh_dims.push_back(i);
    s.from.push_back(cur[i]);
    s.to.push_back(next[i]);
    if (cur[i].is_shard()) s.tensor_dim = cur[i].dim();
    if (cur[i].is_partial()) {
      s.op = cur[i].reduce_op();
      sum_seen |= s.op == ReduceOp::Sum;
      if (s.op == ReduceOp::Avg) {
        avg_seen = true;
        avg_product *= static_cast<double>(size_[i]);
      }
    }
  }
  // sum+avg: reduce with sum over the whole group, then divide by the avg
  // dims' sizes (avg over the flattened group alone would divide by all).
  if (sum_seen && avg_seen) {
    s.op = ReduceOp::Sum;
    s.divisor = avg_product;
  }
  if (q.is_shard()) s.tensor_dim = q.dim();
  const Price pr = price(kind, dims, bytes_of(cur), next, q);
  s.cost_us = pr.cost_us;
  s.bytes = pr.bytes;
  s.peak_bytes = pr.peak;
  return s;
}

RedistributeStep Planner::step_of(const Placements& cur, const Move& m) const {
  if (m.merged) return merged_step(cur, m.next, m.dims, m.kind, m.q);
  return single_step(cur, std::countr_zero(m.dims), m.q, m.next);
}

}  // namespace dtensor::redistribute_detail
