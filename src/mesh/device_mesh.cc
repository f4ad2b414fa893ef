// DeviceMesh: views onto a shared root mesh (shape, row-major rank list, dim
// names, registry of flattened dims). Everything a hot path asks for
// (coordinate, group, group_index) is answered from per-rank root coordinates
// precomputed once in the Root, so it costs O(root ndim) plus the output size,
// with no map lookups and no locks.
#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <functional>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>

#include "dtensor/error.h"
#include "dtensor/mesh.h"
#include "mesh/mesh_cache.h"

namespace dtensor {

namespace {
std::atomic<int64_t> live_root_count{0};  // Roots alive in the process, for tests of the caches
}  // namespace

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

  explicit Root(World w) : world(std::move(w)) { live_root_count.fetch_add(1); }
  ~Root() { live_root_count.fetch_sub(1); }

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

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out = "(";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + ")";
}

std::string join_ints(const std::vector<int>& items) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < items.size(); ++i) os << (i ? ", " : "") << items[i];
  os << ']';
  return os.str();
}

// Validates shape and names and builds the Root around `ranks` (row-major).
std::shared_ptr<DeviceMesh::Root> make_root(World world, const Shape& shape,
                                            std::vector<int> ranks,
                                            std::vector<std::string> names) {
  auto root = std::make_shared<DeviceMesh::Root>(std::move(world));
  const int ndim = static_cast<int>(shape.size());
  root->world_size = root->world.size();
  root->ndim = ndim;
  root->shape = shape;
  root->strides = Shape(shape.size(), 1);
  for (int i = ndim - 2; i >= 0; --i) root->strides[i] = root->strides[i + 1] * shape[i + 1];
  if (names.empty()) names.assign(ndim, "");
  root->names = std::move(names);
  root->coords.assign(static_cast<size_t>(root->world_size) * ndim, -1);
  for (size_t p = 0; p < ranks.size(); ++p) {
    int32_t* c = root->coords.data() + static_cast<size_t>(ranks[p]) * ndim;
    int64_t rest = static_cast<int64_t>(p);
    for (int i = 0; i < ndim; ++i) {
      c[i] = static_cast<int32_t>(rest / root->strides[i]);
      rest %= root->strides[i];
    }
  }
  root->ranks = std::move(ranks);
  root->derive_links();
  return root;
}

// Checks the parts shared by both constructors; returns the number of ranks.
int64_t check_shape_and_names(const World& world, const Shape& shape,
                              const std::vector<std::string>& names) {
  DT_CHECK(!shape.empty(), "DeviceMesh: the mesh shape must have at least one dim, got []");
  DT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "DeviceMesh: mesh ", shape, " has ",
           shape.size(), " dims, at most ", kMaxDims, " are supported");
  int64_t product = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    DT_CHECK(shape[i] >= 1, "DeviceMesh: mesh ", shape, " has size ", shape[i], " on dim ", i,
             " (every size must be >= 1)");
    overflow = overflow || __builtin_mul_overflow(product, shape[i], &product);
  }
  DT_CHECK(!overflow && product <= world.size(), "mesh ", shape, " needs ",
           overflow ? "more than 2^63" : std::to_string(product), " ranks but the world has ",
           world.size());
  if (!names.empty()) {
    DT_CHECK(names.size() == shape.size(), "DeviceMesh: mesh ", shape, " has ", shape.size(),
             " dims but ", names.size(), " names were given: ", join(names));
    for (size_t i = 0; i < names.size(); ++i) {
      DT_CHECK(!names[i].empty(), "DeviceMesh: dim ", i, " has an empty name in ", join(names));
      for (size_t j = 0; j < i; ++j) {
        DT_CHECK(names[i] != names[j], "DeviceMesh: dim name '", names[i], "' is repeated in ",
                 join(names));
      }
    }
  }
  return product;
}

}  // namespace

DeviceMesh::DeviceMesh(World world, const Shape& shape, std::vector<std::string> names) {
  const int64_t n = check_shape_and_names(world, shape, names);
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ranks[i] = static_cast<int>(i);
  root_ = make_root(std::move(world), shape, std::move(ranks), std::move(names));
  root_->users.store(1, std::memory_order_relaxed);
  ndim_ = root_->ndim;
  for (int i = 0; i < ndim_; ++i) dims_[i] = MeshDimMask{1} << i;
}

