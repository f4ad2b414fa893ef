// Files that every process of a world test names alike (checkpoints,
// safetensors files): under MPI the processes agree on a random id drawn by
// the process holding rank 0, and wait for each other around file edits.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/common.h"
#include "dtensor/dtensor.h"

namespace dtensor::testing {

// Every rank waits for every other (an all_gather).
inline void barrier(const World& world) {
  checkpoint::detail::all_gather_values(
      world, std::vector<int64_t>(static_cast<size_t>(world.size()), 1),
      [](int) { return std::vector<int64_t>{0}; });
}

// ::testing::TempDir() + prefix + "_" + an id the processes share + suffix.
inline std::string shared_temp_path(const World& world, const std::string& prefix,
                                    const std::string& suffix = "") {
  std::vector<int64_t> counts(static_cast<size_t>(world.size()), 0);
  counts[0] = 1;
  const std::vector<int64_t> id =
      checkpoint::detail::all_gather_values(world, counts, [](int r) {
        if (r != 0) return std::vector<int64_t>{};
        std::random_device dev;
        const uint64_t v = (uint64_t{dev()} << 32) ^ dev();
        return std::vector<int64_t>{static_cast<int64_t>(v)};
      });
  std::ostringstream os;
  os << ::testing::TempDir() << prefix << "_" << std::hex << static_cast<uint64_t>(id.at(0))
     << suffix;
  return os.str();
}

// Runs f on the process holding rank 0 (a file edit), then waits for it.
template <class F>
void on_rank0(const World& world, F&& f) {
  if (world.holds(0)) f();
  barrier(world);
}

}  // namespace dtensor::testing
