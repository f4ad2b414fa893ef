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
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "debug/verify.h"
#include "dtensor/estimate.h"
#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"
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

// This rank's part of a batch of token ids, made on the rank (as a data
// loader does): a fresh tensor of its local shape, meta in a shape-only world.
DTensor llama_estimate_batch(const DeviceMesh& mesh, const Placements& p, const Shape& shape,
                             int64_t vocab, uint64_t seed) {
  const DTensorSpec spec(mesh, p, shape, DType::Int64);
  if (mesh.world().is_shape_only()) return DTensor::meta(spec);
  const Tensor full = Tensor::randint(0, vocab, shape, seed);
  LocalTensor local;
  for (int rank : mesh.held_ranks()) {
    const ShardExtent e = *spec.extent_of_rank(rank);
    Tensor t = full;
    for (size_t d = 0; d < shape.size(); ++d)
      t = t.narrow(static_cast<int64_t>(d), e.global_offset[d], e.local_shape[d]);
    local.set(rank, t.clone());
  }
  return DTensor(spec, std::move(local));
}

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
  const int tp = mesh.ndim() - 1;
  MixedPrecisionPolicy mp;
  if (c.bf16) {
    mp.param_dtype = DType::BFloat16;
    mp.reduce_dtype = DType::Float32;
  }
  if (c.tp) parallelize_module(*model, tp, models::gpt_tensor_parallel_plan(config, true));
  std::vector<nn::Module*> blocks;
  for (auto& [name, module] : model->named_modules())
    if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos)
      blocks.push_back(module);
  if (c.checkpoint == 1)
    for (nn::Module* b : blocks) nn::checkpoint_wrapper(*b);
  if (c.checkpoint == 2)
    for (nn::Module* b : blocks)
      nn::checkpoint_wrapper(*b, nn::CheckpointPolicy{{"linear", "scaled_dot_product_attention"}});
  if (c.fsdp) {
    FullyShardOptions o;
    o.mesh_dims = {c.hsdp ? 1 : 0};
    if (c.hsdp) o.replicate_mesh_dims = {0};
    o.mp_policy = mp;
    o.prefetch = c.overlap;
    o.async_reduce_scatter = c.overlap;
    for (nn::Module* b : blocks) fully_shard(*b, o);
    fully_shard(*model, o);
  }
  if (c.ddp) {
    ReplicateOptions o;
    o.mesh_dims = {0};
    o.mp_policy = mp;
    replicate(*model, o);
  }
  model->materialize();
  std::vector<std::pair<std::string, DTensor>> params;
  for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, *p);
  optim::AdamW optimizer(optim::weight_decay_groups(params), optim::AdamOptions{});
  Placements input(static_cast<size_t>(mesh.ndim()), Replicate());
  input[0] = Shard(0);
  if (c.hsdp) input[1] = Shard(0);
  for (uint64_t step = 0; step < 2; ++step) {
    estimate::phase("forward");
    const Shape shape{config.batch, config.seq};
    const DTensor ids = llama_estimate_batch(mesh, input, shape, config.vocab, 2 * step);
    // The targets as `dtensor train` makes its batches: distribute_tensor
    // of a whole tensor (meta in a shape-only world).
    const DTensor targets =
        distribute_tensor(Tensor::randint(0, config.vocab, shape, 2 * step + 1), mesh, input);
    DTensor loss = models::gpt_loss((*model)(ids), targets);
    estimate::phase("backward");
    loss.backward();
    estimate::phase("optimizer");
    // A max_norm every real norm exceeds: both worlds scale the gradients.
    optim::clip_grad_norm_(optimizer.params(), 1e-12);
    optimizer.step();
    optimizer.zero_grad();
  }
}

std::string llama_collective_text(const estimate::Profile& p, const RankCollective& c) {
  std::ostringstream os;
  os << to_string(c.kind) << " " << c.dtype << " " << c.bytes << " bytes over [";
  for (int r : p.groups[static_cast<size_t>(c.group)]) os << r << " ";
  os << "]";
  return os.str();
}

// Every rank `real` holds has in `shapes` the same figures.
void expect_same_llama_profile(const estimate::Profile& real, const estimate::Profile& shapes) {
  EXPECT_EQ(real.phases, shapes.phases);
  for (const estimate::RankProfile& r : real.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    const estimate::RankProfile& s = shapes.ranks[static_cast<size_t>(r.rank)];
    ASSERT_EQ(s.rank, r.rank);
    // VerifyMode (verify.world_tests) reruns ops on replicated copies in
    // the real world, whose tensors count too; the collectives it leaves alone.
    if (!verify_detail::should_verify()) {
      EXPECT_EQ(r.memory, s.memory) << "peak " << r.memory.peak << " vs " << s.memory.peak
                                    << ", now " << r.memory.now << " vs " << s.memory.now;
    }
    EXPECT_EQ(r.phase_starts, s.phase_starts);
    ASSERT_EQ(r.collectives.size(), s.collectives.size());
    for (size_t i = 0; i < r.collectives.size(); ++i)
      ASSERT_EQ(llama_collective_text(real, r.collectives[i]),
                llama_collective_text(shapes, s.collectives[i]))
          << "collective " << i;
  }
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
    const DeviceMesh mesh(world, c.mesh);
    // Every process runs the step, those holding no rank of the mesh too:
    // clip_grad_norm_ is collective over the whole world.
    const estimate::Profile real = estimate::profile(world, [&] { train_llama(mesh, c); });
    const World shape_only = World::shape_only(world.size());
    const DeviceMesh shapes_mesh(shape_only, c.mesh);
    // By roles (the default), each rank given its stand-in's figures.
    const estimate::Profile shapes =
        estimate::profile(shape_only, [&] { train_llama(shapes_mesh, c); }).expanded();
    ASSERT_EQ(static_cast<int>(shapes.ranks.size()), world.size());
    expect_same_llama_profile(real, shapes);
    // Something was measured: the mesh's ranks held tensors and ran collectives.
    for (const estimate::RankProfile& r : real.ranks)
      if (mesh.contains(r.rank)) {
        EXPECT_GT(r.memory.peak, 0);
        EXPECT_FALSE(r.collectives.empty());
      }
    ++ran;
  }
  EXPECT_GT(ran, 0);
}
