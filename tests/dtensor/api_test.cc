// The DTensor API training code reaches for: empty DTensors, to(dtype),
// size/numel, method forms, printing, comparison operators, factories and
// mixing plain Tensors under implicit_replication (simulated world).
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <vector>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

class ApiTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
  DeviceMesh mesh{world, {2, 4}};
};

TEST_F(ApiTest, EmptyDTensorsSitInContainersAndThrowWhenUsed) {
  DTensor d;
  EXPECT_FALSE(d.defined());
  std::vector<DTensor> v(3);
  std::map<std::string, DTensor> params;
  params["w"] = distribute_tensor(Tensor::ones({4, 4}), mesh, {Shard(0), Replicate()});
  params["b"];
  EXPECT_TRUE(params["w"].defined());
  EXPECT_FALSE(params["b"].defined());
  v[1] = params["w"];
  EXPECT_EQ(v[1].shape(), (Shape{4, 4}));
  expect_error([&] { (void)d.shape(); }, {"empty", "default-constructed"});
  expect_error([&] { (void)add(d, d); }, {"empty"});
  expect_error([&] { (void)d.full_tensor(); }, {"empty"});
  std::ostringstream os;
  os << d;
  EXPECT_EQ(os.str(), "DTensor(<empty>)");
}

TEST_F(ApiTest, SizesDtypeAndMethodForms) {
  const Tensor x = small_valued({6, 5}, 1);
  const DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
  EXPECT_EQ(d.size(0), 6);
  EXPECT_EQ(d.size(-1), 5);
  EXPECT_EQ(d.numel(), 30);
  expect_error([&] { (void)d.size(2); }, {"size", "out of range"});
  EXPECT_TRUE(equal(d.t().full_tensor(), x.t()));
  EXPECT_TRUE(equal(d.transpose(0, 1).full_tensor(), x.t()));
  EXPECT_TRUE(equal(d.sum().full_tensor(), sum(x)));
  EXPECT_TRUE(allclose(d.mean({1}).full_tensor(), mean(x, {1})));
  EXPECT_TRUE(equal(d.reshape({5, 6}).full_tensor(), x.reshape({5, 6})));
  EXPECT_TRUE(equal(d.view({30}).full_tensor(), x.reshape({30})));
  EXPECT_TRUE(allclose(d.exp().full_tensor(), exp(x)));
  EXPECT_TRUE(equal(d.pow(2).full_tensor(), pow(x, 2)));
  EXPECT_TRUE(allclose(d.matmul(d.t()).full_tensor(), matmul(x, x.t())));
  EXPECT_TRUE(equal(d.unsqueeze(0).squeeze(0).full_tensor(), x));

  const DTensor f64 = d.to(DType::Float64);
  EXPECT_EQ(f64.dtype(), DType::Float64);
  EXPECT_EQ(f64.placements(), d.placements());
  EXPECT_TRUE(equal(f64.full_tensor(), x.to(DType::Float64)));
  // An integral cast of a Partial(sum) truncates the sum, not the pieces.
  const Tensor halves = Tensor::full({4}, 0.5);
  const DTensor p = make_dtensor(halves, mesh, {Partial(), Replicate()}, 2);
  const DTensor halves_p = from_local([](int) { return Tensor::full({4}, 0.75); }, mesh,
                                      {Partial(), Replicate()});
  EXPECT_TRUE(equal(halves_p.to(DType::Int64).full_tensor(), Tensor::ones({4}, DType::Int64)));
  EXPECT_TRUE(equal(p.to(DType::Float64).full_tensor(), halves.to(DType::Float64)));

  // to() is differentiable between floating dtypes.
  DTensor w = distribute_tensor(x, mesh, {Shard(0), Replicate()});
  w.requires_grad_();
  w.to(DType::Float64).sum().backward();
  EXPECT_EQ(w.grad()->dtype(), DType::Float32);
  EXPECT_TRUE(equal(w.grad()->full_tensor(), Tensor::ones({6, 5})));
}

