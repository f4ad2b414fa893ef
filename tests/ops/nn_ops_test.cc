// NN math, embedding and random ops on DTensors: the layouts that need no
// communication, layout-invariant random numbers, errors carrying the plain
// op's message. The random test of every op is tests/worlds/nn_random_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::error_of;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

}  // namespace

class NnOpsTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
};

// ---- strategies ---------------------------------------------------------------------

TEST_F(NnOpsTest, SoftmaxOverAnUnshardedDimKeepsTheSharding) {
  DeviceMesh mesh(world, {4});
  const Tensor x = small_valued({7, 5}, 1);
  DTensor d = distribute_tensor(x, mesh, {Shard(0)});
  {
    CommDebugMode comm;
    DTensor y = softmax(d, 1);
    DTensor z = log_softmax(d, -1);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(y.placements()), "S(0)");
    EXPECT_EQ(to_string(z.placements()), "S(0)");
    EXPECT_TRUE(allclose(y.full_tensor(), softmax(x, 1), 1e-6, 1e-7));
    EXPECT_TRUE(allclose(z.full_tensor(), log_softmax(x, 1), 1e-6, 1e-6));
  }
  // Over the sharded dim: gathered first.
  DTensor y0 = softmax(d, 0);
  EXPECT_FALSE(y0.spec().is_sharded(0));
  EXPECT_TRUE(allclose(y0.full_tensor(), softmax(x, 0), 1e-6, 1e-7));
}

TEST_F(NnOpsTest, LayerNormOfSequenceShardedActivationsNeedsNoCommunication) {
  DeviceMesh mesh(world, {2, 2});
  const Tensor x = small_valued({3, 6, 8}, 2);  // (batch, seq, hidden)
  const Tensor w = small_valued({8}, 3), b = small_valued({8}, 4);
  DTensor dx = distribute_tensor(x, mesh, {Shard(1), Shard(0)});
  DTensor dw = distribute_tensor(w, mesh, {Replicate(), Replicate()});
  DTensor db = distribute_tensor(b, mesh, {Replicate(), Replicate()});
  CommDebugMode comm;
  DTensor y = layer_norm(dx, {8}, dw, db);
  DTensor r = rms_norm(dx, {8}, dw);
  DTensor n = layer_norm(dx, {8});
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(y.placements()), "S(1),S(0)");
  EXPECT_EQ(to_string(r.placements()), "S(1),S(0)");
  EXPECT_TRUE(allclose(y.full_tensor(), layer_norm(x, {8}, w, b), 1e-5, 1e-5));
  EXPECT_TRUE(allclose(r.full_tensor(), rms_norm(x, {8}, w), 1e-5, 1e-5));
  EXPECT_TRUE(allclose(n.full_tensor(), layer_norm(x, {8}), 1e-5, 1e-5));
  // Sharded on the normalized dim: gathered, right answer.
  DTensor dh = distribute_tensor(x, mesh, {Shard(2), Replicate()});
  DTensor yh = layer_norm(dh, {6, 8}, std::nullopt, std::nullopt, 1e-3);
  EXPECT_FALSE(yh.spec().is_sharded(2));
  EXPECT_TRUE(allclose(yh.full_tensor(), layer_norm(x, {6, 8}, Tensor(), Tensor(), 1e-3), 1e-5,
                       1e-5));
}

TEST_F(NnOpsTest, RowShardedEmbeddingIsAMaskedPartialSum) {
  DeviceMesh mesh(world, {4});
  const Tensor w = small_valued({10, 3}, 5);  // rows 3,3,3,1
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 9, 3, 9, 5, 2, 8, 8}, Shape{2, 4});
  DTensor dw = distribute_tensor(w, mesh, {Shard(0)});
  DTensor di = distribute_tensor(idx, mesh, {Replicate()});
  CommDebugMode comm;
  DTensor y = embedding(dw, di);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(y.placements()), "P(sum)");
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  EXPECT_TRUE(equal(y.full_tensor(), embedding(w, idx)));
  // Rank 3 owns row 9 only: the rest of its piece is zero.
  const Tensor piece = y.to_local(3);
  EXPECT_TRUE(equal(piece.select(0, 0).select(0, 1), w.select(0, 9)));
  EXPECT_EQ(sum(abs(piece)).item<double>(), sum(abs(w.select(0, 9))).item<double>() * 2);
}

