// Matrix products on DTensors: mm, addmm, bmm, baddbmm, matmul, linear.
//
// For C = A·B with A [.., m, k] and B [.., k, n], per mesh dim: rows of A
// sharded give rows of C (S(0)·R -> S(0)); columns of B sharded give columns
// of C (R·S(1) -> S(1)); the contraction dim sharded on both gives partial
// products to be summed (S(1)·S(0) -> P(sum)); batch dims sharded alike give
// batch-sharded output; and since the product is linear in each factor, a
// P(sum) factor times a replicated one stays P(sum), and a P(avg) factor
// times a replicated one stays P(avg) (mean_r(a_r·b) = mean_r(a_r)·b, as
// PyTorch keeps it).
//
// With a bias (addmm, baddbmm, linear) and a P(sum) output, each term of
// beta * bias + alpha * (A·B) must be counted once in the sum over the mesh
// dim: a term that is replicated there is added only on the rank at
// coordinate 0 of that mesh dim (what R -> P does), a partial term on every
// rank. So a replicated bias costs nothing when the product is partial. A
// P(avg) output averages: every rank adds every term; and a replicated
// product added to a P(max|min) bias keeps that Partial.
//
// The backwards are PyTorch's (grad_a = grad @ b^T, grad_b = a^T @ grad),
// written with DTensor products of transposed views, so their layouts come
// from the same rules: a column-parallel linear (weight S(0), input R) gets
// a Partial(sum) input gradient and an S(0) weight gradient; a row-parallel
// one (weight S(1), input S(-1)) gets an S(-1) input gradient with no
// collective. Each backward uses few ops: each costs a dispatch.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/autocast.h"

namespace dtensor {

using namespace dispatch;

namespace {

constexpr Placement kP = Partial(ReduceOp::Sum);
constexpr Placement kAvg = Partial(ReduceOp::Avg);

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

DType product_dtype(const char* op, DType a, DType b) {
  const DType dtype = promote_types(a, b);
  DT_CHECK(dtype != DType::Bool, op, ": bool is not supported (PyTorch refuses it too); convert "
           "to int64 or a floating dtype first");
  return dtype;
}

TensorMeta meta_of(const Shape& shape, DType dtype) { return {shape, contiguous_strides(shape), dtype}; }

void check_bias(const char* op, const Shape& bias, const Shape& out) {
  DT_CHECK(broadcasts_to(bias, out), op, ": bias of shape ", bias,
           " cannot be broadcast to the result shape ", out);
}

// ---- mm / addmm ---------------------------------------------------------------------

void check_mm(const char* op, const Shape& a, const Shape& b) {
  DT_CHECK(a.size() == 2 && b.size() == 2, op, ": expected 2-d tensors, got ", a, " and ", b);
  DT_CHECK(a[1] == b[0], op, ": inner dimensions differ: ", a, " @ ", b,
           " (expected a.size(1) == b.size(0), got ", a[1], " vs ", b[0], ")");
}

TensorMeta mm_meta(const OpSchema& s) {
  const DTensorSpec &a = s.input(0), &b = s.input(1);
  check_mm("mm", a.shape(), b.shape());
  return meta_of({a.shape()[0], b.shape()[1]}, product_dtype("mm", a.dtype(), b.dtype()));
}

TensorMeta addmm_meta(const OpSchema& s) {
  const DTensorSpec &bias = s.input(0), &a = s.input(1), &b = s.input(2);
  check_mm("addmm", a.shape(), b.shape());
  const Shape out{a.shape()[0], b.shape()[1]};
  check_bias("addmm", bias.shape(), out);
  return meta_of(out, product_dtype("addmm", product_dtype("addmm", a.dtype(), b.dtype()),
                                    bias.dtype()));
}

// The candidates of a product whose output has `batch` leading batch dims,
// then m and n: `a_dim(d)` / `b_dim(d)` give the input placement for output
// dim d sharded (R when the input lacks or broadcasts it); ka/kb are the
// contraction dims. With a bias (input 0), it follows the output's
// sharding, and is replicated or partial when the output is partial.
// `bias_keeps_order`: beta > 0, so that a P(max|min) bias keeps its kind
// (a negative beta would turn max into min).
template <class A, class B, class Bias>
void product_strategies(int64_t out_ndim, A a_dim, B b_dim, int64_t ka, int64_t kb, bool bias,
                        Bias bias_dim, std::vector<DimStrategy>& c,
                        bool bias_keeps_order = false) {
  auto push = [&](Placement bp, Placement ap, Placement bq, Placement out) {
    if (bias) c.push_back({{bp, ap, bq}, out});
    else c.push_back({{ap, bq}, out});
  };
  for (int64_t d = 0; d < out_ndim; ++d) push(bias_dim(d), a_dim(d), b_dim(d), Shard(d));
  push(kR, Shard(ka), Shard(kb), kP);
  push(kR, kP, kR, kP);
  push(kR, kR, kP, kP);
  push(kR, kAvg, kR, kAvg);
  push(kR, kR, kAvg, kAvg);
  if (bias) {
    push(kP, Shard(ka), Shard(kb), kP);
    push(kP, kP, kR, kP);
    push(kP, kR, kP, kP);
    push(kP, kR, kR, kP);
    push(kAvg, kAvg, kR, kAvg);
    push(kAvg, kR, kAvg, kAvg);
    push(kAvg, kR, kR, kAvg);
    // A replicated product added to a P(max|min) bias (times beta > 0) keeps it.
    if (bias_keeps_order) {
      push(Partial(ReduceOp::Max), kR, kR, Partial(ReduceOp::Max));
      push(Partial(ReduceOp::Min), kR, kR, Partial(ReduceOp::Min));
    }
  }
  push(kR, kR, kR, kR);
}

// The placement an input of shape `in` takes when output dim d (of `out`,
// right-aligned) is sharded.
Placement aligned(const Shape& in, const Shape& out, int64_t d) {
  const int64_t k = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size()));
  if (k < 0 || (in[k] == 1 && out[d] != 1)) return kR;
  return Shard(k);
}

