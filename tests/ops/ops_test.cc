// Ops on DTensors: the strategies of the issue (which layouts need no
// communication), cache counters, errors, and an op-by-op random test in the
// spirit of PyTorch's OpInfo tests: full_tensor(op(dtensors)) == op(full).
#include <gtest/gtest.h>


#include "dispatch/dispatch.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::error_of;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;

class OpsTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
};

TEST_F(OpsTest, MatmulStrategiesOfTheIssue) {
  DeviceMesh mesh(world, {2, 2});
  Tensor a = int_valued({6, 5}, 1), b = int_valued({5, 4}, 2);
  const Tensor want = mm(a, b);
  {  // (S(0),R)·R -> S(0), no communication
    DTensor da = distribute_tensor(a, mesh, {Shard(0), Replicate()});
    DTensor db = distribute_tensor(b, mesh, {Replicate(), Replicate()});
    CommDebugMode comm;
    DTensor c = mm(da, db);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(c.placements()), "S(0),R");
    EXPECT_TRUE(equal(c.full_tensor(), want));
  }
  {  // R·(R,S(1)) -> (R,S(1)), no communication
    DTensor da = distribute_tensor(a, mesh, {Replicate(), Replicate()});
    DTensor db = distribute_tensor(b, mesh, {Replicate(), Shard(1)});
    CommDebugMode comm;
    DTensor c = mm(da, db);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(c.placements()), "R,S(1)");
    EXPECT_TRUE(equal(c.full_tensor(), want));
  }
  {  // S(1)·S(0) -> P(sum) on a 1-d mesh
    DeviceMesh line(world, {4});
    DTensor da = distribute_tensor(a, line, {Shard(1)});
    DTensor db = distribute_tensor(b, line, {Shard(0)});
    CommDebugMode comm;
    DTensor c = mm(da, db);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(c.placements()), "P(sum)");
    EXPECT_TRUE(equal(c.full_tensor(), want));
  }
}

TEST_F(OpsTest, SumOverAShardedDimIsPartial) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({7, 3}, 3);
  DTensor d = distribute_tensor(x, mesh, {Shard(0)});
  CommDebugMode comm;
  DTensor s = sum(d, {0});
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(s.placements()), "P(sum)");
  EXPECT_TRUE(equal(s.full_tensor(), sum(x, {0})));
  DTensor k = sum(d, {1}, /*keepdim=*/true);
  EXPECT_EQ(to_string(k.placements()), "S(0)");
  EXPECT_TRUE(equal(k.full_tensor(), sum(x, {1}, true)));
}

TEST_F(OpsTest, RepeatedCallsHitThePropagationCache) {
  DeviceMesh mesh(world, {2, 2});
  DTensor a = distribute_tensor(int_valued({8, 8}, 4), mesh, {Shard(0), Replicate()});
  DTensor b = distribute_tensor(int_valued({8, 8}, 5), mesh, {Shard(0), Replicate()});
  clear_sharding_prop_cache();
  DTensor c = a + b;  // warm-up: one miss
  ShardingPropCacheInfo info = sharding_prop_cache_info();
  EXPECT_EQ(info.misses, 1);
  for (int i = 0; i < 10; ++i) c = a + b;
  info = sharding_prop_cache_info();
  EXPECT_EQ(info.misses, 1);
  EXPECT_EQ(info.hits, 10);
  EXPECT_EQ(info.size, 1);
  EXPECT_GT(info.capacity, 1000);
}

TEST_F(OpsTest, PartialsStayPartialOnlyThroughLinearOps) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({5, 3}, 6), y = int_valued({5, 3}, 7);
  DTensor px = make_dtensor(x, mesh, {Partial()}, 8);
  DTensor py = make_dtensor(y, mesh, {Partial()}, 9);
  CommDebugMode comm;
  DTensor s = px + py;
  DTensor m = px * 3.0;
  DTensor n = neg(px);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(s.placements()), "P(sum)");
  EXPECT_EQ(to_string(m.placements()), "P(sum)");
  EXPECT_EQ(to_string(n.placements()), "P(sum)");
  EXPECT_TRUE(equal(s.full_tensor(), x + y));
  EXPECT_TRUE(equal(m.full_tensor(), x * 3.0));
  // Non-linear: reduce first.
  DTensor r = relu(px);
  EXPECT_FALSE(r.spec().has_partial());
  EXPECT_TRUE(equal(r.full_tensor(), relu(x)));
  DTensor a = px + 1.0;
  EXPECT_FALSE(a.spec().has_partial());
  EXPECT_TRUE(equal(a.full_tensor(), x + 1.0));
}

