// The tensor-parallel layers of parallel.h on every world (see
// world_util.h): each layer against the plain op on full tensors, the
// placements it hands on, and the collectives it runs (the Megatron
// pairings need exactly the ones the design promises), on meshes with a
// tp dim alone and with (dp, tp), with uneven shards.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "dtensor/parallel.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

class ParallelTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// The tp mesh dim is the last; a 2-d mesh's first dim is data parallel.
struct ParallelLayout {
  DeviceMesh mesh;
  int tp;
  Placements act;  // activations: batch S(0) on dp, Replicate on tp
};

ParallelLayout layout_of(const World& world, const Shape& shape) {
  DeviceMesh mesh(world, shape);
  const int tp = mesh.ndim() - 1;
  Placements act(static_cast<size_t>(mesh.ndim()), Replicate());
  if (mesh.ndim() == 2) act[0] = Shard(0);
  return {mesh, tp, act};
}

Tensor scaled_randn(const Shape& shape, uint64_t seed, double scale) {
  return Tensor::randn(shape, seed) * scale;
}

int64_t collectives(const CommDebugMode& comm, CollectiveKind kind) { return comm.count(kind); }

}  // namespace

// Column- then row-parallel linear (the Megatron MLP): the column output is
// S(-1) on tp with no communication, the row output needs one all_reduce,
// and both equal the plain computation. Hidden 10 does not divide by 3 or
// 4: uneven feature shards.
TEST_F(ParallelTest, ColumnThenRowLinearIsTheMegatronMlp) {
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    ParallelLayout l = layout_of(world, shape);
    if (!dtensor::testing::takes_part(l.mesh)) continue;
    const std::string where = "mesh " + l.mesh.to_string();
    Tensor x = scaled_randn({4, 3, 8}, 1, 1.0);
    Tensor w1 = scaled_randn({10, 8}, 2, 0.3), b1 = scaled_randn({10}, 3, 0.1);
    Tensor w2 = scaled_randn({8, 10}, 4, 0.3), b2 = scaled_randn({8}, 5, 0.1);
    ColumnParallelLinear up(l.mesh, l.tp, w1, b1);
    RowParallelLinear down(l.mesh, l.tp, w2, b2);
    EXPECT_EQ(up.weight().placements()[static_cast<size_t>(l.tp)], Shard(0)) << where;
    EXPECT_EQ(down.weight().placements()[static_cast<size_t>(l.tp)], Shard(1)) << where;
    DTensor dx = distribute_tensor(x, l.mesh, l.act);

    CommDebugMode comm;
    DTensor h = up(dx);
    EXPECT_EQ(comm.total_count(), 0) << where;
    EXPECT_EQ(h.placements()[static_cast<size_t>(l.tp)], Shard(2)) << where;
    if (l.mesh.ndim() == 2) {
      EXPECT_EQ(h.placements()[0], Shard(0)) << where;
    }
    DTensor y = down(gelu(h));
    EXPECT_EQ(comm.total_count(), 1) << where;
    EXPECT_EQ(collectives(comm, CollectiveKind::AllReduce), 1) << where;
    EXPECT_EQ(y.placements(), l.act) << where;

    Tensor ref = linear(gelu(linear(x, w1, b1)), w2, b2);
    EXPECT_LE(max_abs_diff(y.full_tensor(), ref), 1e-5) << where;
    EXPECT_LE(max_abs_diff(h.full_tensor(), linear(x, w1, b1)), 1e-5) << where;
  }
}

