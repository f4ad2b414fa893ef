// The autograd engine on every world (see world_util.h): gradients reach
// the leaves, accumulate, are freed, and bad use is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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

class AutogradEngineTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

Placements replicate(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

}  // namespace

TEST_F(AutogradEngineTest, SquareOnRandomLayouts) {
  std::mt19937 rng(7);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < 3; ++k) {
      const Shape shape = dtensor::testing::random_small_shape(rng);
      const Placements pl = dtensor::testing::random_input_placements(
          rng, mesh.ndim(), static_cast<int64_t>(shape.size()));
      if (!dtensor::testing::takes_part(mesh)) continue;
      const Tensor full = Tensor::randn(shape, 11 + k, 0, DType::Float64);
      DTensor x = make_dtensor(full, mesh, pl, 3);
      x.requires_grad_();
      auto f = [](const std::vector<DTensor>& in) { return mul(in[0], in[0]); };
      EXPECT_EQ(check_gradients(f, {x}, 5), "") << ms << " " << to_string(pl) << " " << shape;
      EXPECT_EQ(check_matches_replicated(f, {x}, 5, 1e-12, 1e-12), "");
    }
  }
}

// Every element in the simulated world of a Release build; under MPI and
// the sanitizers the first, the last and two others, the same for a seed.
TEST_F(AutogradEngineTest, FiniteDifferencesCoverEveryElementOrASample) {
  const std::vector<size_t> got = dtensor::testing::finite_difference_elements(50, 9, world);
  EXPECT_EQ(got, dtensor::testing::finite_difference_elements(50, 9, world));
  EXPECT_EQ(dtensor::testing::finite_difference_elements(3, 9, world).size(), 3u);
#if defined(__SANITIZE_ADDRESS__)
  const bool sampled = true;
#else
  const bool sampled = world.held_ranks().size() < static_cast<size_t>(world.size());
#endif
  if (!sampled) {
    EXPECT_EQ(got.size(), 50u);
    return;
  }
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got.front(), 0u);
  EXPECT_EQ(got.back(), 49u);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end());
}

// ---- the engine ----------------------------------------------------------------------

namespace {

// A replicated float64 leaf of the given values on `mesh`.
DTensor leaf_autograd_engine(const DeviceMesh& mesh, const std::vector<double>& values, const Shape& shape) {
  DTensor x = distribute_tensor(Tensor::from_vector(values, shape), mesh, replicate(mesh));
  x.requires_grad_();
  return x;
}

std::vector<double> values_of(const DTensor& d) {
  return d.full_tensor().contiguous().to_vector<double>();
}

}  // namespace

TEST_F(AutogradEngineTest, GradientsAccumulateAcrossBackwardCallsUntilCleared) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = leaf_autograd_engine(mesh, {1, 2, 3}, {3});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().has_value());
  sum(mul(x, x)).backward();
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{2, 4, 6}));
  sum(mul(x, x)).backward();  // a new graph: adds into grad()
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{4, 8, 12}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().has_value());
  // A leaf used twice gets the sum of both uses.
  sum(add(mul(x, x), x)).backward();
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{3, 5, 7}));
}

TEST_F(AutogradEngineTest, CopiesShareTheGradientAndDetachLeavesTheGraph) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = leaf_autograd_engine(mesh, {1, -2}, {2});
  DTensor alias = x;
  const DTensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  // d is a constant: only the x factor is differentiated.
  sum(mul(alias, d)).backward();
  ASSERT_TRUE(x.grad().has_value());
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{1, -2}));
  EXPECT_FALSE(d.grad().has_value());
}

TEST_F(AutogradEngineTest, NoGradGuardRecordsNothing) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = leaf_autograd_engine(mesh, {1, 2}, {2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(is_grad_enabled());
    const DTensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    {
      GradModeGuard on(true);
      EXPECT_TRUE(mul(x, x).requires_grad());
    }
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  const DTensor y = mul(x, x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_STREQ(y.grad_fn_name(), "mul");
}

TEST_F(AutogradEngineTest, RetainGraphAllowsASecondBackwardAndRetainGradKeepsAnInnerGradient) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = leaf_autograd_engine(mesh, {1, 2, 3, 4}, {2, 2});
  const DTensor y = mul(x, x);
  y.retain_grad();
  const DTensor loss = sum(mul(y, y));
  loss.backward(std::nullopt, /*retain_graph=*/true);
  EXPECT_EQ(values_of(*y.grad()), (std::vector<double>{2, 8, 18, 32}));   // 2y
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{4, 32, 108, 256}));  // 4x^3
  loss.backward();  // the graph was kept: gradients add up
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{8, 64, 216, 512}));
  dtensor::testing::expect_error([&] { loss.backward(); },
                                 {"backward: the graph through", "freed", "retain_graph = true"});
}

TEST_F(AutogradEngineTest, SeveralOutputsAndExplicitGradients) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = leaf_autograd_engine(mesh, {1, 2}, {2});
  const DTensor y = mul(x, x);
  const DTensor g = distribute_tensor(Tensor::from_vector(std::vector<double>{10, 100}), mesh,
                                      replicate(mesh));
  y.backward(g);  // vector-Jacobian product: 2x * g
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{20, 400}));
  x.zero_grad();
  backward({sum(x), sum(mul(x, x))});  // 1 + 2x
  EXPECT_EQ(values_of(*x.grad()), (std::vector<double>{3, 5}));
}

TEST_F(AutogradEngineTest, BadUseIsAnErrorNamingWhatWasWrong) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = leaf_autograd_engine(mesh, {1, 2, 3}, {3});
  const DTensor y = mul(x, x);
  // A non-scalar without a gradient.
  dtensor::testing::expect_error([&] { y.backward(); },
                                 {"a gradient can be implied only for a one-element output",
                                  "[3]", "backward(gradient)"});
  // A gradient of the wrong shape.
  const DTensor bad = distribute_tensor(Tensor::zeros({2}, DType::Float64), mesh, replicate(mesh));
  dtensor::testing::expect_error([&] { y.backward(bad); },
                                 {"gradient", "must have the output's shape", "[3]"});
  // Nothing requires grad.
  const DTensor c = x.detach();
  dtensor::testing::expect_error([&] { sum(mul(c, c)).backward(); },
                                 {"does not require grad", "requires_grad_()"});
  // Only floating leaves, and only leaves, may require grad.
  DTensor ids = distribute_tensor(Tensor::arange(3), mesh, replicate(mesh));
  dtensor::testing::expect_error([&] { ids.requires_grad_(); },
                                 {"only floating-point tensors can require gradients", "int64"});
  DTensor inner = y;
  dtensor::testing::expect_error([&] { inner.requires_grad_(false); },
                                 {"only leaves", "mul", "detach()"});
  // A saved tensor changed in place after it was saved.
  const DTensor z = sum(mul(x, x));
  x.local().for_each([](int, const Tensor& t) { Tensor(t).add_(1.0); });
  dtensor::testing::expect_error([&] { z.backward(); },
                                 {"mul", "saved for backward", "changed in place", "clone()"});
}
