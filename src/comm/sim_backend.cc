// SimBackend: every collective computed from the shards held in this process.
//
// Each call validates first (mesh dim, every mesh rank held, shards present
// and defined, one dtype, dims in range, shapes agreeing within each group)
// and only then records itself and computes, so a bad call neither counts
// nor half-runs. Shapes are checked per group, not across the mesh: with
// several mesh dims sharding, different groups legitimately hold different
// shard sizes.
//
// Reductions use one fused kernel over contiguous inputs instead of n-1
// add_/maximum calls: it folds all n shards into an L1-sized block before
// moving on and copies the finished block to the other members' outputs
// while it is still in cache, so an all_reduce touches each input once and
// each output once. The fold order is still ((s0 op s1) op s2)..., so it is
// bit-identical to the naive loop, and the kernel (reduce_kernel.h) is the
// one the MPI backend folds with, so both worlds give the same bits.
//
// Data movement (all_gather, all_to_all, scatter, broadcast) copies straight
// from the input shards into each member's freshly allocated output with
// memcpy runs, seeing a contiguous shard as [outer, len, inner] around the
// dim being cut or joined: no chunk views, no cat. The work is linear in the
// ranks and the bytes: empty pieces cost nothing (a group lists its members
// with data once), and an all_gather joins the group's shards once and
// copies the result to the other members, so no member reads n sources. A
// 1024-rank all_to_all, n^2 = 1M pieces, would otherwise spend its time on
// views, not bytes.
//
// Every output byte is written by exactly one task and nothing is summed, so
// running groups, members or senders on the thread pool (when the bytes pay
// for it) gives the same bits as one thread. Outputs go to a table indexed by rank and are handed to
// LocalTensor in ascending rank order, however a mesh dim's groups
// interleave ranks (those of an outer dim of a 32x32 mesh visit 0, 32, 64, ...).
#include "comm/sim_backend.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "comm/around.h"
#include "comm/reduce_kernel.h"
#include "common/parallel.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"
#include "dtensor/spec.h"
#include "tensor/copy_bytes.h"
#include "tensor/loops.h"
#include "world/roles.h"
#include "world/shard_map.h"

