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
#include <array>
#include <memory>

#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/box_exchange.h"

namespace dtensor::redistribute_detail {

namespace {

constexpr double kBytesPerGiB = 1073741824.0;

struct Box {
  Shape start, size;
};

// Coordinates of a mesh by row-major linear index, without a vector of
// coordinates (building one per pair was 5% of a cold plan on 64 ranks).
struct MeshIndex {
  explicit MeshIndex(const DeviceMesh& mesh) : nd(mesh.ndim()) {
    for (int i = nd - 1; i >= 0; --i) {
      size[i] = mesh.size(i);
      stride[i] = n;
      n *= size[i];
    }
  }
  int64_t at(int64_t c, int i) const { return c / stride[i] % size[i]; }
  int nd = 0;
  int64_t n = 1;
  int64_t size[kMaxDims] = {}, stride[kMaxDims] = {};
};

// c with 0 on the mesh dims that do not shard in p: the first coordinate
// (row-major) holding c's box, as R and P split nothing.
int64_t box_holder(const Placements& p, const MeshIndex& m, int64_t c) {
  int64_t h = c;
  for (int i = 0; i < m.nd; ++i)
    if (!p[i].is_shard()) h -= m.at(c, i) * m.stride[i];
  return h;
}

// The boxes of a layout, by coordinate. Each distinct box is worked out
// once (DTensorSpec::extent copies the mesh's shape on every call: it was
// a fifth of a cold plan whose box exchange wins) and copied to the
// coordinates that differ from its holder only on dims that do not shard.
std::vector<Box> boxes_of(const DTensorSpec& spec, const MeshIndex& m) {
  std::vector<Box> out(static_cast<size_t>(m.n));
  DimVector coord(static_cast<size_t>(m.nd), 0);
  for (int64_t c = 0; c < m.n; ++c) {
    const int64_t h = box_holder(spec.placements(), m, c);
    if (h != c) {
      out[static_cast<size_t>(c)] = out[static_cast<size_t>(h)];
      continue;
    }
    for (int i = 0; i < m.nd; ++i) coord[i] = m.at(c, i);
    ShardExtent e = spec.extent(coord);
    out[static_cast<size_t>(c)] = Box{e.global_offset, e.local_shape};
  }
  return out;
}

bool replicated(const Placements& p) {
  for (const Placement& q : p)
    if (q.is_partial()) return false;
  return true;
}

// The pieces from `from` to `to` (see the top): the two layouts' boxes and
// the holders of distinct source boxes, worked out once; each() hands the
// pieces to a callable (inlined, unlike a PieceVisitor) in receiver order.
class Pieces {
 public:
  // REQUIRES: neither layout has a Partial.
  Pieces(const DTensorSpec& from, const DTensorSpec& to)
      : from_(from), m_(from.mesh()), td_(static_cast<size_t>(from.ndim())) {
    for (int64_t c = 0; c < m_.n; ++c)
      if (sharded_only(from.placements(), c)) holders_.push_back(c);
  }
  size_t pairs() const { return holders_.size() * static_cast<size_t>(m_.n); }
  const MeshIndex& mesh() const { return m_; }
  // Worked out on first use, so that a caller refusing too many pairs
  // pays for no box.
  void make_boxes(const DTensorSpec& to) {
    src_ = boxes_of(from_, m_);
    dst_ = boxes_of(to, m_);
  }
  const std::vector<Box>& src() const { return src_; }
  const std::vector<Box>& dst() const { return dst_; }

