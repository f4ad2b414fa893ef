// checkpoint::export_safetensors / import_safetensors: one Hugging Face
// safetensors file (8-byte little-endian header length N, N bytes of JSON
// header padded with spaces so the data starts 8-byte aligned, then every
// tensor's row-major little-endian bytes, contiguous, in name order).
//
// Export: every process computes the same header from the global shapes;
// the process holding rank 0 creates PATH.partial with the header and
// sizes it; after a barrier every rank writes the boxes of the tensors it
// holds straight to their row-major place in the file (each distinct box
// once, spread over its holders; Partial placements reduced first; plain
// tensors by rank 0), syncs, and after a second barrier rank 0 renames
// PATH.partial to PATH. No rank builds a whole tensor it does not hold.
// Each stage ends with every rank agreeing (detail::Failures): a failure
// on any rank throws the same dtensor::Error on all, and PATH is left as
// it was.
//
// Import: every process reads and validates the header (a file is input:
// every length, offset and size is checked before it is used), checks the
// state against it, then each rank reads only its shard's box out of each
// tensor's bytes, in place, as load() does.
//
// Value entries live in "__metadata__" as text (safetensors_format.h);
// import parses the text as the type of the state's Value of that name (so
// "pt" of a Hugging Face "format" entry reads into a string Value) and
// throws when it is not one.

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "checkpoint/chunk_io.h"
#include "checkpoint/common.h"
#include "checkpoint/file_io.h"
#include "checkpoint/safetensors_format.h"
#include "dtensor/checked.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; dtensor writes its memory as it is");

using detail::Box;
using detail::decode_value;
using detail::encode_value;
using detail::Header;
using detail::InTensor;
using detail::kMaxHeaderBytes;
using detail::kMetadataKey;
using detail::read_header;
using detail::shape_text;
using detail::st_name;
using detail::value_type;
using nlohmann::ordered_json;

constexpr const char* kExport = "checkpoint::export_safetensors";
constexpr const char* kImport = "checkpoint::import_safetensors";
// Reads go through blocks of this size (no checksums: safetensors has none).
constexpr int64_t kReadBlockBytes = int64_t{4} << 20;

// ---- writing --------------------------------------------------------------------------

// A box of a tensor and the rank that writes it.
struct Piece {
  Box box;
  int writer = 0;
};

struct OutTensor {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  int64_t begin = 0;  // in the data buffer
  int64_t bytes = 0;
  DTensor dtensor;    // Partial dims reduced; undefined for a plain tensor
  Tensor plain;
  std::vector<Piece> pieces;
};

struct ExportPlan {
  std::vector<OutTensor> tensors;
  std::string header;  // the 8-byte length, then the padded JSON
  int64_t file_bytes = 0;
};

