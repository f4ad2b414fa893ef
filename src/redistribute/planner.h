// The planner's state, shared by the files that make it up (plan.cc says
// what the planner does as a whole):
//   plan.cc           the entry point: checks, the plan's totals, its groups
//   plan_moves.cc     states and the moves between them (the nesting rule,
//                     the merge rules)
//   plan_price.cc     what a move costs and holds; the steps of a path
//   plan_bound.cc     the admissible lower bound the search is steered by
//   plan_search.cc    the A* search over states
//   plan_symmetry.cc  interchangeable tensor dims, one state per class
//   plan_baseline.cc  the per-dim plan (no search)
//   plan_box.cc       the box exchange as a candidate beside the search
// (plan_explain.cc prints a plan; it needs no Planner.)
// One Planner plans one pair; it is not shared between threads.
#pragma once

#include <bit>
#include <optional>
#include <unordered_map>
#include <vector>

#include "redistribute/plan_internal.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

// Whether the mask of mesh dims holds exactly one (std::has_single_bit,
// without the library call it becomes on a build for generic x86-64).
constexpr bool one_dim(uint32_t dims) { return dims != 0 && (dims & (dims - 1)) == 0; }

// has_shard_order (placement.h), inline: the search asks it of every state
// and edge, and the call was 8% of a cold plan.
inline bool has_order(const Placements& p) {
  for (const Placement& q : p)
    if (q.is_shard() && q.shard_order() >= 0) return true;
  return false;
}

inline bool is_sum_or_avg(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Avg; }

class Planner {
 public:
  Planner(const DTensorSpec& from, const DTensorSpec& to, const RedistributeOptions& options,
          SearchMode mode, size_t max_states);

  RedistributePlan plan();

  // New names of tensor dims, by old name (plan_symmetry.cc).
  using Rename = int8_t[kMaxDims];

  // A lower bound on the cost of the box exchange from `from` (the source
  // when not given) to the target (box_exchange_step's cost_us), or 0 when
  // either has a Partial; it may stop counting once past `enough`
  // (plan_box.cc). With any_link, a bound for every layout the source
  // reaches by local steps too (their exchanges may cross any mesh dim).
  // Public so that tests can hold it against the exchange's cost.
  double box_exchange_floor(double enough) const { return box_exchange_floor(from_, enough); }
  double box_exchange_floor(const DTensorSpec& from, double enough, bool any_link = false) const;

  // The source and the layouts one local step (R -> S on a mesh dim of
  // more than one rank) away from it (plan_box.cc): the step takes
  // mesh_dim (-1 for the source) to q.
  struct FreeLayout {
    Placements placements;
    int mesh_dim = -1;
    Placement q;
  };
  std::vector<FreeLayout> free_layouts() const;

