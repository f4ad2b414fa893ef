// clamp (clamp_min, clamp_max) and tril / triu on DTensors.
//
// clamp is elementwise, so every shard passes; it is also non-decreasing,
// so it commutes with a max or min over the ranks: max_r clamp(a_r) =
// clamp(max_r a_r), and Partial(max|min) pass. A sum does not commute with
// it (clamp(a) + clamp(b) != clamp(a + b)): Partial(sum|avg) are reduced.
//
// tril/triu zero the elements on one side of a diagonal of the last two
// dims. A shard of those dims holds rows [r0, r0 + m) and columns
// [c0, c0 + n) of each matrix; global (r0 + i, c0 + j) is kept when
// (c0 + j) - (r0 + i) <= diagonal, i.e. local (i, j) is kept by the local
// op with diagonal + r0 - c0. So every dim may stay sharded. Every piece
// of a Partial is zeroed at the same positions, and any reduction of zeros
// is zero, so every Partial kind passes (max_r tril(a_r) = tril(max_r a_r):
// the zeros never meet a value of another piece).
//
// Backward (PyTorch's): clamp passes the gradient where min <= x <= max
// (0 elsewhere, NaN x included); tril/triu take the same triangle of it.
#include <algorithm>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {

// Schema args of clamp: per bound, 0 when absent, else 1 + its Scalar kind
// (the kinds decide the result's dtype).
int64_t bound_arg(const std::optional<Scalar>& b) {
  return b ? 1 + static_cast<int64_t>(b->kind()) : 0;
}

std::optional<Scalar> probe_bound(int64_t arg) {
  if (arg == 0) return std::nullopt;
  switch (static_cast<Scalar::Kind>(arg - 1)) {
    case Scalar::Kind::Bool: return Scalar(false);
    case Scalar::Kind::Int: return Scalar(0);
    case Scalar::Kind::Float: return Scalar(0.0);
  }
  return std::nullopt;
}

// The plain op on an empty probe of x's dtype validates and gives the dtype.
TensorMeta clamp_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  DT_CHECK(x.dtype() != DType::Bool, "clamp: bool tensors are not supported, got a bool tensor "
           "of shape ", x.shape(), " (expected int64, float32 or float64)");
  const DType dtype =
      clamp(Tensor::zeros({0}, x.dtype()), probe_bound(s.args[0]), probe_bound(s.args[1])).dtype();
  return {x.shape(), contiguous_strides(x.shape()), dtype};
}

void clamp_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < s.input(0).ndim(); ++d) c.push_back({{Shard(d)}, Shard(d)});
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{Replicate()}, Replicate()});
}

TensorMeta triangle_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  const char* op = s.op == OpId::Tril ? "tril" : "triu";
  DT_CHECK(x.ndim() >= 2, op, ": input must have at least 2 dims, got shape ", x.shape());
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

void triangle_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < s.input(0).ndim(); ++d) c.push_back({{Shard(d)}, Shard(d)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kClamp{"clamp", clamp_meta, clamp_strategies, nullptr, true};
constexpr OpRule kTril{"tril", triangle_meta, triangle_strategies};
constexpr OpRule kTriu{"triu", triangle_meta, triangle_strategies};

DTensor triangle(OpId id, const OpRule& rule, const DTensor& x, int64_t diagonal) {
  const OpSchema schema(id, {&x.spec()}, {diagonal});
  const DTensor* inputs[] = {&x};
  const bool lower = id == OpId::Tril;
  DTensor out = run(schema, rule, inputs, [&](int rank, const Tensor* const* t,
                                              const OutputSharding& s) {
    const int64_t nd = x.dim();
    const ShardExtent e = *s.output.extent_of_rank(rank);
    // Beyond +-(rows + cols) every diagonal keeps or drops the same
    // elements; clamping first keeps the shifted diagonal from overflowing.
    const int64_t rows = x.shape()[nd - 2], cols = x.shape()[nd - 1];
    const int64_t d = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
    const int64_t local = d + e.global_offset[nd - 2] - e.global_offset[nd - 1];
    return lower ? tril(*t[0], local) : triu(*t[0], local);
  });
  if (autograd::recording({&x}))
    autograd::record(out, rule.name, {&x}, {}, [lower, diagonal](const autograd::Context& c) {
      return autograd::Grads{lower ? tril(c.grad, diagonal) : triu(c.grad, diagonal)};
    });
  return out;
}

}  // namespace

DTensor clamp(const DTensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  DT_CHECK(min.has_value() || max.has_value(),
           "clamp: at least one of min and max must be given, got neither");
  const OpSchema schema(OpId::Clamp, {&x.spec()}, {bound_arg(min), bound_arg(max)});
  DTensor out = run_unary(schema, kClamp, x,
                          [&](int, const Tensor& t) { return clamp(t, min, max); });
  if (autograd::recording({&x}) && is_floating(out.dtype()))
    autograd::record(out, "clamp", {&x}, {x}, [min, max](const autograd::Context& c) {
      // PyTorch's mask: min <= x <= max (false for NaN x).
      const DTensor& in = c.saved(0);
      DTensor g = c.grad;
      if (min) g = where(ge(in, *min), g, 0.0);
      if (max) g = where(le(in, *max), g, 0.0);
      return autograd::Grads{g};
    });
  return out;
}

DTensor clamp_min(const DTensor& x, Scalar min) { return clamp(x, min, std::nullopt); }
DTensor clamp_max(const DTensor& x, Scalar max) { return clamp(x, std::nullopt, max); }

DTensor tril(const DTensor& x, int64_t diagonal) { return triangle(OpId::Tril, kTril, x, diagonal); }
DTensor triu(const DTensor& x, int64_t diagonal) { return triangle(OpId::Triu, kTriu, x, diagonal); }

}  // namespace dtensor
