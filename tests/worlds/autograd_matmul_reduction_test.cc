// Gradients of the matrix products (mm, addmm, bmm, baddbmm, matmul,
// linear) and of the reductions (mean, prod, amax, amin, var) on every
// world (see world_util.h): random shapes (uneven and empty shards,
// broadcast bias and batch dims) and random input placements incl.
// Partial, against finite differences and against the same computation on
// replicated inputs; the tie and zero conventions exactly; the layouts and
// collectives of a tensor-parallel linear's backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::check_gradients;
using dtensor::testing::check_matches_replicated;
using dtensor::testing::GradFn;
using dtensor::testing::make_dtensor;
using dtensor::testing::takes_part;

namespace {

class AutogradMatmulReductionTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

Placements replicate_mm(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// A dim size: 1-4, sometimes 0 (empty shards and empty tensors).
int64_t dim_size(std::mt19937& rng) {
  return rng() % 7 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 4);
}

// A batch dim size: 1-3, sometimes 0 (kept small: the finite differences
// cost a forward per element).
int64_t batch_size(std::mt19937& rng) {
  return rng() % 7 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 3);
}

// One random case: the full inputs (float64), which of them require grad,
// the function, and a description for failures.
struct Case {
  std::vector<Tensor> inputs;
  std::vector<bool> grad;
  GradFn f;
  std::string what;
};

// Runs `make(rng)` property_cases(cases) times on each grad mesh: inputs
// laid out with random placements (incl. Partial), checked against finite
// differences and against replicated inputs (reductions may add in another
// order: relative tolerance `rtol`).
template <class Make>
void run_cases(const World& world, int cases, uint64_t seed, Make make, double rtol = 1e-10) {
  std::mt19937 rng(seed);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < dtensor::testing::property_cases(cases); ++k) {
      Case c = make(rng);
      std::vector<Placements> pls;
      for (const Tensor& t : c.inputs)
        pls.push_back(dtensor::testing::random_input_placements(rng, mesh.ndim(), t.dim()));
      const uint64_t loss_seed = rng();
      if (!takes_part(mesh)) continue;
      std::vector<DTensor> in;
      std::ostringstream where;
      where << c.what << " on mesh " << ms << ":";
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        in.push_back(make_dtensor(c.inputs[i], mesh, pls[i], 3 + i));
        if (c.grad[i]) in.back().requires_grad_();
        where << " " << c.inputs[i].shape() << " " << to_string(pls[i]);
      }
      EXPECT_EQ(check_gradients(c.f, in, loss_seed), "") << where.str();
      EXPECT_EQ(check_matches_replicated(c.f, in, loss_seed, 1e-12, rtol), "") << where.str();
    }
  }
}

Tensor randn(const Shape& shape, std::mt19937& rng) {
  return Tensor::randn(shape, rng(), 0, DType::Float64);
}

// Which inputs require grad: each with probability 3/4, at least one.
std::vector<bool> random_grads(std::mt19937& rng, size_t n) {
  std::vector<bool> g(n);
  bool any = false;
  for (size_t i = 0; i < n; ++i) any = (g[i] = rng() % 4 != 0) || any;
  if (!any) g[rng() % n] = true;
  return g;
}

// A shape that broadcasts to `out`: some leading dims dropped, some dims 1.
Shape broadcastable_to(std::mt19937& rng, const Shape& out) {
  const size_t drop = rng() % (out.size() + 1);
  Shape s;
  for (size_t i = drop; i < out.size(); ++i) s.push_back(rng() % 3 == 0 ? 1 : out[i]);
  return s;
}

Scalar random_scale(std::mt19937& rng) {
  const double scales[] = {1.0, 0.5, -2.0};
  return scales[rng() % 3];
}

}  // namespace

// ---- matrix products -------------------------------------------------------------

TEST_F(AutogradMatmulReductionTest, Mm) {
  run_cases(world, 5, 1, [](std::mt19937& rng) {
    const int64_t m = dim_size(rng), k = dim_size(rng), n = dim_size(rng);
    return Case{{randn({m, k}, rng), randn({k, n}, rng)}, random_grads(rng, 2),
                [](const std::vector<DTensor>& in) { return mm(in[0], in[1]); }, "mm"};
  });
}