  // How many pieces each() visits, from the boxes alone, so that the routes
  // are allocated once: a plan's routes (hundreds of moves of 224 bytes on 64
  // ranks) grown by doubling touched twice their size in fresh pages, and
  // the page faults were most of such a cold plan's time. The holders'
  // boxes are the grid of every tensor dim's ranges (a holder's range of d
  // depends on its coordinates on d's splitters alone; the nonempty ones
  // tile d), so a receiver meets the product over d of the nonempty
  // ranges of d overlapping its own.
  size_t count() const {
    std::vector<std::pair<int64_t, int64_t>> ranges[kMaxDims];
    for (size_t d = 0; d < td_; ++d) {
      for (int64_t h : holders_) {
        const Box& a = src_[static_cast<size_t>(h)];
        if (a.size[d] > 0) ranges[d].emplace_back(a.start[d], a.start[d] + a.size[d]);
      }
      std::sort(ranges[d].begin(), ranges[d].end());
      ranges[d].erase(std::unique(ranges[d].begin(), ranges[d].end()), ranges[d].end());
    }
    size_t total = 0;
    for (const Box& b : dst_) {
      size_t meets = 1;
      for (size_t d = 0; d < td_ && meets > 0; ++d) {
        size_t k = 0;
        for (const auto& [lo, hi] : ranges[d])
          k += std::max(lo, b.start[d]) < std::min(hi, b.start[d] + b.size[d]);
        meets *= k;
      }
      total += meets;
    }
    return total;
  }

  // f(s, q, start, size) for each nonempty piece, sender s, receiver q.
  template <class F>
  void each(F&& f) const {
    const Placements& p = from_.placements();
    for (int64_t q = 0; q < m_.n; ++q) {
      // The holder of each source box that shares q's coordinates on the
      // dims the source replicates.
      int64_t shift = 0;
      for (int i = 0; i < m_.nd; ++i)
        if (p[i].is_replicate()) shift += m_.at(q, i) * m_.stride[i];
      const Box& b = dst_[static_cast<size_t>(q)];
      for (int64_t h : holders_) {
        const Box& a = src_[static_cast<size_t>(h)];
        int64_t lo[kMaxDims], size[kMaxDims];
        bool empty = false;
        for (size_t d = 0; d < td_ && !empty; ++d) {
          lo[d] = std::max(a.start[d], b.start[d]);
          size[d] = std::min(a.start[d] + a.size[d], b.start[d] + b.size[d]) - lo[d];
          empty = size[d] <= 0;
        }
        if (!empty) f(h + shift, q, lo, size);
      }
    }
  }

