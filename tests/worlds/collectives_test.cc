// The collectives and redistribution on every world: each rank's result is
// computed from what the rank knows (its coordinate and the formula the
// inputs were made with), so the same test checks the simulated backend and
// MPI. Shards are uneven (rank r holds r + 1 rows) to exercise the
// variable-count calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "comm/backend.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;
using dtensor::testing::takes_part;

namespace {

class WorldsTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Rank r's input: (r + 1) rows of 3 columns, row i = 10 r + i.
Tensor rows_of(int r) {
  return (Tensor::arange(r + 1, DType::Float32).unsqueeze(1) + 10.0 * r).expand({r + 1, 3})
      .contiguous();
}

LocalTensor held(const DeviceMesh& mesh, const std::function<Tensor(int)>& make) {
  LocalTensor out;
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) out.set(r, make(r));
  return out;
}

}  // namespace

TEST_F(WorldsTest, AllGatherAndAllToAllOfUnevenShards) {
  DeviceMesh mesh(world, {4});
  if (!takes_part(mesh)) return;
  Backend& backend = world.backend();
  const LocalTensor in = held(mesh, rows_of);
  const Tensor all = cat({rows_of(0), rows_of(1), rows_of(2), rows_of(3)}, 0);
  const LocalTensor gathered = backend.all_gather(in, mesh, 0, 0);
  gathered.for_each([&](int, const Tensor& t) { EXPECT_TRUE(equal(t, all)); });
  // Along dim 1 of the transposes: the same data, gathered into columns.
  LocalTensor in_t = in.map([](int, const Tensor& t) { return t.t().contiguous(); });
  backend.all_gather(in_t, mesh, 0, 1).for_each([&](int, const Tensor& t) {
    EXPECT_TRUE(equal(t, all.t()));
  });
  // all_to_all: split the 3 columns 4 ways (1,1,1,0), concatenate the rows.
  backend.all_to_all(in, mesh, 0, 1, 0).for_each([&](int r, const Tensor& t) {
    EXPECT_TRUE(equal(t, all.chunk(4, 1)[r])) << "rank " << r;
  });
}

TEST_F(WorldsTest, ReductionsBroadcastAndScatter) {
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  Backend& backend = world.backend();
  const LocalTensor in = held(mesh, [](int r) { return Tensor::full({5, 2}, r + 1); });
  for (int md = 0; md < 2; ++md) {
    const LocalTensor sum = backend.all_reduce(in, mesh, md, ReduceOp::Sum);
    const LocalTensor max = backend.all_reduce(in, mesh, md, ReduceOp::Max);
    const LocalTensor avg = backend.all_reduce(in, mesh, md, ReduceOp::Avg);
    const LocalTensor rs = backend.reduce_scatter(in, mesh, md, ReduceOp::Sum, 0);
    const LocalTensor bc = backend.broadcast(in, mesh, md, 1);
    const LocalTensor sc = backend.scatter(in, mesh, md, 0, 0);
    for (int r : in.ranks()) {
      const std::vector<int> group = mesh.group(r, md);
      double total = 0, top = 0;
      for (int g : group) total += g + 1, top = std::max<double>(top, g + 1);
      const int64_t i = mesh.group_index(r, md);
      EXPECT_TRUE(equal(sum.shard(r), Tensor::full({5, 2}, total)));
      EXPECT_TRUE(equal(max.shard(r), Tensor::full({5, 2}, top)));
      EXPECT_TRUE(equal(avg.shard(r), Tensor::full({5, 2}, total / 2)));
      // 5 rows in 2 chunks: 3 and 2.
      EXPECT_TRUE(equal(rs.shard(r), Tensor::full({i == 0 ? 3 : 2, 2}, total)));
      EXPECT_TRUE(equal(bc.shard(r), Tensor::full({5, 2}, group[1] + 1)));
      EXPECT_TRUE(equal(sc.shard(r), Tensor::full({i == 0 ? 3 : 2, 2}, group[0] + 1)));
    }
  }
}

// Random redistributions (Partials of every kind, uneven and empty shards)
// on random meshes of 1-4 dims that fit the world (up to 64 ranks simulated):
// the result is the same tensor, every shard has its spec's shape, and the
// collectives counted are the plan's. DTENSOR_PROPERTY_CASES=1000000 runs a
// million cases.
TEST_F(WorldsTest, RandomRedistributionsKeepTheTensor) {
  std::mt19937 rng(99);
  const int iterations = dtensor::testing::property_cases(200);
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_mesh(rng, world.size()));
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    const auto [from, to] = dtensor::testing::random_placement_pair(
        rng, mesh.ndim(), static_cast<int64_t>(shape.size()));
    if (!takes_part(mesh)) continue;
    const Tensor x = int_valued(shape, iter);
    const DTensor d = make_dtensor(x, mesh, from, iter);
    const std::string what = mesh.to_string() + " " + to_string(from) + " -> " + to_string(to) +
                             " shape " + ::testing::PrintToString(shape);
    for (bool merge : {true, false}) {
      RedistributeOptions options;
      options.merge = merge;
      const auto plan = plan_redistribute(d.spec(), d.spec().with_placements(to), options);
      CommDebugMode comm;
      const DTensor r = d.redistribute(to, options);
      int64_t steps = 0;
      for (const RedistributeStep& s : plan->steps) steps += s.kind != StepKind::Local;
      ASSERT_EQ(comm.total_count(), steps) << what << "\n" << plan->explain();
      for (int rank : r.local().ranks())
        ASSERT_EQ(r.to_local(rank).shape(), r.spec().extent_of_rank(rank)->local_shape) << what;
      ASSERT_TRUE(equal(r.full_tensor(), x)) << what << "\n" << plan->explain();
    }
  }
}