void mm_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const bool bias = s.op == OpId::Addmm;
  const Shape bias_shape = bias ? s.input(0).shape() : Shape{};
  product_strategies(
      2, [](int64_t d) { return d == 0 ? Shard(0) : kR; },
      [](int64_t d) { return d == 1 ? Shard(1) : kR; }, 1, 0, bias,
      [&](int64_t d) { return aligned(bias_shape, out.shape, d); }, c, bias && s.args[0] != 0);
}

// ---- bmm / baddbmm ------------------------------------------------------------------

void check_bmm(const char* op, const Shape& a, const Shape& b) {
  DT_CHECK(a.size() == 3 && b.size() == 3, op, ": expected 3-d tensors, got ", a, " and ", b);
  DT_CHECK(a[0] == b[0], op, ": batch sizes differ: ", a[0], " vs ", b[0], " (", a, " @ ", b, ")");
  DT_CHECK(a[2] == b[1], op, ": inner dimensions differ: ", a, " @ ", b,
           " (expected a.size(2) == b.size(1), got ", a[2], " vs ", b[1], ")");
}

TensorMeta bmm_meta(const OpSchema& s) {
  const bool bias = s.op == OpId::Baddbmm;
  const char* op = bias ? "baddbmm" : "bmm";
  const DTensorSpec &a = s.input(bias ? 1 : 0), &b = s.input(bias ? 2 : 1);
  check_bmm(op, a.shape(), b.shape());
  const Shape out{a.shape()[0], a.shape()[1], b.shape()[2]};
  DType dtype = product_dtype(op, a.dtype(), b.dtype());
  if (bias) {
    check_bias(op, s.input(0).shape(), out);
    dtype = product_dtype(op, dtype, s.input(0).dtype());
  }
  return meta_of(out, dtype);
}

