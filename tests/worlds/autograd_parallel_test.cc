// Backward through the tensor-parallel layers of parallel.h on every world
// (see world_util.h): the gradients of every parameter and of the input
// equal those of the same computation on replicated tensors, and backward
// runs exactly the collectives Megatron's layers run (pinned with
// CommDebugMode), on meshes with a tp dim alone and with (dp, tp).
#include <gtest/gtest.h>

#include <string>

#include "dtensor/parallel.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

class AutogradParallelTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Meshes (tp) and (dp, tp) that fit the world; tp is the last dim.
std::vector<Shape> tp_meshes(const World& world) {
  std::vector<Shape> out;
  for (const Shape& s : std::vector<Shape>{{4}, {2, 2}, {3}, {2, 4}, {2, 3}})
    if (s.product() <= world.size()) out.push_back(s);
  return out;
}

Tensor randn64(const Shape& shape, uint64_t seed, double scale) {
  return Tensor::randn(shape, seed, 0, DType::Float64) * scale;
}

Placements replicate_autograd_tp(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// A replicated leaf holding `full`.
DTensor replicated_leaf(const Tensor& full, const DeviceMesh& mesh) {
  DTensor d = distribute_tensor(full, mesh, replicate_autograd_tp(mesh));
  d.requires_grad_();
  return d;
}

// |a - b| <= 1e-10 + 1e-10 |b| everywhere (float64; reductions reorder).
void expect_close(const std::optional<DTensor>& got, const std::optional<DTensor>& want,
                  const std::string& what) {
  ASSERT_TRUE(got.has_value()) << what << ": no gradient";
  ASSERT_TRUE(want.has_value()) << what << ": no reference gradient";
  const Tensor a = got->full_tensor(), b = want->full_tensor();
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_LE(max_abs_diff(a, b), 1e-10 * (1 + max_abs_diff(b, Tensor::zeros(b.shape(), b.dtype()))))
      << what;
}

// sum(y * w) for a fixed random w laid out as `layout` (replicated by
// default): every output element gets its own gradient.
DTensor weighted_sum(const DTensor& y, uint64_t seed, std::optional<Placements> layout = {}) {
  const DTensor w = distribute_tensor(randn64(y.shape(), seed, 1.0), y.mesh(),
                                      layout.value_or(replicate_autograd_tp(y.mesh())));
  return sum(mul(y, w));
}

}  // namespace

// The Megatron MLP (column- then row-parallel linear): forward one
// all_reduce, backward none: the input, already Replicate on tp, is not
// moved, so its gradient stays Partial(sum) on tp, as PyTorch's
// ColwiseParallel leaves it (reduced where it is read or meets a
// Replicate gradient); every gradient equals the replicated one.
// Hidden 10 gives uneven feature shards on 3 and 4 ranks.
TEST_F(AutogradParallelTest, MegatronMlpBackwardLeavesTheInputGradientPartial) {
  for (const Shape& shape : tp_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const int tp = mesh.ndim() - 1;
    const std::string where = "mesh " + mesh.to_string();
    const Tensor x = randn64({4, 3, 8}, 1, 1.0);
    const Tensor w1 = randn64({10, 8}, 2, 0.3), b1 = randn64({10}, 3, 0.1);
    const Tensor w2 = randn64({8, 10}, 4, 0.3), b2 = randn64({8}, 5, 0.1);
    ColumnParallelLinear up(mesh, tp, w1, b1);
    RowParallelLinear down(mesh, tp, w2, b2);
    Placements act = replicate_autograd_tp(mesh);
    if (mesh.ndim() == 2) act[0] = Shard(0);
    DTensor dx = distribute_tensor(x, mesh, act);
    dx.requires_grad_();

    CommDebugMode forward;
    const DTensor y = down(gelu(up(dx)));
    EXPECT_EQ(forward.total_count(), 1) << where;
    EXPECT_EQ(forward.count(CollectiveKind::AllReduce), 1) << where;
    const DTensor loss = weighted_sum(y, 6);
    {
      CommDebugMode backward;
      loss.backward();
      EXPECT_EQ(backward.total_count(), 0) << where << "\n" << backward.table();
    }
    // Layouts PyTorch gives: the input gradient Partial on tp, sharded
    // weights' gradients sharded like them.
    EXPECT_EQ(dx.grad()->placements()[static_cast<size_t>(tp)], Partial()) << where;
    EXPECT_EQ(up.weight().grad()->placements()[static_cast<size_t>(tp)], Shard(0)) << where;
    EXPECT_EQ(down.weight().grad()->placements()[static_cast<size_t>(tp)], Shard(1)) << where;

    DTensor rx = replicated_leaf(x, mesh), rw1 = replicated_leaf(w1, mesh),
            rb1 = replicated_leaf(b1, mesh), rw2 = replicated_leaf(w2, mesh),
            rb2 = replicated_leaf(b2, mesh);
    weighted_sum(linear(gelu(linear(rx, rw1, rb1)), rw2, rb2), 6).backward();
    expect_close(dx.grad(), rx.grad(), where + " input");
    expect_close(up.weight().grad(), rw1.grad(), where + " W1");
    expect_close(up.bias()->grad(), rb1.grad(), where + " b1");
    expect_close(down.weight().grad(), rw2.grad(), where + " W2");
    expect_close(down.bias()->grad(), rb2.grad(), where + " b2");
  }
}

