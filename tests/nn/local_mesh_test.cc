// Modules made without a mesh (nn::local_mesh()) and laid out afterwards
// (Module::adopt), the training flag, and a call with a forward function in
// place of forward() (what the Python Module's extra arguments use).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "dtensor/nn.h"
#include "dtensor/ops.h"
#include "test_util.h"

namespace dtensor {
namespace {

using testing::expect_error;

// A head tied to an embedding table: one parameter in two slots.
class TiedPair : public nn::Module {
 public:
  TiedPair() {
    table = register_module("table", std::make_unique<nn::Embedding>(nn::local_mesh(), 6, 4, 3));
    head = register_module("head", std::make_unique<nn::Linear>(nn::local_mesh(), 4, 6, false, 4));
    head->weight() = table->weight();
  }
  DTensor forward(const DTensor& x) override { return (*head)(x); }
  nn::Embedding* table;
  nn::Linear* head;
};

struct LocalMeshTest : ::testing::Test {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}, {"dp", "tp"}};
};

TEST_F(LocalMeshTest, AdoptMovesWholeValuesReplicateAndMarksTheOldOnes) {
  nn::Linear local(nn::local_mesh(), 4, 3, true, 5);
  nn::Linear on_mesh(mesh, 4, 3, true, 5);
  EXPECT_TRUE(local.is_local());
  EXPECT_FALSE(on_mesh.is_local());
  EXPECT_EQ(local.mesh().world().size(), 1);
  const DTensor old = local.weight();
  EXPECT_EQ(local.adopt(mesh, "the test"), 2);
  EXPECT_FALSE(local.is_local());
  EXPECT_EQ(local.mesh(), mesh);
  EXPECT_EQ(local.weight().placements(), (Placements{Replicate(), Replicate()}));
  EXPECT_TRUE(local.weight().requires_grad());
  EXPECT_TRUE(equal(local.weight().full_tensor(), on_mesh.weight().full_tensor()));
  EXPECT_TRUE(equal(local.bias()->full_tensor(), on_mesh.bias()->full_tensor()));
  EXPECT_EQ(nn::superseded_by(old), std::optional<std::string>("the test"));
  // Adopted once: a second call moves nothing; the local mesh is no target.
  EXPECT_EQ(local.adopt(mesh, "again"), 0);
  expect_error([&] { nn::Linear(nn::local_mesh(), 2, 2).adopt(nn::local_mesh(), "x"); },
               {"cannot lay a module out on the local mesh"});
}

TEST_F(LocalMeshTest, AdoptKeepsTiedParametersTiedAndMetaOnesMeta) {
  TiedPair tied;
  EXPECT_EQ(tied.adopt(mesh, "test"), 1);
  EXPECT_TRUE(nn::same_parameter(tied.head->weight(), tied.table->weight()));
  EXPECT_EQ(tied.named_parameters().size(), 1u);

  manual_seed(9);
  nn::Linear plain(nn::local_mesh(), 8, 4);
  manual_seed(9);
  std::unique_ptr<nn::Linear> meta;
  {
    nn::MetaDeviceGuard guard;
    meta = std::make_unique<nn::Linear>(nn::local_mesh(), 8, 4);
  }
  meta->adopt(mesh, "test");
  EXPECT_TRUE(meta->weight().is_deferred());
  EXPECT_EQ(meta->weight().mesh(), mesh);
  EXPECT_EQ(meta->materialize(), 2);
  EXPECT_TRUE(equal(meta->weight().full_tensor(), plain.weight().full_tensor()));
}

TEST_F(LocalMeshTest, TrainIsRecursive) {
  TiedPair m;
  EXPECT_TRUE(m.training() && m.head->training());
  m.train(false);
  EXPECT_FALSE(m.training() || m.head->training() || m.table->training());
  m.head->train();
  EXPECT_TRUE(m.head->training());
  EXPECT_FALSE(m.training());
}

TEST_F(LocalMeshTest, CallWithAForwardFunctionRunsTheHooksAndCheckpointing) {
  nn::Linear fc(mesh, 4, 4, false, 1);
  std::vector<std::string> seen;
  fc.register_forward_pre_hook([&](nn::Module&, const DTensor& x) {
    seen.push_back("pre");
    return x * 2.0;
  });
  fc.register_forward_hook([&](nn::Module&, const DTensor&, const DTensor& y) {
    seen.push_back("post");
    return y + 1.0;
  });
  EXPECT_TRUE(fc.has_hooks());
  const DTensor x = distribute_tensor(Tensor::randn({2, 4}, 2), mesh, {Shard(0), Replicate()});
  int runs = 0;
  std::function<DTensor(const DTensor&)> fn = [&](const DTensor& in) {
    ++runs;
    seen.push_back("fn");
    return linear(in, fc.weight()) * 3.0;
  };
  const DTensor y = fc(x, fn);
  EXPECT_EQ(seen, (std::vector<std::string>{"pre", "fn", "post"}));
  EXPECT_TRUE(allclose(y.full_tensor(), (linear(x * 2.0, fc.weight()) * 3.0 + 1.0).full_tensor()));
  // Checkpointed: fn runs again in backward, and the gradient is the same.
  y.sum().backward();
  const Tensor want = fc.weight().grad()->full_tensor();
  fc.weight().zero_grad();
  fc.set_activation_checkpointing(true);
  runs = 0;
  fc(x, fn).sum().backward();
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(equal(fc.weight().grad()->full_tensor(), want));
}

}  // namespace
}  // namespace dtensor
