// Simulated ranks behave as separate processes: no two ranks' shards share
// memory, nor does a DTensor share memory with the tensor distribute_tensor
// was given (from_local may alias the tensor given for that same rank, as
// under MPI). Checked pairwise after every redistribution and op family.
// Also: CommDebugMode counts only its own thread, from_local's unchecked
// shards are caught where data is used, a mesh with a dim named like the
// planner's default group name plans fine, and the process-wide caches do
// not keep dropped worlds alive.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "comm/backend.h"
#include "dtensor/dtensor.h"
#include "dtensor/parallel.h"
#include "layout_util.h"
#include "mesh/mesh_cache.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

// No two held ranks' shards share a Storage.
::testing::AssertionResult unshared(const LocalTensor& local) {
  std::set<const Storage*> seen;
  for (const auto& [rank, t] : local.shards()) {
    if (!t.defined()) continue;
    if (!seen.insert(t.storage().get()).second) {
      std::string ranks;
      for (const auto& [r, u] : local.shards())
        if (u.storage() == t.storage()) ranks += std::to_string(r) + " ";
      return ::testing::AssertionFailure() << "ranks " << ranks << "share one storage";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult unshared(const DTensor& d) {
  auto r = unshared(d.local());
  if (!r) r << " in " << d.spec();
  return r;
}

class IsolationTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
};

}  // namespace

// The reproducer: subtracting from each rank's replica of a bias must change
// that rank's copy once, as under MPI (it gave 0.6 instead of 0.9 when all
// replicas were one tensor).
TEST_F(IsolationTest, InPlaceChangeOnOneRankStaysThere) {
  DeviceMesh mesh(world, {2, 2});
  const Tensor bias = Tensor::full({3}, 1.0);
  DTensor d = distribute_tensor(bias, mesh, {Replicate(), Replicate()});
  for (int r = 0; r < 4; ++r) d.to_local(r).sub_(0.1);
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(d.to_local(r).to_vector<float>()[0], 0.9, 1e-6) << "rank " << r;
  EXPECT_NEAR(bias.to_vector<float>()[0], 1.0, 1e-6);  // the source is untouched
  // The same through a parallel layer's replicated bias.
  RowParallelLinear row(mesh, 1, Tensor::ones({3, 4}), Tensor::full({3}, 1.0));
  for (int r = 0; r < 4; ++r) row.bias()->to_local(r).sub_(0.1);
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(row.bias()->to_local(r).to_vector<float>()[0], 0.9, 1e-6) << "rank " << r;
}

// Changing the source after distribute_tensor leaves the DTensor alone, for
// every layout that keeps whole replicas (and the ones that do not).
TEST_F(IsolationTest, DistributeTensorCopiesTheSource) {
  DeviceMesh mesh(world, {2, 2});
  for (const char* text : {"R,R", "R,P(max)", "P(avg),R", "S(0),R", "R,P", "S(0),S(1)"}) {
    Tensor src = Tensor::arange(8).to(DType::Float32).reshape({4, 2});
    const Tensor want = src.clone();
    DTensor d = distribute_tensor(src, mesh, parse_placements(text));
    src.fill_(7);
    EXPECT_TRUE(equal(d.full_tensor(), want)) << text;
    EXPECT_TRUE(unshared(d)) << text;
    for (int r = 0; r < 4; ++r)
      EXPECT_NE(d.to_local(r).storage(), src.storage()) << text << " rank " << r;
  }
  // A non-contiguous source, and from a source rank.
  Tensor src = Tensor::arange(8).to(DType::Float32).reshape({2, 4}).transpose(0, 1);
  const Tensor want = src.clone();
  DTensor d = distribute_tensor(src, mesh, {Replicate(), Replicate()});
  DTensor e = distribute_tensor(src, mesh, {Replicate(), Replicate()}, /*src_rank=*/3);
  src.fill_(7);
  EXPECT_TRUE(equal(d.full_tensor(), want));
  EXPECT_TRUE(equal(e.full_tensor(), want));
  EXPECT_TRUE(unshared(d));
  EXPECT_TRUE(unshared(e));
}

// from_local keeps the tensor given for a rank (PyTorch does not copy it),
// but one tensor given for several ranks is theirs separately.
TEST_F(IsolationTest, FromLocalAliasesOnlyTheRanksOwnTensor) {
  DeviceMesh mesh(world, {4});
  const Tensor shared = Tensor::ones({2, 3});
  DTensor d = from_local([&](int) { return shared; }, mesh, {Replicate()});
  EXPECT_EQ(d.to_local(0).storage(), shared.storage());  // rank 0's own tensor
  EXPECT_TRUE(unshared(d));
  for (int r = 0; r < 4; ++r) d.to_local(r).mul_(static_cast<double>(r + 1));
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(d.to_local(r).to_vector<float>()[0], static_cast<float>(r + 1)) << "rank " << r;
  // Distinct tensors per rank are each kept as given.
  std::vector<Tensor> mine;
  for (int r = 0; r < 4; ++r) mine.push_back(Tensor::full({1, 3}, r));
  DTensor s = from_local([&](int r) { return mine[r]; }, mesh, {Shard(0)});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(s.to_local(r).storage(), mine[r].storage());
}

// Every pair of layouts over a 2x2 and a 2x4 mesh, uneven shapes included:
// the result's shards are separate.
TEST_F(IsolationTest, EveryRedistributionGivesSeparateShards) {
  const char* layouts[] = {"R",      "S(0)", "S(1)", "P(sum)", "P(max)", "P(avg)"};
  for (const Shape& mesh_shape : {Shape{2, 2}, Shape{2, 4}}) {
    DeviceMesh mesh(world, mesh_shape);
    for (const Shape& shape : {Shape{4, 8}, Shape{3, 5}}) {
      const Tensor full = int_valued(shape, 5);
      for (const char* a : layouts) {
        for (const char* b : layouts) {
          const Placements from = parse_placements(std::string(a) + "," + b);
          if (from[0].is_partial() && from[1].is_partial() && !(from[0] == from[1])) continue;
          DTensor d = make_dtensor(full, mesh, from, 3);
          ASSERT_TRUE(unshared(d)) << to_string(from);
          for (const char* c : layouts) {
            for (const char* e : layouts) {
              const Placements to = parse_placements(std::string(c) + "," + e);
              bool allowed = true;
              for (size_t i = 0; i < 2; ++i)
                allowed = allowed && (!to[i].is_partial() || to[i] == from[i]);
              if (!allowed) continue;
              DTensor out = d.redistribute(to);
              EXPECT_TRUE(unshared(out)) << to_string(from) << " -> " << to_string(to);
            }
          }
          EXPECT_TRUE(unshared(d.redistribute(from))) << "no-op " << to_string(from);
        }
      }
    }
  }
}

// Each op family on replicated and sharded inputs.
TEST_F(IsolationTest, EveryOpFamilyGivesSeparateShards) {
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  const Tensor a = small_valued({4, 6}, 1), b = small_valued({6, 4}, 2);
  for (const char* text : {"R,R", "S(0),R", "R,S(1)", "S(0),S(1)"}) {
    const Placements pl = parse_placements(text);
    DTensor x = distribute_tensor(a, mesh, pl);
    DTensor y = distribute_tensor(b, mesh, {Replicate(), Replicate()});
    const std::vector<std::pair<const char*, DTensor>> results = {
        {"add", x + x},
        {"mul scalar", x * 2.0},
        {"neg", -x},
        {"relu", relu(x)},
        {"where", where(gt(x, 0.0), x, 1.0)},
        {"mm", mm(x, y)},
        {"sum", sum(x)},
        {"sum dim", sum(x, {1})},
        {"mean", mean(x, {0})},
        {"reshape", reshape(x, {24})},
        {"transpose", transpose(x, 0, 1)},
        {"softmax", softmax(x, 1)},
        {"layer_norm", layer_norm(x, {6})},
        {"dropout", dropout(x, 0.0, 1)},
        {"rand", rand({4, 6}, mesh, pl, 1)},
    };
    for (const auto& [name, d] : results) EXPECT_TRUE(unshared(d)) << name << " on " << text;
  }
  const Tensor table = small_valued({10, 4}, 3);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 9, 0, 4});
  for (const char* text : {"R,R", "R,S(0)", "R,S(1)"}) {
    DTensor w = distribute_tensor(table, mesh, parse_placements(text));
    DTensor i = distribute_tensor(ids, mesh, {Replicate(), Replicate()});
    EXPECT_TRUE(unshared(embedding(w, i))) << text;
  }
  ColumnParallelLinear col(mesh, 1, small_valued({4, 6}, 4), small_valued({4}, 5));
  RowParallelLinear row(mesh, 1, small_valued({6, 4}, 6), small_valued({6}, 7), Replicate());
  DTensor in = distribute_tensor(small_valued({2, 6}, 8), mesh, {Shard(0), Replicate()});
  EXPECT_TRUE(unshared(*row.bias()));
  EXPECT_TRUE(unshared(col.weight()));
  EXPECT_TRUE(unshared(row(col(in))));
}

