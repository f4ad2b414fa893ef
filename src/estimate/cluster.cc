// A cluster as JSON: what `dtensor calibrate` writes and `dtensor estimate
// --calibration` reads (estimate.h).
#include <nlohmann/json.hpp>

#include "dtensor/error.h"
#include "dtensor/estimate.h"

namespace dtensor::estimate {

namespace {

using nlohmann::ordered_json;

CollectiveKind kind_named(const std::string& name) {
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    if (name == to_string(static_cast<CollectiveKind>(k))) return static_cast<CollectiveKind>(k);
  DT_THROW("cluster JSON: unknown collective kind '", name, "'");
}

// j[key] as a number, or the error naming the field.
double number(const ordered_json& j, const char* where, const char* key) {
  DT_CHECK(j.is_object() && j.contains(key) && j[key].is_number(), "cluster JSON: ", where, ".",
           key, " is missing or not a number");
  return j[key].get<double>();
}

Link link_of(const ordered_json& j, const char* where) {
  DT_CHECK(j.contains(where), "cluster JSON: no \"", where, "\"");
  return {number(j[where], where, "latency"), number(j[where], where, "bandwidth")};
}

}  // namespace

std::string cluster_json(const Cluster& c) {
  ordered_json flops = ordered_json::object();
  for (int d = 0; d < kNumDTypes; ++d)
    if (c.device.peak_flops[d] > 0)
      flops[dtype_name(static_cast<DType>(d))] = c.device.peak_flops[d];
  ordered_json measured = ordered_json::array();
  for (const MeasuredCollective& m : c.measured)
    measured.push_back({{"kind", to_string(m.kind)},
                        {"ranks", m.ranks},
                        {"nodes", m.nodes},
                        {"bytes", m.bytes},
                        {"seconds", m.seconds}});
  const auto link = [](const Link& l) {
    return ordered_json{{"latency", l.latency}, {"bandwidth", l.bandwidth}};
  };
  const ordered_json j{{"device",
                        {{"name", c.device.name},
                         {"memory", c.device.memory},
                         {"peak_flops", flops},
                         {"vector_flops", c.device.vector_flops},
                         {"memory_bandwidth", c.device.memory_bandwidth},
                         {"matmul_efficiency", c.device.matmul_efficiency},
                         {"memory_efficiency", c.device.memory_efficiency},
                         {"op_overhead", c.device.op_overhead},
                         {"share", c.device.share}}},
                       {"ranks_per_node", c.ranks_per_node},
                       {"within_node", link(c.within_node)},
                       {"across_nodes", link(c.across_nodes)},
                       {"measured", measured}};
  return j.dump(2);
}

Cluster cluster_from_json(const std::string& text) {
  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const std::exception& e) {
    DT_THROW("cluster JSON: not JSON (", e.what(), ")");
  }
  DT_CHECK(j.is_object() && j.contains("device") && j["device"].is_object(),
           "cluster JSON: no \"device\" object");
  Cluster c;
  const ordered_json& d = j["device"];
  c.device.name = d.value("name", std::string("calibrated"));
  c.device.memory = number(d, "device", "memory");
  c.device.vector_flops = number(d, "device", "vector_flops");
  c.device.memory_bandwidth = number(d, "device", "memory_bandwidth");
  c.device.matmul_efficiency = number(d, "device", "matmul_efficiency");
  c.device.memory_efficiency = number(d, "device", "memory_efficiency");
  c.device.op_overhead = number(d, "device", "op_overhead");
  c.device.share = d.contains("share") ? number(d, "device", "share") : 1.0;
  DT_CHECK(c.device.share > 0 && c.device.share <= 1,
           "cluster JSON: device.share must be in (0, 1]");
  DT_CHECK(d.contains("peak_flops") && d["peak_flops"].is_object(),
           "cluster JSON: device.peak_flops is missing");
  for (const auto& [name, v] : d["peak_flops"].items()) {
    DT_CHECK(v.is_number(), "cluster JSON: device.peak_flops.", name, " is not a number");
    c.device.peak_flops[static_cast<int>(parse_dtype(name))] = v.get<double>();
  }
  c.ranks_per_node = static_cast<int>(number(j, "cluster", "ranks_per_node"));
  DT_CHECK(c.ranks_per_node >= 1, "cluster JSON: ranks_per_node must be >= 1");
  c.within_node = link_of(j, "within_node");
  c.across_nodes = link_of(j, "across_nodes");
  for (const Link& l : {c.within_node, c.across_nodes})
    DT_CHECK(l.bandwidth > 0 && l.latency >= 0,
             "cluster JSON: a link needs bandwidth > 0 and "
             "latency >= 0");
  if (j.contains("measured")) {
    DT_CHECK(j["measured"].is_array(), "cluster JSON: \"measured\" is not a list");
    for (const ordered_json& m : j["measured"]) {
      DT_CHECK(m.contains("kind") && m["kind"].is_string(),
               "cluster JSON: a measured entry has no kind");
      // "nodes" is optional: files written before it measured within a node.
      const int nodes = m.contains("nodes") ? static_cast<int>(number(m, "measured", "nodes")) : 1;
      DT_CHECK(nodes >= 1, "cluster JSON: a measured entry's nodes must be >= 1, got ", nodes);
      c.measured.push_back({kind_named(m["kind"].get<std::string>()),
                            static_cast<int>(number(m, "measured", "ranks")),
                            static_cast<int64_t>(number(m, "measured", "bytes")),
                            number(m, "measured", "seconds"), nodes});
    }
  }
  return c;
}

}  // namespace dtensor::estimate
