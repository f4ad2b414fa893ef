// Param groups (PyTorch's): each group steps with its own hyper-parameters
// exactly as an optimizer of that group alone would, schedulers set each
// group's lr from its own initial lr, hyper-parameters can be read and set
// by name, and an optimizer's state_dict() loads into a fresh one to the
// same bits. The update rules themselves are checked on random layouts in
// tests/worlds/optim_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "dtensor/optim.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::optim;
using dtensor::testing::expect_error;

namespace {

class ParamGroupsTest : public ::testing::Test {
 protected:
  World world = World::simulated(4);
  DeviceMesh mesh{world, {2, 2}};

  // Parameters of a small model, the same values on every call: a [6, 5]
  // weight split over both mesh dims, a [5] bias replicated, a [3, 4]
  // weight sharded on dim 1 and a [7] norm scale sharded unevenly.
  std::vector<std::pair<std::string, DTensor>> params() {
    const std::vector<std::tuple<std::string, Shape, Placements>> specs{
        {"fc.weight", {6, 5}, {Shard(0), Shard(1)}},
        {"fc.bias", {5}, {Replicate(), Replicate()}},
        {"out.weight", {3, 4}, {Replicate(), Shard(1)}},
        {"norm.weight", {7}, {Shard(0), Replicate()}}};
    std::vector<std::pair<std::string, DTensor>> out;
    uint64_t seed = 1;
    for (const auto& [name, shape, pl] : specs) {
      DTensor p = distribute_tensor(Tensor::randn(shape, seed++, 0, DType::Float64), mesh, pl);
      p.requires_grad_();
      out.emplace_back(name, p);
    }
    return out;
  }

  // Sets the gradients of step `k` (the same values for any copy).
  static void set_grads(const std::vector<DTensor>& ps, int k) {
    for (size_t i = 0; i < ps.size(); ++i) {
      DTensor p = ps[i];
      const Tensor g = Tensor::randn(p.shape(), 100 + 10 * k + i, 0, DType::Float64);
      p.set_grad(distribute_tensor(g, p.mesh(), p.placements()));
    }
  }
};

std::vector<DTensor> values(const std::vector<std::pair<std::string, DTensor>>& ps) {
  std::vector<DTensor> out;
  for (const auto& [name, p] : ps) out.push_back(p);
  return out;
}

void expect_same_bits(const DTensor& a, const DTensor& b, const std::string& what) {
  const std::vector<double> x = a.full_tensor().to_vector<double>();
  const std::vector<double> y = b.full_tensor().to_vector<double>();
  ASSERT_EQ(x.size(), y.size()) << what;
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(double)), 0) << what;
}

}  // namespace

