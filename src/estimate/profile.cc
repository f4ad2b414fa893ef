// estimate::profile: a step run under a RankMemoryTracker and a
// CollectiveTrace, its figures gathered per held rank. In a shape-only
// world it computes by roles (world/roles.h): the world holds one rank of
// each role, and a layout that splits a role runs the step again.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include "dtensor/error.h"
#include "dtensor/estimate.h"
#include "layout/roles_check.h"
#include "world/roles.h"

namespace dtensor::estimate {

namespace {

struct Running {
  const World* world;
  CollectiveTrace* trace;
  Profile* out;
  // Per world rank, where each phase starts in its collectives: for the
  // ranks held when phase() was called (by roles, phase() may be called
  // before the step makes the grid and the world holds only stand-ins).
  std::vector<std::vector<size_t>> phase_starts;
};
constinit thread_local Running* running = nullptr;

// The memory timeline (ProfileOptions::memory_timeline): after each event,
// every held rank's bytes, kept once per distinct history. Each rank starts
// in history 0; at an event, the first rank of a history to be read gives
// it its sample, and a rank that reads otherwise moves to a history split
// off for that sample (a copy of the samples before), which the others
// like it join. Histories only split, so there are as many as ranks that
// differ somewhere in the step. The held ranks do not change within a run
// (when the roles do, the run ends: world/roles.h).
class MemorySampler {
 public:
  MemorySampler(const RankMemoryTracker& memory, Profile& out) : memory_(memory), out_(out) {
    out_.memory_histories.assign(1, {});
    sampled_at_.assign(1, kNone);
  }

  void sample(size_t event) {
    const std::vector<RankPeak> ranks = memory_.ranks();
    if (history_of_.empty()) {
      history_of_.assign(ranks.size(), 0);
      for (const RankPeak& r : ranks) rank_.push_back(r.rank);
    }
    std::vector<std::pair<std::pair<int, MemorySample>, int>> splits;  // (from, sample) -> to
    for (size_t i = 0; i < ranks.size(); ++i) {
      const MemorySample m{ranks[i].now, ranks[i].peak};
      int& h = history_of_[i];
      auto& histories = out_.memory_histories;
      if (sampled_at_[static_cast<size_t>(h)] != event) {
        histories[static_cast<size_t>(h)].push_back(m);
        sampled_at_[static_cast<size_t>(h)] = event;
        continue;
      }
      if (histories[static_cast<size_t>(h)].back() == m) continue;
      int to = -1;
      for (const auto& [from, dest] : splits)
        if (from.first == h && from.second == m) to = dest;
      if (to < 0) {
        to = static_cast<int>(histories.size());
        std::vector<MemorySample> copy(histories[static_cast<size_t>(h)].begin(),
                                       histories[static_cast<size_t>(h)].end() - 1);
        copy.push_back(m);
        histories.push_back(std::move(copy));
        sampled_at_.push_back(event);
        splits.push_back({{h, m}, to});
      }
      h = to;
    }
  }

