// Op-by-op tests in the spirit of PyTorch's OpInfo tests: for every op, random
// input placements (Partials included where the input is a value) on meshes
// 4, 2x2, 2x3 and 2x4 (those that fit the world; see world_util.h), random
// shapes with uneven and empty shards, and full_tensor(op(dtensors)) ==
// op(full tensors). Integer-valued data keeps
// sums and products exact, so most ops compare exactly; the tolerance of the
// others is stated in their case.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;

namespace {

using Inputs = std::vector<Tensor>;
using DInputs = std::vector<DTensor>;

struct OpInfoCase {
  const char* name;
  // The full inputs of one case.
  std::function<Inputs(std::mt19937&, uint64_t seed)> inputs;
  std::function<Tensor(const Inputs&)> plain;
  std::function<DTensor(const DInputs&)> dist;
  // 0: exact; else rtol = atol = tol.
  double tol = 0;
  // Which inputs may be Partial (bool masks and indices may not).
  std::vector<bool> partial_ok = {true, true, true};
};

// 1-3 dims of sizes 1-7 (0 now and then, for empty tensors).
Shape random_shape(std::mt19937& rng) {
  Shape s;
  const int nd = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < nd; ++i) s.push_back(rng() % 12 == 0 ? 0 : 1 + rng() % 7);
  return s;
}

// A shape that broadcasts against s: some dims 1, maybe fewer leading dims.
Shape broadcastable_op_info(std::mt19937& rng, const Shape& s) {
  Shape b = s;
  if (rng() % 3 == 0) b[rng() % b.size()] = 1;
  if (rng() % 4 == 0 && b.size() > 1) {
    Shape tail;
    for (size_t i = 1; i < b.size(); ++i) tail.push_back(b[i]);
    b = tail;
  }
  return b;
}

Inputs one_input(std::mt19937& rng, uint64_t seed) { return {int_valued(random_shape(rng), seed)}; }
Inputs two_inputs(std::mt19937& rng, uint64_t seed) {
  const Shape a = random_shape(rng);
  return {int_valued(a, seed), int_valued(broadcastable_op_info(rng, a), seed + 1)};
}
Inputs mask_and_two(std::mt19937& rng, uint64_t seed) {
  const Shape a = random_shape(rng);
  return {gt(int_valued(broadcastable_op_info(rng, a), seed), 0.0), int_valued(a, seed + 1),
          int_valued(broadcastable_op_info(rng, a), seed + 2)};
}

template <class F>
OpInfoCase unary_case(const char* name, F f, double tol = 0) {
  return {name, one_input, [f](const Inputs& x) { return f(x[0]); },
          [f](const DInputs& x) { return f(x[0]); }, tol};
}

template <class F>
OpInfoCase binary_case(const char* name, F f, double tol = 0) {
  return {name, two_inputs, [f](const Inputs& x) { return f(x[0], x[1]); },
          [f](const DInputs& x) { return f(x[0], x[1]); }, tol};
}