  // The representative of p's class of states under swaps of
  // interchangeable tensor dims (plan_symmetry.cc); to[d] receives the
  // name dim d takes in it. p itself when the pair has no such dims or the
  // mode is not Pruned. Public so that tests can check it is one per class.
  Placements canonical(const Placements& p, Rename& to) const;
  // p with every tensor dim d renamed to[d].
  static Placements renamed(const Placements& p, const Rename& to);

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
  };

  struct Price {
    StepKind kind = StepKind::Local;
    double cost_us = 0;
    double bytes = 0;  // charged per rank
    double peak = 0;   // bytes per rank live during the step
  };

 private:
  // plan.cc
  void validate() const;
  static void order_all_reduces(std::vector<RedistributeStep>& steps);
  void name_group(RedistributeStep& s) const;

  // plan_box.cc
  void prefer_box_exchange(std::vector<RedistributeStep>& steps) const;

  // plan_moves.cc: states
  // Bytes per rank of a state under the cost model: global bytes / shards.
  double bytes_of(const Placements& p) const {
    double shards = 1;
    for (int i = 0; i < nd_; ++i)
      if (p[i].is_shard()) shards *= static_cast<double>(size_[i]);
    return global_bytes_ / shards;
  }
  // Whether state p carries a shard order. Between natural ends no state
  // does (a new shard is only ever taken right of the dims splitting its
  // dim, see single_edges and merged_edges, so after() and
  // replace_placements keep every state natural), and the search asks
  // this of every edge: it is answered without looking then.
  bool ordered(const Placements& p) const { return ordered_ && has_order(p); }
  bool last_in_order(const Placements& p, int mesh_dim, int64_t d) const;
  Placements after(const Placements& cur, int i, Placement q) const;
  // plan_moves.cc: moves
  void single_edges(const Placements& cur, std::vector<Move>& out) const;
  void merged_edges(const Placements& cur, std::vector<Move>& out) const;
  bool mergeable_ops(const Placements& cur, uint32_t dims) const;
  bool mergeable(const Placements& cur, uint32_t dims, const DimVector& order, StepKind kind,
                 int64_t d) const;
  bool same_chunking(const Placements& p, uint32_t dims, int64_t d) const;
  bool chunks_alike(const Placements& p, uint32_t dims, int64_t d) const;
  // Defined here so that single_edges, which asks them of every edge, inlines
  // them (out of line, a cold plan took 8% more instructions).

  // Whether a mesh dim after `mesh_dim` (size-1 dims aside) shards d.
  bool sharded_after(const Placements& p, int mesh_dim, int64_t d) const {
    for (int j = mesh_dim + 1; j < nd_; ++j)
      if (size_[j] > 1 && p[j].is_shard(d)) return true;
    return false;
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
  // The kind of the step taking mesh dim i from p to q.
  StepKind single_kind(int i, Placement p, Placement q) const {
    if (size_[i] == 1) return StepKind::Local;
    if (p.is_shard()) return q.is_replicate() ? StepKind::AllGather : StepKind::AllToAll;
    if (p.is_partial()) return q.is_replicate() ? StepKind::AllReduce : StepKind::ReduceScatter;
    return StepKind::Local;
  }
  Move single_move(const Placements& cur, int i, Placement q, const Placements& next) const {
    return Move{next, 0, 0, 1u << i, false, single_kind(i, cur[i], q), q};
  }

  // plan_price.cc
  // The group of several mesh dims, its link looked up once per plan (the
  // mesh's link() and find_flattened() take the mesh's lock).
  struct GroupInfo {
    bool known = false;
    bool may_merge = false;
    int64_t n = 1;
    LinkCost link;
  };
  const GroupInfo& group_info(uint32_t dims) const;
  Group group_of(uint32_t dims) const;
  bool may_merge(uint32_t dims) const { return group_info(dims).may_merge; }
  const Group& scratch_group(uint32_t dims) const;
  // cur_bytes: bytes_of the state the move leaves, worked out once per state.
  void price_move(double cur_bytes, Move& m) const {
    const Price pr = price(m.kind, m.dims, cur_bytes, m.next, m.q);
    m.cost = pr.cost_us;
    m.peak = pr.peak;
  }
  Price price(StepKind kind, uint32_t dims, double cur_bytes, const Placements& next,
              Placement q) const;
  RedistributeStep single_step(const Placements& cur, int i, Placement q,
                               const Placements& next) const;
  RedistributeStep merged_step(const Placements& cur, const Placements& next, uint32_t dims,
                               StepKind kind, Placement q) const;
  RedistributeStep step_of(const Placements& cur, const Move& m) const;

  // plan_bound.cc
  void init_cover();
  // Read from init_cover's per-mask tables, which only the fine bound
  // fills and uses (Pruned mode, not coarse_): ask them nowhere else.
  int64_t group_size(uint32_t dims) const;
  LinkCost slowest_link(uint32_t dims) const;
  void cheapest_cover(const double* floor, double* out) const;
  // Part 2 of the bound with the gathers' bases not counted (bare) and
  // counted (based); the same without merging.
  struct LastCost {
    double bare = 0, based = 0;
  };
  LastCost last_collectives(uint32_t gather, uint32_t partial) const;
  std::vector<LastCost> last_collectives_table(uint32_t partial) const;
  void init_coarse_bound();
  double coarse_bound(const Placements& p) const;
  double lower_bound(const Placements& p) const;

  // plan_symmetry.cc: interchangeable tensor dims (Pruned mode only)
  void init_twins();
  static Move renamed(const Move& m, const Rename& to);

  // plan_search.cc
  std::optional<std::vector<RedistributeStep>> search() const;

  // plan_baseline.cc
  std::vector<RedistributeStep> per_dim_steps() const;
  std::vector<RedistributeStep> per_dim_ordered_steps() const;
  // Appends the single step moving mesh dim i of `cur` to q, and advances cur.
  void push_single(Placements& cur, int i, Placement q, std::vector<RedistributeStep>& out) const;

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
  uint32_t other_mask_ = 0;  // those other live dims
  // last_collectives' tables, by the mask of Partials bound for R.
  mutable std::vector<std::pair<uint32_t, std::vector<LastCost>>> last_collectives_;
  // The table last used (its data stays put when last_collectives_ grows).
  struct Memo {
    uint32_t key = ~0u;
    const LastCost* table = nullptr;
  };
  mutable Memo last_table_;
  // The prices last_collectives_table asks for, by kind (gather with and
  // without its base, reduce_scatter, all_reduce), the dims sharding while
  // it runs and its dims; -1 until asked.
  mutable std::vector<double> ring_memo_;
  double min_bytes_ = 0;
  // By mask of mesh dims (init_cover): the product of their sizes, their
  // slowest link.
  int64_t mask_n_[1u << kMaxDims] = {};
  LinkCost mask_link_[1u << kMaxDims];
  double lb_[kMaxDims] = {};  // the coarse bound's, per mesh dim
  int nd_ = 0;
  bool auto_flatten_ = true;
  bool floating_ = true;
  bool ordered_ = false;  // either end has a shard order
  // Partials the target keeps never move (single_edges): Pruned mode
  // without allow_new_partial. The other modes keep the dead ends, so that
  // tests hold the pruned search against every state.
  bool prune_kept_ = false;
  // Per tensor dim, the first dim of its class of interchangeable dims
  // (itself when it has no twin); whether any class has two.
  int8_t twin_of_[kMaxDims] = {};
  bool symmetric_ = false;
  // Per class (by its first dim): its dims in ascending order, how many.
  int8_t members_[kMaxDims][kMaxDims] = {};
  int8_t class_size_[kMaxDims] = {};
  double base_us_ = 6.6;
  double global_bytes_ = 0;
  int64_t size_[kMaxDims] = {};
  LinkCost link_[kMaxDims];
};

}  // namespace dtensor::redistribute_detail
