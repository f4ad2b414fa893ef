// The plan check: every plan is replayed on the shard boxes of every mesh
// coordinate before it is cached, so a planner bug is an error naming the
// step instead of a silently wrong tensor.
//
// A state's boxes come from DTensorSpec::extent (the chunking rule the rest
// of dtensor trusts); each step is replayed as the executor runs it — the
// group of a merged step is the flattened group of its mesh dims, row-major
// over them, exactly as DeviceMesh::flatten orders it — and the boxes it
// produces must equal the boxes of the next state's placements. The replay
// also checks that each step starts from the placements it claims, that a
// reduction's op and divisor give the value the partials define, and that
// the last state is the target. It is independent of how the planner chose
// the step, which is the point: the search and its merge rules can be
// wrong; the replay of what will actually run cannot be fooled by them.
//
// Cost: one pass over the mesh's coordinates per step (each group visited
// once), so a few microseconds for realistic meshes, paid once per plan.
#include <algorithm>

#include "comm/backend.h"
#include "redistribute/plan_internal.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

namespace {

// Per coordinate (row-major linear index over the mesh), per tensor dim:
// the range held. Empty ranges are {0, 0}: where an empty shard "starts" is
// a convention of extent() that no data depends on.
struct Boxes {
  int64_t ndim = 0;
  std::vector<ChunkRange> ranges;  // [coordinate * ndim + tensor dim]
  ChunkRange& at(int64_t c, int64_t d) { return ranges[static_cast<size_t>(c * ndim + d)]; }
  const ChunkRange& at(int64_t c, int64_t d) const {
    return ranges[static_cast<size_t>(c * ndim + d)];
  }
};

bool same(ChunkRange a, ChunkRange b) { return a.size == b.size && (a.size == 0 || a.start == b.start); }

class Replay {
 public:
  explicit Replay(const RedistributePlan& plan) : plan_(plan), mesh_(plan.from.mesh()) {
    nd_ = mesh_.ndim();
    numel_ = 1;
    for (int i = nd_ - 1; i >= 0; --i) {
      stride_[i] = numel_;
      size_[i] = mesh_.size(i);
      numel_ *= size_[i];
    }
  }

  void run() {
    Placements cur = plan_.from.placements();
    Boxes boxes = boxes_of(cur);
    for (size_t k = 0; k < plan_.steps.size(); ++k) {
      step_ = k;
      const RedistributeStep& s = plan_.steps[k];
      Placements next = check_shape_of_step(s, cur);
      Boxes want = boxes_of(next);
      if (s.kind == StepKind::BoxExchange) check_box_exchange(s, cur, next, boxes, want);
      else replay(s, boxes, want);
      cur = next;
      boxes = std::move(want);
    }
    if (cur != plan_.to.placements())
      fail("the plan ends at " + to_string(cur) + ", not at the target");
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    DT_THROW("redistribute: internal error: the plan from ", to_string(plan_.from.placements()),
             " to ", to_string(plan_.to.placements()), " of ", plan_.from.shape(), " on ", mesh_,
             " fails its check", plan_.steps.empty() ? "" : " at step ",
             plan_.steps.empty() ? std::string() : std::to_string(step_ + 1), ": ", why,
             "\n", plan_.explain());
  }

