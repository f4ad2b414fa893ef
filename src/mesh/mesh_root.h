// Internal to src/mesh/: the Root every DeviceMesh view shares (shape,
// row-major rank list, dim names, registry of flattened dims, topology),
// and the helpers the mesh's files share. Everything a hot path asks for
// (coordinate, group, group_index) is answered from per-rank root
// coordinates precomputed once in the Root, so it costs O(root ndim) plus
// the output size, with no map lookups and no locks.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dtensor/mesh.h"

namespace dtensor {

struct DeviceMesh::Root {
  World world;
  int world_size = 0;
  int ndim = 0;
  Shape shape;
  Shape strides;                   // row-major strides over positions in `ranks`
  std::vector<int> ranks;          // position (row-major) -> rank
  std::vector<std::string> names;  // one per root dim ("" when unnamed)
  // coords[rank * ndim + i] = the rank's coordinate on root dim i, or -1 for
  // ranks outside the mesh. int32 keeps this table small for big worlds; a
  // mesh never has more than int-many ranks, so no size can exceed it.
  std::vector<int32_t> coords;

  // Flattened dims are registered lazily (by users or by the planner, maybe
  // from several threads) while hot paths read the fields above, so only the
  // registry is locked; names of flattened dims are looked up only when
  // printing or naming, never per rank.
  mutable std::mutex mu;
  std::map<MeshDimMask, std::string> flattened;
  Topology topology;                    // guarded by mu
  LinkCost links[kMaxDims];             // per root dim, derived from topology; guarded by mu
  std::atomic<bool> auto_flatten{true};
  std::atomic<uint64_t> config_version{0};
  std::atomic<uint64_t> flatten_version{0};
  // Handles of this root not held by a cache (see DeviceMesh::cached_), and
  // handles that are.
  std::atomic<int64_t> users{0};
  std::atomic<int64_t> cached{0};

  // REQUIRES: mu held.
  void derive_links() {
    int64_t product = 1;
    bool crossed = false;
    for (int i = ndim - 1; i >= 0; --i) {
      if (!topology.per_dim.empty()) {
        links[i] = topology.per_dim[i];
        continue;
      }
      product *= shape[i];
      crossed = crossed || product > topology.devices_per_host;
      links[i] = crossed ? LinkCost{topology.intra_host.bandwidth_gbps *
                                        topology.inter_host_bandwidth_factor,
                                    topology.inter_host_latency_us}
                         : topology.intra_host;
    }
  }

  // Counted in the roots alive (MeshCacheAccess::live_roots, device_mesh.cc).
  explicit Root(World w);
  ~Root();

  // The rank's root coordinates, or nullptr when it is not in the mesh.
  const int32_t* coords_of(int rank) const {
    if (rank < 0 || rank >= world_size) return nullptr;
    const int32_t* c = coords.data() + static_cast<size_t>(rank) * ndim;
    return c[0] < 0 ? nullptr : c;
  }

  int64_t mask_size(MeshDimMask mask) const {
    int64_t n = 1;
    for (MeshDimMask m = mask; m; m &= m - 1) n *= shape[std::countr_zero(m)];
    return n;
  }

  // Row-major index of the coordinates on the root dims of `mask`.
  int64_t index_along(const int32_t* c, MeshDimMask mask) const {
    int64_t idx = 0;
    for (MeshDimMask m = mask; m; m &= m - 1) {
      const int b = std::countr_zero(m);
      idx = idx * shape[b] + c[b];
    }
    return idx;
  }

  // Appends the group over `mask` whose first member sits at position `base`
  // (i.e. base has coordinate 0 on every dim of mask), row-major over mask.
  void append_group(int64_t base, MeshDimMask mask, std::vector<int>& out) const {
    int k = 0;
    int64_t size[kMaxDims], stride[kMaxDims], idx[kMaxDims] = {};
    int64_t n = 1;
    for (MeshDimMask m = mask; m; m &= m - 1) {
      const int b = std::countr_zero(m);
      size[k] = shape[b];
      stride[k] = strides[b];
      n *= size[k];
      ++k;
    }
    out.reserve(out.size() + n);
    int64_t off = 0;
    for (int64_t i = 0; i < n; ++i) {
      out.push_back(ranks[base + off]);
      // Odometer step, last covered dim fastest.
      for (int j = k - 1; j >= 0; --j) {
        off += stride[j];
        if (++idx[j] < size[j]) break;
        off -= size[j] * stride[j];
        idx[j] = 0;
      }
    }
  }

  std::string dim_name(MeshDimMask mask) const {
    if (std::has_single_bit(mask)) return names[std::countr_zero(mask)];
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = flattened.find(mask);
      if (it != flattened.end()) return it->second;
    }
    return default_name(mask);
  }

  // Whether `name` is a root dim's or a registered flattened dim's name.
  // REQUIRES: mu held.
  bool name_taken(const std::string& name) const {
    if (std::find(names.begin(), names.end(), name) != names.end()) return true;
    for (const auto& entry : flattened)
      if (entry.second == name) return true;
    return false;
  }

  // `base`, or base_1, base_2, ... the first that is not taken. REQUIRES: mu held.
  std::string unused_name(const std::string& base) const {
    std::string out = base;
    for (int k = 1; name_taken(out); ++k) out = base + "_" + std::to_string(k);
    return out;
  }

  // "dp_cp" from the root dim names, "d0_d2" for unnamed root dims.
  std::string default_name(MeshDimMask mask) const {
    std::string out;
    for (MeshDimMask m = mask; m; m &= m - 1) {
      const int b = std::countr_zero(m);
      if (!out.empty()) out += '_';
      if (names[b].empty()) out.append("d").append(std::to_string(b));  // "d" + s trips GCC 12's -Wrestrict
      else out += names[b];
    }
    return out;
  }
};

namespace mesh_detail {

// "(a, b)", for messages.
std::string join(const std::vector<std::string>& items);
// "[1, 2]", for messages.
std::string join_ints(const std::vector<int>& items);
// d in [0, ndim), from -ndim <= d < ndim; throws naming the mesh otherwise.
int normalize_mesh_dim(int d, int ndim, const DeviceMesh& mesh);

}  // namespace mesh_detail

}  // namespace dtensor