DeviceMesh::DeviceMesh(World world, const Shape& shape, std::vector<int> ranks,
                       std::vector<std::string> names) {
  // The rank list is checked first: a list that is too long is more likely
  // the mistake than the shape, and its message shows both.
  DT_CHECK(!shape.empty(), "DeviceMesh: the mesh shape must have at least one dim, got []");
  int64_t expected = 1;
  for (int64_t s : shape) {
    if (s < 1 || __builtin_mul_overflow(expected, s, &expected)) {
      expected = -1;
      break;
    }
  }
  if (expected >= 1) {
    DT_CHECK(static_cast<int64_t>(ranks.size()) == expected, "DeviceMesh: mesh ", shape,
             " needs ", expected, " ranks, got ", ranks.size(), ": ", join_ints(ranks));
  }
  check_shape_and_names(world, shape, names);
  std::vector<char> seen(static_cast<size_t>(world.size()), 0);
  for (int r : ranks) {
    DT_CHECK(r >= 0 && r < world.size(), "DeviceMesh: rank ", r, " in ", join_ints(ranks),
             " is out of range for a world of ", world.size());
    DT_CHECK(!seen[r], "DeviceMesh: rank ", r, " appears more than once in ", join_ints(ranks));
    seen[r] = 1;
  }
  root_ = make_root(std::move(world), shape, std::move(ranks), std::move(names));
  root_->users.store(1, std::memory_order_relaxed);
  ndim_ = root_->ndim;
  for (int i = 0; i < ndim_; ++i) dims_[i] = MeshDimMask{1} << i;
}

DeviceMesh::DeviceMesh(std::shared_ptr<Root> root, const std::vector<MeshDimMask>& dims)
    : root_(std::move(root)), ndim_(static_cast<int>(dims.size())) {
  for (int i = 0; i < ndim_; ++i) dims_[i] = dims[i];
  root_->users.fetch_add(1, std::memory_order_relaxed);
}

// ---- handles and the caches -------------------------------------------------------

namespace {

constexpr int kMaxReleaseHooks = 8;
std::atomic<RootReleasedFn> release_hooks[kMaxReleaseHooks];
std::atomic<int> num_release_hooks{0};

}  // namespace

void on_root_released(RootReleasedFn fn) {
  const int k = num_release_hooks.fetch_add(1);
  DT_CHECK(k < kMaxReleaseHooks, "on_root_released: more than ", kMaxReleaseHooks, " hooks");
  release_hooks[k].store(fn);
}

void MeshCacheAccess::hold(const DeviceMesh& mesh) {
  if (mesh.cached_ || !mesh.root_) return;
  mesh.root_->cached.fetch_add(1, std::memory_order_relaxed);
  mesh.cached_ = true;
  // Unreachable in practice (whoever caches a spec holds a handle of their
  // own), but a cache must never be the last user: it would keep the root.
  if (mesh.root_->users.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    for (int k = 0; k < num_release_hooks.load(); ++k) release_hooks[k].load()(mesh.root_.get());
  }
}

const void* MeshCacheAccess::root_id(const DeviceMesh& mesh) { return mesh.root_.get(); }

int64_t MeshCacheAccess::live_roots() { return live_root_count.load(); }