TEST_F(AutogradMatmulReductionTest, Addmm) {
  run_cases(world, 5, 2, [](std::mt19937& rng) {
    const int64_t m = dim_size(rng), k = dim_size(rng), n = dim_size(rng);
    const Shape bias = broadcastable_to(rng, {m, n});
    const Scalar beta = random_scale(rng), alpha = random_scale(rng);
    std::ostringstream what;
    what << "addmm beta " << beta.to_double() << " alpha " << alpha.to_double();
    return Case{{randn(bias, rng), randn({m, k}, rng), randn({k, n}, rng)}, random_grads(rng, 3),
                [=](const std::vector<DTensor>& in) {
                  return addmm(in[0], in[1], in[2], beta, alpha);
                },
                what.str()};
  });
}

TEST_F(AutogradMatmulReductionTest, Bmm) {
  run_cases(world, 4, 3, [](std::mt19937& rng) {
    const int64_t b = batch_size(rng), m = dim_size(rng), k = dim_size(rng), n = dim_size(rng);
    return Case{{randn({b, m, k}, rng), randn({b, k, n}, rng)}, random_grads(rng, 2),
                [](const std::vector<DTensor>& in) { return bmm(in[0], in[1]); }, "bmm"};
  });
}

TEST_F(AutogradMatmulReductionTest, Baddbmm) {
  run_cases(world, 4, 4, [](std::mt19937& rng) {
    const int64_t b = batch_size(rng), m = dim_size(rng), k = dim_size(rng), n = dim_size(rng);
    const Shape bias = broadcastable_to(rng, {b, m, n});
    const Scalar beta = random_scale(rng), alpha = random_scale(rng);
    std::ostringstream what;
    what << "baddbmm beta " << beta.to_double() << " alpha " << alpha.to_double();
    return Case{{randn(bias, rng), randn({b, m, k}, rng), randn({b, k, n}, rng)},
                random_grads(rng, 3),
                [=](const std::vector<DTensor>& in) {
                  return baddbmm(in[0], in[1], in[2], beta, alpha);
                },
                what.str()};
  });
}

// Every case of torch.matmul: 1-d·1-d, 1-d·2-d, 2-d·1-d, 2-d·2-d, and
// batched (up to 4-d) with the batch dims broadcast.
TEST_F(AutogradMatmulReductionTest, Matmul) {
  run_cases(world, 10, 5, [](std::mt19937& rng) {
    const int64_t da = 1 + static_cast<int64_t>(rng() % 4);
    const int64_t db = 1 + static_cast<int64_t>(rng() % 4);
    const int64_t m = dim_size(rng), k = dim_size(rng), n = dim_size(rng);
    Shape batch;
    for (int64_t i = 0; i + 2 < std::max(da, db); ++i) batch.push_back(batch_size(rng));
    auto batch_of = [&](int64_t nd) {
      Shape s;
      // The last nd - 2 of the output's batch dims, some broadcast from 1.
      const size_t first = batch.size() - static_cast<size_t>(nd - 2);
      for (size_t i = first; i < batch.size(); ++i) s.push_back(rng() % 3 == 0 ? 1 : batch[i]);
      return s;
    };
    Shape a = batch_of(da), b = batch_of(db);
    if (da > 1) a.push_back(m);
    a.push_back(k);
    b.push_back(k);
    if (db > 1) b.push_back(n);
    return Case{{randn(a, rng), randn(b, rng)}, random_grads(rng, 2),
                [](const std::vector<DTensor>& in) { return matmul(in[0], in[1]); }, "matmul"};
  });
}

TEST_F(AutogradMatmulReductionTest, Linear) {
  run_cases(world, 8, 6, [](std::mt19937& rng) {
    const int64_t nd = 1 + static_cast<int64_t>(rng() % 3);
    Shape x;
    for (int64_t i = 0; i + 1 < nd; ++i) x.push_back(dim_size(rng));
    const int64_t in_features = dim_size(rng), out_features = dim_size(rng);
    x.push_back(in_features);
    const int bias_kind = static_cast<int>(rng() % 4);  // none, (out), (1), ()
    std::vector<Tensor> inputs = {randn(x, rng), randn({out_features, in_features}, rng)};
    if (bias_kind == 1) inputs.push_back(randn({out_features}, rng));
    if (bias_kind == 2) inputs.push_back(randn({1}, rng));
    if (bias_kind == 3) inputs.push_back(randn({}, rng));
    const bool bias = bias_kind != 0;
    return Case{inputs, random_grads(rng, inputs.size()),
                [bias](const std::vector<DTensor>& in) {
                  return bias ? linear(in[0], in[1], in[2]) : linear(in[0], in[1]);
                },
                bias ? "linear with bias" : "linear"};
  });
}