// Two groups with other hyper-parameters step as two optimizers of one
// group each, bit for bit, for every optimizer kind.
TEST_F(ParamGroupsTest, GroupsStepAsSeparateOptimizers) {
  using Make = std::function<std::unique_ptr<Optimizer>(const std::vector<ParamGroup>&)>;
  const std::vector<std::tuple<std::string, Make, GroupOptions>> kinds{
      {"SGD",
       [](const auto& g) {
         return std::make_unique<SGD>(g, SGDOptions{.lr = 0.1, .momentum = 0.9});
       },
       {{"lr", 0.02}, {"nesterov", true}, {"weight_decay", 0.1}}},
      {"AdamW",
       [](const auto& g) { return std::make_unique<AdamW>(g, AdamOptions{.lr = 0.01}); },
       {{"weight_decay", 0.0}, {"betas", std::pair<double, double>{0.5, 0.9}}, {"amsgrad", true}}},
      {"Adam",
       [](const auto& g) { return std::make_unique<Adam>(g, AdamOptions{.lr = 0.01}); },
       {{"weight_decay", 0.3}, {"maximize", true}}},
      {"Adagrad",
       [](const auto& g) { return std::make_unique<Adagrad>(g, AdagradOptions{}); },
       {{"lr_decay", 0.1}, {"initial_accumulator_value", 0.5}}},
      {"RMSprop",
       [](const auto& g) { return std::make_unique<RMSprop>(g, RMSpropOptions{}); },
       {{"momentum", 0.5}, {"centered", true}}},
      {"Adadelta",
       [](const auto& g) { return std::make_unique<Adadelta>(g, AdadeltaOptions{}); },
       {{"rho", 0.5}, {"lr", 0.3}}},
      {"Adamax",
       [](const auto& g) { return std::make_unique<Adamax>(g, AdamaxOptions{}); },
       {{"eps", 0.1}, {"weight_decay", 0.2}}},
      {"NAdam",
       [](const auto& g) { return std::make_unique<NAdam>(g, NAdamOptions{}); },
       {{"momentum_decay", 0.1}, {"decoupled_weight_decay", true}, {"weight_decay", 0.1}}},
      {"RAdam",
       [](const auto& g) { return std::make_unique<RAdam>(g, RAdamOptions{}); },
       {{"betas", std::pair<double, double>{0.8, 0.9}}, {"weight_decay", 0.05}}},
  };
  for (const auto& [kind, make, overrides] : kinds) {
    auto grouped = params();
    const std::vector<ParamGroup> groups{ParamGroup({grouped[0], grouped[2]}),
                                         ParamGroup({grouped[1], grouped[3]}, overrides)};
    std::unique_ptr<Optimizer> both = make(groups);
    auto alone = params();
    std::unique_ptr<Optimizer> first = make({ParamGroup({alone[0], alone[2]})});
    std::unique_ptr<Optimizer> second = make({ParamGroup({alone[1], alone[3]}, overrides)});
    ASSERT_EQ(both->num_groups(), 2u) << kind;
    EXPECT_EQ(both->group_params(1), (std::vector<size_t>{2, 3})) << kind;
    EXPECT_EQ(both->group_of(2), 1u) << kind;
    for (int k = 0; k < 7; ++k) {
      set_grads(both->params(), k);
      set_grads({alone[0].second, alone[2].second, alone[1].second, alone[3].second}, k);
      both->step();
      first->step();
      second->step();
    }
    const std::vector<DTensor> b = both->params();
    expect_same_bits(b[0], alone[0].second, kind + " group 0 first");
    expect_same_bits(b[1], alone[2].second, kind + " group 0 second");
    expect_same_bits(b[2], alone[1].second, kind + " group 1 first");
    expect_same_bits(b[3], alone[3].second, kind + " group 1 second");
    for (const auto& [name, buffer] : both->state(3).buffers)
      expect_same_bits(buffer, second->state(1).buffer(name), kind + " buffer " + name);
  }
}

// Schedulers set each group's lr from its own initial lr.
TEST_F(ParamGroupsTest, SchedulersScaleEveryGroup) {
  auto ps = params();
  AdamW opt({ParamGroup({ps[0], ps[1]}), ParamGroup({ps[2]}, {{"lr", 0.5}}),
             ParamGroup({ps[3]}, {{"lr", 0.0}})},
            {.lr = 0.1});
  EXPECT_EQ(opt.lr(1), 0.5);
  expect_error([&] { (void)opt.lr(); }, {"different learning rates", "0.100000, 0.500000"});
  SequentialLR sched(opt, {LinearLR::make(opt, 0.25, 1.0, 4), CosineAnnealingLR::make(opt, 10)},
                     {4});
  for (int epoch = 0; epoch < 12; ++epoch) {
    const std::vector<double> base{0.1, 0.5, 0.0};
    ASSERT_EQ(sched.get_last_lrs().size(), 3u);
    for (size_t g = 0; g < 3; ++g) {
      EXPECT_EQ(opt.lr(g), sched.lr_at(epoch, g)) << epoch << " " << g;
      EXPECT_EQ(sched.get_last_lrs()[g], opt.lr(g));
      EXPECT_EQ(*opt.initial_lr(g), base[g]);
    }
    // The schedule of a group is the schedule of an optimizer of that lr.
    auto lone = params();
    SGD single({lone[2].second}, {.lr = 0.5});
    SequentialLR same(
        single, {LinearLR::make(single, 0.25, 1.0, 4), CosineAnnealingLR::make(single, 10)}, {4});
    same.set_last_epoch(epoch);
    EXPECT_EQ(single.lr(), opt.lr(1)) << epoch;
    sched.step();
  }
  opt.set_lr(0.01);
  EXPECT_EQ(opt.lr(), 0.01);
}

