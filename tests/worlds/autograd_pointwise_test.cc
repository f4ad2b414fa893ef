// Gradients of the pointwise DTensor ops on every world (see world_util.h):
// backward against finite differences and against the same computation on
// replicated inputs, on random shapes (uneven and empty shards, 0-d,
// broadcasting) and random placements including Partial; the conventions
// at non-differentiable points (relu'(0), abs'(0), ties of maximum) exactly;
// gradients of mixed-dtype inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::check_gradients;
using dtensor::testing::check_matches_replicated;
using dtensor::testing::make_dtensor;

namespace {

class AutogradPointwiseTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// The values an input is drawn from, chosen to keep finite differences
// away from the points where an op is not differentiable.
enum class Domain {
  Any,       // standard normal
  Positive,  // [0.5, 1.5): log, sqrt, rsqrt, fractional powers
  NonZero,   // ±[0.5, 1.5): abs, relu, divisors
  Grid,      // multiples of 1/4 ...
  GridHalf,  // ... and those plus 1/8: maximum(Grid, GridHalf) never ties
  Mask,      // bool; never requires grad
};

Tensor values(const Shape& shape, Domain d, uint64_t seed) {
  const DType f64 = DType::Float64;
  switch (d) {
    case Domain::Any: return Tensor::randn(shape, seed, 0, f64);
    case Domain::Positive: return Tensor::rand(shape, seed, 0, f64) + 0.5;
    case Domain::NonZero: {
      const Tensor m = Tensor::rand(shape, seed, 0, f64) + 0.5;
      return where(lt(Tensor::rand(shape, seed + 1, 0, f64), 0.5), neg(m), m);
    }
    case Domain::Grid: return dtensor::testing::int_valued(shape, seed).to(f64) / 4.0;
    case Domain::GridHalf: return dtensor::testing::int_valued(shape, seed).to(f64) / 4.0 + 0.125;
    case Domain::Mask: return lt(Tensor::rand(shape, seed, 0, f64), 0.5);
  }
  return {};
}

struct Arg {
  Shape shape;
  Domain domain = Domain::Any;
  bool requires_grad = true;
};

// 0-3 dims of sizes 1-4, sometimes 0: few elements (finite differences
// run the op twice per element) yet uneven and empty shards on meshes of
// 2-16 ranks.
Shape small_shape_pointwise(std::mt19937& rng) {
  const int nd = rng() % 8 == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
  Shape s;
  for (int i = 0; i < nd; ++i) s.push_back(rng() % 8 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 4));
  return s;
}

// A shape that broadcasts to `out`: a suffix of it (sometimes none: 0-d),
// some dims 1.
Shape broadcasting_to(std::mt19937& rng, const Shape& out) {
  const size_t drop = rng() % 3 == 0 ? rng() % (out.size() + 1) : 0;
  Shape s;
  for (size_t i = drop; i < out.size(); ++i) s.push_back(rng() % 3 == 0 ? 1 : out[i]);
  return s;
}

// Two or three shapes that broadcast together, e.g. [3,1,5] and [4,5].
std::vector<Shape> broadcast_shapes_for(std::mt19937& rng, int n) {
  const Shape out = small_shape_pointwise(rng);
  std::vector<Shape> s;
  for (int i = 0; i < n; ++i) s.push_back(broadcasting_to(rng, out));
  return s;
}

using ArgsFn = std::function<std::vector<Arg>(std::mt19937&)>;

struct OpCase {
  std::string name;
  ArgsFn args;
  dtensor::testing::GradFn f;
};

ArgsFn one(Domain d) {
  return [d](std::mt19937& rng) { return std::vector<Arg>{{small_shape_pointwise(rng), d}}; };
}

// Two inputs that broadcast; sometimes only one of them requires grad.
ArgsFn two(Domain da, Domain db) {
  return [da, db](std::mt19937& rng) {
    const std::vector<Shape> s = broadcast_shapes_for(rng, 2);
    const int frozen = static_cast<int>(rng() % 6);  // 0 or 1: that input needs no gradient
    return std::vector<Arg>{{s[0], da, frozen != 0}, {s[1], db, frozen != 1}};
  };
}

