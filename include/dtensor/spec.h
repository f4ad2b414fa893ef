// DTensorSpec — everything about a DTensor but its data: the mesh, one
// placement per mesh dim, and the global tensor's shape, strides and dtype.
//
// The spec answers "which part of the global tensor does this rank hold":
// for a dim of global length L split n ways, the shard at index r has size
// min(L, c(r+1)) - cr with c = ceil(L/n) (0 when cr >= L); several mesh dims
// sharding the same tensor dim split it in their split order: by default
// left to right (mesh dim 0 chunks the whole length, mesh dim 1 chunks each
// resulting piece, ...); with orders (Shard(d, k), text S(d)[k]) the mesh
// dim of order 0 chunks the whole length, the one of order 1 each piece,
// and so on. An empty shard reports the dim's global length as its offset.
//
// Shard order (PyTorch's shard_order): FSDP over tensor parallelism on a
// (dp, tp) mesh wants tp to split a weight's rows first and dp to split
// each tp piece: S(0)[1],S(0)[0]. On mesh (2, 2) with shape [8, 4],
// coordinate (d, t) then holds rows [4t+2d, 4t+2d+2); with the natural
// S(0),S(0) it holds rows [4d+2t, 4d+2t+2).
//
// Construction validates (placement count = mesh ndim, shard dims in range,
// the orders of each tensor dim's shards all natural or a permutation of
// 0..k-1, no mix of Partial kinds other than sum with avg) and normalises
// negative shard dims and orders equal to the natural one (S(0)[0],S(0)[1]
// is S(0),S(0); a lone S(0)[0] is S(0)). The hash is computed once; copies
// and comparisons never allocate.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "dtensor/mesh.h"
#include "dtensor/placement.h"
#include "dtensor/tensor.h"

namespace dtensor {

// The global tensor's metadata.
struct TensorMeta {
  Shape shape;
  Shape strides;
  DType dtype = DType::Float32;

  friend bool operator==(const TensorMeta& a, const TensorMeta& b) {
    return a.shape == b.shape && a.strides == b.strides && a.dtype == b.dtype;
  }
};

// The part of the global tensor a shard covers.
struct ShardExtent {
  Shape local_shape;
  Shape global_offset;
};

class DTensorSpec {
 public:
  // Contiguous strides.
  DTensorSpec(DeviceMesh mesh, const Placements& placements, const Shape& shape,
              DType dtype = DType::Float32);
  DTensorSpec(DeviceMesh mesh, const Placements& placements, const TensorMeta& meta);

  const DeviceMesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const TensorMeta& meta() const { return meta_; }
  const Shape& shape() const { return meta_.shape; }
  DType dtype() const { return meta_.dtype; }
  int64_t ndim() const { return static_cast<int64_t>(meta_.shape.size()); }

  // The shard at a mesh coordinate. REQUIRES: coordinate has mesh ndim entries, each in range.
  ShardExtent extent(const DimVector& coordinate) const;
  // The shard of a rank; nullopt when the rank is not in the mesh.
  std::optional<ShardExtent> extent_of_rank(int rank) const;
  Shape local_shape(const DimVector& coordinate) const { return extent(coordinate).local_shape; }
  Shape global_offset(const DimVector& coordinate) const { return extent(coordinate).global_offset; }

  // The same spec with other placements (validated) / another global shape.
  DTensorSpec with_placements(const Placements& placements) const;

  bool is_replicated() const;   // every placement Replicate
  bool has_partial() const;
  bool is_sharded(int64_t tensor_dim) const;
  // Product of the sizes of the mesh dims that shard some tensor dim.
  int64_t num_shards() const;
  // Bytes of the global tensor.
  int64_t global_bytes() const;

  size_t hash() const { return hash_; }
  friend bool operator==(const DTensorSpec& a, const DTensorSpec& b) {
    return a.hash_ == b.hash_ && a.placements_ == b.placements_ && a.meta_ == b.meta_ &&
           a.mesh_ == b.mesh_;
  }
  friend bool operator!=(const DTensorSpec& a, const DTensorSpec& b) { return !(a == b); }

  // "DTensorSpec(mesh=[2, 2], placements=S(0),R, shape=[8, 4], dtype=float32)"
  std::string to_string() const;

 private:
  void validate_and_normalize();

  DeviceMesh mesh_;
  Placements placements_;
  TensorMeta meta_;
  size_t hash_ = 0;
};

std::ostream& operator<<(std::ostream& os, const DTensorSpec& spec);

// The chunk of a dim of length `length` split `n` ways that index `r` holds:
// {size, start}; start == length when the chunk is empty.
struct ChunkRange {
  int64_t size;
  int64_t start;
};
ChunkRange chunk_range(int64_t length, int64_t n, int64_t r);

}  // namespace dtensor
