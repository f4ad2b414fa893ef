// Distributed checkpoints (torch.distributed.checkpoint): save a named
// collection of DTensors, plain tensors and plain values from any layout,
// load it into any other.
//
//   checkpoint::StateDict state = checkpoint::get_state_dict(model, &opt, &sched);
//   state["step"] = checkpoint::Value(int64_t{step});
//   checkpoint::save(state, "ckpt/step-100");       // every rank calls it
//   ...                                              // later, maybe another mesh:
//   checkpoint::load(state, "ckpt/step-100");       // into state's own layouts
//   checkpoint::set_state_dict(state, model, &opt, &sched);
//
// The format (docs/checkpoint.md) is a directory: metadata.json (format
// version; per tensor its global shape, dtype and saved chunks: offsets,
// sizes, data file, byte range and XXH3-64 checksums of fixed-size blocks;
// the XXH3-64 of its own content) and one data file per writing rank (data-<rank>.bin), where each chunk's
// bytes are contiguous, row-major and little-endian. A chunk held by
// several ranks (Replicate, or a plain tensor) is written once, by one of
// them, spreading the bytes evenly over the holders; Partial placements are
// reduced (an all_reduce) before they are written.
//
// Saving writes into DIR.partial and renames it to DIR only when every rank
// has written and synced its file, so a crash at any moment leaves the
// previous DIR as it was (an existing DIR is swapped out atomically). Under
// MPI, DIR must be on a file system every process sees.
//
// Loading reshards: each rank reads only the blocks of saved chunks that
// intersect the parts its target layout holds, straight into its shards,
// never a whole tensor on one rank (unless the layout asks for one). Every
// block read is checked against its checksum, metadata.json against its
// own, every data file against the size it records (before anything is
// allocated) and the chunks for covering each tensor exactly once; a
// missing, truncated, corrupted, edited or non-regular file (a FIFO is
// refused, never waited on), a shape mismatch, a dtype mismatch (unless
// LoadOptions::convert_dtype asks for a conversion) or a tensor the
// checkpoint lacks (strict) throws dtensor::Error naming the file and the
// tensor, on every rank.
//
// Every dtype round-trips bit for bit: bfloat16 and float16 are saved as
// their 16-bit words (safetensors' "BF16" and "F16").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dtensor/distributed_tensor.h"

namespace dtensor::nn {
class Module;
}
namespace dtensor::optim {
class Optimizer;
class LRScheduler;
}  // namespace dtensor::optim

