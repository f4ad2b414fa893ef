// The same in both worlds: a rank's shard is its own memory. Changing one
// rank's replica in place changes only that rank's, and the tensor given to
// distribute_tensor can be changed afterwards without touching the DTensor
// (under MPI too, where a Replicate shard used to be the caller's tensor).
#include <gtest/gtest.h>

#include "dtensor/dtensor.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::takes_part;

TEST(WorldsIsolation, ReplicasChangeAlone) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  DTensor bias = distribute_tensor(Tensor::full({3}, 1.0), mesh, {Replicate(), Replicate()});
  for (int r : bias.local().ranks()) bias.to_local(r).sub_(0.1);
  for (int r : bias.local().ranks())
    EXPECT_NEAR(bias.to_local(r).to_vector<float>()[0], 0.9, 1e-6) << "rank " << r;
  EXPECT_NEAR(bias.full_tensor().to_vector<float>()[2], 0.9, 1e-6);
}

TEST(WorldsIsolation, DistributeTensorCopiesItsSource) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  for (const char* text : {"R,R", "R,P(max)", "S(0),R"}) {
    Tensor src = Tensor::arange(8).to(DType::Float32).reshape({4, 2});
    const Tensor want = src.clone();
    DTensor d = distribute_tensor(src, mesh, parse_placements(text));
    src.fill_(7);
    EXPECT_TRUE(equal(d.full_tensor(), want)) << text;
  }
}
