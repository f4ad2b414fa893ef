// checkpoint::load: every process reads metadata.json, checks the state
// against it, then each held rank reads the intersections of the saved
// chunks with the box its target layout holds, straight into its shard.
// No rank materialises more than its own shard (plus one checksum block of
// scratch per reading thread), whatever the saved layout was: resharding
// is box arithmetic. The simulated world's ranks read on the thread pool.
#include <algorithm>
#include <map>

#include "checkpoint/chunk_io.h"
#include "checkpoint/common.h"
#include "checkpoint/file_io.h"
#include "checkpoint/metadata.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint {

namespace {

using detail::Box;

// The data files of one checkpoint, opened once per process.
using Files = std::map<std::string, detail::File>;

// Opens every data file metadata.json names, each checked (open without
// blocking, fstat) to be a regular file of exactly the size it records
// before anything is allocated or read: declared sizes bound what a
// reader allocates only once they are the real ones. The ranks then read
// through these descriptors from several threads at once (pread keeps no
// file position).
Files open_data_files(const std::string& dir, const Metadata& md) {
  Files files;
  for (const auto& [name, want] : md.files) {
    detail::File f = detail::File::open_read(detail::join(dir, name));
    const int64_t size = f.size();
    DT_CHECK(size >= want, "checkpoint: ", f.path(), " is truncated: it has ", size,
             " bytes, metadata.json records ", want);
    DT_CHECK(size == want, "checkpoint: ", f.path(), " has ", size,
             " bytes, metadata.json records ", want, " (it was changed after it was written)");
    files.emplace(name, std::move(f));
  }
  return files;
}

std::string chunk_what(const std::string& name, const ChunkInfo& c) {
  return "tensor '" + name + "', chunk at " + to_string(c.offsets) + " of size " +
         to_string(c.sizes);
}

// Fills the box `target` of tensor `name` (row-major at dst) from every
// saved chunk that meets it.
void read_box(const Files& files, const Metadata& md, const std::string& name, const Box& target,
              char* dst, std::vector<char>& scratch) {
  const TensorInfo& info = md.tensors.at(name);
  int64_t covered = 0;
  for (const ChunkInfo& c : info.chunks) {
    const Box chunk{c.offsets, c.sizes};
    const std::optional<Box> inner = detail::intersect(chunk, target);
    if (!inner || inner->numel() == 0) continue;
    // (metadata.cc checked that every chunk's file is in "files".)
    const detail::ChunkSource src{&files.at(c.file), c.byte_offset, c.byte_size,
                                  md.block_bytes,   &c.checksums,    chunk_what(name, c)};
    detail::read_part(src, chunk, *inner, target, dst, itemsize(info.dtype), scratch);
    covered += inner->numel();
  }
  // The metadata's chunks cover each tensor once (checked when it was
  // read); this is the same promise kept for the part read here.
  DT_CHECK(covered == target.numel(), "checkpoint: tensor '", name, "': the saved chunks cover ",
           covered, " of the ", target.numel(), " elements at ", to_string(target.offsets),
           " of size ", to_string(target.sizes), " (metadata.json is inconsistent)");
}

// The state's entries against the checkpoint's: names, kinds, shapes and
// dtypes, before a byte is read. Returns the names to load.
std::vector<std::string> check_state(const StateDict& state, const Metadata& md,
                                     const std::string& dir, const LoadOptions& options) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : state) {
    const bool is_value = std::holds_alternative<Value>(entry);
    const bool in_tensors = md.tensors.count(name) != 0;
    const bool in_values = md.values.count(name) != 0;
    if (!in_tensors && !in_values) {
      DT_CHECK(!options.strict, "checkpoint::load: ", dir, " has no entry '", name,
                "' (the state asks for ", detail::kind_of(entry),
                "); load with strict = false to leave such entries as they are");
      continue;
    }
    DT_CHECK(is_value ? in_values : in_tensors, "checkpoint::load: '", name, "' is ",
             detail::kind_of(entry), " in the state but ", in_values ? "a value" : "a tensor",
             " in ",
             dir);
    if (!is_value) {
      const TensorInfo& t = md.tensors.at(name);
      if (const auto kind = detail::tensor_kind(entry, name, "checkpoint::load")) {
        DT_CHECK(kind->shape == t.shape, "checkpoint::load: tensor '", name, "' has shape ",
                 to_string(t.shape), " in ", dir, " but ", to_string(kind->shape),
                 " in the state");
        detail::check_dtype("checkpoint::load: tensor '" + name + "' is " +
                                dtype_name(t.dtype) + " in " + dir,
                            t.dtype, kind->dtype, options.convert_dtype, "load");
      }
    }
    names.push_back(name);
  }
  return names;
}

}  // namespace

Metadata read_metadata(const std::string& dir_in) {
  const std::string dir = detail::normalize_dir(dir_in);
  const std::string path = detail::join(dir, detail::kMetadataFile);
  if (!detail::exists(path)) {
    DT_CHECK(!detail::exists(dir + ".partial"), "checkpoint: ", dir,
             " is not a complete checkpoint: a save into it never finished (",
             dir + ".partial is left from it)");
    DT_CHECK(detail::exists(dir), "checkpoint: ", dir, " does not exist");
    DT_THROW("checkpoint: ", dir, " is not a checkpoint: it has no ", detail::kMetadataFile);
  }
  return detail::parse_metadata(detail::read_whole(path, "metadata"), path);
}

void verify(const std::string& dir_in) {
  const std::string dir = detail::normalize_dir(dir_in);
  const Metadata md = read_metadata(dir);
  const Files files = open_data_files(dir, md);
  std::vector<char> scratch;
  for (const auto& [name, t] : md.tensors)
    for (const ChunkInfo& c : t.chunks)
      detail::verify_chunk({&files.at(c.file), c.byte_offset, c.byte_size, md.block_bytes,
                            &c.checksums, chunk_what(name, c)},
                           scratch);
}

void load(StateDict& state, const std::string& dir_in, const LoadOptions& options) {
  const std::string dir = detail::normalize_dir(dir_in);
  const World world = detail::world_of(state, options.world, "checkpoint::load");

  // 1. Every process reads and checks the metadata (they read the same
  // file, but a rank must not go on to read data while another throws).
  Metadata md;
  std::vector<std::string> names;
  Files files;
  detail::Failures meta;
  meta.run(world.held_ranks().front(), [&] {
    md = read_metadata(dir);
    names = check_state(state, md, dir, options);
    files = open_data_files(dir, md);
  });
  meta.agree(world, "");

  // 2. Each held rank reads its part of every DTensor; each process reads
  // the plain tensors whole.
  detail::read_state(
      world, state, names,
      [&](const std::string& name, const Box& box, char* data, std::vector<char>& scratch) {
        read_box(files, md, name, box, data, scratch);
      },
      [&](const std::string& name) { return md.tensors.at(name).dtype; },
      [&](const std::string& name) {
        const TensorInfo& t = md.tensors.at(name);
        return Tensor::empty(t.shape, t.dtype);
      },
      md.values);
}

}  // namespace dtensor::checkpoint