// Every pair of layouts of mm's factors on a 2x2 mesh (each mesh dim R,
// S(0), S(1) or P(sum); rows, contraction and columns uneven on 2), and of
// linear's input, weight and bias on 4 ranks, against replicated inputs.
TEST_F(AutogradMatmulReductionTest, MmAndLinearEveryLayout) {
  const std::vector<Placement> options = {Replicate(), Shard(0), Shard(1), Partial()};
  {
    DeviceMesh mesh(world, {2, 2});
    const Tensor a = Tensor::randn({5, 3}, 1, 0, DType::Float64);
    const Tensor b = Tensor::randn({3, 7}, 2, 0, DType::Float64);
    auto f = [](const std::vector<DTensor>& in) { return mm(in[0], in[1]); };
    for (int i = 0; i < 256 && takes_part(mesh); ++i) {
      const Placements pa = {options[i % 4], options[i / 4 % 4]};
      const Placements pb = {options[i / 16 % 4], options[i / 64]};
      DTensor x = make_dtensor(a, mesh, pa, 3), y = make_dtensor(b, mesh, pb, 4);
      x.requires_grad_();
      y.requires_grad_();
      EXPECT_EQ(check_matches_replicated(f, {x, y}, 9, 1e-12, 1e-10), "")
          << to_string(pa) << " @ " << to_string(pb);
    }
  }
  DeviceMesh mesh(world, {std::min<int64_t>(4, world.size())});
  if (!takes_part(mesh)) return;
  const Tensor x = Tensor::randn({2, 5, 3}, 1, 0, DType::Float64);
  const Tensor w = Tensor::randn({6, 3}, 2, 0, DType::Float64);
  const Tensor bias = Tensor::randn({6}, 3, 0, DType::Float64);
  const std::vector<Placement> x_options = {Replicate(), Shard(0), Shard(1), Shard(2), Partial()};
  auto f = [](const std::vector<DTensor>& in) {
    return in.size() == 3 ? linear(in[0], in[1], in[2]) : linear(in[0], in[1]);
  };
  for (const Placement& px : x_options) {
    for (const Placement& pw : options) {
      for (int with_bias = 0; with_bias < 3; ++with_bias) {
        std::vector<DTensor> in = {make_dtensor(x, mesh, {px}, 3), make_dtensor(w, mesh, {pw}, 4)};
        const Placement pb = with_bias == 1 ? Shard(0) : with_bias == 2 ? Partial() : Replicate();
        if (with_bias) in.push_back(make_dtensor(bias, mesh, {pb}, 5));
        for (DTensor& d : in) d.requires_grad_();
        EXPECT_EQ(check_matches_replicated(f, in, 9, 1e-12, 1e-10), "")
            << "linear " << to_string(px) << " " << to_string(pw)
            << (with_bias ? " bias " + to_string(pb) : "");
      }
    }
  }
}

// ---- reductions --------------------------------------------------------------------

