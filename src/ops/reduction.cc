// Reductions on DTensors. Summing over a sharded dim leaves each rank with
// the sum of its own rows: a Partial(sum) over that mesh dim. A dim that is
// kept stays sharded (renumbered when earlier dims are dropped); partial
// sums stay partial since a sum of sums is a sum.
#include <algorithm>

#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {

// args: keepdim, then the reduced dims (normalised, ascending; none = all).
bool reduced(const OpSchema& s, int64_t d) {
  if (s.num_args == 1) return true;
  for (int i = 1; i < s.num_args; ++i)
    if (s.args[i] == d) return true;
  return false;
}

TensorMeta sum_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  const bool keepdim = s.args[0] != 0;
  Shape out;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (!reduced(s, d)) out.push_back(x.shape()[d]);
    else if (keepdim) out.push_back(1);
  }
  DType dtype = x.dtype() == DType::Bool ? DType::Int64 : x.dtype();
  return {out, contiguous_strides(out), dtype};
}

void sum_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const DTensorSpec& x = s.input(0);
  const bool keepdim = s.args[0] != 0;
  int64_t out_dim = 0;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (reduced(s, d)) {
      c.push_back({{Shard(d)}, Partial(ReduceOp::Sum)});
      if (keepdim) ++out_dim;
    } else {
      c.push_back({{Shard(d)}, Shard(out_dim++)});
    }
  }
  c.push_back({{Partial(ReduceOp::Sum)}, Partial(ReduceOp::Sum)});
  c.push_back({{Partial(ReduceOp::Avg)}, Partial(ReduceOp::Avg)});
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kSum{"sum", sum_meta, sum_strategies};

}  // namespace

DTensor sum(const DTensor& x, const DimVector& dims, bool keepdim) {
  OpSchema schema(OpId::Sum, {&x.spec()}, {keepdim ? 1 : 0});
  DimVector norm;
  for (int64_t d : dims) norm.push_back(wrap_dim(d, x.dim(), "sum"));
  std::sort(norm.begin(), norm.end());
  for (size_t i = 0; i < norm.size(); ++i) {
    DT_CHECK(i == 0 || norm[i] != norm[i - 1], "sum: dim ", norm[i], " is repeated in ", dims);
    schema.push_arg(norm[i]);
  }
  return run_unary(schema, kSum, x, [&](int, const Tensor& t) { return sum(t, dims, keepdim); });
}

}  // namespace dtensor
