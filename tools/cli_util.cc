// Helpers shared by the subcommands (see cli.h).
#include <algorithm>
#include <charconv>
#include <iomanip>
#include <sstream>

#include "cli.h"
#include "dtensor/error.h"

namespace dtensor::cli {

// Splits "a,b,c" at commas, trimming spaces around each item.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    items.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

// "18,2" (brackets allowed: "[18, 2]"; "" or "[]" is a 0-d tensor) -> [18, 2].
Shape parse_shape_list(const std::string& text) {
  std::string body = text;
  const size_t b = body.find_first_not_of(" \t");
  const size_t e = body.find_last_not_of(" \t");
  body = b == std::string::npos ? "" : body.substr(b, e - b + 1);
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']') body = body.substr(1, body.size() - 2);
  Shape shape;
  if (body.find_first_not_of(" \t") == std::string::npos) return shape;
  for (const std::string& item : split_list(body)) {
    int64_t v = -1;
    auto [next, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    const bool whole = next == item.data() + item.size() && !item.empty();
    DT_CHECK(ec != std::errc::result_out_of_range || !whole, "--shape ", quote(text), ": size ",
             quote(item), " does not fit int64 (at most ", INT64_MAX, ")");
    DT_CHECK(ec == std::errc() && whole && v >= 0,
             "--shape: expected a tensor shape like 18,2 (sizes >= 0 separated by commas), got ",
             quote(text));
    DT_CHECK(shape.size() < static_cast<size_t>(kMaxDims), "--shape ", quote(text),
             " has more than ", kMaxDims, " dims");
    shape.push_back(v);
  }
  return shape;
}

void check_shape_fits(const Shape& shape, DType dtype, const std::string& shape_text) {
  int64_t n = 0;
  try {
    n = checked_numel(shape, "--shape");
  } catch (const Error&) {
    DT_THROW("--shape ", quote(shape_text), ": the tensor has more elements than int64 can count (at most ",
             INT64_MAX, ")");
  }
  try {
    checked_bytes(n, itemsize(dtype), "--shape");
  } catch (const Error&) {
    DT_THROW("--shape ", quote(shape_text), ": ", n, " elements of ", dtype_short_name(dtype),
             " are more bytes than int64 can count (at most ", INT64_MAX, ")");
  }
}

Shape parse_mesh_arg(const std::string& mesh_text) {
  try {
    return parse_mesh_shape(mesh_text);
  } catch (const Error&) {
    DT_THROW("--mesh: expected a mesh shape like 2x4 (at most ", kMaxDims,
             " sizes >= 1 joined by 'x'), got ", quote(mesh_text));
  }
}

DeviceMesh make_mesh(const std::string& mesh_text, const std::string& names_text,
                     const World* world) {
  const Shape mesh_shape = parse_mesh_arg(mesh_text);
  const int64_t ranks = mesh_rank_count(mesh_shape, mesh_text);
  std::vector<std::string> names;
  if (!names_text.empty()) {
    DT_CHECK(is_clean_utf8(names_text), "--names ", quote(names_text),
             " is not clean UTF-8 text (expected printable names such as dp,tp)");
    names = split_list(names_text);
    DT_CHECK(names.size() == mesh_shape.size(), "--names gives ", names.size(), " name(s) ('",
             names_text, "') for a ", mesh_shape.size(), "-d mesh ", mesh_text);
  }
  if (world != nullptr) return DeviceMesh(*world, mesh_shape, names);
  return DeviceMesh(World::simulated(static_cast<int>(ranks)), mesh_shape, names);
}

nlohmann::ordered_json dims_json(const DimVector& v) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t x : v) out.push_back(x);
  return out;
}

nlohmann::ordered_json mesh_names_json(const DeviceMesh& mesh) {
  std::vector<std::string> names = mesh.names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty()) names[i].append("d").append(std::to_string(i));
  return names;
}