namespace dtensor {

namespace {

// ---- error context ------------------------------------------------------------

// "all_gather over mesh dim 1"; streamed only when a check fails.
struct Where {
  const char* coll;
  int mesh_dim;
};
std::ostream& operator<<(std::ostream& os, const Where& w) {
  return os << w.coll << " over mesh dim " << w.mesh_dim;
}

std::string held_ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return ranks.empty() ? "none" : s;
}

// ---- validation ---------------------------------------------------------------

// The groups of a mesh dim after the checks every collective shares. The
// shards of group g are shards[g][i], i the group index; a null entry is a
// shard the collective does not read (non-root members of broadcast/scatter).
struct Prepared {
  Where where;
  std::vector<std::vector<int>> groups;
  std::vector<std::vector<const Tensor*>> shards;
  const Tensor* first = nullptr;  // the reference shard for dtype and ndim
  int first_rank = -1;
  int64_t max_bytes = 0;
  bool roles = false;             // by roles: groups holds those with a held member
  const World* world = nullptr;   // when by roles
  // Whether member `rank` gets an output here (by roles, the held ones).
  bool outputs_to(int rank) const { return !roles || world->holds(rank); }
};

// Without a root every member's shard is read; with one, only the shard of
// group index `root`.
Prepared prepare(const char* coll, const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                 std::optional<int64_t> root = std::nullopt) {
  const int ndim = mesh.ndim();
  DT_CHECK(mesh_dim >= -ndim && mesh_dim < ndim, coll, ": mesh dim ", mesh_dim,
           " out of range for ", mesh.to_string(), " (expected ", -ndim, " <= mesh dim < ", ndim,
           ")");
  if (mesh_dim < 0) mesh_dim += ndim;
  Prepared p{Where{coll, mesh_dim}, mesh.groups(mesh_dim), {}, nullptr, -1, 0};
  const World& world = mesh.world();
  const int64_t n = mesh.size(mesh_dim);
  // A shape-only world computing by roles (world/roles.h) runs the groups
  // with a member it holds; the others' shards are their stand-ins'.
  p.roles = WorldRoles::active(world);
  if (p.roles) {
    std::erase_if(p.groups, [&](const std::vector<int>& group) {
      return std::none_of(group.begin(), group.end(),
                          [&](int r) { return WorldRoles::stand_in(world, r) == r; });
    });
    p.world = &world;
  }
  if (root) {
    DT_CHECK(*root >= 0 && *root < n, p.where, ": root ", *root, " out of range for a group of ",
             n, " ranks (expected 0 <= root < ", n, ")");
  }
  p.shards.resize(p.groups.size());
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const std::vector<int>& group = p.groups[g];
    p.shards[g].assign(group.size(), nullptr);
    for (size_t i = 0; i < group.size(); ++i) {
      const int rank = p.roles ? WorldRoles::stand_in(world, group[i]) : group[i];
      DT_CHECK(world.holds(rank), p.where, ": rank ", rank, " of ", mesh.to_string(),
               " is not held by this process; the simulated backend needs every rank of the mesh");
      if (root && static_cast<int64_t>(i) != *root) continue;
      DT_CHECK(in.holds(rank), p.where, ": no input shard for rank ", rank, " (input holds ranks ",
               held_ranks_text(in.ranks()), ")");
      const Tensor& t = in.shard(rank);
      DT_CHECK(t.defined(), p.where, ": the input shard of rank ", rank, " is undefined");
      if (p.first == nullptr) {
        p.first = &t;
        p.first_rank = rank;
      }
      DT_CHECK(t.dtype() == p.first->dtype(), p.where, ": shard of rank ", rank, " has dtype ",
               t.dtype(), " (shape ", t.shape(), ") but rank ", p.first_rank, " has ",
               p.first->dtype(), " (shape ", p.first->shape(), "); all shards need one dtype");
      DT_CHECK(t.dim() == p.first->dim(), p.where, ": shard of rank ", rank, " has shape ",
               t.shape(), " (", t.dim(), "-d) but rank ", p.first_rank, " has ",
               p.first->shape(), " (", p.first->dim(), "-d)");
      p.max_bytes = std::max(p.max_bytes, static_cast<int64_t>(t.nbytes()));
      p.shards[g][i] = &t;
    }
  }
  DT_CHECK(!p.roles || p.first == nullptr || p.first->is_meta(), p.where,
           ": a shape-only world computing by roles has a shard with data (rank ", p.first_rank,
           ")");
  return p;
}

// Normalises a tensor dim of the shards (what names it, e.g. "gather dim").
int64_t check_prepared_dim(const Prepared& p, const char* what, int64_t dim) {
  const int64_t nd = p.first->dim();
  DT_CHECK(nd > 0 && dim >= -nd && dim < nd, p.where, ": ", what, " ", dim,
           " out of range for shards of shape ", p.first->shape(), " (expected ", -nd,
           " <= dim < ", nd, ")");
  return dim < 0 ? dim + nd : dim;
}

// Within each group, shards agree on every dim but `free_dim` (-1: none),
// which `free_name` names ("gather dim") in the message.
void check_group_shapes(const Prepared& p, int64_t free_dim, const char* free_name = nullptr) {
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const Tensor& ref = *p.shards[g][0];
    for (size_t i = 1; i < p.groups[g].size(); ++i) {
      const Tensor& t = *p.shards[g][i];
      for (int64_t d = 0; d < t.dim(); ++d) {
        if (d == free_dim || t.size(d) == ref.size(d)) continue;
        if (free_name != nullptr) {
          DT_THROW(p.where, ": shard of rank ", p.groups[g][i], " has shape ", t.shape(),
                   " but rank ", p.groups[g][0], " of its group has ", ref.shape(),
                   "; shards may differ only along ", free_name, " ", free_dim);
        }
        DT_THROW(p.where, ": shard of rank ", p.groups[g][i], " has shape ", t.shape(), " but rank ",
                 p.groups[g][0], " of its group has ", ref.shape(),
                 "; every rank of a group needs the same shape");
      }
    }
  }
}

// ---- the fused reduction kernel (reduce_kernel.h, shared with MPI) ----------

using reduce_kernel::reduce_run_op;