 private:
  // Whether c has 0 on every mesh dim p replicates (no Partial here).
  bool sharded_only(const Placements& p, int64_t c) const {
    for (int i = 0; i < m_.nd; ++i)
      if (p[i].is_replicate() && m_.at(c, i) != 0) return false;
    return true;
  }
  const DTensorSpec& from_;
  MeshIndex m_;
  size_t td_;
  std::vector<int64_t> holders_;
  std::vector<Box> src_, dst_;
};

// The moves of a piece, by coordinate, starts relative to the two boxes.
void add_move(BoxRoutes& r, const Pieces& pieces, int64_t s, int64_t q, const int64_t* start,
              const int64_t* size, size_t td) {
  const Box& a = pieces.src()[static_cast<size_t>(s)];
  const Box& b = pieces.dst()[static_cast<size_t>(q)];
  BoxMove& m = r.moves.emplace_back();
  m.from = static_cast<int>(s);
  m.to = static_cast<int>(q);
  for (size_t d = 0; d < td; ++d) {
    m.size.push_back(size[d]);
    m.from_start.push_back(start[d] - a.start[d]);
    m.to_start.push_back(start[d] - b.start[d]);
  }
}

// Every receiver's output box, by coordinate, and room for the moves
// add_move will append (counted first: see Pieces::count).
void begin_routes(BoxRoutes& r, const Pieces& pieces) {
  const size_t n = static_cast<size_t>(pieces.mesh().n);
  r.moves.reserve(pieces.count());
  r.outputs.reserve(n);
  for (size_t c = 0; c < n; ++c) r.outputs.emplace_back(static_cast<int>(c), pieces.dst()[c].size);
}

// The step of an exchange whose busiest rank has `peers` peers and moves
// `bytes`, crossing the mesh dims `crossed` (exchange_step and
// exchange_cost count them two ways; the step is built one way).
std::optional<RedistributeStep> finish_step(const DTensorSpec& from, const DTensorSpec& to,
                                            double base_us, int64_t peers, int64_t bytes,
                                            const bool* crossed) {
  const DeviceMesh& mesh = from.mesh();
  const int nd = mesh.ndim();
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
                s.bytes / kBytesPerGiB / link.bandwidth_gbps * 1e6;
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

// box_exchange_step, and when `routes` is given the routes too, in one
// pass over the pieces: what the planner keeps for the candidate that
// wins (the others are priced by exchange_cost, without the pieces).
std::optional<RedistributeStep> exchange_step(const DTensorSpec& from, const DTensorSpec& to,
                                              double base_us, BoxRoutes* routes) {
  if (!replicated(from.placements()) || !replicated(to.placements())) return std::nullopt;
  const DeviceMesh& mesh = from.mesh();
  const int nd = mesh.ndim();
  Pieces pieces(from, to);
  if (pieces.pairs() > size_t{1} << 16) return std::nullopt;
  pieces.make_boxes(to);
  const MeshIndex& m = pieces.mesh();
  // Per rank: peers and bytes sent and received; the mesh dims crossed.
  // Counted piece by piece: the planner asks for every pair of S/R
  // layouts whose floor does not rule the exchange out.
  const size_t n = static_cast<size_t>(m.n);
  std::vector<int64_t> sends(n, 0), recvs(n, 0), sent(n, 0), received(n, 0);
  bool crossed[kMaxDims] = {};
  const int64_t isz = static_cast<int64_t>(itemsize(from.dtype()));
  const size_t td = static_cast<size_t>(from.ndim());
  if (routes) begin_routes(*routes, pieces);
  pieces.each([&](int64_t s, int64_t q, const int64_t* start, const int64_t* size) {
    if (routes) add_move(*routes, pieces, s, q, start, size, td);
    if (s == q) return;
    int64_t bytes = isz;
    for (size_t d = 0; d < td; ++d) bytes *= size[d];
    ++sends[s];
    ++recvs[q];
    sent[s] += bytes;
    received[q] += bytes;
    for (int i = 0; i < nd; ++i)
      if (!crossed[i]) crossed[i] = m.at(s, i) != m.at(q, i);
  });
  int64_t peers = 0, bytes = 0;
  for (size_t r = 0; r < n; ++r) {
    peers = std::max({peers, sends[r], recvs[r]});
    bytes = std::max({bytes, sent[r], received[r]});
  }
  return finish_step(from, to, base_us, peers, bytes, crossed);
}

// The offsets of the linear indices of the coordinates that differ from
// one with 0 on the mesh dims of `mask` only there, row-major (worked
// out once per exchange: the loops below add them to a base per rank).
std::vector<int64_t> grid_offsets(const MeshIndex& m, uint32_t mask) {
  std::vector<int64_t> out{0};
  for (int i = 0; i < m.nd; ++i) {
    if (!(mask >> i & 1)) continue;
    const size_t k = out.size();
    for (int64_t v = 1; v < m.size[i]; ++v)
      for (size_t j = 0; j < k; ++j) out.push_back(out[j] + v * m.stride[i]);
  }
  return out;
}

int64_t overlap(const Box& a, const Box& b, size_t d) {
  return std::max<int64_t>(0, std::min(a.start[d] + a.size[d], b.start[d] + b.size[d]) -
                                  std::max(a.start[d], b.start[d]));
}

// exchange_step's step without visiting its pieces (the planner asks it of
// up to a dozen candidate layouts per pair, and on 64 ranks each visit of
// the holder x receiver pairs was ~0.1 M instructions). The pieces are a
// product over tensor dims: a source box's range on d depends on its
// coordinates on d's source splitters alone, a target box's on d's target
// splitters alone, and a mesh dim splits at most one tensor dim. So
// - receiver q meets, per d, the nonempty source ranges of d overlapping
//   its target range (over the grid of d's source splitters): its pieces
//   are their product, its bytes its target box less what its own source
//   box holds (the nonempty source boxes tile the tensor), and a splitter
//   of d on which a meeting range's holder differs from q is crossed;
// - sender s sends its source box to every q agreeing with it on the
//   dims the source does not shard: per d, q's target range varies over
//   the grid of d's target splitters among those dims, the rest of them
//   multiply the count, so its pieces and bytes are products of per-d
//   counts and sums of overlaps.
// The counts are exactly exchange_step's (PlanBox.TheExchangeCostIsTheVisitedOne).
std::optional<RedistributeStep> exchange_cost(const DTensorSpec& from, const DTensorSpec& to,
                                              double base_us) {
  if (!replicated(from.placements()) || !replicated(to.placements())) return std::nullopt;
  Pieces pieces(from, to);
  if (pieces.pairs() > size_t{1} << 16) return std::nullopt;  // as exchange_step refuses
  pieces.make_boxes(to);
  const MeshIndex& m = pieces.mesh();
  const std::vector<Box>& src = pieces.src();
  const std::vector<Box>& dst = pieces.dst();
  const size_t td = static_cast<size_t>(from.ndim());
  // Per tensor dim, its splitters (size-1 dims have one coordinate: left
  // out); the dims the source shards; the free ones among them.
  uint32_t src_split[kMaxDims] = {}, dst_split[kMaxDims] = {}, sharded = 0, free = 0;
  for (int i = 0; i < m.nd; ++i) {
    if (m.size[i] == 1) continue;
    const Placement p = from.placements()[i], q = to.placements()[i];
    if (p.is_shard()) {
      src_split[p.dim()] |= 1u << i;
      sharded |= 1u << i;
    }
    if (q.is_shard()) dst_split[q.dim()] |= 1u << i;
  }
  free = sharded;
  for (size_t d = 0; d < td; ++d) free &= ~dst_split[d];
  int64_t free_n = 1;
  for (int i = 0; i < m.nd; ++i)
    if (free >> i & 1) free_n *= m.size[i];
  // Coordinates by linear index, looked up rather than divided out in
  // the loops below.
  std::vector<std::array<int8_t, kMaxDims>> at(static_cast<size_t>(m.n));
  for (int64_t c = 0; c < m.n; ++c)
    for (int i = 0; i < m.nd; ++i) at[static_cast<size_t>(c)][i] = static_cast<int8_t>(m.at(c, i));
  // Per tensor dim: the source holders meeting it (over its source
  // splitters); a sender's receivers' offsets (over its target splitters
  // the source shards).
  // The holders' nonempty ranges of d tile it: sorted by start, a
  // receiver finds the ones meeting its range by two binary searches (a
  // 1-d tensor sharded over 64 ranks would otherwise scan 64 per rank).
  struct Range {
    int64_t lo, hi, holder;
  };
  std::vector<Range> holders[kMaxDims];
  std::vector<int64_t> receivers[kMaxDims];
  for (size_t d = 0; d < td; ++d) {
    for (const int64_t h : grid_offsets(m, src_split[d])) {
      const Box& a = src[static_cast<size_t>(h)];
      if (a.size[d] > 0) holders[d].push_back({a.start[d], a.start[d] + a.size[d], h});
    }
    std::sort(holders[d].begin(), holders[d].end(),
              [](const Range& x, const Range& y) { return x.lo < y.lo; });
    receivers[d] = grid_offsets(m, dst_split[d] & sharded);
  }
  int64_t peers = 0, bytes = 0;
  uint32_t crossed_mask = 0;
  const int64_t isz = static_cast<int64_t>(itemsize(from.dtype()));
  for (int64_t c = 0; c < m.n; ++c) {
    const auto& here = at[static_cast<size_t>(c)];
    const Box& own = src[static_cast<size_t>(c)];
    const Box& want = dst[static_cast<size_t>(c)];
    // c as a receiver.
    int64_t meets = 1, volume = 1, kept = 1;
    uint32_t differ = 0;
    for (size_t d = 0; d < td; ++d) {
      // Once every splitter of d is known crossed, only the count is left.
      const bool look = (crossed_mask & src_split[d]) != src_split[d];
      const std::vector<Range>& v = holders[d];
      const int64_t lo = want.start[d], hi = lo + want.size[d];
      // The first range ending past lo, the first starting at hi or later.
      const auto first =
          std::partition_point(v.begin(), v.end(), [&](const Range& r) { return r.hi <= lo; });
      const auto last =
          lo < hi ? std::partition_point(first, v.end(), [&](const Range& r) { return r.lo < hi; })
                  : first;
      const int64_t k = last - first;
      if (look)
        for (auto r = first; r != last; ++r) {
          const auto& there = at[static_cast<size_t>(r->holder)];
          for (int i = 0; i < m.nd; ++i)
            if ((src_split[d] >> i & 1) && there[i] != here[i]) differ |= 1u << i;
        }
      meets *= k;
      volume *= want.size[d];
      kept *= overlap(own, want, d);
    }
    if (meets > 0) crossed_mask |= differ;
    peers = std::max(peers, meets - (kept > 0 ? 1 : 0));
    bytes = std::max(bytes, (volume - kept) * isz);
    // c as a sender of its source box.
    int64_t sends = free_n, sent = free_n;
    for (size_t d = 0; d < td; ++d) {
      const uint32_t mask = dst_split[d] & sharded;
      int64_t base = c;
      for (int i = 0; i < m.nd; ++i)
        if (mask >> i & 1) base -= here[i] * m.stride[i];
      int64_t k = 0, sum = 0;
      for (const int64_t offset : receivers[d]) {
        const int64_t o = overlap(own, dst[static_cast<size_t>(base + offset)], d);
        k += o > 0;
        sum += o;
      }
      sends *= k;
      sent *= sum;
    }
    peers = std::max(peers, sends - (kept > 0 ? 1 : 0));
    bytes = std::max(bytes, (sent - kept) * isz);
  }
  bool crossed[kMaxDims] = {};
  for (int i = 0; i < m.nd; ++i) crossed[i] = crossed_mask >> i & 1;
  return finish_step(from, to, base_us, peers, bytes, crossed);
}

}  // namespace

bool for_each_box_piece(const DTensorSpec& from, const DTensorSpec& to, size_t max_pairs,
                        const PieceVisitor& visit) {
  if (!replicated(from.placements()) || !replicated(to.placements())) return false;
  Pieces pieces(from, to);
  if (pieces.pairs() > max_pairs) return false;
  pieces.make_boxes(to);
  pieces.each(visit);
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
  return exchange_cost(from, to, base_us);
}

std::optional<RedistributeStep> box_exchange_step_with_routes(const DTensorSpec& from,
                                                              const DTensorSpec& to,
                                                              double base_us) {
  auto routes = std::make_shared<BoxRoutes>();
  std::optional<RedistributeStep> s = exchange_step(from, to, base_us, routes.get());
  if (s) s->box_routes = std::move(routes);
  return s;
}

std::shared_ptr<const BoxRoutes> box_routes(const DTensorSpec& from, const DTensorSpec& to) {
  DT_CHECK(replicated(from.placements()) && replicated(to.placements()),
           "redistribute: internal error: a box exchange from ", from.to_string(), " to ",
           to.to_string(), " (a Partial has no boxes)");
  Pieces pieces(from, to);
  pieces.make_boxes(to);
  auto out = std::make_shared<BoxRoutes>();
  begin_routes(*out, pieces);
  const size_t td = static_cast<size_t>(from.ndim());
  pieces.each([&](int64_t s, int64_t q, const int64_t* start, const int64_t* size) {
    add_move(*out, pieces, s, q, start, size, td);
  });
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
