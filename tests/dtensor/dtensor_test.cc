// DTensor tests: distribute/full_tensor round trips, every elementary
// transform alone (uneven shapes), forbidden transforms, from_local checks,
// and random-layout property tests of redistribute against the original.
#include <gtest/gtest.h>

#include "test_util.h"

#include <cmath>
#include <random>

#include "dtensor/dtensor.h"
#include "layout_util.h"

using namespace dtensor;
using dtensor::testing::error_of;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;

class DTensorTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
  World big_world = World::simulated(64);  // for random meshes of 1-4 dims
};

TEST_F(DTensorTest, DistributeAndFullTensorRoundTrip) {
  DeviceMesh mesh(world, {4, 2}, {"dp", "tp"});
  Tensor x = Tensor::randn({18, 5}, 1);
  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(0)});
  EXPECT_EQ(d.to_local(7).shape(), (Shape{1, 5}));
  EXPECT_EQ(d.to_local(0).shape(), (Shape{3, 5}));
  EXPECT_TRUE(equal(d.to_local(1), x.narrow(0, 3, 2)));
  EXPECT_TRUE(equal(d.full_tensor(), x));
  EXPECT_THROW(d.to_local(), Error);  // 8 shards held here
}

// From one rank, the data spreads a mesh dim at a time: a scatter over each
// Shard dim, then a broadcast of the pieces over the others.
TEST_F(DTensorTest, DistributeFromSourceRankScattersThenBroadcasts) {
  DeviceMesh mesh(world, {2, 4});
  Tensor x = Tensor::randn({6, 4}, 2);
  CommDebugMode comm;
  DTensor d = distribute_tensor(x, mesh, {Replicate(), Shard(1)}, /*src_rank=*/5);
  EXPECT_EQ(comm.count(CollectiveKind::Scatter), 1);
  EXPECT_EQ(comm.count(CollectiveKind::Broadcast), 1);
  // Each rank is sent a [6, 1] piece, not the [6, 4] whole.
  EXPECT_EQ(comm.bytes(CollectiveKind::Broadcast), 6 * 1 * 4);
  EXPECT_TRUE(equal(d.full_tensor(), x));
  for (const char* text : {"S(0),S(0)", "S(1),P", "P,S(0)", "R,R", "S(0),S(1)"}) {
    Tensor y = Tensor::randn({7, 5}, 3);  // uneven on both dims
    DTensor e = distribute_tensor(y, mesh, parse_placements(text), /*src_rank=*/6);
    DTensor plain = distribute_tensor(y, mesh, parse_placements(text));
    for (int r = 0; r < 8; ++r)
      EXPECT_TRUE(equal(e.to_local(r), plain.to_local(r))) << text << " rank " << r;
  }
  EXPECT_THROW(distribute_tensor(x, DeviceMesh(world, {2}), {Shard(0)}, 5), Error);
}

// Each elementary transform alone, on an uneven shape (7 rows over 3 or 4).
TEST_F(DTensorTest, EachElementaryTransformAlone) {
  struct Case {
    const char* from;
    const char* to;
    CollectiveKind kind;
    int count;
  };
  const Case cases[] = {
      {"S(0)", "R", CollectiveKind::AllGather, 1},
      {"S(0)", "S(1)", CollectiveKind::AllToAll, 1},
      {"S(1)", "S(0)", CollectiveKind::AllToAll, 1},
      {"P(sum)", "R", CollectiveKind::AllReduce, 1},
      {"P(avg)", "R", CollectiveKind::AllReduce, 1},
      {"P(max)", "R", CollectiveKind::AllReduce, 1},
      {"P(min)", "R", CollectiveKind::AllReduce, 1},
      {"P(sum)", "S(0)", CollectiveKind::ReduceScatter, 1},
      {"P(sum)", "S(1)", CollectiveKind::ReduceScatter, 1},
      {"R", "S(0)", CollectiveKind::AllGather, 0},
      {"R", "S(1)", CollectiveKind::AllGather, 0},
  };
  for (int64_t n : {3, 4}) {
    DeviceMesh mesh(world, {n});
    for (const Case& c : cases) {
      Tensor x = int_valued({7, 5}, 3);
      DTensor d = make_dtensor(x, mesh, parse_placements(c.from), 11);
      CommDebugMode comm;
      DTensor r = d.redistribute(parse_placements(c.to));
      EXPECT_EQ(comm.count(c.kind), c.count) << c.from << " -> " << c.to;
      EXPECT_EQ(comm.total_count(), c.count) << c.from << " -> " << c.to;
      EXPECT_EQ(to_string(r.placements()), c.to);
      // Each shard is exactly the piece the spec says.
      for (int rank = 0; rank < n; ++rank) {
        ShardExtent e = *r.spec().extent_of_rank(rank);
        EXPECT_EQ(r.to_local(rank).shape(), e.local_shape) << c.from << " -> " << c.to;
      }
      EXPECT_TRUE(equal(r.full_tensor(), x)) << c.from << " -> " << c.to << " on " << n;
    }
  }
}

