// DTensorSpec: validation, the chunking rules (local shape and global
// offset of every shard) and hashing.
#include "dtensor/spec.h"

#include <functional>
#include <ostream>
#include <sstream>

namespace dtensor {

ChunkRange chunk_range(int64_t length, int64_t n, int64_t r) {
  // ceil(length / n) and c * r, written so that no length near INT64_MAX
  // overflows: (length + n - 1) would.
  const int64_t c = length / n + (length % n != 0 ? 1 : 0);
  if (c == 0 || r > (length - 1) / c) return {0, length};
  const int64_t start = c * r;  // < length by the test above
  return {std::min(c, length - start), start};
}

DTensorSpec::DTensorSpec(DeviceMesh mesh, const Placements& placements, const Shape& shape,
                         DType dtype)
    : DTensorSpec(std::move(mesh), placements, TensorMeta{shape, contiguous_strides(shape), dtype}) {}

DTensorSpec::DTensorSpec(DeviceMesh mesh, const Placements& placements, const TensorMeta& meta)
    : mesh_(std::move(mesh)), placements_(placements), meta_(meta) {
  validate_and_normalize();
}

void DTensorSpec::validate_and_normalize() {
  DT_CHECK(placements_.size() == static_cast<size_t>(mesh_.ndim()), "expected ", mesh_.ndim(),
           mesh_.ndim() == 1 ? " placement" : " placements", " for a ", mesh_.ndim(),
           "-d mesh, got ", placements_.size(), ": ",
           dtensor::to_string(placements_));
  DT_CHECK(meta_.strides.size() == meta_.shape.size(), "tensor strides ", meta_.strides,
           " do not match shape ", meta_.shape);
  // Every size the planner and the chunking derive from the shape is at most
  // its element or byte count, so checking these two here keeps them in int64.
  checked_bytes(checked_numel(meta_.shape, "DTensorSpec"), itemsize(meta_.dtype),
                "DTensorSpec: bytes of the global tensor");
  const int64_t nd = static_cast<int64_t>(meta_.shape.size());
  std::optional<ReduceOp> partial_op;
  for (size_t i = 0; i < placements_.size(); ++i) {
    Placement& p = placements_[i];
    if (p.is_shard()) {
      DT_CHECK(p.dim() >= -nd && p.dim() < nd, "placement ", dtensor::to_string(p), " on mesh dim ", i,
               " names tensor dim ", p.dim(), " but the tensor has shape ", meta_.shape,
               " (placements ", dtensor::to_string(placements_), ")");
      if (p.dim() < 0) p = Shard(p.dim() + nd, p.shard_order());
    } else if (p.is_partial()) {
      const ReduceOp op = p.reduce_op();
      // An average of integers is not an integer: the reduction that would
      // resolve the Partial could not run, so the layout is refused here.
      DT_CHECK(op != ReduceOp::Avg || is_floating(meta_.dtype), "placement P(avg) on mesh dim ",
               i, " needs a floating dtype, got ", meta_.dtype, " (placements ",
               dtensor::to_string(placements_), ")");
      if (partial_op && *partial_op != op) {
        const bool sum_avg = (*partial_op == ReduceOp::Sum || *partial_op == ReduceOp::Avg) &&
                             (op == ReduceOp::Sum || op == ReduceOp::Avg);
        DT_CHECK(sum_avg, "placements ", dtensor::to_string(placements_), " mix Partial(",
                 dtensor::to_string(*partial_op), ") with Partial(", dtensor::to_string(op),
                 "); only sum and avg may be mixed");
      }
      partial_op = op;
    }
  }
  // After the dims are non-negative, so S(-1)[0] and S(1)[1] count as one dim.
  placements_ = normalize_shard_orders(placements_);
  // The hash mixes every field once, so lookups by spec cost a compare.
  size_t h = mesh_.hash();
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const Placement& p : placements_) mix(p.hash());
  for (int64_t s : meta_.shape) mix(static_cast<size_t>(s));
  for (int64_t s : meta_.strides) mix(static_cast<size_t>(s));
  mix(static_cast<size_t>(meta_.dtype));
  hash_ = h;
}

ShardExtent DTensorSpec::extent(const DimVector& coordinate) const {
  DT_CHECK(coordinate.size() == static_cast<size_t>(mesh_.ndim()), "coordinate ", coordinate,
           " has ", coordinate.size(), " entries, expected ", mesh_.ndim(), " for ", mesh_);
  ShardExtent e{meta_.shape, Shape(meta_.shape.size(), 0)};
  // The mesh's sizes once: ops that need each rank's shard (views) call
  // this per rank per op.
  const Shape mesh_shape = mesh_.shape();
  for (size_t i = 0; i < placements_.size(); ++i)
    DT_CHECK(coordinate[i] >= 0 && coordinate[i] < mesh_shape[i], "coordinate ", coordinate,
             " out of range for ", mesh_);
  // Each mesh dim sharding dim d chunks what the ones before it in d's
  // split order left. Natural order (the common case) is mesh dim order.
  auto split = [&](size_t i, int64_t d) {
    if (e.local_shape[d] == 0) {
      e.global_offset[d] = meta_.shape[d];
      return;
    }
    const ChunkRange c = chunk_range(e.local_shape[d], mesh_shape[i], coordinate[i]);
    if (c.size == 0) {
      e.local_shape[d] = 0;
      e.global_offset[d] = meta_.shape[d];
    } else {
      e.local_shape[d] = c.size;
      e.global_offset[d] += c.start;
    }
  };
  if (!has_shard_order(placements_)) {
    for (size_t i = 0; i < placements_.size(); ++i)
      if (placements_[i].is_shard()) split(i, placements_[i].dim());
    return e;
  }
  for (int64_t d = 0; d < ndim(); ++d)
    for (int64_t m : shard_split_order(placements_, d)) split(static_cast<size_t>(m), d);
  return e;
}

std::optional<ShardExtent> DTensorSpec::extent_of_rank(int rank) const {
  std::optional<DimVector> coord = mesh_.coordinate(rank);
  if (!coord) return std::nullopt;
  return extent(*coord);
}

DTensorSpec DTensorSpec::with_placements(const Placements& placements) const {
  return DTensorSpec(mesh_, placements, meta_);
}

bool DTensorSpec::is_replicated() const {
  for (const Placement& p : placements_)
    if (!p.is_replicate()) return false;
  return true;
}

bool DTensorSpec::has_partial() const {
  for (const Placement& p : placements_)
    if (p.is_partial()) return true;
  return false;
}

bool DTensorSpec::is_sharded(int64_t tensor_dim) const {
  for (const Placement& p : placements_)
    if (p.is_shard(tensor_dim)) return true;
  return false;
}

int64_t DTensorSpec::num_shards() const {
  int64_t n = 1;
  for (size_t i = 0; i < placements_.size(); ++i)
    if (placements_[i].is_shard()) n = checked_mul(n, mesh_.size(static_cast<int>(i)), "num_shards");
  return n;
}

int64_t DTensorSpec::global_bytes() const {
  return checked_bytes(meta_.shape.product(), itemsize(meta_.dtype), "global_bytes");
}

std::string DTensorSpec::to_string() const {
  std::ostringstream os;
  os << "DTensorSpec(mesh=" << mesh_.shape() << ", placements=" << dtensor::to_string(placements_)
     << ", shape=" << meta_.shape << ", dtype=" << meta_.dtype << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const DTensorSpec& spec) { return os << spec.to_string(); }

}  // namespace dtensor