namespace {

// A random reduction: a shape of 0-3 dims (reduced dims nonempty when
// `nonempty_reduced`, as amax/amin need), dims (none = all; some
// negative) and keepdim.
struct RandomReduction {
  Shape shape;
  DimVector dims;
  bool keepdim;
  std::string what(const char* op) const {
    std::ostringstream o;
    o << op << " over " << (dims.empty() ? std::string("all") : to_string(dims))
      << (keepdim ? " keepdim" : "");
    return o.str();
  }
};

RandomReduction random_reduction(std::mt19937& rng, bool nonempty_reduced) {
  RandomReduction r;
  const int64_t nd = static_cast<int64_t>(rng() % 4);
  for (int64_t i = 0; i < nd; ++i) r.shape.push_back(dim_size(rng));
  if (nd > 0 && rng() % 4 != 0) {
    for (int64_t d = 0; d < nd; ++d)
      if (rng() % 2 == 0) r.dims.push_back(rng() % 2 == 0 ? d : d - nd);
    if (r.dims.empty()) r.dims.push_back(static_cast<int64_t>(rng() % nd));
  }
  r.keepdim = rng() % 2 == 0;
  if (nonempty_reduced) {
    for (int64_t d = 0; d < nd; ++d) {
      bool red = r.dims.empty();
      for (int64_t e : r.dims) red = red || e == d || e + nd == d;
      if (red && r.shape[d] == 0) r.shape[d] = 1 + rng() % 3;
    }
  }
  return r;
}

int64_t reduced_count(const RandomReduction& r) {
  int64_t n = 1;
  const int64_t nd = static_cast<int64_t>(r.shape.size());
  for (int64_t d = 0; d < nd; ++d) {
    bool red = r.dims.empty();
    for (int64_t e : r.dims) red = red || e == d || e + nd == d;
    if (red) n *= r.shape[d];
  }
  return n;
}

}  // namespace

TEST_F(AutogradMatmulReductionTest, Mean) {
  run_cases(world, 6, 7, [](std::mt19937& rng) {
    const RandomReduction r = random_reduction(rng, false);
    return Case{{randn(r.shape, rng)}, {true},
                [r](const std::vector<DTensor>& in) { return mean(in[0], r.dims, r.keepdim); },
                r.what("mean")};
  });
}

// With zeros put in: none, one or several in a slice.
TEST_F(AutogradMatmulReductionTest, Prod) {
  run_cases(world, 8, 8, [](std::mt19937& rng) {
    const RandomReduction r = random_reduction(rng, false);
    std::vector<double> v = randn(r.shape, rng).contiguous().to_vector<double>();
    const size_t zeros = v.empty() ? 0 : rng() % 3;
    for (size_t i = 0; i < zeros; ++i) v[rng() % v.size()] = 0;
    return Case{{Tensor::from_vector(v, r.shape)}, {true},
                [r](const std::vector<DTensor>& in) { return prod(in[0], r.dims, r.keepdim); },
                r.what("prod")};
  });
}

// Distinct multiples of 1/8 in random order: no ties, and the Partial
// pieces make_dtensor builds add up exactly, so that comparing the input
// with the result (in the backward, and in VerifyMode's reference) sees the
// same values whatever order a layout sums them in.
Tensor distinct_values(const Shape& shape, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(shape.product()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - v.size() / 2.0) / 8;
  std::shuffle(v.begin(), v.end(), rng);
  return Tensor::from_vector(v, shape);
}

// No ties (those are checked exactly below).
TEST_F(AutogradMatmulReductionTest, AmaxAmin) {
  run_cases(world, 6, 9, [](std::mt19937& rng) {
    const RandomReduction r = random_reduction(rng, true);
    const bool max = rng() % 2 == 0;
    return Case{{distinct_values(r.shape, rng)}, {true},
                [r, max](const std::vector<DTensor>& in) {
                  return max ? amax(in[0], r.dims, r.keepdim) : amin(in[0], r.dims, r.keepdim);
                },
                r.what(max ? "amax" : "amin")};
  });
}

TEST_F(AutogradMatmulReductionTest, Var) {
  run_cases(world, 6, 10, [](std::mt19937& rng) {
    RandomReduction r = random_reduction(rng, true);
    // N - correction > 0 (else the gradient is inf/nan, as in PyTorch).
    const int64_t n = reduced_count(r);
    const int64_t correction = std::min<int64_t>(static_cast<int64_t>(rng() % 3), n - 1);
    return Case{{randn(r.shape, rng)}, {true},
                [r, correction](const std::vector<DTensor>& in) {
                  return var(in[0], r.dims, correction, r.keepdim);
                },
                r.what("var") + " correction " + std::to_string(correction)};
  });
}