// Three inputs that broadcast (the last one from domain `last`); sometimes
// one of them requires no grad.
ArgsFn three_any(Domain last) {
  return [last](std::mt19937& rng) {
    const std::vector<Shape> s = broadcast_shapes_for(rng, 3);
    const int frozen = static_cast<int>(rng() % 6);
    return std::vector<Arg>{{s[0], Domain::Any, frozen != 0},
                            {s[1], Domain::Any, frozen != 1},
                            {s[2], last, frozen != 2}};
  };
}

template <class F>
OpCase unary(std::string name, Domain d, F f) {
  return {std::move(name), one(d), [f](const std::vector<DTensor>& x) { return f(x[0]); }};
}

template <class F>
OpCase binary(std::string name, Domain da, Domain db, F f) {
  return {std::move(name), two(da, db),
          [f](const std::vector<DTensor>& x) { return f(x[0], x[1]); }};
}

// A one-element plain Tensor: 0-d, [1] or [1, 1].
Tensor plain_one(double v, int shape_kind) {
  const Shape shapes[] = {{}, {1}, {1, 1}};
  return Tensor::full(shapes[shape_kind % 3], v, DType::Float64);
}

std::vector<OpCase> differentiable_ops() {
  using D = Domain;
  const Tensor t0 = plain_one(1.5, 0), t1 = plain_one(-0.75, 1), t2 = plain_one(2.5, 2);
  return {
      // unary
      unary("neg", D::Any, [](const DTensor& x) { return neg(x); }),
      unary("abs", D::NonZero, [](const DTensor& x) { return abs(x); }),
      unary("exp", D::Any, [](const DTensor& x) { return exp(x); }),
      unary("log", D::Positive, [](const DTensor& x) { return log(x); }),
      unary("sqrt", D::Positive, [](const DTensor& x) { return sqrt(x); }),
      unary("rsqrt", D::Positive, [](const DTensor& x) { return rsqrt(x); }),
      unary("tanh", D::Any, [](const DTensor& x) { return tanh(x); }),
      unary("sigmoid", D::Any, [](const DTensor& x) { return sigmoid(x); }),
      unary("relu", D::NonZero, [](const DTensor& x) { return relu(x); }),
      unary("erf", D::Any, [](const DTensor& x) { return erf(x); }),
      unary("gelu", D::Any, [](const DTensor& x) { return gelu(x); }),
      unary("silu", D::Any, [](const DTensor& x) { return silu(x); }),
      unary("sin", D::Any, [](const DTensor& x) { return sin(x); }),
      unary("cos", D::Any, [](const DTensor& x) { return cos(x); }),
      unary("log1p", D::Positive, [](const DTensor& x) { return log1p(x); }),
      unary("expm1", D::Any, [](const DTensor& x) { return expm1(x); }),
      unary("square", D::Any, [](const DTensor& x) { return square(x); }),
      unary("sign", D::NonZero, [](const DTensor& x) { return sign(x); }),
      unary("floor", D::Any, [](const DTensor& x) { return floor(x); }),
      unary("round", D::Any, [](const DTensor& x) { return round(x, 1); }),
      unary("softplus", D::Any, [](const DTensor& x) { return softplus(x, 2, 1); }),
      unary("gelu_tanh", D::Any, [](const DTensor& x) { return gelu(x, GeluApprox::Tanh); }),
      // pow with a scalar exponent
      unary("pow_0", D::Any, [](const DTensor& x) { return pow(x, 0); }),
      unary("pow_1", D::Any, [](const DTensor& x) { return pow(x, 1); }),
      unary("pow_2", D::Any, [](const DTensor& x) { return pow(x, 2); }),
      unary("pow_2.0", D::Any, [](const DTensor& x) { return pow(x, 2.0); }),
      unary("pow_3", D::Any, [](const DTensor& x) { return pow(x, 3); }),
      unary("pow_0.5", D::Positive, [](const DTensor& x) { return pow(x, 0.5); }),
      unary("pow_-1.5", D::Positive, [](const DTensor& x) { return pow(x, -1.5); }),
      unary("pow_-2", D::NonZero, [](const DTensor& x) { return pow(x, -2); }),
      // with a scalar
      unary("add_scalar", D::Any, [](const DTensor& x) { return x + 2.5; }),
      unary("sub_scalar", D::Any, [](const DTensor& x) { return x - 3; }),
      unary("rsub", D::Any, [](const DTensor& x) { return sub(2.0, x); }),
      unary("mul_scalar", D::Any, [](const DTensor& x) { return x * -1.5; }),
      unary("mul_int_scalar", D::Any, [](const DTensor& x) { return 3 * x; }),
      unary("div_scalar", D::Any, [](const DTensor& x) { return x / 4.0; }),
      unary("rdiv", D::NonZero, [](const DTensor& x) { return div(3.0, x); }),
      // with a one-element plain Tensor (routed through the DTensor forms)
      unary("add_tensor", D::Any, [t0](const DTensor& x) { return add(x, t0); }),
      unary("tensor_sub", D::Any, [t1](const DTensor& x) { return sub(t1, x); }),
      unary("mul_tensor", D::Any, [t2](const DTensor& x) { return x * t2; }),
      unary("tensor_mul", D::Any, [t1](const DTensor& x) { return t1 * x; }),
      unary("div_tensor", D::Any, [t1](const DTensor& x) { return div(x, t1); }),
      unary("tensor_div", D::NonZero, [t2](const DTensor& x) { return div(t2, x); }),
      // two DTensors, broadcasting
      binary("add", D::Any, D::Any, [](const DTensor& a, const DTensor& b) { return a + b; }),
      binary("sub", D::Any, D::Any, [](const DTensor& a, const DTensor& b) { return a - b; }),
      binary("mul", D::Any, D::Any, [](const DTensor& a, const DTensor& b) { return a * b; }),
      binary("div", D::Any, D::NonZero, [](const DTensor& a, const DTensor& b) { return a / b; }),
      binary("maximum", D::Grid, D::GridHalf,
             [](const DTensor& a, const DTensor& b) { return maximum(a, b); }),
      binary("minimum", D::GridHalf, D::Grid,
             [](const DTensor& a, const DTensor& b) { return minimum(a, b); }),
      // selections: the mask gets no gradient
      {"where",
       [](std::mt19937& rng) {
         const std::vector<Shape> s = broadcast_shapes_for(rng, 3);
         const int frozen = static_cast<int>(rng() % 6);
         return std::vector<Arg>{
             {s[0], D::Mask, false}, {s[1], D::Any, frozen != 1}, {s[2], D::Any, frozen != 2}};
       },
       [](const std::vector<DTensor>& x) { return where(x[0], x[1], x[2]); }},
      {"where_scalar",
       [](std::mt19937& rng) {
         const std::vector<Shape> s = broadcast_shapes_for(rng, 2);
         return std::vector<Arg>{{s[0], D::Mask, false}, {s[1], D::Any}};
       },
       [](const std::vector<DTensor>& x) { return where(x[0], x[1], -2.5); }},
      {"masked_fill",
       [](std::mt19937& rng) {
         const std::vector<Shape> s = broadcast_shapes_for(rng, 2);
         return std::vector<Arg>{{s[0], D::Any}, {s[1], D::Mask, false}};
       },
       [](const std::vector<DTensor>& x) { return masked_fill(x[0], x[1], 7.0); }},
      // three broadcasting operands, any of them frozen
      {"addcmul", three_any(D::Any),
       [](const std::vector<DTensor>& x) { return addcmul(x[0], x[1], x[2], -0.5); }},
      {"addcdiv", three_any(D::NonZero),
       [](const std::vector<DTensor>& x) { return addcdiv(x[0], x[1], x[2], 2); }},
      {"lerp", three_any(D::Any),
       [](const std::vector<DTensor>& x) { return lerp(x[0], x[1], x[2]); }},
      binary("lerp_scalar", D::Any, D::Any,
             [](const DTensor& a, const DTensor& b) { return lerp(a, b, 0.7); }),
  };
}

