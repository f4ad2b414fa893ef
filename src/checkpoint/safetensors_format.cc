// The safetensors format (safetensors_format.h): dtypes, values as
// __metadata__ text, and reading and validating a file's header.
#include "checkpoint/safetensors_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dtensor/checked.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint::detail {

using nlohmann::ordered_json;

namespace {
constexpr const char* kImport = "checkpoint::import_safetensors";
}  // namespace

// ---- dtypes -------------------------------------------------------------------------

namespace {

constexpr StDType kStDTypes[] = {
    {"BOOL", 8, true, DType::Bool},       {"U8", 8, false, DType::Bool},
    {"I8", 8, false, DType::Bool},        {"F8_E5M2", 8, false, DType::Bool},
    {"F8_E4M3", 8, false, DType::Bool},   {"F8_E8M0", 8, false, DType::Bool},
    {"I16", 16, false, DType::Bool},      {"U16", 16, false, DType::Bool},
    {"F16", 16, true, DType::Float16},    {"BF16", 16, true, DType::BFloat16},
    {"I32", 32, false, DType::Bool},      {"U32", 32, false, DType::Bool},
    {"F32", 32, true, DType::Float32},    {"F64", 64, true, DType::Float64},
    {"I64", 64, true, DType::Int64},      {"U64", 64, false, DType::Bool},
    {"C64", 64, false, DType::Bool},      {"F4", 4, false, DType::Bool},
    {"F6_E2M3", 6, false, DType::Bool},   {"F6_E3M2", 6, false, DType::Bool},
};

}  // namespace

const StDType* find_st_dtype(const std::string& name) {
  for (const StDType& d : kStDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const char* st_name(DType dtype) {
  for (const StDType& d : kStDTypes)
    if (d.has_dtype && d.dtype == dtype) return d.name;
  DT_THROW("checkpoint: dtype ", dtype_name(dtype),
           " has no safetensors equivalent (safetensors files hold F64, F32, BF16, F16, I64 "
           "and BOOL from dtensor)");
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

namespace {

ordered_json safetensors_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;  // dumped as the shortest text that reads back the same bits
}

}  // namespace

std::string encode_value(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          const ordered_json j = safetensors_double(x);
          return j.is_string() ? j.get<std::string>() : j.dump();
        } else if constexpr (std::is_same_v<T, std::string>) {
          return x;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return ordered_json(x).dump();
        } else {
          ordered_json a = ordered_json::array();
          for (double d : x) a.push_back(safetensors_double(d));
          return a.dump();
        }
      },
      v);
}

namespace {

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

}  // namespace

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

// ---- reading --------------------------------------------------------------------------

namespace {

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
}  // namespace

Header read_header(const File& f, const std::string& path) {
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
    if (t->begin != at) {
      const std::string before =
          prev ? "tensor '" + *prev + "' before it ends" : std::string("the data starts");
      invalid(path, "tensor '" + *name + "' starts at byte " + std::to_string(t->begin) +
                        " of the data but " + before + " at " + std::to_string(at) +
                        " (tensors must be contiguous: no holes, no overlaps)");
    }
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

}  // namespace dtensor::checkpoint::detail
