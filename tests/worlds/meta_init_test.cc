// Deferred (meta) initialisation on every world (see world_util.h): a
// model built under nn::MetaDeviceGuard holds no memory, is laid out by
// parallelize_module, fully_shard and arbitrary redistributes without any
// communication, and materialize() then makes each process's shards with
// the values of the model built whole, bit for bit, on 1- to 4-d meshes of
// up to 64 ranks with uneven and empty shards.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"
#include "layout_util.h"
#include "tensor/allocator.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

// Odd sizes, so that most layouts shard unevenly and some ranks hold
// nothing of a small dim.
models::GPTConfig meta_test_config() {
  return {.batch = 2, .seq = 5, .hidden = 12, .heads = 3, .layers = 2, .vocab = 13};
}

std::unique_ptr<models::GPT> meta_gpt(const DeviceMesh& mesh, const models::GPTConfig& c) {
  nn::MetaDeviceGuard meta;
  return std::make_unique<models::GPT>(mesh, c, 77);
}

// Exactly equal, element by element (NaN never appears here).
bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to_vector<double>() == b.to_vector<double>();
}

// Tensor parallelism over the last mesh dim and fully_shard over the
// others (a 1-d mesh: fully_shard alone), as dtensor train lays out a GPT.
void lay_out(models::GPT& model, const DeviceMesh& mesh) {
  const int nd = mesh.ndim();
  if (nd >= 2) parallelize_module(model, nd - 1, models::gpt_tensor_parallel_plan(true, true));
  FullyShardOptions o;
  o.mesh_dims.clear();
  for (int d = 0; d < std::max(1, nd - 1); ++d) o.mesh_dims.push_back(d);
  for (const auto& [name, block] : model.submodule("blocks").named_modules())
    if (!name.empty() && name.find('.') == std::string::npos) fully_shard(*block, o);
  fully_shard(model, o);
}

class MetaInitTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
  World one = World::simulated(1);
  DeviceMesh one_mesh{one, {1}};
};

}  // namespace

// Under the guard every parameter is meta and nothing is allocated; the
// layouts of TP + FSDP move nothing; materialize() gives the whole model's
// values on every mesh, and the first loss is the eager model's, bit for bit.
TEST_F(MetaInitTest, ShardByShardEqualsTheModelMadeWhole) {
  const models::GPTConfig c = meta_test_config();
  models::GPT whole(one_mesh, c, 77);
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 5);
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    std::unique_ptr<models::GPT> model = meta_gpt(mesh, c);
    for (auto& [name, p] : model->named_parameters())
      EXPECT_TRUE(p->is_meta()) << where << " " << name;
    {
      CommDebugMode comm;
      lay_out(*model, mesh);
      EXPECT_EQ(comm.total_count(), 0) << where << ": laying out meta parameters moves nothing";
    }
    EXPECT_GT(model->materialize(), 0) << where;
    EXPECT_EQ(model->materialize(), 0) << where << ": a second materialize makes nothing";
    auto got = model->named_parameters(), want = whole.named_parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first);
      EXPECT_FALSE(got[i].second->is_meta()) << where << " " << got[i].first;
      EXPECT_TRUE(same_values(got[i].second->full_tensor(), want[i].second->full_tensor()))
          << where << " " << got[i].first << " laid out as "
          << to_string(got[i].second->placements());
    }
    // The same layouts made eagerly: the same loss, bit for bit.
    models::GPT eager(mesh, c, 77);
    lay_out(eager, mesh);
    const Placements batch(static_cast<size_t>(mesh.ndim()), Replicate());
    const DTensor x = distribute_tensor(ids, mesh, batch);
    EXPECT_EQ((*model)(x).full_tensor().to_vector<float>(),
              eager(x).full_tensor().to_vector<float>())
        << where;
  }
}

// Any layout of Shard and Replicate (uneven, empty, with shard orders),
// reached through any chain of redistributes, materializes to the values.
TEST_F(MetaInitTest, RandomLayoutsMaterializeTheSameValues) {
  std::mt19937 rng(41);
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, shape);
    for (int trial = 0; trial < 4; ++trial) {
      const Shape dims = {1 + static_cast<int64_t>(rng() % 7), 1 + static_cast<int64_t>(rng() % 5),
                          1 + static_cast<int64_t>(rng() % 3)};
      const uint64_t seed = rng();
      const Placements mid = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), 3);
      const Placements last = dtensor::testing::random_shard_or_replicate(rng, mesh.ndim(), 3);
      if (!dtensor::testing::takes_part(mesh)) continue;
      const std::string where = "mesh " + mesh.to_string() + " shape " + to_string(dims) + " " +
                                to_string(mid) + " -> " + to_string(last);
      struct Holder : nn::Module {
        Holder(const DeviceMesh& m, const Shape& s, uint64_t seed) : Module(m) {
          w = register_parameter("w", nn::Init::normal(s, seed, 0.5, -1));
          u = register_parameter("u", nn::Init::uniform(s, seed + 1, -2, 3));
          k = register_parameter("k", nn::Init::constant(s, 0.25));
          v = register_parameter("v", Tensor::randn(s, seed + 2, 0, DType::Float64));
        }
        DTensor forward(const DTensor& x) override { return x; }
        DTensor *w, *u, *k, *v;
      };
      std::unique_ptr<Holder> h;
      {
        nn::MetaDeviceGuard meta;
        h = std::make_unique<Holder>(mesh, dims, seed);
      }
      for (DTensor* p : {h->w, h->u, h->k, h->v}) {
        ASSERT_TRUE(p->is_meta());
        *p = p->detach().redistribute(mid).redistribute(last);
        EXPECT_TRUE(p->is_meta()) << where;
        EXPECT_EQ(p->spec(), p->spec().with_placements(last)) << where;
      }
      EXPECT_EQ(h->materialize(), 4) << where;
      Holder want(DeviceMesh(one, {1}), dims, seed);
      for (auto [a, b] : {std::pair{h->w, want.w}, {h->u, want.u}, {h->k, want.k}, {h->v, want.v}})
        EXPECT_TRUE(same_values(a->full_tensor(), b->full_tensor())) << where;
    }
  }
}

