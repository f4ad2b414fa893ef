// estimate::profile: a step run under a RankMemoryTracker and a
// CollectiveTrace, its figures gathered per held rank.
#include <memory>
#include <optional>

#include "dtensor/error.h"
#include "dtensor/estimate.h"

namespace dtensor::estimate {

namespace {

struct Running {
  CollectiveTrace* trace;
  Profile* out;
};
constinit thread_local Running* running = nullptr;

// The memory timeline (profile's memory_timeline): after each event, every
// held rank's bytes, kept once per distinct history. Each rank starts in
// history 0; at an event, the first rank of a history to be read gives it
// its sample, and a rank that reads otherwise moves to a history split
// off for that sample (a copy of the samples before), which the others
// like it join. Histories only split, so there are as many as ranks that
// differ somewhere in the step.
class MemorySampler {
 public:
  MemorySampler(const RankMemoryTracker& memory, Profile& out)
      : memory_(memory), out_(out), history_of_(out.ranks.size(), 0) {
    out_.memory_histories.assign(1, {});
    sampled_at_.assign(1, kNone);
  }

  void sample(size_t event) {
    const std::vector<RankPeak> ranks = memory_.ranks();
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

  void finish() {
    for (size_t i = 0; i < history_of_.size(); ++i) out_.ranks[i].memory_history = history_of_[i];
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  const RankMemoryTracker& memory_;
  Profile& out_;
  std::vector<int> history_of_;     // per out_.ranks entry
  std::vector<size_t> sampled_at_;  // per history: the event its last sample is of
};

}  // namespace

void phase(const std::string& name) {
  Running* r = running;
  if (r == nullptr) return;
  r->out->phases.push_back(name);
  r->out->phase_events.push_back(r->trace->events().size());
  for (RankProfile& rank : r->out->ranks)
    rank.phase_starts.push_back(r->trace->of(rank.rank).size());
}

Profile profile(const World& world, const std::function<void()>& step, bool memory_timeline) {
  DT_CHECK(running == nullptr, "estimate::profile: already profiling on this thread");
  Profile out;
  for (int rank : world.held_ranks()) out.ranks.push_back({rank, {}, {}, {}, -1});
  RankMemoryTracker memory(world);
  CollectiveTrace trace;
  std::optional<MemorySampler> sampler;
  if (memory_timeline) {
    sampler.emplace(memory, out);
    trace.set_after_event([&] { sampler->sample(trace.events().size() - 1); });
  }
  Running r{&trace, &out};
  running = &r;
  try {
    step();
  } catch (...) {
    running = nullptr;
    throw;
  }
  running = nullptr;
  if (sampler) sampler->finish();
  const std::vector<RankPeak> peaks = memory.ranks();
  for (size_t i = 0; i < out.ranks.size(); ++i) {
    out.ranks[i].memory = peaks[i];
    out.ranks[i].collectives = trace.of(out.ranks[i].rank);
  }
  for (int g = 0; g < trace.groups(); ++g) out.groups.push_back(trace.group(g));
  out.events = trace.events();
  return out;
}

}  // namespace dtensor::estimate
