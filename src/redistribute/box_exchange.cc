// S/R -> S/R in one step: a box exchange. Without Partials, every element
// of a layout lives in known boxes (DTensorSpec::extent), so each rank's
// target box is covered by pieces of the source boxes: each receiver takes
// from every source box the piece that falls in its target box, straight
// from a rank that holds it, in one all_to_allv (Backend::exchange_boxes).
// No intermediate layout exists, so the step holds its input and its
// output and nothing else: (S(0),S(1)) -> (S(1),S(0)) on 2x2 peaks at 2x
// its output, where every path of one-mesh-dim steps passes through a
// layout of half the tensor (4x).
//
// Who sends a piece: the source boxes of ranks that differ only on mesh
// dims the source replicates are the same box; the receiver takes it from
// the holder whose coordinates on those dims are its own, so a piece the
// receiver already holds is a local copy and data crosses only the mesh
// dims whose chunking changes. The source boxes of the other ranks tile the
// tensor, so each target byte has exactly one sender.
//
// Cost, in the model's terms (SEMANTICS.md): one collective base, a latency
// per peer of the busiest rank, and the most bytes any rank sends or
// receives over the slowest link among the mesh dims data crosses. On one
// mesh dim with even shards this is the all_to_all formula exactly.
#include <algorithm>
#include <memory>

#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/box_exchange.h"

