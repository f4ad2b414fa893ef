// A mixed-precision step of the GPT under FSDP x tensor + sequence parallel
// (the main job's layout), on every world: the dtype of every collective
// pinned. FSDP2's policy param_dtype bf16, reduce_dtype f32 promises that
// parameters are gathered in bf16 and that no gradient is reduced in 16
// bits; PyTorch's TP all-reduces gradients in bf16 there
// (pytorch/pytorch#190626), which is what this test rules out.
#include <gtest/gtest.h>

#include <string>

#include "dtensor/debug.h"
#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/tensor_parallel.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

models::GPTConfig small_config() {
  models::GPTConfig c;
  c.batch = 4;
  c.seq = 8;
  c.hidden = 16;
  c.heads = 2;
  c.layers = 2;
  c.vocab = 32;
  return c;
}

// The GPT on `mesh` (dp, tp) as `dtensor train --mixed-precision` lays it out.
std::unique_ptr<models::GPT> mixed_gpt(const DeviceMesh& mesh, DType half) {
  auto model = std::make_unique<models::GPT>(mesh, small_config(), 7);
  MixedPrecisionPolicy mp;
  mp.param_dtype = half;
  mp.reduce_dtype = DType::Float32;
  ParallelizeOptions tp;
  tp.reduce_dtype = DType::Float32;
  parallelize_module(*model, 1, models::gpt_tensor_parallel_plan(true), tp);
  FullyShardOptions o;
  o.mesh_dims = {0};
  o.mp_policy = mp;
  for (auto& [name, module] : model->named_modules())
    if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos)
      fully_shard(*module, o);
  fully_shard(*model, o);
  return model;
}

std::string listing(const std::vector<CollectiveRecord>& records) {
  std::string out;
  for (const CollectiveRecord& r : records) out += "\n  " + to_string(r);
  return out;
}

}  // namespace

TEST(MixedPrecisionStep, EveryCollectiveOfAnFsdpTpStepHasThePolicysDtype) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  for (DType half : {DType::BFloat16, DType::Float16}) {
    const std::string where = dtype_name(half);
    auto model = mixed_gpt(mesh, half);
    const Placements batch{Shard(0), Replicate()};
    const DTensor ids =
        distribute_tensor(Tensor::randint(0, 32, {4, 8}, 1), mesh, batch);
    const DTensor targets =
        distribute_tensor(Tensor::randint(0, 32, {4, 8}, 2), mesh, batch);
    std::vector<CollectiveRecord> forward, backward;
    DTensor loss;
    {
      CommDebugMode mode;
      loss = models::gpt_loss((*model)(ids), targets);
      forward = mode.collectives();
    }
    EXPECT_EQ(loss.dtype(), half) << where;
    {
      CommDebugMode mode;
      loss.backward();
      backward = mode.collectives();
    }
    // Forward: the parameters' all-gathers over dp, and every activation
    // the tensor-parallel plan moves, in the 16-bit type (the vocabulary-
    // parallel loss reduces its float32 statistics: its own, not a
    // gradient). Backward: the re-gathers of the parameters in 16 bits;
    // every reduction (the gradients' reduce-scatters over dp, the
    // all-reduces and reduce-scatters of the activations' gradients over
    // tp) in float32.
    int gathers = 0, reductions = 0;
    for (const CollectiveRecord& r : forward) {
      if (r.kind == CollectiveKind::AllGather && r.mesh_dim == 0) {
        EXPECT_EQ(r.dtype, half) << where << " forward: " << to_string(r) << listing(forward);
        ++gathers;
      }
    }
    for (const CollectiveRecord& r : backward) {
      if (r.kind == CollectiveKind::AllReduce || r.kind == CollectiveKind::ReduceScatter) {
        EXPECT_EQ(r.dtype, DType::Float32) << where << " backward: " << to_string(r)
                                           << listing(backward);
        ++reductions;
      } else if (r.kind == CollectiveKind::AllGather && r.mesh_dim == 0) {
        EXPECT_EQ(r.dtype, half) << where << " backward: " << to_string(r) << listing(backward);
      }
    }
    EXPECT_EQ(gathers, 3) << where << listing(forward);  // two blocks and the root
    EXPECT_GE(reductions, 3) << where << listing(backward);
    // The leaves and their gradients stay float32 (the master weights).
    for (auto& [name, p] : model->named_parameters()) {
      EXPECT_EQ(p->dtype(), DType::Float32) << where << " " << name;
      ASSERT_TRUE(p->grad().has_value()) << where << " " << name;
      EXPECT_EQ(p->grad()->dtype(), DType::Float32) << where << " " << name;
    }
  }
}