// Runs `cases` random cases of `op`, cycling through the gradient meshes.
// Every rank draws the same numbers; ranks outside a mesh skip its case.
void check_op(const World& world, const OpCase& op, int cases, uint64_t seed) {
  std::mt19937 rng(seed);
  const std::vector<Shape> meshes = dtensor::testing::grad_meshes(world.size());
  for (int k = 0; k < cases; ++k) {
    const Shape& ms = meshes[static_cast<size_t>(k) % meshes.size()];
    DeviceMesh mesh(world, ms);
    const std::vector<Arg> args = op.args(rng);
    std::vector<Placements> pls;
    for (const Arg& a : args)
      pls.push_back(dtensor::testing::random_input_placements(
          rng, mesh.ndim(), static_cast<int64_t>(a.shape.size()), a.domain != Domain::Mask));
    if (!dtensor::testing::takes_part(mesh)) continue;
    std::vector<DTensor> in;
    std::ostringstream what;
    what << op.name << " on mesh " << ms << ":";
    for (size_t i = 0; i < args.size(); ++i) {
      const Tensor full = values(args[i].shape, args[i].domain, seed * 1000 + k * 10 + i);
      DTensor x = make_dtensor(full, mesh, pls[i], seed + k);
      if (args[i].requires_grad) x.requires_grad_();
      what << " " << args[i].shape << " " << to_string(pls[i])
           << (args[i].requires_grad ? "" : " (no grad)");
      in.push_back(x);
    }
    EXPECT_EQ(check_gradients(op.f, in, k), "") << what.str();
    // The sharded and replicated runs do the same elementwise math, so
    // their gradients are equal bit for bit, unless sums run in another
    // order: Partial(sum|avg) inputs are reduced from pieces that are not
    // exact in float64, and sum_to adds a sharded broadcast dim as local
    // sums and then a reduction. Those cases get 1e-12.
    bool exact = true;
    Shape out_shape;
    for (const Arg& a : args) out_shape = broadcast_shapes(out_shape, a.shape);
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].requires_grad && args[i].shape != out_shape) exact = false;
      for (const Placement& p : pls[i])
        if (p.is_partial() && (p.reduce_op() == ReduceOp::Sum || p.reduce_op() == ReduceOp::Avg))
          exact = false;
    }
    const double tol = exact ? 0 : 1e-12;
    EXPECT_EQ(check_matches_replicated(op.f, in, k, tol, tol), "") << what.str();
  }
}