TEST_F(DTensorTest, ReplicateToPartialViaDistribute) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({5, 3}, 4);
  // Coordinate 0 keeps x, the others hold zeros: the sum is x's bits in any dtype.
  DTensor p = distribute_tensor(x, mesh, {Partial()});
  EXPECT_TRUE(equal(p.to_local(0), x));
  EXPECT_TRUE(equal(p.to_local(2), zeros_like(x)));
  EXPECT_TRUE(equal(p.full_tensor(), x));
  Tensor xi = Tensor::randint(0, 9, {5}, 5);
  DTensor pi = distribute_tensor(xi, mesh, {Partial()});
  EXPECT_TRUE(equal(pi.to_local(0), xi));
  EXPECT_TRUE(equal(pi.to_local(3), zeros_like(xi)));
  EXPECT_TRUE(equal(pi.full_tensor(), xi));
  DTensor pm = distribute_tensor(x, mesh, {Partial(ReduceOp::Max)});
  EXPECT_TRUE(equal(pm.full_tensor(), x));
}

TEST_F(DTensorTest, ForbiddenTransformsNameMeshDimAndPlacements) {
  DeviceMesh mesh(world, {2, 2});
  DTensor d = distribute_tensor(Tensor::randn({4, 4}, 1), mesh, {Shard(0), Replicate()});
  std::string e = error_of([&] { d.redistribute({Shard(0), Partial()}); });
  EXPECT_NE(e.find("from R to P(sum) on mesh dim 1"), std::string::npos) << e;
  e = error_of([&] { d.redistribute({Partial(), Replicate()}); });
  EXPECT_NE(e.find("from S(0) to P(sum) on mesh dim 0"), std::string::npos) << e;
  DTensor p = make_dtensor(Tensor::randn({4, 4}, 1), mesh, {Partial(), Shard(0)}, 3);
  e = error_of([&] { p.redistribute({Partial(ReduceOp::Max), Shard(0)}); });
  EXPECT_NE(e.find("from P(sum) to P(max) on mesh dim 0"), std::string::npos) << e;
  // Keeping an existing Partial while moving a shard is fine.
  EXPECT_NO_THROW(p.redistribute({Partial(), Shard(1)}));
  e = error_of([&] { d.redistribute({Shard(0)}); });
  EXPECT_NE(e.find("expected 2 placements for a 2-d mesh, got 1"), std::string::npos) << e;
  e = error_of([&] { d.redistribute(DeviceMesh(world, {2, 2}), {Replicate(), Replicate()}); });
  EXPECT_NE(e.find("between meshes"), std::string::npos) << e;
}

TEST_F(DTensorTest, FromLocalChecksShapes) {
  DeviceMesh mesh(world, {4});
  Tensor x = Tensor::randn({7, 2}, 9);
  std::vector<Tensor> pieces = x.chunk(4, 0);
  // Uneven: needs the global shape.
  DTensor d = from_local([&](int r) { return pieces[r].clone(); }, mesh, {Shard(0)},
                         {.shape = Shape{7, 2}});
  EXPECT_TRUE(equal(d.full_tensor(), x));
  std::string e = error_of([&] {
    from_local([&](int r) { return pieces[r].clone(); }, mesh, {Shard(0)});
  });
  EXPECT_NE(e.find("pass the global shape"), std::string::npos) << e;
  // Even shards infer the global shape.
  DTensor even = from_local([](int r) { return Tensor::full({2, 3}, r); }, mesh, {Shard(1)});
  EXPECT_EQ(even.shape(), (Shape{2, 12}));
  e = error_of([&] {
    from_local([](int r) { return Tensor::zeros({2, r == 2 ? 4 : 3}); }, mesh, {Shard(1)});
  });
  EXPECT_NE(e.find("rank 2"), std::string::npos) << e;
  LocalTensor missing;
  missing.set(0, Tensor::zeros({2}));
  EXPECT_NE(error_of([&] { from_local(missing, mesh, {Shard(0)}); }).find("no shard given for rank 1"),
            std::string::npos);
}