void DeviceMesh::release() noexcept {
  if (!root_) return;
  if (cached_) {
    root_->cached.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  // The last user's handle: no one can look this root up in a cache any
  // more, so the caches drop its entries (while this handle keeps it alive).
  if (root_->users.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
      root_->cached.load(std::memory_order_acquire) > 0) {
    for (int k = 0; k < num_release_hooks.load(); ++k) release_hooks[k].load()(root_.get());
  }
}

DeviceMesh::DeviceMesh(const DeviceMesh& other)
    : root_(other.root_), ndim_(other.ndim_) {
  std::copy(other.dims_, other.dims_ + kMaxDims, dims_);
  if (root_) root_->users.fetch_add(1, std::memory_order_relaxed);
}

DeviceMesh::DeviceMesh(DeviceMesh&& other) noexcept
    : root_(std::move(other.root_)), ndim_(other.ndim_), cached_(other.cached_) {
  std::copy(other.dims_, other.dims_ + kMaxDims, dims_);
  other.cached_ = false;
}

DeviceMesh& DeviceMesh::operator=(const DeviceMesh& other) {
  if (this == &other) return *this;
  if (other.root_) other.root_->users.fetch_add(1, std::memory_order_relaxed);
  release();
  root_ = other.root_;
  cached_ = false;
  ndim_ = other.ndim_;
  std::copy(other.dims_, other.dims_ + kMaxDims, dims_);
  return *this;
}

DeviceMesh& DeviceMesh::operator=(DeviceMesh&& other) noexcept {
  if (this == &other) return *this;
  release();
  root_ = std::move(other.root_);
  cached_ = other.cached_;
  other.cached_ = false;
  ndim_ = other.ndim_;
  std::copy(other.dims_, other.dims_ + kMaxDims, dims_);
  return *this;
}

DeviceMesh::~DeviceMesh() { release(); }

const World& DeviceMesh::world() const { return root_->world; }

namespace {
int normalize_mesh_dim(int d, int ndim, const DeviceMesh& mesh) {
  DT_CHECK(d >= -ndim && d < ndim, "mesh dim ", d, " is out of range for ", mesh.to_string(),
           " (expected -", ndim, " <= dim < ", ndim, ")");
  return d < 0 ? d + ndim : d;
}
}  // namespace

int64_t DeviceMesh::size(int d) const {
  return root_->mask_size(dims_[normalize_mesh_dim(d, ndim_, *this)]);
}

int64_t DeviceMesh::size(const std::string& name) const { return size(dim_index(name)); }

int64_t DeviceMesh::size() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= root_->mask_size(dims_[i]);
  return n;
}

Shape DeviceMesh::shape() const {
  Shape s;
  for (int i = 0; i < ndim_; ++i) s.push_back(root_->mask_size(dims_[i]));
  return s;
}

std::vector<std::string> DeviceMesh::names() const {
  std::vector<std::string> out;
  out.reserve(ndim_);
  for (int i = 0; i < ndim_; ++i) out.push_back(root_->dim_name(dims_[i]));
  return out;
}

int DeviceMesh::dim_index(const std::string& name) const {
  for (int i = 0; i < ndim_; ++i) {
    if (!name.empty() && root_->dim_name(dims_[i]) == name) return i;
  }
  const std::vector<std::string> known = names();
  const bool unnamed = std::all_of(known.begin(), known.end(), [](auto& n) { return n.empty(); });
  DT_THROW("DeviceMesh: no dim named '", name, "' in ", to_string(),
           unnamed ? " (its dims have no names; give names when making the mesh, or use dim "
                     "indices)"
                   : " (known names: " + join(known) + ")");
}

std::optional<DimVector> DeviceMesh::coordinate(int rank) const {
  const int32_t* c = root_->coords_of(rank);
  if (!c) return std::nullopt;
  DimVector out;
  for (int i = 0; i < ndim_; ++i) out.push_back(root_->index_along(c, dims_[i]));
  return out;
}

std::vector<int> DeviceMesh::group(int rank, int d) const {
  d = normalize_mesh_dim(d, ndim_, *this);
  const int32_t* c = root_->coords_of(rank);
  DT_CHECK(c, "DeviceMesh::group: rank ", rank, " is not in ", to_string());
  // The group's first member: this rank with its coordinates on the covered
  // root dims set to 0.
  int64_t base = 0;
  for (int i = 0; i < root_->ndim; ++i) {
    if (!(dims_[d] >> i & 1)) base += c[i] * root_->strides[i];
  }
  std::vector<int> out;
  root_->append_group(base, dims_[d], out);
  return out;
}

int64_t DeviceMesh::group_index(int rank, int d) const {
  d = normalize_mesh_dim(d, ndim_, *this);
  const int32_t* c = root_->coords_of(rank);
  DT_CHECK(c, "DeviceMesh::group_index: rank ", rank, " is not in ", to_string());
  return root_->index_along(c, dims_[d]);
}

std::vector<std::vector<int>> DeviceMesh::groups(int d) const {
  d = normalize_mesh_dim(d, ndim_, *this);
  const MeshDimMask mask = dims_[d];
  const int64_t total = static_cast<int64_t>(root_->ranks.size());
  std::vector<std::vector<int>> out;
  out.reserve(total / root_->mask_size(mask));
  for (int64_t p = 0; p < total; ++p) {
    bool first = true;
    for (MeshDimMask m = mask; m && first; m &= m - 1) {
      const int b = std::countr_zero(m);
      first = (p / root_->strides[b]) % root_->shape[b] == 0;
    }
    if (!first) continue;
    out.emplace_back();
    root_->append_group(p, mask, out.back());
  }
  // With explicit rank lists positions and ranks need not agree in order.
  std::sort(out.begin(), out.end(),
            [](const std::vector<int>& a, const std::vector<int>& b) { return a[0] < b[0]; });
  return out;
}