TEST_F(NnOpsTest, EmbeddingLayoutsPassThrough) {
  DeviceMesh mesh(world, {2, 2});
  const Tensor w = small_valued({6, 4}, 6);
  const Tensor idx = Tensor::randint(0, 6, {5, 3}, 7);
  const Tensor want = embedding(w, idx);
  {  // replicated table, sharded indices -> sharded output
    DTensor y = embedding(distribute_tensor(w, mesh, {Replicate(), Replicate()}),
                          distribute_tensor(idx, mesh, {Shard(0), Shard(1)}));
    EXPECT_EQ(to_string(y.placements()), "S(0),S(1)");
    EXPECT_TRUE(equal(y.full_tensor(), want));
  }
  {  // column-sharded table -> output sharded on its last dim; with a row-sharded one
    CommDebugMode comm;
    DTensor y = embedding(distribute_tensor(w, mesh, {Shard(0), Shard(1)}),
                          distribute_tensor(idx, mesh, {Replicate(), Replicate()}));
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(y.placements()), "P(sum),S(2)");
    EXPECT_TRUE(equal(y.full_tensor(), want));
  }
  {  // a Partial table stays Partial
    DeviceMesh line(world, {4});
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      DTensor dw = make_dtensor(w, line, {Partial(op)}, 8);
      CommDebugMode comm;
      DTensor y = embedding(dw, distribute_tensor(idx, line, {Replicate()}));
      EXPECT_EQ(comm.total_count(), 0);
      EXPECT_EQ(y.placements()[0], Partial(op));
      EXPECT_TRUE(equal(y.full_tensor(), want));
    }
  }
}

TEST_F(NnOpsTest, BatchShardedCrossEntropy) {
  DeviceMesh mesh(world, {4});
  const Tensor logits = small_valued({9, 6}, 9);
  const Tensor t = dtensor::testing::class_targets({9}, 6, -100, 10);
  DTensor dl = distribute_tensor(logits, mesh, {Shard(0)});
  DTensor dt = distribute_tensor(t, mesh, {Shard(0)});
  {
    CommDebugMode comm;
    DTensor none = cross_entropy(dl, dt, Reduction::None);
    DTensor total = cross_entropy(dl, dt, Reduction::Sum);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(to_string(none.placements()), "S(0)");
    EXPECT_EQ(to_string(total.placements()), "P(sum)");
    EXPECT_TRUE(allclose(none.full_tensor(), cross_entropy(logits, t, Reduction::None), 1e-5,
                         1e-5));
    EXPECT_TRUE(allclose(total.full_tensor(), cross_entropy(logits, t, Reduction::Sum), 1e-5,
                         1e-5));
  }
  CommDebugMode comm;
  DTensor mean = cross_entropy(dl, dt);
  EXPECT_LE(comm.total_count(), 1);  // the count of targets: one small all_reduce
  const Tensor got = mean.full_tensor(), want = cross_entropy(logits, t);
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5)) << got << want;
}

TEST_F(NnOpsTest, NllLossMeanOfOnlyIgnoredTargetsIsNanLikeThePlainOp) {
  DeviceMesh mesh(world, {2});
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor lp = log_softmax(small_valued({4, 3}, 11).to(dtype), 1);
    const Tensor t = Tensor::full({4}, -1, DType::Int64);
    const Tensor want = nll_loss(lp, t, Reduction::Mean, -1);
    const Tensor got = nll_loss(distribute_tensor(lp, mesh, {Shard(0)}),
                                distribute_tensor(t, mesh, {Shard(0)}), Reduction::Mean, -1)
                           .full_tensor();
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(std::isnan(want.item<double>()));
    EXPECT_TRUE(std::isnan(got.item<double>()));
  }
}

