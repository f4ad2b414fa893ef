// The root's settings for the redistribution planner, shared by every view
// of the root: the topology (the cost model's view of the hardware) and the
// link costs derived from it per root dim (Root::derive_links,
// mesh_root.h), whether the planner may flatten groups itself
// (auto_flatten), and the version counters plan caches key on.
#include <algorithm>
#include <bit>
#include <mutex>

#include "dtensor/error.h"
#include "dtensor/mesh.h"
#include "mesh/mesh_root.h"

namespace dtensor {

Topology DeviceMesh::topology() const {
  std::lock_guard<std::mutex> lock(root_->mu);
  return root_->topology;
}

void DeviceMesh::set_topology(Topology topology) {
  DT_CHECK(topology.devices_per_host >= 1, "DeviceMesh::set_topology: devices_per_host must be ",
           ">= 1, got ", topology.devices_per_host);
  DT_CHECK(topology.per_dim.empty() || static_cast<int>(topology.per_dim.size()) == root_->ndim,
           "DeviceMesh::set_topology: per_dim has ", topology.per_dim.size(),
           " entries, expected one per root mesh dim (", root_->ndim, ")");
  auto positive = [](const LinkCost& l) { return l.bandwidth_gbps > 0 && l.latency_us >= 0; };
  DT_CHECK(positive(topology.intra_host) && topology.inter_host_bandwidth_factor > 0 &&
               topology.inter_host_latency_us >= 0 && topology.base_us >= 0,
           "DeviceMesh::set_topology: bandwidths must be positive and latencies non-negative");
  for (const LinkCost& l : topology.per_dim)
    DT_CHECK(positive(l), "DeviceMesh::set_topology: per_dim bandwidth ", l.bandwidth_gbps,
             " GB/s / latency ", l.latency_us, " us is not positive / non-negative");
  std::lock_guard<std::mutex> lock(root_->mu);
  root_->topology = std::move(topology);
  root_->derive_links();
  root_->config_version.fetch_add(1);
}

LinkCost DeviceMesh::link(MeshDimMask root_dims) const {
  DT_CHECK(root_dims != 0 && root_dims < (MeshDimMask{1} << root_->ndim),
           "DeviceMesh::link: root dim mask ", root_dims, " is not a set of dims of ", to_string());
  std::lock_guard<std::mutex> lock(root_->mu);
  LinkCost out{1e300, 0};
  for (MeshDimMask m = root_dims; m; m &= m - 1) {
    const LinkCost& l = root_->links[std::countr_zero(m)];
    out.bandwidth_gbps = std::min(out.bandwidth_gbps, l.bandwidth_gbps);
    out.latency_us = std::max(out.latency_us, l.latency_us);
  }
  return out;
}

bool DeviceMesh::auto_flatten() const { return root_->auto_flatten.load(); }

void DeviceMesh::set_auto_flatten(bool on) {
  root_->auto_flatten.store(on);
  root_->config_version.fetch_add(1);
}

uint64_t DeviceMesh::config_version() const { return root_->config_version.load(); }
uint64_t DeviceMesh::flatten_version() const { return root_->flatten_version.load(); }

}  // namespace dtensor