// Hyper-parameters by name: every one read back, set while training (and
// checked as at construction), unknown names and wrong types refused with
// the names there are.
TEST_F(ParamGroupsTest, OptionsByName) {
  auto ps = params();
  SGD opt(
      {
          ParamGroup(ps),
      },
      {.lr = 0.1, .momentum = 0.5});
  const GroupOptions o = opt.group_options(0);
  EXPECT_EQ(std::get<double>(o.at("lr")), 0.1);
  EXPECT_EQ(std::get<double>(o.at("momentum")), 0.5);
  EXPECT_EQ(std::get<bool>(o.at("nesterov")), false);
  EXPECT_EQ(o.size(), 6u);
  opt.set_group_option(0, "weight_decay", 0.25);
  EXPECT_EQ(opt.options(0).weight_decay, 0.25);
  opt.set_group_option(0, "lr", 0.3);
  EXPECT_EQ(opt.lr(0), 0.3);
  expect_error(
      [&] {
        opt.set_group_option(0, "betas", std::pair<double, double>{0.9, 0.99});
      },
      {"SGD: no hyper-parameter 'betas'",
       "lr, momentum, dampening, weight_decay, nesterov, maximize"});
  expect_error([&] { opt.set_group_option(0, "nesterov", 1.0); }, {"'nesterov' must be a flag"});
  expect_error([&] { opt.set_group_option(0, "momentum", -1.0); }, {"momentum >= 0"});
  EXPECT_EQ(opt.options(0).momentum, 0.5);  // unchanged by the refusal
  expect_error([&] { opt.set_group_option(1, "lr", 0.1); }, {"param group 1 out of range"});
  expect_error(
      [&] {
        AdamW({ParamGroup(ps, {{"momentum", 0.9}})}, {});
      },
      {"AdamW: no hyper-parameter 'momentum'", "betas"});
  expect_error(
      [&] {
        Adam({ParamGroup(ps, {{"betas", std::pair<double, double>{1.0, 0.9}}})}, {});
      },
      {"Adam: expected 0 <= betas.first < 1"});
  expect_error(
      [&] {
        SGD({ParamGroup({ps[0]}), ParamGroup({ps[1], ps[0]})}, {});
      },
      {"parameter 2 'fc.weight'", "is parameter 0 again (in param group 0)"});
}

// state_dict() into a fresh optimizer continues to the same bits; a state
// of other groups is refused before anything changes.
TEST_F(ParamGroupsTest, StateDictLoadsIntoAFreshOptimizer) {
  auto a = params();
  auto b = params();
  auto groups = [](const std::vector<std::pair<std::string, DTensor>>& n) {
    return std::vector<ParamGroup>{ParamGroup({n[0], n[2]}),
                                   ParamGroup({n[1], n[3]}, {{"weight_decay", 0.0}})};
  };
  NAdam straight(groups(a), {.lr = 0.01, .weight_decay = 0.1});
  for (int k = 0; k < 2; ++k) {
    set_grads(values(a), k);
    set_grads(values(b), k);
    straight.step();
  }
  // b's parameters took the same two steps by another optimizer.
  {
    NAdam other(groups(b), {.lr = 0.01, .weight_decay = 0.1});
    for (int k = 0; k < 2; ++k) {
      set_grads(values(b), k);
      other.step();
    }
    const OptimizerStateDict sd = other.state_dict();
    ASSERT_EQ(sd.param_groups.size(), 2u);
    EXPECT_EQ(std::get<double>(sd.param_groups[1].at("weight_decay")), 0.0);
    EXPECT_EQ(sd.group_params[1], (std::vector<size_t>{2, 3}));
    NAdam resumed(groups(b), {.lr = 0.5});  // the state's lr replaces this one
    resumed.load_state_dict(sd);
    EXPECT_EQ(resumed.lr(0), 0.01);
    EXPECT_EQ(resumed.options(0).weight_decay, 0.1);
    for (int k = 2; k < 5; ++k) {
      set_grads(values(a), k);
      set_grads(values(b), k);
      straight.step();
      resumed.step();
    }
    for (size_t i = 0; i < 4; ++i)
      expect_same_bits(straight.params()[i], resumed.params()[i], "param " + std::to_string(i));
    // A state of other groups, refused whole.
    NAdam one_group({ParamGroup(b)}, {.lr = 0.2});
    expect_error([&] { one_group.load_state_dict(sd); }, {"2 param groups, the optimizer 1"});
    OptimizerStateDict bad = sd;
    bad.param_groups[1]["eps"] = -1.0;
    NAdam fresh(groups(b), {.lr = 0.2});
    expect_error([&] { fresh.load_state_dict(bad); }, {"eps >= 0"});
    EXPECT_EQ(fresh.lr(0), 0.2);  // the groups went back
    EXPECT_EQ(fresh.state(0).step, 0);
  }
}

