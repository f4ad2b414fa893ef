// Planning a run before renting its cluster (docs/estimate.md): the exact
// memory and collectives of every rank of a step, from a program run on a
// World::shape_only, which has shapes but no data.
//
//   World world = World::shape_only(1024);
//   estimate::Profile p = estimate::profile(world, [&] {
//     ... build the model on a mesh of `world`, lay it out, and run a step,
//     calling estimate::phase("backward") etc. between its parts ...
//   });
//   p.ranks[r].memory.peak          // bytes, exact
//   p.ranks[r].collectives          // kind, dtype, bytes, group, in order
//
// The same program on World::simulated or under MPI gives the same
// figures (tests/worlds/estimate_test.cc checks them equal), so a profile
// of a shape-only world is what the real run will hold and send.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dtensor/debug.h"
#include "dtensor/memory.h"

namespace dtensor::estimate {

// One rank's part of a profiled step.
struct RankProfile {
  int rank = 0;
  RankPeak memory;  // bytes of the rank's tensors (RankMemoryTracker): now, peak
  std::vector<RankCollective> collectives;  // in the order the rank ran them
  // Where each phase (Profile::phases) starts in `collectives`.
  std::vector<size_t> phase_starts;
};

struct Profile {
  std::vector<RankProfile> ranks;        // each rank the world holds, ascending
  std::vector<std::vector<int>> groups;  // RankCollective::group's world ranks
  std::vector<std::string> phases;       // the names phase() was given, in order
};

// Runs step() with a RankMemoryTracker and a CollectiveTrace on `world`:
// everything step() makes counts, the model's parameters included when it
// builds them. Throws what step() throws.
Profile profile(const World& world, const std::function<void()>& step);

// Inside profile()'s step: the collectives from here on belong to phase
// `name` (until the next). Does nothing outside a profile.
void phase(const std::string& name);

}  // namespace dtensor::estimate
