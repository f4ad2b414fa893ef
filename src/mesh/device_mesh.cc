// DeviceMesh: views onto a shared root mesh (mesh_root.h). Here: making and
// validating a mesh, its handles (which count the root's users for the
// process-wide caches, mesh_cache.h), and the queries (sizes, names,
// coordinate, groups, ranks), answered from the Root's per-rank
// coordinates. Sub-meshes and flattening: submesh.cc; the topology and the
// planner's settings: topology.cc.
#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <functional>
#include <ostream>
#include <sstream>

#include "dtensor/error.h"
#include "dtensor/mesh.h"
#include "mesh/mesh_cache.h"
#include "mesh/mesh_root.h"
#include "world/roles.h"

namespace dtensor {

namespace {
std::atomic<int64_t> live_root_count{0};  // Roots alive in the process, for tests of the caches
}  // namespace

DeviceMesh::Root::Root(World w) : world(std::move(w)) { live_root_count.fetch_add(1); }
DeviceMesh::Root::~Root() { live_root_count.fetch_sub(1); }

namespace mesh_detail {

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

int normalize_mesh_dim(int d, int ndim, const DeviceMesh& mesh) {
  DT_CHECK(d >= -ndim && d < ndim, "mesh dim ", d, " is out of range for ", mesh.to_string(),
           " (expected -", ndim, " <= dim < ", ndim, ")");
  return d < 0 ? d + ndim : d;
}

}  // namespace mesh_detail

using namespace mesh_detail;

namespace {

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
  WorldRoles::note_grid(root->world, root->shape, root->ranks);
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

std::vector<int> DeviceMesh::held_ranks() const {
  std::vector<int> out;
  for (int r : root_->world.held_ranks())
    if (root_->coords_of(r)) out.push_back(r);
  return out;
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
