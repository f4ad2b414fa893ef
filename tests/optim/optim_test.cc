// Unit tests of optim.h: learning-rate schedules against PyTorch's closed
// forms and its recursive (chainable) updates, the Optimizer base's
// bookkeeping (state by index and name, skipped parameters, versions,
// non-contiguous shards, zero_grad) and its errors. The numerics of the
// updates on distributed layouts are in tests/worlds/optim_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "dtensor/optim.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::optim;
using dtensor::testing::expect_error;

namespace {

class OptimTest : public ::testing::Test {
 protected:
  World world = World::simulated(4);
  DeviceMesh mesh{world, {4}};

  DTensor leaf(const Shape& shape, uint64_t seed, const Placements& pl = {Shard(0)},
               DType dtype = DType::Float32) {
    DTensor p = distribute_tensor(Tensor::randn(shape, seed, 0, dtype), mesh, pl);
    p.requires_grad_();
    return p;
  }
};

// A stand-in optimizer with no parameters: schedulers only need its lr.
std::unique_ptr<SGD> lr_holder(double lr) {
  return std::make_unique<SGD>(std::vector<DTensor>{}, SGDOptions{.lr = lr});
}

}  // namespace

// LinearLR: PyTorch's closed form base*(s + (e-s)*min(t,T)/T), and its
// recursive update lr_t = lr_{t-1} * (1 + (e-s) / (T*s + (t-1)*(e-s))).
TEST(LRSchedulerTest, LinearLRMatchesClosedAndRecursiveForms) {
  auto opt = lr_holder(0.1);
  LinearLR sched(*opt, 0.25, 1.0, 4);
  const double want[] = {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1};
  double recursive = 0.1 * 0.25;
  for (int t = 0; t < 7; ++t) {
    if (t > 0) {
      if (t <= 4) recursive *= 1 + 0.75 / (4 * 0.25 + (t - 1) * 0.75);
      sched.step();
    }
    EXPECT_NEAR(sched.get_last_lr(), want[t], 1e-15) << "epoch " << t;
    EXPECT_NEAR(opt->lr(), recursive, 1e-15) << "epoch " << t;
    EXPECT_EQ(sched.last_epoch(), t);
  }
}

// CosineAnnealingLR against PyTorch's recursive get_lr over two periods.
TEST(LRSchedulerTest, CosineAnnealingLRMatchesPyTorchRecursion) {
  const double base = 0.2, eta_min = 0.01;
  const int64_t t_max = 6;
  auto opt = lr_holder(base);
  CosineAnnealingLR sched(*opt, t_max, eta_min);
  double lr = base;
  const double pi = std::numbers::pi;
  for (int64_t t = 0; t <= 2 * t_max; ++t) {
    if (t > 0) {
      if ((t - 1 - t_max) % (2 * t_max) == 0)
        lr = lr + (base - eta_min) * (1 - std::cos(pi / t_max)) / 2;
      else
        lr = (1 + std::cos(pi * t / t_max)) / (1 + std::cos(pi * (t - 1) / t_max)) * (lr - eta_min) +
             eta_min;
      sched.step();
    }
    const double closed = eta_min + (base - eta_min) * (1 + std::cos(pi * t / t_max)) / 2;
    EXPECT_DOUBLE_EQ(opt->lr(), closed) << "epoch " << t;
    EXPECT_NEAR(opt->lr(), lr, 1e-12) << "epoch " << t;
  }
  EXPECT_NEAR(sched.lr_at(t_max), eta_min, 1e-15);
}

