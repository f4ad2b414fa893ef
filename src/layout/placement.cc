// Placements: text form (to_string / parse_placements) and printing.
#include "dtensor/placement.h"

#include <algorithm>
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
    case Placement::Kind::Shard: {
      std::string out = "S(";
      out += std::to_string(p.dim());
      out += ')';
      if (p.shard_order() >= 0) {
        out += '[';
        out += std::to_string(p.shard_order());
        out += ']';
      }
      return out;
    }
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

void Placement::throw_bad_shard_order(int64_t dim, int64_t order) {
  DT_THROW("Shard(", dim, ", ", order, "): shard order out of range (expected -1 (natural) ",
           "or 0 <= order < ", kMaxDims, ")");
}

// ---- shard order ----
//
// Internally every helper below works on the split sequence of each tensor
// dim (the mesh dims sharding it, in the order they split it) and writes
// orders back from it, so "natural" is decided in one place (write_orders).

namespace {

// seq[d] = the mesh dims splitting tensor dim d, in order. REQUIRES: valid orders.
struct Sequences {
  DimVector seq[kMaxDims];
};

Sequences sequences_of(const Placements& p) {
  Sequences s;
  for (int64_t d = 0; d < kMaxDims; ++d) s.seq[d] = shard_split_order(p, d);
  return s;
}

// Writes the orders of s into p: natural (-1) when a dim's sequence is
// ascending, else each mesh dim's position.
void write_orders(const Sequences& s, Placements& p) {
  for (int64_t d = 0; d < kMaxDims; ++d) {
    const DimVector& q = s.seq[d];
    bool ascending = true;
    for (size_t k = 1; k < q.size(); ++k) ascending = ascending && q[k - 1] < q[k];
    for (size_t k = 0; k < q.size(); ++k)
      p[static_cast<size_t>(q[k])] = Shard(d, ascending ? -1 : static_cast<int64_t>(k));
  }
}

int64_t tensor_dim_index(int64_t dim) { return dim < 0 ? dim + kMaxDims : dim; }

}  // namespace

DimVector shard_split_order(const Placements& p, int64_t dim) {
  DimVector out;
  bool ordered = false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i].is_shard(dim)) {
      out.push_back(static_cast<int64_t>(i));
      ordered = ordered || p[i].shard_order() >= 0;
    }
  if (ordered)
    std::sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
      return p[static_cast<size_t>(a)].shard_order() < p[static_cast<size_t>(b)].shard_order();
    });
  return out;
}

bool has_shard_order(const Placements& p) {
  for (const Placement& q : p)
    if (q.is_shard() && q.shard_order() >= 0) return true;
  return false;
}

Placements without_shard_order(const Placements& p) {
  Placements out = p;
  for (Placement& q : out)
    if (q.is_shard()) q = Shard(q.dim());
  return out;
}

Placements normalize_shard_orders(const Placements& p) {
  if (!has_shard_order(p)) return p;
  // Negative dims name the same tensor dim as their positive form only once
  // the tensor's rank is known; DTensorSpec normalizes them first.
  bool seen[2 * kMaxDims] = {};
  for (const Placement& q : p) {
    if (!q.is_shard()) continue;
    const int64_t d = tensor_dim_index(q.dim()) + (q.dim() < 0 ? kMaxDims : 0);
    if (seen[d]) continue;
    seen[d] = true;
    int64_t k = 0, natural = 0;
    uint32_t orders = 0;
    for (const Placement& r : p) {
      if (!r.is_shard(q.dim())) continue;
      ++k;
      if (r.shard_order() < 0) ++natural;
      else orders |= 1u << r.shard_order();
    }
    DT_CHECK(natural == k || (natural == 0 && orders == (1u << k) - 1), "placements ",
             to_string(p), ": the shard orders of tensor dim ", q.dim(),
             " must be all natural or a permutation of 0..", k - 1, " over the ", k,
             k == 1 ? " mesh dim" : " mesh dims", " sharding it");
  }
  // Shards of negative dims keep their orders (DTensorSpec normalizes the
  // dims first): sequences_of covers dims 0..kMaxDims-1 only.
  Placements out = p;
  write_orders(sequences_of(p), out);
  return out;
}

