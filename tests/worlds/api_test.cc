// The DTensor API conveniences on every world (see world_util.h):
// factories allocate exactly each rank's shard with the right value on
// every mesh, to(dtype), comparisons and implicit replication match the
// plain ops, and printing never communicates (under MPI it shows the
// caller's shard).
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

class ApiWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

TEST_F(ApiWorldTest, FactoriesToAndComparisonsOnEveryMesh) {
  std::mt19937 rng(9);
  for (const Shape& mesh_shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, mesh_shape);
    const int mesh_nd = static_cast<int>(mesh_shape.size());
    for (int trial = 0; trial < 4; ++trial) {
      const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
      const int64_t nd = static_cast<int64_t>(shape.size());
      const Placements pl = dtensor::testing::random_placement_pair(rng, mesh_nd, nd).first;
      const std::string what = to_string(shape) + " " + to_string(pl) + " on " + mesh.to_string();
      const DTensor z = zeros(shape, mesh, pl);
      const DTensor f = full(shape, 1.5, mesh, pl, DType::Float64);
      const DTensor e = empty(shape, mesh, pl, DType::Float64);
      for (const DTensor* d : {&z, &f, &e})
        for (int r : d->local().ranks())
          ASSERT_EQ(d->to_local(r).shape(), d->spec().extent_of_rank(r)->local_shape) << what;
      const Tensor x = small_valued(shape, 10 + trial);
      const DTensor dx = make_dtensor(x, mesh, pl, 20 + trial);
      const DTensor cast = dx.to(DType::Float64);
      const DTensor gt0 = dx > 0.0;
      const DTensor same = dx == dx.clone();
      std::ostringstream os;
      os << dx;  // no collective: safe whichever ranks print
      if (!dtensor::testing::takes_part(mesh)) continue;
      EXPECT_TRUE(equal(z.full_tensor(), Tensor::zeros(shape))) << what;
      EXPECT_TRUE(equal(f.full_tensor(), Tensor::full(shape, 1.5, DType::Float64))) << what;
      EXPECT_TRUE(equal(cast.full_tensor(), x.to(DType::Float64))) << what;
      EXPECT_TRUE(equal(gt0.full_tensor(), gt(x, 0.0))) << what;
      EXPECT_TRUE(equal(same.full_tensor(), Tensor::ones(shape, DType::Bool))) << what;
      const bool holds_all =
          static_cast<int64_t>(dx.local().size()) == mesh.size();
      EXPECT_EQ(os.str().rfind(holds_all ? "DTensor(full_tensor=" : "DTensor(local_tensor=", 0),
                0u)
          << os.str();
    }
  }
}

TEST_F(ApiWorldTest, ImplicitReplicationTakesPlainTensorsAsReplicate) {
  DeviceMesh mesh(world, {2, 2});
  const Tensor x = small_valued({5, 3}, 1), y = small_valued({3}, 2);
  const DTensor d = make_dtensor(x, mesh, {Partial(), Shard(0)}, 3);
  DTensor acc = d.clone();
  dtensor::testing::expect_error([&] { (void)(d - y); }, {"sub", "implicit_replication"});
  DTensor diff;
  {
    ImplicitReplication implicit;
    diff = d - y;
    acc += y;  // added once into the Partial(sum), not once per rank
  }
  EXPECT_EQ(acc.placements(), d.placements());
  if (!dtensor::testing::takes_part(mesh)) return;
  EXPECT_TRUE(equal(diff.full_tensor(), x - y));
  EXPECT_TRUE(equal(acc.full_tensor(), x + y));
}

}  // namespace
