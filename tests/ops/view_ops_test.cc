// View ops on DTensors: which layouts pass through without communication
// (splits and merges whose chunks line up, transposes, cuts of other dims,
// Partials), which must gather (uneven chunks, cut or broadcast dims), the
// errors. The op-by-op random test is tests/worlds/view_random_test.cc.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::error_of;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;

namespace {

class ViewOpsTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
};

// Every rank holds the shard its spec gives it.
void expect_local_shapes(const DTensor& d) {
  for (int rank : d.mesh().ranks())
    EXPECT_EQ(d.to_local(rank).shape(), d.spec().extent_of_rank(rank)->local_shape)
        << "rank " << rank << " of " << d.spec();
}

// view(x, from -> to) with x placed `pl` on `mesh`: the result equals the
// plain reshape, keeps the local shapes of its spec, and has placements `want`
// with no communication when `free`; otherwise it needs communication (the
// chooser may gather or move the shard to another dim, whichever costs less)
// and must not keep the input's placements, whose chunks do not line up.
void check_view(const DeviceMesh& mesh, const Shape& from, const Shape& to, const Placements& pl,
                const std::string& want, bool free) {
  SCOPED_TRACE(to_string(from) + " -> " + to_string(to) + " " + to_string(pl) + " on " +
               mesh.to_string());
  const Tensor x = int_valued(from, 11);
  const DTensor d = distribute_tensor(x, mesh, pl);
  CommDebugMode comm;
  const DTensor v = view(d, to);
  if (free) {
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(v.placements()), want);
  } else {
    EXPECT_GT(comm.total_count(), 0);
    EXPECT_NE(v.placements(), pl);
  }
  EXPECT_EQ(v.shape(), to);
  expect_local_shapes(v);
  EXPECT_TRUE(equal(v.full_tensor(), x.reshape(to)));
}

TEST_F(ViewOpsTest, SplitsAndMergesKeepAShardWhoseChunksLineUp) {
  DeviceMesh line4(world, {4}), line2(world, {2}), square(world, {2, 2});
  check_view(line4, {8, 6}, {48}, {Shard(0)}, "S(0)", true);
  check_view(line4, {8, 6}, {4, 2, 6}, {Shard(0)}, "S(0)", true);
  check_view(line2, {8, 6}, {2, 4, 6}, {Shard(0)}, "S(0)", true);
  check_view(line4, {6, 8}, {6, 4, 2}, {Shard(1)}, "S(1)", true);
  check_view(line2, {6, 8}, {6, 2, 4}, {Shard(1)}, "S(1)", true);
  check_view(line4, {48}, {8, 6}, {Shard(0)}, "S(0)", true);
  check_view(line4, {2, 8, 3}, {2, 24}, {Shard(1)}, "S(1)", true);
  // Size-1 dims in the way: the shard follows the outermost dim of size > 1.
  check_view(line4, {1, 8, 6}, {48, 1}, {Shard(1)}, "S(0)", true);
  check_view(line4, {8, 6}, {1, 8, 1, 6}, {Shard(0)}, "S(1)", true);
  // Nested sharding of one dim over both mesh dims lines up when even.
  check_view(square, {8, 6}, {48}, {Shard(0), Shard(0)}, "S(0),S(0)", true);
  check_view(square, {8, 6}, {4, 2, 6}, {Shard(0), Shard(1)}, "S(0),S(2)", true);
  // Unrelated dims keep their shards.
  check_view(square, {4, 6, 5}, {4, 30}, {Shard(0), Replicate()}, "S(0),R", true);
}

TEST_F(ViewOpsTest, ChunksThatDoNotLineUpAreGatheredFirst) {
  DeviceMesh line4(world, {4}), line2(world, {2}), grid(world, {4, 2});
  // Rows 2,2,1,0 are 8,8,4,0 elements, not the 5,5,5,5 of S(0) on [20].
  check_view(line4, {5, 4}, {20}, {Shard(0)}, "", false);
  // Two rows of the output cannot be shared by four ranks holding 2 input rows each.
  check_view(line4, {8, 6}, {2, 4, 6}, {Shard(0)}, "", false);
  // An inner dim of a group: its elements are not contiguous in the result.
  check_view(line2, {4, 6}, {24}, {Shard(1)}, "", false);
  // 18 rows nested over 4x2 chunk as (3,2),(3,2),(3,2),(2,1); 36 as (5,4),...
  check_view(grid, {18, 2}, {36}, {Shard(0), Shard(0)}, "", false);
}