// The simulated backend's collectives: no two members' outputs share
// memory, and none shares the input of another rank.
TEST_F(IsolationTest, CollectivesGiveSeparateOutputs) {
  DeviceMesh mesh(world, {2, 4});
  Backend& backend = world.backend();
  LocalTensor in;
  for (int r = 0; r < 8; ++r) in.set(r, Tensor::full({4, 4}, r));
  for (int md : {0, 1}) {
    EXPECT_TRUE(unshared(backend.all_gather(in, mesh, md, 0))) << md;
    EXPECT_TRUE(unshared(backend.all_reduce(in, mesh, md, ReduceOp::Sum))) << md;
    EXPECT_TRUE(unshared(backend.reduce_scatter(in, mesh, md, ReduceOp::Sum, 0))) << md;
    EXPECT_TRUE(unshared(backend.all_to_all(in, mesh, md, 0, 1))) << md;
    EXPECT_TRUE(unshared(backend.broadcast(in, mesh, md, 1))) << md;
    EXPECT_TRUE(unshared(backend.scatter(in, mesh, md, 1, 0))) << md;
  }
  // LocalTensor::unshare itself: the lowest rank keeps a shared tensor.
  const Tensor t = Tensor::ones({2});
  LocalTensor same;
  for (int r : {5, 2, 7}) same.set(r, t);
  EXPECT_EQ(same.unshare(), 2);
  EXPECT_EQ(same.shard(2).storage(), t.storage());
  EXPECT_TRUE(unshared(same));
  EXPECT_EQ(same.unshare(), 0);
  EXPECT_EQ(same.unshare(t.storage().get()), 1);  // a forbidden storage goes too
}

