// The redistribution planner: a shortest-path search over placement states.
//
// A state is one placement per mesh dim; the data of every state is fully
// determined by its placements, so a plan is any path from the source to the
// target state whose edges are valid transforms. An edge changes one mesh
// dim (S->R all_gather, S->S all_to_all, P->R all_reduce, P->S
// reduce_scatter, R->S and R->P local) when the nesting rule allows it: only
// the last mesh dim in a tensor dim's split order (the right-most one when
// the order is natural) may gather it or move it to another dim, and a mesh
// dim that starts sharding a tensor dim becomes the last in its split order
// (the transforms chunk the local piece, i.e. split after every earlier
// splitter). So states carry shard orders (spec.h): R->S(0) on mesh dim 0
// of R,S(0) reaches S(0)[1],S(0)[0], and S(0)[1],S(0)[0] -> R,S(0) is one
// all_gather over mesh dim 0. With merging on, an edge may also be one collective
// over the flattened group of several mesh dims (all_reduce, reduce_scatter
// or all_gather) when the result is identical: same reduce op or sum with
// avg; reduce_scatter outer dim first and all_gather inner dim first; the
// flattened chunking equal to the nested one; the group exists or may be
// created. Edge weights are the cost model's; a state's bytes per rank are
// global bytes / number of shards. A* (Dijkstra steered by an admissible
// lower bound, see lower_bound) gives the cheapest path, ties broken by the
// lower peak memory, then by fewer steps; the per-dim baseline path is one
// of the paths searched, so the search never does worse than it.
//
// The search is the one place that decides merging: an earlier design also
// merged runs of steps after the search, and once the search returned
// merged steps that pass read them as single-dim ones and built wrong plans
// on meshes of 3+ dims. Every plan is then replayed on the shard boxes of
// every mesh coordinate (plan_check.cc) before it is returned, so a planner
// bug is an error, never a wrong tensor.
//
// Mesh dims of size 1 move no data: any change on them is a free local
// step, and they are ignored by the nesting rule.
#include <algorithm>
#include <bit>
#include <cmath>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "redistribute/plan_internal.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

namespace {


// 8 bits per mesh dim: the low 4 are 0 = R, 1..8 = S(0..7), 9..12 =
// P(sum, avg, max, min); the high 4 a shard's order + 1 (0 = natural).
// States are normalized (placement.h), so one layout has one key.
uint64_t code(Placement p) {
  if (p.is_shard())
    return (1 + static_cast<uint64_t>(p.dim())) | static_cast<uint64_t>(p.shard_order() + 1) << 4;
  if (p.is_partial()) return 9 + static_cast<uint64_t>(p.reduce_op());
  return 0;
}

uint64_t key_of(const Placements& p) {
  uint64_t k = 0;
  for (size_t i = 0; i < p.size(); ++i) k |= code(p[i]) << (8 * i);
  return k;
}

[[noreturn]] void throw_not_allowed(const DTensorSpec& from, int mesh_dim, Placement to,
                                    const char* why) {
  DT_THROW("redistribute: cannot go from ", to_string(from.placements()[mesh_dim]), " to ",
           to_string(to), " on mesh dim ", mesh_dim, " (", why, "); from ",
           to_string(from.placements()), " on ", from.mesh());
}

// Sizes of the pieces of `length` chunked by ns[0], then each piece by
// ns[1], ... (nested, left to right), in order.
std::vector<int64_t> nested_sizes(int64_t length, const std::vector<int64_t>& ns) {
  std::vector<int64_t> pieces{length};
  for (int64_t n : ns) {
    std::vector<int64_t> next;
    for (int64_t len : pieces)
      for (int64_t r = 0; r < n; ++r) next.push_back(chunk_range(len, n, r).size);
    pieces = std::move(next);
  }
  return pieces;
}

// has_shard_order (placement.h), inline: the search asks it of every state
// and edge, and the call was 8% of a cold plan.
inline bool has_order(const Placements& p) {
  for (const Placement& q : p)
    if (q.is_shard() && q.shard_order() >= 0) return true;
  return false;
}

// Whether the mask of mesh dims holds exactly one (std::has_single_bit,
// without the library call it becomes on a build for generic x86-64).
constexpr bool one_dim(uint32_t dims) { return dims != 0 && (dims & (dims - 1)) == 0; }

bool is_sum_or_avg(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Avg; }

}  // namespace

class Planner {
 public:
  Planner(const DTensorSpec& from, const DTensorSpec& to, const RedistributeOptions& options,
          SearchMode mode, size_t max_states)
      : from_(from),
        to_(to),
        mesh_(from.mesh()),
        options_(options),
        mode_(mode),
        max_states_(max_states),
        scratch_{from.mesh(), 0, 1, {}} {
    nd_ = mesh_.ndim();
    auto_flatten_ = options.auto_flatten.value_or(mesh_.auto_flatten());
    base_us_ = mesh_.topology().base_us;
    for (int i = 0; i < nd_; ++i) {
      size_[i] = mesh_.size(i);
      link_[i] = mesh_.link(mesh_.root_dims(i));
    }
    global_bytes_ = static_cast<double>(from.global_bytes());
    ordered_ = has_shard_order(from.placements()) || has_shard_order(to.placements());
    floating_ = is_floating(from.dtype());
    if (mode_ == SearchMode::Pruned) init_cover();
    if (mode_ == SearchMode::CoarsePruned || coarse_) init_coarse_bound();
  }