namespace dtensor::redistribute_detail {

namespace {

constexpr double kGiB = 1073741824.0;

struct Box {
  Shape start, size;
};

// The boxes of a layout, by mesh coordinate (row-major linear index).
std::vector<Box> boxes_of(const DTensorSpec& spec, const std::vector<DimVector>& coords) {
  std::vector<Box> out;
  out.reserve(coords.size());
  for (const DimVector& c : coords) {
    ShardExtent e = spec.extent(c);
    out.push_back(Box{std::move(e.global_offset), std::move(e.local_shape)});
  }
  return out;
}

std::vector<DimVector> coordinates(const DeviceMesh& mesh) {
  std::vector<DimVector> out(static_cast<size_t>(mesh.size()));
  DimVector c(static_cast<size_t>(mesh.ndim()), 0);
  for (DimVector& slot : out) {
    slot = c;
    for (int i = mesh.ndim() - 1; i >= 0; --i) {
      if (++c[i] < mesh.size(i)) break;
      c[i] = 0;
    }
  }
  return out;
}

bool replicated(const Placements& p) {
  for (const Placement& q : p)
    if (q.is_partial()) return false;
  return true;
}

}  // namespace

bool for_each_box_piece(const DTensorSpec& from, const DTensorSpec& to, size_t max_pairs,
                        const PieceVisitor& visit) {
  if (!replicated(from.placements()) || !replicated(to.placements())) return false;
  const DeviceMesh& mesh = from.mesh();
  const int nd = mesh.ndim();
  const std::vector<DimVector> coords = coordinates(mesh);
  // Holders of distinct source boxes: coordinate 0 on every replicated dim.
  std::vector<int64_t> stride(static_cast<size_t>(nd), 1);
  for (int i = nd - 2; i >= 0; --i) stride[i] = stride[i + 1] * mesh.size(i + 1);
  std::vector<int64_t> holders;
  for (size_t c = 0; c < coords.size(); ++c) {
    bool first = true;
    for (int i = 0; i < nd; ++i)
      first = first && (coords[c][i] == 0 || !from.placements()[i].is_replicate());
    if (first) holders.push_back(static_cast<int64_t>(c));
  }
  if (holders.size() * coords.size() > max_pairs) return false;
  const std::vector<Box> src = boxes_of(from, coords), dst = boxes_of(to, coords);
  const size_t td = static_cast<size_t>(from.ndim());
  for (size_t q = 0; q < coords.size(); ++q) {
    for (int64_t h : holders) {
      // The holder of h's box that shares q's coordinates on replicated dims.
      int64_t s = h;
      for (int i = 0; i < nd; ++i)
        if (from.placements()[i].is_replicate()) s += coords[q][i] * stride[i];
      const Box& a = src[static_cast<size_t>(s)];
      const Box& b = dst[q];
      int64_t lo[kMaxDims], size[kMaxDims];
      bool empty = false;
      for (size_t d = 0; d < td && !empty; ++d) {
        lo[d] = std::max(a.start[d], b.start[d]);
        size[d] = std::min(a.start[d] + a.size[d], b.start[d] + b.size[d]) - lo[d];
        empty = size[d] <= 0;
      }
      if (!empty) visit(s, static_cast<int64_t>(q), lo, size);
    }
  }
  return true;
}

std::optional<std::vector<BoxPiece>> box_pieces(const DTensorSpec& from, const DTensorSpec& to,
                                                size_t max_pairs) {
  std::vector<BoxPiece> out;
  const size_t td = static_cast<size_t>(from.ndim());
  const bool ok = for_each_box_piece(
      from, to, max_pairs, [&](int64_t s, int64_t q, const int64_t* start, const int64_t* size) {
        BoxPiece p{s, q, Shape(td, 0), Shape(td, 0)};
        for (size_t d = 0; d < td; ++d) {
          p.start[d] = start[d];
          p.size[d] = size[d];
        }
        out.push_back(std::move(p));
      });
  if (!ok) return std::nullopt;
  return out;
}

std::optional<RedistributeStep> box_exchange_step(const DTensorSpec& from, const DTensorSpec& to,
                                                  double base_us) {
  const DeviceMesh& mesh = from.mesh();
  const int nd = mesh.ndim();
  const std::vector<DimVector> coords = coordinates(mesh);
  // Per rank: peers and bytes sent and received; the mesh dims crossed.
  // Counted piece by piece, never stored: the planner asks for every pair
  // of S/R layouts, and 64 ranks may make 4096 pieces.
  const size_t n = coords.size();
  std::vector<int64_t> sends(n, 0), recvs(n, 0), sent(n, 0), received(n, 0);
  std::vector<bool> crossed(static_cast<size_t>(nd), false);
  const int64_t isz = static_cast<int64_t>(itemsize(from.dtype()));
  const size_t td = static_cast<size_t>(from.ndim());
  const bool ok = for_each_box_piece(
      from, to, size_t{1} << 16, [&](int64_t s, int64_t q, const int64_t*, const int64_t* size) {
        if (s == q) return;
        int64_t bytes = isz;
        for (size_t d = 0; d < td; ++d) bytes *= size[d];
        ++sends[s];
        ++recvs[q];
        sent[s] += bytes;
        received[q] += bytes;
        for (int i = 0; i < nd; ++i) crossed[i] = crossed[i] || coords[s][i] != coords[q][i];
      });
  if (!ok) return std::nullopt;
  int64_t peers = 0, bytes = 0;
  for (size_t r = 0; r < n; ++r) {
    peers = std::max({peers, sends[r], recvs[r]});
    bytes = std::max({bytes, sent[r], received[r]});
  }
  RedistributeStep s;
  s.kind = StepKind::BoxExchange;
  MeshDimMask roots = 0;
  for (int i = 0; i < nd; ++i) {
    if (!crossed[i] && from.placements()[i] == to.placements()[i]) continue;
    s.mesh_dims.push_back(i);
    s.from.push_back(from.placements()[i]);
    s.to.push_back(to.placements()[i]);
    s.group_size *= mesh.size(i);
    if (crossed[i]) roots |= mesh.root_dims(i);
  }
  if (s.mesh_dims.empty()) return std::nullopt;  // nothing changes
  // The step's placements name the state after it (shard orders included);
  // when the untouched dims' orders would be renumbered differently, the
  // step spans every mesh dim.
  if (replace_placements(from.placements(), s.mesh_dims, s.to) != to.placements()) {
    s.mesh_dims.clear();
    s.from = from.placements();
    s.to = to.placements();
    s.group_size = mesh.size();
    for (int i = 0; i < nd; ++i) s.mesh_dims.push_back(i);
    if (replace_placements(from.placements(), s.mesh_dims, s.to) != to.placements())
      return std::nullopt;
  }
  s.bytes = static_cast<double>(bytes);
  if (peers > 0) {
    const LinkCost link = mesh.link(roots);
    s.cost_us = base_us + static_cast<double>(peers) * link.latency_us +
                s.bytes / kGiB / link.bandwidth_gbps * 1e6;
  }
  // Input and output live together; nothing else (no packed copies).
  auto model_bytes = [&](const Placements& p) {
    double shards = 1;
    for (int i = 0; i < nd; ++i)
      if (p[i].is_shard()) shards *= static_cast<double>(mesh.size(i));
    return static_cast<double>(from.global_bytes()) / shards;
  };
  s.peak_bytes = model_bytes(from.placements()) + model_bytes(to.placements());
  return s;
}

std::shared_ptr<const BoxRoutes> box_routes(const DTensorSpec& from, const DTensorSpec& to) {
  const std::vector<DimVector> coords = coordinates(from.mesh());
  const std::vector<Box> src = boxes_of(from, coords), dst = boxes_of(to, coords);
  auto out = std::make_shared<BoxRoutes>();
  out->outputs.reserve(coords.size());
  for (size_t c = 0; c < coords.size(); ++c)
    out->outputs.emplace_back(static_cast<int>(c), dst[c].size);
  const size_t td = static_cast<size_t>(from.ndim());
  const bool ok = for_each_box_piece(
      from, to, static_cast<size_t>(-1),
      [&](int64_t s, int64_t q, const int64_t* start, const int64_t* size) {
        BoxMove& m = out->moves.emplace_back();
        m.from = static_cast<int>(s);
        m.to = static_cast<int>(q);
        for (size_t d = 0; d < td; ++d) {
          m.size.push_back(size[d]);
          m.from_start.push_back(start[d] - src[static_cast<size_t>(s)].start[d]);
          m.to_start.push_back(start[d] - dst[static_cast<size_t>(q)].start[d]);
        }
      });
  DT_CHECK(ok, "redistribute: internal error: a box exchange from ", from.to_string(), " to ",
           to.to_string(), " (a Partial has no boxes)");
  return out;
}

LocalTensor box_exchange(const LocalTensor& in, const Group& g, const DeviceMesh& mesh,
                         const BoxRoutes& by_coord) {
  // Each view of the mesh maps the coordinates to its own ranks. Under MPI
  // only this process's view, and its own moves, are needed.
  const bool all = mesh.world().is_simulated();
  // The common case, a simulated world whose mesh is the whole world in
  // rank order: coordinates are ranks, so the planned routes serve as they
  // are (no per-call copy of n^2 moves).
  if (all && in.shards().size() == by_coord.outputs.size() &&
      mesh.contains(in.shards().front().first)) {
    const std::vector<int> view = mesh.ranks(in.shards().front().first);
    bool identity = true;
    for (size_t c = 0; c < view.size() && identity; ++c) identity = view[c] == static_cast<int>(c);
    if (identity) return g.mesh.world().backend().exchange_boxes(in, g.mesh, g.dim, by_coord);
  }
  BoxRoutes routes;
  // Every view's routes (simulated) or this rank's view's (MPI), at most.
  const size_t views =
      all ? std::max<size_t>(1, in.shards().size() / std::max<size_t>(1, by_coord.outputs.size()))
          : 1;
  routes.outputs.reserve(views * by_coord.outputs.size());
  routes.moves.reserve(views * by_coord.moves.size());
  // Ranks whose view is done, by rank: a search of a list was O(n^2) over
  // the held ranks.
  std::vector<char> done(static_cast<size_t>(mesh.world().size()), 0);
  for (const auto& [rank, shard] : in.shards()) {
    if (!mesh.contains(rank) || done[static_cast<size_t>(rank)]) continue;
    const std::vector<int> view = mesh.ranks(rank);
    for (int r : view) done[static_cast<size_t>(r)] = 1;
    for (const auto& [c, shape] : by_coord.outputs)
      if (all || view[static_cast<size_t>(c)] == rank)
        routes.outputs.emplace_back(view[static_cast<size_t>(c)], shape);
    for (const BoxMove& m : by_coord.moves) {
      const int a = view[static_cast<size_t>(m.from)], b = view[static_cast<size_t>(m.to)];
      if (!all && a != rank && b != rank) continue;
      routes.moves.push_back(BoxMove{a, b, m.size, m.from_start, m.to_start});
    }
  }
  return g.mesh.world().backend().exchange_boxes(in, g.mesh, g.dim, routes);
}

LocalTensor box_exchange(const LocalTensor& in, const Group& g, const DTensorSpec& from,
                         const DTensorSpec& to) {
  return box_exchange(in, g, from.mesh(), *box_routes(from, to));
}

}  // namespace dtensor::redistribute_detail