TEST_F(ViewOpsTest, ViewNeverFailsOnShardStrides) {
  DeviceMesh line2(world, {2});
  const Tensor x = int_valued({4, 6}, 3);
  const DTensor d = distribute_tensor(x, line2, {Shard(1)});
  const DTensor tr = transpose(d, 0, 1);  // S(0) of [6, 4], non-contiguous shards
  EXPECT_EQ(to_string(tr.placements()), "S(0)");
  EXPECT_NE(error_of([&] { x.t().view({24}); }), "<no error>");
  CommDebugMode comm;
  const DTensor v = view(tr, {24});
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(v.placements()), "S(0)");
  EXPECT_TRUE(equal(v.full_tensor(), x.t().reshape({24})));
}

TEST_F(ViewOpsTest, PermutesRenumberShards) {
  DeviceMesh mesh(world, {2, 2});
  const Tensor x = int_valued({4, 6, 3}, 4);
  const DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(2)});
  CommDebugMode comm;
  const DTensor a = transpose(d, 0, 1);
  const DTensor b = permute(d, {2, 0, 1});
  const DTensor c = t(distribute_tensor(int_valued({5, 7}, 5), mesh, {Shard(0), Replicate()}));
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(a.placements()), "S(1),S(2)");
  EXPECT_EQ(to_string(b.placements()), "S(1),S(0)");
  EXPECT_EQ(to_string(c.placements()), "S(1),R");
  EXPECT_TRUE(equal(a.full_tensor(), x.transpose(0, 1)));
  EXPECT_TRUE(equal(b.full_tensor(), x.permute({2, 0, 1})));
  EXPECT_TRUE(equal(c.full_tensor(), int_valued({5, 7}, 5).t()));
}

TEST_F(ViewOpsTest, PartialsPassThroughEveryView) {
  DeviceMesh mesh(world, {2, 2});
  const Tensor x = int_valued({4, 6}, 6);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    const DTensor d = make_dtensor(x, mesh, {Partial(op), Shard(0)}, 7);
    const std::string p = to_string(Partial(op));
    CommDebugMode comm;
    const DTensor v = view(d, {2, 2, 6});
    const DTensor tr = transpose(d, 0, 1);
    const DTensor e = expand(unsqueeze(d, 0), {3, 4, 6});
    const DTensor n = narrow(d, 1, 1, 3);
    const DTensor s = select(d, 1, 2);
    EXPECT_EQ(comm.total_count(), 0) << p;
    EXPECT_EQ(to_string(v.placements()), p + ",S(0)");
    EXPECT_EQ(to_string(tr.placements()), p + ",S(1)");
    EXPECT_EQ(to_string(e.placements()), p + ",S(1)");
    EXPECT_EQ(to_string(n.placements()), p + ",S(0)");
    EXPECT_EQ(to_string(s.placements()), p + ",S(0)");
    EXPECT_TRUE(equal(v.full_tensor(), x.view({2, 2, 6}))) << p;
    EXPECT_TRUE(equal(tr.full_tensor(), x.t())) << p;
    EXPECT_TRUE(equal(e.full_tensor(), x.expand({3, 4, 6}))) << p;
    EXPECT_TRUE(equal(n.full_tensor(), x.narrow(1, 1, 3))) << p;
    EXPECT_TRUE(equal(s.full_tensor(), x.select(1, 2))) << p;
  }
}