TEST_F(DTensorTest, NestedShardsOfOneDimRedistribute) {
  DeviceMesh mesh(world, {2, 2, 2});
  Tensor x = int_valued({13, 6}, 6);
  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(0), Shard(1)});
  for (const char* to : {"R,S(0),S(1)", "S(0),R,R", "S(1),S(0),S(0)", "R,R,R", "S(0),S(1),S(0)"}) {
    DTensor r = d.redistribute(parse_placements(to));
    EXPECT_TRUE(equal(r.full_tensor(), x)) << to;
    for (int rank = 0; rank < 8; ++rank)
      EXPECT_EQ(r.to_local(rank).shape(), r.spec().extent_of_rank(rank)->local_shape) << to;
  }
}

// Property: random mesh (1-3 dims, sizes 1-4, at most 8 ranks), random shape
// (rank 1-4, sizes 0-9), random placements: distribute then full_tensor is
// exact; random source (with Partials built from known pieces) and target:
// redistribute then full_tensor equals the original, and every shard has the
// spec's shape.
TEST_F(DTensorTest, RandomLayoutsRoundTripAndRedistribute) {
  std::mt19937 rng(20261122);
  // DTENSOR_PROPERTY_CASES=100000 runs a long soak; the default keeps ctest quick.
  const int iterations = dtensor::testing::property_cases(400);
  int cases = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, big_world.size());
    DeviceMesh mesh(big_world, mesh_shape);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    Tensor x = int_valued(shape, iter);
    // Source: partials of one kind, or sum mixed with avg; targets may keep them.
    const auto [from, to] = dtensor::testing::random_placement_pair(
        rng, mesh.ndim(), static_cast<int64_t>(shape.size()));
    DTensor d = make_dtensor(x, mesh, from, iter);
    ASSERT_TRUE(equal(d.full_tensor(), x)) << mesh_shape << " " << shape << " " << to_string(from);
    Placements plain = from;
    for (Placement& p : plain)
      if (p.is_partial()) p = Replicate();
    ASSERT_TRUE(equal(distribute_tensor(x, mesh, plain).full_tensor(), x));
    DTensor r = d.redistribute(to);
    for (int rank = 0; rank < mesh.size(); ++rank)
      ASSERT_EQ(r.to_local(rank).shape(), r.spec().extent_of_rank(rank)->local_shape)
          << mesh_shape << " " << shape << " " << to_string(from) << " -> " << to_string(to);
    ASSERT_TRUE(equal(r.full_tensor(), x))
        << mesh_shape << " " << shape << " " << to_string(from) << " -> " << to_string(to);
    ++cases;
  }
  EXPECT_EQ(cases, iterations);  // every draw is a case: no skipped iteration
}

// VerifyMode checks ops and redistributions against the same computation on
// replicated data; its own collectives are not counted.
TEST_F(DTensorTest, VerifyModeChecksOpsAndRedistributions) {
  DeviceMesh mesh(world, {4, 2}, {"dp", "tp"});
  Tensor x = Tensor::randn({9, 6}, 11);  // uneven over dp
  Tensor w = Tensor::randn({5, 6}, 12);
  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
  DTensor dw = distribute_tensor(w, mesh, {Replicate(), Shard(1)});
  CommDebugMode plain;
  DTensor unchecked = sum(relu(linear(d, dw)), {1}).redistribute({Replicate(), Replicate()});
  const int64_t collectives = plain.total_count();
  VerifyMode verify;
  EXPECT_TRUE(verify_enabled());
  CommDebugMode comm;
  DTensor checked = sum(relu(linear(d, dw)), {1}).redistribute({Replicate(), Replicate()});
  EXPECT_GE(verify.checks(), 4);  // linear, relu, sum, redistribute (+ input moves)
  EXPECT_EQ(comm.total_count(), collectives);
  EXPECT_TRUE(equal(checked.full_tensor(), unchecked.full_tensor()));
}

// Replicas that disagree (a bug a user can make with from_local) are caught
// by the first op or redistribution that exposes them.
TEST_F(DTensorTest, VerifyModeCatchesDivergedReplicas) {
  DeviceMesh mesh(world, {8});
  LocalTensor diverged;
  for (int r = 0; r < 8; ++r) diverged.set(r, Tensor::full({8, 2}, r == 3 ? 1.5 : 1.0));
  DTensor bad = from_local(diverged, mesh, {Replicate()});
  DTensor good = distribute_tensor(Tensor::ones({8, 2}), mesh, {Shard(0)});
  // Without the mode the wrong answer goes unnoticed.
  EXPECT_NO_THROW(bad.redistribute({Shard(0)}));
  VerifyMode verify;
  const std::string moved = dtensor::testing::error_of([&] { bad.redistribute({Shard(0)}); });
  EXPECT_NE(moved.find("verify: redistribute R -> S(0)"), std::string::npos) << moved;
  EXPECT_NE(moved.find("largest |difference| 0.5"), std::string::npos) << moved;
  EXPECT_NE(moved.find("differs from the tensor before the move"), std::string::npos) << moved;
  // An op that has to move them is caught at the move.
  const std::string added = dtensor::testing::error_of([&] { good + bad; });
  EXPECT_NE(added.find("verify: redistribute R -> S(0)"), std::string::npos) << added;
}