TEST_F(ApiTest, ComparisonOperatorsAreElementwise) {
  const Tensor a = small_valued({4, 3}, 1), b = small_valued({4, 3}, 2);
  const DTensor da = distribute_tensor(a, mesh, {Shard(0), Replicate()});
  const DTensor db = distribute_tensor(b, mesh, {Replicate(), Shard(1)});
  EXPECT_TRUE(equal((da == db).full_tensor(), eq(a, b)));
  EXPECT_TRUE(equal((da != db).full_tensor(), ne(a, b)));
  EXPECT_TRUE(equal((da < db).full_tensor(), lt(a, b)));
  EXPECT_TRUE(equal((da <= db).full_tensor(), le(a, b)));
  EXPECT_TRUE(equal((da > db).full_tensor(), gt(a, b)));
  EXPECT_TRUE(equal((da >= db).full_tensor(), ge(a, b)));
  EXPECT_TRUE(equal((da == 0.5).full_tensor(), eq(a, 0.5)));
  EXPECT_TRUE(equal((da > 0).full_tensor(), gt(a, 0)));
  EXPECT_EQ((da < 1).dtype(), DType::Bool);
}

TEST_F(ApiTest, FactoriesAllocateOnlyTheirShards) {
  const Shape shape{5, 3};
  const DTensor z = zeros(shape, mesh, {Shard(0), Replicate()});
  const DTensor o = ones(shape, mesh, {Replicate(), Shard(1)}, DType::Float64);
  const DTensor f = full(shape, 2.5, mesh, {Partial(), Shard(0)});
  const DTensor e = empty(shape, mesh, {Shard(1), Shard(0)}, DType::Int64);
  EXPECT_TRUE(equal(z.full_tensor(), Tensor::zeros(shape)));
  EXPECT_TRUE(equal(o.full_tensor(), Tensor::ones(shape, DType::Float64)));
  EXPECT_TRUE(equal(f.full_tensor(), Tensor::full(shape, 2.5)));
  EXPECT_EQ(e.dtype(), DType::Int64);
  for (const DTensor* d : {&z, &o, &f, &e})
    for (int r : d->local().ranks())
      EXPECT_EQ(d->to_local(r).shape(), d->spec().extent_of_rank(r)->local_shape);
  EXPECT_EQ(z.to_local(0).shape(), (Shape{3, 3}));
  expect_error([&] { (void)zeros(shape, mesh, {Shard(2), Replicate()}); }, {"2"});
}

TEST_F(ApiTest, PrintingShowsTheFullTensorAndTheLayout) {
  const DTensor d = distribute_tensor(Tensor::arange(4).to(DType::Float32), mesh,
                                      {Shard(0), Replicate()});
  std::ostringstream os;
  os << d;
  std::ostringstream full;
  full << d.full_tensor();
  const std::string s = os.str();
  EXPECT_EQ(s.rfind("DTensor(full_tensor=", 0), 0u) << s;
  EXPECT_NE(s.find(full.str()), std::string::npos) << s;
  EXPECT_NE(s.find("placements=S(0),R"), std::string::npos) << s;
  EXPECT_NE(s.find("device_mesh="), std::string::npos) << s;
}

TEST_F(ApiTest, PlainTensorsMixOnlyWhenOneElementOrImplicitlyReplicated) {
  const Tensor x = small_valued({4, 3}, 1), y = small_valued({4, 3}, 2);
  const DTensor d = distribute_tensor(x, mesh, {Shard(0), Replicate()});
  expect_error([&] { (void)add(d, y); }, {"add", "plain Tensor of shape [4, 3]",
                                         "implicit_replication"});
  EXPECT_TRUE(equal(mul(d, Tensor::full({}, 2.0f)).full_tensor(), x * 2.0));
  DTensor acc = d.clone();
  expect_error([&] { acc += y; }, {"add_", "implicit_replication"});
  {
    ImplicitReplication implicit;
    EXPECT_TRUE(implicit_replication_enabled());
    EXPECT_TRUE(equal((d + y).full_tensor(), x + y));
    EXPECT_TRUE(equal((y * d).full_tensor(), y * x));
    acc += y;
    EXPECT_EQ(acc.placements(), d.placements());
    EXPECT_TRUE(equal(acc.full_tensor(), x + y));
  }
  EXPECT_FALSE(implicit_replication_enabled());
}

}  // namespace
