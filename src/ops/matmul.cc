// Matrix products on DTensors. For C = A·B with A [m, k] and B [k, n], per
// mesh dim: rows of A sharded give rows of C (S(0)·R -> S(0)); columns of B
// sharded give columns of C (R·S(1) -> S(1)); the contraction dim sharded on
// both gives partial products to be summed (S(1)·S(0) -> P(sum)); and since
// the product is linear in each factor, a P(sum) factor times a replicated
// one stays P(sum).
#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {

TensorMeta mm_meta(const OpSchema& s) {
  const Shape& a = s.input(0).shape();
  const Shape& b = s.input(1).shape();
  DT_CHECK(a.size() == 2 && b.size() == 2, "mm: expected 2-d tensors, got ", a, " @ ", b);
  DT_CHECK(a[1] == b[0], "mm: inner dimensions differ: ", a, " @ ", b,
           " (expected a.size(1) == b.size(0), got ", a[1], " vs ", b[0], ")");
  const Shape out{a[0], b[1]};
  return {out, contiguous_strides(out), promote_types(s.input(0).dtype(), s.input(1).dtype())};
}

void mm_strategies(const OpSchema&, const TensorMeta&, std::vector<DimStrategy>& c) {
  const Placement r = Replicate(), p = Partial();
  c.push_back({{Shard(0), r}, Shard(0)});
  c.push_back({{r, Shard(1)}, Shard(1)});
  c.push_back({{Shard(1), Shard(0)}, p});
  c.push_back({{p, r}, p});
  c.push_back({{r, p}, p});
  c.push_back({{r, r}, r});
}

constexpr OpRule kMm{"mm", mm_meta, mm_strategies};

}  // namespace

DTensor mm(const DTensor& a, const DTensor& b) {
  const OpSchema schema(OpId::Mm, {&a.spec(), &b.spec()});
  return run_binary(schema, kMm, a, b,
                    [](int, const Tensor& x, const Tensor& y) { return mm(x, y); });
}

}  // namespace dtensor