TEST_F(OpsTest, ErrorsNameTheOpAndPlacements) {
  DeviceMesh mesh(world, {4});
  DTensor a = distribute_tensor(Tensor::zeros({4, 3}), mesh, {Shard(0)});
  DTensor b = distribute_tensor(Tensor::zeros({4, 5}), mesh, {Replicate()});
  const std::string plain = error_of([] { Tensor::zeros({4, 3}) + Tensor::zeros({4, 5}); });
  const std::string e = error_of([&] { a + b; });
  EXPECT_NE(e.find(plain), std::string::npos) << e << " vs " << plain;
  EXPECT_NE(e.find("S(0) and R"), std::string::npos) << e;
  const std::string m = error_of([&] { mm(a, a); });
  EXPECT_NE(m.find("mm: inner dimensions differ"), std::string::npos) << m;
  DeviceMesh other(world, {2, 2});
  DTensor c = distribute_tensor(Tensor::zeros({4, 3}), other, {Shard(0), Replicate()});
  EXPECT_NE(error_of([&] { a + c; }).find("add: inputs live on different meshes"),
            std::string::npos);
}

TEST_F(OpsTest, MaxAndMinPartialsPassThroughMonotoneOps) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({5, 3}, 10), y = int_valued({5, 3}, 11);
  DTensor pmax = make_dtensor(x, mesh, {Partial(ReduceOp::Max)}, 12);
  DTensor ry = distribute_tensor(y, mesh, {Replicate()});
  CommDebugMode comm;
  DTensor a = relu(pmax + ry);
  DTensor b = -pmax;
  DTensor c = maximum(pmax, ry);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(a.placements()), "P(max)");
  EXPECT_EQ(to_string(b.placements()), "P(min)");
  EXPECT_EQ(to_string(c.placements()), "P(max)");
  EXPECT_TRUE(equal(a.full_tensor(), relu(x + y)));
  EXPECT_TRUE(equal(b.full_tensor(), -x));
  EXPECT_TRUE(equal(c.full_tensor(), maximum(x, y)));
  // A sum of two P(max) is not a P(max): one of them is reduced first.
  CommDebugMode reduce;
  DTensor d = pmax + pmax;
  EXPECT_EQ(reduce.count(CollectiveKind::AllReduce), 1);
  EXPECT_TRUE(equal(d.full_tensor(), x + x));
}

TEST_F(OpsTest, PlainTensorsMixOnlyWhenTheyHoldOneElement) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({6, 2}, 13);
  DTensor d = distribute_tensor(x, mesh, {Shard(0)});
  DTensor s = d * Tensor::scalar(3.0);
  EXPECT_EQ(to_string(s.placements()), "S(0)");
  EXPECT_TRUE(equal(s.full_tensor(), x * 3.0));
  EXPECT_TRUE(equal((Tensor::from_vector(std::vector<float>{2.0f}) - d).full_tensor(), 2.0 - x));
  const std::string e = error_of([&] { d + Tensor::ones({6, 2}); });
  EXPECT_NE(e.find("add: cannot mix a DTensor (placements S(0)"), std::string::npos) << e;
  EXPECT_NE(e.find("plain Tensor of shape [6, 2]"), std::string::npos) << e;
}