// Sequence parallelism: activations sharded on the sequence dim between
// blocks. Forward: the column layer all-gathers, the row layer
// reduce-scatters; backward mirrors it when the output's gradient arrives
// sequence-sharded (as from the next sequence-parallel block): one
// all_gather (that gradient) and one reduce_scatter (the input gradient
// back to sequence shards).
TEST_F(AutogradParallelTest, SequenceParallelMlpBackwardMirrorsTheForward) {
  for (const Shape& shape : tp_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const int tp = mesh.ndim() - 1;
    const std::string where = "mesh " + mesh.to_string();
    const Tensor x = randn64({2, 6, 8}, 11, 1.0);
    const Tensor w1 = randn64({12, 8}, 12, 0.3), w2 = randn64({8, 12}, 13, 0.3);
    const Tensor g = randn64({8}, 14, 1.0), b = randn64({8}, 15, 0.1);
    SequenceParallelLayerNorm norm(mesh, tp, g, b);
    ColumnParallelLinear up(mesh, tp, w1);
    RowParallelLinear down(mesh, tp, w2, std::nullopt, Shard(1));
    Placements act = replicate_autograd_tp(mesh);
    act[static_cast<size_t>(tp)] = Shard(1);
    if (mesh.ndim() == 2) act[0] = Shard(0);
    DTensor dx = distribute_tensor(x, mesh, act);
    dx.requires_grad_();

    CommDebugMode forward;
    const DTensor y = down(gelu(up(norm(dx))));
    EXPECT_EQ(forward.count(CollectiveKind::AllGather), 1) << where;
    EXPECT_EQ(forward.count(CollectiveKind::ReduceScatter), 1) << where;
    EXPECT_EQ(forward.total_count(), 2) << where;
    const DTensor loss = weighted_sum(y, 16, y.placements());
    {
      CommDebugMode backward;
      loss.backward();
      EXPECT_EQ(backward.count(CollectiveKind::AllGather), 1) << where << "\n" << backward.table();
      EXPECT_EQ(backward.count(CollectiveKind::ReduceScatter), 1) << where << "\n" << backward.table();
      EXPECT_EQ(backward.total_count(), 2) << where << "\n" << backward.table();
    }
    EXPECT_EQ(dx.grad()->placements(), act) << where;
    // The norm's replicated parameters get Partial(sum) gradients over tp
    // (each rank saw only its sequence slice); reducing them is the
    // optimizer's all_reduce, as in PyTorch.
    EXPECT_EQ(norm.weight().grad()->placements()[static_cast<size_t>(tp)], Partial()) << where;

    DTensor rx = replicated_leaf(x, mesh), rw1 = replicated_leaf(w1, mesh),
            rw2 = replicated_leaf(w2, mesh), rg = replicated_leaf(g, mesh),
            rb = replicated_leaf(b, mesh);
    weighted_sum(linear(gelu(linear(layer_norm(rx, {8}, rg, rb), rw1)), rw2), 16).backward();
    expect_close(dx.grad(), rx.grad(), where + " input");
    expect_close(up.weight().grad(), rw1.grad(), where + " W1");
    expect_close(down.weight().grad(), rw2.grad(), where + " W2");
    expect_close(norm.weight().grad(), rg.grad(), where + " norm weight");
    expect_close(norm.bias().grad(), rb.grad(), where + " norm bias");
  }
}

// Vocabulary-parallel embedding and loss: forward all-reduces; backward
// needs no collective on tp (each rank's table rows get the gradients of
// the ids it holds; the loss's gradient stays sharded on the classes).
TEST_F(AutogradParallelTest, VocabParallelEmbeddingAndLossBackwardStayLocal) {
  for (const Shape& shape : tp_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const int tp = mesh.ndim() - 1;
    const std::string where = "mesh " + mesh.to_string();
    const Tensor table = randn64({11, 6}, 21, 1.0), head = randn64({11, 6}, 22, 0.5);
    std::vector<int64_t> id_values = {0, 3, 10, 3, 7, 1, 5, 10, 2, 9, 4, 8};
    const Tensor ids = Tensor::from_vector(id_values, Shape{2, 6});
    std::vector<int64_t> target_values = {1, 4, -100, 10, 0, 3, 6, 2, 9, -100, 5, 7};
    const Tensor targets = Tensor::from_vector(target_values, Shape{2, 6});
    VocabParallelEmbedding embed(mesh, tp, table);
    ColumnParallelLinear lm_head(mesh, tp, head);  // logits sharded on the classes
    const DTensor dids = distribute_tensor(ids, mesh, replicate_autograd_tp(mesh));
    const DTensor dtargets = distribute_tensor(targets, mesh, replicate_autograd_tp(mesh));

    const DTensor loss = vocab_parallel_cross_entropy(lm_head(embed(dids)), dtargets, tp);
    {
      CommDebugMode backward;
      loss.backward();
      // The only collective: the column-parallel head's input gradient,
      // summed over tp (the embedding output is replicated on tp).
      EXPECT_EQ(backward.count(CollectiveKind::AllReduce), 1) << where << "\n" << backward.table();
      EXPECT_EQ(backward.total_count(), 1) << where << "\n" << backward.table();
    }
    EXPECT_EQ(embed.weight().grad()->placements()[static_cast<size_t>(tp)], Shard(0)) << where;

    DTensor rtable = replicated_leaf(table, mesh), rhead = replicated_leaf(head, mesh);
    const DTensor logits = linear(embedding(rtable, dids), rhead);
    cross_entropy(reshape(logits, {12, 11}), reshape(dtargets, {12})).backward();
    expect_close(embed.weight().grad(), rtable.grad(), where + " table");
    expect_close(lm_head.weight().grad(), rhead.grad(), where + " head");
  }
}