  // Each rank of out_.ranks its history.
  void finish() {
    for (RankProfile& p : out_.ranks)
      for (size_t i = 0; i < rank_.size(); ++i)
        if (rank_[i] == p.rank) p.memory_history = history_of_[i];
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  const RankMemoryTracker& memory_;
  Profile& out_;
  std::vector<int> history_of_, rank_;  // per held rank (memory_.ranks()'s order)
  std::vector<size_t> sampled_at_;      // per history: the event its last sample is of
};

// One run of the step.
Profile run_once(const World& world, const std::function<void()>& step, bool memory_timeline) {
  Profile out;
  RankMemoryTracker memory(world);
  CollectiveTrace trace;
  std::optional<MemorySampler> sampler;
  if (memory_timeline) {
    sampler.emplace(memory, out);
    trace.set_after_event([&] { sampler->sample(trace.events().size() - 1); });
  }
  Running r{&world, &trace, &out,
            std::vector<std::vector<size_t>>(static_cast<size_t>(world.size()))};
  running = &r;
  try {
    step();
  } catch (...) {
    running = nullptr;
    throw;
  }
  running = nullptr;
  const std::vector<RankPeak> peaks = memory.ranks();
  for (int rank : world.held_ranks()) {
    RankProfile p;
    p.rank = rank;
    p.collectives = trace.of(rank);
    p.phase_starts = std::move(r.phase_starts[static_cast<size_t>(rank)]);
    out.ranks.push_back(std::move(p));
  }
  for (const RankPeak& peak : peaks) {
    const auto it = std::lower_bound(out.ranks.begin(), out.ranks.end(), peak.rank,
                                     [](const RankProfile& p, int x) { return p.rank < x; });
    if (it != out.ranks.end() && it->rank == peak.rank) it->memory = peak;
  }
  for (int g = 0; g < trace.groups(); ++g) {
    out.groups.push_back(trace.group(g));
    out.group_partition.push_back(trace.partition_of(g));
  }
  out.partitions = trace.partitions();
  out.events = trace.events();
  if (sampler) sampler->finish();
  return out;
}

// Ends the roles however profile() leaves.
struct Roles {
  const World& world;
  bool on;
  Roles(const World& w, bool wanted) : world(w), on(wanted && WorldRoles::begin(w)) {}
  ~Roles() {
    if (!on) return;
    WorldRoles::end(world);
    detail::forget_role_checks();
  }
};

}  // namespace

void phase(const std::string& name) {
  Running* r = running;
  if (r == nullptr) return;
  r->out->phases.push_back(name);
  r->out->phase_events.push_back(r->trace->events().size());
  for (int rank : r->world->held_ranks())
    r->phase_starts[static_cast<size_t>(rank)].push_back(r->trace->of(rank).size());
}

Profile profile(const World& world, const std::function<void()>& step,
                const ProfileOptions& options) {
  DT_CHECK(running == nullptr, "estimate::profile: already profiling on this thread");
  const Roles roles(world, options.roles);
  for (int runs = 1;; ++runs) {
    const uint64_t epoch = WorldRoles::epoch(world);
    std::optional<Profile> out;
    try {
      out = run_once(world, step, options.memory_timeline);
    } catch (...) {
      // The roles changed (RolesChanged, world/roles.h: the step made the
      // grid or a layout split them; or that exception turned into another
      // on its way through a caller, as through Python's step).
      if (!roles.on || WorldRoles::epoch(world) == epoch) throw;
      continue;
    }
    out->runs = runs;
    if (WorldRoles::active(world)) out->stand_in = WorldRoles::stand_ins(world);
    return std::move(*out);
  }
}

// ---- reading a profile by roles ------------------------------------------------

size_t Profile::index_of(int rank) const {
  const int s = stand_in.empty() ? rank
                : rank >= 0 && static_cast<size_t>(rank) < stand_in.size()
                    ? stand_in[static_cast<size_t>(rank)]
                    : -1;
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), s,
                                   [](const RankProfile& r, int x) { return r.rank < x; });
  DT_CHECK(s >= 0 && it != ranks.end() && it->rank == s, "estimate::Profile: no figures of rank ",
           rank, " (the profile has ", ranks.size(), " ranks)");
  return static_cast<size_t>(it - ranks.begin());
}

std::vector<int> Profile::ranks_of(size_t i) const {
  DT_CHECK(i < ranks.size(), "estimate::Profile::ranks_of: no entry ", i, " (", ranks.size(),
           " ranks)");
  if (stand_in.empty()) return {ranks[i].rank};
  std::vector<int> out;
  for (size_t r = 0; r < stand_in.size(); ++r)
    if (stand_in[r] == ranks[i].rank) out.push_back(static_cast<int>(r));
  return out;
}

std::vector<int> Profile::group_of(int rank, size_t k) const {
  const RankProfile& s = ranks[index_of(rank)];
  DT_CHECK(k < s.collectives.size(), "estimate::Profile::group_of: rank ", rank, " ran ",
           s.collectives.size(), " collectives, not ", k + 1);
  const size_t g = static_cast<size_t>(s.collectives[k].group);
  if (s.rank == rank) return groups[g];
  const GroupPartition& part = partitions[static_cast<size_t>(group_partition[g])];
  const int own = part.of_rank[static_cast<size_t>(rank)];
  DT_CHECK(own >= 0, "estimate::Profile::group_of: rank ", rank, " is in no group of rank ", s.rank,
           "'s collective ", k);
  return part.groups[static_cast<size_t>(own)];
}

Profile Profile::expanded() const {
  if (stand_in.empty()) return *this;
  Profile out = *this;
  out.ranks.clear();
  out.stand_in.clear();
  std::map<std::pair<int, std::vector<int>>, int> ids;  // as CollectiveTrace interns them
  for (size_t g = 0; g < groups.size(); ++g)
    ids.emplace(std::pair(group_partition[g], groups[g]), static_cast<int>(g));
  for (size_t r = 0; r < stand_in.size(); ++r) {
    RankProfile p = ranks[index_of(static_cast<int>(r))];
    p.rank = p.memory.rank = static_cast<int>(r);
    if (stand_in[r] != p.rank) {
      for (size_t k = 0; k < p.collectives.size(); ++k) {
        const int part = group_partition[static_cast<size_t>(p.collectives[k].group)];
        auto [it, added] = ids.try_emplace(std::pair(part, group_of(p.rank, k)),
                                           static_cast<int>(out.groups.size()));
        if (added) {
          out.groups.push_back(it->first.second);
          out.group_partition.push_back(part);
        }
        p.collectives[k].group = it->second;
      }
    }
    out.ranks.push_back(std::move(p));
  }
  return out;
}

}  // namespace dtensor::estimate
