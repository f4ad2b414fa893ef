// `dtensor estimate --svg`: the estimated step as a picture. For each role
// (ranks whose figures agree), a compute lane and a communication lane on
// the step's time axis, each op and collective a rectangle colored by its
// kind, the phases marked, and below them the memory of the role's first
// rank over the step: its exact bytes after each event as a step line,
// with its highest point marked. A standalone SVG (no scripts, no fonts
// but sans-serif), drawn as plot.h draws the loss curves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/estimate.h"

namespace dtensor::cli {

// One role of the picture.
struct SvgRole {
  std::string ranks;  // as the report prints them: "0-1015"
  // The role's peak as the report prints it: over the whole profile (the
  // model's construction and both steps), not only the step drawn.
  int64_t peak = 0;
  // The memory history of the role's first rank
  // (Profile::memory_histories[RankProfile::memory_history]).
  const std::vector<estimate::MemorySample>* memory = nullptr;
};

// The picture of `time` (estimate_time of `profile` from phase
// `first_phase` on: the step drawn), `title` on top. The time is one for
// all ranks (the profile's events carry the busiest rank's shard of each
// op), so every role shows the same lanes; the memory is each role's own.
// The step line is drawn through every sample: where a rank's high-water
// mark rose between two events (an op's output made before its inputs
// were freed), the line rises to it there, so the line's highest point is
// the step's peak, exactly. When the role's peak was reached before the
// step drawn (in the first step, or building the model), the picture says
// so. Every role's block carries its figures as attributes for checks:
// data-ranks, data-peak-bytes (the role's peak) and, on the memory line,
// data-max-bytes (its highest point).
// REQUIRES: profile was made with a memory timeline.
std::string estimate_svg(const std::string& title, const estimate::Profile& profile,
                         const estimate::TimeEstimate& time, size_t first_phase,
                         const std::vector<SvgRole>& roles);

}  // namespace dtensor::cli