// A mesh dim named like the planner's default group name ("a_b" for dims a
// and b): merging over a and b still plans and runs.
TEST_F(IsolationTest, PlannerGroupNameDoesNotCollideWithADim) {
  DeviceMesh mesh(world, {2, 2, 2}, {"a", "b", "a_b"});
  const Tensor full = int_valued({4, 4}, 9);
  DTensor d = make_dtensor(full, mesh, parse_placements("P,P,R"), 1);
  CommDebugMode comm;
  DTensor r = d.redistribute(parse_placements("R,R,R"));
  EXPECT_TRUE(equal(r.full_tensor(), full));
  EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 1);  // merged over a and b
  EXPECT_TRUE(mesh.find_flattened(0b011).has_value());
  EXPECT_EQ(*mesh.find_flattened(0b011), "a_b_1");
}

// from_local(run_check = false) trusts its shards; full_tensor and
// redistribute check their shapes before using them.
TEST_F(IsolationTest, UncheckedShardsAreCaughtWhereUsed) {
  DeviceMesh mesh(world, {4});
  FromLocalOptions unchecked;
  unchecked.run_check = false;
  unchecked.shape = Shape{8, 2};
  DTensor d = from_local([](int r) { return Tensor::ones({r == 2 ? 5 : 2, 2}); }, mesh,
                         {Shard(0)}, unchecked);
  expect_error([&] { d.full_tensor(); },
               {"full_tensor", "rank 2", "[5, 2]", "[2, 2]", "run_check"});
  expect_error([&] { d.redistribute({Replicate()}); }, {"redistribute", "rank 2", "[5, 2]"});
  expect_error([&] { softmax(d, 0); }, {"rank 2", "[5, 2]"});  // an op moving its input
  // A replicated one whose ranks disagree.
  DTensor r = from_local([](int rank) { return Tensor::ones({rank == 3 ? 3 : 2}); }, mesh,
                         {Replicate()}, FromLocalOptions{Shape{2}, std::nullopt, false});
  expect_error([&] { r.full_tensor(); }, {"rank 3", "[3]", "[2]"});
  // Consistent unchecked shards work.
  DTensor ok = from_local([](int) { return Tensor::ones({2, 2}); }, mesh, {Shard(0)}, unchecked);
  EXPECT_EQ(ok.full_tensor().shape(), (Shape{8, 2}));
}