void bmm_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const bool bias = s.op == OpId::Baddbmm;
  const Shape bias_shape = bias ? s.input(0).shape() : Shape{};
  product_strategies(
      3, [](int64_t d) { return d < 2 ? Shard(d) : kR; },
      [](int64_t d) { return d == 0 ? Shard(0) : d == 2 ? Shard(2) : kR; }, 2, 1, bias,
      [&](int64_t d) { return aligned(bias_shape, out.shape, d); }, c, bias && s.args[0] != 0);
}

// ---- matmul -------------------------------------------------------------------------

// torch.matmul: a 1-d a is a row (its dim dropped), a 1-d b a column.
TensorMeta matmul_meta(const OpSchema& s) {
  const Shape &a = s.input(0).shape(), &b = s.input(1).shape();
  const int64_t da = static_cast<int64_t>(a.size()), db = static_cast<int64_t>(b.size());
  DT_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dim, got a 0-d tensor (",
           a, " @ ", b, ")");
  const int64_t a_inner = a[da - 1];
  const int64_t b_inner = db == 1 ? b[0] : b[db - 2];
  if (da == 1 && db == 1) {
    DT_CHECK(a_inner == b_inner, "matmul: 1-d sizes differ: ", a, " @ ", b,
             " (expected equal lengths, got ", a_inner, " vs ", b_inner, ")");
  } else {
    DT_CHECK(a_inner == b_inner, "matmul: inner dimensions differ: ", a, " @ ", b,
             " (expected a.size(-1) == ", db == 1 ? "b.size(0)" : "b.size(-2)", ", got ",
             a_inner, " vs ", b_inner, ")");
  }
  Shape a_batch, b_batch;
  for (int64_t i = 0; i + 2 < da; ++i) a_batch.push_back(a[i]);
  for (int64_t i = 0; i + 2 < db; ++i) b_batch.push_back(b[i]);
  Shape out;
  try {
    out = broadcast_shapes(a_batch, b_batch);
  } catch (const Error&) {
    DT_THROW("matmul: batch dims ", a_batch, " and ", b_batch, " cannot be broadcast (", a, " @ ",
             b, ")");
  }
  if (da > 1) out.push_back(a[da - 2]);
  if (db > 1) out.push_back(b[db - 1]);
  return meta_of(out, product_dtype("matmul", s.input(0).dtype(), s.input(1).dtype()));
}

void matmul_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const Shape &a = s.input(0).shape(), &b = s.input(1).shape();
  const int64_t da = static_cast<int64_t>(a.size()), db = static_cast<int64_t>(b.size());
  const int64_t on = static_cast<int64_t>(out.shape.size());
  // Output dims: batch..., then m (when a is not 1-d), then n (when b is not 1-d).
  const int64_t m_dim = da > 1 ? on - (db > 1 ? 2 : 1) : -1;
  const int64_t n_dim = db > 1 ? on - 1 : -1;
  const int64_t batch = on - (da > 1) - (db > 1);
  Shape out_batch;
  for (int64_t i = 0; i < batch; ++i) out_batch.push_back(out.shape[i]);
  auto batch_of = [&](const Shape& in, int64_t nd, int64_t d) -> Placement {
    if (nd < 3) return kR;
    Shape in_batch;
    for (int64_t i = 0; i + 2 < nd; ++i) in_batch.push_back(in[i]);
    return aligned(in_batch, out_batch, d);
  };
  auto a_dim = [&](int64_t d) -> Placement {
    if (d == m_dim) return Shard(da - 2);
    if (d < batch) return batch_of(a, da, d);
    return kR;
  };
  auto b_dim = [&](int64_t d) -> Placement {
    if (d == n_dim) return Shard(db - 1);
    if (d < batch) return batch_of(b, db, d);
    return kR;
  };
  product_strategies(on, a_dim, b_dim, da - 1, db == 1 ? 0 : db - 2, false,
                     [](int64_t) { return kR; }, c);
}

