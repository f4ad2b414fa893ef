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
// Value entries live in "__metadata__" (safetensors allows only strings
// there) as text: a string as it is; bool "true"/"false"; int64 in
// decimal; float64 as the shortest text that reads back the same bits
// ("nan", "inf", "-inf" for those); int64[] and float64[] as a JSON array
// ("[1,2]", "[0.5,\"nan\"]"). Import parses the text as the type of the
// state's Value of that name (so "pt" of a Hugging Face "format" entry
// reads into a string Value) and throws when it is not one.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "checkpoint/chunk_io.h"
#include "checkpoint/common.h"
#include "checkpoint/file_io.h"
#include "dtensor/checked.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; dtensor writes its memory as it is");

using detail::Box;
using nlohmann::ordered_json;

constexpr const char* kExport = "checkpoint::export_safetensors";
constexpr const char* kImport = "checkpoint::import_safetensors";
constexpr const char* kMetadataKey = "__metadata__";
// The largest header the reference reader accepts.
constexpr int64_t kMaxHeaderBytes = 100'000'000;
// Reads go through blocks of this size (no checksums: safetensors has none).
constexpr int64_t kReadBlockBytes = int64_t{4} << 20;

// ---- dtypes -------------------------------------------------------------------------

// The safetensors dtypes: their size in bits and the dtensor DType, if any.
struct StDType {
  const char* name;
  int bits;
  bool has_dtype;
  DType dtype;
};

constexpr StDType kStDTypes[] = {
    {"BOOL", 8, true, DType::Bool},       {"U8", 8, false, DType::Bool},
    {"I8", 8, false, DType::Bool},        {"F8_E5M2", 8, false, DType::Bool},
    {"F8_E4M3", 8, false, DType::Bool},   {"F8_E8M0", 8, false, DType::Bool},
    {"I16", 16, false, DType::Bool},      {"U16", 16, false, DType::Bool},
    {"F16", 16, false, DType::Bool},      {"BF16", 16, false, DType::Bool},
    {"I32", 32, false, DType::Bool},      {"U32", 32, false, DType::Bool},
    {"F32", 32, true, DType::Float32},    {"F64", 64, true, DType::Float64},
    {"I64", 64, true, DType::Int64},      {"U64", 64, false, DType::Bool},
    {"C64", 64, false, DType::Bool},      {"F4", 4, false, DType::Bool},
    {"F6_E2M3", 6, false, DType::Bool},   {"F6_E3M2", 6, false, DType::Bool},
};

const StDType* find_st_dtype(const std::string& name) {
  for (const StDType& d : kStDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const char* st_name(DType dtype) {
  for (const StDType& d : kStDTypes)
    if (d.has_dtype && d.dtype == dtype) return d.name;
  DT_THROW("checkpoint: dtype ", dtype_name(dtype),
           " has no safetensors equivalent (safetensors files hold F32, F64, I64 and BOOL "
           "from dtensor)");
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

// ---- values in __metadata__ -----------------------------------------------------------

const char* value_type(const Value& v) {
  switch (v.index()) {
    case 0: return "bool";
    case 1: return "int64";
    case 2: return "float64";
    case 3: return "string";
    case 4: return "int64[]";
    default: return "float64[]";
  }
}

ordered_json double_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;  // dumped as the shortest text that reads back the same bits
}

std::string encode_value(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          const ordered_json j = double_json(x);
          return j.is_string() ? j.get<std::string>() : j.dump();
        } else if constexpr (std::is_same_v<T, std::string>) {
          return x;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return ordered_json(x).dump();
        } else {
          ordered_json a = ordered_json::array();
          for (double d : x) a.push_back(double_json(d));
          return a.dump();
        }
      },
      v);
}