std::vector<OpInfoCase> pointwise_cases() {
  return {
      binary_case("add", [](const auto& a, const auto& b) { return a + b; }),
      binary_case("sub", [](const auto& a, const auto& b) { return a - b; }),
      binary_case("mul", [](const auto& a, const auto& b) { return a * b; }),
      binary_case("div", [](const auto& a, const auto& b) { return a / (b * b + 1.0); }, 1e-5),
      binary_case("maximum", [](const auto& a, const auto& b) { return maximum(a, b); }),
      binary_case("minimum", [](const auto& a, const auto& b) { return minimum(a, b); }),
      binary_case("eq", [](const auto& a, const auto& b) { return eq(a, b); }),
      binary_case("lt", [](const auto& a, const auto& b) { return lt(a, b); }),
      binary_case("ge", [](const auto& a, const auto& b) { return ge(a, b); }),
      unary_case("add_scalar", [](const auto& x) { return x + 2.0; }),
      unary_case("scalar_sub", [](const auto& x) { return 2.0 - x; }),
      unary_case("mul_scalar", [](const auto& x) { return x * -3.0; }),
      unary_case("div_scalar", [](const auto& x) { return x / 4.0; }),
      unary_case("scalar_div", [](const auto& x) { return 4.0 / (x * x + 1.0); }, 1e-5),
      unary_case("neg", [](const auto& x) { return -x; }),
      unary_case("abs", [](const auto& x) { return abs(x); }),
      unary_case("relu", [](const auto& x) { return relu(x); }),
      unary_case("exp", [](const auto& x) { return exp(x / 50.0); }, 1e-5),
      unary_case("log", [](const auto& x) { return log(x * x + 1.0); }, 1e-5),
      unary_case("sqrt", [](const auto& x) { return sqrt(abs(x)); }, 1e-5),
      unary_case("rsqrt", [](const auto& x) { return rsqrt(abs(x) + 1.0); }, 1e-5),
      unary_case("tanh", [](const auto& x) { return tanh(x / 10.0); }, 1e-5),
      unary_case("sigmoid", [](const auto& x) { return sigmoid(x / 10.0); }, 1e-5),
      unary_case("erf", [](const auto& x) { return erf(x / 10.0); }, 1e-5),
      unary_case("gelu", [](const auto& x) { return gelu(x / 10.0); }, 1e-5),
      unary_case("silu", [](const auto& x) { return silu(x / 10.0); }, 1e-5),
      unary_case("sin", [](const auto& x) { return sin(x); }, 1e-5),
      unary_case("cos", [](const auto& x) { return cos(x); }, 1e-5),
      unary_case("log1p", [](const auto& x) { return log1p(abs(x)); }, 1e-5),
      unary_case("expm1", [](const auto& x) { return expm1(x / 10.0); }, 1e-5),
      unary_case("square", [](const auto& x) { return square(x); }),
      unary_case("sign", [](const auto& x) { return sign(x); }),
      unary_case("floor", [](const auto& x) { return floor(x / 4.0); }),
      unary_case("round", [](const auto& x) { return round(x / 4.0); }),
      unary_case("softplus", [](const auto& x) { return softplus(x, 1, 3); }, 1e-5),
      unary_case("isnan", [](const auto& x) { return isnan(log(x)); }),
      unary_case("logical_not", [](const auto& x) { return logical_not(x); }),
      binary_case("logical_and", [](const auto& a, const auto& b) { return logical_and(a, b); }),
      binary_case("logical_xor", [](const auto& a, const auto& b) { return logical_xor(a, b); }),
      binary_case("lerp", [](const auto& a, const auto& b) { return lerp(a, b, 0.25); }, 1e-5),
      unary_case("gelu_tanh", [](const auto& x) { return gelu(x / 10.0, GeluApprox::Tanh); }, 1e-5),
      unary_case("pow", [](const auto& x) { return pow(x, 2); }),
      unary_case("ne_scalar", [](const auto& x) { return ne(x, 3); }),
      unary_case("le_scalar", [](const auto& x) { return le(x, 0.5); }),
      {"where", mask_and_two,
       [](const Inputs& x) { return where(x[0], x[1], x[2]); },
       [](const DInputs& x) { return where(x[0], x[1], x[2]); }, 0, {false, true, true}},
      {"where_scalar", mask_and_two,
       [](const Inputs& x) { return where(x[0], x[1], -1.5); },
       [](const DInputs& x) { return where(x[0], x[1], -1.5); }, 0, {false, true, true}},
      {"masked_fill",
       [](std::mt19937& rng, uint64_t seed) {
         const Shape a = random_shape(rng);
         return Inputs{int_valued(a, seed), gt(int_valued(broadcastable_op_info(rng, a), seed + 1), 0.0)};
       },
       [](const Inputs& x) { return masked_fill(x[0], x[1], 9); },
       [](const DInputs& x) { return masked_fill(x[0], x[1], 9); }, 0, {true, false}},
  };
}

int64_t dim_size_op_info(std::mt19937& rng, int64_t lo = 0) { return lo + static_cast<int64_t>(rng() % (7 - lo)); }

// A shape that `out` broadcasts from (as a bias): a suffix of out, some dims 1.
Shape bias_shape(std::mt19937& rng, const Shape& out) {
  Shape b;
  const size_t keep = rng() % (out.size() + 1);
  for (size_t i = out.size() - keep; i < out.size(); ++i) b.push_back(rng() % 3 == 0 ? 1 : out[i]);
  return b;
}

