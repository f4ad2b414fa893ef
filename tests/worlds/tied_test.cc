// Tied parameters (the embedding and the output head sharing one weight)
// on every world (see world_util.h): listed once, one gradient summed over
// both uses, kept tied by parallelize_module (vocab-parallel embedding and
// column-parallel head agree on Shard(0)) and by fully_shard (one group),
// training as the tied model on one rank does; layouts that disagree, and
// a tie split between two fully_shard groups, are refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dtensor/fsdp.h"
#include "dtensor/optim.h"
#include "dtensor/tensor_parallel.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

constexpr int64_t kVocab = 11, kHidden = 6, kBatch = 4, kSeq = 3;

// logits = head(tok(ids)), head.weight tied to tok.weight.
class TiedLM : public nn::Module {
 public:
  explicit TiedLM(const DeviceMesh& mesh) : Module(mesh) {
    tok = register_module("tok", std::make_unique<nn::Embedding>(
                                     mesh, Tensor::randn({kVocab, kHidden}, 3, 0, DType::Float64)));
    head = register_module("head", std::make_unique<nn::Linear>(
                                       mesh, Tensor::zeros({kVocab, kHidden}, DType::Float64),
                                       std::nullopt));
    head->weight() = tok->weight();
  }
  DTensor forward(const DTensor& ids) override { return (*head)((*tok)(ids)); }
  nn::Embedding* tok;
  nn::Linear* head;
};

Tensor tied_ids() {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) v.push_back((i * 7 + 3) % kVocab);
  return Tensor::from_vector(v, Shape{kBatch, kSeq});
}

Tensor tied_targets() {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) v.push_back((i * 5 + 1) % kVocab);
  return Tensor::from_vector(v, Shape{kBatch, kSeq});
}

// Mean cross-entropy of the next-token logits; ids and targets laid out
// with `batch` (Shard(0) on the dp dim for data parallelism).
DTensor tied_loss(TiedLM& m, const Placements& batch) {
  const DTensor logits = m(distribute_tensor(tied_ids(), m.mesh(), batch));
  const DTensor t = distribute_tensor(tied_targets(), m.mesh(), batch);
  return cross_entropy(logits.view({kBatch * kSeq, kVocab}), t.view({kBatch * kSeq}));
}

// Three SGD steps; the losses and the tied weight after them.
std::pair<std::vector<double>, Tensor> tied_train(TiedLM& m, const Placements& batch) {
  std::vector<std::pair<std::string, DTensor>> params;
  for (auto& [name, p] : m.named_parameters()) params.emplace_back(name, *p);
  optim::SGD opt(params, {.lr = 0.5, .momentum = 0.9});
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    DTensor loss = tied_loss(m, batch);
    loss.backward();
    opt.step();
    losses.push_back(loss.full_tensor().item<double>());
  }
  return {losses, m.tok->weight().full_tensor()};
}

class TiedTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

}  // namespace

// One rank: the tie is one parameter, listed once, whose gradient sums both
// uses (the gradient of the same model with the two weights apart, added).
TEST_F(TiedTest, OneParameterOneSummedGradient) {
  World one = World::simulated(1);
  DeviceMesh mesh(one, {1});
  TiedLM tied(mesh);
  ASSERT_EQ(tied.named_parameters().size(), 1u);
  EXPECT_EQ(tied.named_parameters()[0].first, "tok.weight");
  EXPECT_EQ(tied.named_parameters(/*remove_duplicate=*/false).size(), 2u);
  EXPECT_EQ(tied.parameters().size(), 1u);
  tied_loss(tied, {Replicate()}).backward();
  TiedLM apart(mesh);
  apart.head->weight() = apart.tok->weight().detach().clone().requires_grad_();
  ASSERT_EQ(apart.named_parameters().size(), 2u);
  tied_loss(apart, {Replicate()}).backward();
  const Tensor sum = apart.tok->weight().grad()->full_tensor() +
                     apart.head->weight().grad()->full_tensor();
  EXPECT_LE(max_abs_diff(tied.tok->weight().grad()->full_tensor(), sum), 1e-12);
  EXPECT_GT(max_abs_diff(sum, apart.tok->weight().grad()->full_tensor()), 1e-6);
}

// Tensor parallel (vocab-parallel embedding, column-parallel head: both
// Shard(0)) and fully_shard keep the tie and train as one rank does.
TEST_F(TiedTest, TensorParallelAndFullyShardKeepTheTie) {
  World one = World::simulated(1);
  DeviceMesh ref_mesh(one, {1});
  TiedLM ref(ref_mesh);
  const auto [want_losses, want_weight] = tied_train(ref, {Replicate()});

  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  if (!dtensor::testing::takes_part(mesh)) return;
  for (int scheme = 0; scheme < 3; ++scheme) {
    const std::string where = scheme == 0 ? "tp" : scheme == 1 ? "fsdp" : "fsdp+tp";
    TiedLM m(mesh);
    if (scheme != 1)
      parallelize_module(m, 1, {{"tok", RowwiseParallel{}}, {"head", ColwiseParallel{}}});
    if (scheme != 0) fully_shard(m, {.mesh_dims = {0}});
    EXPECT_TRUE(nn::same_parameter(m.tok->weight(), m.head->weight())) << where;
    EXPECT_EQ(m.named_parameters().size(), 1u) << where;
    const auto [losses, weight] = tied_train(m, {Shard(0), Replicate()});
    for (size_t k = 0; k < losses.size(); ++k)
      EXPECT_NEAR(losses[k], want_losses[k], 1e-12) << where << " step " << k;
    EXPECT_LE(max_abs_diff(weight, want_weight), 1e-12) << where;
  }
}

// Disagreeing layouts for the tied weight, and a tie split between two
// fully_shard groups, are errors rather than a silently untied model.
TEST_F(TiedTest, SplitTiesAreRefused) {
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  if (!dtensor::testing::takes_part(mesh)) return;
  {
    TiedLM m(mesh);  // colwise embedding: Shard(1); colwise head: Shard(0)
    const std::string e = error_of(
        [&] { parallelize_module(m, 1, {{"tok", ColwiseParallel{}}, {"head", ColwiseParallel{}}}); });
    EXPECT_NE(e.find("'tok.weight' and 'head.weight' are one (tied) parameter"), std::string::npos)
        << e;
  }
  {
    TiedLM m(mesh);
    fully_shard(*m.head, {.mesh_dims = {0}});
    const std::string e = error_of([&] { fully_shard(m, {.mesh_dims = {0}}); });
    EXPECT_NE(e.find("'tok.weight' is tied to"), std::string::npos) << e;
    EXPECT_NE(e.find("managed by one fully_shard"), std::string::npos) << e;
  }
}