TEST_F(ViewOpsTest, CutsKeepOtherDimsAndGatherTheCutDim) {
  DeviceMesh line4(world, {4});
  const Tensor x = int_valued({8, 6}, 8);
  const DTensor d = distribute_tensor(x, line4, {Shard(0)});
  {
    CommDebugMode comm;
    const DTensor n = narrow(d, 1, 2, 3);
    const DTensor s = slice(d, -1, 1, 100, 2);
    const DTensor sel = select(d, 1, -1);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(n.placements()), "S(0)");
    EXPECT_EQ(to_string(s.placements()), "S(0)");
    EXPECT_EQ(to_string(sel.placements()), "S(0)");
    EXPECT_TRUE(equal(n.full_tensor(), x.narrow(1, 2, 3)));
    EXPECT_TRUE(equal(s.full_tensor(), x.slice(-1, 1, 100, 2)));
    EXPECT_TRUE(equal(sel.full_tensor(), x.select(1, -1)));
  }
  {
    CommDebugMode comm;
    const DTensor n = narrow(d, 0, 3, 4);
    EXPECT_GT(comm.total_count(), 0);
    EXPECT_NE(to_string(n.placements()), "S(0)");
    EXPECT_TRUE(equal(n.full_tensor(), x.narrow(0, 3, 4)));
  }
  {  // select drops the dim: a later shard moves down
    const DTensor e = distribute_tensor(int_valued({3, 4, 8}, 9), line4, {Shard(2)});
    CommDebugMode comm;
    const DTensor sel = select(e, 0, 1);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(sel.placements()), "S(1)");
    EXPECT_TRUE(equal(sel.full_tensor(), int_valued({3, 4, 8}, 9).select(0, 1)));
  }
}

TEST_F(ViewOpsTest, ExpandKeepsShardsOfKeptDimsAndReplicatesBroadcastOnes) {
  DeviceMesh square(world, {2, 2});
  const Tensor x = int_valued({1, 6}, 10);
  const DTensor d = distribute_tensor(x, square, {Replicate(), Shard(1)});
  {
    CommDebugMode comm;
    const DTensor e = expand(d, {2, 4, -1});
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(e.placements()), "R,S(2)");
    expect_local_shapes(e);
    EXPECT_TRUE(equal(e.full_tensor(), x.expand({2, 4, 6})));
  }
  {  // the size-1 dim is sharded (one rank holds it) and then broadcast
    const DTensor s = distribute_tensor(x, square, {Shard(0), Shard(1)});
    const DTensor e = expand(s, {5, 6});
    EXPECT_EQ(to_string(e.placements()), "R,S(1)");
    expect_local_shapes(e);
    EXPECT_TRUE(equal(e.full_tensor(), x.expand({5, 6})));
  }
}

TEST_F(ViewOpsTest, ChunkAndSplitGiveThePlainPiecesWithOneGather) {
  DeviceMesh line4(world, {4});
  const Tensor x = int_valued({7, 3}, 12);
  const DTensor d = distribute_tensor(x, line4, {Shard(0)});
  {
    CommDebugMode comm;
    const std::vector<DTensor> got = chunk(d, 4, 0);
    EXPECT_EQ(comm.total_count(), 1);  // one all_gather for all the pieces
    const std::vector<Tensor> want = x.chunk(4, 0);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(equal(got[i].full_tensor(), want[i])) << i;
  }
  {
    CommDebugMode comm;
    const std::vector<DTensor> got = split(d, 2, 1);  // sizes 2, 1 on the unsharded dim
    EXPECT_EQ(comm.total_count(), 0);
    const std::vector<Tensor> want = x.split(2, 1);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(to_string(got[i].placements()), "S(0)");
      EXPECT_TRUE(equal(got[i].full_tensor(), want[i])) << i;
    }
  }
  {  // more chunks than rows: trailing chunks are empty
    const std::vector<DTensor> got = chunk(d, 9, 0);
    ASSERT_EQ(got.size(), 9u);
    EXPECT_EQ(got[8].shape(), Shape({0, 3}));
  }
}

TEST_F(ViewOpsTest, RepeatedViewsHitThePropagationCache) {
  DeviceMesh mesh(world, {2, 2});
  const DTensor d = distribute_tensor(int_valued({8, 6}, 13), mesh, {Shard(0), Replicate()});
  clear_sharding_prop_cache();
  DTensor v = view(d, {4, 12});
  DTensor f = flatten(d);
  DTensor r = reshape(d, {-1});  // same shape as flatten, its own entry
  EXPECT_EQ(sharding_prop_cache_info().misses, 3);
  for (int i = 0; i < 5; ++i) {
    v = view(d, {4, 12});
    f = flatten(d);
    r = reshape(d, {-1});
  }
  const ShardingPropCacheInfo info = sharding_prop_cache_info();
  EXPECT_EQ(info.misses, 3);
  EXPECT_EQ(info.hits, 15);
  EXPECT_EQ(to_string(f.placements()), "S(0),R");
}