// The sequence-parallel block: activations S(1) on tp; the norm runs on the
// slices (no communication), the column linear all-gathers once, the row
// linear reduce-scatters back onto the sequence dim. Sequence 5: uneven.
TEST_F(ParallelTest, SequenceParallelRegionGathersOnceAndReduceScattersOnce) {
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    ParallelLayout l = layout_of(world, shape);
    if (!dtensor::testing::takes_part(l.mesh)) continue;
    const std::string where = "mesh " + l.mesh.to_string();
    Tensor x = scaled_randn({2, 5, 8}, 11, 1.0);
    Tensor g = 1.0 + scaled_randn({8}, 12, 0.1), b = scaled_randn({8}, 13, 0.1);
    Tensor w1 = scaled_randn({12, 8}, 14, 0.3), w2 = scaled_randn({8, 12}, 15, 0.3);
    SequenceParallelLayerNorm norm(l.mesh, l.tp, g, b, /*sequence_dim=*/1);
    ColumnParallelLinear up(l.mesh, l.tp, w1);
    RowParallelLinear down(l.mesh, l.tp, w2, std::nullopt, Shard(1));
    Placements seq = l.act;
    seq[static_cast<size_t>(l.tp)] = Shard(1);
    DTensor dx = distribute_tensor(x, l.mesh, seq);

    CommDebugMode comm;
    DTensor n = norm(dx);
    EXPECT_EQ(comm.total_count(), 0) << where;
    EXPECT_EQ(n.placements(), seq) << where;
    DTensor y = dx + down(relu(up(n)));
    EXPECT_EQ(collectives(comm, CollectiveKind::AllGather), 1) << where;
    EXPECT_EQ(collectives(comm, CollectiveKind::ReduceScatter), 1) << where;
    EXPECT_EQ(comm.total_count(), 2) << where;
    EXPECT_EQ(y.placements(), seq) << where;

    Tensor ref = x + linear(relu(linear(layer_norm(x, {8}, g, b), w1)), w2);
    EXPECT_LE(max_abs_diff(y.full_tensor(), ref), 1e-5) << where;
    // From Replicate the norm takes its slice locally.
    CommDebugMode local;
    DTensor n2 = norm(distribute_tensor(x, l.mesh, l.act));
    EXPECT_EQ(local.total_count(), 0) << where;
    EXPECT_LE(max_abs_diff(n2.full_tensor(), layer_norm(x, {8}, g, b)), 1e-5) << where;
  }
}

// The embedding table is row-sharded on tp; each rank looks up its own rows
// (a masked Partial(sum)) and one all_reduce (or reduce_scatter) finishes.
// Vocabulary 11: uneven row shards.
TEST_F(ParallelTest, VocabParallelEmbeddingReducesOnce) {
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    ParallelLayout l = layout_of(world, shape);
    if (!dtensor::testing::takes_part(l.mesh)) continue;
    const std::string where = "mesh " + l.mesh.to_string();
    Tensor table = scaled_randn({11, 6}, 21, 1.0);
    Tensor ids = Tensor::randint(0, 11, {4, 5}, 22);
    DTensor d_ids = distribute_tensor(ids, l.mesh, l.act);
    for (Placement out : {Replicate(), Shard(1), Partial()}) {
      VocabParallelEmbedding emb(l.mesh, l.tp, table, out);
      CommDebugMode comm;
      DTensor y = emb(d_ids);
      EXPECT_EQ(comm.total_count(), out.is_partial() ? 0 : 1) << where << " " << to_string(out);
      EXPECT_EQ(y.placements()[static_cast<size_t>(l.tp)], out) << where;
      EXPECT_EQ(max_abs_diff(y.full_tensor(), embedding(table, ids)), 0) << where;
    }
  }
}

