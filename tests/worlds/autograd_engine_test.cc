// The autograd engine on every world (see world_util.h): gradients reach
// the leaves, accumulate, are freed, and bad use is an error.
#include <gtest/gtest.h>

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
