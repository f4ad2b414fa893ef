// RedistributePlan::explain: a plan as a user reads it.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "dtensor/redistribute.h"

namespace dtensor {

namespace {

// Bytes printed whole rather than in 6 significant digits; past 2^63 (a
// model of a tensor no machine holds) llround is undefined.
std::string whole_bytes(double bytes) {
  char out[40];
  if (bytes < 9.2e18) std::snprintf(out, sizeof out, "%lld", std::llround(bytes));
  else std::snprintf(out, sizeof out, "%.6g", bytes);
  return out;
}

}  // namespace

int RedistributePlan::num_collectives() const {
  int n = 0;
  for (int c : counts) n += c;
  return n;
}

std::string RedistributePlan::explain() const {
  std::ostringstream os;
  os << "redistribute " << to_string(from.placements()) << " -> " << to_string(to.placements())
     << " of a " << from.shape() << ' ' << from.dtype() << " tensor on " << from.mesh() << '\n';
  if (steps.empty()) os << "  (nothing to do)\n";
  for (size_t k = 0; k < steps.size(); ++k) {
    const RedistributeStep& s = steps[k];
    std::ostringstream dims;
    if (s.mesh_dims.size() == 1) {
      dims << "mesh dim " << s.mesh_dims[0];
    } else {
      dims << "mesh dims " << s.mesh_dims << " as " << s.group
           << (s.created_group ? " (created)" : "");
    }
    char cost[32];
    std::snprintf(cost, sizeof cost, "%.4f us", s.cost_us);
    os << "  " << k + 1 << ". " << to_string(s.kind) << "  " << dims.str() << ": "
       << to_string(s.from) << " -> " << to_string(s.to);
    if (s.kind == StepKind::AllReduce || s.kind == StepKind::ReduceScatter) {
      os << " (" << to_string(s.op);
      if (s.divisor != 1) os << ", then / " << s.divisor;
      os << ')';
    }
    // The bytes the cost model charges each rank (for an all_gather, the
    // gathered size), printed whole rather than in 6 significant digits.
    if (s.kind != StepKind::Local) os << ", " << whole_bytes(s.bytes) << " bytes/rank, " << cost;
    os << ", peak " << whole_bytes(s.peak_bytes);
    os << '\n';
  }
  char total[32];
  std::snprintf(total, sizeof total, "%.4f us", cost_us);
  os << "total " << total << ": " << count(StepKind::AllGather) << " all_gather, "
     << count(StepKind::AllReduce) << " all_reduce, " << count(StepKind::ReduceScatter)
     << " reduce_scatter, " << count(StepKind::AllToAll) << " all_to_all";
  if (count(StepKind::BoxExchange) > 0) os << ", " << count(StepKind::BoxExchange) << " box_exchange";
  if (!groups.empty()) {
    os << "; flattened groups:";
    for (const std::string& g : groups) os << ' ' << g;
  }
  os << '\n';
  // Peak memory: the most any step holds live per rank, against the output.
  char peak[96];
  if (output_bytes > 0)
    std::snprintf(peak, sizeof peak, "peak memory %s bytes/rank (%.2fx the output of %s)",
                  whole_bytes(peak_bytes).c_str(), peak_bytes / output_bytes,
                  whole_bytes(output_bytes).c_str());
  else
    std::snprintf(peak, sizeof peak, "peak memory %s bytes/rank", whole_bytes(peak_bytes).c_str());
  os << peak << '\n';
  return os.str();
}

}  // namespace dtensor
