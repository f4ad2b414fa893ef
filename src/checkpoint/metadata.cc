#include "checkpoint/metadata.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/box.h"
#include "checkpoint/checksum.h"
#include "dtensor/checked.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint::detail {

using nlohmann::ordered_json;

namespace {

// Largest block a checkpoint may declare (a reader allocates at most
// min(block_bytes, the chunk's bytes), and chunk bytes lie in files whose
// real sizes are checked before reading).
constexpr int64_t kMaxBlockBytes = int64_t{1} << 30;

constexpr const char* kChecksumKey = "checksum";
constexpr const char* kChecksumPrefix = "xxh3-64:";

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

ordered_json shape_json(const Shape& s) { return s.vec(); }

// Doubles as JSON numbers (written with enough digits to read back the
// same bits); the values JSON lacks as strings.
ordered_json double_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

ordered_json value_json(const Value& v) {
  ordered_json j;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          j = {{"type", "bool"}, {"value", x}};
        } else if constexpr (std::is_same_v<T, int64_t>) {
          j = {{"type", "int64"}, {"value", x}};
        } else if constexpr (std::is_same_v<T, double>) {
          j = {{"type", "float64"}, {"value", double_json(x)}};
        } else if constexpr (std::is_same_v<T, std::string>) {
          j = {{"type", "string"}, {"value", x}};
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          j = {{"type", "int64[]"}, {"value", x}};
        } else {
          ordered_json a = ordered_json::array();
          for (double d : x) a.push_back(double_json(d));
          j = {{"type", "float64[]"}, {"value", a}};
        }
      },
      v);
  return j;
}

// Reading: every access names where in the file it failed.
struct Reader {
  const std::string& path;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    DT_THROW("checkpoint: ", path, " is not a valid checkpoint: ", where, ": ", what);
  }
  const ordered_json& field(const ordered_json& obj, const char* key,
                            const std::string& where) const {
    if (!obj.is_object()) fail(where, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(where, std::string("missing \"") + key + "\"");
    return *it;
  }
  int64_t integer(const ordered_json& j, const std::string& where) const {
    if (!j.is_number_integer()) fail(where, "expected an integer, got " + j.dump());
    return j.get<int64_t>();
  }
  std::string string(const ordered_json& j, const std::string& where) const {
    if (!j.is_string()) fail(where, "expected a string, got " + j.dump());
    return j.get<std::string>();
  }
  Shape shape(const ordered_json& j, const std::string& where) const {
    if (!j.is_array() || j.size() > static_cast<size_t>(kMaxDims))
      fail(where, "expected a list of at most " + std::to_string(kMaxDims) + " integers");
    Shape s;
    for (const auto& e : j) {
      const int64_t v = integer(e, where);
      if (v < 0) fail(where, "negative size or offset " + std::to_string(v));
      s.push_back(v);
    }
    return s;
  }
  double number(const ordered_json& j, const std::string& where) const {
    if (j.is_string()) {
      const std::string s = j.get<std::string>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    if (!j.is_number()) fail(where, "expected a number, got " + j.dump());
    return j.get<double>();
  }
  Value value(const ordered_json& j, const std::string& where) const {
    const std::string type = string(field(j, "type", where), where + ".type");
    const ordered_json& v = field(j, "value", where);
    if (type == "bool") {
      if (!v.is_boolean()) fail(where, "expected true or false");
      return v.get<bool>();
    }
    if (type == "int64") return integer(v, where);
    if (type == "float64") return number(v, where);
    if (type == "string") return string(v, where);
    if (!v.is_array()) fail(where, "expected a list");
    if (type == "int64[]") {
      std::vector<int64_t> out;
      for (const auto& e : v) out.push_back(integer(e, where));
      return out;
    }
    if (type == "float64[]") {
      std::vector<double> out;
      for (const auto& e : v) out.push_back(number(e, where));
      return out;
    }
    fail(where, "unknown value type \"" + type + "\"");
  }
};

Box whole_box(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

// The checksum of a metadata.json, over its content without the checksum
// member: the compact dump of the parsed JSON, so that what is checked is
// what is read (layout and whitespace are not content; every key, value
// and the order of keys is).
std::string content_checksum(const ordered_json& without_checksum) {
  const std::string canonical = without_checksum.dump();
  return std::string(kChecksumPrefix) +
         hex64(checksum(canonical.data(), static_cast<int64_t>(canonical.size())));
}

std::string tensor_where(const std::string& name) { return "tensor '" + name + "'"; }

// Chunks must lie inside the tensor, have the bytes their sizes give, sit
// inside their file, and together cover the tensor exactly once.
void validate_tensor(const Reader& r, const Metadata& md, const std::string& name,
                     const TensorInfo& t) {
  const std::string where = tensor_where(name);
  const int64_t numel = checked_numel(t.shape, "checkpoint");
  int64_t covered = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const ChunkInfo& c = t.chunks[i];
    const std::string cw = where + ", chunk " + std::to_string(i);
    if (c.offsets.size() != t.shape.size() || c.sizes.size() != t.shape.size())
      r.fail(cw, "offsets and sizes need " + std::to_string(t.shape.size()) + " entries");
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (c.offsets[d] > t.shape[d] || c.sizes[d] > t.shape[d] - c.offsets[d])
        r.fail(cw, "reaches past the tensor's shape " + to_string(t.shape) + " on dim " +
                       std::to_string(d));
    const int64_t n = checked_numel(c.sizes, "checkpoint");
    const int64_t bytes = checked_bytes(n, itemsize(t.dtype), "checkpoint");
    if (c.byte_size != bytes)
      r.fail(cw, "byte_size " + std::to_string(c.byte_size) + " but sizes " +
                     to_string(c.sizes) + " of " + dtype_name(t.dtype) + " need " +
                     std::to_string(bytes));
    const auto blocks = static_cast<size_t>((bytes + md.block_bytes - 1) / md.block_bytes);
    if (c.checksums.size() != blocks)
      r.fail(cw, std::to_string(c.checksums.size()) + " checksums for " +
                     std::to_string(blocks) + " blocks");
    auto f = md.files.find(c.file);
    if (f == md.files.end()) r.fail(cw, "names file \"" + c.file + "\", which \"files\" lacks");
    if (c.byte_offset < 0 || c.byte_offset > f->second - c.byte_size)
      r.fail(cw, "bytes " + std::to_string(c.byte_offset) + "+" + std::to_string(c.byte_size) +
                     " lie outside " + c.file + " (" + std::to_string(f->second) + " bytes)");
    covered = checked_add(covered, n, "checkpoint");
  }
  if (covered != numel)
    r.fail(where, "its chunks hold " + std::to_string(covered) + " elements, the shape " +
                      to_string(t.shape) + " has " + std::to_string(numel));
  // Every element held exactly once, checked at any number of chunks (a
  // check that only ran below some count would let a large checkpoint load
  // wrong data).
  std::vector<Box> boxes;
  boxes.reserve(t.chunks.size());
  for (const ChunkInfo& c : t.chunks) boxes.push_back(Box{c.offsets, c.sizes});
  const std::optional<Shape> bad = miscovered_element(boxes, whole_box(t.shape));
  if (!bad) return;
  std::vector<size_t> holders;
  for (size_t i = 0; i < boxes.size(); ++i)
    if (boxes[i].numel() > 0 && intersect(boxes[i], Box{*bad, Shape(bad->size(), 1)}))
      holders.push_back(i);
  std::string held = holders.empty() ? "no chunk" : "chunks";
  for (size_t k = 0; k < holders.size(); ++k)
    held += (k == 0 ? " " : k + 1 == holders.size() ? " and " : ", ") + std::to_string(holders[k]);
  r.fail(where, "element " + to_string(*bad) + " is held by " + held +
                    " (the chunks must hold every element exactly once)");
}

}  // namespace

