// Symmetry between tensor dims: the search settles one state of each class
// of states that differ only in which of several interchangeable tensor
// dims they chunk (issue 18, fifth pass).
//
// Two tensor dims are interchangeable when neither end shards them and
// they have the same length. Swapping them maps every state to a state
// and every edge to an edge of the same cost and peak: the cost model
// reads bytes per rank, mesh dims and links, never which tensor dim moves
// (price()); the nesting rule and the validity of Partials only compare
// dims with each other; the one rule that reads a dim's length, whether a
// merged collective chunks it as the nested steps do (same_chunking),
// reads equal lengths; the bound reads the target's split orders, which
// name neither dim. And the swap fixes the source and the target, which
// shard neither. So the cheapest path (then the lightest, then the
// shortest) from a state costs what it costs from its image, and A* over
// one representative per class (relabelled by canonical()) finds a plan
// exactly as cheap and as light: the plan of a class member is the plan of
// its representative relabelled back, which search() does step by step.
// In the slowest sweep pair, P,R,R,R,R -> S(1),R,R,S(1),S(1) of [35, 10,
// 46, 35], dims 0 and 3 are interchangeable, and the free chunkings of the
// four replicated mesh dims fall from 625 to 353 classes.
#include "redistribute/planner.h"

namespace dtensor::redistribute_detail {

void Planner::init_twins() {
  const int64_t ndim = from_.ndim();
  bool touched[kMaxDims] = {};
  for (const Placements* p : {&from_.placements(), &to_.placements()})
    for (const Placement& q : *p)
      if (q.is_shard()) touched[q.dim()] = true;
  for (int64_t d = 0; d < ndim; ++d) twin_of_[d] = static_cast<int8_t>(d);
  for (int64_t d = 0; d < ndim; ++d) {
    if (touched[d] || twin_of_[d] != d) continue;
    members_[d][class_size_[d]++] = static_cast<int8_t>(d);
    for (int64_t e = d + 1; e < ndim; ++e)
      if (!touched[e] && from_.shape()[e] == from_.shape()[d]) {
        twin_of_[e] = static_cast<int8_t>(d);
        members_[d][class_size_[d]++] = static_cast<int8_t>(e);
        symmetric_ = true;
      }
  }
}

// p with the dims of each class of twins renamed in the order they first
// shard a mesh dim (mesh dim 0 first) to the class's dims in ascending
// order: equal for every state of one class. to[d] is the name dim d gets.
// Asked of every edge, so the usual answer, p itself, is found without
// building anything.
Placements Planner::canonical(const Placements& p, Rename& to) const {
  const int64_t ndim = from_.ndim();
  for (int64_t d = 0; d < ndim; ++d) to[d] = static_cast<int8_t>(d);
  if (!symmetric_) return p;
  int8_t handed[kMaxDims] = {};  // per class (by its first dim): names given so far
  bool named[kMaxDims] = {};
  bool same = true;
  for (const Placement& q : p) {
    if (!q.is_shard()) continue;
    const int64_t d = q.dim();
    const int8_t cls = twin_of_[d];
    if (class_size_[cls] < 2 || named[d]) continue;
    named[d] = true;
    to[d] = members_[cls][handed[cls]++];
    same = same && to[d] == d;
  }
  // Dims no mesh dim shards take the names left, in order (a permutation;
  // when the named dims kept theirs, so do these).
  if (same) return p;
  for (int64_t d = 0; d < ndim; ++d)
    if (!named[d] && class_size_[twin_of_[d]] >= 2) to[d] = members_[twin_of_[d]][handed[twin_of_[d]]++];
  return renamed(p, to);
}

// p (or a move) with every tensor dim d renamed to to[d].
Placements Planner::renamed(const Placements& p, const Rename& to) {
  Placements out = p;
  for (Placement& q : out)
    if (q.is_shard()) q = Shard(to[q.dim()], q.shard_order());
  return out;
}

Planner::Move Planner::renamed(const Move& m, const Rename& to) {
  Move out = m;
  out.next = renamed(m.next, to);
  if (out.q.is_shard()) out.q = Shard(to[out.q.dim()], out.q.shard_order());
  return out;
}

}  // namespace dtensor::redistribute_detail