// 1-4 dims for matmul: batch dims that broadcast, inner dims that agree.
Inputs matmul_inputs(std::mt19937& rng, uint64_t seed) {
  const int da = 1 + static_cast<int>(rng() % 4), db = 1 + static_cast<int>(rng() % 4);
  const int64_t k = dim_size_op_info(rng, 1);
  Shape batch;
  for (int i = 0; i < 2; ++i) batch.push_back(dim_size_op_info(rng, 1));
  Shape a, b;
  for (int i = 0; i + 2 < da; ++i) a.push_back(rng() % 3 == 0 ? 1 : batch[i + 4 - da]);
  for (int i = 0; i + 2 < db; ++i) b.push_back(rng() % 3 == 0 ? 1 : batch[i + 4 - db]);
  if (da > 1) a.push_back(dim_size_op_info(rng));
  a.push_back(k);
  b.push_back(k);
  if (db > 1) b.push_back(dim_size_op_info(rng));
  return {int_valued(a, seed), int_valued(b, seed + 1)};
}

std::vector<OpInfoCase> matmul_cases() {
  auto mm_inputs = [](std::mt19937& rng, uint64_t seed) {
    const int64_t m = dim_size_op_info(rng), k = dim_size_op_info(rng, 1), n = dim_size_op_info(rng);
    return Inputs{int_valued({m, k}, seed), int_valued({k, n}, seed + 1)};
  };
  auto bmm_inputs = [](std::mt19937& rng, uint64_t seed) {
    const int64_t b = dim_size_op_info(rng, 1), m = dim_size_op_info(rng), k = dim_size_op_info(rng, 1), n = dim_size_op_info(rng);
    return Inputs{int_valued({b, m, k}, seed), int_valued({b, k, n}, seed + 1)};
  };
  auto with_bias = [](auto inputs) {
    return [inputs](std::mt19937& rng, uint64_t seed) {
      Inputs ab = inputs(rng, seed);
      Shape out = ab[0].shape();
      out.back() = ab[1].shape().back();
      return Inputs{int_valued(bias_shape(rng, out), seed + 2), ab[0], ab[1]};
    };
  };
  auto linear_inputs = [](bool bias) {
    return [bias](std::mt19937& rng, uint64_t seed) {
      Shape x;
      const int nd = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < nd; ++i) x.push_back(dim_size_op_info(rng, i + 1 == nd ? 1 : 0));
      const int64_t out = dim_size_op_info(rng);
      Inputs in{int_valued(x, seed), int_valued({out, x.back()}, seed + 1)};
      if (bias) in.push_back(int_valued(rng() % 4 == 0 ? Shape{1} : Shape{out}, seed + 2));
      return in;
    };
  };
  return {
      {"mm", mm_inputs, [](const Inputs& x) { return mm(x[0], x[1]); },
       [](const DInputs& x) { return mm(x[0], x[1]); }},
      {"addmm", with_bias(mm_inputs), [](const Inputs& x) { return addmm(x[0], x[1], x[2], 2, -1); },
       [](const DInputs& x) { return addmm(x[0], x[1], x[2], 2, -1); }},
      {"bmm", bmm_inputs, [](const Inputs& x) { return bmm(x[0], x[1]); },
       [](const DInputs& x) { return bmm(x[0], x[1]); }},
      {"baddbmm", with_bias(bmm_inputs),
       [](const Inputs& x) { return baddbmm(x[0], x[1], x[2], -1, 3); },
       [](const DInputs& x) { return baddbmm(x[0], x[1], x[2], -1, 3); }},
      {"matmul", matmul_inputs, [](const Inputs& x) { return matmul(x[0], x[1]); },
       [](const DInputs& x) { return matmul(x[0], x[1]); }},
      {"linear", linear_inputs(false), [](const Inputs& x) { return linear(x[0], x[1]); },
       [](const DInputs& x) { return linear(x[0], x[1]); }},
      {"linear_bias", linear_inputs(true), [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
       [](const DInputs& x) { return linear(x[0], x[1], x[2]); }},
  };
}

// 1-3 dims of sizes 1-7: reductions without an identity need non-empty dims.
Inputs one_nonempty(std::mt19937& rng, uint64_t seed) {
  Shape s;
  const int nd = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < nd; ++i) s.push_back(dim_size_op_info(rng, 1));
  return {int_valued(s, seed)};
}

