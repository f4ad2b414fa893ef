// checkpoint::save: plan which rank writes which chunk (each distinct
// chunk once, bytes spread over its holders), write the data files in
// DIR.partial, agree that every rank succeeded, then rank 0 writes
// metadata.json and publishes the directory with one atomic rename.
#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "checkpoint/checksum.h"
#include "checkpoint/common.h"
#include "checkpoint/file_io.h"
#include "checkpoint/metadata.h"
#include "common/parallel.h"
#include "dtensor/checked.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint {

namespace {

using detail::Box;

// Chunk starts in a data file are aligned to this many bytes.
constexpr int64_t kAlign = 64;

struct PlannedChunk {
  Box box;
  int writer = 0;
  int64_t byte_offset = 0;
  int64_t bytes = 0;
};

struct PlannedTensor {
  std::string name;
  DTensor dtensor;  // Partial dims reduced; undefined for a plain tensor
  Tensor plain;
  std::vector<PlannedChunk> chunks;
};

struct Plan {
  std::vector<PlannedTensor> tensors;
  std::vector<int64_t> file_bytes;   // per rank; 0: writes nothing
  std::vector<int64_t> checksums;    // per rank: how many blocks it writes
};

int64_t blocks_of(int64_t bytes, int64_t block_bytes) {
  return bytes / block_bytes + (bytes % block_bytes != 0 ? 1 : 0);
}

Plan make_plan(const StateDict& state, const World& world, int64_t block_bytes) {
  Plan plan;
  const auto n = static_cast<size_t>(world.size());
  plan.file_bytes.assign(n, 0);
  plan.checksums.assign(n, 0);
  std::vector<int> all_ranks(n);
  for (size_t r = 0; r < n; ++r) all_ranks[r] = static_cast<int>(r);
  for (const auto& [name, entry] : state) {
    PlannedTensor t;
    t.name = name;
    // Distinct boxes, each with the ranks that hold it.
    std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::vector<int>> holders;
    if (const auto* d = std::get_if<DTensor>(&entry)) {
      DT_CHECK(d->defined(), "checkpoint::save: entry '", name, "' is an empty DTensor");
      t.dtensor = d->spec().has_partial()
                      ? d->redistribute(detail::without_partial(d->placements()))
                      : *d;
      for (int r : t.dtensor.mesh().ranks()) {
        const Box b = detail::box_of(t.dtensor.spec(), r);
        if (b.numel() > 0) holders[{b.offsets.vec(), b.sizes.vec()}].push_back(r);
      }
    } else if (const auto* p = std::get_if<Tensor>(&entry)) {
      DT_CHECK(p->defined(), "checkpoint::save: entry '", name, "' is an undefined Tensor");
      t.plain = p->contiguous();
      const Box b = detail::whole(p->shape());
      if (b.numel() > 0) holders[{b.offsets.vec(), b.sizes.vec()}] = all_ranks;
    } else {
      continue;  // a Value: metadata only
    }
    const DType dtype = t.dtensor.defined() ? t.dtensor.dtype() : t.plain.dtype();
    for (const auto& [key, ranks] : holders) {
      PlannedChunk c;
      c.box = Box{Shape(key.first), Shape(key.second)};
      c.bytes = checked_bytes(c.box.numel(), itemsize(dtype), "checkpoint::save");
      // The holder that has written least so far (ties: the lowest rank).
      c.writer = *std::min_element(ranks.begin(), ranks.end(), [&](int a, int b) {
        const int64_t fa = plan.file_bytes[static_cast<size_t>(a)];
        const int64_t fb = plan.file_bytes[static_cast<size_t>(b)];
        return fa != fb ? fa < fb : a < b;
      });
      int64_t& end = plan.file_bytes[static_cast<size_t>(c.writer)];
      c.byte_offset = (end + kAlign - 1) / kAlign * kAlign;
      end = checked_add(c.byte_offset, c.bytes, "checkpoint::save");
      plan.checksums[static_cast<size_t>(c.writer)] += blocks_of(c.bytes, block_bytes);
      t.chunks.push_back(std::move(c));
    }
    plan.tensors.push_back(std::move(t));
  }
  return plan;
}

// Writes rank's chunks into its data file; returns their block checksums
// in plan order. Each block is hashed right after it is written, while the
// write's copy has left its bytes in the cache: the data is read from
// memory once.
std::vector<int64_t> write_rank(const Plan& plan, int rank, const std::string& tmp,
                                int64_t block_bytes) {
  std::vector<int64_t> sums;
  if (plan.file_bytes[static_cast<size_t>(rank)] == 0) return sums;
  detail::File file = detail::File::create(detail::join(tmp, detail::data_file_name(rank)));
  for (const PlannedTensor& t : plan.tensors) {
    for (const PlannedChunk& c : t.chunks) {
      if (c.writer != rank) continue;
      detail::fault_point("write", rank);
      const Tensor data = t.dtensor.defined() ? t.dtensor.to_local(rank).contiguous() : t.plain;
      DT_CHECK(static_cast<int64_t>(data.nbytes()) == c.bytes, "checkpoint::save: internal "
               "error: rank ", rank, "'s shard of '", t.name, "' has ", data.nbytes(),
               " bytes, the plan ", c.bytes);
      const auto* bytes = static_cast<const char*>(data.raw_data());
      for (int64_t at = 0; at < c.bytes; at += block_bytes) {
        const int64_t n = std::min(block_bytes, c.bytes - at);
        file.write_at(bytes + at, n, c.byte_offset + at);
        sums.push_back(static_cast<int64_t>(detail::checksum(bytes + at, n)));
      }
    }
  }
  file.resize(plan.file_bytes[static_cast<size_t>(rank)]);
  file.sync();
  detail::fault_point("written", rank);
  return sums;
}

Metadata make_metadata(const StateDict& state, const Plan& plan, const World& world,
                       int64_t block_bytes, const std::vector<int64_t>& gathered) {
  Metadata md;
  md.world_size = world.size();
  md.block_bytes = block_bytes;
  // Where each rank's checksums start in `gathered` (rank order).
  std::vector<size_t> next(plan.checksums.size());
  size_t at = 0;
  for (size_t r = 0; r < plan.checksums.size(); ++r) {
    next[r] = at;
    at += static_cast<size_t>(plan.checksums[r]);
    if (plan.file_bytes[r] > 0)
      md.files[detail::data_file_name(static_cast<int>(r))] = plan.file_bytes[r];
  }
  for (const PlannedTensor& t : plan.tensors) {
    TensorInfo info;
    if (t.dtensor.defined()) {
      info.shape = t.dtensor.shape();
      info.dtype = t.dtensor.dtype();
      const auto& orig = std::get<DTensor>(state.at(t.name));
      info.saved_layout = "mesh " + to_string(orig.mesh().shape()) + " placements " +
                          to_string(orig.placements());
    } else {
      info.shape = t.plain.shape();
      info.dtype = t.plain.dtype();
    }
    for (const PlannedChunk& c : t.chunks) {
      ChunkInfo ci;
      ci.offsets = c.box.offsets;
      ci.sizes = c.box.sizes;
      ci.file = detail::data_file_name(c.writer);
      ci.byte_offset = c.byte_offset;
      ci.byte_size = c.bytes;
      size_t& k = next[static_cast<size_t>(c.writer)];
      for (int64_t b = 0; b < blocks_of(c.bytes, block_bytes); ++b)
        ci.checksums.push_back(static_cast<uint64_t>(gathered[k++]));
      info.chunks.push_back(std::move(ci));
    }
    md.tensors[t.name] = std::move(info);
  }
  for (const auto& [name, entry] : state)
    if (const auto* v = std::get_if<Value>(&entry)) md.values[name] = *v;
  return md;
}

// The entries of directory `dir`, each checked to be a file save() writes
// (a regular file named metadata.json or data-<rank>.bin); throws naming
// the first that is not, with `refusal` saying what is not done.
std::vector<std::string> checkpoint_files(const std::string& dir, const std::string& refusal) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    DT_CHECK(detail::is_checkpoint_file_name(name) && fs::is_regular_file(st), refusal,
             " (it holds ", name, ", which is not a file dtensor writes in a checkpoint: ",
             detail::kMetadataFile, " and data-<rank>.bin, regular files)");
    names.push_back(name);
  }
  DT_CHECK(!ec, refusal, " (cannot list it: ", ec.message(), ")");
  return names;
}

