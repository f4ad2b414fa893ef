// Sub-meshes of a DeviceMesh: views over some of its dims (operator[],
// root()) and flattened dims (flatten), which cover several root dims as
// one and are registered on the root under a name, so the planner finds a
// merged group by the root dims it covers (flattened_dims, find_flattened).
// Registration is the only part locked: hot paths read the Root without
// locks (mesh_root.h).
#include <bit>
#include <mutex>
#include <optional>

#include "dtensor/error.h"
#include "dtensor/mesh.h"
#include "mesh/mesh_root.h"

namespace dtensor {

using namespace mesh_detail;

DeviceMesh DeviceMesh::operator[](const std::string& name) const {
  return (*this)[std::vector<std::string>{name}];
}

DeviceMesh DeviceMesh::operator[](const std::vector<std::string>& names) const {
  const std::vector<std::string> mine = this->names();
  DT_CHECK(!names.empty(), "DeviceMesh: a sub-mesh needs at least one dim name; ", to_string(),
           " has ", join(mine));
  MeshDimMask covered = 0;
  for (int i = 0; i < ndim_; ++i) covered |= dims_[i];

  std::vector<MeshDimMask> picked;
  int last_first_dim = -1;  // this mesh's first dim covered by the previous pick
  MeshDimMask used = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string& name = names[k];
    for (size_t j = 0; j < k; ++j) {
      DT_CHECK(names[j] != name, "DeviceMesh: dim name '", name, "' is repeated in sub-mesh ",
               join(names), " of ", to_string());
    }
    std::optional<MeshDimMask> mask;
    for (int i = 0; i < ndim_ && !mask; ++i) {
      if (!name.empty() && mine[i] == name) mask = dims_[i];
    }
    // Like PyTorch, a flattened dim registered on the root can be picked by
    // name (root["dp_cp"]) when it is a union of whole dims of this mesh.
    std::vector<std::string> flat_names;
    if (!mask) {
      std::lock_guard<std::mutex> lock(root_->mu);
      for (const auto& [m, n] : root_->flattened) {
        bool whole = (m & ~covered) == 0;
        for (int i = 0; i < ndim_ && whole; ++i) {
          whole = (dims_[i] & m) == 0 || (dims_[i] & m) == dims_[i];
        }
        if (!whole) continue;
        if (n == name) mask = m;
        flat_names.push_back(n);
      }
    }
    if (!mask) {
      std::string known = join(mine);
      if (!flat_names.empty()) known += ", flattened: " + join(flat_names);
      DT_THROW("DeviceMesh: no dim named '", name, "' in ", to_string(), " (known names: ", known,
               ")");
    }
    int first_dim = 0;
    while (!(dims_[first_dim] & *mask)) ++first_dim;
    DT_CHECK((used & *mask) == 0, "DeviceMesh: sub-mesh dims ", join(names),
             " overlap (they share root dims) in ", to_string());
    DT_CHECK(first_dim > last_first_dim, "sub-mesh dims must be in mesh order: got ",
             join(names), ", mesh dims are ", join(mine));
    last_first_dim = first_dim;
    used |= *mask;
    picked.push_back(*mask);
  }
  return DeviceMesh(root_, picked);
}

DeviceMesh DeviceMesh::flatten(const std::vector<int>& dims, const std::string& name) const {
  DT_CHECK(!dims.empty(), "DeviceMesh::flatten: needs at least one dim of ", to_string());
  std::vector<int> norm;
  for (int d : dims) norm.push_back(normalize_mesh_dim(d, ndim_, *this));
  MeshDimMask mask = 0;
  for (size_t k = 0; k < norm.size(); ++k) {
    DT_CHECK(k == 0 || norm[k] > norm[k - 1], "DeviceMesh::flatten: dims must be in strictly ",
             "ascending mesh order, got ", join_ints(dims), " on ", to_string());
    mask |= dims_[norm[k]];
  }
  if (std::has_single_bit(mask)) {
    // A single root dim keeps its root name: registering a second name for
    // it would make names() depend on how the view was made.
    const std::string& own = root_->names[std::countr_zero(mask)];
    DT_CHECK(name.empty() || name == own, "DeviceMesh::flatten: dim ",
             own.empty() ? "d" + std::to_string(std::countr_zero(mask)) : "'" + own + "'",
             " flattened alone keeps its name, cannot call it '", name, "'");
    return DeviceMesh(root_, {mask});
  }
  {
    std::lock_guard<std::mutex> lock(root_->mu);
    auto it = root_->flattened.find(mask);
    if (it != root_->flattened.end()) {
      DT_CHECK(name.empty() || name == it->second, "DeviceMesh::flatten: these dims are already ",
               "flattened as '", it->second, "', cannot also name them '", name, "'");
      return DeviceMesh(root_, {mask});
    }
    // An auto-generated name (ours or the planner's) must never fail: when
    // "a_b" is already a dim or another flattened dim, take "a_b_1", "a_b_2", ...
    // A name the caller chose is theirs, so a clash is reported instead.
    const std::string wanted = name.empty() ? root_->unused_name(root_->default_name(mask)) : name;
    for (const std::string& n : root_->names) {
      DT_CHECK(n != wanted, "DeviceMesh::flatten: name '", wanted,
               "' is already a dim of the root mesh ", join(root_->names));
    }
    for (const auto& [m, n] : root_->flattened) {
      DT_CHECK(n != wanted, "DeviceMesh::flatten: name '", wanted,
               "' is already used by another flattened dim (root dims ", root_->default_name(m),
               ")");
    }
    root_->flattened.emplace(mask, wanted);
    root_->flatten_version.fetch_add(1);
  }
  return DeviceMesh(root_, {mask});
}

DeviceMesh DeviceMesh::flatten(const std::vector<std::string>& names,
                               const std::string& name) const {
  std::vector<int> dims;
  for (size_t k = 0; k < names.size(); ++k) {
    for (size_t j = 0; j < k; ++j) {
      DT_CHECK(names[j] != names[k], "DeviceMesh::flatten: dim name '", names[k],
               "' is repeated in ", join(names));
    }
    dims.push_back(dim_index(names[k]));
    DT_CHECK(k == 0 || dims[k] > dims[k - 1], "DeviceMesh::flatten: dims must be in mesh order: ",
             "got ", join(names), ", mesh dims are ", join(this->names()));
  }
  return flatten(dims, name);
}

std::vector<std::pair<MeshDimMask, std::string>> DeviceMesh::flattened_dims() const {
  std::lock_guard<std::mutex> lock(root_->mu);
  return {root_->flattened.begin(), root_->flattened.end()};
}

std::optional<std::string> DeviceMesh::find_flattened(MeshDimMask root_dims) const {
  std::lock_guard<std::mutex> lock(root_->mu);
  auto it = root_->flattened.find(root_dims);
  if (it == root_->flattened.end()) return std::nullopt;
  return it->second;
}

DeviceMesh DeviceMesh::root() const {
  std::vector<MeshDimMask> dims;
  for (int i = 0; i < root_->ndim; ++i) dims.push_back(MeshDimMask{1} << i);
  return DeviceMesh(root_, dims);
}

bool DeviceMesh::is_root() const {
  if (ndim_ != root_->ndim) return false;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[i] != MeshDimMask{1} << i) return false;
  }
  return true;
}

}  // namespace dtensor