// ---- linear -------------------------------------------------------------------------

// Inputs: x, weight (out, in), and bias when given (schema arg 0 == 1).
TensorMeta linear_meta(const OpSchema& s) {
  const Shape &x = s.input(0).shape(), &w = s.input(1).shape();
  DT_CHECK(w.size() == 2, "linear: weight must be 2-d (out_features, in_features), got ", w);
  DT_CHECK(!x.empty(), "linear: input must have at least 1 dim, got a 0-d tensor");
  DT_CHECK(x.back() == w[1], "linear: input's last dim ", x.back(), " != weight's in_features ",
           w[1], " (input ", x, ", weight ", w, ")");
  DType dtype = product_dtype("linear", s.input(0).dtype(), s.input(1).dtype());
  if (s.num_inputs == 3) {
    const Shape& bias = s.input(2).shape();
    DT_CHECK(bias.size() <= 1 && broadcasts_to(bias, Shape{w[0]}),
             "linear: bias must be 1-d of out_features = ", w[0], ", got ", bias);
    dtype = product_dtype("linear", dtype, s.input(2).dtype());
  }
  Shape out = x;
  out.back() = w[0];
  return meta_of(out, dtype);
}

void linear_strategies(const OpSchema& s, const TensorMeta& out, std::vector<DimStrategy>& c) {
  const bool bias = s.num_inputs == 3;
  const int64_t on = static_cast<int64_t>(out.shape.size());
  const bool bias_scalar = bias && (s.input(2).shape().empty() || s.input(2).shape()[0] == 1);
  auto add = [&](Placement x, Placement w, Placement b, Placement o) {
    if (bias) c.push_back({{x, w, b}, o});
    else c.push_back({{x, w}, o});
  };
  for (int64_t d = 0; d + 1 < on; ++d) add(Shard(d), kR, kR, Shard(d));
  // Column parallel: weight rows (out features) sharded.
  add(kR, Shard(0), bias_scalar ? kR : Shard(0), Shard(on - 1));
  // Row parallel: the contraction (in features) sharded.
  add(Shard(on - 1), Shard(1), kR, kP);
  add(kP, kR, kR, kP);
  add(kR, kP, kR, kP);
  add(kAvg, kR, kR, kAvg);
  add(kR, kAvg, kR, kAvg);
  if (bias) {
    add(Shard(on - 1), Shard(1), kP, kP);
    add(kP, kR, kP, kP);
    add(kR, kR, kP, kP);
    add(kAvg, kR, kAvg, kAvg);
    add(kR, kAvg, kAvg, kAvg);
    add(kR, kR, kAvg, kAvg);
    add(kR, kP, kP, kP);
    add(kR, kR, Partial(ReduceOp::Max), Partial(ReduceOp::Max));
    add(kR, kR, Partial(ReduceOp::Min), Partial(ReduceOp::Min));
  }
  add(kR, kR, kR, kR);
}

constexpr OpRule kMm{"mm", mm_meta, mm_strategies};
constexpr OpRule kAddmm{"addmm", addmm_meta, mm_strategies};
constexpr OpRule kBmm{"bmm", bmm_meta, bmm_strategies};
constexpr OpRule kBaddbmm{"baddbmm", bmm_meta, bmm_strategies};
constexpr OpRule kMatmul{"matmul", matmul_meta, matmul_strategies};
constexpr OpRule kLinear{"linear", linear_meta, linear_strategies};

// Whether `rank` adds a term made of the given inputs: always, except on a
// mesh dim where the output is Partial(sum) and every one of those inputs
// is replicated; there only the rank at coordinate 0 adds it.
bool adds_term(const OutputSharding& s, int rank, std::initializer_list<int> inputs) {
  const Placements& out = s.output.placements();
  for (size_t m = 0; m < out.size(); ++m) {
    if (out[m] != Partial(ReduceOp::Sum)) continue;
    bool replicated = true;
    for (int i : inputs) replicated = replicated && s.input_targets[i]->placements()[m].is_replicate();
    if (replicated && s.output.mesh().group_index(rank, static_cast<int>(m)) != 0) return false;
  }
  return true;
}