// A model of about 100 GB builds and lays out in no memory at all; its
// materialize() is refused before anything is allocated, naming it.
TEST_F(MetaInitTest, AModelFarLargerThanTheMachineBuildsAndIsRefusedWhole) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const models::GPTConfig big{
      .batch = 1, .seq = 8, .hidden = 8192, .heads = 64, .layers = 32, .vocab = 50304};
  const size_t before = detail::allocator_stats().bytes_allocated;
  detail::reset_peak_bytes_allocated();
  std::unique_ptr<models::GPT> model = meta_gpt(mesh, big);
  fully_shard(*model);
  int64_t numel = 0;
  for (auto& [name, p] : model->named_parameters()) numel += p->numel();
  EXPECT_GT(numel, int64_t{25} << 30 >> 2) << "over 25 GiB of float32";
  // Only the causal masks, the module tree and its bookkeeping.
  EXPECT_LT(detail::allocator_stats().peak_bytes_allocated - before, size_t{1} << 20);
  const std::string e = error_of([&] { model->materialize(); });
  EXPECT_NE(e.find("materialize"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing was allocated"), std::string::npos) << e;
  EXPECT_TRUE(model->named_parameters()[0].second->is_meta());
}

// Using a parameter before materialize() throws saying what to do; a
// tied weight is made once; a meta tensor assigned without a recipe, and a
// Partial layout, are refused by name.
TEST_F(MetaInitTest, MetaParametersRefuseUseAndKeepTies) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  std::unique_ptr<nn::Linear> fc;
  {
    nn::MetaDeviceGuard meta;
    fc = std::make_unique<nn::Linear>(mesh, 6, 5);
  }
  const DTensor x = distribute_tensor(Tensor::ones({2, 6}), mesh, {Replicate()});
  std::string e = error_of([&] { (*fc)(x); });
  EXPECT_NE(e.find("materialize()"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { fc->weight().full_tensor().to_vector<float>(); }).find("meta tensor"),
            std::string::npos);
  EXPECT_EQ(fc->materialize(), 2);
  EXPECT_NO_THROW((*fc)(x));

  struct Tied : nn::Module {
    explicit Tied(const DeviceMesh& m) : Module(m) {
      a = register_module("a", std::make_unique<nn::Embedding>(m, 7, 4));
      b = register_module("b", std::make_unique<nn::Linear>(m, 4, 7, false));
      b->weight() = a->weight();
    }
    DTensor forward(const DTensor& x) override { return (*b)((*a)(x)); }
    nn::Embedding* a;
    nn::Linear* b;
  };
  std::unique_ptr<Tied> t;
  {
    nn::MetaDeviceGuard meta;
    t = std::make_unique<Tied>(mesh);
  }
  EXPECT_EQ(t->materialize(), 1);
  EXPECT_TRUE(t->a->weight().is_same(t->b->weight()));
  EXPECT_FALSE(t->b->weight().is_meta());

  nn::Linear assigned(mesh, 3, 3, false);  // eager: no recipe kept
  assigned.weight() = DTensor::meta(assigned.weight().spec());
  e = error_of([&] { assigned.materialize(); });
  EXPECT_NE(e.find("no recipe"), std::string::npos) << e;
}

// An optimizer made after fully_shard and before materialize() trains the
// materialized values (it shares their shards), as one made after.
TEST_F(MetaInitTest, AnOptimizerMadeBeforeMaterializeSeesTheValues) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const models::GPTConfig c = meta_test_config();
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 9);
  const Tensor targets = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 10);
  std::vector<std::vector<float>> losses;
  for (bool meta : {true, false}) {
    std::unique_ptr<models::GPT> model =
        meta ? meta_gpt(mesh, c) : std::make_unique<models::GPT>(mesh, c, 77);
    fully_shard(*model);
    optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
    model->materialize();
    std::vector<float> mine;
    for (int step = 0; step < 3; ++step) {
      const DTensor x = distribute_tensor(ids, mesh, {Shard(0)});
      DTensor loss = models::gpt_loss((*model)(x), distribute_tensor(targets, mesh, {Shard(0)}));
      loss.backward();
      opt.step();
      opt.zero_grad();
      mine.push_back(loss.full_tensor().item<float>());
    }
    losses.push_back(mine);
  }
  EXPECT_EQ(losses[0], losses[1]);
}