std::optional<int64_t> parse_int64(const std::string& s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(const std::string& s) {
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<double> json_double(const ordered_json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan" || s == "inf" || s == "-inf") return parse_double(s);
    return std::nullopt;
  }
  if (!j.is_number()) return std::nullopt;
  return j.get<double>();
}

// The text of a __metadata__ entry as a value of the type of `like`.
std::optional<Value> decode_value(const std::string& text, const Value& like) {
  switch (like.index()) {
    case 0:
      if (text == "true") return Value(true);
      if (text == "false") return Value(false);
      return std::nullopt;
    case 1:
      if (auto v = parse_int64(text)) return Value(*v);
      return std::nullopt;
    case 2:
      if (auto v = parse_double(text)) return Value(*v);
      return std::nullopt;
    case 3:
      return Value(text);
    default:
      break;
  }
  const ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return std::nullopt;
  if (like.index() == 4) {
    std::vector<int64_t> out;
    for (const auto& e : j) {
      if (!e.is_number_integer() ||
          (e.is_number_unsigned() &&
           e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
        return std::nullopt;
      out.push_back(e.get<int64_t>());
    }
    return Value(std::move(out));
  }
  std::vector<double> out;
  for (const auto& e : j) {
    const std::optional<double> d = json_double(e);
    if (!d) return std::nullopt;
    out.push_back(*d);
  }
  return Value(std::move(out));
}

// ---- writing --------------------------------------------------------------------------

// A file every process opens for writing (without truncating it).
class Writer {
 public:
  explicit Writer(std::string path)
      : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CLOEXEC)) {
    DT_CHECK(fd_ >= 0, "checkpoint: cannot open ", path_, " for writing: ", std::strerror(errno));
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer() { ::close(fd_); }

  void write_at(const void* data, int64_t n, int64_t offset) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t put = ::pwrite(fd_, p, static_cast<size_t>(n), offset);
      if (put < 0 && errno == EINTR) continue;
      DT_CHECK(put > 0, "checkpoint: writing ", path_, ": ", std::strerror(errno));
      p += put;
      n -= put;
      offset += put;
    }
  }
  void sync() {
    DT_CHECK(::fsync(fd_) == 0, "checkpoint: fsync of ", path_, " failed: ",
             std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_;
};

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
void write_pieces(const ExportPlan& plan, int rank, Writer& file) {
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

// ---- reading --------------------------------------------------------------------------

struct InTensor {
  const StDType* st = nullptr;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // in the data buffer
  int64_t end = 0;
};

struct Header {
  int64_t data_start = 0;
  std::map<std::string, InTensor> tensors;
  std::map<std::string, std::string> metadata;
};

[[noreturn]] void invalid(const std::string& path, const std::string& what) {
  DT_THROW(kImport, ": ", path, " is not a valid safetensors file: ", what);
}

// A JSON integer that fits int64 and is not negative, else nullopt.
std::optional<int64_t> non_negative(const ordered_json& j) {
  if (!j.is_number_integer()) return std::nullopt;
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  const auto v = j.get<int64_t>();
  if (v < 0) return std::nullopt;
  return v;
}

InTensor parse_tensor(const std::string& path, const std::string& name, const ordered_json& j) {
  const std::string where = "tensor '" + name + "'";
  if (!j.is_object()) invalid(path, where + " is " + j.dump() + " (expected an object)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) invalid(path, where + " lacks \"" + key + "\"");
  InTensor t;
  const ordered_json& dt = j["dtype"];
  if (!dt.is_string()) invalid(path, where + ": dtype " + dt.dump() + " is not a string");
  t.st = find_st_dtype(dt.get<std::string>());
  if (t.st == nullptr) {
    std::string known;
    for (const StDType& d : kStDTypes) known += std::string(known.empty() ? "" : ", ") + d.name;
    invalid(path, where + ": unknown dtype " + dt.dump() + " (expected one of " + known + ")");
  }
  const ordered_json& sh = j["shape"];
  if (!sh.is_array()) invalid(path, where + ": shape " + sh.dump() + " is not a list");
  for (const auto& e : sh) {
    const std::optional<int64_t> v = non_negative(e);
    if (!v)
      invalid(path, where + ": shape " + sh.dump() + " has " + e.dump() +
                        " (expected sizes that are non-negative 64-bit integers)");
    t.shape.push_back(*v);
  }
  const ordered_json& off = j["data_offsets"];
  std::optional<int64_t> b, e;
  if (off.is_array() && off.size() == 2) {
    b = non_negative(off[0]);
    e = non_negative(off[1]);
  }
  if (!b || !e || *b > *e)
    invalid(path, where + ": data_offsets " + off.dump() +
                      " (expected [begin, end], non-negative integers, begin <= end)");
  t.begin = *b;
  t.end = *e;
  int64_t bits = t.st->bits;
  try {
    for (int64_t s : t.shape) bits = checked_mul(bits, s, "safetensors tensor size in bits");
  } catch (const Error& err) {
    invalid(path, where + ": shape " + shape_text(t.shape) + " is too large (" + err.what() + ")");
  }
  if (bits % 8 != 0)
    invalid(path, where + ": shape " + shape_text(t.shape) + " of " + t.st->name +
                      " is not a whole number of bytes");
  if (t.end - t.begin != bits / 8)
    invalid(path, where + ": data_offsets " + off.dump() + " hold " +
                      std::to_string(t.end - t.begin) + " bytes but shape " +
                      shape_text(t.shape) + " of " + t.st->name + " needs " +
                      std::to_string(bits / 8));
  return t;
}

// Reads and validates the header of an open file.
Header read_header(const detail::File& f, const std::string& path) {
  const int64_t size = f.size();
  if (size < 8)
    invalid(path, "it has " + std::to_string(size) +
                      " bytes, fewer than the 8 of the header length");
  unsigned char prefix[8];
  f.read_at(prefix, 8, 0, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > static_cast<uint64_t>(size - 8))
    invalid(path, "its header length " + std::to_string(n) +
                      " (the first 8 bytes, little-endian) exceeds the " +
                      std::to_string(size - 8) + " bytes after them (a truncated file?)");
  if (n > static_cast<uint64_t>(kMaxHeaderBytes))
    invalid(path, "its header length " + std::to_string(n) + " exceeds the " +
                      std::to_string(kMaxHeaderBytes) + " bytes a safetensors header may have");
  Header h;
  h.data_start = 8 + static_cast<int64_t>(n);
  std::string text(static_cast<size_t>(n), '\0');
  f.read_at(text.data(), static_cast<int64_t>(n), 8, "the header");
  if (text.empty() || text[0] != '{')
    invalid(path, "its header does not start with '{' (header length " + std::to_string(n) +
                      ")");
  // Keys seen in each open object: a name given twice is an error, not
  // "the last one wins".
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const auto on_event = [&](int, ordered_json::parse_event_t ev, ordered_json& parsed) {
    if (ev == ordered_json::parse_event_t::object_start) keys.emplace_back();
    if (ev == ordered_json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == ordered_json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  ordered_json j;
  try {
    j = ordered_json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    invalid(path, std::string("its header is not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) invalid(path, "its header names '" + duplicate + "' twice");
  if (!j.is_object()) invalid(path, "its header is not a JSON object");
  for (const auto& [name, v] : j.items()) {
    if (name == kMetadataKey) {
      if (!v.is_object())
        invalid(path, std::string("\"") + kMetadataKey + "\" is " + v.dump() +
                          " (expected an object of strings)");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          invalid(path, std::string("\"") + kMetadataKey + "\" entry '" + k + "' is " +
                            s.dump() + " (safetensors metadata values are strings)");
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    h.tensors[name] = parse_tensor(path, name, v);
  }
  // The tensors tile the data buffer: in offset order, each starts where
  // the one before ends, the first at 0, the last at the end of the file.
  std::vector<std::pair<const std::string*, const InTensor*>> order;
  for (const auto& [name, t] : h.tensors) order.emplace_back(&name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  int64_t at = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, t] : order) {
    if (t->begin != at)
      invalid(path, "tensor '" + *name + "' starts at byte " + std::to_string(t->begin) +
                        " of the data but " +
                        (prev ? "tensor '" + *prev + "' before it ends" : std::string("the data starts")) +
                        " at " + std::to_string(at) +
                        " (tensors must be contiguous: no holes, no overlaps)");
    at = t->end;
    prev = name;
  }
  const int64_t data_bytes = size - h.data_start;
  if (at != data_bytes)
    invalid(path, at > data_bytes
                      ? "it is truncated: its tensors need " + std::to_string(at) +
                            " bytes of data after the header, the file has " +
                            std::to_string(data_bytes)
                      : "it has " + std::to_string(data_bytes - at) +
                            " bytes after the end of its last tensor (at byte " +
                            std::to_string(at) + " of the data)");
  return h;
}

// The state against the header, before a byte of data is read: names,
// kinds, dtypes, shapes, and the values decoded. Returns the names to load.
std::vector<std::string> check_state(const StateDict& state, const Header& h,
                                     const std::string& path, bool strict,
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
      DT_CHECK(!strict, kImport, ": ", path, " has no ",
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
             ", a dtype dtensor does not have (it reads F32, F64, I64 and BOOL)");
    Shape shape;
    DType dtype = t.st->dtype;
    bool defined = true;
    if (const auto* d = std::get_if<DTensor>(&entry)) {
      DT_CHECK(d->defined(), kImport, ": entry '", name,
               "' is an empty DTensor (make it with its layout first)");
      shape = d->shape();
      dtype = d->dtype();
    } else {
      const Tensor& p = std::get<Tensor>(entry);
      defined = p.defined();
      if (defined) {
        shape = p.shape();
        dtype = p.dtype();
      } else {
        DT_CHECK(t.shape.size() <= static_cast<size_t>(kMaxDims), kImport, ": tensor '", name,
                 "' has shape ", shape_text(t.shape), " in ", path, ", more than the ",
                 kMaxDims, " dims dtensor supports");
      }
    }
    if (defined) {
      DT_CHECK(shape.vec() == t.shape, kImport, ": tensor '", name, "' has shape ",
               shape_text(t.shape), " in ", path, " but ", to_string(shape), " in the state");
      DT_CHECK(dtype == t.st->dtype, kImport, ": tensor '", name, "' is ", t.st->name, " (",
               dtype_name(t.st->dtype), ") in ", path, " but ", dtype_name(dtype),
               " in the state");
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
void read_box(const detail::File& file, const Header& h, const std::string& name,
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
  std::optional<Writer> file;
  for (int r : world.held_ranks())
    write.run(r, [&] {
      if (r != 0 && !writes_anything(plan, r)) return;
      if (!file) file.emplace(tmp);
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
    names = check_state(state, header, path, options.strict, values);
  });
  check.agree(world, "");

  // 2. Each held rank reads its part of every DTensor; each process reads
  // the plain tensors whole.
  std::vector<char> scratch;
  detail::read_state(
      world, state, names,
      [&](const std::string& name, const Box& box, char* data) {
        read_box(*file, header, name, box, data, scratch, path);
      },
      [&](const std::string& name) {
        const InTensor& t = header.tensors.at(name);
        return Tensor::empty(Shape(t.shape), t.st->dtype);
      },
      values);
}

}  // namespace dtensor::checkpoint