// Cross-entropy on vocabulary-sharded logits without gathering them: three
// all_reduces on tp of per-target values, none of the logits' size, and the
// loss of the plain cross_entropy. Vocabulary 13: uneven class shards.
TEST_F(ParallelTest, VocabParallelCrossEntropyNeverGathersTheLogits) {
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    ParallelLayout l = layout_of(world, shape);
    if (!dtensor::testing::takes_part(l.mesh)) continue;
    const std::string where = "mesh " + l.mesh.to_string();
    Tensor logits = scaled_randn({4, 3, 13}, 31, 3.0);
    Tensor target = Tensor::randint(0, 13, {4, 3}, 32);
    Placements lp = l.act;
    lp[static_cast<size_t>(l.tp)] = Shard(2);
    DTensor d_logits = distribute_tensor(logits, l.mesh, lp);
    DTensor d_target = distribute_tensor(target, l.mesh, l.act);
    CommDebugMode comm;
    DTensor loss = vocab_parallel_cross_entropy(d_logits, d_target, l.tp);
    EXPECT_EQ(collectives(comm, CollectiveKind::AllGather), 0) << where;
    EXPECT_EQ(collectives(comm, CollectiveKind::AllToAll), 0) << where;
    EXPECT_GE(collectives(comm, CollectiveKind::AllReduce), 3) << where;
    // Each all_reduce moves per-target values: at most 4*3 floats per rank.
    EXPECT_LE(comm.bytes(CollectiveKind::AllReduce),
              collectives(comm, CollectiveKind::AllReduce) * 12 * 4) << where;
    for (Placement p : loss.placements()) EXPECT_TRUE(p.is_replicate()) << where;
    Tensor ref = cross_entropy(logits.reshape({-1, 13}), target.reshape({-1}));
    EXPECT_LE(max_abs_diff(loss.full_tensor(), ref), 1e-5) << where;
  }
}

TEST_F(ParallelTest, WithPlacementMovesOneMeshDim) {
  ParallelLayout l = layout_of(world, {2, 2});
  if (!dtensor::testing::takes_part(l.mesh)) return;
  Tensor x = scaled_randn({4, 6}, 41, 1.0);
  DTensor d = distribute_tensor(x, l.mesh, {Shard(0), Replicate()});
  DTensor s = with_placement(d, 1, Shard(-1));
  EXPECT_EQ(s.placements(), (Placements{Shard(0), Shard(1)}));
  EXPECT_EQ(max_abs_diff(s.full_tensor(), x), 0);
  EXPECT_EQ(with_placement(d, 0, Shard(0)).placements(), d.placements());
  EXPECT_NE(error_of([&] { with_placement(d, 2, Replicate()); }).find("mesh dim 2 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { with_placement(d, 1, Shard(-3)); }).find("S(-3) names no dim"),
            std::string::npos);
}

TEST_F(ParallelTest, BadArgumentsNameWhatWasGiven) {
  ParallelLayout l = layout_of(world, {2, 2});
  if (!dtensor::testing::takes_part(l.mesh)) return;
  Tensor w = Tensor::randn({6, 4}, 1);
  EXPECT_NE(error_of([&] { ColumnParallelLinear(l.mesh, 2, w); })
                .find("ColumnParallelLinear: tensor-parallel mesh dim 2 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { RowParallelLinear(l.mesh, 1, Tensor::randn({6}, 1)); })
                .find("RowParallelLinear: weight must be (out, in), got shape [6]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ColumnParallelLinear(l.mesh, 1, w, Tensor::zeros({4})); })
                .find("bias must be (out) = (6), got shape [4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { RowParallelLinear(l.mesh, 1, w, std::nullopt, Partial(ReduceOp::Max)); })
                .find("output placement must be Replicate, Shard(d) or Partial(sum), got P(max)"),
            std::string::npos);
  VocabParallelEmbedding emb(l.mesh, 1, w);
  DTensor float_ids = distribute_tensor(Tensor::zeros({3}), l.mesh, {Replicate(), Replicate()});
  EXPECT_NE(error_of([&] { emb(float_ids); }).find("ids must be int64, got f32"), std::string::npos);
  SequenceParallelLayerNorm norm(l.mesh, 1, Tensor::ones({4}), Tensor::zeros({4}), 2);
  DTensor x = distribute_tensor(Tensor::zeros({2, 3, 4}), l.mesh, {Replicate(), Replicate()});
  EXPECT_NE(error_of([&] { norm(x); }).find("sequence dim 2 must be a dim before the normalised"),
            std::string::npos);
}
