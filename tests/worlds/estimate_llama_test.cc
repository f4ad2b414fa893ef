// estimate::profile (estimate.h) of the Llama style of models/gpt.h
// (RMSNorm, SwiGLU, rotary positions, causal scaled_dot_product_attention,
// grouped-query attention) on every world (see world_util.h), as
// estimate_test.cc does for GPT: the same program — the model built on the
// meta device, laid out, trained two steps with AdamW and gradient
// clipping — run on this test's world and on a World::shape_only of its
// size gives every rank this process holds the same collectives (kind,
// dtype, bytes, group members, order, phase) and the same memory (held at
// the end, peak, fully_shard's unsharded parameters and buffers), for
// FSDP, HSDP, DDP, tensor and sequence parallelism, activation
// checkpointing (whole and selective), bf16 mixed precision and
// fully_shard's prefetch and async reduce_scatter. So `dtensor estimate
// --model llama` reports what the real run holds and sends.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dtensor/models/gpt.h"
#include "worlds/estimate_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

struct LlamaEstimateCase {
  const char* name;
  Shape mesh;
  bool tp = false;    // tensor + sequence parallel over the last mesh dim
  bool fsdp = false;  // fully_shard over mesh dim 0 (HSDP: dim 1, replicated over 0)
  bool hsdp = false;
  bool ddp = false;      // replicate over mesh dim 0
  int checkpoint = 0;    // 1: whole blocks; 2: keeping the linears' and attention's outputs
  bool bf16 = false;     // MixedPrecisionPolicy(param bf16, reduce float32)
  int64_t kv_heads = 2;  // of 4 query heads
  bool overlap = false;  // fully_shard's prefetch and async_reduce_scatter
};

void train_llama(const DeviceMesh& mesh, const LlamaEstimateCase& c) {
  models::GPTConfig config;
  config.batch = 8;
  config.seq = 8;
  config.hidden = 32;
  config.heads = 4;
  config.kv_heads = c.kv_heads;
  config.ffn = 44;  // not 4 x hidden
  config.layers = 2;
  config.vocab = 62;  // uneven over 4 (16, 16, 16, 14) and 8 tp ranks
  config.style = models::ModelStyle::Llama;
  std::unique_ptr<models::GPT> model;
  {
    nn::MetaDeviceGuard meta;
    model = std::make_unique<models::GPT>(mesh, config, 11);
  }
  dtensor::testing::EstimateLayout l;
  l.tp = c.tp;
  l.fsdp = c.fsdp;
  l.hsdp = c.hsdp;
  l.ddp = c.ddp;
  l.checkpoint = c.checkpoint > 0;
  if (c.checkpoint == 2) l.save_ops = {"linear", "scaled_dot_product_attention"};
  l.bf16 = c.bf16;
  l.overlap = c.overlap;
  dtensor::testing::lay_out_and_train(*model, mesh, l);
}

std::vector<LlamaEstimateCase> llama_estimate_cases() {
  return {
      {"fsdp", {4}, false, true},
      {"fsdp_mqa", {4}, false, true, false, false, 0, false, 1},
      {"tp", {4}, true, false, false, false, 0, false, 4},
      {"ddp", {4}, false, false, false, true},
      {"fsdp_tp", {2, 2}, true, true},
      {"fsdp_tp_checkpoint", {2, 2}, true, true, false, false, 1},
      {"fsdp_tp_selective_checkpoint", {2, 2}, true, true, false, false, 2},
      {"fsdp_tp_bf16", {2, 2}, true, true, false, false, 0, true},
      {"hsdp_tp", {2, 2, 2}, true, true, true},
      {"fsdp_tp_8", {4, 2}, true, true, false, false, 1},
      {"fsdp_overlap", {4}, false, true, false, false, 0, false, 2, true},
  };
}

}  // namespace

TEST(EstimateLlamaTest, ShapeOnlyWorldProfilesEveryRankExactly) {
  const World world = dtensor::testing::test_world();
  int ran = 0;
  for (const LlamaEstimateCase& c : llama_estimate_cases()) {
    if (c.mesh.product() > world.size()) continue;
    SCOPED_TRACE(c.name);
    dtensor::testing::expect_shape_only_profiles_as_real(
        world, c.mesh, [&](const DeviceMesh& mesh) { train_llama(mesh, c); });
    ++ran;
  }
  EXPECT_GT(ran, 0);
}