// Removes a directory save() made (DIR.partial, or an old checkpoint being
// replaced): its files, each one dtensor writes, then the directory. Never
// anything else: a directory holding other entries is left whole. A
// missing path is fine.
void remove_checkpoint_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (st.type() == fs::file_type::not_found) return;
  const std::string refusal = "checkpoint::save: not removing " + dir;
  DT_CHECK(!ec && fs::is_directory(st), refusal, " (it is not a directory)");
  for (const std::string& name : checkpoint_files(dir, refusal)) {
    fs::remove(fs::path(dir) / name, ec);
    DT_CHECK(!ec, "checkpoint::save: cannot remove ", detail::join(dir, name), ": ", ec.message());
  }
  fs::remove(dir, ec);
  DT_CHECK(!ec, "checkpoint::save: cannot remove ", dir, ": ", ec.message());
}

// Publishing replaces DIR whole, so an existing DIR must be an empty
// directory or a dtensor checkpoint (by the format its metadata.json
// parses to) holding only the files dtensor writes: a typo, or a
// metadata.json of some other program, must not delete a user's files.
void check_replaceable(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (st.type() == fs::file_type::not_found) return;
  const std::string refusal = "checkpoint::save: " + dir +
                              " exists and is not a checkpoint; a save would replace it: give "
                              "another directory";
  DT_CHECK(!ec && fs::is_directory(st), refusal, " (it is not a directory)");
  const std::vector<std::string> names = checkpoint_files(dir, refusal);
  if (names.empty()) return;
  DT_CHECK(std::find(names.begin(), names.end(), detail::kMetadataFile) != names.end(), refusal,
           " (it has no ", detail::kMetadataFile, ")");
  const std::string text =
      detail::read_whole(detail::join(dir, detail::kMetadataFile), "metadata");
  DT_CHECK(detail::has_checkpoint_format(text), refusal, " (its ", detail::kMetadataFile,
           " is not a dtensor checkpoint's: no \"format\": \"", detail::kFormatName, "\")");
}

}  // namespace

