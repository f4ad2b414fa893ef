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

}  // namespace

void phase(const std::string& name) {
  Running* r = running;
  if (r == nullptr) return;
  r->out->phases.push_back(name);
  r->out->phase_events.push_back(r->trace->events().size());
  for (RankProfile& rank : r->out->ranks)
    rank.phase_starts.push_back(r->trace->of(rank.rank).size());
}

Profile profile(const World& world, const std::function<void()>& step) {
  DT_CHECK(running == nullptr, "estimate::profile: already profiling on this thread");
  Profile out;
  for (int rank : world.held_ranks()) out.ranks.push_back({rank, {}, {}, {}});
  RankMemoryTracker memory(world);
  CollectiveTrace trace;
  Running r{&trace, &out};
  running = &r;
  try {
    step();
  } catch (...) {
    running = nullptr;
    throw;
  }
  running = nullptr;
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
