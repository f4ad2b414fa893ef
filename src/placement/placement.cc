// Placements: text form (to_string / parse_placements) and printing.
#include "dtensor/placement.h"

#include <cctype>
#include <charconv>
#include <ostream>

namespace dtensor {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

std::string to_string(const Placement& p) {
  switch (p.kind()) {
    case Placement::Kind::Replicate: return "R";
    case Placement::Kind::Shard: return "S(" + std::to_string(p.dim()) + ")";
    case Placement::Kind::Partial: return std::string("P(") + to_string(p.reduce_op()) + ")";
  }
  return "?";
}

std::string to_string(const Placements& ps) {
  std::string out;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i) out += ',';
    out += to_string(ps[i]);
  }
  return out;
}

void Placement::throw_bad_shard_dim(int64_t dim) {
  DT_THROW("Shard(", dim, "): shard dim out of range (expected ", -kMaxDims + 1, " <= dim <= ",
           kMaxDims - 1, ": tensors have at most ", kMaxDims, " dims)");
}

std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << to_string(p); }
std::ostream& operator<<(std::ostream& os, const Placements& p) { return os << to_string(p); }

namespace {

constexpr const char* kExpected = "expected S(d), R, P or P(sum|avg|max|min)";

std::string strip(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += static_cast<char>(std::tolower(c));
  return s;
}

// PyTorch's spellings, Shard(0), Replicate(), Partial() and Partial(avg),
// as the short forms.
std::string short_form(std::string s) {
  if (s == "replicate" || s == "replicate()") return "r";
  if (s == "partial" || s == "partial()") return "p";
  if (s.rfind("shard(", 0) == 0) return "s" + s.substr(5);
  if (s.rfind("partial(", 0) == 0) return "p" + s.substr(7);
  return s;
}

}  // namespace

Placement parse_placement(const std::string& text) {
  const std::string s = short_form(strip(text));
  if (s == "r") return Replicate();
  if (s == "p") return Partial(ReduceOp::Sum);
  const bool bracketed = s.size() >= 4 && s[1] == '(' && s.back() == ')';
  const std::string inner = bracketed ? s.substr(2, s.size() - 3) : "";
  if (bracketed && s[0] == 'p') {
    if (inner == "sum") return Partial(ReduceOp::Sum);
    if (inner == "avg") return Partial(ReduceOp::Avg);
    if (inner == "max") return Partial(ReduceOp::Max);
    if (inner == "min") return Partial(ReduceOp::Min);
    DT_THROW("bad placement '", text, "': unknown reduce op '", inner, "' (", kExpected, ")");
  }
  if (bracketed && s[0] == 's') {
    int64_t dim = 0;
    const char* first = inner.data();
    const char* last = first + inner.size();
    if (first != last && *first == '+') ++first;
    const auto [next, ec] = std::from_chars(first, last, dim);
    const bool is_integer = first != last && next == last &&
                            (ec == std::errc() || ec == std::errc::result_out_of_range);
    DT_CHECK(is_integer, "bad placement '", text, "': shard dim '", inner,
             "' is not an integer (", kExpected, ")");
    DT_CHECK(ec == std::errc() && dim > -kMaxDims && dim < kMaxDims, "bad placement '", text,
             "': shard dim ", inner, " out of range (expected ", -kMaxDims + 1, " <= d <= ",
             kMaxDims - 1, ": tensors have at most ", kMaxDims, " dims)");
    return Shard(dim);
  }
  DT_THROW("bad placement '", text, "' (", kExpected, ")");
}

Placements parse_placements(const std::string& text) {
  Placements out;
  DT_CHECK(!strip(text).empty(), "bad placements '", text,
           "': expected a comma-separated list such as S(0),R,P(sum)");
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                            : comma - start);
    DT_CHECK(out.size() < static_cast<size_t>(kMaxDims), "bad placements '", text,
             "': more than ", kMaxDims, " placements");
    out.push_back(parse_placement(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace dtensor