// beta * bias + alpha * product for this rank, each term counted once (see
// the file comment). `full` computes both terms with the fused plain op.
template <class Full, class Product>
Tensor biased(const OutputSharding& s, int rank, int bias_input, std::initializer_list<int> terms,
              const Tensor& bias, Scalar beta, Scalar alpha, Full full, Product product) {
  const bool bias_in = adds_term(s, rank, {bias_input}), term_in = adds_term(s, rank, terms);
  if (bias_in && term_in) return full();
  Tensor out;
  if (term_in) {
    out = product();
    if (alpha.to_double() != 1.0) out = mul(out, alpha);
    out = out.to(s.output.dtype());
  } else {
    out = Tensor::zeros(output_local_shape(s, rank), s.output.dtype());
  }
  if (bias_in && beta.to_double() != 0.0) out.add_(mul(bias, beta));
  return out;
}

// ---- backward helpers --------------------------------------------------------------


DTensor scaled(const DTensor& x, Scalar s) { return s.to_double() == 1.0 ? x : mul(x, s); }

// Into g[ia] and g[ib] (when wanted): grad_a = grad @ b^T and grad_b =
// a^T @ grad of a 2-d product (mm) or a batched 3-d one (bmm) of the saved
// a and b, the output's gradient scaled by `alpha` first.
autograd::Grads product_grads(const autograd::Context& c, size_t ia, size_t ib, Scalar alpha,
                              bool batched, autograd::Grads g) {
  if (!c.needs(ia) && !c.needs(ib)) return g;
  const DTensor &a = c.saved(0), &b = c.saved(1);
  const DTensor grad = scaled(c.grad, alpha);
  auto mt = [&](const DTensor& x) { return batched ? transpose(x, 1, 2) : t(x); };
  auto product = [&](const DTensor& x, const DTensor& y) { return batched ? bmm(x, y) : mm(x, y); };
  if (c.needs(ia)) g[ia] = product(grad, mt(b));
  if (c.needs(ib)) g[ib] = product(mt(a), grad);
  return g;
}

// torch.matmul's gradients, by case of the inputs' dims (g: the output's).
autograd::Grads matmul_grads(const autograd::Context& c) {
  const DTensor &a = c.saved(0), &b = c.saved(1), &g = c.grad;
  const int64_t da = a.dim(), db = b.dim();
  autograd::Grads out(2);
  const bool need_a = c.needs(0), need_b = c.needs(1);
  if (da == 1 && db == 1) {  // dot: g is 0-d
    if (need_a) out[0] = mul(g, b);
    if (need_b) out[1] = mul(g, a);
  } else if (db == 1) {  // a [..., m, k] @ b [k] -> [..., m]
    if (need_a) out[0] = mul(unsqueeze(g, -1), b);
    if (need_b)
      out[1] = da == 2 ? matmul(g, a)
                       : autograd::sum_to(matmul(unsqueeze(g, -2), a), b.shape());
  } else if (da == 1) {  // a [k] @ b [..., k, n] -> [..., n]
    if (need_a)
      out[0] = db == 2
                   ? matmul(b, g)
                   : autograd::sum_to(matmul(unsqueeze(g, -2), transpose(b, -1, -2)), a.shape());
    if (need_b) out[1] = mul(unsqueeze(a, -1), db == 2 ? g : unsqueeze(g, -2));
  } else if (db == 2) {  // a [..., m, k] @ b [k, n]: b's gradient is one mm over rows
    if (need_a) out[0] = matmul(g, t(b));
    if (need_b) out[1] = da == 2 ? mm(t(a), g) : mm(t(flatten(a, 0, -2)), flatten(g, 0, -2));
  } else {  // batch dims broadcast: the gradients are summed back over them
    if (need_a) out[0] = autograd::sum_to(matmul(g, transpose(b, -1, -2)), a.shape());
    if (need_b) out[1] = autograd::sum_to(matmul(transpose(a, -1, -2), g), b.shape());
  }
  return out;
}