// Checks the state and lays out the file; no collective (every process
// computes the same plan from the global shapes).
ExportPlan make_header(const StateDict& state, const std::string& path) {
  ExportPlan plan;
  ordered_json meta = ordered_json::object();
  for (const auto& [name, entry] : state)
    if (const auto* v = std::get_if<Value>(&entry)) meta[name] = encode_value(*v);
  ordered_json header = ordered_json::object();
  if (!meta.empty()) header[kMetadataKey] = meta;
  int64_t offset = 0;
  for (const auto& [name, entry] : state) {
    if (std::holds_alternative<Value>(entry)) continue;
    DT_CHECK(name != kMetadataKey, kExport, ": ", path, ": a tensor cannot be named '",
             kMetadataKey, "' (safetensors keeps that key for the metadata)");
    OutTensor t;
    t.name = name;
    if (const auto* d = std::get_if<DTensor>(&entry)) {
      DT_CHECK(d->defined(), kExport, ": entry '", name, "' is an empty DTensor");
      t.shape = d->shape();
      t.dtype = d->dtype();
      t.dtensor = *d;
    } else {
      const Tensor& p = std::get<Tensor>(entry);
      DT_CHECK(p.defined(), kExport, ": entry '", name, "' is an undefined Tensor");
      t.shape = p.shape();
      t.dtype = p.dtype();
      t.plain = p;
    }
    const char* st = st_name(t.dtype);
    t.begin = offset;
    t.bytes = checked_bytes(checked_numel(t.shape, kExport), itemsize(t.dtype), kExport);
    offset = checked_add(offset, t.bytes, kExport);
    ordered_json tj;
    tj["dtype"] = st;
    tj["shape"] = t.shape.vec();
    tj["data_offsets"] = {t.begin, offset};
    header[name] = tj;
    plan.tensors.push_back(std::move(t));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    DT_THROW(kExport, ": cannot write the header of ", path, ": ", e.what(),
             " (names and string values must be valid UTF-8)");
  }
  // Spaces pad the header so that the data starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  DT_CHECK(static_cast<int64_t>(text.size()) <= kMaxHeaderBytes, kExport, ": the header of ",
           path, " would have ", text.size(), " bytes; safetensors readers accept at most ",
           kMaxHeaderBytes);
  uint64_t n = text.size();
  plan.header.resize(8);
  for (int i = 0; i < 8; ++i) plan.header[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  plan.header += text;
  plan.file_bytes =
      checked_add(static_cast<int64_t>(plan.header.size()), offset, kExport);
  return plan;
}

// Who writes what: each distinct non-empty box of a DTensor by the holder
// that has written least so far (ties: the lowest rank); plain tensors by
// rank 0.
void plan_writers(ExportPlan& plan, const World& world) {
  std::vector<int64_t> written(static_cast<size_t>(world.size()), 0);
  for (OutTensor& t : plan.tensors) {
    if (t.bytes == 0) continue;
    if (!t.dtensor.defined()) {
      t.pieces.push_back({detail::whole(t.shape), 0});
      written[0] += t.bytes;
      continue;
    }
    std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::vector<int>> holders;
    for (int r : t.dtensor.mesh().ranks()) {
      const Box b = detail::box_of(t.dtensor.spec(), r);
      if (b.numel() > 0) holders[{b.offsets.vec(), b.sizes.vec()}].push_back(r);
    }
    for (const auto& [key, ranks] : holders) {
      Piece p{Box{Shape(key.first), Shape(key.second)}, 0};
      p.writer = *std::min_element(ranks.begin(), ranks.end(), [&](int a, int b) {
        const int64_t wa = written[static_cast<size_t>(a)];
        const int64_t wb = written[static_cast<size_t>(b)];
        return wa != wb ? wa < wb : a < b;
      });
      written[static_cast<size_t>(p.writer)] +=
          p.box.numel() * static_cast<int64_t>(itemsize(t.dtype));
      t.pieces.push_back(std::move(p));
    }
  }
}

bool writes_anything(const ExportPlan& plan, int rank) {
  for (const OutTensor& t : plan.tensors)
    for (const Piece& p : t.pieces)
      if (p.writer == rank) return true;
  return false;
}

// Writes rank's pieces: each run of a box at its row-major place.
void write_pieces(const ExportPlan& plan, int rank, detail::File& file) {
  const auto data_start = static_cast<int64_t>(plan.header.size());
  for (const OutTensor& t : plan.tensors) {
    const Box all = detail::whole(t.shape);
    const auto item = itemsize(t.dtype);
    for (const Piece& p : t.pieces) {
      if (p.writer != rank) continue;
      const Tensor data =
          t.dtensor.defined() ? t.dtensor.to_local(p.writer).contiguous() : t.plain.contiguous();
      DT_CHECK(static_cast<int64_t>(data.nbytes()) ==
                   p.box.numel() * static_cast<int64_t>(item),
               kExport, ": internal error: rank ", p.writer, "'s part of '", t.name, "' has ",
               data.nbytes(), " bytes, its box ", to_string(p.box.sizes), " needs ",
               p.box.numel() * static_cast<int64_t>(item));
      const char* src = static_cast<const char*>(data.raw_data());
      for (detail::RunIter it(p.box, p.box, all, item); !it.done(); it.next()) {
        const detail::Run& run = it.run();
        file.write_at(src + run.src, run.bytes, data_start + t.begin + run.dst);
      }
    }
  }
}

