// estimate_time: a profile's events on a device and its network. The
// roofline for ops, NCCL's algorithms in the alpha-beta model for
// collectives, and two streams so that what fully_shard starts early
// overlaps the ops after it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "dtensor/error.h"
#include "dtensor/estimate.h"

namespace dtensor::estimate {

namespace {

Device device(const char* name, double memory, double half, double tf32, double fp64, double vector,
              double bandwidth, double overhead) {
  Device d;
  d.name = name;
  d.memory = memory;
  d.peak_flops[static_cast<int>(DType::BFloat16)] = half;
  d.peak_flops[static_cast<int>(DType::Float16)] = half;
  d.peak_flops[static_cast<int>(DType::Float32)] = tf32;
  d.peak_flops[static_cast<int>(DType::Float64)] = fp64;
  d.vector_flops = vector;
  d.memory_bandwidth = bandwidth;
  d.op_overhead = overhead;
  return d;
}

int ceil_log2(int64_t n) {
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return k;
}

}  // namespace

// Vendors' figures (dense, no sparsity) with NCCL's bus bandwidth as
// nccl-tests report it on such machines, not the links' line rates.
// Float32 products at TF32 (torchtitan turns it on).
Cluster cluster_preset(const std::string& name) {
  Cluster c;
  if (name == "h100") {
    c.device = device("h100", 80e9, 989e12, 494.7e12, 66.9e12, 66.9e12, 3.35e12, 4e-6);
    c.within_node = {3e-6, 360e9};  // NVLink 4 (450 GB/s a direction)
    c.across_nodes = {8e-6, 45e9};  // 400 Gb/s InfiniBand NDR per GPU
  } else if (name == "a100") {
    c.device = device("a100", 80e9, 312e12, 156e12, 19.5e12, 19.5e12, 2.039e12, 4e-6);
    c.within_node = {3e-6, 230e9};  // NVLink 3 (300 GB/s a direction)
    c.across_nodes = {8e-6, 22e9};  // 200 Gb/s InfiniBand HDR per GPU
  } else if (name == "cpu") {
    // Two cores of an x86 server with AVX-512; shared memory between ranks.
    c.device = device("cpu", 24e9, 150e9, 150e9, 75e9, 20e9, 15e9, 2e-6);
    c.device.matmul_efficiency = 1;  // the figures are measured ones
    c.device.memory_efficiency = 1;
    c.ranks_per_node = 1 << 20;
    c.within_node = {3e-6, 4e9};
    c.across_nodes = c.within_node;
  } else {
    DT_THROW("estimate: no cluster preset ", '"', name, '"', "; the presets are h100, a100, cpu");
  }
  return c;
}

std::vector<std::string> cluster_presets() { return {"h100", "a100", "cpu"}; }

// The products that run on matrix units (tensor cores, AMX).
bool is_matrix_product(const char* op) {
  if (op == nullptr) return false;
  for (const char* p :
       {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "scaled_dot_product_attention"})
    if (std::strcmp(op, p) == 0) return true;
  return false;
}

std::optional<double> measured_seconds(const Cluster& c, CollectiveKind kind, int64_t bytes,
                                       const std::vector<int>& group) {
  if (c.measured.empty()) return std::nullopt;
  // Measured times of this kind, group size and span, nearest sizes
  // either side. The span counts: 16 ranks on two nodes of 8 meet the
  // network once, 16 ranks one per node at every step.
  std::vector<int> nodes;
  for (int r : group) nodes.push_back(r / c.ranks_per_node);
  std::sort(nodes.begin(), nodes.end());
  const int spanned = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
  const int n = static_cast<int>(group.size());
  const MeasuredCollective *below = nullptr, *above = nullptr;
  for (const MeasuredCollective& m : c.measured) {
    if (m.kind != kind || m.ranks != n || m.nodes != spanned) continue;
    if (m.bytes <= bytes && (below == nullptr || m.bytes > below->bytes)) below = &m;
    if (m.bytes >= bytes && (above == nullptr || m.bytes < above->bytes)) above = &m;
  }
  if (below == nullptr || above == nullptr) return std::nullopt;
  if (above->bytes == below->bytes) return below->seconds;
  const double f =
      static_cast<double>(bytes - below->bytes) / static_cast<double>(above->bytes - below->bytes);
  return below->seconds + f * (above->seconds - below->seconds);
}

double collective_seconds(const Cluster& c, CollectiveKind kind, int64_t bytes,
                          const std::vector<int>& group) {
  const int64_t n = static_cast<int64_t>(group.size());
  if (n <= 1) return 0;
  if (const std::optional<double> s = measured_seconds(c, kind, bytes, group)) return *s;
  bool across = false;
  for (int r : group) across = across || r / c.ranks_per_node != group[0] / c.ranks_per_node;
  const Link& l = across ? c.across_nodes : c.within_node;
  const double a = l.latency, b = static_cast<double>(bytes) / l.bandwidth;
  const double m = static_cast<double>(n - 1), frac = m / static_cast<double>(n);
  const double logn = ceil_log2(n);
  switch (kind) {
    case CollectiveKind::AllGather:
      return m * a + m * b;  // each receives n - 1 shards
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllToAll:
      return m * a + frac * b;
    case CollectiveKind::AllReduce:
      return std::min(2 * m * a + 2 * frac * b, 2 * logn * a + 2 * b);
    case CollectiveKind::Broadcast:
      return std::min(logn * (a + b), m * a + b);
    case CollectiveKind::Scatter:
      return logn * a + frac * b;
    case CollectiveKind::BoxExchange:
      return m * a + b;
  }
  return 0;
}

double op_seconds(const Device& d, const StepEvent& op) {
  const bool product = is_matrix_product(op.op);
  const double peak =
      product ? d.peak_flops[static_cast<int>(op.dtype)] * d.matmul_efficiency : d.vector_flops;
  const double compute = peak > 0 ? op.flops / peak : 0;
  const double memory = static_cast<double>(op.bytes) / (d.memory_bandwidth * d.memory_efficiency);
  return (std::max(compute, memory) + d.op_overhead) / d.share;
}

TimeEstimate estimate_time(const Profile& profile, const Cluster& cluster, size_t first_phase) {
  TimeEstimate t;
  double compute_free = 0, comm_free = 0;
  std::unordered_map<int64_t, double> ends;  // started collectives' ends, by event
  size_t phase = std::min(first_phase, profile.phase_events.size());
  t.phase_starts.assign(phase, 0.0);
  const size_t begin = phase < profile.phase_events.size() ? profile.phase_events[phase] : 0;
  t.event_times.assign(profile.events.size(), 0.0);
  for (size_t i = begin; i < profile.events.size(); ++i) {
    while (phase < profile.phase_events.size() && profile.phase_events[phase] == i) {
      t.phase_starts.push_back(compute_free);
      ++phase;
    }
    const StepEvent& e = profile.events[i];
    switch (e.type) {
      case StepEvent::Type::Op: {
        const double d = op_seconds(cluster.device, e);
        t.timeline.push_back({0, compute_free, compute_free + d, e.op});
        compute_free += d;
        t.compute += d;
        t.flops += e.flops;
        break;
      }
      case StepEvent::Type::Collective: {
        const double d = collective_seconds(cluster, e.kind, e.bytes,
                                            profile.groups[static_cast<size_t>(e.group)]);
        const double start = std::max(compute_free, comm_free);
        comm_free = start + d;
        t.communication += d;
        t.timeline.push_back({1, start, comm_free, to_string(e.kind)});
        if (e.started)
          ends[static_cast<int64_t>(i)] = comm_free;
        else
          compute_free = comm_free;
        break;
      }
      case StepEvent::Type::Wait: {
        const auto it = ends.find(e.waits);
        if (it != ends.end()) compute_free = std::max(compute_free, it->second);
        break;
      }
    }
    t.event_times[i] = compute_free;
  }
  while (phase++ < profile.phase_events.size()) t.phase_starts.push_back(compute_free);
  t.step = std::max(compute_free, comm_free);
  t.exposed_communication = t.step - t.compute;
  return t;
}

}  // namespace dtensor::estimate