// amax/amin split the gradient evenly among the tied elements, wherever
// the ties lie on the mesh; exact.
TEST_F(AutogradMatmulReductionTest, AmaxAminTiesSplitEvenly) {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 3, 1, 2, 2, 2, 2, 5, 3, -1, 4},
                                       Shape{3, 4});
  // Row maxima: 3 twice, 2 four times, 5 once; row minima: 1 twice, 2 four
  // times, -1 once; column maxima: 5, 3 twice, 3, 4; overall maximum 5.
  const Tensor max_rows = Tensor::from_vector(
      std::vector<double>{0, 0.5, 0.5, 0, 0.25, 0.25, 0.25, 0.25, 1, 0, 0, 0}, Shape{3, 4});
  const Tensor min_rows = Tensor::from_vector(
      std::vector<double>{0.5, 0, 0, 0.5, 0.25, 0.25, 0.25, 0.25, 0, 0, 1, 0}, Shape{3, 4});
  const Tensor max_cols = Tensor::from_vector(
      std::vector<double>{0, 0.5, 1, 0, 0, 0, 0, 0, 1, 0.5, 0, 1}, Shape{3, 4});
  const Tensor max_all = Tensor::from_vector(
      std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, Shape{3, 4});
  // Ties of the whole tensor: all equal -> 1/12 each.
  const Tensor flat = Tensor::full({3, 4}, 7.0, DType::Float64);
  std::mt19937 rng(11);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < 3; ++k) {
      const Placements pl = dtensor::testing::random_input_placements(rng, mesh.ndim(), 2);
      if (!takes_part(mesh)) continue;
      const std::string where = to_string(pl) + " on " + to_string(ms);
      // The gradient of sum(op(x)) at `full` laid out with pl, exactly `want`.
      auto expect = [&](const Tensor& full, auto op, const Tensor& want, const char* what) {
        DTensor d = make_dtensor(full, mesh, pl, 5);
        d.requires_grad_();
        sum(op(d)).backward();
        const Tensor got = d.grad()->full_tensor();
        EXPECT_TRUE(equal(got, want)) << what << " " << where << ": got " << got;
      };
      expect(x, [](const DTensor& d) { return amax(d, {1}); }, max_rows, "amax rows");
      expect(x, [](const DTensor& d) { return amin(d, {-1}, true); }, min_rows, "amin rows");
      expect(x, [](const DTensor& d) { return amax(d); }, max_all, "amax all");
      expect(x, [](const DTensor& d) { return amax(d, {0}); }, max_cols, "amax cols");
      expect(flat, [](const DTensor& d) { return amin(d); },
             Tensor::full({3, 4}, 1.0 / 12, DType::Float64), "amin of equal values");
    }
  }
}

// prod with zeros: one zero in a slice gets the product of the others, the
// rest of the slice 0; two zeros give 0 everywhere; exact (integers).
TEST_F(AutogradMatmulReductionTest, ProdZerosExactly) {
  const Tensor x =
      Tensor::from_vector(std::vector<double>{2, 0, 3, 0, 0, 5, 1, 2, 3}, Shape{3, 3});
  const Tensor rows =
      Tensor::from_vector(std::vector<double>{0, 6, 0, 0, 0, 0, 6, 3, 2}, Shape{3, 3});
  const Tensor one_zero = Tensor::from_vector(std::vector<double>{2, 0, 3, 4}, Shape{2, 2});
  const Tensor one_zero_all = Tensor::from_vector(std::vector<double>{0, 24, 0, 0}, Shape{2, 2});
  std::mt19937 rng(12);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < 3; ++k) {
      const Placements pl = dtensor::testing::random_input_placements(rng, mesh.ndim(), 2);
      if (!takes_part(mesh)) continue;
      const std::string where = to_string(pl) + " on " + to_string(ms);
      auto expect = [&](const Tensor& full, auto op, const Tensor& want, const char* what) {
        DTensor d = make_dtensor(full, mesh, pl, 5);
        d.requires_grad_();
        sum(op(d)).backward();
        const Tensor got = d.grad()->full_tensor();
        EXPECT_TRUE(equal(got, want)) << what << " " << where << ": got " << got;
      };
      expect(x, [](const DTensor& d) { return prod(d, {1}); }, rows, "prod rows");
      expect(x, [](const DTensor& d) { return prod(d); }, Tensor::zeros({3, 3}, DType::Float64),
             "prod of all, several zeros");
      expect(one_zero, [](const DTensor& d) { return prod(d, {}, true); }, one_zero_all,
             "prod of all, one zero");
    }
  }
}