std::string data_file_name(int rank) { return "data-" + std::to_string(rank) + ".bin"; }

bool is_checkpoint_file_name(const std::string& name) {
  if (name == kMetadataFile) return true;
  const std::string head = "data-", tail = ".bin";
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return digits.find_first_not_of("0123456789") == std::string::npos &&
         (digits == "0" || digits[0] != '0') && digits.size() <= 10;
}

std::string reseal_metadata(const std::string& text) {
  ordered_json j = ordered_json::parse(text);
  j.erase(kChecksumKey);
  j[kChecksumKey] = content_checksum(j);
  return j.dump(1) + "\n";
}

bool has_checkpoint_format(const std::string& text) {
  const ordered_json j = ordered_json::parse(text, nullptr, false);
  if (!j.is_object()) return false;
  const auto it = j.find("format");
  return it != j.end() && it->is_string() && it->get<std::string>() == kFormatName;
}

std::string to_json(const Metadata& md) {
  ordered_json j;
  j["format"] = kFormatName;
  j["version"] = md.version;
  j["world_size"] = md.world_size;
  j["block_bytes"] = md.block_bytes;
  j["files"] = ordered_json::object();
  for (const auto& [file, bytes] : md.files) j["files"][file] = bytes;
  j["tensors"] = ordered_json::object();
  for (const auto& [name, t] : md.tensors) {
    ordered_json tj;
    tj["shape"] = shape_json(t.shape);
    tj["dtype"] = dtype_name(t.dtype);
    tj["saved_layout"] = t.saved_layout;
    tj["chunks"] = ordered_json::array();
    for (const ChunkInfo& c : t.chunks) {
      ordered_json cj;
      cj["offsets"] = shape_json(c.offsets);
      cj["sizes"] = shape_json(c.sizes);
      cj["file"] = c.file;
      cj["byte_offset"] = c.byte_offset;
      cj["byte_size"] = c.byte_size;
      ordered_json sums = ordered_json::array();
      for (uint64_t s : c.checksums) sums.push_back(hex64(s));
      cj["checksums"] = sums;
      tj["chunks"].push_back(cj);
    }
    j["tensors"][name] = tj;
  }
  j["values"] = ordered_json::object();
  for (const auto& [name, v] : md.values) j["values"][name] = value_json(v);
  j[kChecksumKey] = content_checksum(j);
  return j.dump(1) + "\n";
}