// x's gradient of sum(f(x)) (an upstream gradient of ones), as values.
std::vector<double> grad_of_sum(const std::function<DTensor(const DTensor&)>& f,
                                DTensor x) {
  x.zero_grad();
  sum(f(x)).backward();
  return x.grad()->full_tensor().to_vector<double>();
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_F(AutogradPointwiseTest, RandomLayoutsMatchFiniteDifferencesAndReplicated) {
  const int cases = dtensor::testing::property_cases(24);
  uint64_t seed = 100;
  for (const OpCase& op : differentiable_ops()) check_op(world, op, cases, seed++);
}

// The conventions at points where the derivative is not defined or
// infinite, exactly as PyTorch gives them.
TEST_F(AutogradPointwiseTest, ConventionsAtNonDifferentiablePoints) {
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const Placements shard(static_cast<size_t>(mesh.ndim()), Shard(0));
    auto dt = [&](std::vector<double> v) {
      DTensor d = distribute_tensor(Tensor::from_vector(v), mesh, shard);
      d.requires_grad_();
      return d;
    };
    using V = std::vector<double>;
    const DTensor x = dt({-2, 0, 3, -0.0});
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return relu(t); }, x), (V{0, 0, 1, 0})) << ms;
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return abs(t); }, x), (V{-1, 0, 1, 0})) << ms;
    // sqrt'(0) and log'(0) are inf; pow: exponent 0 gives 0 even at inf
    // and NaN, exponent 1 gives 1, 0.5 gives inf at 0.
    const DTensor z = dt({0, 4, kInf, kNaN});
    const V sq = grad_of_sum([](const DTensor& t) { return sqrt(t); }, z);
    EXPECT_EQ(sq[0], kInf);
    EXPECT_EQ(sq[1], 0.25);
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return log(t); }, z)[0], kInf);
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return pow(t, 0); }, z), (V{0, 0, 0, 0}));
    const V p1 = grad_of_sum([](const DTensor& t) { return pow(t, 1); }, z);
    EXPECT_EQ(V(p1.begin(), p1.begin() + 3), (V{1, 1, 1}));
    const V p2 = grad_of_sum([](const DTensor& t) { return pow(t, 2); }, x);
    EXPECT_EQ(p2, (V{-4, 0, 6, 0}));
    const V half = grad_of_sum([](const DTensor& t) { return pow(t, 0.5); }, z);
    EXPECT_EQ(half[0], kInf);
    EXPECT_EQ(half[1], 0.25);
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return pow(t, -1); }, z)[1], -1.0 / 16);
    // gelu'(0) = 1/2 for both approximations.
    const DTensor zero = dt({0});
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return gelu(t); }, zero), (V{0.5}));
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return gelu(t, GeluApprox::Tanh); }, zero),
              (V{0.5}));
    // Ties of maximum/minimum split the gradient half/half.
    DTensor a = dt({1, 2, 3}), b = dt({1, 0, 5});
    for (bool is_max : {true, false}) {
      a.zero_grad(), b.zero_grad();
      sum(is_max ? maximum(a, b) : minimum(a, b)).backward();
      EXPECT_EQ(a.grad()->full_tensor().to_vector<double>(),
                is_max ? V({0.5, 1, 0}) : V({0.5, 0, 1}));
      EXPECT_EQ(b.grad()->full_tensor().to_vector<double>(),
                is_max ? V({0.5, 0, 1}) : V({0.5, 1, 0}));
    }
    // maximum(x, x) passes the gradient through once.
    EXPECT_EQ(grad_of_sum([](const DTensor& t) { return maximum(t, t); }, a), (V{1, 1, 1}));
    // where: cond gets nothing, the unpicked side zero; masked_fill: zero
    // where filled.
    const DTensor cond = distribute_tensor(Tensor::from_vector(std::vector<bool>{true, false, true}),
                                           mesh, shard);
    a.zero_grad(), b.zero_grad();
    sum(where(cond, a, b)).backward();
    EXPECT_EQ(a.grad()->full_tensor().to_vector<double>(), (V{1, 0, 1}));
    EXPECT_EQ(b.grad()->full_tensor().to_vector<double>(), (V{0, 1, 0}));
    EXPECT_FALSE(cond.requires_grad());
    EXPECT_EQ(grad_of_sum([&](const DTensor& t) { return masked_fill(t, cond, 9.0); }, a),
              (V{0, 1, 0}));
    EXPECT_EQ(grad_of_sum([&](const DTensor& t) { return where(cond, t, 9.0); }, a),
              (V{1, 0, 1}));
  }
}