// The dispatched error holds the plain op's message and the placements.
void expect_plain_error(const std::function<void()>& plain, const std::function<void()>& dist,
                        const std::string& placements) {
  const std::string want = error_of(plain);
  const std::string got = error_of(dist);
  ASSERT_NE(want, "<no error>");
  EXPECT_NE(got.find(want), std::string::npos) << got << "\nvs plain: " << want;
  EXPECT_NE(got.find(placements), std::string::npos) << got;
}

TEST_F(ViewOpsTest, ErrorsAreThePlainOpsWithThePlacements) {
  DeviceMesh mesh(world, {4});
  const Tensor x = Tensor::zeros({4, 3});
  const DTensor d = distribute_tensor(x, mesh, {Shard(0)});
  const std::string s0 = "placements S(0)";
  expect_plain_error([&] { x.view({5, -1}); }, [&] { view(d, {5, -1}); }, s0);
  expect_plain_error([&] { x.reshape({5, 2}); }, [&] { reshape(d, {5, 2}); }, s0);
  expect_plain_error([&] { x.reshape({-1, -1}); }, [&] { reshape(d, {-1, -1}); }, s0);
  expect_plain_error([&] { x.flatten(1, 0); }, [&] { flatten(d, 1, 0); }, s0);
  expect_plain_error([&] { x.flatten(0, 2); }, [&] { flatten(d, 0, 2); }, s0);
  expect_plain_error([&] { x.squeeze(2); }, [&] { squeeze(d, 2); }, s0);
  expect_plain_error([&] { x.unsqueeze(-4); }, [&] { unsqueeze(d, -4); }, s0);
  expect_plain_error([&] { x.permute({0}); }, [&] { permute(d, {0}); }, s0);
  expect_plain_error([&] { x.permute({1, -1}); }, [&] { permute(d, {1, -1}); }, s0);
  expect_plain_error([&] { x.transpose(0, 2); }, [&] { transpose(d, 0, 2); }, s0);
  expect_plain_error([&] { x.unsqueeze(0).t(); }, [&] { t(unsqueeze(d, 0)); }, "S(1)");
  expect_plain_error([&] { x.expand({4, 4}); }, [&] { expand(d, {4, 4}); }, s0);
  expect_plain_error([&] { x.expand({3}); }, [&] { expand(d, {3}); }, s0);
  expect_plain_error([&] { x.narrow(1, 2, 2); }, [&] { narrow(d, 1, 2, 2); }, s0);
  expect_plain_error([&] { x.narrow(2, 0, 1); }, [&] { narrow(d, 2, 0, 1); }, s0);
  expect_plain_error([&] { x.slice(0, 0, 2, 0); }, [&] { slice(d, 0, 0, 2, 0); }, s0);
  expect_plain_error([&] { x.select(1, 3); }, [&] { select(d, 1, 3); }, s0);
  expect_plain_error([&] { x.chunk(0, 0); }, [&] { chunk(d, 0, 0); }, s0);
  expect_plain_error([&] { x.chunk(2, 3); }, [&] { chunk(d, 2, 3); }, s0);
  expect_plain_error([&] { x.split(0, 1); }, [&] { split(d, 0, 1); }, s0);
  const std::string e = error_of([&] { view(d, {5, -1}); });
  EXPECT_EQ(e.rfind("view: ", 0), 0u) << e;
  EXPECT_NE(e.find("[5, -1]"), std::string::npos) << e;
}

}  // namespace