int64_t mesh_rank_count(const Shape& mesh_shape, const std::string& mesh_text) {
  // The simulated world holds one entry per rank; refuse absurd sizes before
  // building it (and before the product can overflow: every factor is
  // <= kMaxRanks, so the running product stays below 2^32).
  int64_t ranks = 1;
  for (int64_t s : mesh_shape) {
    DT_CHECK(s <= kMaxRanks && ranks * s <= kMaxRanks, "--mesh ", quote(mesh_text),
             " has more than ", kMaxRanks, " ranks; the command simulates at most that many");
    ranks *= s;
  }
  return ranks;
}

std::string bytes_text(double bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << bytes << " bytes (" << std::setprecision(1)
     << bytes / double(int64_t{1} << 30) << " GiB)";
  return os.str();
}

void check_memory_estimate(double bytes, const std::string& what_for, const std::string& advice) {
  const double available = static_cast<double>(available_memory_bytes());
  DT_CHECK(bytes <= available, what_for, " needs about ", bytes_text(bytes), " of memory but ",
           bytes_text(available), " are available; ", advice);
}

namespace {

// The length of the UTF-8 sequence starting at s[i] (1 to 4), or 0 when the
// bytes there are not well-formed UTF-8.
size_t utf8_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  // Overlong forms, surrogates and code points past U+10FFFF are malformed.
  if (n == 2 && c < 0xC2) return 0;
  if (n == 3 && ((c == 0xE0 && byte(i + 1) < 0xA0) || (c == 0xED && byte(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && byte(i + 1) < 0x90) || c > 0xF4 || (c == 0xF4 && byte(i + 1) >= 0x90)))
    return 0;
  return n;
}

// Escapes control bytes and bytes that are not UTF-8; newlines become spaces.
std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text, i);
    if (c == '\n' || c == '\r') {
      out += ' ';
    } else if (n == 0 || c < 0x20 || c == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out.append(text, i, n);
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

}  // namespace

bool is_clean_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n == 0 || (n == 1 && (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7F)))
      return false;
    i += n;
  }
  return true;
}

std::string quote(const std::string& text) {
  constexpr size_t kShown = 60;
  std::string e = escape(text);
  if (e.size() <= kShown) return "'" + e + "'";
  size_t cut = kShown;  // do not split a UTF-8 sequence
  while (cut > 0 && (static_cast<unsigned char>(e[cut]) & 0xC0) == 0x80) --cut;
  e.resize(cut);
  return "'" + e + "...' (" + std::to_string(text.size()) + " bytes)";
}

std::string one_line(std::string text) {
  constexpr size_t kLongestRun = 120, kKept = 60;
  std::string e = escape(text);
  // Quoted user text ('...') of more than kLongestRun characters is cut first.
  for (size_t pos = 0;;) {
    const size_t open = e.find('\'', pos);
    if (open == std::string::npos) break;
    size_t close = e.find('\'', open + 1);
    if (close == std::string::npos) break;
    const size_t len = close - open - 1;
    if (len > kLongestRun) {
      size_t cut = open + 1 + kKept;
      while (cut > open + 1 && (static_cast<unsigned char>(e[cut]) & 0xC0) == 0x80) --cut;
      const std::string kept = e.substr(open + 1, cut - open - 1) + "...(" + std::to_string(len) +
                               " characters)";
      e.replace(open + 1, len, kept);
      close = open + 1 + kept.size();
    }
    pos = close + 1;
  }
  std::string out;
  size_t i = 0;
  while (i < e.size()) {
    const size_t space = std::min(e.find(' ', i), e.size());
    if (space - i > kLongestRun) {
      size_t cut = i + kKept;
      while (cut > i && (static_cast<unsigned char>(e[cut]) & 0xC0) == 0x80) --cut;
      out.append(e, i, cut - i);
      out += "...(" + std::to_string(space - i) + " characters)";
    } else {
      out.append(e, i, space - i);
    }
    if (space < e.size()) out += ' ';
    i = space + 1;
  }
  return out;
}

}  // namespace dtensor::cli