Placements replace_placements(const Placements& p, const DimVector& dims, const Placements& to) {
  DT_CHECK(dims.size() == to.size(), "replace_placements: ", dims.size(), " mesh dims but ",
           to.size(), " placements");
  Sequences s = sequences_of(p);
  Placements out = p;
  for (size_t j = 0; j < dims.size(); ++j) {
    const int64_t i = dims[j];
    DT_CHECK(i >= 0 && static_cast<size_t>(i) < p.size(), "replace_placements: mesh dim ", i,
             " out of range for ", p.size(), " placements");
    DT_CHECK(!to[j].is_shard() || to[j].dim() >= 0, "replace_placements: ", to_string(to[j]),
             " names a negative tensor dim");
    for (DimVector& q : s.seq)
      for (size_t k = 0; k < q.size(); ++k)
        if (q[k] == i) q.erase(k--);
    out[static_cast<size_t>(i)] = to[j];
  }
  // Ordered shards first, by ascending order, so each finds the earlier
  // positions filled; then natural ones at their natural place.
  DimVector by_order;
  for (size_t j = 0; j < dims.size(); ++j)
    if (to[j].is_shard() && to[j].shard_order() >= 0) by_order.push_back(static_cast<int64_t>(j));
  std::sort(by_order.begin(), by_order.end(), [&](int64_t a, int64_t b) {
    return to[static_cast<size_t>(a)].shard_order() < to[static_cast<size_t>(b)].shard_order();
  });
  for (int64_t j : by_order) {
    const Placement q = to[static_cast<size_t>(j)];
    DimVector& seq = s.seq[q.dim()];
    const size_t pos = std::min(static_cast<size_t>(q.shard_order()), seq.size());
    seq.insert(pos, dims[static_cast<size_t>(j)]);
  }
  for (size_t j = 0; j < dims.size(); ++j) {
    const Placement q = to[j];
    if (!q.is_shard() || q.shard_order() >= 0) continue;
    DimVector& seq = s.seq[q.dim()];
    size_t pos = 0;
    while (pos < seq.size() && seq[pos] < dims[j]) ++pos;
    seq.insert(pos, dims[j]);
  }
  write_orders(s, out);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << to_string(p); }
std::ostream& operator<<(std::ostream& os, const Placements& p) { return os << to_string(p); }

namespace {

constexpr const char* kExpected = "expected S(d), S(d)[order], R, P or P(sum|avg|max|min)";

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
  if (s.rfind("shard(", 0) == 0) return s.erase(1, 4);    // "s(..."
  if (s.rfind("partial(", 0) == 0) return s.erase(1, 6);  // "p(..."
  return s;
}

// Parses an integer (a leading '+' allowed); false unless all of text is one.
bool parse_int(const std::string& text, int64_t& value, bool& in_range) {
  const char* first = text.data();
  const char* last = first + text.size();
  if (first != last && *first == '+') ++first;
  const auto [next, ec] = std::from_chars(first, last, value);
  in_range = ec == std::errc();
  return first != last && next == last &&
         (ec == std::errc() || ec == std::errc::result_out_of_range);
}

}  // namespace

Placement parse_placement(const std::string& text) {
  std::string s = short_form(strip(text));
  // An order in brackets after a shard: S(0)[1].
  int64_t order = -1;
  if (!s.empty() && s.back() == ']') {
    const size_t open = s.rfind('[');
    DT_CHECK(open != std::string::npos && open > 0 && s[open - 1] == ')' && s[0] == 's',
             "bad placement '", text, "': only a shard takes an order in brackets (", kExpected,
             ")");
    const std::string inner = s.substr(open + 1, s.size() - open - 2);
    bool in_range = false;
    DT_CHECK(parse_int(inner, order, in_range), "bad placement '", text, "': shard order '",
             inner, "' is not an integer (", kExpected, ")");
    DT_CHECK(in_range && order >= 0 && order < kMaxDims, "bad placement '", text,
             "': shard order ", inner, " out of range (expected 0 <= order < ", kMaxDims, ")");
    s.resize(open);
  }
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
    bool in_range = false;
    DT_CHECK(parse_int(inner, dim, in_range), "bad placement '", text, "': shard dim '", inner,
             "' is not an integer (", kExpected, ")");
    DT_CHECK(in_range && dim > -kMaxDims && dim < kMaxDims, "bad placement '", text,
             "': shard dim ", inner, " out of range (expected ", -kMaxDims + 1, " <= d <= ",
             kMaxDims - 1, ": tensors have at most ", kMaxDims, " dims)");
    return Shard(dim, order);
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