namespace {

// A view works its strides out once and reuses them for later shards of the
// same geometry (run_view, src/ops/view.cc). Shards of one shape but
// different strides, and shards whose reshape must copy, take their own.
TEST_F(ViewOpsTest, ShardsOfOneShapeWithDifferentStridesViewAlike) {
  DeviceMesh mesh(world, {4});
  const Tensor x = int_valued({4, 6, 5}, 12);
  // Rank r holds rows [r] of x: contiguous on even ranks; on odd ranks the
  // same values through a transposed layout, where a reshape that merges
  // the last two dims has to copy.
  const DTensor d = from_local(
      [&](int rank) {
        const Tensor shard = x.narrow(0, rank, 1).contiguous();
        if (rank % 2 == 0) return shard;
        return shard.transpose(1, 2).contiguous().transpose(1, 2);
      },
      mesh, {Shard(0)});
  EXPECT_NE(d.to_local(0).strides(), d.to_local(1).strides());
  for (const Shape& to : {Shape{4, 30}, Shape{4, 6, 5, 1}, Shape{2, 2, 6, 5}}) {
    const DTensor v = reshape(d, to);
    EXPECT_TRUE(equal(v.full_tensor(), x.reshape(to))) << to;
    expect_local_shapes(v);
  }
  // Same strides on every rank: the even split of a contiguous tensor.
  const DTensor e = distribute_tensor(x, mesh, {Shard(0)});
  const DTensor w = view(e, {4, 3, 2, 5});
  EXPECT_TRUE(equal(w.full_tensor(), x.view({4, 3, 2, 5})));
  for (int rank = 1; rank < 4; ++rank)
    EXPECT_EQ(w.to_local(rank).strides(), w.to_local(0).strides());
}

}  // namespace

