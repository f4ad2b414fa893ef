// Vector norms on DTensors: vector_norm and norm (torch.norm with a numeric
// p), as root(combine(part(shard))) with the halves of norm_parts.h.
//
// One op, NormPart, computes each rank's part of the norm; its rule is that
// of a reduction whose pieces combine by a sum (max for ord inf, min for
// -inf): a kept dim stays sharded, a sharded reduced dim gives
// Partial(sum|max|min) of the local parts, Replicate gives Replicate.
// Partial inputs never pass: |a + b| is not |a| + |b| (nor max |a_r| the
// |max a_r|), so they are reduced first. For ord 0, 1 and ±inf the
// combined parts are the norm itself, so the output stays Partial and no
// data moves. For other ords the Partial(sum) parts are all-reduced (one
// redistribute to Replicate on those mesh dims, which the planner merges
// into one all_reduce over their flattened group when that is cheaper)
// and root() (sqrt, pow) runs locally: one reduction of the small parts,
// never a gather of the input. (Leaving the Partial to the pointwise rule
// of sqrt/pow would let it pick a reduce_scatter onto some output dim,
// which can cost an all_to_all more to line up with the kept shards.)
//
// PyTorch instead has a placement (_NormPartial(p)) holding each rank's
// p-norm, so that even a 2-norm stays lazy until reduced. dtensor has no
// such Partial kind yet: adding one touches the Placement encoding, both
// backends' reduction kernel, the planner's merge rules and plan checks,
// and every family's list of Partial kinds (docs/DTENSOR.md, op table).
//
// The backward is PyTorch's norm_backward, written with DTensor ops.
#include <bit>
#include <cmath>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/reduce_schema.h"
#include "tensor/norm_parts.h"

namespace dtensor {

using namespace dispatch;

namespace {

// Schema args: keepdim, the bits of ord, then the dims as given (none = all).
bool norm_keepdim(const OpSchema& s) { return reduce_keepdim(s); }
double ord_of(const OpSchema& s) { return std::bit_cast<double>(s.args[1]); }
DimVector norm_dims(const OpSchema& s) { return reduce_dims(s, 2); }
bool norm_reduces(const OpSchema& s, int64_t d) { return reduces_dim(s, 2, d); }

// How the parts of pieces of a reduced dim combine into the part of the whole.
ReduceOp combine_op(double ord) {
  if (ord == INFINITY) return ReduceOp::Max;
  if (ord == -INFINITY) return ReduceOp::Min;
  return ReduceOp::Sum;
}

TensorMeta part_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  const Shape out =
      norm_parts::check("vector_norm", x.shape(), x.dtype(), ord_of(s), norm_dims(s), norm_keepdim(s));
  return {out, contiguous_strides(out), x.dtype()};
}

void part_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const Placement combined = Partial(combine_op(ord_of(s)));
  kept_dims_stay_sharded(s, 2, c, [&](int64_t d) { c.push_back({{Shard(d)}, combined}); });
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kNormPart{"vector_norm", part_meta, part_strategies};

// The parts on every shard. A rank whose shard of a reduced dim is empty
// holds the identity of the combining reduction: 0 for sums, and for
// max |x| too (|x| >= 0), +inf for min |x|.
DTensor parts(const DTensor& x, double ord, const DimVector& dims, bool keepdim) {
  OpSchema schema(OpId::NormPart, {&x.spec()}, {keepdim ? 1 : 0, std::bit_cast<int64_t>(ord)});
  for (int64_t d : dims) schema.push_arg(d);
  const DTensor* inputs[] = {&x};
  return run(schema, kNormPart, inputs, [&](int rank, const Tensor* const* t, const OutputSharding& s) {
    const Tensor& local = *t[0];
    if (std::isinf(ord)) {
      for (int64_t d = 0; d < local.dim(); ++d)
        if (norm_reduces(schema, d) && local.shape()[d] == 0)
          return Tensor::full(output_local_shape(s, rank), ord > 0 ? 0.0 : INFINITY, local.dtype());
    }
    return norm_parts::part(local, ord, dims, keepdim);
  });
}

// norm_parts::root on DTensors, after reducing the parts' Partials: the
// same Tensor kernels run on each shard.
DTensor root(const DTensor& s, double ord) {
  if (norm_parts::rootless(ord)) return s;
  Placements reduced = s.placements();
  for (Placement& p : reduced)
    if (p.is_partial()) p = Replicate();
  const DTensor whole = reduced == s.placements() ? s : s.redistribute(reduced);
  if (ord == 2) return sqrt(whole);
  return pow(whole, 1.0 / ord);
}

// PyTorch's sgn: -1, 0 or 1 by sign, NaN for NaN (x * 0 keeps a NaN; the
// NaN it makes of ±inf is overwritten by the sign).
DTensor sgn(const DTensor& x) {
  return masked_fill(masked_fill(mul(x, 0.0), gt(x, 0), 1.0), lt(x, 0), -1.0);
}

// PyTorch's norm_backward (saved: the input, the norm).
DTensor norm_backward(const autograd::Context& c, double ord, const DimVector& dims, bool keepdim) {
  const DTensor& x = c.saved(0);
  if (ord == 0) return zeros_like(x);  // a count is piecewise constant
  const DTensor g = autograd::expand_reduced(c.grad, x.shape(), dims, keepdim);
  if (ord == 1) return mul(sgn(x), g);
  const DTensor n = autograd::expand_reduced(c.saved(1), x.shape(), dims, keepdim);
  if (ord == 2) return mul(g, masked_fill(div(x, n), eq(n, 0), 0.0));
  if (std::isinf(ord)) {
    // The gradient goes to the elements whose |x| is the norm (or NaN),
    // split evenly among ties.
    const DTensor a = abs(x);
    const DTensor hit = add(eq(a, n), ne(a, a));  // bool + bool is or
    return mul(sgn(x), mul(div(g, sum(hit, dims, true)), hit));
  }
  if (ord < 1) {
    // |x|^(ord-1) is infinite at 0, where the gradient is taken to be 0.
    const DTensor scaled = mul(sgn(x), masked_fill(pow(abs(x), ord - 1), eq(x, 0), 0.0));
    return mul(mul(scaled, g), pow(n, 1 - ord));
  }
  const DTensor scaled =
      ord < 2 ? mul(sgn(x), pow(abs(x), ord - 1)) : mul(x, pow(abs(x), ord - 2));
  return mul(scaled, masked_fill(div(g, pow(n, ord - 1)), eq(n, 0), 0.0));
}

DTensor norm_of(const char* op, const DTensor& x, double ord, const DimVector& dims, bool keepdim) {
  DTensor out = [&] {
    NoGradGuard no_grad;  // one node below stands for parts and root
    return root(parts(x, ord, dims, keepdim), ord);
  }();
  if (autograd::recording({&x}))
    autograd::record(out, op, {&x}, {x, out}, [ord, dims, keepdim](const autograd::Context& c) {
      return autograd::Grads{norm_backward(c, ord, dims, keepdim)};
    });
  return out;
}

}  // namespace

DTensor vector_norm(const DTensor& x, double ord, const DimVector& dims, bool keepdim) {
  return norm_of("vector_norm", x, ord, dims, keepdim);
}

DTensor norm(const DTensor& x, double p, const DimVector& dims, bool keepdim) {
  // Checked here too so that errors say "norm".
  norm_parts::check("norm", x.shape(), x.dtype(), p, dims, keepdim);
  return norm_of("norm", x, p, dims, keepdim);
}

}  // namespace dtensor
