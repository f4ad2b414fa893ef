// An optimizer made before parallelize_module or fully_shard replaced the
// model's parameters holds tensors the model no longer reads: it used to
// skip them at every step (they never get a gradient again) and training
// went on with the model unchanged. Now it says so.
#include <gtest/gtest.h>

#include "dtensor/fsdp.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"
#include "dtensor/optim.h"
#include "dtensor/tensor_parallel.h"
#include "test_util.h"

namespace dtensor {
namespace {

using testing::expect_error;

class Model : public nn::Module {
 public:
  explicit Model(const DeviceMesh& mesh) : Module(mesh) {
    fc = register_module("fc", std::make_unique<nn::Linear>(mesh, 4, 8, true, 1));
    out = register_module("out", std::make_unique<nn::Linear>(mesh, 8, 4, true, 2));
  }
  DTensor forward(const DTensor& x) override { return (*out)((*fc)(x)); }
  nn::Linear *fc, *out;
};

std::vector<std::pair<std::string, DTensor>> named(nn::Module& m) {
  std::vector<std::pair<std::string, DTensor>> out;
  for (auto& [name, p] : m.named_parameters()) out.emplace_back(name, *p);
  return out;
}

struct SupersededTest : ::testing::Test {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}, {"dp", "tp"}};

  // One training step of `model` with `opt`.
  void train_step(Model& model, optim::Optimizer& opt) {
    opt.zero_grad();
    const DTensor x = distribute_tensor(Tensor::randn({2, 4}, 3), mesh, {Shard(0), Replicate()});
    sum(model(x)).backward();
    opt.step();
  }
};

TEST_F(SupersededTest, OptimizerMadeBeforeParallelizeModuleRefusesToStep) {
  Model model(mesh);
  optim::SGD early(named(model), {.lr = 0.1});
  const std::vector<DTensor> stale = model.parameters();
  parallelize_module(model, 1, {{"fc", ColwiseParallel{}}, {"out", RowwiseParallel{}}});
  EXPECT_EQ(nn::superseded_by(stale[0]), "parallelize_module");
  EXPECT_EQ(nn::superseded_by(model.parameter("fc.weight")), std::nullopt);
  expect_error([&] { early.zero_grad(); },
               {"SGD: parameter 0 'fc.weight'", "replaced in its module by parallelize_module",
                "build the optimizer after parallelize_module/fully_shard"});
  expect_error([&] { early.step(); }, {"SGD: parameter 0 'fc.weight'", "parallelize_module"});
  // Unnamed, from parameters taken before: refused when made.
  expect_error([&] { optim::AdamW(stale, {}); },
               {"optimizer: parameter 0", "parallelize_module"});
  // Made after, it trains.
  optim::SGD late(named(model), {.lr = 0.1});
  const Tensor before = model.parameter("fc.weight").full_tensor().clone();
  train_step(model, late);
  EXPECT_FALSE(equal(model.parameter("fc.weight").full_tensor(), before));
}

TEST_F(SupersededTest, OptimizerMadeBeforeFullyShardRefusesToStep) {
  Model model(mesh);
  optim::AdamW early(model.parameters(), {});
  fully_shard(model, {});
  expect_error([&] { early.step(); },
               {"AdamW: parameter 0 (", "replaced in its module by fully_shard",
                "build the optimizer after parallelize_module/fully_shard"});
  optim::AdamW late(model.parameters(), {});
  const Tensor before = model.parameter("out.bias").full_tensor().clone();
  train_step(model, late);
  EXPECT_FALSE(equal(model.parameter("out.bias").full_tensor(), before));
}

TEST_F(SupersededTest, AStyleThatMovesNoParameterKeepsTheOptimizerValid) {
  // A style that leaves a parameter's layout as it is keeps the parameter,
  // so an optimizer made before still holds what the model reads.
  Model model(mesh);
  optim::SGD opt(named(model), {.lr = 0.1});
  parallelize_module(model, 1, {{"fc", PrepareModuleInput{.input_layouts = Replicate(),
                                                          .desired_input_layouts = Replicate()}}});
  const Tensor before = model.parameter("fc.weight").full_tensor().clone();
  train_step(model, opt);
  EXPECT_FALSE(equal(model.parameter("fc.weight").full_tensor(), before));
}

}  // namespace
}  // namespace dtensor