// full_tensor in a simulated world builds the one tensor from the shards
// (dtensor.cc, assemble_held). It must give the bits the redistribution to
// all-Replicate gives the lowest rank - on random meshes of 1-4 dims up to
// 64 ranks, uneven and empty shards, shard orders, sub-mesh views, and
// every Partial kind (which takes the redistribution) - and, where it is
// built so (some Shard, no Partial), a tensor of its own.
TEST_F(DTensorTest, FullTensorIsTheLowestRanksAllGatherBitForBit) {
  std::mt19937 rng(2026);
  for (int it = 0; it < 300; ++it) {
    const Shape ms = dtensor::testing::random_mesh(rng, 64);
    const DeviceMesh root(big_world, ms);
    // Sometimes a view: the DTensor lives on a sub-mesh of the root's dims.
    DeviceMesh mesh = root;
    if (ms.size() > 1 && rng() % 4 == 0) {
      std::vector<int> dims;
      for (int d = 0; d < static_cast<int>(ms.size()); ++d)
        if (rng() % 2 == 0) dims.push_back(d);
      if (!dims.empty() && dims.size() < ms.size()) {
        std::vector<std::string> names;
        for (int d : dims) names.push_back("d" + std::to_string(d));
        std::vector<std::string> all;
        for (size_t d = 0; d < ms.size(); ++d) all.push_back("d" + std::to_string(d));
        mesh = DeviceMesh(big_world, ms, all)[names];
      }
    }
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
    Placements pl;
    for (int d = 0; d < mesh.ndim(); ++d) {
      Placement p = dtensor::testing::random_placement(rng, static_cast<int64_t>(shape.size()),
                                                       rng() % 3 == 0);
      pl.push_back(p);
    }
    for (Placement& p : pl)  // one Partial kind per tensor
      for (const Placement& q : pl)
        if (p.is_partial() && q.is_partial()) p = q;
    // A reversed split order of a dim that several mesh dims shard.
    if (rng() % 3 == 0) {
      for (size_t t = 0; t < shape.size(); ++t) {
        std::vector<size_t> on;
        for (size_t d = 0; d < pl.size(); ++d)
          if (pl[d].is_shard(static_cast<int64_t>(t))) on.push_back(d);
        for (size_t k = 0; k < on.size() && on.size() > 1; ++k)
          pl[on[k]] = Shard(static_cast<int64_t>(t), static_cast<int64_t>(on.size() - 1 - k));
      }
    }
    const Tensor x = Tensor::randn(shape, 100 + it);
    const DTensor d = dtensor::testing::make_dtensor(x, mesh, pl, 7 + it);
    const std::string where = "mesh " + to_string(ms) + " view " + mesh.to_string() + " " +
                              to_string(pl) + " of " + to_string(shape);
    const Tensor got = d.full_tensor();
    const DTensor all_r = d.redistribute(Placements(pl.size(), Replicate()));
    const Tensor want = all_r.to_local(mesh.ranks().front());
    ASSERT_EQ(got.shape(), shape) << where;
    EXPECT_TRUE(equal(got, want)) << where;
    // Built here (sharded, no Partial): a tensor of its own.
    bool sharded = false, partial = false;
    for (const Placement& p : pl) {
      sharded = sharded || p.is_shard();
      partial = partial || p.is_partial();
    }
    if (sharded && !partial && d.local().size() > 1 && got.numel() > 0)
      d.local().for_each([&](int, const Tensor& t) {
        EXPECT_NE(t.storage(), got.storage()) << where;
      });
  }
}

// The shortcut is not taken while someone watches: CommDebugMode sees the
// all_gather that full_tensor runs under MPI, in the simulated world too.
TEST_F(DTensorTest, FullTensorUnderCommDebugModeRunsTheAllGather) {
  DeviceMesh mesh(world, {4, 2});
  const DTensor d = distribute_tensor(Tensor::randn({9, 4}, 3), mesh, {Shard(0), Replicate()});
  CommDebugMode comm;
  const Tensor full = d.full_tensor();
  EXPECT_EQ(comm.count(CollectiveKind::AllGather), 1);
  EXPECT_TRUE(equal(full, Tensor::randn({9, 4}, 3)));
}
