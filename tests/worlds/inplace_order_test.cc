// In-place ops on a DTensor whose tensor dim is split by several mesh dims
// in another than the natural order (fully_shard inside tp's Shard(0) gives
// S(0)[1],S(0)[0]): self keeps its layout and storage, a scalar applies in
// place, and an operand laid out otherwise is moved to self's layout first;
// full_tensor() equals the plain op. On every mesh of 2-4 dims that
// test_meshes gives the world (up to 64 ranks), with uneven shards.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "dtensor/dtensor.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

class InplaceOrderWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Shard(0) on every mesh dim, split in reverse mesh-dim order.
Placements reversed_order_of(int64_t ndim) {
  Placements p;
  for (int64_t k = 0; k < ndim; ++k) p.push_back(Shard(0, ndim - 1 - k));
  return p;
}

TEST_F(InplaceOrderWorldTest, ScalarsAndOperandsKeepSelfsOrder) {
  int meshes = 0;
  for (const Shape& ms : dtensor::testing::test_meshes(world)) {
    if (ms.size() < 2) continue;
    const DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;  // under MPI: a mesh of other ranks
    ++meshes;
    const Placements ordered = reversed_order_of(static_cast<int64_t>(ms.size()));
    const Placements natural(ms.size(), Shard(0));
    const Shape shape{static_cast<int64_t>(mesh.size()) + 3, 5};  // uneven shards
    const Tensor a = Tensor::randn(shape, 21), b = Tensor::randn(shape, 22);
    const std::string where = "mesh " + to_string(ms);
    NoGradGuard no_grad;
    DTensor p = distribute_tensor(a, mesh, ordered);
    p.mul_(0.5);
    DTensor q = distribute_tensor(b, mesh, natural);
    p.add_(q);  // q's pieces differ from p's: it is laid out as p first
    DTensor same = distribute_tensor(b, mesh, ordered);
    p.sub_(same);
    EXPECT_EQ(p.placements(), ordered) << where;
    EXPECT_TRUE(allclose(p.full_tensor(), a * 0.5 + b - b, 1e-6, 1e-6)) << where;
    DTensor c = distribute_tensor(a, mesh, ordered);
    c.copy_(distribute_tensor(b, mesh, natural));
    EXPECT_EQ(c.placements(), ordered) << where;
    EXPECT_TRUE(equal(c.full_tensor(), b)) << where;
  }
  EXPECT_GT(meshes, 0) << "no mesh of 2+ dims fits a world of " << world.size();
}

}  // namespace
