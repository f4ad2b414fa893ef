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
#include "comm/sim_backend.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <vector>

#include "comm/reduce_kernel.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"
#include "dtensor/spec.h"

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

std::string ranks_text(const std::vector<int>& ranks) {
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
  if (root) {
    DT_CHECK(*root >= 0 && *root < n, p.where, ": root ", *root, " out of range for a group of ",
             n, " ranks (expected 0 <= root < ", n, ")");
  }
  p.shards.resize(p.groups.size());
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const std::vector<int>& group = p.groups[g];
    p.shards[g].assign(group.size(), nullptr);
    for (size_t i = 0; i < group.size(); ++i) {
      const int rank = group[i];
      DT_CHECK(world.holds(rank), p.where, ": rank ", rank, " of ", mesh.to_string(),
               " is not held by this process; the simulated backend needs every rank of the mesh");
      if (root && static_cast<int64_t>(i) != *root) continue;
      DT_CHECK(in.holds(rank), p.where, ": no input shard for rank ", rank, " (input holds ranks ",
               ranks_text(in.ranks()), ")");
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
  return p;
}

// Normalises a tensor dim of the shards (what names it, e.g. "gather dim").
int64_t check_dim(const Prepared& p, const char* what, int64_t dim) {
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
  for (const OutRange& r : ranges) {
    if (r.len == 0 || outer == 0 || inner == 0) continue;
    std::vector<T*> out_base, out(r.outs.size());
    for (Tensor* t : r.outs) out_base.push_back(static_cast<T*>(t->raw_data()));
    const int64_t count = r.len * inner;
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t k = 0; k < base.size(); ++k) in[k] = base[k] + (o * len + r.start) * inner;
      for (size_t j = 0; j < out_base.size(); ++j) out[j] = out_base[j] + o * count;
      reduce_run_op<T>(op, in.data(), in.size(), out.data(), out.size(), count);
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

}  // namespace

LocalTensor SimBackend::all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t gather_dim) {
  const Prepared p = prepare("all_gather", in, mesh, mesh_dim);
  gather_dim = check_dim(p, "gather dim", gather_dim);
  check_group_shapes(p, gather_dim, "gather dim");
  record_collective(CollectiveKind::AllGather, p.max_bytes);

  LocalTensor out;
  std::vector<Tensor> parts;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    parts.clear();
    for (const Tensor* t : p.shards[g]) parts.push_back(*t);
    // One cat per group and a clone per other member: the same bytes as a
    // cat per member, but clone is a straight memcpy.
    const Tensor gathered = cat(parts, gather_dim);
    for (size_t i = 0; i < p.groups[g].size(); ++i) {
      out.set(p.groups[g][i], i == 0 ? gathered : gathered.clone());
    }
  }
  return out;
}

LocalTensor SimBackend::all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   ReduceOp op) {
  const Prepared p = prepare("all_reduce", in, mesh, mesh_dim);
  check_reduce_op(p, op);
  check_group_shapes(p, -1);
  record_collective(CollectiveKind::AllReduce, p.max_bytes);

  LocalTensor out;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const std::vector<Tensor> shards = contiguous_shards(p.shards[g]);
    std::vector<Tensor> results;
    results.reserve(shards.size());
    OutRange all{0, shards[0].dim() == 0 ? 1 : shards[0].size(0), {}};
    for (size_t i = 0; i < shards.size(); ++i) {
      results.push_back(Tensor::empty(shards[0].shape(), shards[0].dtype()));
    }
    for (Tensor& r : results) all.outs.push_back(&r);
    reduce_ranges_any(shards[0].dtype(), op, shards, 0, {all});
    for (size_t i = 0; i < results.size(); ++i) out.set(p.groups[g][i], std::move(results[i]));
  }
  return out;
}

LocalTensor SimBackend::reduce_scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                       ReduceOp op, int64_t scatter_dim) {
  const Prepared p = prepare("reduce_scatter", in, mesh, mesh_dim);
  check_reduce_op(p, op);
  scatter_dim = check_dim(p, "scatter dim", scatter_dim);
  check_group_shapes(p, -1);
  record_collective(CollectiveKind::ReduceScatter, p.max_bytes);

  LocalTensor out;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const std::vector<Tensor> shards = contiguous_shards(p.shards[g]);
    const int64_t n = static_cast<int64_t>(shards.size());
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
    for (int64_t i = 0; i < n; ++i) out.set(p.groups[g][i], std::move(results[i]));
  }
  return out;
}

LocalTensor SimBackend::all_to_all(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t split_dim, int64_t concat_dim) {
  const Prepared p = prepare("all_to_all", in, mesh, mesh_dim);
  split_dim = check_dim(p, "split dim", split_dim);
  concat_dim = check_dim(p, "concat dim", concat_dim);
  DT_CHECK(split_dim != concat_dim, p.where, ": split dim and concat dim must differ, both are ",
           split_dim, " (shards of shape ", p.first->shape(), ")");
  check_group_shapes(p, concat_dim, "concat dim");
  record_collective(CollectiveKind::AllToAll, p.max_bytes);

  LocalTensor out;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const int64_t n = static_cast<int64_t>(p.groups[g].size());
    std::vector<std::vector<Tensor>> pieces;  // pieces[j][i]: member j's chunk for member i
    for (const Tensor* t : p.shards[g]) pieces.push_back(t->chunk(n, split_dim));
    for (int64_t i = 0; i < n; ++i) {
      std::vector<Tensor> received;
      for (int64_t j = 0; j < n; ++j) received.push_back(pieces[j][i]);
      out.set(p.groups[g][i], cat(received, concat_dim));  // a fresh tensor per member
    }
  }
  return out;
}

LocalTensor SimBackend::broadcast(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                  int64_t root) {
  const Prepared p = prepare("broadcast", in, mesh, mesh_dim, root);
  record_collective(CollectiveKind::Broadcast, p.max_bytes);

  LocalTensor out;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const Tensor& src = *p.shards[g][root];
    for (int rank : p.groups[g]) out.set(rank, src.clone());
  }
  return out;
}

LocalTensor SimBackend::scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                int64_t root, int64_t scatter_dim) {
  const Prepared p = prepare("scatter", in, mesh, mesh_dim, root);
  scatter_dim = check_dim(p, "scatter dim", scatter_dim);
  record_collective(CollectiveKind::Scatter, p.max_bytes);

  LocalTensor out;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const std::vector<int>& group = p.groups[g];
    const std::vector<Tensor> pieces =
        p.shards[g][root]->chunk(static_cast<int64_t>(group.size()), scatter_dim);
    for (size_t i = 0; i < group.size(); ++i) out.set(group[i], pieces[i].clone());
  }
  return out;
}

}  // namespace dtensor