  // The boxes of every coordinate. A box depends only on the coordinates
  // on the mesh dims that shard (extent splits on no other), so each
  // distinct box is asked of extent once, at its first coordinate in
  // row-major order (0 on the other dims), and copied to the rest: extent
  // copies the mesh's shape on every call, which was 15% of a cold plan.
  Boxes boxes_of(const Placements& p) const {
    const DTensorSpec spec = plan_.from.with_placements(p);
    Boxes b;
    b.ndim = spec.ndim();
    b.ranges.resize(static_cast<size_t>(numel_ * b.ndim));
    DimVector coord(static_cast<size_t>(nd_), 0);
    for (int64_t c = 0; c < numel_; ++c) {
      int64_t first = c;
      for (int i = 0; i < nd_; ++i) {
        coord[i] = c / stride_[i] % size_[i];
        if (!p[i].is_shard()) first -= coord[i] * stride_[i];
      }
      if (first != c) {
        std::copy_n(b.ranges.data() + first * b.ndim, b.ndim, b.ranges.data() + c * b.ndim);
        continue;
      }
      const ShardExtent e = spec.extent(coord);
      for (int64_t d = 0; d < b.ndim; ++d) {
        const int64_t len = e.local_shape[d];
        b.at(c, d) = ChunkRange{len, len == 0 ? 0 : e.global_offset[d]};
      }
    }
    return b;
  }

  // The placements after `s`, once its claims about the state are checked.
  // A step's target placements carry the shard orders of the state after
  // it; replace_placements rebuilds that state (the other mesh dims keep
  // their relative split order). Whether the state is what the collective
  // produces is then the boxes' business, like for any other step.
  Placements check_shape_of_step(const RedistributeStep& s, const Placements& cur) const {
    if (s.mesh_dims.empty() || s.from.size() != s.mesh_dims.size() ||
        s.to.size() != s.mesh_dims.size())
      fail("a step must name its mesh dims with one source and one target placement each");
    int64_t n = 1;
    for (size_t j = 0; j < s.mesh_dims.size(); ++j) {
      const int64_t i = s.mesh_dims[j];
      if (i < 0 || i >= nd_ || (j > 0 && i <= s.mesh_dims[j - 1]))
        fail("mesh dims must be distinct, ascending and in range");
      if (cur[i] != s.from[j])
        fail("mesh dim " + std::to_string(i) + " is " + to_string(cur[i]) + ", the step says " +
             to_string(s.from[j]));
      n *= size_[i];
    }
    Placements next;
    try {
      next = replace_placements(cur, s.mesh_dims, s.to);
    } catch (const Error& e) {
      fail(std::string("its target placements give no layout: ") + e.what());
    }
    if (n != s.group_size) fail("the group size is " + std::to_string(s.group_size) +
                                 ", the mesh dims give " + std::to_string(n));
    return next;
  }

  // The members of every group of the step's mesh dims, in the flattened
  // group's order (row-major over the dims), one group at a time.
  template <class F>
  void for_each_group(const RedistributeStep& s, F&& f) const {
    // Two buffers for every group (one pair per group was a tenth of the
    // check).
    std::vector<int64_t> members, grown;
    for (int64_t base = 0; base < numel_; ++base) {
      bool first = true;  // a group's first member has 0 on every step dim
      for (int64_t i : s.mesh_dims) first = first && base / stride_[i] % size_[i] == 0;
      if (!first) continue;
      members.assign(1, base);
      for (size_t j = s.mesh_dims.size(); j-- > 0;) {
        // Row-major: the last dim varies fastest, so expand outer dims last.
        const int64_t i = s.mesh_dims[j];
        const size_t m = members.size();
        grown.clear();
        for (int64_t x = 0; x < size_[i]; ++x)
          for (size_t y = 0; y < m; ++y) grown.push_back(members[y] + x * stride_[i]);
        members.swap(grown);
      }
      f(static_cast<const std::vector<int64_t>&>(members));
    }
  }

  // Inline where it holds (asked of every coordinate and dim of every
  // step); the message out of line.
  void expect(const Boxes& want, int64_t c, int64_t d, ChunkRange got, const char* what) const {
    if (!same(want.at(c, d), got)) [[unlikely]] mismatch(want, c, d, got, what);
  }
  [[noreturn, gnu::noinline]] void mismatch(const Boxes& want, int64_t c, int64_t d,
                                             ChunkRange got, const char* what) const {
    fail(std::string(what) + " leaves coordinate " + std::to_string(c) + " with [" +
         std::to_string(got.start) + ", +" + std::to_string(got.size) + ") of tensor dim " +
         std::to_string(d) + " where the next layout needs [" + std::to_string(want.at(c, d).start) +
         ", +" + std::to_string(want.at(c, d).size) + ")");
  }