TEST_F(NnOpsTest, SpatialLossDimsStaySharded) {
  DeviceMesh mesh(world, {2, 3});
  const Tensor lp = log_softmax(small_valued({4, 5, 7}, 12), 1);
  const Tensor t = dtensor::testing::class_targets({4, 7}, 5, 2, 13);
  DTensor dl = distribute_tensor(lp, mesh, {Shard(0), Shard(2)});
  DTensor dt = distribute_tensor(t, mesh, {Shard(0), Shard(1)});
  CommDebugMode comm;
  DTensor none = nll_loss(dl, dt, Reduction::None, 2);
  DTensor total = nll_loss(dl, dt, Reduction::Sum, 2);
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(to_string(none.placements()), "S(0),S(1)");
  EXPECT_EQ(to_string(total.placements()), "P(sum),P(sum)");
  EXPECT_TRUE(allclose(none.full_tensor(), nll_loss(lp, t, Reduction::None, 2), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(total.full_tensor(), nll_loss(lp, t, Reduction::Sum, 2), 1e-5, 1e-5));
}

// ---- random -------------------------------------------------------------------------

TEST_F(NnOpsTest, RandomTensorsAreLayoutInvariant) {
  struct Case {
    Shape mesh;
    Placements placements;
  };
  const Case cases[] = {
      {{4}, {Replicate()}},          {{4}, {Shard(0)}},
      {{4}, {Shard(1)}},             {{4}, {Shard(2)}},
      {{2, 3}, {Shard(0), Shard(2)}}, {{2, 3}, {Shard(1), Shard(1)}},
      {{2, 3}, {Replicate(), Shard(0)}}, {{2, 2}, {Shard(2), Shard(0)}},
      {{2, 2}, {Shard(0), Shard(0)}}, {{2, 2, 2}, {Shard(1), Replicate(), Shard(2)}},
  };
  for (const Shape& shape : {Shape{7, 5, 3}, Shape{2, 9, 4}, Shape{5, 0, 3}, Shape{1, 1, 11}}) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor want_u = Tensor::rand(shape, 42, 0, dtype);
      const Tensor want_n = Tensor::randn(shape, 43, 0, dtype);
      for (const Case& c : cases) {
        DeviceMesh mesh(world, c.mesh);
        const std::string what = to_string(c.placements) + " on " + mesh.to_string() + " " +
                                 to_string(shape);
        CommDebugMode comm;
        DTensor u = rand(shape, mesh, c.placements, 42, dtype);
        DTensor n = randn(shape, mesh, c.placements, 43, dtype);
        EXPECT_EQ(comm.total_count(), 0) << what;
        EXPECT_EQ(u.placements(), c.placements);
        EXPECT_EQ(u.dtype(), dtype);
        for (int rank = 0; rank < mesh.size(); ++rank)
          ASSERT_EQ(u.to_local(rank).shape(), u.spec().extent_of_rank(rank)->local_shape) << what;
        EXPECT_TRUE(equal(u.full_tensor(), want_u)) << what;
        EXPECT_TRUE(equal(n.full_tensor(), want_n)) << what;
      }
    }
  }
  // 0-d and 1-d.
  DeviceMesh line(world, {4});
  EXPECT_TRUE(equal(rand({}, line, {Replicate()}, 7).full_tensor(), Tensor::rand({}, 7)));
  EXPECT_TRUE(equal(rand({6}, line, {Shard(0)}, 7).full_tensor(), Tensor::rand({6}, 7)));
}

TEST_F(NnOpsTest, DropoutUsesTheGlobalMaskWhateverTheLayout) {
  std::mt19937 rng(5);
  const Shape meshes[] = {{4}, {2, 2}, {2, 3}};
  for (int iter = 0; iter < 60; ++iter) {
    DeviceMesh mesh(world, meshes[iter % 3]);
    const Shape shape = dtensor::testing::random_small_shape(rng);
    const Tensor x = small_valued(shape, iter);
    const Placements pl =
        dtensor::testing::random_placement_pair(rng, mesh.ndim(), static_cast<int64_t>(shape.size()))
            .first;
    const double p = (iter % 4) * 0.25;
    const uint64_t seed = 1000 + iter;
    const Tensor want = x * ge(Tensor::rand(shape, seed), p) / (1 - p);
    DTensor got = dropout(make_dtensor(x, mesh, pl, iter), p, seed);
    EXPECT_EQ(got.placements(), pl);
    ASSERT_TRUE(allclose(got.full_tensor(), want, 1e-5, 1e-4))
        << to_string(pl) << " on " << mesh << " shape " << shape << " p " << p;
  }
  // p = 0 keeps the values.
  DeviceMesh line(world, {4});
  const Tensor x = small_valued({5, 3}, 1);
  EXPECT_TRUE(equal(dropout(distribute_tensor(x, line, {Shard(0)}), 0.0, 1).full_tensor(), x));
}

