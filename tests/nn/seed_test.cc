// The global generator (manual_seed in ops.h): modules and random ops made
// without a seed draw fresh seeds from one sequence, so two layers of one
// shape differ, a manual_seed repeats a run, and the values stay
// layout-invariant; explicit seeds keep their values.
#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/nn.h"
#include "dtensor/ops.h"
#include "test_util.h"

namespace dtensor {
namespace {

struct SeedTest : ::testing::Test {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}, {"dp", "tp"}};
};

Tensor weight_of(nn::Linear& l) { return l.weight().full_tensor(); }

TEST_F(SeedTest, UnseededLayersOfOneShapeDiffer) {
  nn::Linear wq(mesh, 16, 16), wk(mesh, 16, 16);
  EXPECT_FALSE(equal(weight_of(wq), weight_of(wk)));
  EXPECT_FALSE(equal(wq.bias()->full_tensor(), wk.bias()->full_tensor()));
  EXPECT_FALSE(equal(weight_of(wq).slice(0, 0, 1).reshape({16}), wq.bias()->full_tensor()));
  nn::Embedding a(mesh, 8, 4), b(mesh, 8, 4);
  EXPECT_FALSE(equal(a.weight().full_tensor(), b.weight().full_tensor()));
}

TEST_F(SeedTest, ManualSeedRepeatsTheSequence) {
  manual_seed(42);
  EXPECT_EQ(initial_seed(), 42u);
  nn::Linear first(mesh, 8, 8);
  const Tensor x = rand({5, 3}, mesh, {Shard(0), Replicate()}).full_tensor();
  manual_seed(42);
  nn::Linear again(mesh, 8, 8);
  EXPECT_TRUE(equal(weight_of(first), weight_of(again)));
  EXPECT_TRUE(equal(first.bias()->full_tensor(), again.bias()->full_tensor()));
  EXPECT_TRUE(equal(rand({5, 3}, mesh, {Shard(0), Replicate()}).full_tensor(), x));
  manual_seed(43);
  nn::Linear other(mesh, 8, 8);
  EXPECT_FALSE(equal(weight_of(first), weight_of(other)));
}

TEST_F(SeedTest, DrawsAreLayoutInvariantAndExplicitSeedsDoNotAdvance) {
  // The k-th draw gives the same global tensor whatever the layout: the
  // generator hands out seeds, and each op spreads one seed over global
  // element indices.
  manual_seed(7);
  const uint64_t s1 = next_seed(), s2 = next_seed();
  manual_seed(7);
  const Tensor a = randn({6, 4}, mesh, {Shard(0), Shard(1)}).full_tensor();
  EXPECT_TRUE(equal(randn({6, 4}, mesh, {Replicate(), Replicate()}, 99).full_tensor(),
                    Tensor::randn({6, 4}, 99)));  // explicit: no draw
  const Tensor b = rand({6, 4}, mesh, {Replicate(), Shard(0)}).full_tensor();
  EXPECT_TRUE(equal(a, Tensor::randn({6, 4}, s1)));
  EXPECT_TRUE(equal(b, Tensor::rand({6, 4}, s2)));
  // dropout draws one seed and reuses it in backward (the same mask).
  manual_seed(7);
  DTensor x = distribute_tensor(Tensor::ones({8, 8}), mesh, {Shard(0), Replicate()});
  x.requires_grad_();
  DTensor y = dropout(x, 0.5);
  sum(y).backward();
  const Tensor expected = dropout(distribute_tensor(Tensor::ones({8, 8}), mesh,
                                                    {Replicate(), Replicate()}),
                                  0.5, s1)
                              .full_tensor();
  EXPECT_TRUE(equal(y.full_tensor(), expected));
  EXPECT_TRUE(equal(x.grad()->full_tensor(), expected));
}

TEST_F(SeedTest, ExplicitSeedsKeepTheirValues) {
  // W from seed, b from seed + 1, uniform in +-1/sqrt(in): as before the
  // global generator existed (the training fingerprints depend on it).
  manual_seed(1);
  nn::Linear l(mesh, 5, 3, true, 11);
  const double bound = 1 / std::sqrt(5.0);
  EXPECT_TRUE(equal(weight_of(l), Tensor::rand({3, 5}, 11) * (2 * bound) - bound));
  EXPECT_TRUE(equal(l.bias()->full_tensor(), Tensor::rand({3}, 12) * (2 * bound) - bound));
  const uint64_t next = next_seed();
  manual_seed(1);
  EXPECT_EQ(next_seed(), next);  // the seeded Linear drew nothing
}

}  // namespace
}  // namespace dtensor