// Reduces the group's shards (same shape, contiguous) along `dim`, viewed as
// [outer, L, inner]: rank i's output gets the reduction of rows
// [start_i, start_i + len_i) of every shard. all_reduce is the case of one
// output range covering all of L written to every member.
struct OutRange {
  int64_t start, len;
  std::vector<Tensor*> outs;  // each gets the same values
};

template <class T>
void reduce_ranges(ReduceOp op, const std::vector<Tensor>& shards, int64_t dim,
                   const std::vector<OutRange>& ranges) {
  const Shape& shape = shards[0].shape();
  int64_t outer = 1, inner = 1;
  const int64_t len = shape.empty() ? 1 : shape[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  std::vector<const T*> base, in(shards.size());
  for (const Tensor& s : shards) base.push_back(static_cast<const T*>(s.raw_data()));
  // Streaming stores only for outputs that would not stay in cache anyway,
  // by the rule the tiled walks use (tensor/loops.h, stream_threshold).
  int64_t out_bytes = 0;
  for (const OutRange& r : ranges)
    out_bytes += static_cast<int64_t>(r.outs.size()) * outer * r.len * inner *
                 static_cast<int64_t>(sizeof(T));
  const bool stream = out_bytes >= detail::stream_threshold();
  for (const OutRange& r : ranges) {
    if (r.len == 0 || outer == 0 || inner == 0) continue;
    std::vector<T*> out_base, out(r.outs.size());
    for (Tensor* t : r.outs) out_base.push_back(static_cast<T*>(t->raw_data()));
    const int64_t count = r.len * inner;
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t k = 0; k < base.size(); ++k) in[k] = base[k] + (o * len + r.start) * inner;
      for (size_t j = 0; j < out_base.size(); ++j) out[j] = out_base[j] + o * count;
      reduce_run_op<T>(op, in.data(), in.size(), out.data(), out.size(), count, stream);
    }
  }
}

void reduce_ranges_any(DType dtype, ReduceOp op, const std::vector<Tensor>& shards, int64_t dim,
                       const std::vector<OutRange>& ranges) {
  switch (dtype) {
    case DType::Bool: return reduce_ranges<bool>(op, shards, dim, ranges);
    case DType::Int64: return reduce_ranges<int64_t>(op, shards, dim, ranges);
    case DType::Float32: return reduce_ranges<float>(op, shards, dim, ranges);
    case DType::Float64: return reduce_ranges<double>(op, shards, dim, ranges);
    case DType::BFloat16: return reduce_ranges<BFloat16>(op, shards, dim, ranges);
    case DType::Float16: return reduce_ranges<Float16>(op, shards, dim, ranges);
  }
}

void check_reduce_op(const Prepared& p, ReduceOp op) {
  DT_CHECK(op != ReduceOp::Avg || is_floating(p.first->dtype()), p.where,
           ": reduce op avg needs a floating dtype, got ", p.first->dtype(), " shards of shape ",
           p.first->shape());
}

std::vector<Tensor> contiguous_shards(const std::vector<const Tensor*>& shards) {
  std::vector<Tensor> out;
  out.reserve(shards.size());
  for (const Tensor* t : shards) out.push_back(t->contiguous());
  return out;
}

// ---- data movement ------------------------------------------------------------


// The product of shape[begin, end).
int64_t span(const Shape& shape, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

std::byte* shard_bytes(const Tensor& t) { return static_cast<std::byte*>(t.raw_data()); }

// One run of `bytes`. Runs of one element are common (a column chunk of a
// narrow tensor): a move, not a call. Longer ones go through a
// ByteCopier, whose loop avoids memcpy's 4K-aliasing stalls on mid-sized
// runs (copy_bytes.h).
inline void copy_piece_run(const detail::ByteCopier& copy, std::byte* dst, const std::byte* src,
                     int64_t bytes) {
  switch (bytes) {
    case 1: std::memcpy(dst, src, 1); return;
    case 4: std::memcpy(dst, src, 4); return;
    case 8: std::memcpy(dst, src, 8); return;
    default: copy(dst, src, static_cast<size_t>(bytes));
  }
}

// The input shards as contiguous bytes, by flat index g * n + i (null where
// the collective reads no shard). A non-contiguous shard is copied once
// here; the copies live in `keep`.
struct Sources {
  std::vector<const std::byte*> data;
  std::vector<Tensor> keep;
};
Sources contiguous_sources(const Prepared& p) {
  Sources s;
  const size_t n = p.groups.empty() ? 0 : p.groups[0].size();
  s.data.assign(p.groups.size() * n, nullptr);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    for (size_t i = 0; i < n; ++i) {
      const Tensor* t = p.shards[g][i];
      if (t == nullptr) continue;
      if (t->is_contiguous()) {
        s.data[g * n + i] = shard_bytes(*t);
      } else {
        s.keep.push_back(t->contiguous());
        s.data[g * n + i] = shard_bytes(s.keep.back());
      }
    }
  }
  return s;
}