  // Checks the step's reduce op and divisor against the partials it reduces.
  void check_reduction(const RedistributeStep& s) const {
    bool sum = false, avg = false, other = false;
    double avg_product = 1;
    ReduceOp op = ReduceOp::Sum;
    for (size_t j = 0; j < s.mesh_dims.size(); ++j) {
      if (!s.from[j].is_partial()) fail("a reduction must start from Partial placements");
      op = s.from[j].reduce_op();
      sum |= op == ReduceOp::Sum;
      if (op == ReduceOp::Avg) {
        avg = true;
        avg_product *= static_cast<double>(size_[s.mesh_dims[j]]);
      }
      other |= op == ReduceOp::Max || op == ReduceOp::Min;
      if (other && s.from[j].reduce_op() != s.from[0].reduce_op())
        fail("partials of different reduce ops cannot be reduced together");
    }
    // sum mixed with avg: a sum over the whole group, then / the avg dims'
    // sizes; otherwise the one op (avg over the whole group divides by all).
    const bool ok = sum && avg ? s.op == ReduceOp::Sum && s.divisor == avg_product
                               : s.op == op && s.divisor == 1;
    if (!ok) fail("the reduction " + std::string(to_string(s.op)) + " / " +
                  std::to_string(s.divisor) + " does not give the value of " + to_string(s.from));
  }

  // A step's routes (by coordinate, starts relative to the sender's and
  // the receiver's boxes; box_exchange.h): each output must have its next
  // box's shape, and each move must write where it reads.
  // check_box_exchange then checks their pieces, in global indices, as any
  // pieces (each move turned into one as it is visited: a copy of hundreds
  // pieces per plan was fresh memory, whose page faults cost more than the
  // check).
  void check_routes(const BoxRoutes& r, const Boxes& in, const Boxes& want) const {
    const int64_t td = in.ndim;
    auto coordinate = [&](int64_t c) { return c >= 0 && c < numel_; };
    if (static_cast<int64_t>(r.outputs.size()) != numel_)
      fail("a box exchange's routes have " + std::to_string(r.outputs.size()) +
           " outputs for " + std::to_string(numel_) + " mesh coordinates");
    for (const auto& [c, shape] : r.outputs) {
      if (!coordinate(c) || static_cast<int64_t>(shape.size()) != td)
        fail("a box exchange's routes give coordinate " + std::to_string(c) + " an output of " +
             std::to_string(shape.size()) + " dims");
      for (int64_t d = 0; d < td; ++d)
        if (shape[d] != want.at(c, d).size)
          fail("a box exchange's routes give coordinate " + std::to_string(c) + " " +
               std::to_string(shape[d]) + " elements of tensor dim " + std::to_string(d) +
               " where its next box has " + std::to_string(want.at(c, d).size));
    }
    for (const BoxMove& m : r.moves) {
      if (!coordinate(m.from) || !coordinate(m.to) ||
          static_cast<int64_t>(m.size.size()) != td ||
          static_cast<int64_t>(m.from_start.size()) != td ||
          static_cast<int64_t>(m.to_start.size()) != td)
        fail("a box exchange route from coordinate " + std::to_string(m.from) + " to " +
             std::to_string(m.to) + " lies outside the mesh or the tensor's dims");
      for (int64_t d = 0; d < td; ++d)
        if (want.at(m.to, d).start + m.to_start[d] != in.at(m.from, d).start + m.from_start[d])
          fail("a box exchange route from coordinate " + std::to_string(m.from) + " to " +
               std::to_string(m.to) + " writes tensor dim " + std::to_string(d) +
               " elsewhere than it reads");
    }
  }

