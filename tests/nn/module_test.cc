// Modules (nn.h): names, lookup, hooks, and the basic layers against the ops.
#include <gtest/gtest.h>

#include "dtensor/nn.h"
#include "dtensor/ops.h"
#include "test_util.h"

namespace dtensor {
namespace {

using testing::expect_error;

class Block : public nn::Module {
 public:
  explicit Block(const DeviceMesh& mesh) : Module(mesh) {
    norm = register_module("norm", std::make_unique<nn::LayerNorm>(
                                       mesh, Tensor::randn({4}, 1), Tensor::randn({4}, 2)));
    fc = register_module("fc", std::make_unique<nn::Linear>(mesh, 4, 3, true, 3));
    scale = register_parameter("scale", Tensor::randn({3}, 4));
  }
  DTensor forward(const DTensor& x) override { return (*fc)((*norm)(x)) * *scale; }
  nn::LayerNorm* norm;
  nn::Linear* fc;
  DTensor* scale;
};

class Model : public nn::Module {
 public:
  explicit Model(const DeviceMesh& mesh) : Module(mesh) {
    first = register_module("first", std::make_unique<nn::Linear>(mesh, 5, 4, false, 7));
    block = register_module("block", std::make_unique<Block>(mesh));
  }
  DTensor forward(const DTensor& x) override { return (*block)((*first)(x)); }
  nn::Linear* first;
  Block* block;
};

struct ModuleTest : ::testing::Test {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}, {"dp", "tp"}};
};

TEST_F(ModuleTest, NamesParametersDepthFirstInRegistrationOrder) {
  Model model(mesh);
  std::vector<std::string> names;
  for (auto& [name, p] : model.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"first.weight", "block.scale", "block.norm.weight",
                                             "block.norm.bias", "block.fc.weight", "block.fc.bias"}));
  std::vector<std::string> modules;
  for (auto& [name, m] : model.named_modules()) modules.push_back(name);
  EXPECT_EQ(modules, (std::vector<std::string>{"", "first", "block", "block.norm", "block.fc"}));
  EXPECT_EQ(&model.submodule("block.fc"), model.block->fc);
  EXPECT_EQ(&model.parameter("block.fc.bias"), model.block->fc->bias());
  for (const DTensor& p : model.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_EQ(p.placements(), (Placements{Replicate(), Replicate()}));
  }
  expect_error([&] { model.submodule("block.mlp"); }, {"no submodule 'mlp'", "norm, fc"});
  expect_error([&] { model.parameter("block.fc.gain"); }, {"no parameter 'block.fc.gain'", "weight, bias"});
}

TEST_F(ModuleTest, ForwardMatchesTheOpsOnFullTensors) {
  Model model(mesh);
  const Tensor x = Tensor::randn({6, 5}, 11);
  const DTensor dx = distribute_tensor(x, mesh, {Shard(0), Replicate()});
  const Tensor y = model(dx).full_tensor();
  const Tensor w1 = model.first->weight().full_tensor();
  const Block& b = *model.block;
  Tensor n = layer_norm(linear(x, w1), {4}, b.norm->weight().full_tensor(),
                        b.norm->bias().full_tensor());
  Tensor expected = linear(n, b.fc->weight().full_tensor(), b.fc->bias()->full_tensor()) *
                    b.scale->full_tensor();
  EXPECT_TRUE(allclose(y, expected, 1e-5, 1e-6)) << y << expected;
}

TEST_F(ModuleTest, AssigningThroughNamedParametersReplacesWhatForwardReads) {
  Model model(mesh);
  const DTensor dx = distribute_tensor(Tensor::randn({2, 5}, 1), mesh, {Replicate(), Replicate()});
  for (auto& [name, p] : model.named_parameters())
    if (name == "block.scale") *p = distribute_tensor(Tensor::zeros({3}), mesh, {Replicate(), Replicate()});
  EXPECT_TRUE(equal(model(dx).full_tensor(), Tensor::zeros({2, 3})));
}

TEST_F(ModuleTest, HooksRunInOrderAndMayReplaceInputAndOutput) {
  nn::Linear fc(mesh, Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}, Shape{3, 3}), std::nullopt);
  std::vector<std::string> calls;
  fc.register_forward_pre_hook([&](nn::Module&, const DTensor& in) {
    calls.push_back("pre1");
    return in * 2.0;
  });
  fc.register_forward_pre_hook([&](nn::Module&, const DTensor& in) {
    calls.push_back("pre2");
    return in + 1.0;
  });
  fc.register_forward_hook([&](nn::Module& m, const DTensor& in, const DTensor& out) {
    calls.push_back("post");
    EXPECT_EQ(&m, &fc);
    EXPECT_TRUE(equal(in.full_tensor(), out.full_tensor()));  // identity weight
    return out.redistribute({Shard(0), Replicate()});
  });
  const DTensor x = distribute_tensor(Tensor::ones({2, 3}), mesh, {Replicate(), Replicate()});
  const DTensor y = fc(x);
  EXPECT_EQ(calls, (std::vector<std::string>{"pre1", "pre2", "post"}));
  EXPECT_TRUE(equal(y.full_tensor(), Tensor::full({2, 3}, 3.0)));
  EXPECT_EQ(y.placements(), (Placements{Shard(0), Replicate()}));
}

TEST_F(ModuleTest, RejectsDuplicateAndDottedNames) {
  class Bad : public nn::Module {
   public:
    Bad(const DeviceMesh& mesh, const std::string& second) : Module(mesh) {
      register_parameter("w", Tensor::ones({2}));
      register_parameter(second, Tensor::ones({2}));
    }
    DTensor forward(const DTensor& x) override { return x; }
  };
  expect_error([&] { Bad(mesh, "w"); }, {"'w' is already"});
  expect_error([&] { Bad(mesh, "a.b"); }, {"without '.'", "'a.b'"});
  expect_error([&] { nn::Linear(mesh, 0, 3, true, 1); }, {"in_features must be positive, got 0"});
}

TEST_F(ModuleTest, GradientsReachTheParameters) {
  Model model(mesh);
  const DTensor dx = distribute_tensor(Tensor::randn({4, 5}, 3), mesh, {Shard(0), Replicate()});
  sum(model(dx)).backward();
  for (auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p->grad().has_value()) << name;
}

}  // namespace
}  // namespace dtensor