// stride: the contiguous strides are accepted, anything else is refused.
TEST_F(IsolationTest, FromLocalStride) {
  DeviceMesh mesh(world, {4});
  auto make = [](int) { return Tensor::ones({2, 3}); };
  FromLocalOptions contiguous;
  contiguous.stride = Shape{3, 1};
  EXPECT_EQ(from_local(make, mesh, {Shard(0)}, contiguous).shape(), (Shape{8, 3}));
  FromLocalOptions transposed;
  transposed.stride = Shape{1, 8};
  expect_error([&] { from_local(make, mesh, {Shard(0)}, transposed); },
               {"from_local", "stride [1, 8]", "not supported", "[3, 1]", "[8, 3]"});
  FromLocalOptions wrong_rank;
  wrong_rank.stride = Shape{1};
  expect_error([&] { from_local(make, mesh, {Shard(0)}, wrong_rank); }, {"stride [1]"});
}

// Two threads, each with its own world and CommDebugMode, run the same
// program at once: each mode counts exactly its own thread's collectives.
TEST(CommDebugModeThreads, EachThreadCountsItsOwn) {
  auto program = [](int64_t* counts) {
    World w = World::simulated(4);
    DeviceMesh mesh(w, {4});
    CommDebugMode comm;
    for (int i = 0; i < 50; ++i) {
      DTensor d = distribute_tensor(Tensor::ones({8, 2}), mesh, {Shard(0)});
      d.full_tensor();                   // one all_gather
      sum(d).redistribute({Replicate()});  // one all_reduce
    }
    counts[0] = comm.count(CollectiveKind::AllGather);
    counts[1] = comm.count(CollectiveKind::AllReduce);
    counts[2] = comm.total_count();
  };
  int64_t alone[3], first[3], second[3];
  program(alone);
  EXPECT_EQ(alone[0], 50);
  EXPECT_EQ(alone[1], 50);
  std::thread t1(program, first), t2(program, second);
  t1.join();
  t2.join();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(first[k], alone[k]) << k;
    EXPECT_EQ(second[k], alone[k]) << k;
  }
}

// Worlds made, used (ops and redistributions fill both caches) and dropped:
// neither the caches nor the number of live meshes grows with their number.
TEST(CacheLifetime, DroppedWorldsLeaveTheCaches) {
  auto use_a_world = [] {
    World w = World::simulated(8);
    DeviceMesh mesh(w, {2, 4}, {"dp", "tp"});
    DTensor x = distribute_tensor(Tensor::ones({8, 8}), mesh, {Shard(0), Shard(1)});
    DTensor y = relu(x) + x;
    sum(y, {1}).redistribute({Replicate(), Replicate()});
    y.redistribute({Replicate(), Shard(0)}).full_tensor();
  };
  use_a_world();  // the caches' own first entries
  const int64_t roots = MeshCacheAccess::live_roots();
  const int64_t plans = redistribute_plan_cache_info().size;
  const int64_t props = sharding_prop_cache_info().size;
  for (int i = 0; i < 200; ++i) use_a_world();
  EXPECT_EQ(MeshCacheAccess::live_roots(), roots);
  EXPECT_EQ(redistribute_plan_cache_info().size, plans);
  EXPECT_EQ(sharding_prop_cache_info().size, props);
  // A live mesh keeps its entries (they are hits, not re-planned).
  World w = World::simulated(8);
  DeviceMesh mesh(w, {2, 4});
  DTensor x = distribute_tensor(Tensor::ones({8, 8}), mesh, {Shard(0), Shard(1)});
  x.redistribute({Replicate(), Replicate()});
  const int64_t hits = redistribute_plan_cache_info().hits;
  x.redistribute({Replicate(), Replicate()});
  EXPECT_EQ(redistribute_plan_cache_info().hits, hits + 1);
  EXPECT_GT(redistribute_plan_cache_info().size, plans);
  // A mesh kept only by a DTensor (its World and DeviceMesh handles dropped)
  // is still alive and usable.
  DTensor kept = [] {
    World w2 = World::simulated(4);
    return distribute_tensor(Tensor::ones({4}), DeviceMesh(w2, {4}), {Shard(0)});
  }();
  EXPECT_TRUE(equal(kept.full_tensor(), Tensor::ones({4})));
  EXPECT_TRUE(equal(kept.redistribute({Replicate()}).to_local(3), Tensor::ones({4})));
}