std::string parent_of(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

// The state against the header, before a byte of data is read: names,
// kinds, dtypes, shapes, and the values decoded. Returns the names to load.
std::vector<std::string> check_safetensors_state(const StateDict& state, const Header& h,
                                                 const std::string& path,
                                                 const LoadOptions& options,
                                                 std::map<std::string, Value>& values) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : state) {
    const bool is_value = std::holds_alternative<Value>(entry);
    const bool in_tensors = h.tensors.count(name) != 0;
    const bool in_meta = h.metadata.count(name) != 0;
    if (!(is_value ? in_meta : in_tensors)) {
      DT_CHECK(!(is_value ? in_tensors : in_meta), kImport, ": '", name, "' is ",
               detail::kind_of(entry), " in the state but ",
               is_value ? "a tensor" : "a \"__metadata__\" string", " in ", path);
      DT_CHECK(!options.strict, kImport, ": ", path, " has no ",
               is_value ? "\"__metadata__\" entry" : "tensor", " '", name,
               "' (the state asks for ", detail::kind_of(entry),
               "); import with strict = false to leave such entries as they are");
      continue;
    }
    if (is_value) {
      const Value& like = std::get<Value>(entry);
      const std::string& text = h.metadata.at(name);
      std::optional<Value> v = decode_value(text, like);
      DT_CHECK(v.has_value(), kImport, ": \"__metadata__\" entry '", name, "' of ", path, " is \"",
               text, "\", which is not ", value_type(like), " text (the state's value '", name,
               "' is ", value_type(like), ")");
      values[name] = std::move(*v);
      names.push_back(name);
      continue;
    }
    const InTensor& t = h.tensors.at(name);
    DT_CHECK(t.st->has_dtype, kImport, ": tensor '", name, "' is ", t.st->name, " in ", path,
             ", a dtype dtensor does not have (it reads F64, F32, BF16, F16, I64 and BOOL)");
    if (const auto kind = detail::tensor_kind(entry, name, kImport)) {
      DT_CHECK(kind->shape.vec() == t.shape, kImport, ": tensor '", name, "' has shape ",
               shape_text(t.shape), " in ", path, " but ", to_string(kind->shape),
               " in the state");
      detail::check_dtype(std::string(kImport) + ": tensor '" + name + "' is " + t.st->name +
                              " (" + dtype_name(t.st->dtype) + ") in " + path,
                          t.st->dtype, kind->dtype, options.convert_dtype, "import");
    } else {
      DT_CHECK(t.shape.size() <= static_cast<size_t>(kMaxDims), kImport, ": tensor '", name,
               "' has shape ", shape_text(t.shape), " in ", path, ", more than the ", kMaxDims,
               " dims dtensor supports");
    }
    names.push_back(name);
  }
  return names;
}

// A BOOL byte must be 0 or 1; others are made 1 (so the memory stays a
// valid bool) and reported.
void check_bools(char* data, int64_t n, const std::string& name, const std::string& path) {
  int64_t bad = -1;
  unsigned value = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(data[i]);
    if (b > 1) {
      if (bad < 0) {
        bad = i;
        value = b;
      }
      data[i] = 1;
    }
  }
  DT_CHECK(bad < 0, kImport, ": tensor '", name, "' of ", path, " is BOOL but holds byte value ",
           value, " (expected 0 or 1)");
}

// Reads the box `target` of tensor `name` into `data` (row-major).
void read_safetensors_box(const detail::File& file, const Header& h, const std::string& name,
              const Box& target, char* data, std::vector<char>& scratch,
              const std::string& path) {
  const InTensor& t = h.tensors.at(name);
  const detail::ChunkSource src{&file,
                                h.data_start + t.begin,
                                t.end - t.begin,
                                kReadBlockBytes,
                                nullptr,
                                "tensor '" + name + "'"};
  detail::read_part(src, detail::whole(Shape(t.shape)), target, target, data,
                    itemsize(t.st->dtype), scratch);
  if (t.st->dtype == DType::Bool) check_bools(data, target.numel(), name, path);
}

}  // namespace

