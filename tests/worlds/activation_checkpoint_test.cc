// Activation checkpointing (nn::checkpoint, nn::checkpoint_wrapper) on
// every world (see world_util.h): recomputing in backward gives bit for bit
// the gradients of keeping, under tensor parallelism and fully_shard on 1-
// to 4-d meshes, with random ops replayed, nested regions and every k-th
// block; it keeps less; a recomputation that diverges throws.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dtensor/fsdp.h"
#include "dtensor/memory.h"
#include "dtensor/models/gpt.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

models::GPTConfig ac_config() {
  return {.batch = 2, .seq = 5, .hidden = 12, .heads = 3, .layers = 3, .vocab = 13};
}

void ac_lay_out(models::GPT& model, const DeviceMesh& mesh) {
  const int nd = mesh.ndim();
  if (nd >= 2) parallelize_module(model, nd - 1, models::gpt_tensor_parallel_plan(true, true));
  FullyShardOptions o;
  o.mesh_dims.clear();
  for (int d = 0; d < std::max(1, nd - 1); ++d) o.mesh_dims.push_back(d);
  for (auto& [name, m] : model.named_modules())
    if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos) fully_shard(*m, o);
  fully_shard(model, o);
}

// The blocks "blocks.i" with i % every == 0.
void checkpoint_blocks(models::GPT& model, int every, const nn::CheckpointPolicy& policy = {}) {
  for (auto& [name, m] : model.named_modules())
    if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos &&
        std::stoi(name.substr(7)) % every == 0)
      nn::checkpoint_wrapper(*m, policy);
}

struct AcRun {
  std::vector<float> loss;
  std::vector<std::vector<float>> grads;
  int64_t activations = 0;  // bytes the graph keeps, summed over held ranks
  int64_t backward_gathers = 0;
  int64_t backward_collectives = 0;
};

AcRun ac_run(const DeviceMesh& mesh, int every, const nn::CheckpointPolicy& policy = {}) {
  const models::GPTConfig c = ac_config();
  models::GPT model(mesh, c, 21);
  ac_lay_out(model, mesh);
  if (every > 0) checkpoint_blocks(model, every, policy);
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 4);
  const Placements batch(static_cast<size_t>(mesh.ndim()), Replicate());
  const DTensor x = distribute_tensor(ids, mesh, batch);
  DTensor loss = models::gpt_loss(model(x), x);
  AcRun r;
  r.activations = graph_memory(loss, model.parameters()).saved_bytes;
  {
    CommDebugMode comm;
    loss.backward();
    r.backward_gathers = comm.count(CollectiveKind::AllGather);
    r.backward_collectives = comm.total_count();
  }
  r.loss = loss.full_tensor().to_vector<float>();
  for (auto& [name, p] : model.named_parameters())
    r.grads.push_back(p->grad()->full_tensor().to_vector<float>());
  return r;
}

}  // namespace

// Every block checkpointed, and every other one: the loss and every
// gradient equal keeping's, bit for bit, and the graph keeps less.
TEST(ActivationCheckpointTest, RecomputingGivesTheGradientsOfKeeping) {
  World world = dtensor::testing::test_world();
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    const AcRun keep = ac_run(mesh, 0);
    for (int every : {1, 2}) {
      const AcRun ac = ac_run(mesh, every);
      EXPECT_EQ(ac.loss, keep.loss) << where << " every " << every;
      ASSERT_EQ(ac.grads.size(), keep.grads.size());
      for (size_t i = 0; i < ac.grads.size(); ++i)
        EXPECT_EQ(ac.grads[i], keep.grads[i]) << where << " every " << every << " gradient " << i;
      EXPECT_LT(ac.activations, keep.activations) << where << " every " << every;
    }
    // fully_shard gathers a block once in backward either way: for its
    // saved parameters, or for the recomputation.
    if (mesh.ndim() == 1) {
      EXPECT_EQ(ac_run(mesh, 1).backward_gathers, keep.backward_gathers) << where;
    }
  }
}

// Selective checkpointing of every block, keeping the outputs of its
// linears and matmuls: the gradients of keeping, bit for bit; the graph
// keeps more than plain checkpointing (those outputs); the recomputation
// runs none of those ops again, so under tensor
// parallelism no more collectives, and fewer where an op moved its input.
TEST(ActivationCheckpointTest, SelectiveCheckpointingKeepsTheListedOutputs) {
  World world = dtensor::testing::test_world();
  const nn::CheckpointPolicy keep_products{{"linear", "matmul"}};
  int fewer = 0, tensor_parallel = 0;
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    const AcRun keep = ac_run(mesh, 0);
    const AcRun full = ac_run(mesh, 1);
    const AcRun selective = ac_run(mesh, 1, keep_products);
    EXPECT_EQ(selective.loss, keep.loss) << where;
    ASSERT_EQ(selective.grads.size(), keep.grads.size());
    for (size_t i = 0; i < keep.grads.size(); ++i)
      EXPECT_EQ(selective.grads[i], keep.grads[i]) << where << " gradient " << i;
    // The kept outputs on top (not less than keeping everywhere: an output
    // no op saves is kept too).
    EXPECT_GT(selective.activations, full.activations) << where;
    EXPECT_LE(selective.backward_collectives, full.backward_collectives) << where;
    fewer += selective.backward_collectives < full.backward_collectives;
    tensor_parallel += mesh.ndim() >= 2;
  }
  // Where a kept op moved its input itself (a gather its rule asked for),
  // the recomputation does not move it again.
  if (tensor_parallel > 0) {
    EXPECT_GT(fewer, 0);
  }
}

