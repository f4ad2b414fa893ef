// Placement — how a tensor is laid out along one mesh dim.
//
//   Shard(d)      tensor dim d is split over the mesh dim (chunks of
//                 ceil(L/n), trailing ones short or empty);
//   Shard(d, k)   the same, this mesh dim being the k-th (0-based) of the
//                 mesh dims sharding d to split it (PyTorch's shard_order;
//                 see spec.h). Shard(d) is the natural order: mesh dims
//                 sharding one tensor dim split it left to right;
//   Replicate()   every rank of the mesh dim holds the whole;
//   Partial(op)   every rank holds a piece, and the logical value is the
//                 reduction (sum, avg, max, min) of the pieces over the mesh dim.
//
// Text form (CLI, error messages): "S(0)", "S(0)[1]" (an ordered shard),
// "R", "P(sum)" ("P" alone = sum); a list is comma-separated:
// "S(0)[1],S(0)[0],P(avg)". Placements are small values:
// copying, comparing and hashing never allocate.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>

#include "dtensor/tensor.h"

namespace dtensor {

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };
// "sum", "avg", "max", "min"
const char* to_string(ReduceOp op);

class Placement {
 public:
  enum class Kind : uint8_t { Replicate, Shard, Partial };

  constexpr Placement() = default;  // Replicate
  static constexpr Placement replicate() { return Placement(Kind::Replicate, 0, ReduceOp::Sum); }
  // Shard(d) with -kMaxDims < d < kMaxDims (a tensor has at most kMaxDims
  // dims; negative d counts from the end); throws dtensor::Error otherwise
  // rather than storing a wrapped dim (Shard(256) is not Shard(0)).
  static constexpr Placement shard(int64_t dim) {
    if (dim <= -kMaxDims || dim >= kMaxDims) throw_bad_shard_dim(dim);
    return Placement(Kind::Shard, static_cast<int8_t>(dim), ReduceOp::Sum);
  }
  // Shard(dim) that is the order-th mesh dim to split tensor dim `dim`;
  // order -1 is the natural order. Throws unless -1 <= order < kMaxDims.
  static constexpr Placement shard(int64_t dim, int64_t order) {
    if (order < -1 || order >= kMaxDims) throw_bad_shard_order(dim, order);
    Placement p = shard(dim);
    p.order_ = static_cast<int8_t>(order);
    return p;
  }
  static constexpr Placement partial(ReduceOp op = ReduceOp::Sum) {
    return Placement(Kind::Partial, 0, op);
  }

  constexpr Kind kind() const { return kind_; }
  constexpr bool is_replicate() const { return kind_ == Kind::Replicate; }
  constexpr bool is_shard() const { return kind_ == Kind::Shard; }
  constexpr bool is_shard(int64_t dim) const { return kind_ == Kind::Shard && dim_ == dim; }
  constexpr bool is_partial() const { return kind_ == Kind::Partial; }
  // The sharded tensor dim. REQUIRES: is_shard().
  constexpr int64_t dim() const { return dim_; }
  // The split order of a shard: k = the k-th mesh dim to split dim(); -1 =
  // natural (left to right). -1 for R and P.
  constexpr int shard_order() const { return order_; }
  // The reduction. REQUIRES: is_partial().
  constexpr ReduceOp reduce_op() const { return op_; }

  friend constexpr bool operator==(const Placement& a, const Placement& b) {
    return a.kind_ == b.kind_ &&
           (a.kind_ != Kind::Shard || (a.dim_ == b.dim_ && a.order_ == b.order_)) &&
           (a.kind_ != Kind::Partial || a.op_ == b.op_);
  }
  friend constexpr bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }
  constexpr uint32_t hash() const {
    return static_cast<uint32_t>(kind_) |
           (kind_ == Kind::Shard ? static_cast<uint32_t>(static_cast<uint8_t>(dim_)) << 2 |
                                       static_cast<uint32_t>(static_cast<uint8_t>(order_ + 1)) << 12
                                 : 0) |
           (kind_ == Kind::Partial ? static_cast<uint32_t>(op_) << 10 : 0);
  }

 private:
  constexpr Placement(Kind kind, int8_t dim, ReduceOp op) : kind_(kind), dim_(dim), op_(op) {}
  [[noreturn]] static void throw_bad_shard_dim(int64_t dim);
  [[noreturn]] static void throw_bad_shard_order(int64_t dim, int64_t order);
  Kind kind_ = Kind::Replicate;
  int8_t dim_ = 0;
  ReduceOp op_ = ReduceOp::Sum;
  int8_t order_ = -1;  // shards only; -1 elsewhere so == and hash ignore it
};
static_assert(sizeof(Placement) == 4, "Placement is hashed and compared in hot paths");