std::vector<int> DeviceMesh::ranks() const {
  MeshDimMask covered = 0;
  bool plain = true;  // dims are the root dims, one each, in order
  for (int i = 0; i < ndim_; ++i) {
    covered |= dims_[i];
    plain = plain && dims_[i] == MeshDimMask{1} << i;
  }
  if (plain && ndim_ == root_->ndim) return root_->ranks;
  // A view over fewer root dims: the sub-mesh of this process's first held
  // rank of the mesh (under MPI, the calling process's own), as PyTorch's
  // mesh["tp"].mesh is the sub-mesh containing the current rank.
  for (int r : root_->world.held_ranks())
    if (root_->coords_of(r)) return ranks(r);
  // This process holds no rank of the mesh: the sub-mesh at root position 0.
  return ranks(root_->ranks[0]);
}

std::vector<int> DeviceMesh::ranks(int rank) const {
  const int32_t* c = root_->coords_of(rank);
  DT_CHECK(c, "DeviceMesh::ranks: rank ", rank, " is not in ", to_string());
  MeshDimMask covered = 0;
  for (int i = 0; i < ndim_; ++i) covered |= dims_[i];
  // The position of the sub-mesh's first member: `rank` with its coordinates
  // on the covered root dims set to 0.
  int64_t base = 0;
  for (int i = 0; i < root_->ndim; ++i)
    if (!(covered >> i & 1)) base += c[i] * root_->strides[i];
  // Row-major over this mesh's dims; a flattened dim counts its root dims
  // row-major (ascending), as index_along does, so that ranks(r)[k] is the
  // rank whose coordinate is k unravelled over shape().
  int k = 0;
  int64_t len[kMaxDims], stride[kMaxDims], idx[kMaxDims] = {};
  for (int i = 0; i < ndim_; ++i) {
    for (MeshDimMask m = dims_[i]; m; m &= m - 1) {
      const int b = std::countr_zero(m);
      len[k] = root_->shape[b];
      stride[k] = root_->strides[b];
      ++k;
    }
  }
  const int64_t n = size();
  std::vector<int> out;
  out.reserve(static_cast<size_t>(n));
  int64_t off = 0;
  for (int64_t p = 0; p < n; ++p) {
    out.push_back(root_->ranks[base + off]);
    for (int j = k - 1; j >= 0; --j) {  // odometer step, last dim fastest
      off += stride[j];
      if (++idx[j] < len[j]) break;
      off -= len[j] * stride[j];
      idx[j] = 0;
    }
  }
  return out;
}

bool DeviceMesh::contains(int rank) const { return root_->coords_of(rank) != nullptr; }

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

std::string DeviceMesh::to_string() const {
  std::ostringstream os;
  os << "DeviceMesh(" << shape();
  const std::vector<std::string> n = names();
  if (std::any_of(n.begin(), n.end(), [](const std::string& s) { return !s.empty(); })) {
    os << ", names=" << join(n);
  }
  os << ')';
  return os.str();
}

size_t DeviceMesh::hash() const {
  size_t h = std::hash<const void*>{}(root_.get());
  for (int i = 0; i < ndim_; ++i) {
    h ^= std::hash<MeshDimMask>{}(dims_[i]) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh) {
  return os << mesh.to_string();
}

Shape parse_mesh_shape(const std::string& text) {
  Shape out;
  const char* p = text.data();
  const char* end = p + text.size();
  bool ok = !text.empty();
  while (ok) {
    int64_t v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    // from_chars accepts a leading '-'; sizes must be positive anyway.
    ok = ec == std::errc() && next != p && v >= 1 && out.size() < static_cast<size_t>(kMaxDims);
    if (!ok) break;
    out.push_back(v);
    p = next;
    if (p == end) break;
    ok = *p == 'x' && ++p != end;
  }
  DT_CHECK(ok, "expected a mesh shape like 2x4 (at most ", kMaxDims,
           " sizes >= 1 joined by 'x'), got '", text, "'");
  return out;
}

}  // namespace dtensor
