// DeviceMesh — an n-d array of ranks over a World, with optional dim names.
//
// A rank's coordinate is its index in the array; the group of mesh dim d for
// a rank is the ranks whose coordinates equal its own on every other dim, in
// order along d. Ranks of the world not in the mesh have no coordinate.
//
// Every DeviceMesh is a view onto a root mesh: each of its dims covers one or
// more root dims. A plain mesh's dim i covers root dim i; a sub-mesh
// (mesh[{"dp", "tp"}]) covers a subset, kept in root order; a flattened dim
// (mesh.flatten({"dp","cp"})) covers several root dims as one, ordered
// row-major over them, e.g. on [[[0,1],[2,3]],[[4,5],[6,7]]] named (dp,cp,tp)
// flattening dp,cp gives the groups [0,2,4,6] and [1,3,5,7]. Flattened dims
// are registered on the root (flattened_dims()), so the planner can find a
// merged group by the root dims it covers.
//
// A DeviceMesh is a cheap handle; copies share the root. Registration of
// flattened dims is thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/world.h"

namespace dtensor {

// A set of root mesh dims, as a bit mask (bit i = root dim i).
using MeshDimMask = uint32_t;

// The speed of the links a collective over a mesh dim uses.
struct LinkCost {
  double bandwidth_gbps = 87.7;
  double latency_us = 0.6;
};

// Where the mesh's ranks sit on hardware, for the redistribution cost model
// (docs/redistribution.md, "The cost model"). Ranks are packed onto hosts
// row-major: walking root dims from the last to the first and multiplying
// their sizes, once the product exceeds devices_per_host that dim and all
// outer ones cross hosts and get the inter-host figures.
struct Topology {
  int64_t devices_per_host = 8;
  // Fixed cost of any collective.
  double base_us = 6.6;
  LinkCost intra_host{87.7, 0.6};
  // Inter-host bandwidth = intra-host bandwidth x this factor.
  double inter_host_bandwidth_factor = 0.22;
  double inter_host_latency_us = 2.7;
  // Explicit figures, one per root mesh dim, replacing the derivation above
  // (empty: derive).
  std::vector<LinkCost> per_dim = {};
};

class DeviceMesh {
 public:
  // A mesh of the given shape over ranks 0..shape.product()-1 in row-major
  // order. REQUIRES: shape.product() <= world.size(); names empty or one per
  // dim, distinct and non-empty.
  DeviceMesh(World world, const Shape& shape, std::vector<std::string> names = {});
  // The initializer_list overloads below exist only so that braced literals
  // resolve: {"dp", "tp"} also converts to std::vector<int> (as an iterator
  // pair) and {1} to std::vector<std::string> (as a count), which would make
  // DeviceMesh(w, {2, 2}, {"dp", "tp"}) and flatten({1}) ambiguous.
  DeviceMesh(World world, const Shape& shape, std::initializer_list<const char*> names)
      : DeviceMesh(std::move(world), shape, std::vector<std::string>(names.begin(), names.end())) {}
  // A mesh of the given shape over explicit ranks (row-major), each distinct
  // and in [0, world.size()).
  DeviceMesh(World world, const Shape& shape, std::vector<int> ranks,
             std::vector<std::string> names = {});

  const World& world() const;
  int ndim() const { return ndim_; }
  // Size of mesh dim d (negative counts from the end), or of the named dim.
  int64_t size(int d) const;
  int64_t size(const std::string& name) const;
  // Number of ranks in the mesh.
  int64_t size() const;
  Shape shape() const;
  // Name of each dim ("" when unnamed).
  std::vector<std::string> names() const;
  // The dim with this name; throws naming the known names.
  int dim_index(const std::string& name) const;

  // The rank's index in this mesh, or nullopt when the rank is not in it.
  std::optional<DimVector> coordinate(int rank) const;
  // The ranks of mesh dim d's group containing `rank`, in order along d.
  // REQUIRES: rank is in the mesh.
  std::vector<int> group(int rank, int d) const;
  // The rank's index within group(rank, d).
  int64_t group_index(int rank, int d) const;
  // All groups of mesh dim d (each ordered along d), ordered by their first rank.
  std::vector<std::vector<int>> groups(int d) const;
  // The size() ranks of this mesh, row-major over shape() (ranks()[k] has
  // coordinate k unravelled). For a sub-mesh or flattened mesh, which every
  // rank of the root sees as its own view, these are the ranks of the view
  // containing this process's first held rank of the root: under MPI the
  // calling process's own sub-mesh (as in PyTorch); in a simulated world,
  // which holds every rank, the sub-mesh of the root's lowest rank. Use
  // ranks(rank) for another rank's sub-mesh.
  std::vector<int> ranks() const;
  // The ranks of the view containing `rank`, row-major over shape().
  // REQUIRES: contains(rank).
  std::vector<int> ranks(int rank) const;
  // Whether the rank is in the root mesh (and so has its own view of this one).
  bool contains(int rank) const;
  // The ranks of the root mesh this process holds, ascending: every one in a
  // simulated world, the calling process's own (or none) under MPI.
  std::vector<int> held_ranks() const;

