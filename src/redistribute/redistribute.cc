// The straightforward redistribution: mesh dim by mesh dim through the
// elementary transforms. (The min-cost planner of a later issue replaces the
// order and choice of steps; the transforms stay.)
//
// Because mesh dims sharding the same tensor dim nest left to right, the
// order matters: unsharding runs from the last mesh dim to the first (inner
// shards are gathered before outer ones), resharding from the first to the
// last. A mesh dim whose placement does not change but which shards a tensor
// dim inside one that does is unsharded and resharded around it.
#include <sstream>

#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

void check_innermost(const DTensorSpec& spec, int mesh_dim, int64_t d, const char* what) {
  const Placements& p = spec.placements();
  for (size_t j = static_cast<size_t>(mesh_dim) + 1; j < p.size(); ++j) {
    DT_CHECK(!p[j].is_shard(d), what, " on mesh dim ", mesh_dim, ": tensor dim ", d,
             " is also sharded by the inner mesh dim ", j, " (placements ", to_string(p),
             "); only the innermost shard of a tensor dim can be moved");
  }
}

namespace {

[[noreturn]] void throw_not_allowed(const DTensorSpec& from, int mesh_dim, Placement to,
                                    const char* why) {
  DT_THROW("redistribute: cannot go from ", to_string(from.placements()[mesh_dim]), " to ",
           to_string(to), " on mesh dim ", mesh_dim, " (", why, "); from ",
           to_string(from.placements()), " on mesh ", from.mesh().shape());
}

}  // namespace

LocalTensor apply_transform(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                            Placement to) {
  const Placement src = from.placements()[mesh_dim];
  if (src == to) return in;
  if (from.mesh().size(mesh_dim) == 1) return in;  // a mesh dim of size 1 moves nothing
  switch (src.kind()) {
    case Placement::Kind::Shard:
      if (to.is_replicate()) return shard_to_replicate(in, from, mesh_dim);
      if (to.is_shard()) return shard_to_shard(in, from, mesh_dim, to.dim());
      throw_not_allowed(from, mesh_dim, to, "a shard cannot become a partial");
    case Placement::Kind::Partial:
      if (to.is_replicate()) return partial_to_replicate(in, from, mesh_dim);
      if (to.is_shard()) return partial_to_shard(in, from, mesh_dim, to.dim());
      throw_not_allowed(from, mesh_dim, to, "a partial cannot change its reduce op");
    case Placement::Kind::Replicate:
      if (to.is_shard()) return replicate_to_shard(in, from, mesh_dim, to.dim());
      return replicate_to_partial(in, from, mesh_dim, to.reduce_op());
  }
  return in;
}

LocalTensor redistribute_local(const LocalTensor& in, const DTensorSpec& from, const Placements& to,
                               bool allow_new_partial) {
  const Placements& src = from.placements();
  const int nd = from.mesh().ndim();
  DT_CHECK(to.size() == static_cast<size_t>(nd), "redistribute: expected ", nd,
           " placements for a ", nd, "-d mesh, got ", to.size(), ": ", to_string(to));
  // Validate the target (normalises negative dims) and every mesh dim's move.
  const DTensorSpec target = from.with_placements(to);
  const Placements& dst = target.placements();
  for (int i = 0; i < nd; ++i) {
    if (src[i] == dst[i]) continue;
    if (src[i].is_shard() && dst[i].is_partial())
      throw_not_allowed(from, i, dst[i], "a shard cannot become a partial");
    if (src[i].is_partial() && dst[i].is_partial())
      throw_not_allowed(from, i, dst[i], "a partial cannot change its reduce op");
    if (dst[i].is_partial() && !allow_new_partial)
      throw_not_allowed(from, i, dst[i],
                        "redistribute may not introduce a Partial the source does not have");
  }

  // Which mesh dims must pass through Replicate: those that move a shard away
  // (S->R), plus, transitively, every later mesh dim sharding a tensor dim
  // that an earlier changing mesh dim gathers, splits or chunks.
  bool via_replicate[kMaxDims] = {};
  for (int i = 0; i < nd; ++i) via_replicate[i] = src[i].is_shard() && dst[i].is_replicate();
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < nd; ++i) {
      const bool moves = src[i] != dst[i] || via_replicate[i];
      if (!moves) continue;
      for (int j = i + 1; j < nd; ++j) {
        if (via_replicate[j] || !src[j].is_shard()) continue;
        const int64_t d = src[j].dim();
        const bool touches = (src[i].is_shard(d) && (via_replicate[i] || src[i] != dst[i])) ||
                             (dst[i].is_shard(d) && (via_replicate[i] || src[i] != dst[i]));
        if (touches) {
          via_replicate[j] = true;
          changed = true;
        }
      }
    }
  }

  LocalTensor local = in;
  Placements cur = src;
  auto step = [&](int i, Placement p) {
    local = apply_transform(local, from.with_placements(cur), i, p);
    cur[i] = p;
  };
  // Unshard, innermost mesh dim first; reduce partials bound for Replicate.
  for (int i = nd - 1; i >= 0; --i) {
    if (via_replicate[i] && cur[i].is_shard()) step(i, Replicate());
    else if (cur[i].is_partial() && dst[i].is_replicate()) step(i, Replicate());
  }
  // Reshard, outermost first: R->S, R->P, P->S, S->S.
  for (int i = 0; i < nd; ++i) {
    if (cur[i] != dst[i]) step(i, dst[i]);
  }
  return local;
}

}  // namespace dtensor::redistribute_detail