// gelu's gradient against PyTorch's formulas in closed form.
TEST_F(AutogradPointwiseTest, GeluGradientMatchesPyTorch) {
  DeviceMesh mesh(world, {1});
  if (!dtensor::testing::takes_part(mesh)) return;
  DTensor x = distribute_tensor(Tensor::from_vector(std::vector<double>{1, -2, 0.5}), mesh,
                                {Replicate()});
  x.requires_grad_();
  // Phi(x) + x phi(x), and the derivative of the tanh form, in closed form.
  auto exact = [](double v) {
    return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) +
           v * std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
  };
  auto tanh_form = [](double v) {
    const double k = std::sqrt(2 / std::numbers::pi), th = std::tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v);
  };
  const std::vector<double> g = grad_of_sum([](const DTensor& t) { return gelu(t); }, x);
  const std::vector<double> gt =
      grad_of_sum([](const DTensor& t) { return gelu(t, GeluApprox::Tanh); }, x);
  const double xs[] = {1, -2, 0.5};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(g[i], exact(xs[i]), 1e-15);
    EXPECT_NEAR(gt[i], tanh_form(xs[i]), 1e-15);
  }
  // Phi(1) + phi(1), computed apart.
  EXPECT_NEAR(g[0], 1.0833154705876864, 1e-15);
}