TEST_F(AutogradMatmulReductionTest, ArgmaxArgminHaveNoGradient) {
  DeviceMesh mesh(world, {std::min<int64_t>(4, world.size())});
  if (!takes_part(mesh)) return;
  DTensor x = distribute_tensor(Tensor::randn({4, 5}, 1, 0, DType::Float64), mesh, {Shard(1)});
  x.requires_grad_();
  EXPECT_FALSE(argmax(x, 1).requires_grad());
  EXPECT_FALSE(argmin(x).requires_grad());
  EXPECT_EQ(argmax(x, 1).dtype(), DType::Int64);
}

// ---- tensor-parallel linear: layouts and collectives of the backward ----------------

// Column parallel (weight S(0), input R): the output's gradient S(-1)
// gives a Partial(sum) input gradient and an S(0) weight gradient with no
// collective; the input gradient's reduction to Replicate is then exactly
// one all_reduce. Row parallel (weight S(1), input S(-1)): a replicated
// output gradient gives S(-1) and S(1) gradients with no collective.
TEST_F(AutogradMatmulReductionTest, TensorParallelLinearBackwardLayouts) {
  DeviceMesh mesh(world, {std::min<int64_t>(4, world.size())});
  if (!takes_part(mesh)) return;
  const Tensor x_full = Tensor::randn({2, 3, 8}, 1, 0, DType::Float64);
  const Tensor w_full = Tensor::randn({12, 8}, 2, 0, DType::Float64);
  const Tensor g_full = Tensor::randn({2, 3, 12}, 3, 0, DType::Float64);
  // The reference: x @ w^T's gradients on replicated tensors.
  DTensor xr = distribute_tensor(x_full, mesh, replicate_mm(mesh));
  DTensor wr = distribute_tensor(w_full, mesh, replicate_mm(mesh));
  xr.requires_grad_();
  wr.requires_grad_();
  linear(xr, wr).backward(distribute_tensor(g_full, mesh, replicate_mm(mesh)));
  const Tensor gx_want = xr.grad()->full_tensor(), gw_want = wr.grad()->full_tensor();
  {
    DTensor x = distribute_tensor(x_full, mesh, {Replicate()});
    DTensor w = distribute_tensor(w_full, mesh, {Shard(0)});
    x.requires_grad_();
    w.requires_grad_();
    const DTensor y = linear(x, w);
    ASSERT_EQ(y.placements(), Placements{Shard(2)});
    const DTensor g = distribute_tensor(g_full, mesh, {Shard(2)});
    CommDebugMode comm;
    y.backward(g);
    EXPECT_EQ(comm.total_count(), 0) << comm.table();
    EXPECT_EQ(x.grad()->placements(), Placements{Partial()});
    EXPECT_EQ(w.grad()->placements(), Placements{Shard(0)});
    const DTensor gx = x.grad()->redistribute(mesh, replicate_mm(mesh));
    EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 1) << comm.table();
    EXPECT_EQ(comm.total_count(), 1) << comm.table();
    EXPECT_TRUE(allclose(gx.full_tensor(), gx_want, 1e-12, 1e-12));
    EXPECT_TRUE(allclose(w.grad()->full_tensor(), gw_want, 1e-12, 1e-12));
  }
  {
    DTensor x = distribute_tensor(x_full, mesh, {Shard(2)});
    DTensor w = distribute_tensor(w_full, mesh, {Shard(1)});
    x.requires_grad_();
    w.requires_grad_();
    const DTensor y = linear(x, w);
    ASSERT_EQ(y.placements(), Placements{Partial()});
    CommDebugMode comm;
    y.backward(distribute_tensor(g_full, mesh, {Replicate()}));
    EXPECT_EQ(comm.total_count(), 0) << comm.table();
    EXPECT_EQ(x.grad()->placements(), Placements{Shard(2)});
    EXPECT_EQ(w.grad()->placements(), Placements{Shard(1)});
    EXPECT_TRUE(allclose(x.grad()->full_tensor(), gx_want, 1e-12, 1e-12));
    EXPECT_TRUE(allclose(w.grad()->full_tensor(), gw_want, 1e-12, 1e-12));
  }
}
