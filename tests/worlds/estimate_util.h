// What estimate_test.cc (the GPT) and estimate_llama_test.cc (the Llama
// style) share: a model laid out by a parallelism layout and trained two
// steps, as `dtensor train` does, with the phases marked for
// estimate::profile, and the rank-by-rank comparison of two profiles.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "debug/verify.h"
#include "dtensor/estimate.h"
#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"

namespace dtensor::testing {

// How a test lays its model out.
struct EstimateLayout {
  bool tp = false;    // tensor + sequence parallel over the last mesh dim
  bool fsdp = false;  // fully_shard over mesh dim 0 (HSDP: dim 1, replicated over 0)
  bool hsdp = false;
  bool ddp = false;  // replicate over mesh dim 0
  // Activation checkpointing of every block (none when false), keeping
  // the outputs of save_ops (selective when not empty).
  bool checkpoint = false;
  std::vector<std::string> save_ops;
  bool bf16 = false;     // MixedPrecisionPolicy(param bf16, reduce float32)
  bool overlap = false;  // fully_shard's prefetch and async_reduce_scatter
};

// This rank's part of a batch of token ids, made on the rank (as a data
// loader does): a fresh tensor of its local shape, meta in a shape-only world.
inline DTensor estimate_batch(const DeviceMesh& mesh, const Placements& p, const Shape& shape,
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

// Lays `model` out on `mesh` by `l`, materializes it and trains it two
// steps with AdamW and gradient clipping.
inline void lay_out_and_train(models::GPT& model, const DeviceMesh& mesh, const EstimateLayout& l) {
  const models::GPTConfig& config = model.config();
  MixedPrecisionPolicy mp;
  if (l.bf16) {
    mp.param_dtype = DType::BFloat16;
    mp.reduce_dtype = DType::Float32;
  }
  if (l.tp)
    parallelize_module(model, mesh.ndim() - 1, models::gpt_tensor_parallel_plan(config, true));
  std::vector<nn::Module*> blocks;
  for (auto& [name, module] : model.named_modules())
    if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos)
      blocks.push_back(module);
  if (l.checkpoint)
    for (nn::Module* b : blocks) nn::checkpoint_wrapper(*b, nn::CheckpointPolicy{l.save_ops});
  if (l.fsdp) {
    FullyShardOptions o;
    o.mesh_dims = {l.hsdp ? 1 : 0};
    if (l.hsdp) o.replicate_mesh_dims = {0};
    o.mp_policy = mp;
    o.prefetch = l.overlap;
    o.async_reduce_scatter = l.overlap;
    for (nn::Module* b : blocks) fully_shard(*b, o);
    fully_shard(model, o);
  }
  if (l.ddp) {
    ReplicateOptions o;
    o.mesh_dims = {0};
    o.mp_policy = mp;
    replicate(model, o);
  }
  model.materialize();
  std::vector<std::pair<std::string, DTensor>> params;
  for (auto& [name, p] : model.named_parameters()) params.emplace_back(name, *p);
  optim::AdamW optimizer(optim::weight_decay_groups(params), optim::AdamOptions{});
  Placements input(static_cast<size_t>(mesh.ndim()), Replicate());
  input[0] = Shard(0);
  if (l.hsdp) input[1] = Shard(0);
  for (uint64_t step = 0; step < 2; ++step) {
    estimate::phase("forward");
    const Shape shape{config.batch, config.seq};
    const DTensor ids = estimate_batch(mesh, input, shape, config.vocab, 2 * step);
    // The targets as `dtensor train` makes its batches: distribute_tensor
    // of a whole tensor, which is no rank's (a shape-only world makes it
    // meta; each rank counts only its part).
    const DTensor targets =
        distribute_tensor(Tensor::randint(0, config.vocab, shape, 2 * step + 1), mesh, input);
    DTensor loss = models::gpt_loss(model(ids), targets);
    estimate::phase("backward");
    loss.backward();
    estimate::phase("optimizer");
    // A max_norm every real norm exceeds: both worlds scale the gradients.
    optim::clip_grad_norm_(optimizer.params(), 1e-12);
    optimizer.step();
    optimizer.zero_grad();
  }
}

// A collective as a rank saw it, with its group's members.
inline std::string collective_text(const estimate::Profile& p, const RankCollective& c) {
  std::ostringstream os;
  os << to_string(c.kind) << " " << c.dtype << " " << c.bytes << " bytes over [";
  for (int r : p.groups[static_cast<size_t>(c.group)]) os << r << " ";
  os << "]";
  return os.str();
}

// Every rank `real` holds has in `shapes` (every rank's figures) the same.
inline void expect_same_profile(const estimate::Profile& real, const estimate::Profile& shapes) {
  EXPECT_EQ(real.phases, shapes.phases);
  for (const estimate::RankProfile& r : real.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    const estimate::RankProfile& s = shapes.ranks[static_cast<size_t>(r.rank)];
    ASSERT_EQ(s.rank, r.rank);
    // VerifyMode (verify.world_tests) reruns ops on replicated copies in
    // the real world, whose tensors count too; a shape-only world checks
    // nothing. The collectives it leaves alone.
    if (!verify_detail::should_verify()) {
      EXPECT_EQ(r.memory, s.memory) << "peak " << r.memory.peak << " vs " << s.memory.peak
                                    << ", now " << r.memory.now << " vs " << s.memory.now;
    }
    EXPECT_EQ(r.phase_starts, s.phase_starts);
    ASSERT_EQ(r.collectives.size(), s.collectives.size());
    for (size_t i = 0; i < r.collectives.size(); ++i)
      ASSERT_EQ(collective_text(real, r.collectives[i]), collective_text(shapes, s.collectives[i]))
          << "collective " << i;
  }
}

// step(mesh) on `world` and on a World::shape_only of its size (by roles,
// expanded to every rank) gives every rank `world` holds the same figures,
// and the mesh's ranks held tensors and ran collectives. Every process
// runs the step, those holding no rank of the mesh too: clip_grad_norm_
// is collective over the whole world.
template <class Step>
void expect_shape_only_profiles_as_real(const World& world, const Shape& mesh_shape, Step&& step) {
  const DeviceMesh mesh(world, mesh_shape);
  const estimate::Profile real = estimate::profile(world, [&] { step(mesh); });
  const World shape_only = World::shape_only(world.size());
  const DeviceMesh shapes_mesh(shape_only, mesh_shape);
  const estimate::Profile shapes =
      estimate::profile(shape_only, [&] { step(shapes_mesh); }).expanded();
  ASSERT_EQ(static_cast<int>(shapes.ranks.size()), world.size());
  expect_same_profile(real, shapes);
  for (const estimate::RankProfile& r : real.ranks)
    if (mesh.contains(r.rank)) {
      EXPECT_GT(r.memory.peak, 0);
      EXPECT_FALSE(r.collectives.empty());
    }
}

}  // namespace dtensor::testing