// ---- errors -------------------------------------------------------------------------

TEST_F(NnOpsTest, ErrorsCarryThePlainMessageAndThePlacements) {
  DeviceMesh mesh(world, {4});
  const Tensor x = small_valued({4, 6}, 1);
  DTensor dx = distribute_tensor(x, mesh, {Shard(0)});
  auto check = [](const std::string& got, const std::string& plain, const std::string& where) {
    EXPECT_TRUE(contains(got, plain)) << got << "\n  lacks the plain message\n  " << plain;
    EXPECT_TRUE(contains(got, where)) << got << "\n  lacks " << where;
  };
  // softmax: dtype and dim.
  const Tensor xi = Tensor::zeros({4, 6}, DType::Int64);
  DTensor dxi = distribute_tensor(xi, mesh, {Shard(0)});
  check(error_of([&] { softmax(dxi, 1); }), error_of([&] { softmax(xi, 1); }), "S(0)");
  check(error_of([&] { log_softmax(dx, 2); }), error_of([&] { log_softmax(x, 2); }), "S(0)");
  // norms: normalized shape and parameter shapes.
  check(error_of([&] { layer_norm(dx, {4}); }), error_of([&] { layer_norm(x, {4}); }), "S(0)");
  DTensor w5 = distribute_tensor(Tensor::ones({5}), mesh, {Replicate()});
  check(error_of([&] { layer_norm(dx, {6}, w5); }),
        error_of([&] { layer_norm(x, {6}, Tensor::ones({5})); }), "S(0) and R");
  check(error_of([&] { layer_norm(dx, {6}, std::nullopt, w5); }),
        error_of([&] { layer_norm(x, {6}, Tensor(), Tensor::ones({5})); }), "S(0) and R");
  check(error_of([&] { rms_norm(dx, {3, 6}); }), error_of([&] { rms_norm(x, {3, 6}); }), "S(0)");
  // losses: target shape, and out-of-range targets (named as the called op).
  const Tensor t3 = Tensor::zeros({3}, DType::Int64);
  DTensor dt3 = distribute_tensor(t3, mesh, {Replicate()});
  check(error_of([&] { nll_loss(dx, dt3); }), error_of([&] { nll_loss(x, t3); }), "S(0) and R");
  check(error_of([&] { cross_entropy(dx, dt3); }), error_of([&] { cross_entropy(x, t3); }),
        "S(0) and R");
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, 1, 6, 2});
  DTensor dbad = distribute_tensor(bad, mesh, {Shard(0)});
  EXPECT_EQ(error_of([&] { cross_entropy(dx, dbad); }), error_of([&] { cross_entropy(x, bad); }));
  EXPECT_EQ(error_of([&] { nll_loss(dx, dbad, Reduction::Sum); }),
            error_of([&] { nll_loss(x, bad, Reduction::Sum); }));
  // embedding: shapes, and indices out of range of the whole (row-sharded) table.
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 4, -5});
  DTensor didx = distribute_tensor(idx, mesh, {Replicate()});
  const Tensor v1 = Tensor::ones({4});
  check(error_of([&] { embedding(distribute_tensor(v1, mesh, {Shard(0)}), didx); }),
        error_of([&] { embedding(v1, idx); }), "S(0) and R");
  for (const Placement& p : {Shard(0), Shard(1), Replicate()}) {
    const Tensor w = small_valued({4, 6}, 3);
    EXPECT_EQ(error_of([&] { embedding(distribute_tensor(w, mesh, {p}), didx); }),
              error_of([&] { embedding(w, idx); }))
        << to_string(p);
  }
  // random.
  EXPECT_TRUE(contains(error_of([&] { rand({4}, mesh, {Partial()}, 1); }),
                       "rand: placements must be Shard or Replicate, got P(sum)"));
  EXPECT_TRUE(contains(error_of([&] { randn({4}, mesh, {Shard(0)}, 1, DType::Int64); }),
                       "randn: dtype must be floating point"));
  EXPECT_TRUE(contains(error_of([&] { dropout(dx, 1.0, 1); }), "dropout: p must be in [0, 1)"));
  EXPECT_TRUE(contains(error_of([&] { dropout(dxi, 0.5, 1); }),
                       "dropout: input dtype must be floating point"));
}
