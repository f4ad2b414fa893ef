// A mixed-precision step of the GPT under FSDP x tensor + sequence parallel
// (the main job's layout), on every world: the dtype of every collective
// pinned. FSDP2's policy param_dtype bf16, reduce_dtype f32 promises that
// parameters are gathered in bf16 and that no gradient is reduced in 16
// bits; PyTorch's TP all-reduces gradients in bf16 there
// (pytorch/pytorch#190626), which is what this test rules out.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "dtensor/autograd.h"
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

// AutocastGuard: the products compute in the scope's dtype, the losses in
// float32 (torch 1.13's CPU lists), float64 stays; gradients reach float32 leaves in
// float32 and equal the same computation with the casts written out.
TEST(MixedPrecisionStep, AutocastCastsByPyTorchsLists) {
  World world = dtensor::testing::test_world();
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor xf = Tensor::randn({8, 6}, 1), wf = Tensor::randn({5, 6}, 2);
  const Tensor bf = Tensor::randn({5}, 3);
  const Tensor target = Tensor::randint(0, 5, {8}, 4);
  auto leaves = [&] {
    DTensor x = distribute_tensor(xf, mesh, {Shard(0)}), w = distribute_tensor(wf, mesh, {Replicate()});
    DTensor b = distribute_tensor(bf, mesh, {Replicate()});
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
    return std::array<DTensor, 3>{x, w, b};
  };
  const DTensor t = distribute_tensor(target, mesh, {Shard(0)});
  for (DType half : {DType::BFloat16, DType::Float16}) {
    const std::string where = dtype_name(half);
    auto [x, w, b] = leaves();
    DTensor loss;
    {
      AutocastGuard autocast(half);
      const DTensor y = linear(x, w, b);
      EXPECT_EQ(y.dtype(), half) << where;
      // softmax and the norms keep the 16-bit dtype, as on PyTorch's CPU.
      EXPECT_EQ(softmax(y, 1).dtype(), half) << where;
      EXPECT_EQ(layer_norm(y, {5}, std::nullopt, std::nullopt, 1e-5).dtype(), half) << where;
      const DTensor d = distribute_tensor(Tensor::randn({6, 3}, 5).to(DType::Float64), mesh,
                                          {Replicate()});
      EXPECT_EQ(matmul(x.to(DType::Float64), d).dtype(), DType::Float64) << where;
      {
        AutocastGuard off(half, false);
        EXPECT_EQ(linear(x, w, b).dtype(), DType::Float32) << where;
      }
      loss = cross_entropy(y, t);
      EXPECT_EQ(loss.dtype(), DType::Float32) << where;
      loss.backward();  // inside the scope: backward runs without autocast
    }
    EXPECT_FALSE(autocast_dtype().has_value());
    // The same with the casts written out.
    auto [x2, w2, b2] = leaves();
    DTensor want = cross_entropy(linear(x2.to(half), w2.to(half), b2.to(half)).to(DType::Float32), t);
    want.backward();
    EXPECT_TRUE(equal(loss.full_tensor(), want.full_tensor())) << where;
    for (auto [got, ref] : {std::pair{&x, &x2}, std::pair{&w, &w2}, std::pair{&b, &b2}}) {
      ASSERT_TRUE(got->grad().has_value()) << where;
      EXPECT_EQ(got->grad()->dtype(), DType::Float32) << where;
      EXPECT_TRUE(equal(got->grad()->full_tensor(), ref->grad()->full_tensor())) << where;
    }
  }
  std::string e;
  try {
    AutocastGuard bad(DType::Float32);
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("must be bfloat16 or float16"), std::string::npos) << e;
}