// Along the dim a collective joins (gather / concat dim), member j's shard
// of group g covers [at[k], at[k] + len[k]) of the joined dim, k = g * n + j;
// members[first[g], first[g + 1]) lists the members of group g with a
// non-empty piece, so a tiny tensor on many ranks skips the empty ones
// without visiting them once per receiver.
struct Joined {
  std::vector<int64_t> len, at, total;  // total[g]: the joined length
  std::vector<int32_t> members;
  std::vector<size_t> first;
};
Joined joined(const Prepared& p, int64_t dim) {
  Joined j;
  const size_t n = p.groups[0].size();
  j.len.resize(p.groups.size() * n);
  j.at.resize(p.groups.size() * n);
  j.first.push_back(0);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    int64_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t len = p.shards[g][i]->size(dim);
      j.len[g * n + i] = len;
      j.at[g * n + i] = at;
      at += len;
      if (len > 0) j.members.push_back(static_cast<int32_t>(i));
    }
    j.total.push_back(at);
    j.first.push_back(j.members.size());
  }
  return j;
}

// Each member's output, in a slot indexed by its rank; take() hands them to
// a LocalTensor in ascending rank order (every append O(1)). Tasks on the
// pool write distinct slots.
class RankSlots {
 public:
  explicit RankSlots(const Prepared& p) {
    int lo = INT_MAX, hi = INT_MIN;
    for (const std::vector<int>& group : p.groups) {
      for (int r : group) {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
    }
    if (lo <= hi) {
      lo_ = lo;
      slots_.resize(static_cast<size_t>(hi - lo) + 1);
    }
  }
  Tensor& operator[](int rank) { return slots_[static_cast<size_t>(rank - lo_)]; }
  LocalTensor take() {
    std::vector<std::pair<int, Tensor>> out;
    out.reserve(slots_.size());
    // Every rank of the mesh gets a defined tensor (Tensor::empty, even of
    // no elements), so an undefined slot is a rank outside the mesh.
    for (size_t k = 0; k < slots_.size(); ++k) {
      if (slots_[k].defined()) out.emplace_back(lo_ + static_cast<int>(k), std::move(slots_[k]));
    }
    return LocalTensor(std::move(out));
  }

 private:
  int lo_ = 0;
  std::vector<Tensor> slots_;
};

// ---- the per-rank trace -------------------------------------------------------

// CollectiveTrace: member i of group g handed in bytes(g, i).
template <class F>
void trace(const Prepared& p, CollectiveKind kind, const DeviceMesh& mesh, F&& bytes) {
  if (collective_trace() == nullptr) [[likely]]
    return;
  for (size_t g = 0; g < p.groups.size(); ++g)
    trace_collective(kind, p.first->dtype(), p.groups[g], mesh, p.where.mesh_dim,
                     [&](size_t i) { return static_cast<int64_t>(bytes(g, i)); });
  trace_call(kind, p.first->dtype(), p.max_bytes, p.groups[0], mesh, p.where.mesh_dim);
}

// Each member's own input shard.
auto own_bytes(const Prepared& p) {
  return [&p](size_t g, size_t i) { return p.shards[g][i]->nbytes(); };
}

// ---- the shape-only world -----------------------------------------------------

// World::shape_only's shards are meta: a collective checks and records
// itself as for data, then each member gets a meta tensor of the shape it
// would get, shape_of(g, i) for member i of group g; nothing moves.
template <class F>
LocalTensor meta_results(const Prepared& p, F&& shape_of) {
  RankSlots out(p);
  for (size_t g = 0; g < p.groups.size(); ++g)
    for (size_t i = 0; i < p.groups[g].size(); ++i)
      if (p.outputs_to(p.groups[g][i]))
        out[p.groups[g][i]] = Tensor::meta(shape_of(g, i), p.first->dtype());
  return out.take();
}

// The group's shape with `dim` the sum of its members' (gathered, joined).
Shape joined_shape(const Prepared& p, size_t g, int64_t dim) {
  Shape shape = p.shards[g][0]->shape();
  shape[dim] = 0;
  for (const Tensor* t : p.shards[g]) shape[dim] += t->size(dim);
  return shape;
}

// `shape` with `dim` cut to member i's chunk of n (Tensor::chunk's rule).
Shape chunk_shape(Shape shape, int64_t dim, size_t n, size_t i) {
  shape[dim] = chunk_range(shape[dim], static_cast<int64_t>(n), static_cast<int64_t>(i)).size;
  return shape;
}

}  // namespace