void save(const StateDict& state, const std::string& dir_in, const SaveOptions& options) {
  const std::string dir = detail::normalize_dir(dir_in);
  const std::string tmp = dir + ".partial";
  const World world = detail::world_of(state, options.world, "checkpoint::save");
  DT_CHECK(options.block_bytes >= 1 && options.block_bytes <= (int64_t{1} << 30),
           "checkpoint::save: block_bytes ", options.block_bytes, " (expected 1 to 2^30)");
  const int64_t bb = options.block_bytes;
  const Plan plan = make_plan(state, world, bb);
  const auto n = static_cast<size_t>(world.size());
  const std::string unchanged = "; " + dir + " is unchanged";

  // 1. Rank 0 clears what a crashed save left and makes DIR.partial.
  detail::Failures prepare;
  if (world.holds(0))
    prepare.run(0, [&] {
      detail::fault_point("prepare", 0);
      check_replaceable(dir);
      remove_checkpoint_dir(tmp);
      detail::make_dirs(tmp);
    });
  prepare.agree(world, unchanged);

  // 2. Every rank writes and syncs its file; all agree that every rank
  // succeeded (else rank 0 removes DIR.partial), then rank 0 learns the
  // checksums. The simulated world's ranks write on the thread pool, as
  // MPI's processes do at once: each writes only its own file, so the
  // bytes are the same, while the kernel's copies into the page cache (most
  // of a save's CPU), the checksums and one file's fsync overlap another's.
  detail::Failures write;
  const std::vector<int>& held = world.held_ranks();
  std::vector<std::vector<int64_t>> mine(n);  // by rank
  const auto ranks = static_cast<int64_t>(held.size());
  dtensor::detail::parallel_for(ranks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int r = held[static_cast<size_t>(i)];
      write.run(r, [&] { mine[static_cast<size_t>(r)] = write_rank(plan, r, tmp, bb); });
    }
  });
  write.agree(world, unchanged, [&] {
    if (world.holds(0)) detail::Failures().run(0, [&] { remove_checkpoint_dir(tmp); });
  });
  std::vector<int64_t> counts(n);
  for (size_t r = 0; r < n; ++r) counts[r] = plan.checksums[r];
  const std::vector<int64_t> sums =
      detail::all_gather_values(world, counts, [&](int r) { return mine[static_cast<size_t>(r)]; });

  // 3. Rank 0 writes metadata.json last and publishes the directory; the
  // old checkpoint it replaces is removed after.
  detail::Failures publish;
  bool replaced = false;
  if (world.holds(0))
    publish.run(0, [&] {
      const std::string text = detail::to_json(make_metadata(state, plan, world, bb, sums));
      detail::fault_point("metadata", 0);
      detail::File f = detail::File::create(detail::join(tmp, detail::kMetadataFile));
      f.write_at(text.data(), static_cast<int64_t>(text.size()), 0);
      f.sync();
      detail::sync_dir(tmp);
      detail::fault_point("publish", 0);
      replaced = detail::publish_dir(tmp, dir);
    });
  publish.agree(world, unchanged);
  detail::Failures cleanup;
  if (replaced)
    cleanup.run(0, [&] {
      try {
        remove_checkpoint_dir(tmp);
      } catch (const Error& e) {
        DT_THROW(e.what(), " (the new checkpoint is complete at ", dir,
                 "; the one it replaced was left at ", tmp, ")");
      }
    });
  cleanup.agree(world, "");
}

}  // namespace dtensor::checkpoint