// linear's gradients: x [..., in], weight [out, in], g [..., out]. The
// weight's is g^T @ x over the flattened leading dims.
autograd::Grads linear_grads(const autograd::Context& c, const std::optional<Shape>& bias_shape) {
  const DTensor &x = c.saved(0), &w = c.saved(1), &g = c.grad;
  autograd::Grads out(bias_shape ? 3 : 2);
  if (c.needs(0)) out[0] = matmul(g, w);
  if (c.needs(1)) {
    if (x.dim() == 1) {
      out[1] = mul(unsqueeze(g, 1), x);
    } else if (x.dim() == 2) {
      out[1] = mm(t(g), x);
    } else {
      out[1] = mm(t(flatten(g, 0, -2)), flatten(x, 0, -2));
    }
  }
  if (bias_shape && c.needs(2)) out[2] = autograd::sum_to(g, *bias_shape);
  return out;
}

}  // namespace

DTensor mm(const DTensor& a, const DTensor& b) {
  if (auto d = autocast_detail::lower_to({&a, &b}))
    return mm(autocast_detail::lower(a, *d), autocast_detail::lower(b, *d));
  const OpSchema schema(OpId::Mm, {&a.spec(), &b.spec()});
  DTensor out = run_binary(schema, kMm, a, b,
                           [](int, const Tensor& x, const Tensor& y) { return mm(x, y); });
  if (autograd::recording({&a, &b}))
    autograd::record(out, "mm", {&a, &b}, {a, b}, [](const autograd::Context& c) {
      return product_grads(c, 0, 1, 1, false, autograd::Grads(2));
    });
  return out;
}

DTensor addmm(const DTensor& bias, const DTensor& a, const DTensor& b, Scalar beta,
              Scalar alpha) {
  if (auto d = autocast_detail::lower_to({&bias, &a, &b}))
    return addmm(autocast_detail::lower(bias, *d), autocast_detail::lower(a, *d),
                 autocast_detail::lower(b, *d), beta, alpha);
  // The sign of beta is layout-relevant (see product_strategies).
  const OpSchema schema(OpId::Addmm, {&bias.spec(), &a.spec(), &b.spec()},
                        {beta.to_double() > 0 ? 1 : 0});
  const DTensor* inputs[] = {&bias, &a, &b};
  DTensor out =
      run(schema, kAddmm, inputs, [&](int rank, const Tensor* const* t, const OutputSharding& s) {
        return biased(
            s, rank, 0, {1, 2}, *t[0], beta, alpha,
            [&] { return addmm(*t[0], *t[1], *t[2], beta, alpha); },
            [&] { return mm(*t[1], *t[2]); });
      });
  if (autograd::recording({&bias, &a, &b}))
    autograd::record(out, "addmm", {&bias, &a, &b}, {a, b},
                     [bias_shape = bias.shape(), beta, alpha](const autograd::Context& c) {
                       autograd::Grads g(3);
                       if (c.needs(0)) g[0] = scaled(autograd::sum_to(c.grad, bias_shape), beta);
                       return product_grads(c, 1, 2, alpha, false, g);
                     });
  return out;
}

DTensor bmm(const DTensor& a, const DTensor& b) {
  if (auto d = autocast_detail::lower_to({&a, &b}))
    return bmm(autocast_detail::lower(a, *d), autocast_detail::lower(b, *d));
  const OpSchema schema(OpId::Bmm, {&a.spec(), &b.spec()});
  DTensor out = run_binary(schema, kBmm, a, b,
                           [](int, const Tensor& x, const Tensor& y) { return bmm(x, y); });
  if (autograd::recording({&a, &b}))
    autograd::record(out, "bmm", {&a, &b}, {a, b}, [](const autograd::Context& c) {
      return product_grads(c, 0, 1, 1, true, autograd::Grads(2));
    });
  return out;
}