LocalTensor SimBackend::all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t gather_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Prepared p = prepare("all_gather", in, mesh, mesh_dim);
  gather_dim = check_prepared_dim(p, "gather dim", gather_dim);
  check_group_shapes(p, gather_dim, "gather dim");
  record_collective(CollectiveKind::AllGather, p.max_bytes, p.first->dtype(), p.where.mesh_dim);
  trace(p, CollectiveKind::AllGather, mesh, own_bytes(p));
  if (p.first->is_meta())
    return meta_results(p, [&](size_t g, size_t) { return joined_shape(p, g, gather_dim); });

  const Sources src = contiguous_sources(p);
  const Joined join = joined(p, gather_dim);
  const int64_t groups = static_cast<int64_t>(p.groups.size());
  const int64_t n = static_cast<int64_t>(p.groups[0].size());
  const DType dtype = p.first->dtype();
  const int64_t isz = static_cast<int64_t>(itemsize(dtype));
  RankSlots out(p);
  std::vector<Tensor> gathered(static_cast<size_t>(groups));
  std::vector<int64_t> bytes(static_cast<size_t>(groups));
  int64_t all_bytes = 0;
  for (int64_t g = 0; g < groups; ++g) {
    Shape shape = p.shards[g][0]->shape();
    shape[gather_dim] = join.total[g];
    bytes[g] = shape.product() * isz;
    all_bytes += bytes[g] * n;
  }

  // The group's shards joined once, into member 0's output: for each outer
  // index, member j's rows [outer, len_j, inner] follow one another.
  const detail::ByteCopier copy;
  detail::parallel_copies(groups, all_bytes / n, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      Shape shape = p.shards[g][0]->shape();
      const Around a = around(shape, gather_dim);
      shape[gather_dim] = join.total[g];
      Tensor t = Tensor::empty(shape, dtype);
      std::byte* dst = t.numel() > 0 ? shard_bytes(t) : nullptr;
      for (int64_t o = 0; dst != nullptr && o < a.outer; ++o) {
        for (size_t m = join.first[g]; m < join.first[g + 1]; ++m) {
          const int64_t k = g * n + join.members[m];
          const int64_t run = join.len[k] * a.inner * isz;
          copy_piece_run(copy, dst, src.data[k] + o * run, run);
          dst += run;
        }
      }
      gathered[g] = std::move(t);
    }
  });
  // Then a straight memcpy per other member: the same bytes as joining for
  // each member, without reading n sources n times.
  detail::parallel_copies(groups * n, all_bytes / n, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t g = k / n, i = k % n;
      if (i == 0) continue;
      const Tensor& whole = gathered[g];
      Tensor t = Tensor::empty(whole.shape(), dtype);
      if (bytes[g] > 0) std::memcpy(t.raw_data(), whole.raw_data(), static_cast<size_t>(bytes[g]));
      out[p.groups[g][i]] = std::move(t);
    }
  });
  for (int64_t g = 0; g < groups; ++g) out[p.groups[g][0]] = std::move(gathered[g]);
  return out.take();
}

