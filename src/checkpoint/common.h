// What save and load share: the world a state dict runs on, agreement
// between ranks, the box a rank's shard covers, and the test hook that
// injects crashes into save.
#pragma once

#include <functional>
#include <map>
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

// The failures of the ranks this process holds in one stage of a save or
// load, made known to every process: no rank goes on alone after another
// failed (under MPI it would wait for it forever), and every rank throws
// the same message in both worlds.
class Failures {
 public:
  // Runs f for `rank`; an exception is recorded as that rank's failure.
  template <class F>
  void run(int rank, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      messages_.emplace(rank, e.what());
    }
  }
  // Collective over the world (two small all_gathers when a rank failed,
  // one when none did). When any rank failed: runs `cleanup` (every
  // process), then throws dtensor::Error with the lowest failed rank's
  // message, "(on rank R; ranks ... failed too)" and `suffix`.
  void agree(const World& world, const std::string& suffix,
             const std::function<void()>& cleanup = nullptr);

 private:
  std::map<int, std::string> messages_;
};

// The older form of Failures (used by safetensors.cc until it moves to
// Failures): attempt returns 1 on failure and keeps the first message;
// gather_status gathers one status per rank; throw_if_failed throws the
// process's own message or names the failed ranks.
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
std::vector<int64_t> gather_status(const World& world, const std::function<int64_t(int)>& status);
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