Metadata parse_metadata(const std::string& text, const std::string& path) {
  const Reader r{path};
  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    r.fail("the file", std::string("not valid JSON (") + e.what() + ")");
  }
  Metadata md;
  if (r.string(r.field(j, "format", "top level"), "format") != kFormatName)
    r.fail("format", std::string("expected \"") + kFormatName + "\"");
  const int64_t version = r.integer(r.field(j, "version", "top level"), "version");
  if (version < 1 || version > kFormatVersion)
    r.fail("version", "format version " + std::to_string(version) +
                          " (this dtensor reads versions 1 to " +
                          std::to_string(kFormatVersion) + "; a newer dtensor wrote it)");
  md.version = static_cast<int>(version);
  // The metadata checks itself before any of it is believed: an edited step
  // count, epoch or chunk offset would otherwise load as a valid state.
  // Version 1 (before checksums) has none and is read as it was.
  const auto sum = j.find(kChecksumKey);
  if (sum == j.end()) {
    if (version >= 2)
      r.fail(kChecksumKey, "missing (format version " + std::to_string(version) +
                               " records the checksum of its content)");
  } else {
    const std::string recorded = r.string(*sum, kChecksumKey);
    j.erase(sum);
    const std::string actual = content_checksum(j);
    if (recorded != actual)
      DT_THROW("checkpoint: ", path, " is corrupted: its content has checksum ", actual,
               " but it records ", recorded,
               " (the file was changed after dtensor wrote it; nothing was loaded)");
  }
  const int64_t world_size = r.integer(r.field(j, "world_size", "top level"), "world_size");
  if (world_size < 1 || world_size > (int64_t{1} << 30))
    r.fail("world_size", std::to_string(world_size) + " (expected a positive rank count)");
  md.world_size = static_cast<int>(world_size);
  md.block_bytes = r.integer(r.field(j, "block_bytes", "top level"), "block_bytes");
  if (md.block_bytes < 1 || md.block_bytes > kMaxBlockBytes)
    r.fail("block_bytes", std::to_string(md.block_bytes) + " (expected 1 to " +
                              std::to_string(kMaxBlockBytes) + ")");
  const ordered_json& files = r.field(j, "files", "top level");
  if (!files.is_object()) r.fail("files", "expected an object");
  for (const auto& [file, bytes] : files.items()) {
    if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
      r.fail("files", "\"" + file + "\" is not a plain file name");
    md.files[file] = r.integer(bytes, "files." + file);
    if (md.files[file] < 0) r.fail("files." + file, "negative size");
  }
  const ordered_json& tensors = r.field(j, "tensors", "top level");
  if (!tensors.is_object()) r.fail("tensors", "expected an object");
  for (const auto& [name, tj] : tensors.items()) {
    const std::string where = tensor_where(name);
    TensorInfo t;
    t.shape = r.shape(r.field(tj, "shape", where), where + ".shape");
    const std::string dtype = r.string(r.field(tj, "dtype", where), where + ".dtype");
    try {
      t.dtype = parse_dtype(dtype);
    } catch (const Error&) {
      r.fail(where + ".dtype", "unknown dtype \"" + dtype + "\"");
    }
    if (tj.contains("saved_layout"))
      t.saved_layout = r.string(tj["saved_layout"], where + ".saved_layout");
    const ordered_json& chunks = r.field(tj, "chunks", where);
    if (!chunks.is_array()) r.fail(where + ".chunks", "expected a list");
    for (const auto& cj : chunks) {
      const std::string cw = where + ", chunk " + std::to_string(t.chunks.size());
      ChunkInfo c;
      c.offsets = r.shape(r.field(cj, "offsets", cw), cw + ".offsets");
      c.sizes = r.shape(r.field(cj, "sizes", cw), cw + ".sizes");
      c.file = r.string(r.field(cj, "file", cw), cw + ".file");
      c.byte_offset = r.integer(r.field(cj, "byte_offset", cw), cw + ".byte_offset");
      c.byte_size = r.integer(r.field(cj, "byte_size", cw), cw + ".byte_size");
      const ordered_json& sums = r.field(cj, "checksums", cw);
      if (!sums.is_array()) r.fail(cw + ".checksums", "expected a list");
      for (const auto& s : sums) {
        const std::string hex = r.string(s, cw + ".checksums");
        char* end = nullptr;
        const unsigned long long v = std::strtoull(hex.c_str(), &end, 16);
        if (hex.empty() || hex.size() > 16 || *end != '\0')
          r.fail(cw + ".checksums", "\"" + hex + "\" is not a 64-bit hex number");
        c.checksums.push_back(static_cast<uint64_t>(v));
      }
      t.chunks.push_back(std::move(c));
    }
    validate_tensor(r, md, name, t);
    md.tensors[name] = std::move(t);
  }
  const ordered_json& values = r.field(j, "values", "top level");
  if (!values.is_object()) r.fail("values", "expected an object");
  for (const auto& [name, vj] : values.items())
    md.values[name] = r.value(vj, "value '" + name + "'");
  return md;
}

}  // namespace dtensor::checkpoint::detail