// The spellings of PyTorch DTensor: {Shard(0), Replicate(), Partial()}.
constexpr Placement Shard(int64_t dim) { return Placement::shard(dim); }
constexpr Placement Shard(int64_t dim, int64_t order) { return Placement::shard(dim, order); }
constexpr Placement Replicate() { return Placement::replicate(); }
constexpr Placement Partial(ReduceOp op = ReduceOp::Sum) { return Placement::partial(op); }

// One placement per mesh dim, inline (at most kMaxDims).
class Placements {
 public:
  Placements() = default;
  Placements(std::initializer_list<Placement> values) {
    for (const Placement& p : values) push_back(p);
  }
  Placements(size_t n, Placement value) {
    for (size_t i = 0; i < n; ++i) push_back(value);
  }
  void push_back(Placement p) {
    DT_CHECK(size_ < kMaxDims, "too many placements: at most ", kMaxDims, " mesh dims");
    data_[size_++] = p;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Placement& operator[](size_t i) { return data_[i]; }
  const Placement& operator[](size_t i) const { return data_[i]; }
  const Placement* begin() const { return data_; }
  const Placement* end() const { return data_ + size_; }
  Placement* begin() { return data_; }
  Placement* end() { return data_ + size_; }

  friend bool operator==(const Placements& a, const Placements& b) {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i)
      if (a.data_[i] != b.data_[i]) return false;
    return true;
  }
  friend bool operator!=(const Placements& a, const Placements& b) { return !(a == b); }

 private:
  Placement data_[kMaxDims] = {};
  uint8_t size_ = 0;
};

// ---- shard order ----
// The mesh dims sharding tensor dim `dim`, in the order they split it
// (ascending mesh dims when natural). REQUIRES: p's orders are valid (as
// DTensorSpec leaves them).
DimVector shard_split_order(const Placements& p, int64_t dim);
// Whether any shard carries an order other than the natural one.
bool has_shard_order(const Placements& p);
// p with every order dropped (natural order; a different layout when p had one).
Placements without_shard_order(const Placements& p);
// Validates and canonicalizes orders: for each tensor dim, the shards of it
// must be all natural or carry a permutation of 0..k-1; a permutation equal
// to the natural order becomes natural. Throws dtensor::Error naming p.
Placements normalize_shard_orders(const Placements& p);
// The placements after mesh dims dims[j] change to to[j] (the others keep
// their placement and relative split order). A shard in `to` with order k
// becomes the k-th to split its dim (applied in ascending k), one with the
// natural order takes its natural place: after the lower mesh dims sharding
// that dim, before the higher ones. The result is normalized.
Placements replace_placements(const Placements& p, const DimVector& dims, const Placements& to);

// "S(0)", "S(0)[1]", "R", "P(sum)"
std::string to_string(const Placement& p);
// "S(0),R,P(sum)"
std::string to_string(const Placements& p);
std::ostream& operator<<(std::ostream& os, const Placement& p);
std::ostream& operator<<(std::ostream& os, const Placements& p);

// Parses one placement: S(d) (d may be negative), S(d)[k] (an order), R, P, P(sum|avg|max|min);
// spaces are ignored and the letters may be lower case. PyTorch's spellings
// are accepted too: Shard(d), Replicate(), Partial(), Partial(avg). Throws
// naming the text.
Placement parse_placement(const std::string& text);
// Parses a comma-separated list, e.g. "S(0),R,P(avg)".
Placements parse_placements(const std::string& text);

}  // namespace dtensor