namespace {

// ---- degenerate calls: free, and the layout kept ----------------------------------------

// One call of a view op on an x of some shape: its DTensor and plain forms.
struct ViewCall {
  std::string name;
  std::function<DTensor(const DTensor&)> dist;
  std::function<Tensor(const Tensor&)> plain;
};

// Calls that return x as it is (x 2-d): full-range cuts (as x[:] and
// x[-big:big] give them), views, reshapes, squeezes and flattens keeping
// the shape, expands to the same shape, identity permutes, repeat by ones,
// pad by nothing, one-piece chunk and split. Each must keep any layout.
std::vector<ViewCall> identity_calls(const Shape& shape) {
  std::vector<ViewCall> c;
  for (int64_t d : {0, 1, -1}) {
    const int64_t n = shape[d < 0 ? d + 2 : d];
    const std::string at = "(" + std::to_string(d);
    c.push_back({"slice" + at + ",0,L,1)", [=](const DTensor& x) { return slice(x, d, 0, n, 1); },
                 [=](const Tensor& x) { return x.slice(d, 0, n, 1); }});
    c.push_back({"slice" + at + ",-100,100,1)",
                 [=](const DTensor& x) { return slice(x, d, -100, 100, 1); },
                 [=](const Tensor& x) { return x.slice(d, -100, 100, 1); }});
    c.push_back({"narrow" + at + ",0,L)", [=](const DTensor& x) { return narrow(x, d, 0, n); },
                 [=](const Tensor& x) { return x.narrow(d, 0, n); }});
    c.push_back({"narrow" + at + ",-L,L)", [=](const DTensor& x) { return narrow(x, d, -n, n); },
                 [=](const Tensor& x) { return x.narrow(d, -n, n); }});
    c.push_back({"transpose" + at + "," + std::to_string(d) + ")",
                 [=](const DTensor& x) { return transpose(x, d, d); },
                 [=](const Tensor& x) { return x.transpose(d, d); }});
    c.push_back({"flatten" + at + "," + std::to_string(d) + ")",
                 [=](const DTensor& x) { return flatten(x, d, d); },
                 [=](const Tensor& x) { return x.flatten(d, d); }});
    c.push_back({"chunk(1," + std::to_string(d) + ")",
                 [=](const DTensor& x) { return chunk(x, 1, d)[0]; },
                 [=](const Tensor& x) { return x.chunk(1, d)[0]; }});
    c.push_back({"split(L," + std::to_string(d) + ")",
                 [=](const DTensor& x) { return split(x, std::max<int64_t>(n, 1), d)[0]; },
                 [=](const Tensor& x) { return x.split(std::max<int64_t>(n, 1), d)[0]; }});
    c.push_back({"split({L}," + std::to_string(d) + ")",
                 [=](const DTensor& x) { return split(x, std::vector<int64_t>{n}, d)[0]; },
                 [=](const Tensor& x) { return split(x, std::vector<int64_t>{n}, d)[0]; }});
  }
  c.push_back({"view(same)", [=](const DTensor& x) { return view(x, shape); },
               [=](const Tensor& x) { return x.view(shape); }});
  c.push_back({"reshape(-1,n)", [=](const DTensor& x) { return reshape(x, {-1, shape[1]}); },
               [=](const Tensor& x) { return x.reshape({-1, shape[1]}); }});
  for (int64_t d : {0, 1})
    if (shape[d] != 1)
      c.push_back({"squeeze(" + std::to_string(d) + ")",
                   [=](const DTensor& x) { return squeeze(x, d); },
                   [=](const Tensor& x) { return x.squeeze(d); }});
  c.push_back({"expand(-1,-1)", [](const DTensor& x) { return expand(x, {-1, -1}); },
               [](const Tensor& x) { return x.expand({-1, -1}); }});
  c.push_back({"expand(same)", [=](const DTensor& x) { return expand(x, shape); },
               [=](const Tensor& x) { return x.expand(shape); }});
  c.push_back({"permute(0,1)", [](const DTensor& x) { return permute(x, {0, -1}); },
               [](const Tensor& x) { return x.permute({0, -1}); }});
  c.push_back({"repeat(1,1)", [](const DTensor& x) { return repeat(x, {1, 1}); },
               [](const Tensor& x) { return repeat(x, {1, 1}); }});
  c.push_back({"tile(1)", [](const DTensor& x) { return tile(x, {1}); },
               [](const Tensor& x) { return tile(x, {1}); }});
  c.push_back({"pad(0,0,0,0)", [](const DTensor& x) { return pad(x, {0, 0, 0, 0}); },
               [](const Tensor& x) { return pad(x, {0, 0, 0, 0}); }});
  return c;
}

// Every rank holds the same shard after an identity call as before.
void expect_same_local_shapes(const DTensor& got, const DTensor& x) {
  for (int rank : x.mesh().ranks())
    EXPECT_EQ(got.to_local(rank).shape(), x.to_local(rank).shape()) << "rank " << rank;
}

// The layouts tried on `mesh` for a 2-d x: every mesh dim sharding dim 0,
// then dim 1, mixes with Replicate and Partial, and (on 2+ mesh dims) a
// split order and a dim sharded by all mesh dims.
std::vector<Placements> layouts_on(const DeviceMesh& mesh) {
  const size_t nd = static_cast<size_t>(mesh.ndim());
  std::vector<Placements> out;
  for (int64_t d : {0, 1}) out.push_back(Placements(nd, Shard(d)));
  Placements mixed(nd, Replicate());
  mixed[0] = Shard(0);
  out.push_back(mixed);  // S(0),R,...: the issue's layout
  Placements partial(nd, Shard(1));
  partial[nd - 1] = Partial(ReduceOp::Sum);
  out.push_back(partial);
  Placements alt;
  for (size_t i = 0; i < nd; ++i) alt.push_back(i % 2 ? Shard(0) : Shard(1));
  out.push_back(alt);
  if (nd >= 2) {
    Placements ordered(nd, Replicate());
    ordered[0] = Shard(0, 1);
    ordered[1] = Shard(0, 0);
    out.push_back(ordered);
  }
  return out;
}

// The issue's example: x[:] and slice(x, 0, 0, 8, 1) of S(0),R on 2x2 ran
// a box exchange to S(1),S(1), and x[:, 1] two.
TEST_F(ViewOpsTest, AFullRangeSliceIsFreeAndKeepsTheLayout) {
  DeviceMesh square(world, {2, 2});
  const Tensor x = int_valued({8, 6}, 21);
  const DTensor d = distribute_tensor(x, square, {Shard(0), Replicate()});
  CommDebugMode comm;
  const DTensor all = slice(d, 0, 0, 8, 1);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(all.placements()), "S(0),R");
  const DTensor col = select(slice(d, 0, 0, 8, 1), 1, 1);  // x[:, 1]
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(col.placements()), "S(0),R");
  const DTensor cut = slice(d, 1, 1, 5, 2);  // an unsharded dim is cut locally
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(cut.placements()), "S(0),R");
  EXPECT_TRUE(equal(all.full_tensor(), x));
  EXPECT_TRUE(equal(col.full_tensor(), x.select(1, 1)));
  EXPECT_TRUE(equal(cut.full_tensor(), x.slice(1, 1, 5, 2)));
  // A view of x, as PyTorch's x[:] is.
  EXPECT_EQ(all.to_local(0).storage(), d.to_local(0).storage());
}

