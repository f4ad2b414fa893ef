// What save and load share: the world a state dict runs on, agreement
// between ranks, the box a rank's shard covers, and the test hook that
// injects crashes into save.
#pragma once

#include <functional>
#include <map>
#include <mutex>
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
  // Threads may run different ranks at once (the simulated world's ranks
  // on the thread pool).
  template <class F>
  void run(int rank, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> lock(mutex_);
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
  std::mutex mutex_;
  std::map<int, std::string> messages_;
};

// The box of the global tensor rank `rank` holds under `spec` (Partial
// dims hold the whole, as Replicate does). REQUIRES: rank is in the mesh.
Box box_of(const DTensorSpec& spec, int rank);
Box whole(const Shape& shape);

// The placements with every Partial made Replicate: a checkpoint or a
// safetensors file holds values, so Partial tensors are reduced first.
Placements without_partial(const Placements& p);

// Whether `rank` holds zeros of a loaded value under `spec`: a Partial(sum)
// target holds the value on coordinate 0 of each Partial(sum) mesh dim and
// zeros elsewhere (so the sum is the value); avg, max and min hold it on
// every rank.
bool holds_zeros(const DTensorSpec& spec, int rank);

// Fills `shard` through fill(data) of its row-major bytes: in place when
// it is contiguous (its version counter moves, as an in-place op's), else
// through a contiguous copy written back with copy_.
void fill_shard(Tensor& shard, const std::function<void(char* data)>& fill);

// The reading half of load() and import_safetensors(), once the state was
// checked against the source: for every held rank, each DTensor named in
// `names` gets its shard's box read through read(name, box, data, scratch)
// (zeros where holds_zeros); each plain Tensor is read whole once per
// process, in place when defined, else into new_plain(name). read() writes
// the stored(name) dtype; an entry of another dtype (check_dtype allowed
// it) gets its box through a buffer of that dtype, converted. When every
// rank succeeded (Failures::agree, `suffix` added to the error), plain
// entries take their tensors and Value entries their `values`.
// The held ranks read on the thread pool, a rank to a task, each with its
// own `scratch` (empty at first, for read() to use as it likes), so read()
// must be safe to call from several threads at once.
using ReadBox = std::function<void(const std::string& name, const Box& box, char* data,
                                   std::vector<char>& scratch)>;
void read_state(const World& world, StateDict& state, const std::vector<std::string>& names,
                const ReadBox& read, const std::function<DType(const std::string&)>& stored,
                const std::function<Tensor(const std::string&)>& new_plain,
                const std::map<std::string, Value>& values);

// A tensor stored as `stored` read into a state entry of `dest`: the same
// dtype, or two floating dtypes with `convert` (LoadOptions::convert_dtype).
// Else throws `what` ("checkpoint::load: tensor 'w' is float64 in ckpt")
// followed by " but <dest> in the state" and what would do: `verb` ("load")
// with convert_dtype = true, or nothing (int64, bool).
void check_dtype(const std::string& what, DType stored, DType dest, bool convert,
                 const char* verb);

// The shape and dtype a tensor entry of a state must be read as: a
// DTensor's, a defined plain Tensor's; nullopt for an undefined plain
// Tensor (it takes whatever the source holds). Throws, naming `op` and
// `name`, for an empty DTensor. REQUIRES: the entry is not a Value.
struct TensorKind {
  Shape shape;
  DType dtype;
};
std::optional<TensorKind> tensor_kind(const Entry& entry, const std::string& name,
                                      const char* op);

// "a DTensor", "a Tensor", "a value": for messages.
const char* kind_of(const Entry& e);

// A directory path without trailing slashes ("ckpt/step-10/" -> "ckpt/step-10").
std::string normalize_dir(const std::string& dir);

// Test hook: save() calls it at named points with the rank concerned:
// "prepare" (rank 0, before making DIR.partial), "write" (before each
// chunk), "written" (after a rank's file is synced), "metadata" (rank 0,
// before writing metadata.json) and "publish" (rank 0, before the rename).
// A test throws or kills the process there. Empty: none. "write" and
// "written" come from the thread writing that rank's file: in the
// simulated world, several threads at once for different ranks.
using FaultHook = std::function<void(const char* point, int rank)>;
void set_save_fault_hook(FaultHook hook);
void fault_point(const char* point, int rank);

}  // namespace dtensor::checkpoint::detail
