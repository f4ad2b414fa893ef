// The collective cost model of SEMANTICS.md: a fixed base, a latency per hop
// of a ring over the group, and bandwidth time for the bytes each rank
// moves. b is in GiB (bytes / 2^30) and bandwidth in GB/s, as the formulas
// are written; they are estimates for ranking plans, not predictions.
#include "dtensor/error.h"
#include "dtensor/redistribute.h"

namespace dtensor {

namespace {

constexpr double kGiB = 1073741824.0;

// base + hops*(n-1)*lat + factor*b*(n-1)/n / bw * 1e6
double ring_cost(double bytes, int64_t n, LinkCost link, double base_us, double passes) {
  DT_CHECK(n >= 1, "cost model: group size must be >= 1, got ", n);
  DT_CHECK(bytes >= 0, "cost model: bytes must be >= 0, got ", bytes);
  if (n == 1) return 0;  // nothing moves
  const double nm1 = static_cast<double>(n - 1);
  const double b = bytes / kGiB;
  return base_us + passes * nm1 * link.latency_us +
         passes * b * nm1 / static_cast<double>(n) / link.bandwidth_gbps * 1e6;
}

}  // namespace

double all_gather_cost(double bytes, int64_t n, LinkCost link, double base_us) {
  return ring_cost(bytes, n, link, base_us, 1);
}

double reduce_scatter_cost(double bytes, int64_t n, LinkCost link, double base_us) {
  return ring_cost(bytes, n, link, base_us, 1);
}

// A reduce_scatter followed by an all_gather: twice the hops and the bytes.
double all_reduce_cost(double bytes, int64_t n, LinkCost link, double base_us) {
  return ring_cost(bytes, n, link, base_us, 2);
}

double all_to_all_cost(double bytes, int64_t n, LinkCost link, double base_us) {
  return ring_cost(bytes, n, link, base_us, 1);
}

const char* to_string(StepKind kind) {
  switch (kind) {
    case StepKind::AllGather: return "all_gather";
    case StepKind::AllReduce: return "all_reduce";
    case StepKind::ReduceScatter: return "reduce_scatter";
    case StepKind::AllToAll: return "all_to_all";
    case StepKind::Local: return "local";
    case StepKind::BoxExchange: return "box_exchange";
  }
  return "?";
}

}  // namespace dtensor