  // A box exchange: its pieces, the ones the executor runs, each lie
  // in its sender's box and its receiver's next box, join coordinates that
  // differ only on the step's mesh dims (its group), and tile every next
  // box: inside it, disjoint, and as large in all. Disjoint without
  // comparing every pair of a receiver's pieces (64^2 per receiver on 64
  // ranks): the holders of distinct source boxes (coordinate 0 on the
  // mesh dims the source replicates) hold disjoint boxes, checked once, and
  // a receiver's pieces come from distinct holders' boxes.
  void check_box_exchange(const RedistributeStep& s, const Placements& cur, const Placements& next,
                          const Boxes& in, const Boxes& want) const {
    // The planner keeps the pieces with the step: check those, which are
    // what the executor runs; a step built by hand has its pieces worked out.
    std::optional<std::vector<BoxPiece>> pieces;
    if (s.box_routes) check_routes(*s.box_routes, in, want);
    else pieces = box_pieces(plan_.from.with_placements(cur), plan_.from.with_placements(next),
                             static_cast<size_t>(-1));
    if (!s.box_routes && !pieces) fail("a box exchange runs between layouts without Partial");
    // f(from, to, start, size) for every piece, in global indices.
    auto each_piece = [&](auto&& f) {
      if (!s.box_routes) {
        for (const BoxPiece& p : *pieces) f(p.from, p.to, p.start.data(), p.size.data());
        return;
      }
      int64_t start[kMaxDims];
      for (const BoxMove& m : s.box_routes->moves) {
        for (int64_t d = 0; d < in.ndim; ++d) start[d] = in.at(m.from, d).start + m.from_start[d];
        f(int64_t{m.from}, int64_t{m.to}, start, m.size.data());
      }
    };
    const size_t count = s.box_routes ? s.box_routes->moves.size() : pieces->size();
    bool in_step[kMaxDims] = {};
    for (int64_t i : s.mesh_dims) in_step[i] = true;
    const int64_t td = in.ndim;
    auto inside = [](int64_t start, int64_t size, ChunkRange r) {
      return size > 0 && start >= r.start && start + size <= r.start + r.size;
    };
    // The holder of c's box: c with 0 on the replicated mesh dims.
    auto holder = [&](int64_t c) {
      for (int i = 0; i < nd_; ++i)
        if (cur[i].is_replicate()) c -= c / stride_[i] % size_[i] * stride_[i];
      return c;
    };
    std::vector<int64_t> holders;
    for (int64_t c = 0; c < numel_; ++c)
      if (holder(c) == c) holders.push_back(c);
    for (size_t a = 0; a < holders.size(); ++a)
      for (size_t b = a + 1; b < holders.size(); ++b) {
        bool overlap = true;
        for (int64_t d = 0; d < td && overlap; ++d) {
          const ChunkRange x = in.at(holders[a], d), y = in.at(holders[b], d);
          overlap = x.start < y.start + y.size && y.start < x.start + x.size;
        }
        if (overlap) fail("coordinates " + std::to_string(holders[a]) + " and " +
                          std::to_string(holders[b]) + " hold overlapping source boxes");
      }
    // Per receiver: the elements it gets and the holders of the boxes they
    // come from, grouped by receiver in one array (a counting sort; a
    // vector per receiver allocated as it grew).
    std::vector<size_t> first(static_cast<size_t>(numel_) + 1, 0);
    std::vector<int64_t> have(static_cast<size_t>(numel_), 0);
    each_piece([&](int64_t from, int64_t to, const int64_t* start, const int64_t* size) {
      for (int i = 0; i < nd_; ++i)
        if (!in_step[i] && from / stride_[i] % size_[i] != to / stride_[i] % size_[i])
          fail("a box exchange moves a piece from coordinate " + std::to_string(from) + " to " +
               std::to_string(to) + " across mesh dim " + std::to_string(i) +
               ", outside its mesh dims");
      int64_t elements = 1;
      for (int64_t d = 0; d < td; ++d) {
        if (!inside(start[d], size[d], in.at(from, d)) ||
            !inside(start[d], size[d], want.at(to, d)))
          fail("a box exchange piece from coordinate " + std::to_string(from) + " to " +
               std::to_string(to) + " lies outside the sender's or the receiver's range of "
               "tensor dim " + std::to_string(d));
        elements *= size[d];
      }
      ++first[static_cast<size_t>(to) + 1];
      have[static_cast<size_t>(to)] += elements;
    });
    for (size_t c = 0; c < static_cast<size_t>(numel_); ++c) first[c + 1] += first[c];
    std::vector<int64_t> from(count);
    std::vector<size_t> slot(first.begin(), first.end() - 1);
    each_piece([&](int64_t sender, int64_t to, const int64_t*, const int64_t*) {
      from[slot[static_cast<size_t>(to)]++] = holder(sender);
    });
    for (int64_t c = 0; c < numel_; ++c) {
      int64_t need = 1;
      for (int64_t d = 0; d < td; ++d) need *= want.at(c, d).size;
      const auto begin = from.begin() + static_cast<std::ptrdiff_t>(first[c]);
      const auto end = from.begin() + static_cast<std::ptrdiff_t>(first[c + 1]);
      std::sort(begin, end);
      if (std::adjacent_find(begin, end) != end)
        fail("a box exchange sends coordinate " + std::to_string(c) +
             " two pieces of one source box");
      if (have[static_cast<size_t>(c)] != need)
        fail("a box exchange gives coordinate " + std::to_string(c) + " " +
             std::to_string(have[static_cast<size_t>(c)]) + " elements of the " +
             std::to_string(need) + " its next box holds");
    }
  }