void export_safetensors(const StateDict& state, const std::string& path,
                        const SaveOptions& options) {
  DT_CHECK(!path.empty(), kExport, ": the path is empty (expected a file name)");
  const std::string tmp = path + ".partial";
  const World world = detail::world_of(state, options.world, kExport);
  const std::string unchanged = "; " + path + " is unchanged";
  const int first = world.held_ranks().front();

  // 1. Every process lays out the file (the same way) and checks the state.
  ExportPlan plan;
  detail::Failures check;
  check.run(first, [&] { plan = make_header(state, path); });
  check.agree(world, unchanged);

  // 2. Partial placements are reduced (collectives, on every process), and
  // the boxes are given their writers.
  for (OutTensor& t : plan.tensors)
    if (t.dtensor.defined() && t.dtensor.spec().has_partial())
      t.dtensor = t.dtensor.redistribute(detail::without_partial(t.dtensor.placements()));
  plan_writers(plan, world);

  // 3. Rank 0 creates PATH.partial with the header, sized to the whole file.
  detail::Failures create;
  if (world.holds(0))
    create.run(0, [&] {
      detail::File f = detail::File::create(tmp);
      f.write_at(plan.header.data(), static_cast<int64_t>(plan.header.size()), 0);
      f.resize(plan.file_bytes);
    });
  create.agree(world, unchanged);

  // 4. Every rank writes its pieces; each process then syncs the file once
  // (rank 0's process always: the header). On a failure rank 0 removes
  // PATH.partial.
  detail::Failures write;
  std::optional<detail::File> file;
  for (int r : world.held_ranks())
    write.run(r, [&] {
      if (r != 0 && !writes_anything(plan, r)) return;
      if (!file) file.emplace(detail::File::open_write(tmp));
      write_pieces(plan, r, *file);
    });
  if (file) write.run(first, [&] { file->sync(); });
  file.reset();
  write.agree(world, unchanged, [&] {
    if (world.holds(0)) detail::Failures().run(0, [&] { detail::remove_all(tmp); });
  });

  // 5. Rank 0 publishes the file with one atomic rename.
  detail::Failures publish;
  if (world.holds(0))
    publish.run(0, [&] {
      DT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, kExport, ": cannot rename ", tmp,
               " to ", path, ": ", std::strerror(errno));
      detail::sync_dir(parent_of(path));
    });
  publish.agree(world, unchanged);
}

void import_safetensors(StateDict& state, const std::string& path, const LoadOptions& options) {
  const World world = detail::world_of(state, options.world, kImport);
  const int first = world.held_ranks().front();

  // 1. Every process reads and checks the header and the state against it
  // (they read the same file, but a rank must not go on to read data while
  // another throws).
  std::optional<detail::File> file;
  Header header;
  std::vector<std::string> names;
  std::map<std::string, Value> values;
  detail::Failures check;
  check.run(first, [&] {
    DT_CHECK(detail::exists(path), kImport, ": ", path, " does not exist");
    file.emplace(detail::File::open_read(path));
    header = read_header(*file, path);
    names = check_safetensors_state(state, header, path, options, values);
  });
  check.agree(world, "");

  // 2. Each held rank reads its part of every DTensor; each process reads
  // the plain tensors whole.
  detail::read_state(
      world, state, names,
      [&](const std::string& name, const Box& box, char* data, std::vector<char>& scratch) {
        read_safetensors_box(*file, header, name, box, data, scratch, path);
      },
      [&](const std::string& name) { return header.tensors.at(name).st->dtype; },
      [&](const std::string& name) {
        const InTensor& t = header.tensors.at(name);
        return Tensor::empty(Shape(t.shape), t.st->dtype);
      },
      values);
}

}  // namespace dtensor::checkpoint