// The training split: weights of two or more dims decay, the rest not.
TEST_F(ParamGroupsTest, WeightDecayGroupsSplitByDims) {
  auto ps = params();
  const std::vector<ParamGroup> groups = weight_decay_groups(ps);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 2u);
  EXPECT_EQ(groups[0].params[0].first, "fc.weight");
  EXPECT_EQ(groups[0].params[1].first, "out.weight");
  EXPECT_TRUE(groups[0].options.empty());
  EXPECT_EQ(groups[1].params[0].first, "fc.bias");
  EXPECT_EQ(groups[1].params[1].first, "norm.weight");
  EXPECT_EQ(std::get<double>(groups[1].options.at("weight_decay")), 0.0);
  AdamW opt(groups, {.lr = 1e-3, .weight_decay = 0.1});
  EXPECT_EQ(opt.weight_decay(0), 0.1);
  EXPECT_EQ(opt.weight_decay(1), 0.0);
  EXPECT_EQ(weight_decay_groups({ps[1]}).size(), 1u);
}

// PyTorch's tensor lr: the optimizer reads the tensor at each step (a
// write into it changes the next step, as set_lr does, bit for bit), a
// scheduler writes into it in place, a float32 tensor gives the
// float32-rounded lr (as lr.item() in PyTorch), and bad tensors are refused.
TEST_F(ParamGroupsTest, ATensorLearningRate) {
  auto with_tensor = params(), with_double = params();
  AdamW a(with_tensor, {.lr = 0.5});
  AdamW b(with_double, {.lr = 1e-2});
  const Tensor lr = Tensor::full({}, 1e-2, DType::Float64);
  a.set_lr_tensor(0, lr);
  EXPECT_EQ(a.lr(0), 1e-2);
  for (int k = 0; k < 3; ++k) {
    if (k == 2) {
      Tensor(lr).fill_(3e-3);  // the user's write
      b.set_lr(0, 3e-3);
    }
    set_grads(values(with_tensor), k);
    set_grads(values(with_double), k);
    a.step();
    b.step();
  }
  for (size_t i = 0; i < with_tensor.size(); ++i)
    EXPECT_EQ(with_tensor[i].second.full_tensor().to_vector<double>(),
              with_double[i].second.full_tensor().to_vector<double>())
        << with_tensor[i].first;
  auto schedule = LinearLR::make(a, 0.5, 1.0, 4);
  schedule->step();
  EXPECT_EQ(lr.item<double>(), a.lr(0));
  EXPECT_EQ(a.lr_tensor(0)->storage(), lr.storage());
  const Tensor f = Tensor::full({1}, 0.1, DType::Float32);
  a.set_lr_tensor(0, f);
  EXPECT_EQ(a.lr(0), static_cast<double>(0.1f));
  expect_error([&] { a.set_lr_tensor(0, Tensor::ones({2})); }, {"one element"});
  expect_error([&] { a.set_lr_tensor(0, Tensor::full({}, 1, DType::Int64)); }, {"floating"});
  expect_error([&] { a.set_lr_tensor(0, Tensor::full({}, -1.0)); }, {"lr >= 0"});
}