  // Sub-mesh of the named dims. REQUIRES: the names appear in mesh order. A
  // registered flattened dim may be named too (root[{"dp_cp", "tp"}]). Note the
  // braces: mesh["dp", "tp"] is a comma expression meaning mesh["tp"].
  DeviceMesh operator[](const std::string& name) const;
  DeviceMesh operator[](const std::vector<std::string>& names) const;
  DeviceMesh operator[](std::initializer_list<const char*> names) const {
    return (*this)[std::vector<std::string>(names.begin(), names.end())];
  }

  // A 1-d mesh whose single dim covers the given dims of this mesh as one
  // (row-major over them), registered on the root under `name` (default: the
  // dim names joined by "_", or "d0_d2"). Flattening the same dims again
  // returns the registered one. The default name never clashes: when it is
  // already a dim or flattened dim name, "_1", "_2", ... is appended (the
  // planner flattens with default names). REQUIRES: at least one dim, ascending order.
  DeviceMesh flatten(const std::vector<int>& dims, const std::string& name = "") const;
  DeviceMesh flatten(const std::vector<std::string>& names, const std::string& name = "") const;
  DeviceMesh flatten(std::initializer_list<int> dims, const std::string& name = "") const {
    return flatten(std::vector<int>(dims), name);
  }
  DeviceMesh flatten(std::initializer_list<const char*> names, const std::string& name = "") const {
    return flatten(std::vector<std::string>(names.begin(), names.end()), name);
  }
  // The root dims flattened so far (by flatten() or by the planner), with names.
  std::vector<std::pair<MeshDimMask, std::string>> flattened_dims() const;
  // The registered flattened dim covering exactly these root dims, if any.
  std::optional<std::string> find_flattened(MeshDimMask root_dims) const;

  // The cost model's view of the hardware (shared by every view of the
  // root). Default: Topology{}.
  Topology topology() const;
  void set_topology(Topology topology);
  // The links of a collective over these root dims: the smallest bandwidth
  // and the largest latency of the dims covered.
  LinkCost link(MeshDimMask root_dims) const;
  // Whether redistribution may create the flattened groups it wants to merge
  // collectives over (default true); when false it only uses groups made by
  // flatten(). Shared by every view of the root.
  bool auto_flatten() const;
  void set_auto_flatten(bool on);
  // Counters that caches of plans key on to tell when to re-plan:
  // config_version is bumped when the topology or auto_flatten changes,
  // flatten_version when a flattened dim is registered (which matters only
  // to plans that may not create groups themselves).
  uint64_t config_version() const;
  uint64_t flatten_version() const;

  // The root dims that mesh dim d covers.
  MeshDimMask root_dims(int d) const { return dims_[d]; }
  // The root mesh (all its dims, unflattened).
  DeviceMesh root() const;
  bool is_root() const;

  // "DeviceMesh([2, 2, 2], names=(dp, cp, tp))".
  std::string to_string() const;

  // Same root and same dims.
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    // Inline, without memcmp: every propagation cache hit compares meshes.
    if (a.root_ != b.root_ || a.ndim_ != b.ndim_) return false;
    for (int i = 0; i < a.ndim_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  friend bool operator!=(const DeviceMesh& a, const DeviceMesh& b) { return !(a == b); }
  size_t hash() const;

  // Handles count their root's users (see the note on caches below).
  DeviceMesh(const DeviceMesh& other);
  DeviceMesh(DeviceMesh&& other) noexcept;
  DeviceMesh& operator=(const DeviceMesh& other);
  DeviceMesh& operator=(DeviceMesh&& other) noexcept;
  ~DeviceMesh();

  struct Root;

 private:
  friend struct MeshCacheAccess;  // src/mesh/mesh_cache.h
  DeviceMesh(std::shared_ptr<Root> root, const std::vector<MeshDimMask>& dims);
  // Drops this handle's count of its root's users.
  void release() noexcept;

  // Copying a mesh must not allocate (specs hold one): the dims live inline
  // and names are looked up on the root.
  std::shared_ptr<Root> root_;
  MeshDimMask dims_[kMaxDims] = {};  // root dims covered by each of this mesh's dims
  int ndim_ = 0;
  // The process-wide caches (plans, sharding propagation) keep specs, and so
  // meshes, of the layouts they saw. Their handles are marked `cached_` and
  // do not count as users of the root; when the last other handle goes, the
  // caches drop their entries on the root, which then dies with its World
  // (otherwise every mesh ever used would stay alive). A copy of a cached
  // handle is an ordinary one; a move keeps the mark.
  mutable bool cached_ = false;
};

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh);

// Parses "2x2x2" (or "8") into a mesh shape; throws on anything else.
Shape parse_mesh_shape(const std::string& text);

}  // namespace dtensor