LocalTensor SimBackend::all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   ReduceOp op) {
  const CollectiveTimer timer;  // collective_seconds
  const Prepared p = prepare("all_reduce", in, mesh, mesh_dim);
  check_reduce_op(p, op);
  check_group_shapes(p, -1);
  record_collective(CollectiveKind::AllReduce, p.max_bytes, p.first->dtype(), p.where.mesh_dim);
  trace(p, CollectiveKind::AllReduce, mesh, own_bytes(p));
  if (p.first->is_meta())
    return meta_results(p, [&](size_t g, size_t) { return p.shards[g][0]->shape(); });

  RankSlots out(p);
  const int64_t groups = static_cast<int64_t>(p.groups.size());
  const int64_t n = static_cast<int64_t>(p.groups[0].size());
  // Groups are independent and each folds its own shards in group order, so
  // running groups in parallel changes no bit.
  detail::parallel_items(groups, p.max_bytes * n * groups, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const std::vector<Tensor> shards = contiguous_shards(p.shards[g]);
      std::vector<Tensor> results;
      results.reserve(shards.size());
      OutRange all{0, shards[0].dim() == 0 ? 1 : shards[0].size(0), {}};
      for (size_t i = 0; i < shards.size(); ++i) {
        results.push_back(Tensor::empty(shards[0].shape(), shards[0].dtype()));
      }
      for (Tensor& r : results) all.outs.push_back(&r);
      reduce_ranges_any(shards[0].dtype(), op, shards, 0, {all});
      for (size_t i = 0; i < results.size(); ++i) out[p.groups[g][i]] = std::move(results[i]);
    }
  });
  return out.take();
}

LocalTensor SimBackend::reduce_scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                       ReduceOp op, int64_t scatter_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Prepared p = prepare("reduce_scatter", in, mesh, mesh_dim);
  check_reduce_op(p, op);
  scatter_dim = check_prepared_dim(p, "scatter dim", scatter_dim);
  check_group_shapes(p, -1);
  record_collective(CollectiveKind::ReduceScatter, p.max_bytes, p.first->dtype(), p.where.mesh_dim);
  trace(p, CollectiveKind::ReduceScatter, mesh, own_bytes(p));
  if (p.first->is_meta()) {
    return meta_results(p, [&](size_t g, size_t i) {
      return chunk_shape(p.shards[g][0]->shape(), scatter_dim, p.groups[g].size(), i);
    });
  }

  RankSlots out(p);
  const int64_t groups = static_cast<int64_t>(p.groups.size());
  const int64_t n = static_cast<int64_t>(p.groups[0].size());
  detail::parallel_items(groups, p.max_bytes * n * groups, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const std::vector<Tensor> shards = contiguous_shards(p.shards[g]);
      const int64_t len = shards[0].size(scatter_dim);
      std::vector<Tensor> results;
      std::vector<OutRange> ranges;
      results.reserve(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        // Tensor::chunk's rule: pieces of ceil(L/n), trailing ones short or empty.
        const ChunkRange piece = chunk_range(len, n, i);
        Shape shape = shards[0].shape();
        shape[scatter_dim] = piece.size;
        results.push_back(Tensor::empty(shape, shards[0].dtype()));
        ranges.push_back(OutRange{piece.start, piece.size, {}});
      }
      for (int64_t i = 0; i < n; ++i) ranges[i].outs.push_back(&results[i]);
      reduce_ranges_any(shards[0].dtype(), op, shards, scatter_dim, ranges);
      for (int64_t i = 0; i < n; ++i) out[p.groups[g][i]] = std::move(results[i]);
    }
  });
  return out.take();
}