  RedistributePlan plan() {
    validate();
    RedistributePlan out{from_, to_, {}, 0, {}, {}};
    std::vector<RedistributeStep> steps;
    if (from_.placements() != to_.placements()) {
      // Merging is decided in one place, the search: merged collectives are
      // edges of it, priced like the others. Past max_states_, or with the
      // search off, the plan is the per-dim path, unmerged.
      std::optional<std::vector<RedistributeStep>> found;
      if (options_.search) found = search();
      steps = found ? std::move(*found) : per_dim_steps();
      order_all_reduces(steps);
      if (found && options_.box_exchange) prefer_box_exchange(steps);
    }
    out.output_bytes = bytes_of(to_.placements());
    out.peak_bytes = bytes_of(from_.placements());
    for (RedistributeStep& s : steps) {
      out.peak_bytes = std::max(out.peak_bytes, s.peak_bytes);
      if (s.mesh_dims.size() > 1) name_group(s);
      if (s.kind != StepKind::Local) ++out.counts[static_cast<int>(s.kind)];
      out.cost_us += s.cost_us;
      if (!s.group.empty() &&
          std::find(out.groups.begin(), out.groups.end(), s.group) == out.groups.end())
        out.groups.push_back(s.group);
    }
    out.steps = std::move(steps);
    return out;
  }

 private:
  // Between layouts without Partial, one box exchange (box_exchange.cc)
  // replaces the searched path when it is cheaper, or as cheap and lighter
  // in memory: it passes through no intermediate layout, which no path of
  // one-mesh-dim steps can avoid (issue 18). It is a candidate beside the
  // search rather than an edge of it: it spans any set of mesh dims and
  // its cost depends on both ends, not on one state.
  void prefer_box_exchange(std::vector<RedistributeStep>& steps) const {
    // A plan of local steps only never becomes a collective, even a lighter
    // one: under MPI it would make every rank wait for the others.
    if (std::all_of(steps.begin(), steps.end(),
                    [](const RedistributeStep& s) { return s.kind == StepKind::Local; }))
      return;
    std::optional<RedistributeStep> box = box_exchange_step(from_, to_, base_us_);
    if (!box) return;
    // Over several mesh dims it runs on their flattened group, which must
    // exist or be allowed to be made, as for a merged collective.
    if (box->mesh_dims.size() > 1) {
      MeshDimMask roots = 0;
      for (int64_t i : box->mesh_dims) roots |= mesh_.root_dims(static_cast<int>(i));
      if (!mesh_.find_flattened(roots) && (!auto_flatten_ || !options_.merge)) return;
    }
    double cost = 0, peak = bytes_of(from_.placements());
    for (const RedistributeStep& s : steps) {
      cost += s.cost_us;
      peak = std::max(peak, s.peak_bytes);
    }
    // On a tie in cost, memory decides only against a plan of several
    // collectives, which passes intermediate layouts. Against one collective
    // (S(1) -> R's all_gather) the box exchange would save no more than the
    // backend's reorder buffer, and the named collective is the one real
    // backends implement best.
    int collectives = 0;
    for (const RedistributeStep& s : steps) collectives += s.kind != StepKind::Local;
    const double cost_eps = 1e-9 * std::max(1.0, cost), peak_eps = 1e-9 * std::max(1.0, peak);
    if (box->cost_us < cost - cost_eps ||
        (collectives > 1 && box->cost_us <= cost + cost_eps && box->peak_bytes < peak - peak_eps))
      steps = {std::move(*box)};
  }

  // ---- validation: the messages users see for forbidden moves ----
  void validate() const {
    DT_CHECK(from_.mesh() == to_.mesh(), "redistribute: source mesh ", from_.mesh(),
             " differs from target mesh ", to_.mesh(),
             "; redistributing between meshes is not supported");
    DT_CHECK(from_.meta() == to_.meta(), "redistribute: source ", from_.to_string(),
             " and target ", to_.to_string(), " describe different tensors");
    const Placements& src = from_.placements();
    const Placements& dst = to_.placements();
    for (int i = 0; i < nd_; ++i) {
      if (src[i] == dst[i]) continue;
      if (src[i].is_shard() && dst[i].is_partial())
        throw_not_allowed(from_, i, dst[i], "a shard cannot become a partial");
      if (src[i].is_partial() && dst[i].is_partial())
        throw_not_allowed(from_, i, dst[i], "a partial cannot change its reduce op");
      if (dst[i].is_partial() && !options_.allow_new_partial)
        throw_not_allowed(from_, i, dst[i],
                          "redistribute may not introduce a Partial the source does not have");
    }
  }

  // ---- state helpers ----
  double bytes_of(const Placements& p) const {
    double shards = 1;
    for (int i = 0; i < nd_; ++i)
      if (p[i].is_shard()) shards *= static_cast<double>(size_[i]);
    return global_bytes_ / shards;
  }