DTensor baddbmm(const DTensor& bias, const DTensor& a, const DTensor& b, Scalar beta,
                Scalar alpha) {
  if (auto d = autocast_detail::lower_to({&bias, &a, &b}))
    return baddbmm(autocast_detail::lower(bias, *d), autocast_detail::lower(a, *d),
                   autocast_detail::lower(b, *d), beta, alpha);
  const OpSchema schema(OpId::Baddbmm, {&bias.spec(), &a.spec(), &b.spec()},
                        {beta.to_double() > 0 ? 1 : 0});
  const DTensor* inputs[] = {&bias, &a, &b};
  DTensor out = run(schema, kBaddbmm, inputs,
                    [&](int rank, const Tensor* const* t, const OutputSharding& s) {
                      return biased(
                          s, rank, 0, {1, 2}, *t[0], beta, alpha,
                          [&] { return baddbmm(*t[0], *t[1], *t[2], beta, alpha); },
                          [&] { return bmm(*t[1], *t[2]); });
                    });
  if (autograd::recording({&bias, &a, &b}))
    autograd::record(out, "baddbmm", {&bias, &a, &b}, {a, b},
                     [bias_shape = bias.shape(), beta, alpha](const autograd::Context& c) {
                       autograd::Grads g(3);
                       if (c.needs(0)) g[0] = scaled(autograd::sum_to(c.grad, bias_shape), beta);
                       return product_grads(c, 1, 2, alpha, true, g);
                     });
  return out;
}

DTensor matmul(const DTensor& a, const DTensor& b) {
  if (auto d = autocast_detail::lower_to({&a, &b}))
    return matmul(autocast_detail::lower(a, *d), autocast_detail::lower(b, *d));
  const OpSchema schema(OpId::Matmul, {&a.spec(), &b.spec()});
  DTensor out = run_binary(schema, kMatmul, a, b,
                           [](int, const Tensor& x, const Tensor& y) { return matmul(x, y); });
  if (autograd::recording({&a, &b}))
    autograd::record(out, "matmul", {&a, &b}, {a, b}, matmul_grads);
  return out;
}

DTensor linear(const DTensor& x, const DTensor& weight) {
  if (auto d = autocast_detail::lower_to({&x, &weight}))
    return linear(autocast_detail::lower(x, *d), autocast_detail::lower(weight, *d));
  const OpSchema schema(OpId::Linear, {&x.spec(), &weight.spec()});
  DTensor out = run_binary(schema, kLinear, x, weight,
                           [](int, const Tensor& a, const Tensor& w) { return linear(a, w); });
  if (autograd::recording({&x, &weight}))
    autograd::record(out, "linear", {&x, &weight}, {x, weight},
                     [](const autograd::Context& c) { return linear_grads(c, std::nullopt); });
  return out;
}

DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias) {
  if (auto d = autocast_detail::lower_to({&x, &weight, &bias}))
    return linear(autocast_detail::lower(x, *d), autocast_detail::lower(weight, *d),
                  autocast_detail::lower(bias, *d));
  const OpSchema schema(OpId::Linear, {&x.spec(), &weight.spec(), &bias.spec()});
  const DTensor* inputs[] = {&x, &weight, &bias};
  DTensor out =
      run(schema, kLinear, inputs, [](int rank, const Tensor* const* t, const OutputSharding& s) {
        return biased(
            s, rank, 2, {0, 1}, *t[2], 1, 1, [&] { return linear(*t[0], *t[1], *t[2]); },
            [&] { return linear(*t[0], *t[1]); });
      });
  if (autograd::recording({&x, &weight, &bias}))
    autograd::record(out, "linear", {&x, &weight, &bias}, {x, weight},
                     [bias_shape = bias.shape()](const autograd::Context& c) {
                       return linear_grads(c, bias_shape);
                     });
  return out;
}

}  // namespace dtensor