// Rows cut into runs of hundreds of bytes per rank: the collectives copy
// them with ByteCopier's loop (runs of 256 B to 16 KiB), and the last
// rank's run is shorter than the others' (1030 columns over 8 ranks: 129,
// ..., 127). The random-layout test above draws shapes too small for that.
TEST_F(WorldsTest, RedistributionsWithLongRunsKeepTheTensor) {
  // At most 8 ranks, so the runs stay long (1030 float32 columns over 64
  // ranks would be 68-byte runs).
  const int n = std::min(world.size(), 8);
  std::vector<Shape> meshes = {{n}};
  if (n >= 4) meshes.push_back({2, n / 2});
  for (const Shape& mesh_shape : meshes) {
    DeviceMesh mesh(world, mesh_shape);
    if (!takes_part(mesh)) continue;
    for (DType dtype : {DType::Float32, DType::Float64}) {
      for (const Shape& shape : {Shape{24, 1030}, Shape{3, 5, 2051}}) {
        const Tensor x = int_valued(shape, 5).to(dtype);
        const int64_t last = static_cast<int64_t>(shape.size()) - 1;
        std::vector<std::pair<Placements, Placements>> pairs = {
            {{Shard(0)}, {Shard(last)}}, {{Shard(last)}, {Shard(0)}},
            {{Shard(last)}, {Replicate()}}};
        if (mesh.ndim() == 2) {
          pairs = {{{Shard(0), Shard(last)}, {Shard(last), Shard(0)}},
                   {{Shard(last), Replicate()}, {Replicate(), Shard(last)}},
                   {{Shard(0), Shard(last)}, {Replicate(), Replicate()}}};
        }
        for (const auto& [from, to] : pairs) {
          const DTensor d = make_dtensor(x, mesh, from, 3);
          const DTensor r = d.redistribute(to);
          EXPECT_TRUE(equal(r.full_tensor(), x))
              << mesh.to_string() << " " << to_string(from) << " -> " << to_string(to) << " "
              << dtype << " " << ::testing::PrintToString(shape);
        }
        // distribute_tensor from one rank scatters that rank's rows.
        const Placements scattered = mesh.ndim() == 1 ? Placements{Shard(last)}
                                                      : Placements{Shard(last), Shard(0)};
        const DTensor s = distribute_tensor(x, mesh, scattered, /*src_rank=*/0);
        EXPECT_TRUE(equal(s.full_tensor(), x)) << mesh.to_string() << " scatter " << dtype;
      }
    }
  }
}

// distribute_tensor from one rank's tensor: every rank ends with that
// rank's data, whatever it passed itself.
TEST_F(WorldsTest, DistributeFromASourceRank) {
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  const Tensor mine = Tensor::arange(0, 15, 1, DType::Float32).view({5, 3}) + world.rank();
  const Tensor from_rank_3 =
      Tensor::arange(0, 15, 1, DType::Float32).view({5, 3}) + (world.is_simulated() ? 0 : 3);
  for (const char* text : {"S(0),R", "R,S(0)", "S(1),S(0)", "S(0),S(0)", "P,S(1)", "R,R"}) {
    const DTensor d = distribute_tensor(mine, mesh, parse_placements(text), /*src_rank=*/3);
    EXPECT_TRUE(equal(d.full_tensor(), from_rank_3)) << text;
  }
}

// CommDebugMode times the collectives of its thread: some time for a
// gather, none for local work, and collectives inside another call (a
// backend's own, or one a caller times) counted once, by the outermost.
TEST_F(WorldsTest, CollectiveTimeIsCountedOncePerCall) {
  DeviceMesh mesh(world, {4});
  if (!takes_part(mesh)) return;
  const LocalTensor in = held(mesh, rows_of);
  {
    CommDebugMode mode;
    const Tensor local = Tensor::randn({64, 64}, 1);
    (void)mm(local, local);
    EXPECT_EQ(mode.collective_seconds(), 0);
    for (int i = 0; i < 20; ++i) world.backend().all_gather(in, mesh, 0, 0);
    EXPECT_GT(mode.collective_seconds(), 0);
  }
  CommDebugMode outer;
  {
    const CollectiveTimer around;  // an enclosing call times the gathers, once, when it ends
    for (int i = 0; i < 20; ++i) world.backend().all_gather(in, mesh, 0, 0);
    EXPECT_EQ(outer.collective_seconds(), 0);
  }
  EXPECT_GT(outer.collective_seconds(), 0);
}