std::vector<OpInfoCase> reduction_cases() {
  std::vector<OpInfoCase> cases;
  auto add = [&](const char* name, auto f, double tol, bool nonempty) {
    OpInfoCase c = unary_case(name, f, tol);
    if (nonempty) c.inputs = one_nonempty;
    cases.push_back(c);
  };
  add("sum0", [](const auto& x) { return sum(x, {0}); }, 0, false);
  add("sum_all", [](const auto& x) { return sum(x); }, 0, false);
  add("sum_last_keep", [](const auto& x) { return sum(x, {-1}, true); }, 0, false);
  add("mean0", [](const auto& x) { return mean(x, {0}); }, 1e-5, false);
  add("mean_all_keep", [](const auto& x) { return mean(x, {}, true); }, 1e-5, false);
  add("mean_first_last",
      [](const auto& x) { return x.dim() > 1 ? mean(x, {0, -1}) : mean(x, {0}); }, 1e-5, true);
  // Dividing by 16 is exact, also for the pieces of a P(sum).
  add("prod_last", [](const auto& x) { return prod(x / 16.0, {-1}); }, 1e-5, false);
  add("amax0", [](const auto& x) { return amax(x, {0}); }, 0, true);
  add("amax_all", [](const auto& x) { return amax(x); }, 0, true);
  add("amin_last_keep", [](const auto& x) { return amin(x, {-1}, true); }, 0, true);
  add("var0", [](const auto& x) { return var(x, {0}); }, 1e-5, true);
  add("var_all_biased", [](const auto& x) { return var(x, {}, 0); }, 1e-5, true);
  add("argmax_last", [](const auto& x) { return argmax(x, -1); }, 0, true);
  add("argmin0_keep", [](const auto& x) { return argmin(x, 0, true); }, 0, true);
  add("argmax_flat", [](const auto& x) { return argmax(x); }, 0, true);
  return cases;
}

// n tensors agreeing on every dim but `dim` (of a random shape).
auto joinable(int n, int64_t dim) {
  return [n, dim](std::mt19937& rng, uint64_t seed) {
    Shape base = random_shape(rng);
    const int64_t d = dim < 0 ? dim + static_cast<int64_t>(base.size()) : dim;
    Inputs in;
    for (int i = 0; i < n; ++i) {
      Shape s = base;
      s[d] = dim_size_op_info(rng);
      in.push_back(int_valued(s, seed + i));
    }
    return in;
  };
}

std::vector<OpInfoCase> tensor_op_cases() {
  auto as_vector = [](const auto& x) { return std::vector<std::decay_t<decltype(x[0])>>(x.begin(), x.end()); };
  auto same_shape = [](int n) {
    return [n](std::mt19937& rng, uint64_t seed) {
      const Shape s = random_shape(rng);
      Inputs in;
      for (int i = 0; i < n; ++i) in.push_back(int_valued(s, seed + i));
      return in;
    };
  };
  return {
      {"cat0", joinable(3, 0), [=](const Inputs& x) { return cat(as_vector(x), 0); },
       [=](const DInputs& x) { return cat(as_vector(x), 0); }},
      {"cat_last", joinable(2, -1), [=](const Inputs& x) { return cat(as_vector(x), -1); },
       [=](const DInputs& x) { return cat(as_vector(x), -1); }},
      {"cat_many", joinable(11, 0), [=](const Inputs& x) { return cat(as_vector(x), 0); },
       [=](const DInputs& x) { return cat(as_vector(x), 0); }},
      {"cat_skips_empty",
       [](std::mt19937& rng, uint64_t seed) {
         Inputs in = joinable(2, 0)(rng, seed);
         in.insert(in.begin(), Tensor::zeros({0}));
         return in;
       },
       [=](const Inputs& x) { return cat(as_vector(x), 0); },
       [=](const DInputs& x) { return cat(as_vector(x), 0); }},
      {"stack1", same_shape(3), [=](const Inputs& x) { return stack(as_vector(x), 1 % (x[0].dim() + 1)); },
       [=](const DInputs& x) { return stack(as_vector(x), 1 % (x[0].dim() + 1)); }},
      {"stack_many", same_shape(10), [=](const Inputs& x) { return stack(as_vector(x), -1); },
       [=](const DInputs& x) { return stack(as_vector(x), -1); }},
      {"clone", one_input, [](const Inputs& x) { return x[0].clone(); },
       [](const DInputs& x) { return clone(x[0]); }},
      {"contiguous", one_input, [](const Inputs& x) { return x[0].contiguous(); },
       [](const DInputs& x) { return contiguous(x[0]); }},
      unary_case("zeros_like", [](const auto& x) { return zeros_like(x); }),
      unary_case("ones_like", [](const auto& x) { return ones_like(x); }),
      unary_case("full_like", [](const auto& x) { return full_like(x, 2.5); }),
      {"index_select",
       [](std::mt19937& rng, uint64_t seed) {
         Inputs in = one_nonempty(rng, seed);
         const int64_t n = in[0].shape().back();
         in.push_back(Tensor::randint(-n, n, {dim_size_op_info(rng)}, seed + 1));
         return in;
       },
       [](const Inputs& x) { return index_select(x[0], -1, x[1]); },
       [](const DInputs& x) { return index_select(x[0], -1, x[1]); }, 0, {true, false}},
  };
}

class OpInfoTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();

  void run_cases(const std::vector<OpInfoCase>& cases, int iterations) {
    std::mt19937 rng(2026);
    const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
    for (int iter = 0; iter < iterations; ++iter) {
      const OpInfoCase& op = cases[iter % cases.size()];
      const Shape mesh_shape = meshes[rng() % meshes.size()];
      DeviceMesh mesh(world, mesh_shape);
      const int mesh_nd = static_cast<int>(mesh_shape.size());
      const Inputs full = op.inputs(rng, 3 * static_cast<uint64_t>(iter));
      std::vector<Placements> placements;
      std::string what = std::string(op.name) + " on " + mesh.to_string() + ":";
      for (size_t i = 0; i < full.size(); ++i) {
        const int64_t nd = std::max<int64_t>(full[i].dim(), 1);
        Placements pl = dtensor::testing::random_placement_pair(rng, mesh_nd, nd).first;
        for (Placement& p : pl) {
          const bool ok = i < op.partial_ok.size() && op.partial_ok[i];
          if ((p.is_partial() && !ok) || (p.is_shard() && full[i].dim() == 0)) p = Replicate();
        }
        what += " ";
        what += to_string(pl) + " " + ::testing::PrintToString(full[i].shape());
        placements.push_back(pl);
      }
      if (!dtensor::testing::takes_part(mesh)) continue;
      DInputs dist;
      double atol = op.tol;  // and the rounding of linear ops on Partial(sum) pieces
      for (size_t i = 0; i < full.size(); ++i) {
        dist.push_back(make_dtensor(full[i], mesh, placements[i], iter + 7 * i));
        atol = std::max(atol, dtensor::testing::partial_sum_rounding(full[i], mesh, placements[i]));
      }
      const Tensor want = op.plain(full);
      const DTensor got = op.dist(dist);
      what += " -> " + to_string(got.placements());
      for (int rank : got.local().ranks())
        ASSERT_EQ(got.to_local(rank).shape(), got.spec().extent_of_rank(rank)->local_shape)
            << what;
      ASSERT_EQ(got.dtype(), want.dtype()) << what;
      const Tensor result = got.full_tensor();
      ASSERT_EQ(result.shape(), want.shape()) << what;
      if (op.tol == 0) {
        ASSERT_TRUE(equal(result, want)) << what << "\n" << result << "\n" << want;
      } else {
        ASSERT_TRUE(allclose(result, want, op.tol, atol, /*equal_nan=*/true))
            << what << "\n" << result << "\n" << want;
      }
    }
  }
};

}  // namespace

TEST_F(OpInfoTest, Pointwise) {
  const auto cases = pointwise_cases();
  run_cases(cases, dtensor::testing::property_cases(20 * static_cast<int>(cases.size())));
}

TEST_F(OpInfoTest, MatrixProducts) {
  const auto cases = matmul_cases();
  run_cases(cases, dtensor::testing::property_cases(40 * static_cast<int>(cases.size())));
}

TEST_F(OpInfoTest, Reductions) {
  const auto cases = reduction_cases();
  run_cases(cases, dtensor::testing::property_cases(20 * static_cast<int>(cases.size())));
}

TEST_F(OpInfoTest, JoiningCopyingIndexing) {
  const auto cases = tensor_op_cases();
  run_cases(cases, dtensor::testing::property_cases(20 * static_cast<int>(cases.size())));
}