LocalTensor SimBackend::all_to_all(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t split_dim, int64_t concat_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Prepared p = prepare("all_to_all", in, mesh, mesh_dim);
  split_dim = check_prepared_dim(p, "split dim", split_dim);
  concat_dim = check_prepared_dim(p, "concat dim", concat_dim);
  DT_CHECK(split_dim != concat_dim, p.where, ": split dim and concat dim must differ, both are ",
           split_dim, " (shards of shape ", p.first->shape(), ")");
  check_group_shapes(p, concat_dim, "concat dim");
  record_collective(CollectiveKind::AllToAll, p.max_bytes, p.first->dtype(), p.where.mesh_dim);
  trace(p, CollectiveKind::AllToAll, mesh, own_bytes(p));
  if (p.first->is_meta()) {
    return meta_results(p, [&](size_t g, size_t i) {
      return chunk_shape(joined_shape(p, g, concat_dim), split_dim, p.groups[g].size(), i);
    });
  }

  const Sources src = contiguous_sources(p);
  const Joined join = joined(p, concat_dim);
  const int64_t groups = static_cast<int64_t>(p.groups.size());
  const int64_t n = static_cast<int64_t>(p.groups[0].size());
  const DType dtype = p.first->dtype();
  const int64_t isz = static_cast<int64_t>(itemsize(dtype));
  int64_t all_bytes = 0;
  for (int64_t k = 0; k < groups * n; ++k) all_bytes += p.shards[k / n][k % n]->numel() * isz;
  const int64_t a_dim = std::min(split_dim, concat_dim), b_dim = std::max(split_dim, concat_dim);
  RankSlots out(p);

  // Every member's output first; then each sender walks its shard once, in
  // memory order, handing each run to the member that owns it. Reading each
  // shard once matters for 1024 tiny shards scattered over the heap (a pass
  // over all senders per receiver made that all_to_all 4x slower per rank
  // than on 256 ranks) as for large ones, where receiver-major passes that
  // read 1/n of every row defeat the prefetcher. Senders write disjoint
  // bytes of the outputs, so they may run in parallel.
  const detail::ByteCopier copy;
  std::vector<std::byte*> dst(static_cast<size_t>(groups * n), nullptr);
  for (int64_t k = 0; k < groups * n; ++k) {
    const int64_t g = k / n, i = k % n;
    Shape shape = p.shards[g][0]->shape();
    shape[split_dim] = chunk_range(shape[split_dim], n, i).size;
    shape[concat_dim] = join.total[g];
    Tensor t = Tensor::empty(shape, dtype);
    if (t.numel() > 0) dst[k] = shard_bytes(t);
    out[p.groups[g][i]] = std::move(t);
  }

  detail::parallel_copies(groups * n, all_bytes, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t g = k / n;
      const int64_t len = join.len[k], at = join.at[k], total = join.total[g];
      const Shape& shape = p.shards[g][0]->shape();
      const int64_t split_len = shape[split_dim];
      const int64_t outer = span(shape, 0, a_dim), mid = span(shape, a_dim + 1, b_dim),
                    inner = span(shape, b_dim + 1, static_cast<int64_t>(shape.size()));
      if (len == 0 || split_len == 0 || outer * mid * inner == 0) continue;
      // Tensor::chunk's pieces (chunk_range): member i owns [c * i, c * i +
      // size_i) of the split dim, size_i = min(c, L - c * i); the first
      // `owners` members own something, the rest get empty outputs.
      const int64_t c = split_len / n + (split_len % n != 0 ? 1 : 0);
      const int64_t owners = split_len / c + (split_len % c != 0 ? 1 : 0);
      std::byte* const* to = dst.data() + g * n;
      const std::byte* s = src.data[k];
      if (concat_dim < split_dim) {
        // Shard: [outer, len, mid, L, inner], rows (y, m) of L * inner; the
        // output of member i: [outer, total, mid, size_i, inner].
        // Every member's run is a piece but the last owner's (its chunk may
        // be shorter): hundreds of runs per row, so nothing is recomputed
        // per run.
        const int64_t row = split_len * inner * isz, piece = c * inner * isz;
        const int64_t last = row - (owners - 1) * piece;
        const int64_t rows = len * mid;
        for (int64_t o = 0; o < outer; ++o) {
          const int64_t first_row = (o * total + at) * mid;
          for (int64_t r = 0; r < rows; ++r, s += row) {
            const int64_t at_piece = (first_row + r) * piece;
            for (int64_t i = 0; i + 1 < owners; ++i)
              copy_piece_run(copy, to[i] + at_piece, s + i * piece, piece);
            copy_piece_run(copy, to[owners - 1] + (first_row + r) * last, s + (owners - 1) * piece, last);
          }
        }
      } else {
        // Shard: [outer, L, mid, len, inner], runs of len * inner; the output
        // of member i: [outer, size_i, mid, total, inner].
        const int64_t run = len * inner * isz;
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < owners; ++i) {
            const int64_t size = std::min(c, split_len - c * i);
            for (int64_t y = 0; y < size; ++y) {
              for (int64_t m = 0; m < mid; ++m, s += run) {
                const int64_t out_row = (o * size + y) * mid + m;
                copy_piece_run(copy, to[i] + (out_row * total + at) * inner * isz, s, run);
              }
            }
          }
        }
      }
    }
  });
  return out.take();
}

