// visualize_sharding: a table of which rank holds which part of a tensor.
//
// Everything shown comes from DTensorSpec::extent, so the table is the
// chunking rule itself rather than a second implementation of it that could
// drift.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "dtensor/debug.h"

namespace dtensor {

namespace {

// "mesh dim 1 (tp)", or "mesh dim 1" when the dim has no name.
std::string mesh_dim_label(const DeviceMesh& mesh, int d) {
  std::string label = "mesh dim " + std::to_string(d);
  const std::string name = mesh.names()[d];
  if (!name.empty()) label += " (" + name + ")";
  return label;
}

// What the reduction over a Partial mesh dim computes, for the note under the table.
const char* reduction_phrase(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "the sum";
    case ReduceOp::Avg: return "the average";
    case ReduceOp::Max: return "the maximum";
    case ReduceOp::Min: return "the minimum";
  }
  return "the reduction";
}

// Rows of cells printed as left-aligned columns two spaces apart; the last
// column is not padded so lines carry no trailing blanks.
std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      out += row[c];
      if (c + 1 < row.size()) out.append(width[c] - row[c].size() + 2, ' ');
    }
    out += '\n';
  }
  return out;
}

}  // namespace

std::string visualize_sharding(const DTensorSpec& spec) {
  const DeviceMesh& mesh = spec.mesh();
  const std::vector<std::string> names = mesh.names();
  const bool named = std::any_of(names.begin(), names.end(), [](const auto& n) { return !n.empty(); });

  std::ostringstream head;
  head << "mesh " << mesh.shape();
  if (named) {
    head << " (";
    for (size_t i = 0; i < names.size(); ++i)
      head << (i ? ", " : "") << (names[i].empty() ? "-" : names[i]);
    head << ")";
  }
  head << ", placements " << to_string(spec.placements()) << ", global shape " << spec.shape()
       << ", dtype " << dtype_name(spec.dtype()) << "\n";

  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"rank", "coord"};
  for (int64_t d = 0; d < spec.ndim(); ++d) header.push_back("dim " + std::to_string(d));
  header.push_back("local shape");
  rows.push_back(std::move(header));

  // Rank order, not mesh order: a mesh over explicit ranks may list them in
  // any order, and "which rank holds what" is read by rank.
  std::vector<int> ranks = mesh.ranks();
  std::sort(ranks.begin(), ranks.end());
  for (int rank : ranks) {
    const DimVector coord = *mesh.coordinate(rank);
    const ShardExtent e = spec.extent(coord);
    std::vector<std::string> row{std::to_string(rank), to_string(coord)};
    for (int64_t d = 0; d < spec.ndim(); ++d) {
      const int64_t a = e.global_offset[d];
      const int64_t b = a + e.local_shape[d];
      // Appended piece by piece: "[" + std::to_string(a) warns under GCC 12
      // at -O2 (-Wrestrict, GCC bug 105329).
      std::string cell = "[";
      cell += std::to_string(a) + ", " + std::to_string(b) + ")";
      if (e.local_shape[d] == 0) cell += " empty";
      row.push_back(std::move(cell));
    }
    row.push_back(to_string(e.local_shape));
    rows.push_back(std::move(row));
  }

  std::string out = head.str() + format_table(rows);
  // A shard order is easy to misread from the placements alone: spell out
  // which mesh dim splits first.
  for (int64_t d = 0; d < spec.ndim(); ++d) {
    const DimVector order = shard_split_order(spec.placements(), d);
    bool ordered = false;
    for (int64_t m : order) ordered = ordered || spec.placements()[m].shard_order() >= 0;
    if (!ordered) continue;
    out += "tensor dim " + std::to_string(d) + " is split by ";
    for (size_t k = 0; k < order.size(); ++k)
      out += (k == 0 ? "" : k + 1 == order.size() ? ", then " : ", ") +
             mesh_dim_label(mesh, static_cast<int>(order[k]));
    out += " (shard order)\n";
  }
  for (int d = 0; d < mesh.ndim(); ++d) {
    const Placement& p = spec.placements()[d];
    if (!p.is_partial()) continue;
    const char* op = to_string(p.reduce_op());
    out += mesh_dim_label(mesh, d) + ": partial " + op +
           " \u2014 each rank holds a piece; the value is " + reduction_phrase(p.reduce_op()) +
           " over this dim\n";
  }
  const int64_t outside = mesh.world().size() - mesh.size();
  if (outside > 0)
    out += std::to_string(outside) + " rank(s) of the world are not in this mesh and hold nothing\n";
  return out;
}

}  // namespace dtensor
