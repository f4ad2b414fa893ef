// Helpers shared by the subcommands (see cli.h).
#include <algorithm>
#include <charconv>

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
    DT_CHECK(ec == std::errc() && next == item.data() + item.size() && !item.empty() && v >= 0,
             "expected a tensor shape like 18,2 (sizes >= 0 separated by commas), got '", text, "'");
    DT_CHECK(shape.size() < static_cast<size_t>(kMaxDims), "shape '", text, "' has more than ",
             kMaxDims, " dims");
    shape.push_back(v);
  }
  return shape;
}

DeviceMesh make_mesh(const std::string& mesh_text, const std::string& names_text,
                     const World* world) {
  const Shape mesh_shape = parse_mesh_shape(mesh_text);
  // The simulated world holds one entry per rank; refuse absurd sizes before
  // building it.
  constexpr int64_t kMaxRanks = 1 << 16;
  int64_t ranks = 1;
  for (int64_t s : mesh_shape) {
    DT_CHECK(s <= kMaxRanks && ranks * s <= kMaxRanks, "mesh ", mesh_text, " has more than ",
             kMaxRanks, " ranks; the command simulates at most that many");
    ranks *= s;
  }
  std::vector<std::string> names;
  if (!names_text.empty()) {
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
    if (names[i].empty()) names[i] = "d" + std::to_string(i);
  return names;
}

// Error messages go on one line so scripts can rely on a single stderr line.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace dtensor::cli