// Every call returning x as it is, on meshes of 1 to 3 dims, even, uneven
// and over-sharded shapes, natural, ordered and Partial layouts: no
// collective, x's placements, x's shards, the plain result.
TEST_F(ViewOpsTest, IdentityCallsAreFreeAndKeepEveryLayout) {
  const std::vector<Shape> meshes = {{4}, {3}, {2, 2}, {2, 3}, {2, 2, 2}};
  const std::vector<Shape> shapes = {{8, 6}, {7, 5}, {2, 3}, {1, 5}};
  uint64_t seed = 30;
  for (const Shape& mesh_shape : meshes) {
    DeviceMesh mesh(world, mesh_shape);
    for (const Shape& shape : shapes) {
      const Tensor x = int_valued(shape, ++seed);
      for (const Placements& pl : layouts_on(mesh)) {
        const DTensor d = make_dtensor(x, mesh, pl, seed);
        for (const ViewCall& call : identity_calls(shape)) {
          SCOPED_TRACE(call.name + " of " + to_string(shape) + " placed " + to_string(pl) + " on " +
                       mesh.to_string());
          CommDebugMode comm;
          const DTensor got = call.dist(d);
          EXPECT_EQ(comm.total_count(), 0);
          EXPECT_EQ(got.placements(), d.placements());
          expect_same_local_shapes(got, d);
          EXPECT_TRUE(equal(got.full_tensor(), call.plain(x)));
        }
      }
    }
  }
}

// Cuts to nothing keep the cut dim's shard (every chunk of nothing is
// empty); select and cuts of an unsharded dim keep the other shards; at
// the ends and on size-1 dims alike.
TEST_F(ViewOpsTest, EmptyCutsAndCutsOfUnshardedDimsAreFree) {
  const std::vector<Shape> meshes = {{4}, {3}, {2, 3}, {2, 2, 2}};
  uint64_t seed = 60;
  for (const Shape& mesh_shape : meshes) {
    DeviceMesh mesh(world, mesh_shape);
    const size_t nd = mesh_shape.size();
    for (const Shape& shape : {Shape{7, 5}, Shape{8, 1}}) {
      const Tensor x = int_valued(shape, ++seed);
      for (int64_t sharded : {0, 1}) {
        const int64_t cut = 1 - sharded;
        const Placements pl(nd, Shard(sharded));
        const DTensor d = make_dtensor(x, mesh, pl, seed);
        const int64_t n = shape[cut];
        const std::vector<ViewCall> calls = {
            {"slice(d,3,3)", [&](const DTensor& v) { return slice(v, sharded, 3, 3); },
             [&](const Tensor& v) { return v.slice(sharded, 3, 3); }},
            {"slice(d,-1,1)", [&](const DTensor& v) { return slice(v, sharded, -1, 1); },
             [&](const Tensor& v) { return v.slice(sharded, -1, 1); }},
            {"narrow(d,L,0)", [&](const DTensor& v) { return narrow(v, sharded, shape[sharded], 0); },
             [&](const Tensor& v) { return v.narrow(sharded, shape[sharded], 0); }},
            {"slice(c,1,L,2)", [&](const DTensor& v) { return slice(v, cut, 1, n, 2); },
             [&](const Tensor& v) { return v.slice(cut, 1, n, 2); }},
            {"narrow(c,L-1,1)", [&](const DTensor& v) { return narrow(v, cut, n - 1, 1); },
             [&](const Tensor& v) { return v.narrow(cut, n - 1, 1); }},
            {"select(c,0)", [&](const DTensor& v) { return select(v, cut, 0); },
             [&](const Tensor& v) { return v.select(cut, 0); }},
            {"select(c,-1)", [&](const DTensor& v) { return select(v, cut, -1); },
             [&](const Tensor& v) { return v.select(cut, -1); }},
        };
        for (const ViewCall& call : calls) {
          SCOPED_TRACE(call.name + " of " + to_string(shape) + " placed " + to_string(pl) + " on " +
                       mesh.to_string());
          CommDebugMode comm;
          const DTensor got = call.dist(d);
          EXPECT_EQ(comm.total_count(), 0);
          const bool drops = call.name.rfind("select", 0) == 0;
          const Placements want(nd, Shard(drops && sharded > cut ? sharded - 1 : sharded));
          EXPECT_EQ(got.placements(), want);
          expect_local_shapes(got);
          EXPECT_TRUE(equal(got.full_tensor(), call.plain(x)));
        }
      }
    }
  }
}

}  // namespace