// Column- and row-parallel linear layers need no communication; a replicated
// bias on a partial product is added once (on coordinate 0 of the mesh dim).
TEST_F(OpsTest, ParallelLinearLayersNeedNoCommunication) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({5, 6}, 20), w1 = int_valued({8, 6}, 21), b1 = int_valued({8}, 22);
  Tensor w2 = int_valued({3, 8}, 23), b2 = int_valued({3}, 24);
  DTensor dx = distribute_tensor(x, mesh, {Replicate()});
  DTensor dw1 = distribute_tensor(w1, mesh, {Shard(0)});
  DTensor db1 = distribute_tensor(b1, mesh, {Shard(0)});
  DTensor dw2 = distribute_tensor(w2, mesh, {Shard(1)});
  DTensor db2 = distribute_tensor(b2, mesh, {Replicate()});
  CommDebugMode comm;
  DTensor h = relu(linear(dx, dw1, db1));
  DTensor y = linear(h, dw2, db2);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(h.placements()), "S(1)");
  EXPECT_EQ(to_string(y.placements()), "P(sum)");
  EXPECT_TRUE(equal(y.full_tensor(), linear(relu(linear(x, w1, b1)), w2, b2)));
  // addmm with the contraction sharded and a replicated bias: P(sum), no communication.
  DTensor a = distribute_tensor(int_valued({4, 6}, 25), mesh, {Shard(1)});
  DTensor b = distribute_tensor(int_valued({6, 3}, 26), mesh, {Shard(0)});
  DTensor bias = distribute_tensor(int_valued({3}, 27), mesh, {Replicate()});
  CommDebugMode comm2;
  DTensor c = addmm(bias, a, b, 2, 3);
  EXPECT_EQ(comm2.total_count(), 0);
  EXPECT_EQ(to_string(c.placements()), "P(sum)");
  EXPECT_TRUE(equal(c.full_tensor(), addmm(bias.full_tensor(), a.full_tensor(), b.full_tensor(), 2, 3)));
}

TEST_F(OpsTest, ReductionsOverAShardedDimArePartial) {
  DeviceMesh mesh(world, {4});
  Tensor even = int_valued({8, 3}, 30), uneven = int_valued({7, 3}, 31);
  DTensor de = distribute_tensor(even, mesh, {Shard(0)});
  DTensor du = distribute_tensor(uneven, mesh, {Shard(0)});
  CommDebugMode comm;
  DTensor me = mean(de, {0}), mu = mean(du, {0}), mx = amax(du, {0}), mn = amin(du, {0, 1});
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(me.placements()), "P(avg)");
  // Uneven shards would weigh wrongly in an average: local sums / global count.
  EXPECT_EQ(to_string(mu.placements()), "P(sum)");
  EXPECT_EQ(to_string(mx.placements()), "P(max)");
  EXPECT_EQ(to_string(mn.placements()), "P(min)");
  EXPECT_TRUE(allclose(me.full_tensor(), mean(even, {0})));
  EXPECT_TRUE(allclose(mu.full_tensor(), mean(uneven, {0})));
  EXPECT_TRUE(equal(mx.full_tensor(), amax(uneven, {0})));
  EXPECT_TRUE(equal(mn.full_tensor(), amin(uneven, {0, 1})));
  // var and argmax gather the reduced dim; kept dims stay sharded.
  DTensor v = var(de, {1});
  EXPECT_EQ(to_string(v.placements()), "S(0)");
  EXPECT_TRUE(allclose(v.full_tensor(), var(even, {1})));
  DTensor am = argmax(de, 0);
  EXPECT_EQ(to_string(am.placements()), "R");
  EXPECT_TRUE(equal(am.full_tensor(), argmax(even, 0)));
}

TEST_F(OpsTest, OpsWithoutARuleComputeOnReplicateAndSaySoOnce) {
  DeviceMesh mesh(world, {4});
  Tensor x = int_valued({6, 5}, 32);
  DTensor d = distribute_tensor(x, mesh, {Shard(1)});
  clear_debug_notes();
  clear_sharding_prop_cache();
  DTensor a = argmax(d);
  DTensor b = argmax(d);
  EXPECT_EQ(to_string(a.placements()), "R");
  EXPECT_TRUE(equal(a.full_tensor(), argmax(x)));
  const std::vector<std::string> notes = debug_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("argmax: no sharding rule for placements S(1)"), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find("computed on Replicate"), std::string::npos) << notes[0];
}

