// The search: A* over placement states, from the source to the target.
#include <algorithm>
#include <array>
#include <bit>
#include <queue>
#include <tuple>

#include "redistribute/planner.h"

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

struct Node {
  uint64_t key = 0;  // the state's key_of
  double cost = 0;
  double bound = 0;  // lower_bound of the state, worked out once
  double peak = 0;  // the most bytes per rank a step of the path holds
  int steps = 0;
  bool done = false;
  uint32_t prev = 0;  // the node the path comes from
  Planner::Move move;  // the edge into this node; move.next is its state
};

// Whether a path of (cost, peak, steps) beats node n: cheaper; as cheap
// and needing less memory; or as cheap and as much memory in fewer steps.
bool better(double cost, double peak, int steps, const Node& n) {
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
  NodeTable() : slots_(1024, kEmpty), mask_(1023) { nodes_.reserve(512); }
  // The node of `key`, added (default) if new; second: whether it was.
  // Asked of every edge: the slot mask and the node count are kept rather
  // than derived from the vectors' sizes (a division by the node's size).
  std::pair<uint32_t, bool> try_emplace(uint64_t key) {
    if (2 * (count_ + 1) > mask_ + 1) grow();
    for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
      const uint32_t at = slots_[s];
      if (at == kEmpty) {
        slots_[s] = count_;
        nodes_.emplace_back().key = key;
        return {count_++, true};
      }
      if (nodes_[at].key == key) return {at, false};
    }
  }
  const Node* find(uint64_t key) const {
    for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
      if (slots_[s] == kEmpty) return nullptr;
      if (nodes_[slots_[s]].key == key) return &nodes_[slots_[s]];
    }
  }
  Node& operator[](uint32_t index) { return nodes_[index]; }
  size_t size() const { return count_; }

 private:
  static constexpr uint32_t kEmpty = ~0u;
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void grow() {
    slots_.assign(2 * slots_.size(), kEmpty);
    mask_ = slots_.size() - 1;
    for (uint32_t i = 0; i < count_; ++i) {
      size_t s = slot_of(nodes_[i].key);
      while (slots_[s] != kEmpty) s = (s + 1) & mask_;
      slots_[s] = i;
    }
  }
  std::vector<uint32_t> slots_;
  size_t mask_;
  uint32_t count_ = 0;
  std::vector<Node> nodes_;
};

}  // namespace

// The cheapest path, lowest peak memory among the cheapest, or nullopt
// past max_states_ states. A* over the states with lower_bound(): the
// queue orders by cost so far + bound, then peak, then steps, so among
// paths of equal cost the one needing less memory settles a state first.
std::optional<std::vector<RedistributeStep>> Planner::search() const {
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
  // With twins (plan_symmetry.cc) a node's state is its class's
  // representative: the edge into it ran in the previous state's names,
  // and its tensor dim d became renames[node][d].
  std::vector<std::array<int8_t, kMaxDims>> renames;
  while (!queue.empty()) {
    const uint32_t at = std::get<4>(queue.top());
    queue.pop();
    Node& node = nodes[at];
    if (node.done) continue;
    node.done = true;
    if (node.key == goal) break;
    const Placements cur = node.move.next;
    const uint64_t node_key = node.key;
    const double cost = node.cost, peak = node.peak;
    const int steps = node.steps;
    const double cur_bytes = bytes_of(cur);
    edges.clear();
    single_edges(cur, edges);
    if (options_.merge) merged_edges(cur, edges);
    // A collective's price depends on its kind, its mesh dims and the
    // bytes of cur, not on the tensor dim it moves (price()): the edges of
    // one mesh dim to S(0), S(1), ... share one.
    const Move* priced = nullptr;
    for (Move& e : edges) {
      // Between natural ends a single-dim move changes that dim's
      // placement alone (after() renumbers no order), so its key is cur's
      // with one byte replaced.
      uint64_t k;
      Rename rename;
      if (symmetric_) {
        e.next = canonical(e.next, rename);
        k = key_of(e.next);
      } else if (!e.merged && !ordered_) {
        const int i = std::countr_zero(e.dims);
        k = (node_key & ~(uint64_t{0xFF} << (8 * i))) | code(e.next[i]) << (8 * i);
      } else {
        k = key_of(e.next);
      }
      const auto [to, fresh] = nodes.try_emplace(k);
      if (!fresh && nodes[to].done) continue;
      if (priced && e.kind != StepKind::Local && e.kind == priced->kind &&
          e.dims == priced->dims) {
        e.cost = priced->cost;
        e.peak = priced->peak;
      } else {
        price_move(cur_bytes, e);
        priced = &e;
      }
      const double c = cost + e.cost;
      const double pk = std::max(peak, e.peak);
      Node& n = nodes[to];
      if (fresh) n.bound = lower_bound(e.next);
      else if (!better(c, pk, steps + 1, n)) continue;
      n.cost = c;
      n.peak = pk;
      n.steps = steps + 1;
      n.prev = at;
      n.move = e;
      if (symmetric_) {
        if (renames.size() < nodes.size()) renames.resize(2 * nodes.size());
        std::copy(rename, rename + kMaxDims, renames[to].begin());
      }
      queue.emplace(c + n.bound, pk, steps + 1, k, to);
    }
    if (nodes.size() > max_states_) return std::nullopt;
  }
  const Node* last = nodes.find(goal);
  DT_CHECK(last != nullptr && last->done, "redistribute: internal error: no plan from ",
           to_string(src), " to ", to_string(to_.placements()), " on ", mesh_);
  std::vector<uint32_t> path;  // node indices, the source's left out
  for (uint32_t n = nodes.try_emplace(goal).first; nodes[n].key != start; n = nodes[n].prev)
    path.push_back(n);
  std::reverse(path.begin(), path.end());
  std::vector<RedistributeStep> out;
  Placements cur = src;
  // With twins, `real` names each dim of the current representative as
  // the plan knows it; the source and the target shard no twin, so both
  // ends read the same in either naming.
  Rename real;
  for (int d = 0; d < kMaxDims; ++d) real[d] = static_cast<int8_t>(d);
  for (const uint32_t index : path) {
    const Node* n = &nodes[index];
    if (!symmetric_) {
      out.push_back(step_of(cur, n->move));
      cur = n->move.next;
      continue;
    }
    // The edge in the previous representative's names: its state before
    // renaming is move.next with rename undone.
    Rename back, next_real;
    const auto& rename = renames[index];
    for (int d = 0; d < from_.ndim(); ++d) back[rename[d]] = static_cast<int8_t>(d);
    Move m = n->move;
    m.next = renamed(m.next, back);
    m = renamed(m, real);
    out.push_back(step_of(cur, m));
    cur = m.next;
    for (int d = 0; d < from_.ndim(); ++d) next_real[d] = real[back[d]];
    std::copy(next_real, next_real + kMaxDims, real);
  }
  return out;
}

}  // namespace dtensor::redistribute_detail
