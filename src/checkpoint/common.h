// What save and load share: the world a state dict runs on, agreement
// between ranks, the box a rank's shard covers, and the test hook that
// injects crashes into save.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "dtensor/checkpoint.h"

namespace dtensor::checkpoint::detail {

// The given world, else the one world of the state's DTensors; throws when
// there is neither or the DTensors disagree. `op` names the caller.
World world_of(const StateDict& state, const std::optional<World>& given, const char* op);

// Every held rank r gives mine(r), `counts[r]` values (every process knows
// every count); every process gets all of them, concatenated in rank order.
// One all_gather over the whole world: it doubles as a barrier.
std::vector<int64_t> all_gather_values(const World& world, const std::vector<int64_t>& counts,
                                       const std::function<std::vector<int64_t>(int)>& mine);

// Runs f; a failure becomes status 1 and its message is kept (the first).
template <class F>
int64_t attempt(F&& f, std::string& message) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    if (message.empty()) message = e.what();
    return 1;
  }
}

// Every held rank r gives status(r) (0: success); every process gets the
// status of every rank. One all_gather: it doubles as a barrier.
std::vector<int64_t> gather_status(const World& world, const std::function<int64_t(int)>& status);

// Throws on every process when any rank failed, so that no rank goes on
// alone: the process's own first message when it has one (plus `suffix`),
// else "<op>: rank(s) 3, 5 failed while <stage> (their messages say why)".
void throw_if_failed(const std::vector<int64_t>& status, const std::string& message,
                     const char* op, const std::string& stage, const std::string& suffix);

// The box of the global tensor rank `rank` holds under `spec` (Partial
// dims hold the whole, as Replicate does). REQUIRES: rank is in the mesh.
Box box_of(const DTensorSpec& spec, int rank);
Box whole(const Shape& shape);

// A directory path without trailing slashes ("ckpt/step-10/" -> "ckpt/step-10").
std::string normalize_dir(const std::string& dir);

// Test hook: save() calls it at named points with the rank concerned:
// "prepare" (rank 0, before making DIR.partial), "write" (before each
// chunk), "written" (after a rank's file is synced), "metadata" (rank 0,
// before writing metadata.json) and "publish" (rank 0, before the rename).
// A test throws or kills the process there. Empty: none.
using FaultHook = std::function<void(const char* point, int rank)>;
void set_save_fault_hook(FaultHook hook);
void fault_point(const char* point, int rank);

}  // namespace dtensor::checkpoint::detail