TEST_F(OpsTest, JoiningKeepsShardsAndPartialsThatLineUp) {
  DeviceMesh mesh(world, {2, 2});
  Tensor x = int_valued({5, 3}, 40), y = int_valued({5, 4}, 41);
  DTensor dx = make_dtensor(x, mesh, {Shard(0), Partial()}, 42);
  DTensor dy = make_dtensor(y, mesh, {Shard(0), Partial()}, 43);
  CommDebugMode comm;
  DTensor c = cat({dx, dy}, 1);
  DTensor z = zeros_like(dx);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(c.placements()), "S(0),P(sum)");
  EXPECT_EQ(to_string(z.placements()), "S(0),R");
  EXPECT_TRUE(equal(c.full_tensor(), cat({x, y}, 1)));
  EXPECT_TRUE(equal(z.full_tensor(), zeros_like(x)));
  // A sharded index shards the result along the indexed dim.
  DTensor table = distribute_tensor(y, mesh, {Replicate(), Replicate()});
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{3, 0, 2, 2, 1});
  DTensor di = distribute_tensor(idx, mesh, {Replicate(), Shard(0)});
  CommDebugMode comm2;
  DTensor picked = index_select(table, 1, di);
  EXPECT_EQ(comm2.total_count(), 0);
  EXPECT_EQ(to_string(picked.placements()), "R,S(1)");
  EXPECT_TRUE(equal(picked.full_tensor(), index_select(y, 1, idx)));
}

// The tensor-parallel MLP of bench/dispatch_bench.cc on a (dp=2, tp=4) mesh:
// one all_reduce over tp, nothing else.
TEST_F(OpsTest, TensorParallelMlpNeedsOneAllReduce) {
  DeviceMesh mesh(world, {2, 4}, {"dp", "tp"});
  Tensor x = int_valued({6, 8}, 50), w1 = int_valued({12, 8}, 51), b1 = int_valued({12}, 52);
  Tensor w2 = int_valued({8, 12}, 53), b2 = int_valued({8}, 54);
  DTensor dx = distribute_tensor(x, mesh, {Shard(0), Replicate()});
  DTensor dw1 = distribute_tensor(w1, mesh, {Replicate(), Shard(0)});
  DTensor db1 = distribute_tensor(b1, mesh, {Replicate(), Shard(0)});
  DTensor dw2 = distribute_tensor(w2, mesh, {Replicate(), Shard(1)});
  DTensor db2 = distribute_tensor(b2, mesh, {Replicate(), Replicate()});
  CommDebugMode comm;
  DTensor y = linear(relu(linear(dx, dw1, db1)), dw2, db2).redistribute({Shard(0), Replicate()});
  EXPECT_EQ(comm.total_count(), 1);
  EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 1);
  EXPECT_TRUE(equal(y.full_tensor(), linear(relu(linear(x, w1, b1)), w2, b2)));
}

// VerifyMode catches a wrong sharding rule: an op whose kernel depends on
// the rank (a bug no layout can make right) disagrees with itself on
// replicated inputs.
namespace {

dtensor::TensorMeta same_meta(const dtensor::dispatch::OpSchema& s) { return s.input(0).meta(); }

void shard_or_replicate(const dtensor::dispatch::OpSchema&, const dtensor::TensorMeta&,
                        std::vector<dtensor::dispatch::DimStrategy>& c) {
  c.push_back({{dtensor::Shard(0)}, dtensor::Shard(0)});
  c.push_back({{dtensor::Replicate()}, dtensor::Replicate()});
}

}  // namespace

TEST(VerifyModeOps, CatchesARuleThatGivesAWrongAnswer) {
  using namespace dtensor;
  World world = World::simulated(4);
  DeviceMesh mesh(world, {4});
  static const dispatch::OpRule kWrong{"wrong_op", same_meta, shard_or_replicate};
  DTensor x = distribute_tensor(Tensor::zeros({8, 2}), mesh, {Shard(0)});
  auto wrong_op = [&](const DTensor& in) {
    dispatch::OpSchema schema(dispatch::OpId::Clone, {&in.spec()}, {/*not clone's key*/ 4242});
    return dispatch::run_unary(schema, kWrong, in,
                               [](int rank, const Tensor& t) { return t + double(rank); });
  };
  EXPECT_NO_THROW(wrong_op(x));
  VerifyMode verify;
  const std::string e = dtensor::testing::error_of([&] { wrong_op(x); });
  EXPECT_NE(e.find("verify: wrong_op on inputs S(0) -> S(0): the result differs from the same op "
                   "on replicated inputs (largest |difference| 3"),
            std::string::npos)
      << e;
}