  // No mesh dim after `mesh_dim` in tensor dim d's split order (other than
  // size-1 dims) shards d: mesh_dim's chunks are adjacent pieces of one
  // range, so it may gather them or give them up.
  bool last_in_order(const Placements& p, int mesh_dim, int64_t d) const {
    if (!has_order(p)) return !sharded_after(p, mesh_dim, d);
    const DimVector seq = shard_split_order(p, d);
    bool after = false;
    for (int64_t j : seq) {
      if (j == mesh_dim) after = true;
      else if (after && size_[j] > 1) return false;
    }
    return true;
  }

  // Whether a mesh dim after `mesh_dim` (size-1 dims aside) shards d.
  bool sharded_after(const Placements& p, int mesh_dim, int64_t d) const {
    for (int j = mesh_dim + 1; j < nd_; ++j)
      if (size_[j] > 1 && p[j].is_shard(d)) return true;
    return false;
  }

  // The state after mesh dim i goes to q; a shard becomes the last to
  // split its tensor dim (what every transform that starts sharding does).
  Placements after(const Placements& cur, int i, Placement q) const {
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
    if (!has_order(cur) && !(q.is_shard() && later(q.dim()))) {
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

  // Partials in one state must be of one kind, or sum mixed with avg.
  static bool valid_partials(const Placements& p) {
    std::optional<ReduceOp> seen;
    for (const Placement& q : p) {
      if (!q.is_partial()) continue;
      if (!seen) seen = q.reduce_op();
      else if (*seen != q.reduce_op() && !(is_sum_or_avg(*seen) && is_sum_or_avg(q.reduce_op())))
        return false;
    }
    return true;
  }

  // The group of several mesh dims, its link looked up once per plan (the
  // mesh's link() and find_flattened() take the mesh's lock).
  struct GroupInfo {
    bool known = false;
    bool may_merge = false;
    int64_t n = 1;
    LinkCost link;
  };

  const GroupInfo& group_info(uint32_t dims) const {
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

  Group group_of(uint32_t dims) const {
    if (one_dim(dims)) {
      const int i = std::countr_zero(dims);
      return Group{mesh_, i, size_[i], link_[i]};
    }
    const GroupInfo& info = group_info(dims);
    return Group{mesh_, 31 - std::countl_zero(dims), info.n, info.link};
  }

  bool may_merge(uint32_t dims) const { return group_info(dims).may_merge; }

  // Whether chunking tensor dim d over the mesh dims `dims` (ascending, as
  // one flattened group) gives exactly the pieces nested chunking gives, for
  // every piece the other mesh dims splitting d (in p, in their order) leave.
  // Always true when the lengths divide evenly; PyTorch skips this check for
  // all_gather and corrupts uneven shards.
  bool same_chunking(const Placements& p, uint32_t dims, int64_t d) const {
    // Lengths divisible by every mesh dim's size together chunk evenly
    // however they nest.
    int64_t all = 1;
    for (int i = 0; i < nd_; ++i) all *= size_[i];
    if (from_.shape()[d] % all == 0) return true;
    uint64_t key = static_cast<uint64_t>(d) | static_cast<uint64_t>(dims) << 4;
    int shift = 12;
    for (int64_t j : shard_split_order(p, d)) {
      if (size_[j] == 1 || (dims >> j & 1)) continue;
      key |= static_cast<uint64_t>(j + 1) << shift;
      shift += 4;
    }
    auto [it, fresh] = chunking_.try_emplace(key, false);
    if (fresh) it->second = chunks_alike(p, dims, d);
    return it->second;
  }

  bool chunks_alike(const Placements& p, uint32_t dims, int64_t d) const {
    std::vector<int64_t> ns;
    int64_t total = 1;
    for (int i = 0; i < nd_; ++i)
      if (dims >> i & 1) {
        ns.push_back(size_[i]);
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
    for (int64_t len : lens) {
      if (nested_sizes(len, ns) != nested_sizes(len, {total})) return false;
    }
    return true;
  }

  // ---- edges ----
  // An edge of the search before it is made a step: the state after, its
  // price, and what rebuilds the step (single_step or merged_step) for the
  // path the search returns, so the inner loop builds no RedistributeStep.
  // Edges are priced (price_move) only once the search knows the state
  // they lead to is not settled yet: most lead back to settled states.
  struct Move {
    Placements next;
    double cost = 0;
    double peak = 0;      // bytes per rank live during the step
    uint32_t dims = 0;    // mesh dims, a bit each
    bool merged = false;
    StepKind kind = StepKind::Local;
    Placement q;          // the placement the mesh dims go to (before renumbering)
    int64_t tensor_dim = -1;  // the tensor dim price() is told
  };

  void price_move(const Placements& cur, Move& m) const {
    const Price pr = price(m.kind, m.dims, cur, m.next, m.tensor_dim, m.q);
    m.cost = pr.cost_us;
    m.peak = pr.peak;
  }

  struct Price {
    StepKind kind = StepKind::Local;
    double cost_us = 0;
    double bytes = 0;  // charged per rank
    double peak = 0;   // bytes per rank live during the step
  };

  // What changing the mesh dims `dims` from `cur` to `next` by a step of
  // `kind` costs, and the bytes per rank it holds live: its input, its
  // output and the backends' temporaries (docs/redistribution.md, "Peak
  // memory"): the collectives write straight into their outputs; under MPI
  // a reduce_scatter (or a small all_reduce) receives the others' pieces
  // into a buffer bounded by the group size (TransformCost::temp_bytes,
  // comm/fold_temp.h).
  Price price(StepKind kind, uint32_t dims, const Placements& cur, const Placements& next,
              int64_t /*tensor_dim*/, Placement q) const {
    Price out;
    out.kind = kind;
    const double b = bytes_of(cur);
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

  // The kind of the step taking mesh dim i from p to q.
  StepKind single_kind(int i, Placement p, Placement q) const {
    if (size_[i] == 1) return StepKind::Local;
    if (p.is_shard()) return q.is_replicate() ? StepKind::AllGather : StepKind::AllToAll;
    if (p.is_partial()) return q.is_replicate() ? StepKind::AllReduce : StepKind::ReduceScatter;
    return StepKind::Local;
  }

  // The tensor dim a single step gathers, splits or (all_to_all) leaves.
  static int64_t single_tensor_dim(Placement p, Placement q) {
    if (p.is_shard()) return p.dim();
    return q.is_shard() ? q.dim() : -1;
  }

  Move single_move(const Placements& cur, int i, Placement q, const Placements& next) const {
    return Move{next, 0, 0, 1u << i, false, single_kind(i, cur[i], q), q,
                single_tensor_dim(cur[i], q)};
  }

  // The step changing mesh dim i from cur[i] to q (validity checked by the caller).
  // `next` is the state after (after(cur, i, q)); s.to holds mesh dim i's
  // placement in it, its order included, which is what replace_placements
  // needs to rebuild that state.
  RedistributeStep single_step(const Placements& cur, int i, Placement q,
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
    const Price pr = price(single_kind(i, p, q), 1u << i, cur, next, single_tensor_dim(p, q), q);
    s.kind = pr.kind;
    s.cost_us = pr.cost_us;
    s.bytes = pr.bytes;
    s.peak_bytes = pr.peak;
    return s;
  }

  // A collective of `kind` over the flattened group of `dims`, every one of
  // them going from its cur placement to q.
  RedistributeStep merged_step(const Placements& cur, const Placements& next, uint32_t dims,
                               StepKind kind, Placement q) const {
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
    const Price pr = price(kind, dims, cur, next, s.tensor_dim, q);
    s.cost_us = pr.cost_us;
    s.bytes = pr.bytes;
    s.peak_bytes = pr.peak;
    return s;
  }

  RedistributeStep step_of(const Placements& cur, const Move& m) const {
    if (m.merged) return merged_step(cur, m.next, m.dims, m.kind, m.q);
    return single_step(cur, std::countr_zero(m.dims), m.q, m.next);
  }

  void single_edges(const Placements& cur, std::vector<Move>& out) const {
    const Placements& dst = to_.placements();
    const int64_t ndim = from_.ndim();
    auto add = [&](int i, Placement q) {
      Placements next = after(cur, i, q);
      if (!valid_partials(next)) return;
      out.push_back(single_move(cur, i, q, next));
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
      auto may_take = [&](int64_t e) { return ordered_ || !sharded_after(cur, i, e); };
      if (p.is_shard()) {
        if (!last_in_order(cur, i, p.dim())) continue;
        add(i, Replicate());
        for (int64_t e = 0; e < ndim; ++e)
          if (e != p.dim() && may_take(e)) add(i, Shard(e));
      } else if (p.is_partial()) {
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
  void merged_edges(const Placements& cur, std::vector<Move>& out) const {
    uint32_t partial_dims = 0;
    for (int i = 0; i < nd_; ++i)
      if (size_[i] > 1 && cur[i].is_partial()) partial_dims |= 1u << i;
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
      out.push_back(Move{next, 0, 0, sub, true, kind, q, q.is_shard() ? q.dim() : -1});
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
        // The gather's bytes are priced from cur, its tensor dim is d.
        out.push_back(Move{next, 0, 0, sub, true, StepKind::AllGather, Replicate(), d});
      });
    }
  }
  // Whether the partial ops of `dims` can run as one reduction.
  bool mergeable_ops(const Placements& cur, uint32_t dims) const {
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
  bool mergeable(const Placements& cur, uint32_t dims, const DimVector& order, StepKind kind,
                 int64_t d) const {
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

  // all_reduces over disjoint mesh dims commute and leave the bytes
  // unchanged, so a run of them is one plan in any order: put each run in
  // ascending mesh-dim order, so that equal plans read alike whichever the
  // search happened to settle first.
  static void order_all_reduces(std::vector<RedistributeStep>& steps) {
    for (size_t i = 0; i < steps.size();) {
      size_t j = i;
      while (j < steps.size() && steps[j].kind == StepKind::AllReduce) ++j;
      std::stable_sort(steps.begin() + i, steps.begin() + j, [](const auto& a, const auto& b) {
        return a.mesh_dims[0] < b.mesh_dims[0];
      });
      i = j == i ? i + 1 : j;
    }
  }

  // ---- search ----
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
  void init_cover() {
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
      if (dst[i].is_replicate()) to_replicate_ |= 1u << i;
      else other_shards_ *= static_cast<double>(size_[i]);
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

  int64_t group_size(uint32_t dims) const {
    int64_t n = 1;
    for (int i = 0; i < nd_; ++i)
      if (dims >> i & 1) n *= size_[i];
    return n;
  }

  // DeviceMesh::link of a group: the least bandwidth and the largest
  // latency of its dims (computed here, without the mesh's lock).
  LinkCost slowest_link(uint32_t dims) const {
    LinkCost link{1e300, 0};
    for (int i = 0; i < nd_; ++i) {
      if (!(dims >> i & 1)) continue;
      link.bandwidth_gbps = std::min(link.bandwidth_gbps, link_[i].bandwidth_gbps);
      link.latency_us = std::max(link.latency_us, link_[i].latency_us);
    }
    return link;
  }

  // out[m]: the cheapest split of the dims m into groups priced by floor;
  // each split is counted once, by the group holding m's lowest dim.
  void cheapest_cover(const double* floor, double* out) const {
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
  // this never overestimates. Tables by (partial, which bases count), made
  // on first use: one search meets few Partial masks.
  double last_collectives(uint32_t gather, uint32_t partial, bool gather_base) const {
    if (gather == 0 && partial == 0) return 0;
    const uint32_t key = partial | (gather_base ? 1u << kMaxDims : 0);
    for (const auto& [mask, table] : last_collectives_)
      if (mask == key) return table[gather];
    const double gbase = gather_base || !options_.merge ? base_us_ : 0;
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
    std::vector<double> dist(static_cast<size_t>(all) << np, kNoCover);
    dist[0] = 0;
    auto bytes_with = [&](uint32_t sharding) {
      return global_bytes_ / (always * static_cast<double>(group_size(sharding)));
    };
    auto relax = [&](size_t to, double c) { dist[to] = std::min(dist[to], c); };
    // Events only add bits, so ascending indices are a topological order.
    for (size_t idx = 0; idx < dist.size(); ++idx) {
      if (dist[idx] >= kNoCover) continue;
      const uint32_t t = static_cast<uint32_t>(idx) & (all - 1);
      const uint32_t qc = static_cast<uint32_t>(idx >> nd_);
      const uint32_t q = expand(qc);
      const double here = dist[idx];
      // A last gather: of dims not yet placed, not a Partial reduced later.
      const uint32_t can_gather = u & ~t & ~q;
      const double out_bytes = bytes_with((t | to_shard) & ~q);
      for (uint32_t g = can_gather; g != 0; g = (g - 1) & can_gather) {
        if (!options_.merge && !one_dim(g)) continue;
        relax(idx | g,
              here + all_gather_cost(out_bytes, group_size(g), slowest_link(g), gbase) * kMargin);
      }
      // A reduction of Partials not yet placed.
      const uint32_t can_reduce = ((1u << np) - 1) & ~qc;
      for (uint32_t rc = can_reduce; rc != 0; rc = (rc - 1) & can_reduce) {
        if (!options_.merge && !one_dim(rc)) continue;
        const uint32_t r = expand(rc);
        const double in_bytes = bytes_with((t | to_shard) & ~(q | r));
        const int64_t n = group_size(r);
        const LinkCost link = slowest_link(r);
        const bool scatter = (r & ~(t | to_shard)) == 0;
        const double c = scatter ? reduce_scatter_cost(in_bytes, n, link, base_us_)
                                 : all_reduce_cost(in_bytes, n, link, base_us_);
        relax(idx | static_cast<size_t>(rc) << nd_, here + c * kMargin);
      }
    }
    // All of `partial` reduced; the least over t holding each mask.
    std::vector<double> best(all, kNoCover);
    const size_t done = static_cast<size_t>((1u << np) - 1) << nd_;
    for (uint32_t t = 0; t < all; ++t)
      if ((t & ~u) == 0) best[t] = dist[done | t];
    for (int i = 0; i < nd_; ++i) {
      if (!(u >> i & 1)) continue;
      for (uint32_t t = 0; t < all; ++t)
        if ((t & ~u) == 0 && !(t >> i & 1)) best[t] = std::min(best[t], best[t | 1u << i]);
    }
    last_collectives_.emplace_back(key, std::move(best));
    return last_collectives_.back().second[gather];
  }

  // The bound of issue 18, kept to measure the one above against (the
  // bench's before/after): per class, the cheapest collective its costliest
  // member can be part of, a ring pass of the fewest bytes any state holds.
  void init_coarse_bound() {
    double min_bytes = global_bytes_;
    for (int i = 0; i < nd_; ++i) min_bytes /= static_cast<double>(size_[i]);
    for (int i = 0; i < nd_; ++i)
      lb_[i] = size_[i] > 1
                   ? all_gather_cost(min_bytes, size_[i], link_[i], base_us_) * (1 - 1e-9)
                   : 0;
  }

  double coarse_bound(const Placements& p) const {
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

  double lower_bound(const Placements& p) const {
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
    if (!has_order(p)) {
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
    if (!options_.merge) {  // no collective is shared: every part counts its bases
      return leaving + last_collectives(gather, partial, true);
    }
    // A gather of part 2 may hold splitters of part 1, one collective with
    // one base: the base goes to one side, and the bound is the larger.
    return std::max(leaving + last_collectives(gather, partial, false),
                    leaving_bare + last_collectives(gather, partial, true));
  }

  struct Node {
    uint64_t key = 0;  // the state's key_of
    double cost = 0;
    double peak = 0;  // the most bytes per rank a step of the path holds
    int steps = 0;
    bool done = false;
    uint32_t prev = 0;  // the node the path comes from
    Move move;  // the edge into this node; move.next is its state
  };

  // Whether a path of (cost, peak, steps) beats node n: cheaper; as cheap
  // and needing less memory; or as cheap and as much memory in fewer steps.
  static bool better(double cost, double peak, int steps, const Node& n) {
    constexpr double kEps = 1e-9;
    if (cost < n.cost - kEps) return true;
    if (cost > n.cost + kEps) return false;
    const double peak_eps = 1e-9 * std::max(1.0, n.peak);
    if (peak < n.peak - peak_eps) return true;
    if (peak > n.peak + peak_eps) return false;
    return steps < n.steps;
  }

  // The states the search has reached, by key: open addressing over a
  // vector of nodes (indices stay valid as it grows; references do not),
  // which allocates a few times per plan instead of once per state.
  class NodeTable {
   public:
    NodeTable() : slots_(1024, kEmpty) { nodes_.reserve(512); }
    // The node of `key`, added (default) if new; second: whether it was.
    std::pair<uint32_t, bool> try_emplace(uint64_t key) {
      if (2 * (nodes_.size() + 1) > slots_.size()) grow();
      for (size_t s = slot_of(key);; s = (s + 1) & (slots_.size() - 1)) {
        if (slots_[s] == kEmpty) {
          slots_[s] = static_cast<uint32_t>(nodes_.size());
          nodes_.emplace_back().key = key;
          return {slots_[s], true};
        }
        if (nodes_[slots_[s]].key == key) return {slots_[s], false};
      }
    }
    const Node* find(uint64_t key) const {
      for (size_t s = slot_of(key);; s = (s + 1) & (slots_.size() - 1)) {
        if (slots_[s] == kEmpty) return nullptr;
        if (nodes_[slots_[s]].key == key) return &nodes_[slots_[s]];
      }
    }
    Node& operator[](uint32_t index) { return nodes_[index]; }
    size_t size() const { return nodes_.size(); }

   private:
    static constexpr uint32_t kEmpty = ~0u;
    size_t slot_of(uint64_t key) const {
      return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
    }
    void grow() {
      slots_.assign(2 * slots_.size(), kEmpty);
      for (uint32_t i = 0; i < nodes_.size(); ++i) {
        size_t s = slot_of(nodes_[i].key);
        while (slots_[s] != kEmpty) s = (s + 1) & (slots_.size() - 1);
        slots_[s] = i;
      }
    }
    std::vector<uint32_t> slots_;
    std::vector<Node> nodes_;
  };

  // The cheapest path, lowest peak memory among the cheapest, or nullopt
  // past max_states_ states. A* over the states with lower_bound(): the
  // queue orders by cost so far + bound, then peak, then steps, so among
  // paths of equal cost the one needing less memory settles a state first.
  std::optional<std::vector<RedistributeStep>> search() const {
    const Placements& src = from_.placements();
    const uint64_t start = key_of(src), goal = key_of(to_.placements());
    NodeTable nodes;
    const uint32_t first = nodes.try_emplace(start).first;
    nodes[first].move.next = src;
    nodes[first].prev = first;
    nodes[first].peak = bytes_of(src);
    // cost + bound, peak, steps, key (the last tie-break, as before the
    // node table), node
    using Item = std::tuple<double, double, int, uint64_t, uint32_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
    queue.emplace(lower_bound(src), nodes[first].peak, 0, start, first);
    std::vector<Move> edges;
    edges.reserve(64);
    while (!queue.empty()) {
      const uint32_t at = std::get<4>(queue.top());
      queue.pop();
      Node& node = nodes[at];
      if (node.done) continue;
      node.done = true;
      if (node.key == goal) break;
      const Placements cur = node.move.next;
      const double cost = node.cost, peak = node.peak;
      const int steps = node.steps;
      edges.clear();
      single_edges(cur, edges);
      if (options_.merge) merged_edges(cur, edges);
      for (Move& e : edges) {
        const uint64_t k = key_of(e.next);
        const auto [to, fresh] = nodes.try_emplace(k);
        if (!fresh && nodes[to].done) continue;
        price_move(cur, e);
        const double c = cost + e.cost;
        const double pk = std::max(peak, e.peak);
        Node& n = nodes[to];
        if (!fresh && !better(c, pk, steps + 1, n)) continue;
        n.cost = c;
        n.peak = pk;
        n.steps = steps + 1;
        n.prev = at;
        n.move = e;
        queue.emplace(c + lower_bound(e.next), pk, steps + 1, k, to);
      }
      if (nodes.size() > max_states_) return std::nullopt;
    }
    const Node* last = nodes.find(goal);
    DT_CHECK(last != nullptr && last->done, "redistribute: internal error: no plan from ",
             to_string(src), " to ", to_string(to_.placements()), " on ", mesh_);
    std::vector<RedistributeStep> out;
    for (const Node* n = last; n->key != start; n = &nodes[n->prev])
      out.push_back(step_of(nodes[n->prev].move.next, n->move));
    std::reverse(out.begin(), out.end());
    return out;
  }

  // ---- the per-dim baseline (the order of the core issue) ----
  // Unshard from the innermost mesh dim out (with, transitively, every later
  // mesh dim sharding a tensor dim that an earlier changing dim touches),
  // reducing partials bound for Replicate; then reshard outermost first.
  std::vector<RedistributeStep> per_dim_steps() const {
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
    auto step = [&](int i, Placement q) {
      Placements next = after(cur, i, q);
      out.push_back(single_step(cur, i, q, next));
      cur = next;
    };
    for (int i = nd_ - 1; i >= 0; --i) {
      if (via_replicate[i] && cur[i].is_shard()) step(i, Replicate());
      else if (cur[i].is_partial() && dst[i].is_replicate()) step(i, Replicate());
    }
    for (int i = 0; i < nd_; ++i)
      if (cur[i] != dst[i]) step(i, dst[i]);
    return out;
  }

  // The per-dim path when either end has shard orders: for each tensor dim
  // keep the longest common prefix of the two split orders, gather the rest
  // of the source's from its last splitter back, reduce partials bound for
  // Replicate, then split in the target's order (each new shard splits
  // last, so appending the target's remaining splitters in order rebuilds
  // its order exactly), then the local R -> P.
  std::vector<RedistributeStep> per_dim_ordered_steps() const {
    const Placements& src = from_.placements();
    const Placements& dst = to_.placements();
    std::vector<RedistributeStep> out;
    Placements cur = src;
    auto step = [&](int i, Placement q) {
      Placements next = after(cur, i, q);
      out.push_back(single_step(cur, i, q, next));
      cur = next;
    };
    size_t common[kMaxDims] = {};
    for (int64_t d = 0; d < from_.ndim(); ++d) {
      const DimVector s = shard_split_order(src, d), t = shard_split_order(dst, d);
      size_t& k = common[d];
      while (k < s.size() && k < t.size() && s[k] == t[k]) ++k;
      for (size_t j = s.size(); j-- > k;) step(static_cast<int>(s[j]), Replicate());
    }
    for (int i = nd_ - 1; i >= 0; --i)
      if (cur[i].is_partial() && dst[i].is_replicate()) step(i, Replicate());
    for (int64_t d = 0; d < from_.ndim(); ++d) {
      const DimVector t = shard_split_order(dst, d);
      for (size_t j = common[d]; j < t.size(); ++j) step(static_cast<int>(t[j]), Shard(d));
    }
    for (int i = 0; i < nd_; ++i)
      if (cur[i] != dst[i]) step(i, dst[i]);
    return out;
  }

  // Names (and, when auto-flattening, creates) the group of a merged step.
  void name_group(RedistributeStep& s) const {
    MeshDimMask roots = 0;
    std::vector<int> dims;
    for (int64_t i : s.mesh_dims) {
      roots |= mesh_.root_dims(static_cast<int>(i));
      dims.push_back(static_cast<int>(i));
    }
    if (auto found = mesh_.find_flattened(roots)) {
      s.group = *found;
      return;
    }
    DeviceMesh flat = mesh_.flatten(dims);  // auto-flattening: register it
    s.group = flat.names()[0];
    s.created_group = true;
  }

  // The group a collective over `dims` prices with (the transforms' cost
  // functions read only n and link), without copying the mesh per edge.
  const Group& scratch_group(uint32_t dims) const {
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

  const DTensorSpec& from_;
  const DTensorSpec& to_;
  const DeviceMesh& mesh_;
  RedistributeOptions options_;
  SearchMode mode_ = SearchMode::Pruned;
  bool coarse_ = false;  // Pruned, but with the coarse bound (see init_cover)
  size_t max_states_ = kMaxPlanStates;
  mutable Group scratch_;
  mutable GroupInfo groups_[1u << kMaxDims];
  // same_chunking's answers, by (tensor dim, merged dims, the other
  // splitters of the dim in order): one merge is asked about from many states.
  mutable std::unordered_map<uint64_t, bool> chunking_;
  // The pruned search's bound (init_cover): the cheapest cover of a class
  // of mesh dims by collectives, by mask of mesh dims, for the tensor dims'
  // classes and the Partial one; the target's split orders without size-1
  // dims; the fewest bytes per rank a collective can be charged.
  static constexpr double kNoCover = 1e300;
  // The most steps last_collectives' tables may take in one plan (measured:
  // beyond it they cost more than the coarse bound's search).
  static constexpr double kMaxBoundWork = 60000;
  // Floors are scaled by this so that rounding never makes them overestimate.
  static constexpr double kMargin = 1 - 1e-9;
  double shard_cover_[1u << kMaxDims] = {};
  double bare_cover_[1u << kMaxDims] = {};  // shard_cover_ without the bases (merging on)
  std::vector<int> target_order_[kMaxDims];
  uint32_t live_ = 0;  // mesh dims of more than one rank
  // Live mesh dims bound for R that may shard on the way; the product of
  // the sizes of the other live dims that may shard.
  uint32_t to_replicate_ = 0;
  double other_shards_ = 1;
  // last_collectives' tables, by the mask of Partials bound for R and the
  // bases counted.
  mutable std::vector<std::pair<uint32_t, std::vector<double>>> last_collectives_;
  double min_bytes_ = 0;
  double lb_[kMaxDims] = {};  // the coarse bound's, per mesh dim
  int nd_ = 0;
  bool auto_flatten_ = true;
  bool floating_ = true;
  bool ordered_ = false;  // either end has a shard order
  double base_us_ = 6.6;
  double global_bytes_ = 0;
  int64_t size_[kMaxDims] = {};
  LinkCost link_[kMaxDims];
};

RedistributePlan build_plan(const DTensorSpec& from, const DTensorSpec& to,
                            const RedistributeOptions& options, SearchMode mode,
                            size_t max_states) {
  RedistributePlan plan = Planner(from, to, options, mode, max_states).plan();
  check_plan(plan);
  return plan;
}

}  // namespace dtensor::redistribute_detail

namespace dtensor {

namespace {

// Bytes printed whole rather than in 6 significant digits; past 2^63 (a
// model of a tensor no machine holds) llround is undefined.
std::string whole_bytes(double bytes) {
  char out[40];
  if (bytes < 9.2e18) std::snprintf(out, sizeof out, "%lld", std::llround(bytes));
  else std::snprintf(out, sizeof out, "%.6g", bytes);
  return out;
}

}  // namespace

int RedistributePlan::num_collectives() const {
  int n = 0;
  for (int c : counts) n += c;
  return n;
}

std::string RedistributePlan::explain() const {
  std::ostringstream os;
  os << "redistribute " << to_string(from.placements()) << " -> " << to_string(to.placements())
     << " of a " << from.shape() << ' ' << from.dtype() << " tensor on " << from.mesh() << '\n';
  if (steps.empty()) os << "  (nothing to do)\n";
  for (size_t k = 0; k < steps.size(); ++k) {
    const RedistributeStep& s = steps[k];
    std::ostringstream dims;
    if (s.mesh_dims.size() == 1) {
      dims << "mesh dim " << s.mesh_dims[0];
    } else {
      dims << "mesh dims " << s.mesh_dims << " as " << s.group
           << (s.created_group ? " (created)" : "");
    }
    char cost[32];
    std::snprintf(cost, sizeof cost, "%.4f us", s.cost_us);
    os << "  " << k + 1 << ". " << to_string(s.kind) << "  " << dims.str() << ": "
       << to_string(s.from) << " -> " << to_string(s.to);
    if (s.kind == StepKind::AllReduce || s.kind == StepKind::ReduceScatter) {
      os << " (" << to_string(s.op);
      if (s.divisor != 1) os << ", then / " << s.divisor;
      os << ')';
    }
    // The bytes the cost model charges each rank (for an all_gather, the
    // gathered size), printed whole rather than in 6 significant digits.
    if (s.kind != StepKind::Local) os << ", " << whole_bytes(s.bytes) << " bytes/rank, " << cost;
    os << ", peak " << whole_bytes(s.peak_bytes);
    os << '\n';
  }
  char total[32];
  std::snprintf(total, sizeof total, "%.4f us", cost_us);
  os << "total " << total << ": " << count(StepKind::AllGather) << " all_gather, "
     << count(StepKind::AllReduce) << " all_reduce, " << count(StepKind::ReduceScatter)
     << " reduce_scatter, " << count(StepKind::AllToAll) << " all_to_all";
  if (count(StepKind::BoxExchange) > 0) os << ", " << count(StepKind::BoxExchange) << " box_exchange";
  if (!groups.empty()) {
    os << "; flattened groups:";
    for (const std::string& g : groups) os << ' ' << g;
  }
  os << '\n';
  // Peak memory: the most any step holds live per rank, against the output.
  char peak[96];
  if (output_bytes > 0)
    std::snprintf(peak, sizeof peak, "peak memory %s bytes/rank (%.2fx the output of %s)",
                  whole_bytes(peak_bytes).c_str(), peak_bytes / output_bytes,
                  whole_bytes(output_bytes).c_str());
  else
    std::snprintf(peak, sizeof peak, "peak memory %s bytes/rank", whole_bytes(peak_bytes).c_str());
  os << peak << '\n';
  return os.str();
}

}  // namespace dtensor