TEST(LRSchedulerTest, LambdaLRScalesTheInitialLr) {
  auto opt = lr_holder(0.5);
  LambdaLR sched(*opt, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
  EXPECT_EQ(opt->lr(), 0.5);
  sched.step();
  sched.step();
  EXPECT_DOUBLE_EQ(opt->lr(), 0.5 / 3);
}

// Linear warm-up then cosine in one line: the pieces start from the
// optimizer's initial lr (not the lr the first one set), and the second
// restarts its epochs at the milestone, as PyTorch's SequentialLR.
TEST(LRSchedulerTest, SequentialLRWarmUpThenCosine) {
  auto opt = lr_holder(1.0);
  SequentialLR sched(*opt, {LinearLR::make(*opt, 0.1, 1.0, 3), CosineAnnealingLR::make(*opt, 4)},
                     {3});
  const double pi = std::numbers::pi;
  std::vector<double> want = {0.1, 0.4, 0.7};
  for (int t = 0; t <= 6; ++t) want.push_back((1 + std::cos(pi * t / 4)) / 2);
  for (size_t e = 0; e < want.size(); ++e) {
    if (e > 0) sched.step();
    EXPECT_NEAR(opt->lr(), want[e], 1e-15) << "epoch " << e;
  }
  EXPECT_EQ(opt->initial_lr(), 1.0);
}

TEST(LRSchedulerTest, ErrorsNameTheRule) {
  auto opt = lr_holder(1.0);
  expect_error([&] { LinearLR(*opt, 0.0); }, {"LinearLR", "0 < start_factor <= 1", "got 0"});
  expect_error([&] { LinearLR(*opt, 0.5, 1.0, 0); }, {"total_iters >= 1", "got 0"});
  expect_error([&] { CosineAnnealingLR(*opt, 0); }, {"T_max >= 1"});
  expect_error([&] { SequentialLR(*opt, {LinearLR::make(*opt), LinearLR::make(*opt)}, {}); },
               {"expected 1 milestones for 2 schedulers, got 0"});
}

// State is reachable by index and by name; buffers have the parameter's
// spec; a parameter without a gradient is skipped (no state, no change).
TEST_F(OptimTest, StateByIndexAndNameAndSkippedParameters) {
  DTensor w = leaf({6, 3}, 1), b = leaf({3}, 2, {Replicate()});
  AdamW opt({{"w", w}, {"b", b}}, {.lr = 0.1, .amsgrad = true});
  const Tensor b_before = b.full_tensor();
  w.set_grad(distribute_tensor(Tensor::ones({6, 3}), mesh, {Shard(0)}));
  opt.step();
  EXPECT_EQ(opt.state("w").step, 1);
  EXPECT_EQ(opt.state(0).buffers.size(), 3u);
  EXPECT_EQ(opt.state("w").buffer("exp_avg").spec(), w.spec());
  EXPECT_EQ(opt.state("b").step, 0);
  EXPECT_TRUE(opt.state("b").buffers.empty());
  EXPECT_TRUE(equal(b.full_tensor(), b_before));
  EXPECT_EQ(opt.name(1), "b");
  expect_error([&] { opt.state("c"); }, {"no parameter named 'c'"});
  expect_error([&] { opt.state("b").buffer("exp_avg"); }, {"no buffer 'exp_avg'", "none"});
  expect_error([&] { opt.state(2); }, {"index 2 out of range for 2 parameters"});
  opt.zero_grad();
  EXPECT_FALSE(w.grad().has_value());
}

// The update is in place: the model's DTensor (a copy sharing storage)
// sees it, and every shard's storage version moves (autograd's check of
// saved tensors relies on it).
TEST_F(OptimTest, StepIsInPlaceAndBumpsVersions) {
  DTensor w = leaf({8}, 3);
  SGD opt({w}, {.lr = 0.5});
  std::vector<uint64_t> before;
  for (const auto& [rank, t] : w.local().shards()) before.push_back(t.storage()->version());
  const Tensor full = w.full_tensor();
  w.set_grad(distribute_tensor(Tensor::ones({8}), mesh, {Shard(0)}));
  opt.step();
  size_t k = 0;
  for (const auto& [rank, t] : w.local().shards()) EXPECT_EQ(t.storage()->version(), before[k++] + 1);
  EXPECT_TRUE(equal(w.full_tensor(), full - 0.5));
}

// Non-contiguous shards (from_local of transposed views) are updated
// through a copy written back into the caller's memory.
TEST_F(OptimTest, NonContiguousShardsAreWrittenBack) {
  std::vector<Tensor> bases;
  for (int r = 0; r < 4; ++r) bases.push_back(Tensor::randn({3, 2}, 7));
  DTensor w = from_local([&](int r) { return bases[r].t(); }, mesh, {Replicate()},
                         {.requires_grad = true});
  ASSERT_FALSE(w.to_local(0).is_contiguous());
  SGD opt({w}, {.lr = 1.0, .momentum = 0.9});
  w.set_grad(distribute_tensor(Tensor::full({2, 3}, 0.25), mesh, {Replicate()}));
  const Tensor want = bases[0].t() - 0.25;
  opt.step();
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(equal(bases[r].t(), want)) << "rank " << r;
}

TEST_F(OptimTest, ConstructorErrorsNameTheParameter) {
  DTensor plain = distribute_tensor(Tensor::randn({4}, 1), mesh, {Shard(0)});
  expect_error([&] { SGD({plain}, {}); }, {"parameter 0", "a leaf that requires grad"});
  DTensor ints = distribute_tensor(Tensor::arange(4), mesh, {Shard(0)});
  expect_error([&] { SGD({ints}, {}); }, {"parameter 0", "floating dtype", "int64"});
  DTensor half = distribute_tensor(Tensor::randn({4}, 1, 0, DType::BFloat16), mesh, {Shard(0)});
  half.requires_grad_();
  expect_error([&] { AdamW({half}, {}); }, {"parameter 0", "bfloat16", "MixedPrecisionPolicy"});
  DTensor partial = distribute_tensor(Tensor::randn({4}, 1), mesh, {Replicate()});
  partial = DTensor(DTensorSpec(mesh, {Partial()}, Shape{4}, DType::Float32), partial.local());
  partial.requires_grad_();
  expect_error([&] { AdamW({partial}, {}); }, {"Shard/Replicate placements", "Partial"});
  DTensor w = leaf({4}, 2);
  expect_error([&] { SGD({w}, {.nesterov = true}); }, {"nesterov needs momentum > 0"});
  expect_error([&] { SGD({w}, {.lr = -1}); }, {"lr >= 0", "-1"});
  expect_error([&] { AdamW({w}, {.betas = {1.0, 0.9}}); }, {"AdamW", "betas.first", "got 1"});
  expect_error([&] { SGD({{"a", w}, {"a", leaf({4}, 3)}}, {}); }, {"name 'a' given twice"});
  expect_error([&] { SGD({{"a", w}, {"b", w}}, {}); }, {"parameter 1 'b'", "is parameter 0 again"});
}

// Defaults are PyTorch's: AdamW decays by 1e-2, Adam not at all.
TEST_F(OptimTest, AdamAndAdamWDefaults) {
  DTensor w = leaf({4}, 5);
  EXPECT_EQ(AdamW({w}, {}).weight_decay(), 1e-2);
  EXPECT_EQ(Adam({w}, {}).weight_decay(), 0.0);
  EXPECT_EQ(AdamW({w}, {}).lr(), 1e-3);
}

// clip_grad_norm_: the norm when nothing is clipped leaves gradients
// alone; a non-finite norm throws only when asked to.
TEST_F(OptimTest, ClipGradNormNonFinite) {
  DTensor w = leaf({4}, 6);
  Tensor g = Tensor::ones({4});
  g.data_ptr<float>()[2] = INFINITY;
  w.set_grad(distribute_tensor(g, mesh, {Shard(0)}));
  expect_error([&] { clip_grad_norm_({w}, 1.0, 2.0, true); }, {"non-finite", "inf"});
  EXPECT_TRUE(std::isinf(clip_grad_norm_({w}, 1.0)));
  EXPECT_EQ(w.grad()->full_tensor().to_vector<float>()[0], 0.0f);  // scaled by 1/inf
  w.set_grad(distribute_tensor(Tensor::full({4}, 0.5), mesh, {Shard(0)}));
  EXPECT_DOUBLE_EQ(clip_grad_norm_({w}, 10.0), 1.0);
  EXPECT_TRUE(equal(w.grad()->full_tensor(), Tensor::full({4}, 0.5)));
  EXPECT_DOUBLE_EQ(total_grad_norm({w}, INFINITY), 0.5);
  expect_error([&] { clip_grad_norm_({w}, 1.0, -1.0); }, {"norm_type > 0", "-1"});
}