  void replay(const RedistributeStep& s, const Boxes& in,
              const Boxes& want) const {
    const int64_t td = in.ndim;
    auto unchanged_except = [&](int64_t c, int64_t skip, const char* what) {
      for (int64_t d = 0; d < td; ++d)
        if (d != skip) expect(want, c, d, in.at(c, d), what);
    };
    // Every member of a reduction's group holds the same box (they are
    // pieces of one value).
    auto members_agree = [&](const std::vector<int64_t>& g, int64_t skip, const char* what) {
      for (int64_t m : g)
        for (int64_t d = 0; d < td; ++d)
          if (d != skip && !same(in.at(m, d), in.at(g[0], d)))
            fail(std::string(what) + ": coordinates " + std::to_string(g[0]) + " and " +
                 std::to_string(m) + " of one group hold different ranges of tensor dim " +
                 std::to_string(d));
    };
    // The concatenation of the members' ranges of dim d, which must tile.
    auto concat = [&](const std::vector<int64_t>& g, int64_t d, const char* what) {
      ChunkRange r{0, 0};
      for (int64_t m : g) {
        const ChunkRange p = in.at(m, d);
        if (p.size == 0) continue;
        if (r.size > 0 && p.start != r.start + r.size)
          fail(std::string(what) + " joins pieces of tensor dim " + std::to_string(d) +
               " that do not follow each other");
        if (r.size == 0) r.start = p.start;
        r.size += p.size;
      }
      return r;
    };
    // Piece k of n of a range, by the chunking rule of the backends.
    auto piece = [](ChunkRange r, int64_t n, int64_t k) {
      const ChunkRange c = chunk_range(r.size, n, k);
      return ChunkRange{c.size, c.size == 0 ? 0 : r.start + c.start};
    };
    const int64_t n = s.group_size;
    switch (s.kind) {
      case StepKind::AllGather:
        for (size_t j = 0; j < s.from.size(); ++j)
          if (!s.from[j].is_shard(s.tensor_dim) || !s.to[j].is_replicate())
            fail("an all_gather goes from S(" + std::to_string(s.tensor_dim) + ") to R");
        for_each_group(s, [&](const std::vector<int64_t>& g) {
          members_agree(g, s.tensor_dim, "all_gather");
          const ChunkRange whole = concat(g, s.tensor_dim, "all_gather");
          for (int64_t c : g) {
            unchanged_except(c, s.tensor_dim, "all_gather");
            expect(want, c, s.tensor_dim, whole, "all_gather");
          }
        });
        return;
      case StepKind::AllReduce:
        check_reduction(s);
        for (const Placement& q : s.to)
          if (!q.is_replicate()) fail("an all_reduce ends in Replicate");
        for_each_group(s, [&](const std::vector<int64_t>& g) {
          members_agree(g, -1, "all_reduce");
          for (int64_t c : g) unchanged_except(c, -1, "all_reduce");
        });
        return;
      case StepKind::ReduceScatter:
        check_reduction(s);
        for (const Placement& q : s.to)
          if (!q.is_shard(s.tensor_dim)) fail("a reduce_scatter ends in S(tensor dim)");
        for_each_group(s, [&](const std::vector<int64_t>& g) {
          members_agree(g, -1, "reduce_scatter");
          for (size_t k = 0; k < g.size(); ++k) {
            unchanged_except(g[k], s.tensor_dim, "reduce_scatter");
            expect(want, g[k], s.tensor_dim,
                   piece(in.at(g[k], s.tensor_dim), n, static_cast<int64_t>(k)), "reduce_scatter");
          }
        });
        return;
      case StepKind::AllToAll:
        if (s.mesh_dims.size() != 1 || !s.from[0].is_shard(s.tensor_dim) ||
            !s.to[0].is_shard(s.to_tensor_dim) || s.tensor_dim == s.to_tensor_dim)
          fail("an all_to_all goes from S(a) to S(b) over one mesh dim");
        for_each_group(s, [&](const std::vector<int64_t>& g) {
          members_agree(g, s.tensor_dim, "all_to_all");
          const ChunkRange joined = concat(g, s.tensor_dim, "all_to_all");
          for (size_t k = 0; k < g.size(); ++k) {
            const int64_t c = g[k];
            for (int64_t d = 0; d < td; ++d) {
              if (d == s.tensor_dim) expect(want, c, d, joined, "all_to_all");
              else if (d == s.to_tensor_dim)
                expect(want, c, d, piece(in.at(c, d), n, static_cast<int64_t>(k)), "all_to_all");
              else expect(want, c, d, in.at(c, d), "all_to_all");
            }
          }
        });
        return;
      case StepKind::BoxExchange: return;  // check_box_exchange
      case StepKind::Local:
        if (s.mesh_dims.size() != 1) fail("a local step changes one mesh dim");
        // A size-1 group moves nothing, whatever the placements say.
        if (n == 1 || !s.to[0].is_shard()) {
          if (n > 1 && !(s.from[0].is_replicate() && s.to[0].is_partial()))
            fail("only R -> S and R -> P are local on a mesh dim of size > 1");
          for (int64_t c = 0; c < numel_; ++c) unchanged_except(c, -1, "a local step");
          return;
        }
        if (!s.from[0].is_replicate() || s.tensor_dim != s.to[0].dim())
          fail("a local chunk goes from R to S(tensor dim)");
        for_each_group(s, [&](const std::vector<int64_t>& g) {
          for (size_t k = 0; k < g.size(); ++k) {
            unchanged_except(g[k], s.tensor_dim, "a local chunk");
            expect(want, g[k], s.tensor_dim,
                   piece(in.at(g[k], s.tensor_dim), n, static_cast<int64_t>(k)), "a local chunk");
          }
        });
        return;
    }
  }

  const RedistributePlan& plan_;
  const DeviceMesh& mesh_;
  int nd_ = 0;
  int64_t numel_ = 1;
  int64_t size_[kMaxDims] = {};
  int64_t stride_[kMaxDims] = {};
  size_t step_ = 0;
};

}  // namespace

void check_plan(const RedistributePlan& plan) { Replay(plan).run(); }

}  // namespace dtensor::redistribute_detail