namespace dtensor::checkpoint {

// A plain value saved in metadata.json: a step count, a scheduler's state,
// a seed, user metadata. Doubles keep their exact bits (NaN and inf too).
using Value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>,
                           std::vector<double>>;

// One entry of a state dict. A DTensor is saved from and loaded into its
// own layout; a plain Tensor is one every rank holds the same (written
// once); a Value lives in the metadata.
using Entry = std::variant<DTensor, Tensor, Value>;

// Entries by name ("blocks.0.fc.weight", "optim.state.blocks.0.fc.weight.exp_avg").
using StateDict = std::map<std::string, Entry>;

// The version save() writes; load() reads versions 1 to it. Version 2
// records the XXH3-64 checksum of metadata.json's own content, checked
// before anything in it is used; version 1 (without) loads unchecked.
inline constexpr int kFormatVersion = 2;

struct SaveOptions {
  // The world whose ranks save; by default the world of the DTensors (all
  // must share one). Needed when the state has no DTensor.
  std::optional<World> world = std::nullopt;
  // Bytes per checksummed block (a reader verifies whole blocks).
  int64_t block_bytes = int64_t{4} << 20;
};

struct LoadOptions {
  // As SaveOptions::world.
  std::optional<World> world = std::nullopt;
  // A state entry the checkpoint lacks is an error (true) or left as it is
  // (false). Checkpoint entries the state does not name are ignored.
  bool strict = true;
  // A tensor stored in another floating dtype than the state's (float64,
  // float32, bfloat16, float16) is an error naming the tensor and both
  // dtypes (false), or is read and converted to the state's dtype as
  // Tensor::to converts (true: round to nearest even, float64 to a 16-bit
  // type through float32, as PyTorch's copy_). int64 and bool must match
  // either way. PyTorch's DCP always converts (its reader copy_s); here a
  // silent change of precision must be asked for. A converting load holds
  // one shard of the stored dtype at a time beside the shard.
  bool convert_dtype = false;
};

// Saves `state` to directory `dir` (replacing an earlier checkpoint there
// only once the new one is complete). An existing `dir` must be empty or a
// dtensor checkpoint (by its metadata.json's format) holding only the files
// save writes; anything else is refused, and save never removes a file it
// does not write. Every rank of the world calls it with
// the same names, the same layouts and the same plain tensors and values.
void save(const StateDict& state, const std::string& dir, const SaveOptions& options = {});

// Loads `dir` into `state`: DTensor entries in place (their shards are
// overwritten; placements, storage and autograd state stay), plain Tensor
// entries in place when defined (same shape and dtype) or replaced when
// not, Value entries replaced. Partial(sum) targets get the value on the
// first rank of each group and zeros elsewhere; Partial(avg|max|min) get
// it everywhere.
void load(StateDict& state, const std::string& dir, const LoadOptions& options = {});

// ---- what a checkpoint holds (dtensor checkpoint inspect) -------------------------

struct ChunkInfo {
  Shape offsets;  // where the chunk starts in the global tensor
  Shape sizes;    // its extent (row-major bytes in the file)
  std::string file;
  int64_t byte_offset = 0;
  int64_t byte_size = 0;
  std::vector<uint64_t> checksums;  // XXH3-64 of each block_bytes block
};

struct TensorInfo {
  Shape shape;
  DType dtype = DType::Float32;
  // The layout it was saved from ("mesh [2, 2] placements S(0),R"; "" for
  // a plain tensor): informative only, loading does not need it.
  std::string saved_layout;
  std::vector<ChunkInfo> chunks;
};

struct Metadata {
  int version = kFormatVersion;
  int world_size = 0;
  int64_t block_bytes = 0;
  std::map<std::string, int64_t> files;  // data file -> its size in bytes
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, Value> values;
};

// Reads and validates dir/metadata.json (no data file is read).
Metadata read_metadata(const std::string& dir);
// Reads every data file of `dir` and checks every block; throws the first
// problem found (as load would).
void verify(const std::string& dir);

// ---- safetensors (Hugging Face) -----------------------------------------------------

// Writes the DTensor and Tensor entries of `state` as one safetensors file
// (8-byte little-endian header length, JSON header, raw little-endian
// row-major data; dtypes F64, F32, BF16, F16, I64, BOOL): each rank writes
// the parts it holds straight into the file, never a whole tensor. Value
// entries go into the header's "__metadata__" as strings.
void export_safetensors(const StateDict& state, const std::string& path,
                        const SaveOptions& options = {});
// Loads the safetensors file at `path` into `state`, as load() does (dtype
// mismatches included: converted only with convert_dtype).
void import_safetensors(StateDict& state, const std::string& path,
                        const LoadOptions& options = {});

// ---- models and optimizers (torch.distributed.checkpoint.state_dict) ---------------

// The state of a model, its optimizer and scheduler as one StateDict whose
// DTensors alias the live parameters and optimizer buffers (so load() into
// it restores them in place): parameters by their names
// ("blocks.0.fc.weight"), optimizer state as "optim.<param>.<buffer>" and
// "optim.<param>.step", the lr as "optim.lr" (param group 0) and
// "optim.group<g>.lr" (the others), the scheduler's epoch as
// "lr_scheduler.last_epoch". Buffers an optimizer has not made yet (before
// its first step) get zeros laid out like the parameter in the returned
// state only (the optimizer is not changed), so that a fresh optimizer can
// be loaded into.
StateDict get_state_dict(nn::Module& model, optim::Optimizer* optimizer = nullptr,
                         optim::LRScheduler* scheduler = nullptr);
// Applies `state` (after load()) to the optimizer and scheduler: step
// counts, lr, epoch, and the loaded buffers of every parameter whose step
// count is positive (at 0 the optimizer keeps none, as before a first
// step). Parameters and buffers that existed were restored in place. With
// a scheduler, the saved lr must be the scheduler's lr at the saved epoch
// (the scheduler sets it from the epoch): else it throws, changing nothing.
void set_state_dict(const StateDict& state, nn::Module& model,
                    optim::Optimizer* optimizer = nullptr,
                    optim::LRScheduler* scheduler = nullptr);

}  // namespace dtensor::checkpoint
