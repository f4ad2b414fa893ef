// The memory report (memory.h) on every world (see world_util.h): its
// categories are the exact bytes of each rank's shards, on 1- to 4-d
// meshes under tensor parallelism and fully_shard, and its peaks bound them.
#include "dtensor/memory.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"
#include "tensor/allocator.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

int64_t shard_bytes(const DTensor& t, int rank) {
  return t.to_local(rank).numel() * static_cast<int64_t>(itemsize(t.dtype()));
}

void lay_out_for_memory(models::GPT& model, const DeviceMesh& mesh) {
  const int nd = mesh.ndim();
  if (nd >= 2) parallelize_module(model, nd - 1, models::gpt_tensor_parallel_plan(true, true));
  FullyShardOptions o;
  o.mesh_dims.clear();
  for (int d = 0; d < std::max(1, nd - 1); ++d) o.mesh_dims.push_back(d);
  fully_shard(model, o);
}

}  // namespace

// After an AdamW step: parameters and gradients are each rank's shard
// bytes, the optimizer state twice that (exp_avg, exp_avg_sq); the
// activations are what the graph kept, less the parameters.
TEST(MemoryReportTest, CategoriesAreEachRanksExactBytes) {
  World world = dtensor::testing::test_world();
  const models::GPTConfig c{
      .batch = 2, .seq = 5, .hidden = 12, .heads = 3, .layers = 2, .vocab = 13};
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 3);
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    models::GPT model(mesh, c, 5);
    lay_out_for_memory(model, mesh);
    optim::AdamW opt(model.parameters(), {.lr = 1e-3});
    MemoryTracker tracker(model, &opt);
    const Placements batch(static_cast<size_t>(mesh.ndim()), Replicate());
    const DTensor x = distribute_tensor(ids, mesh, batch);
    DTensor loss = models::gpt_loss(model(x), x);
    tracker.after_forward(loss);
    const GraphMemory all = graph_memory(loss);
    const GraphMemory without = graph_memory(loss, model.parameters());
    EXPECT_LE(without.saved_bytes, all.saved_bytes) << where;
    EXPECT_GT(without.saved_bytes, 0) << where;
    loss.backward();
    opt.step();
    const MemoryReport r = tracker.report();
    ASSERT_EQ(r.ranks.size(), mesh.held_ranks().size()) << where;
    int64_t sum = 0;
    for (const RankMemory& m : r.ranks) {
      int64_t params = 0;
      for (const DTensor& p : model.parameters()) params += shard_bytes(p, m.rank);
      EXPECT_EQ(m.parameters, params) << where << " rank " << m.rank;
      EXPECT_EQ(m.gradients, params) << where << " rank " << m.rank;
      EXPECT_EQ(m.optimizer_state, 2 * params) << where << " rank " << m.rank;
      for (const auto& [rank, bytes] : without.saved_bytes_by_rank)
        if (rank == m.rank) {
          EXPECT_EQ(m.activations, bytes) << where << " rank " << m.rank;
        }
      sum += m.parameters + m.gradients + m.optimizer_state;
    }
    // All of it was alive at once after the step.
    EXPECT_GE(r.process.peak_allocated, sum) << where;
    EXPECT_GE(r.process.peak_reserved, r.process.peak_allocated) << where;
  }
}

// A weight used twice (tied) is counted once; an optimizer left out counts
// no state.
TEST(MemoryReportTest, TiedParametersCountOnce) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  struct Tied : nn::Module {
    explicit Tied(const DeviceMesh& m) : Module(m) {
      a = register_module("a", std::make_unique<nn::Embedding>(m, 8, 4));
      b = register_module("b", std::make_unique<nn::Linear>(m, 4, 8, false));
      b->weight() = a->weight();
    }
    DTensor forward(const DTensor& x) override { return (*b)((*a)(x)); }
    nn::Embedding* a;
    nn::Linear* b;
  };
  Tied t(mesh);
  MemoryTracker tracker(t);
  const MemoryReport r = tracker.report();
  for (const RankMemory& m : r.ranks) {
    EXPECT_EQ(m.parameters, 8 * 4 * 4);
    EXPECT_EQ(m.optimizer_state, 0);
    EXPECT_EQ(m.gradients, 0);
  }
  EXPECT_NE(r.table().find("parameters"), std::string::npos);
  EXPECT_NE(r.json().find("\"parameters\":128"), std::string::npos) << r.json();
}

// fully_shard's unsharded parameters and communication buffers count
// apart (MemoryScope): after forward the root's unsharded values are
// exactly the live bytes of the category (each storage's block); after
// backward nothing of either is left, with the reduce_scatter blocking or
// in flight; the peaks hold at least the values and the gathered flat
// buffer. FSDP on a 1-d mesh and FSDP x TP on a 2-d one.
TEST(MemoryReportTest, FullyShardsBuffersCountApart) {
  World world = dtensor::testing::test_world();
  const models::GPTConfig c{
      .batch = 2, .seq = 5, .hidden = 12, .heads = 3, .layers = 2, .vocab = 13};
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 3);
  for (const Shape& shape : {Shape{4}, Shape{2, 2}}) {
    for (bool async : {false, true}) {
      DeviceMesh mesh(world, shape);
      if (!dtensor::testing::takes_part(mesh)) continue;
      const std::string where = "mesh " + mesh.to_string() + (async ? " async" : "");
      models::GPT model(mesh, c, 5);
      if (mesh.ndim() == 2) parallelize_module(model, 1, models::gpt_tensor_parallel_plan(true, true));
      FullyShardOptions o;
      o.async_reduce_scatter = async;
      fully_shard(model, o);  // one group, the root: unsharded until after backward
      // Each held rank's unsharded value of every parameter (Replicate on dp).
      int64_t values = 0, value_blocks = 0;
      for (const DTensor& p : model.parameters()) {
        Placements u = p.placements();
        u[0] = Replicate();
        const DTensorSpec spec = p.spec().with_placements(u);
        for (int rank : mesh.held_ranks()) {
          const int64_t bytes = spec.extent_of_rank(rank)->local_shape.product() *
                                static_cast<int64_t>(itemsize(p.dtype()));
          values += bytes;
          value_blocks += static_cast<int64_t>(detail::block_size(static_cast<size_t>(bytes)));
        }
      }
      MemoryTracker tracker(model);
      const MemoryStats before = memory_stats();
      const Placements batch(static_cast<size_t>(mesh.ndim()), Replicate());
      const DTensor x = distribute_tensor(ids, mesh, batch);
      DTensor loss = models::gpt_loss(model(x), x);
      const MemoryStats forward = memory_stats();
      EXPECT_EQ(forward.unsharded_parameters - before.unsharded_parameters, value_blocks)
          << where;
      loss.backward();
      const MemoryStats backward = memory_stats();
      EXPECT_EQ(backward.unsharded_parameters, before.unsharded_parameters) << where;
      EXPECT_EQ(backward.communication_buffers, before.communication_buffers) << where;
      const MemoryReport r = tracker.report();
      EXPECT_GE(r.process.peak_unsharded_parameters, value_blocks) << where;
      // The gathered flat buffer holds every value (and the padding).
      EXPECT_GE(r.process.peak_communication_buffers, values) << where;
      EXPECT_NE(r.table().find("unsharded parameters"), std::string::npos) << r.table();
      EXPECT_NE(r.json().find("\"peak_communication_buffers\":"), std::string::npos);
    }
  }
}