LocalTensor SimBackend::broadcast(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                  int64_t root) {
  const CollectiveTimer timer;  // collective_seconds
  const Prepared p = prepare("broadcast", in, mesh, mesh_dim, root);
  record_collective(CollectiveKind::Broadcast, p.max_bytes, p.first->dtype(), p.where.mesh_dim);
  trace(p, CollectiveKind::Broadcast, mesh,
        [&](size_t g, size_t) { return p.shards[g][root]->nbytes(); });
  if (p.first->is_meta())
    return meta_results(p, [&](size_t g, size_t) { return p.shards[g][root]->shape(); });

  const Sources src = contiguous_sources(p);
  const int64_t groups = static_cast<int64_t>(p.groups.size());
  const int64_t n = static_cast<int64_t>(p.groups[0].size());
  RankSlots out(p);
  detail::parallel_copies(groups * n, p.max_bytes * groups, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t g = k / n, i = k % n;
      const Tensor& from = *p.shards[g][root];
      Tensor t = Tensor::empty(from.shape(), from.dtype());
      if (t.numel() > 0) std::memcpy(t.raw_data(), src.data[g * n + root], t.nbytes());
      out[p.groups[g][i]] = std::move(t);
    }
  });
  return out.take();
}

LocalTensor SimBackend::scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                int64_t root, int64_t scatter_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Prepared p = prepare("scatter", in, mesh, mesh_dim, root);
  scatter_dim = check_prepared_dim(p, "scatter dim", scatter_dim);
  record_collective(CollectiveKind::Scatter, p.max_bytes, p.first->dtype(), p.where.mesh_dim);
  trace(p, CollectiveKind::Scatter, mesh, [&](size_t g, size_t i) {
    const Tensor& from = *p.shards[g][root];
    return chunk_shape(from.shape(), scatter_dim, p.groups[g].size(), i).product() *
           static_cast<int64_t>(itemsize(from.dtype()));
  });
  if (p.first->is_meta()) {
    return meta_results(p, [&](size_t g, size_t i) {
      return chunk_shape(p.shards[g][root]->shape(), scatter_dim, p.groups[g].size(), i);
    });
  }

  const Sources src = contiguous_sources(p);
  const int64_t groups = static_cast<int64_t>(p.groups.size());
  const int64_t n = static_cast<int64_t>(p.groups[0].size());
  const int64_t isz = static_cast<int64_t>(itemsize(p.first->dtype()));
  RankSlots out(p);
  // Member i gets rows [start_i, start_i + size_i) of the root's
  // [outer, len, inner]: one run per outer index.
  const detail::ByteCopier copy;
  detail::parallel_copies(groups * n, p.max_bytes * groups, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t g = k / n, i = k % n;
      const Tensor& from = *p.shards[g][root];
      const Around a = around(from.shape(), scatter_dim);
      const ChunkRange piece = chunk_range(a.len, n, i);
      Shape shape = from.shape();
      shape[scatter_dim] = piece.size;
      Tensor t = Tensor::empty(shape, from.dtype());
      if (t.numel() > 0) {
        std::byte* dst = shard_bytes(t);
        const std::byte* s = src.data[g * n + root] + piece.start * a.inner * isz;
        const int64_t run = piece.size * a.inner * isz, row = a.len * a.inner * isz;
        for (int64_t o = 0; o < a.outer; ++o, s += row, dst += run) copy_piece_run(copy, dst, s, run);
      }
      out[p.groups[g][i]] = std::move(t);
    }
  });
  return out.take();
}

}  // namespace dtensor