// A kept output changed in place before backward, a recomputation that
// runs the kept ops differently, and an op that cannot be kept are refused.
TEST(ActivationCheckpointTest, SelectiveCheckpointingRefusesWhatItCannotReplay) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const DTensor w = distribute_tensor(Tensor::randn({6, 6}, 2), mesh, {Replicate()});
  DTensor x = distribute_tensor(Tensor::randn({8, 6}, 1), mesh, {Shard(0)});
  x.requires_grad_();
  const nn::CheckpointPolicy keep_mm{{"mm"}};
  DTensor kept;
  DTensor y = nn::checkpoint(
      [&](const DTensor& t) {
        kept = mm(t, w);
        return tanh(kept);
      },
      x, keep_mm);
  kept.mul_(2.0);
  std::string e = error_of([&] { sum(y).backward(); });
  EXPECT_NE(e.find("the output of mm that the region kept"), std::string::npos) << e;
  int calls = 0;
  auto diverging = [&](const DTensor& t) {
    return ++calls == 1 ? tanh(mm(t, w)) : tanh(mm(mm(t, w), w));
  };
  DTensor z = nn::checkpoint(diverging, x, keep_mm);
  e = error_of([&] { sum(z).backward(); });
  EXPECT_NE(e.find("the recomputation ran mm where the first run ran no more ops it keeps"),
            std::string::npos)
      << e;
  e = error_of([&] { nn::checkpoint([](const DTensor& t) { return t; }, x, {{"relu"}}); });
  EXPECT_NE(e.find("names \"relu\", whose output a region cannot keep; expected some of: mm"),
            std::string::npos)
      << e;
}

// A region drawing random numbers (dropout without a seed) replays its
// draws; regions nest; the generator continues as if nothing was rerun.
TEST(ActivationCheckpointTest, RandomOpsReplayAndRegionsNest) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor full = Tensor::randn({6, 5}, 8);
  auto inner = [](const DTensor& t) { return tanh(dropout(t * 2.0, 0.3)); };
  auto outer = [&](const DTensor& t) {
    return exp(nn::checkpoint(inner, sigmoid(t))) * dropout(t, 0.5);
  };
  std::vector<std::vector<float>> grads;
  std::vector<RngState> after;
  for (bool ac : {false, true}) {
    manual_seed(99);
    DTensor x = distribute_tensor(full, mesh, {Shard(0), Shard(1)});
    x.requires_grad_();
    DTensor y = ac ? nn::checkpoint(outer, x) : outer(x);
    sum(y * y).backward();
    grads.push_back(x.grad()->full_tensor().to_vector<float>());
    after.push_back(get_rng_state());
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(after[0], after[1]);
}

// A function that saves something else the second time is refused by name.
TEST(ActivationCheckpointTest, ADivergingRecomputationThrows) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  int calls = 0;
  auto fn = [&](const DTensor& t) { return ++calls == 1 ? tanh(t) : tanh(exp(t)); };
  DTensor x = distribute_tensor(Tensor::randn({8}, 1), mesh, {Shard(0)});
  x.requires_grad_();
  DTensor y = nn::checkpoint(fn, x);
  const std::string e = error_of([&] { sum(y).backward(); });
  EXPECT_NE(
      e.find("running the region again saved 2 tensors for backward where its first run saved 1"),
      std::string::npos)
      << e;
}

// The memory report counts a checkpointed block's input, not what its
// ops saved.
TEST(ActivationCheckpointTest, TheMemoryReportShowsTheSaving) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  std::vector<int64_t> activations;
  for (bool ac : {false, true}) {
    const models::GPTConfig c = ac_config();
    models::GPT model(mesh, c, 21);
    ac_lay_out(model, mesh);
    if (ac) checkpoint_blocks(model, 1);
    MemoryTracker tracker(model);
    const DTensor x =
        distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 4), mesh, {Shard(0)});
    DTensor loss = models::gpt_loss(model(x), x);
    tracker.after_forward(loss);
    activations.push_back(tracker.report().ranks.front().activations);
  }
  EXPECT_LT(activations[1], activations[0]);
  EXPECT_GT(activations[1], 0);
}