// A gradient takes its input's dtype: a float32 input times a float64
// input (a float64 product) gets a float32 gradient; an integer input
// gets none.
TEST_F(AutogradPointwiseTest, MixedDTypesGiveEachInputItsOwnDType) {
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const Placements shard(static_cast<size_t>(mesh.ndim()), Shard(0));
    const Placements rep(static_cast<size_t>(mesh.ndim()), Replicate());
    const Tensor a_full = Tensor::randn({5, 3}, 1, 0, DType::Float32);
    const Tensor b_full = Tensor::rand({3}, 2, 0, DType::Float64) + 0.5;
    DTensor a = distribute_tensor(a_full, mesh, shard);
    DTensor b = distribute_tensor(b_full, mesh, rep);
    a.requires_grad_(), b.requires_grad_();
    const DTensor ab = mul(a, b);
    EXPECT_EQ(ab.dtype(), DType::Float64);
    sum(ab).backward();
    ASSERT_EQ(a.grad()->dtype(), DType::Float32);
    ASSERT_EQ(b.grad()->dtype(), DType::Float64);
    const Tensor want_a = (Tensor::ones({5, 3}, DType::Float64) * b_full).to(DType::Float32);
    EXPECT_EQ(a.grad()->full_tensor().to_vector<float>(), want_a.contiguous().to_vector<float>());
    const std::vector<double> gb = b.grad()->full_tensor().to_vector<double>();
    const Tensor sa = sum(a_full.to(DType::Float64), {0});
    const std::vector<double> want_b = sa.to_vector<double>();
    for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(gb[j], want_b[j], 1e-12);

    // Division and maximum of mixed dtypes: each gradient in its input's dtype.
    a.zero_grad(), b.zero_grad();
    sum(add(div(a, b), maximum(a, b))).backward();
    EXPECT_EQ(a.grad()->dtype(), DType::Float32);
    EXPECT_EQ(b.grad()->dtype(), DType::Float64);

    // An int64 factor gets no gradient; the float input gets the factor.
    const DTensor n = distribute_tensor(Tensor::arange(3), mesh, rep);
    DTensor x = distribute_tensor(Tensor::ones({3}, DType::Float32), mesh, rep);
    x.requires_grad_();
    sum(mul(x, n)).backward();
    EXPECT_FALSE(n.requires_grad());
    EXPECT_EQ(x.grad()->dtype(), DType::Float32);
    EXPECT_EQ(x.grad()->full_tensor().to_vector<float>(), (std::vector<float>{0, 1, 2}));
  }
}

// Comparisons give bool outputs that take no part in autograd.
TEST_F(AutogradPointwiseTest, ComparisonsRecordNothing) {
  DeviceMesh mesh(world, {1});
  if (!dtensor::testing::takes_part(mesh)) return;
  DTensor x = distribute_tensor(Tensor::from_vector(std::vector<double>{1, 2}), mesh,
                                {Replicate()});
  x.requires_grad_();
  EXPECT_FALSE(gt(x, 1.5).requires_grad());
  EXPECT_FALSE(eq(x, x).requires_grad());
  EXPECT_TRUE(mul(x, 2).requires_grad());
}
