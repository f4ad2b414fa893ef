// VerifyMode covers backward, on every world (see world_util.h): each
// backward function is rerun on replicated copies of its gradient and saved
// tensors and must agree, and the DTensor ops it runs are checked like any
// op. A backward whose value depends on the layout is caught.
#include <gtest/gtest.h>

#include "autograd/graph.h"
#include "dtensor/dtensor.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

class AutogradVerifyTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// x * 3 whose backward is wrong unless the gradient is replicated: the
// kind of bug VerifyMode exists for (a formula reading placements).
DTensor layout_dependent_triple(const DTensor& x) {
  DTensor out = mul(x.detach(), 3.0);
  if (autograd::recording({&x}))
    autograd::record(out, "buggy_triple", {&x}, {}, [](const autograd::Context& c) {
      bool replicated = true;
      for (const Placement& p : c.grad.placements()) replicated = replicated && p.is_replicate();
      return autograd::Grads{mul(c.grad, replicated ? 3.0 : 2.0)};
    });
  return out;
}

}  // namespace

TEST_F(AutogradVerifyTest, BackwardIsCheckedAgainstReplicatedInputs) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = distribute_tensor(Tensor::randn({6, 5}, 1, 0, DType::Float64), mesh,
                                {Shard(0), Shard(1)});
  x.requires_grad_();
  VerifyMode verify;
  const DTensor loss = sum(mul(x, x));
  const int64_t forward_checks = verify.checks();
  loss.backward();
  // mul's backward: mul, mul; sum's: unsqueeze/expand; each op and each
  // backward function checked.
  EXPECT_GE(verify.checks() - forward_checks, 4);
  EXPECT_LE(max_abs_diff(x.grad()->full_tensor(), mul(x.full_tensor(), 2.0)), 1e-12);
}

TEST_F(AutogradVerifyTest, ALayoutDependentBackwardIsCaught) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) GTEST_SKIP() << "no rank of the mesh here";
  DTensor x = distribute_tensor(Tensor::ones({8}, DType::Float64), mesh, {Shard(0)});
  x.requires_grad_();
  // The weight makes the gradient reach the op sharded.
  const DTensor w = distribute_tensor(Tensor::ones({8}, DType::Float64), mesh, {Shard(0)});
  if (!verify_enabled()) {  // (DTENSOR_VERIFY=1 runs this file too)
    // Without VerifyMode the wrong gradient goes unnoticed...
    sum(mul(layout_dependent_triple(x), w)).backward();
    EXPECT_TRUE(equal(x.grad()->full_tensor(), Tensor::full({8}, 2.0, DType::Float64)));
  }
  x.zero_grad();
  VerifyMode verify;
  const DTensor loss = sum(mul(layout_dependent_triple(x), w));
  dtensor::testing::expect_error([&] { loss.backward(); },
                                 {"verify", "backward of buggy_triple", "gradient of input 0"});
}
