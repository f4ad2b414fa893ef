// fully_shard and replicate (fsdp.h) on every world (see world_util.h):
// several SGD steps of a small model, data parallel over 1-d meshes and
// over the dp dim of (dp, tp) meshes, against the same model trained on a
// one-rank mesh (losses, gradients and parameters within 2e-5, float32
// sums in another order); the collectives each step runs, pinned with
// CommDebugMode; and that the unsharded parameters are freed after forward.
// Shapes are uneven on purpose: 7, 5 and 3 rows over 4 or 8 dp ranks (empty
// shards included).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "autograd/graph.h"
#include "dtensor/fsdp.h"
#include "dtensor/optim.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

constexpr double kTolFsdp = 2e-5;
constexpr double kLr = 0.1;

// relu(fc(x)).
class Block : public nn::Module {
 public:
  Block(const DeviceMesh& mesh, int64_t in, int64_t out, uint64_t seed) : Module(mesh) {
    fc = register_module("fc", std::make_unique<nn::Linear>(mesh, in, out, true, seed));
  }
  DTensor forward(const DTensor& x) override { return relu((*fc)(x)); }
  nn::Linear* fc;
};

// blocks 6 -> 7 -> 5 (-> 5 ...), then head 5 -> 3 and a scale of the root's own.
class Net : public nn::Module {
 public:
  Net(const DeviceMesh& mesh, int layers) : Module(mesh) {
    int64_t in = 6;
    for (int i = 0; i < layers; ++i) {
      const int64_t out = i == 0 ? 7 : 5;
      std::string name = "b";
      name += std::to_string(i);
      blocks.push_back(register_module(name, std::make_unique<Block>(mesh, in, out, 100 + 10 * i)));
      in = out;
    }
    head = register_module("head", std::make_unique<nn::Linear>(mesh, in, 3, true, 7));
    scale = register_parameter("scale", Tensor::rand({3}, 9) + 0.5);
  }
  DTensor forward(const DTensor& x) override {
    DTensor h = x;
    for (Block* b : blocks) h = (*b)(h);
    return mul((*head)(h), *scale);
  }
  std::vector<Block*> blocks;
  nn::Linear* head;
  DTensor* scale;
};

const Tensor& input() {
  static const Tensor x = Tensor::randn({8, 6}, 1);
  return x;
}
const Tensor& target() {
  static const Tensor t = Tensor::randn({8, 3}, 2);
  return t;
}

// Batch on dp (Shard(0) on each dp dim, nested), Replicate elsewhere.
Placements batch_placements(const DeviceMesh& mesh, const std::vector<int>& dp) {
  Placements p(static_cast<size_t>(mesh.ndim()), Replicate());
  for (int d : dp) p[static_cast<size_t>(d)] = Shard(0);
  return p;
}

DTensor loss_of(Net& net, const std::vector<int>& dp) {
  const Placements p = batch_placements(net.mesh(), dp);
  DTensor y = net(distribute_tensor(input(), net.mesh(), p));
  DTensor d = sub(y, distribute_tensor(target(), net.mesh(), p));
  return mean(mul(d, d));
}

// p -= lr * grad on the shards. A parallelized model's gradients come in
// the parameter's layout (`exact`); the one-rank reference's are moved there.
void sgd_step(nn::Module& net, bool exact = true) {
  NoGradGuard no_grad;
  for (auto& [name, p] : net.named_parameters()) {
    ASSERT_TRUE(p->is_leaf()) << name;
    ASSERT_TRUE(p->grad().has_value()) << name;
    DTensor g = *p->grad();
    if (exact) {
      ASSERT_EQ(g.placements(), p->placements()) << name;
    } else {
      g = g.redistribute(p->placements());
    }
    for (const auto& [rank, shard] : p->local().shards()) {
      Tensor s = shard;
      s.sub_(g.to_local(rank) * kLr);
    }
    p->zero_grad();
  }
}

// The reference: the same model on a one-rank mesh of its own world.
struct Reference {
  World world = World::simulated(1);
  DeviceMesh mesh{world, {1}};
  Net net;
  explicit Reference(int layers) : net(mesh, layers) {}
};

void expect_same_params(Net& got, Net& want, const std::string& where) {
  auto a = got.named_parameters(), b = want.named_parameters();
  ASSERT_EQ(a.size(), b.size()) << where;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << where;
    EXPECT_LE(max_abs_diff(a[i].second->full_tensor(), b[i].second->full_tensor()), kTolFsdp)
        << where << " " << a[i].first;
  }
}

void expect_same_grads(Net& got, Net& want, const std::string& where) {
  auto a = got.named_parameters(), b = want.named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].second->grad() && b[i].second->grad()) << where << " " << a[i].first;
    EXPECT_LE(max_abs_diff(a[i].second->grad()->full_tensor(), b[i].second->grad()->full_tensor()),
              kTolFsdp)
        << where << " gradient of " << a[i].first;
  }
}

void shard_model(Net& net, const FullyShardOptions& o) {
  for (Block* b : net.blocks) fully_shard(*b, o);
  fully_shard(net, o);
}

// Trains `net` (already parallelized) and the reference for `steps` steps
// and compares losses, gradients and parameters after each.
void train_and_compare(Net& net, const std::vector<int>& dp, int steps, const std::string& where) {
  Reference ref(static_cast<int>(net.blocks.size()));
  for (int step = 0; step < steps; ++step) {
    const std::string at = where + " step " + std::to_string(step);
    DTensor loss = loss_of(net, dp);
    DTensor ref_loss = loss_of(ref.net, {0});
    EXPECT_NEAR(loss.full_tensor().item<double>(), ref_loss.full_tensor().item<double>(), kTolFsdp)
        << at;
    loss.backward();
    ref_loss.backward();
    expect_same_grads(net, ref.net, at);
    sgd_step(net);
    sgd_step(ref.net, false);
    expect_same_params(net, ref.net, at);
  }
}

class FsdpTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();

  // 1-d meshes that fit: 4 and 8 ranks (7 and 5 rows over 8: empty shards).
  std::vector<Shape> meshes_1d() const {
    std::vector<Shape> out = {{4}};
    if (world.size() >= 8) out.push_back({8});
    return out;
  }
};

}  // namespace

// Parameters become Shard(0) over dp leaves whose values are the original
// parameters; three SGD steps match the one-rank model.
TEST_F(FsdpTest, TrainsLikeOneRankOnA1dMesh) {
  for (const Shape& shape : meshes_1d()) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    Net net(mesh, 2);
    Reference ref(2);
    shard_model(net, {});
    EXPECT_TRUE(is_fully_sharded(net) && is_fully_sharded(*net.blocks[0]));
    EXPECT_FALSE(is_fully_sharded(*net.head));
    EXPECT_EQ(data_parallel_mesh_dims(net), std::vector<int>{0});
    EXPECT_TRUE(data_parallel_mesh_dims(*net.head).empty());
    auto got = net.named_parameters(), want = ref.net.named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].second->placements(), Placements{Shard(0)}) << where << got[i].first;
      EXPECT_TRUE(got[i].second->is_leaf() && got[i].second->requires_grad());
      EXPECT_EQ(max_abs_diff(got[i].second->full_tensor(), want[i].second->full_tensor()), 0);
    }
    train_and_compare(net, {0}, 3, where);
  }
}

// Per step of L fully_shard'ed blocks under a root holding the head: one
// all_gather per group in forward, one per block again in backward (the
// root keeps its values), one reduce_scatter per group; without
// reshard_after_forward no all_gather in backward.
TEST_F(FsdpTest, OneAllGatherAndOneReduceScatterPerGroup) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  for (bool reshard : {true, false}) {
    for (int layers : {1, 3}) {
      const std::string where = "layers " + std::to_string(layers) + " reshard " +
                                std::to_string(reshard);
      Net net(mesh, layers);
      FullyShardOptions o;
      o.reshard_after_forward = reshard;
      shard_model(net, o);
      for (int step = 0; step < 2; ++step) {
        CommDebugMode forward;
        DTensor loss = loss_of(net, {0});
        EXPECT_EQ(forward.count(CollectiveKind::AllGather), layers + 1) << where;
        EXPECT_EQ(forward.count(CollectiveKind::ReduceScatter), 0) << where;
        CommDebugMode backward;
        loss.backward();
        EXPECT_EQ(backward.count(CollectiveKind::AllGather), reshard ? layers : 0) << where;
        EXPECT_EQ(backward.count(CollectiveKind::ReduceScatter), layers + 1) << where;
        EXPECT_EQ(backward.count(CollectiveKind::AllReduce), 0) << where;
        sgd_step(net);
      }
    }
  }
}

// reshard_after_forward = k (FSDP2's int): backward gathers each block
// over runs of k consecutive ranks instead of all N (as many all_gathers,
// each rank sending the N/k pieces it kept), with the gradients of
// resharding fully, bit for bit; also for a dp dim inside a 2-d mesh, and
// training as one rank does. Bad ints are refused by name.
TEST_F(FsdpTest, ReshardAfterForwardToASmallerGroup) {
  struct Case {
    Shape shape;
    int dp, k;
  };
  std::vector<Case> cases = {{{4}, 0, 2}, {{1, 4}, 1, 2}};
  if (world.size() >= 8) {
    cases.push_back({{8}, 0, 4});
    cases.push_back({{2, 4}, 1, 2});
  }
  for (const Case& c : cases) {
    DeviceMesh mesh(world, c.shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string() + " k " + std::to_string(c.k);
    const int64_t n = mesh.size(c.dp);
    Net full(mesh, 3), runs(mesh, 3);
    FullyShardOptions o;
    o.mesh_dims = {c.dp};
    shard_model(full, o);
    o.reshard_after_forward = c.k;
    shard_model(runs, o);
    int64_t gathers[2], bytes[2];
    std::vector<std::vector<float>> grads[2];
    Net* nets[2] = {&full, &runs};
    for (int i = 0; i < 2; ++i) {
      DTensor loss = loss_of(*nets[i], {c.dp});
      CommDebugMode backward;
      loss.backward();
      gathers[i] = backward.count(CollectiveKind::AllGather);
      bytes[i] = backward.bytes(CollectiveKind::AllGather);
      for (auto& [name, p] : nets[i]->named_parameters())
        grads[i].push_back(p->grad()->full_tensor().to_vector<float>());
    }
    EXPECT_EQ(gathers[1], gathers[0]) << where;
    EXPECT_EQ(bytes[1], bytes[0] * n / c.k) << where;
    EXPECT_EQ(grads[1], grads[0]) << where;
    for (auto& [name, p] : runs.named_parameters()) p->zero_grad();
    train_and_compare(runs, {c.dp}, 2, where);
  }
  DeviceMesh mesh(world, {1, 4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net bad(mesh, 1);
  FullyShardOptions o;
  o.mesh_dims = {1};
  for (int k : {3, 4, 1}) {
    o.reshard_after_forward = k;
    const std::string e = error_of([&] { fully_shard(bad, o); });
    EXPECT_NE(e.find("must divide the data-parallel group's 4 ranks"), std::string::npos) << e;
  }
  o.mesh_dims = {0, 1};
  o.reshard_after_forward = 2;
  EXPECT_NE(error_of([&] { fully_shard(bad, o); }).find("needs one data-parallel mesh dim"),
            std::string::npos);
}

// Prefetch (FSDP2's implicit prefetching): the same all_gathers, started a
// group early, give the bits of gathering on demand over three AdamW steps,
// with and without activation checkpointing (whose recomputation
// prefetches in backward's order), on 1-d and 2-d meshes.
TEST_F(FsdpTest, PrefetchGivesTheSameBitsAndCollectives) {
  std::vector<Shape> shapes = {{4}, {2, 2}};
  if (world.size() >= 8) shapes.push_back({8});
  for (const Shape& shape : shapes) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    for (bool checkpointed : {false, true}) {
      const std::string where =
          "mesh " + mesh.to_string() + (checkpointed ? " checkpointed" : "");
      // None, implicit, and explicit lists (two groups ahead in forward).
      std::vector<std::vector<float>> runs[3];
      int64_t gathers[3] = {0, 0, 0};
      for (int prefetch = 0; prefetch < 3; ++prefetch) {
        Net net(mesh, 3);
        if (checkpointed)
          for (Block* b : net.blocks) nn::checkpoint_wrapper(*b);
        FullyShardOptions o;
        o.prefetch = prefetch == 1;
        shard_model(net, o);
        if (prefetch == 2) {
          set_modules_to_forward_prefetch(net, {net.blocks[0], net.blocks[1]});
          set_modules_to_forward_prefetch(*net.blocks[0], {net.blocks[2]});
          set_modules_to_backward_prefetch(*net.blocks[2], {net.blocks[1], net.blocks[0]});
        }
        optim::AdamW opt(net.parameters(), {.lr = 1e-2});
        for (int step = 0; step < 3; ++step) {
          CommDebugMode comm;
          DTensor loss = loss_of(net, {0});
          loss.backward();
          opt.step();
          opt.zero_grad();
          gathers[prefetch] += comm.count(CollectiveKind::AllGather);
          runs[prefetch].push_back(loss.full_tensor().to_vector<float>());
        }
        for (auto& [name, p] : net.named_parameters())
          runs[prefetch].push_back(p->full_tensor().to_vector<float>());
      }
      for (int k : {1, 2}) {
        EXPECT_EQ(runs[k], runs[0]) << where << " prefetch mode " << k;
        EXPECT_EQ(gathers[k], gathers[0]) << where << " prefetch mode " << k;
      }
    }
  }
}

// Net with a probe after each block: the probe's backward, which runs
// between the backwards of two groups, notes how many gradient
// reduce_scatters are in flight then.
class ProbedNet : public Net {
 public:
  ProbedNet(const DeviceMesh& mesh, int layers, std::vector<size_t>* seen)
      : Net(mesh, layers), seen_(seen) {}
  DTensor forward(const DTensor& x) override {
    DTensor h = x;
    for (Block* b : blocks) h = probe((*b)(h));
    return mul((*head)(h), *scale);
  }

 private:
  DTensor probe(const DTensor& x) {
    DTensor out = x.detach();
    if (autograd::recording({&x})) {
      std::vector<size_t>* seen = seen_;
      autograd::record(out, "probe", {&x}, {}, [seen](const autograd::Context& c) {
        seen->push_back(reduce_scatters_in_flight());
        return autograd::Grads{c.grad};
      });
    }
    return out;
  }
  std::vector<size_t>* seen_;
};

// async_reduce_scatter against off (the default): the same losses and
// parameters bit for bit over steps with gradient accumulation, the same
// collectives; with it on, a group's reduce_scatter is in flight while the
// next group's backward computes (one at a time), and none is left once
// backward returns. FSDP on 1-d meshes and HSDP on 2-d ones.
TEST_F(FsdpTest, AsyncReduceScatterOverlapsBackwardWithTheSameBits) {
  struct Case {
    Shape mesh;
    FullyShardOptions options;
    std::vector<int> dp;
  };
  // A one-member dp group too ({1, 4}'s dim 0): its reduce_scatter is
  // counted once either way.
  std::vector<Case> cases = {{{4}, {}, {0}},
                             {{2, 2}, {.mesh_dims = {1}, .replicate_mesh_dims = {0}}, {0, 1}},
                             {{1, 4}, {}, {0}}};
  if (world.size() >= 8) cases.push_back({{8}, {}, {0}});
  for (const Case& c : cases) {
    DeviceMesh mesh(world, c.mesh);
    if (!dtensor::testing::takes_part(mesh)) continue;
    std::vector<std::vector<float>> runs[2];
    int64_t counts[2][2] = {};
    for (int async = 0; async < 2; ++async) {
      const std::string where = "mesh " + mesh.to_string() + (async ? " async" : " blocking");
      std::vector<size_t> seen;
      ProbedNet net(mesh, 3, &seen);
      FullyShardOptions o = c.options;
      o.async_reduce_scatter = async == 1;
      shard_model(net, o);
      EXPECT_EQ(data_parallel_mesh_dims(net), c.dp) << where;  // HSDP's replicas batch too
      optim::AdamW opt(net.parameters(), {.lr = 1e-2});
      for (int step = 0; step < 3; ++step) {
        // Step 1 accumulates a backward without sync first.
        if (step == 1) {
          set_requires_gradient_sync(net, false);
          loss_of(net, c.dp).backward();
          set_requires_gradient_sync(net, true);
        }
        CommDebugMode comm;
        seen.clear();
        DTensor loss = loss_of(net, c.dp);
        loss.backward();
        EXPECT_EQ(reduce_scatters_in_flight(), 0u) << where;
        // One probe per block (VerifyMode runs each backward twice).
        ASSERT_GE(seen.size(), 3u) << where;
        const size_t most = *std::max_element(seen.begin(), seen.end());
        EXPECT_EQ(most, async ? 1u : 0u) << where << " step " << step;
        for (auto& [name, p] : net.named_parameters())
          ASSERT_TRUE(p->grad().has_value()) << where << " " << name;
        counts[async][0] += comm.count(CollectiveKind::ReduceScatter);
        counts[async][1] += comm.count(CollectiveKind::AllReduce);
        opt.step();
        opt.zero_grad();
        runs[async].push_back(loss.full_tensor().to_vector<float>());
      }
      for (auto& [name, p] : net.named_parameters())
        runs[async].push_back(p->full_tensor().to_vector<float>());
    }
    EXPECT_EQ(runs[1], runs[0]) << "mesh " << mesh.to_string();
    EXPECT_EQ(counts[1][0], counts[0][0]) << "mesh " << mesh.to_string();
    EXPECT_EQ(counts[1][1], counts[0][1]) << "mesh " << mesh.to_string();
    EXPECT_EQ(counts[0][0], 3 * 4) << "mesh " << mesh.to_string();  // 4 groups, 3 steps
  }
}

// A parameter the forward does not use gets no gradient (FSDP2's), with
// the reduce_scatter blocking or in flight; the used ones get theirs.
TEST_F(FsdpTest, AnUnusedParameterGetsNoGradient) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  struct TwoHeads : nn::Module {
    explicit TwoHeads(const DeviceMesh& m) : Module(m) {
      used = register_module("used", std::make_unique<nn::Linear>(m, 6, 3, true, 1));
      unused = register_module("unused", std::make_unique<nn::Linear>(m, 6, 3, true, 2));
    }
    DTensor forward(const DTensor& x) override { return (*used)(x); }
    nn::Linear* used;
    nn::Linear* unused;
  };
  for (bool async : {false, true}) {
    TwoHeads net(mesh);
    fully_shard(net, {.async_reduce_scatter = async});
    sum(net(distribute_tensor(input(), mesh, {Shard(0)}))).backward();
    for (auto& [name, p] : net.named_parameters())
      EXPECT_EQ(p->grad().has_value(), name.rfind("used.", 0) == 0) << name << " async " << async;
  }
}

// The explicit lists take fully_shard'ed modules only.
TEST_F(FsdpTest, PrefetchListsNameModulesUnderFullyShard) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 2);
  shard_model(net, {});
  const std::string e = error_of([&] { set_modules_to_forward_prefetch(net, {net.head}); });
  EXPECT_NE(e.find("set_modules_to_forward_prefetch: the module is not under fully_shard"),
            std::string::npos)
      << e;
}

// The order is learnt within one root's forward: a model's last group
// never prefetches another model's first (roots without parameters of
// their own included), so each forward runs its own gathers only.
TEST_F(FsdpTest, PrefetchStaysWithinOneModel) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  struct Pair : nn::Module {
    explicit Pair(const DeviceMesh& m, uint64_t seed) : Module(m) {
      a = register_module("a", std::make_unique<Block>(m, 6, 6, seed));
      b = register_module("b", std::make_unique<Block>(m, 6, 6, seed + 1));
    }
    DTensor forward(const DTensor& x) override { return (*b)((*a)(x)); }
    Block *a, *b;
  };
  Pair first(mesh, 1), second(mesh, 3);
  FullyShardOptions o;
  o.prefetch = true;
  for (Pair* p : {&first, &second}) {
    fully_shard(*p->a, o);
    fully_shard(*p->b, o);
    fully_shard(*p, o);
  }
  const DTensor x = distribute_tensor(input(), mesh, {Shard(0)});
  for (int step = 0; step < 3; ++step) {
    for (Pair* p : {&first, &second}) {
      NoGradGuard no_grad;
      CommDebugMode comm;
      (*p)(x);
      EXPECT_EQ(comm.count(CollectiveKind::AllGather), 2) << "step " << step;
    }
  }
}

// A prefetched gather that a forward leaves unused (the module it was for
// not called) and a step then outdates is discarded, not used: the outputs
// equal those without prefetch.
TEST_F(FsdpTest, AnOutdatedPrefetchIsNeverUsed) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  struct Skipping : nn::Module {
    explicit Skipping(const DeviceMesh& m) : Module(m) {
      a = register_module("a", std::make_unique<Block>(m, 6, 6, 1));
      b = register_module("b", std::make_unique<Block>(m, 6, 6, 2));
    }
    DTensor forward(const DTensor& x) override { return use_b ? (*b)((*a)(x)) : (*a)(x); }
    Block *a, *b;
    bool use_b = true;
  };
  std::vector<std::vector<float>> outs[2];
  for (int prefetch = 0; prefetch < 2; ++prefetch) {
    Skipping net(mesh);
    FullyShardOptions o;
    o.prefetch = prefetch == 1;
    fully_shard(*net.a, o);
    fully_shard(*net.b, o);
    fully_shard(net, o);
    const DTensor x = distribute_tensor(input(), mesh, {Shard(0)});
    for (bool use_b : {true, false, true}) {
      net.use_b = use_b;
      outs[prefetch].push_back(net(x).full_tensor().to_vector<float>());
      // b changes in place while a gather of it may be in flight.
      NoGradGuard no_grad;
      net.b->fc->weight().add_(1.0);
    }
  }
  EXPECT_EQ(outs[1], outs[0]);
}

// With reshard_after_forward a block's unsharded parameters are freed when
// its forward ends (the graph keeps a handle, not the values); without,
// they stay alive until backward. The root keeps its own either way.
TEST_F(FsdpTest, UnshardedParametersAreFreedAfterForward) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  int64_t saved[2] = {0, 0};
  for (bool reshard : {true, false}) {
    Net net(mesh, 2);
    FullyShardOptions o;
    o.reshard_after_forward = reshard;
    shard_model(net, o);
    std::vector<std::weak_ptr<Storage>> block_storage, root_storage;
    // Registered after fully_shard's hook: sees the gathered values.
    net.blocks[0]->register_forward_pre_hook([&](nn::Module& m, const DTensor& x) {
      for (auto& [name, p] : m.named_parameters()) {
        EXPECT_FALSE(p->is_leaf()) << name;  // the unsharded value, made from the leaf
        EXPECT_EQ(p->placements(), Placements{Replicate()}) << name;
        block_storage.push_back(p->local().shards().front().second.storage());
      }
      return x;
    });
    net.register_forward_pre_hook([&](nn::Module&, const DTensor& x) {
      root_storage.push_back(net.scale->local().shards().front().second.storage());
      return x;
    });
    DTensor loss = loss_of(net, {0});
    for (const auto& w : block_storage) EXPECT_EQ(w.expired(), reshard) << "reshard " << reshard;
    for (const auto& w : root_storage) EXPECT_FALSE(w.expired());
    EXPECT_EQ(net.blocks[0]->fc->weight().placements(),
              Placements{reshard ? Shard(0) : Replicate()});
    saved[reshard ? 0 : 1] = graph_memory(loss).saved_bytes;
    loss.backward();
    for (const auto& w : block_storage) EXPECT_TRUE(w.expired());
    for (const auto& w : root_storage) EXPECT_TRUE(w.expired());
    // After backward every module reads its shards again.
    for (auto& [name, p] : net.named_parameters()) EXPECT_TRUE(p->is_leaf()) << name;
  }
  // Two blocks' weights (7x6 and 5x7 floats; linear saves no bias) fewer,
  // on each held rank.
  int64_t held = 0;
  for (int r : world.held_ranks()) held += mesh.contains(r) ? 1 : 0;
  EXPECT_EQ(saved[1] - saved[0], (7 * 6 + 5 * 7) * 4 * held);
}

// On (dp, tp) meshes: weights tensor-parallel on dim 1 by hand, then
// fully_shard over dp: leaves (S(0), S(1)) and the same training.
TEST_F(FsdpTest, ShardsTheDpDimOfA2dMesh) {
  std::vector<Shape> shapes = {{2, 2}};
  if (world.size() >= 8) {
    shapes.push_back({4, 2});
    shapes.push_back({2, 4});
  }
  for (const Shape& shape : shapes) {
    DeviceMesh mesh(world, shape, {"dp", "tp"});
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    Net net(mesh, 2);
    for (auto& [name, p] : net.named_parameters()) {
      if (p->dim() != 2) continue;
      DTensor tp = [&] {
        NoGradGuard no_grad;
        return p->redistribute({Replicate(), Shard(1)}).detach();
      }();
      *p = tp.requires_grad_();
    }
    shard_model(net, {});
    for (auto& [name, p] : net.named_parameters())
      EXPECT_EQ(p->placements(), (p->dim() == 2 ? Placements{Shard(0), Shard(1)}
                                                : Placements{Shard(0), Replicate()}))
          << where << " " << name;
    train_and_compare(net, {0}, 2, where);
  }
}

// Every parameter tensor-parallel on dim 0 by hand (column-parallel
// weights): dp splits dim 0 after tp (S(0)[1],S(0)[0]); the one all_gather
// per group restores each tp piece, and training matches one rank (7, 5
// and 3 rows: uneven tp pieces split unevenly again over dp).
TEST_F(FsdpTest, ShardsDim0AfterTensorParallelWithShardOrder) {
  std::vector<Shape> shapes = {{2, 2}};
  if (world.size() >= 8) shapes.push_back({4, 2});
  for (const Shape& shape : shapes) {
    DeviceMesh mesh(world, shape, {"dp", "tp"});
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    Net net(mesh, 2);
    for (auto& [name, p] : net.named_parameters()) {
      DTensor tp = [&] {
        NoGradGuard no_grad;
        return p->redistribute({Replicate(), Shard(0)}).detach();
      }();
      *p = tp.requires_grad_();
    }
    shard_model(net, {});
    for (auto& [name, p] : net.named_parameters())
      EXPECT_EQ(p->placements(), (Placements{Shard(0, 1), Shard(0, 0)})) << where << " " << name;
    train_and_compare(net, {0}, 2, where);
  }
}

// shard_placement_fn (FSDP2's): weights sharded on dim 1 (uneven: 6, 7
// and 5 columns over 4 and 8 ranks, some empty), the rest on dim 0; on a
// 2-d mesh nested after tensor parallelism's Shard(1) (S(1)[1],S(1)[0]) or
// beside its Shard(0). Trains as one rank does; a placement that is not a
// Shard, and a dim out of range, are refused by name.
TEST_F(FsdpTest, ShardPlacementFnShardsAnotherDim) {
  FullyShardOptions o;
  o.shard_placement_fn = [](const std::string&, const DTensor& p) -> std::optional<Placement> {
    if (p.dim() == 2) return Shard(-1);
    return std::nullopt;
  };
  for (const Shape& shape : meshes_1d()) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    Net net(mesh, 2);
    shard_model(net, o);
    EXPECT_EQ(net.blocks[0]->fc->weight().placements(), Placements{Shard(1)});
    EXPECT_EQ(net.blocks[0]->fc->bias()->placements(), Placements{Shard(0)});
    train_and_compare(net, {0}, 3, "mesh " + mesh.to_string() + " Shard(1)");
  }
  for (const Placement tp_dim : {Placement(Shard(1)), Placement(Shard(0))}) {
    DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
    if (!dtensor::testing::takes_part(mesh)) return;
    const std::string where = "tp " + to_string(Placements{tp_dim});
    Net net(mesh, 2);
    for (auto& [name, p] : net.named_parameters()) {
      if (p->dim() != 2) continue;
      DTensor tp = [&] {
        NoGradGuard no_grad;
        return p->redistribute({Replicate(), tp_dim}).detach();
      }();
      *p = tp.requires_grad_();
    }
    shard_model(net, o);
    const Placements want = tp_dim == Shard(1) ? Placements{Shard(1, 1), Shard(1, 0)}
                                               : Placements{Shard(1), Shard(0)};
    EXPECT_EQ(net.blocks[0]->fc->weight().placements(), want) << where;
    train_and_compare(net, {0}, 2, where);
  }
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net bad(mesh, 1);
  FullyShardOptions r;
  r.shard_placement_fn = [](const std::string&, const DTensor&) -> std::optional<Placement> {
    return Replicate();
  };
  EXPECT_NE(error_of([&] { fully_shard(bad, r); }).find("must give a Shard(dim)"),
            std::string::npos);
  r.shard_placement_fn = [](const std::string&, const DTensor&) -> std::optional<Placement> {
    return Shard(2);
  };
  const std::string e = error_of([&] { fully_shard(bad, r); });
  EXPECT_NE(e.find("of shape [3], which has no dim 2"), std::string::npos) << e;
}

// The dp dim need not be the first: on (tp, dp) the leaves are (S(1), S(0)).
TEST_F(FsdpTest, ShardsADpDimThatIsNotFirst) {
  DeviceMesh mesh(world, {2, 2}, {"tp", "dp"});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 2);
  for (auto& [name, p] : net.named_parameters()) {
    if (p->dim() != 2) continue;
    DTensor tp = [&] {
      NoGradGuard no_grad;
      return p->redistribute({Shard(1), Replicate()}).detach();
    }();
    *p = tp.requires_grad_();
  }
  FullyShardOptions o;
  o.mesh_dims = {1};
  shard_model(net, o);
  EXPECT_EQ(net.blocks[0]->fc->weight().placements(), (Placements{Shard(1), Shard(0)}));
  train_and_compare(net, {1}, 2, "(tp, dp) mesh");
}

// A batch sharded over tp as well gives gradients Partial(sum) on tp too:
// they are reduced over tp (all_reduce) before the dp reduce_scatter, and
// the leaves (sharded over dp only) get the whole gradient.
TEST_F(FsdpTest, ReducesGradientsPartialOnOtherMeshDims) {
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 1);
  shard_model(net, {});
  EXPECT_EQ(net.blocks[0]->fc->weight().placements(), (Placements{Shard(0), Replicate()}));
  train_and_compare(net, {0, 1}, 2, "batch over dp and tp");
}

// Several dp dims are flattened into one group: one all_gather over the 4
// ranks of a 2x2 mesh, nested Shard(0)s on the leaves.
TEST_F(FsdpTest, ShardsOverSeveralDpDims) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 2);
  FullyShardOptions o;
  o.mesh_dims = {0, 1};
  shard_model(net, o);
  for (auto& [name, p] : net.named_parameters())
    EXPECT_EQ(p->placements(), (Placements{Shard(0), Shard(0)})) << name;
  {
    CommDebugMode comm;
    DTensor loss = loss_of(net, {0, 1});
    EXPECT_EQ(comm.count(CollectiveKind::AllGather), 3);
  }
  train_and_compare(net, {0, 1}, 2, "dp over both dims of 2x2");
}

// A batch replicated over dp (every rank sees all of it) gives Replicate
// gradients; they are not summed dp times.
TEST_F(FsdpTest, ReplicatedBatchGradientsAreNotMultiplied) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 1);
  shard_model(net, {});
  Reference ref(1);
  DTensor loss = loss_of(net, {});
  DTensor ref_loss = loss_of(ref.net, {});
  loss.backward();
  ref_loss.backward();
  expect_same_grads(net, ref.net, "replicated batch");
}

TEST_F(FsdpTest, ErrorsNameTheProblem) {
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  if (!dtensor::testing::takes_part(mesh)) return;
  {
    Net net(mesh, 1);
    FullyShardOptions o;
    o.mesh_dims = {2};
    EXPECT_NE(error_of([&] { fully_shard(net, o); }).find("mesh dim 2 is out of range"),
              std::string::npos);
    o.mesh_dims = {1, 0};
    EXPECT_NE(error_of([&] { fully_shard(net, o); }).find("ascending"), std::string::npos);
  }
  {
    Net net(mesh, 1);
    DTensor& w = net.blocks[0]->fc->weight();
    w = w.redistribute({Shard(0), Replicate()}).detach().requires_grad_();
    EXPECT_NE(error_of([&] { fully_shard(net); }).find("must be Replicate on the data-parallel"),
              std::string::npos);
  }
  {
    Net net(mesh, 1);
    fully_shard(net);
    EXPECT_NE(error_of([&] { fully_shard(net); }).find("already under fully_shard"),
              std::string::npos);
    EXPECT_NE(error_of([&] { replicate(net); }).find("already under fully_shard"),
              std::string::npos);
  }
}

// A forward that throws inside a block (its post-forward hook never runs)
// leaves nothing behind that breaks the next steps; the root is the
// outermost fully_shard module, whichever module is called.
TEST_F(FsdpTest, RecoversFromAForwardThatThrows) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 2);
  shard_model(net, {});
  const DTensor bad = distribute_tensor(Tensor::randn({8, 4}, 3), mesh, {Shard(0)});
  EXPECT_FALSE(error_of([&] { net(bad); }).empty());
  // A block called on its own is not the root: it reshards after forward.
  DTensor h = (*net.blocks[0])(distribute_tensor(input(), mesh, {Shard(0)}));
  EXPECT_EQ(net.blocks[0]->fc->weight().placements(), Placements{Shard(0)});
  train_and_compare(net, {0}, 2, "after a failed forward");
}

// optim.h on the sharded leaves: AdamW's steps are local to the shards and
// its state is sharded like them; three steps match AdamW on one rank.
TEST_F(FsdpTest, AdamWStepsTheShards) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 2);
  shard_model(net, {});
  Reference ref(2);
  optim::AdamW opt(net.parameters(), {.lr = 0.05});
  optim::AdamW ref_opt(ref.net.parameters(), {.lr = 0.05});
  for (int step = 0; step < 3; ++step) {
    const std::string at = "step " + std::to_string(step);
    opt.zero_grad();
    ref_opt.zero_grad();
    DTensor loss = loss_of(net, {0});
    DTensor ref_loss = loss_of(ref.net, {0});
    EXPECT_NEAR(loss.full_tensor().item<double>(), ref_loss.full_tensor().item<double>(), kTolFsdp)
        << at;
    loss.backward();
    ref_loss.backward();
    CommDebugMode comm;
    opt.step();
    EXPECT_EQ(comm.total_count(), 0) << at;  // gradients already in the leaves' layout
    ref_opt.step();
    expect_same_params(net, ref.net, at);
  }
  EXPECT_EQ(opt.state(0).buffer("exp_avg").placements(), Placements{Shard(0)});
}

// ---- replicate ---------------------------------------------------------------------------

// Parameters stay Replicate; each gradient arrives Replicate (one
// all_reduce per parameter per step) and training matches one rank.
TEST_F(FsdpTest, ReplicateTrainsLikeOneRank) {
  for (const Shape& shape : meshes_1d()) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    Net net(mesh, 2);
    replicate(net);
    EXPECT_EQ(data_parallel_mesh_dims(net), std::vector<int>{0});
    const int64_t params = static_cast<int64_t>(net.named_parameters().size());
    Reference ref(2);
    for (int step = 0; step < 3; ++step) {
      const std::string at = "mesh " + mesh.to_string() + " step " + std::to_string(step);
      CommDebugMode forward;
      DTensor loss = loss_of(net, {0});
      EXPECT_EQ(forward.count(CollectiveKind::AllGather), 0) << at;
      DTensor ref_loss = loss_of(ref.net, {0});
      EXPECT_NEAR(loss.full_tensor().item<double>(), ref_loss.full_tensor().item<double>(), kTolFsdp);
      CommDebugMode backward;
      loss.backward();
      EXPECT_EQ(backward.count(CollectiveKind::AllReduce), params) << at;
      EXPECT_EQ(backward.total_count(), params) << at;
      ref_loss.backward();
      for (auto& [name, p] : net.named_parameters())
        EXPECT_EQ(p->grad()->placements(), Placements{Replicate()}) << at << " " << name;
      expect_same_grads(net, ref.net, at);
      sgd_step(net);
      sgd_step(ref.net, false);
      expect_same_params(net, ref.net, at);
    }
  }
}

// ---- mixed precision (MixedPrecisionPolicy) ----------------------------------------------

namespace {

MixedPrecisionPolicy bf16_policy(std::optional<DType> reduce) {
  MixedPrecisionPolicy mp;
  mp.param_dtype = DType::BFloat16;
  mp.reduce_dtype = reduce;
  return mp;
}

// The bytes each collective kind moved in one forward and backward.
struct StepBytes {
  int64_t gather = 0, scatter = 0, all_reduce = 0;
};

StepBytes step_bytes(Net& net) {
  CommDebugMode mode;
  DTensor loss = loss_of(net, {0});
  loss.backward();
  return {mode.bytes(CollectiveKind::AllGather), mode.bytes(CollectiveKind::ReduceScatter),
          mode.bytes(CollectiveKind::AllReduce)};
}

// The bound on how far a bfloat16 step of Net may drift from float32: each
// rounding to bfloat16 errs by at most 2^-9 relative; a value of Net passes
// through at most ~8 of them (input, weight, product, bias add, relu per
// layer...), each error scaled by weights of magnitude < 1, so 8 * 2^-9 =
// 1.6% of the value's magnitude (the loss and gradients are O(1) here).
constexpr double kTolBf16 = 8.0 / 512;

}  // namespace

// param_dtype bf16, reduce_dtype f32: the all-gathers carry half the bytes
// of a float32 step, the reduce-scatters as many; the leaves, their
// gradients and the optimizer's view stay float32; the step follows the
// float32 model within the bfloat16 bound, and a one-rank model under the
// same policy.
TEST_F(FsdpTest, MixedPrecisionGathersInParamDtypeAndReducesInReduceDtype) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net full(mesh, 2);
  shard_model(full, {});
  const StepBytes f32 = step_bytes(full);

  Net net(mesh, 2);
  FullyShardOptions o;
  o.mp_policy = bf16_policy(DType::Float32);
  shard_model(net, o);
  const StepBytes mixed = step_bytes(net);
  EXPECT_EQ(mixed.gather * 2, f32.gather);
  EXPECT_EQ(mixed.scatter, f32.scatter);
  EXPECT_EQ(mixed.all_reduce, f32.all_reduce);
  for (auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(p->dtype(), DType::Float32) << name;
    ASSERT_TRUE(p->grad().has_value()) << name;
    EXPECT_EQ(p->grad()->dtype(), DType::Float32) << name;
    p->zero_grad();
  }
  for (auto& [name, p] : full.named_parameters()) p->zero_grad();

  // reduce_dtype unset: param_dtype's, so the reduce-scatters halve too.
  Net low(mesh, 2);
  FullyShardOptions lo;
  lo.mp_policy = bf16_policy(std::nullopt);
  shard_model(low, lo);
  EXPECT_EQ(step_bytes(low).scatter * 2, f32.scatter);

  // Three steps against float32 (the bound above) and against one rank
  // under the same policy (sums in another order: a bfloat16 rounding may
  // go the other way, so the same bound).
  World one = World::simulated(1);
  DeviceMesh one_mesh(one, {1});
  Net ref(one_mesh, 2);
  shard_model(ref, o);
  for (int step = 0; step < 3; ++step) {
    const std::string at = "step " + std::to_string(step);
    DTensor loss = loss_of(net, {0}), want = loss_of(full, {0}), one_loss = loss_of(ref, {0});
    EXPECT_EQ(loss.dtype(), DType::Float32);  // bf16 output - f32 target
    const double l = loss.full_tensor().item<double>();
    EXPECT_NEAR(l, want.full_tensor().item<double>(), kTolBf16 * std::max(1.0, std::abs(l))) << at;
    EXPECT_NEAR(l, one_loss.full_tensor().item<double>(), kTolBf16 * std::max(1.0, std::abs(l)))
        << at;
    loss.backward();
    want.backward();
    one_loss.backward();
    auto a = net.named_parameters(), b = full.named_parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LE(max_abs_diff(a[i].second->grad()->full_tensor(), b[i].second->grad()->full_tensor()),
                kTolBf16)
          << at << " gradient of " << a[i].first;
    sgd_step(net);
    sgd_step(full);
    sgd_step(ref);
  }
}

TEST_F(FsdpTest, MixedPrecisionCastsInputsAndOutputs) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 1);
  FullyShardOptions o;
  o.mp_policy = bf16_policy(DType::Float32);
  o.mp_policy.output_dtype = DType::Float32;
  shard_model(net, o);
  // The block computes in bfloat16 (its input cast, its parameters
  // gathered so); the root's output is cast to float32.
  DType block_out = DType::Float32;
  net.blocks[0]->register_forward_hook([&](nn::Module&, const DTensor&, const DTensor& y) {
    block_out = y.dtype();
    return y;
  });
  const DTensor y = net(distribute_tensor(input(), mesh, {Shard(0)}));
  EXPECT_EQ(block_out, DType::Float32);  // the block's own output_dtype too
  EXPECT_EQ(y.dtype(), DType::Float32);
  o.mp_policy.output_dtype.reset();
  Net plain_out(mesh, 1);
  shard_model(plain_out, o);
  EXPECT_EQ(plain_out(distribute_tensor(input(), mesh, {Shard(0)})).dtype(), DType::BFloat16);

  MixedPrecisionPolicy bad;
  bad.param_dtype = DType::Int64;
  FullyShardOptions bo;
  bo.mp_policy = bad;
  Net other(mesh, 1);
  const std::string e = error_of([&] { fully_shard(other, bo); });
  EXPECT_NE(e.find("param_dtype must be a floating dtype"), std::string::npos) << e;
}

// replicate's all-reduces run in reduce_dtype (param_dtype's when unset):
// float32 bytes for a bf16 forward with reduce_dtype f32, half for bf16.
TEST_F(FsdpTest, ReplicateReducesInReduceDtype) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net full(mesh, 2);
  replicate(full);
  const StepBytes f32 = step_bytes(full);
  ASSERT_GT(f32.all_reduce, 0);
  for (std::optional<DType> reduce : {std::optional<DType>(DType::Float32), std::optional<DType>()}) {
    Net net(mesh, 2);
    ReplicateOptions o;
    o.mp_policy = bf16_policy(reduce);
    replicate(net, o);
    const StepBytes got = step_bytes(net);
    EXPECT_EQ(got.all_reduce * (reduce ? 1 : 2), f32.all_reduce);
    auto a = net.named_parameters(), b = full.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      const DTensor& p = *a[i].second;
      EXPECT_EQ(p.dtype(), DType::Float32) << a[i].first;
      ASSERT_TRUE(p.grad().has_value()) << a[i].first;
      EXPECT_EQ(p.grad()->dtype(), DType::Float32) << a[i].first;
      EXPECT_EQ(p.grad()->placements(), Placements{Replicate()}) << a[i].first;
      EXPECT_LE(max_abs_diff(p.grad()->full_tensor(), b[i].second->grad()->full_tensor()),
                kTolBf16)
          << a[i].first;
    }
  }
}

// redistribute(forward_dtype, backward_dtype), as PyTorch: the result is of
// forward_dtype and moved so (half the bytes for bf16); the gradient moves
// back in backward_dtype and reaches the source in its own dtype.
TEST_F(FsdpTest, RedistributeForwardAndBackwardDtypes) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  DTensor x = distribute_tensor(Tensor::randn({8, 6}, 5), mesh, {Shard(0)});
  x.requires_grad_();
  RedistributeOptions o;
  o.forward_dtype = DType::BFloat16;
  o.backward_dtype = DType::Float32;
  CommDebugMode forward;
  DTensor r = x.redistribute({Replicate()}, o);
  EXPECT_EQ(r.dtype(), DType::BFloat16);
  EXPECT_EQ(forward.bytes(CollectiveKind::AllGather), 6 * 2 * 2);  // 2 rows of 6 bf16 per rank
  EXPECT_TRUE(equal(r.full_tensor(), x.full_tensor().to(DType::BFloat16)));
  // sum(r @ w), w sharded on dim 1: r's gradient (ones @ w^T) is a
  // Partial(sum), reduce-scattered back to x's Shard(0) in backward_dtype:
  // twice the bytes of reducing it in bf16, on every rank.
  DTensor w = distribute_tensor(Tensor::ones({6, 4}, DType::BFloat16), mesh, {Shard(1)});
  int64_t moved[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    DTensor xi = x.detach();
    xi.requires_grad_();
    RedistributeOptions oi = o;
    if (i == 1) oi.backward_dtype.reset();
    DTensor loss = sum(matmul(xi.redistribute({Replicate()}, oi), w));
    CommDebugMode backward;
    loss.backward();
    for (int k = 0; k < kNumCollectiveKinds; ++k)
      moved[i] += backward.bytes(static_cast<CollectiveKind>(k));
    EXPECT_EQ(backward.count(CollectiveKind::ReduceScatter, i == 0 ? DType::Float32
                                                                    : DType::BFloat16),
              1);
    ASSERT_TRUE(xi.grad().has_value());
    EXPECT_EQ(xi.grad()->dtype(), DType::Float32);
    EXPECT_EQ(xi.grad()->placements(), Placements{Shard(0)});
    EXPECT_TRUE(equal(xi.grad()->full_tensor(), Tensor::full({8, 6}, 4.0)));
  }
  EXPECT_GT(moved[1], 0);
  EXPECT_EQ(moved[0], 2 * moved[1]);
  RedistributeOptions bad;
  bad.backward_dtype = DType::Int64;
  const std::string e = error_of([&] { x.redistribute({Replicate()}, bad); });
  EXPECT_NE(e.find("forward_dtype and backward_dtype must be floating dtypes, got int64"),
            std::string::npos)
      << e;
}

// set_requires_gradient_sync(false): backwards reduce-scatter nothing and
// leave the sharded parameters without a gradient; the next backward with
// sync gives the sum of all of them, as the one-rank model accumulates it.
// recurse=false leaves the blocks syncing.
TEST_F(FsdpTest, GradientAccumulationWithoutSync) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  for (bool recurse : {true, false}) {
    const std::string where = recurse ? "recurse" : "root only";
    Net net(mesh, 2);
    Reference ref(2);
    shard_model(net, {});
    set_requires_gradient_sync(net, false, recurse);
    for (int micro = 0; micro < 2; ++micro) {
      DTensor loss = loss_of(net, {0});
      CommDebugMode comm;
      loss.backward();
      EXPECT_EQ(comm.count(CollectiveKind::ReduceScatter), recurse ? 0 : 2) << where;
      EXPECT_FALSE(net.head->weight().grad().has_value()) << where;
      EXPECT_EQ(net.blocks[0]->fc->weight().grad().has_value(), !recurse) << where;
      loss_of(ref.net, {0}).backward();
    }
    set_requires_gradient_sync(net, true);
    DTensor loss = loss_of(net, {0});
    CommDebugMode comm;
    loss.backward();
    EXPECT_EQ(comm.count(CollectiveKind::ReduceScatter), 3) << where;
    loss_of(ref.net, {0}).backward();
    expect_same_grads(net, ref.net, where);
    sgd_step(net);
    sgd_step(ref.net, false);
    expect_same_params(net, ref.net, where);
  }
}

// set_gradient_divide_factor divides the module's own group's reduced
// gradients (not its children's); set_reshard_after_forward(false) leaves
// backward without all_gathers. Both need a fully_shard module.
TEST_F(FsdpTest, DivideFactorAndReshardSetters) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 2);
  Reference ref(2);
  shard_model(net, {});
  set_gradient_divide_factor(net, 4.0);
  set_reshard_after_forward(net, false);
  DTensor loss = loss_of(net, {0});
  CommDebugMode comm;
  loss.backward();
  EXPECT_EQ(comm.count(CollectiveKind::AllGather), 0);
  loss_of(ref.net, {0}).backward();
  auto got = net.named_parameters(), want = ref.net.named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool root_own = got[i].first.rfind("b", 0) != 0;  // head.*, scale
    const Tensor expected = want[i].second->grad()->full_tensor() / (root_own ? 4.0 : 1.0);
    EXPECT_LE(max_abs_diff(got[i].second->grad()->full_tensor(), expected), kTolFsdp)
        << got[i].first;
  }
  EXPECT_NE(error_of([&] { set_gradient_divide_factor(*net.head, 2.0); }).find("not under fully_shard"),
            std::string::npos);
  EXPECT_NE(error_of([&] { set_gradient_divide_factor(net, 0.0); }).find("factor > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { set_requires_gradient_sync(*net.head, false); }).find("not under fully_shard"),
            std::string::npos);
}

// HSDP: sharded over one mesh dim, replicated over another, the batch
// split over both. Per group and step: one all_gather over the shard dim
// in forward, one reduce_scatter over it and one all_reduce of the shard
// over the replicate dim in backward (its bytes a shard group's share of
// the gradient's); training matches the one-rank model. Also with the
// batch replicated over the replicate dim (its gradients not summed twice),
// and a replicate dim that is also a shard dim is refused.
TEST_F(FsdpTest, HybridShardingShardsOneDimAndReplicatesTheOther) {
  std::vector<Shape> shapes = {{2, 2}};
  if (world.size() >= 8) shapes.push_back({2, 4});
  for (const Shape& shape : shapes) {
    DeviceMesh mesh(world, shape, {"replicate", "shard"});
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::string where = "mesh " + mesh.to_string();
    const FullyShardOptions o{.mesh_dims = {1}, .replicate_mesh_dims = {0}};
    Net net(mesh, 2);
    shard_model(net, o);
    for (auto& [name, p] : net.named_parameters())
      EXPECT_EQ(p->placements(), (Placements{Replicate(), Shard(0)})) << where << " " << name;
    {
      CommDebugMode forward;
      DTensor loss = loss_of(net, {0, 1});
      EXPECT_EQ(forward.count(CollectiveKind::AllGather), 3) << where;
      CommDebugMode backward;
      loss.backward();
      EXPECT_EQ(backward.count(CollectiveKind::ReduceScatter), 3) << where;
      EXPECT_EQ(backward.count(CollectiveKind::AllReduce), 3) << where;
      // The all_reduce carries the shards (padded pieces), a shard group's
      // share of what the reduce_scatter reduces.
      EXPECT_EQ(backward.bytes(CollectiveKind::AllReduce) * mesh.size(1),
                backward.bytes(CollectiveKind::ReduceScatter))
          << where;
      for (auto& [name, p] : net.named_parameters()) p->zero_grad();
    }
    train_and_compare(net, {0, 1}, 3, where);
    Net replicated_batch(mesh, 1);
    shard_model(replicated_batch, o);
    Reference ref(1);
    loss_of(replicated_batch, {1}).backward();
    loss_of(ref.net, {0}).backward();
    expect_same_grads(replicated_batch, ref.net, where + " batch replicated over dim 0");
  }
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  Net net(mesh, 1);
  EXPECT_NE(error_of([&] { fully_shard(net, {.mesh_dims = {0}, .replicate_mesh_dims = {0}}); })
                .find("in both mesh_dims (shard) and replicate_mesh_dims"),
            std::string::npos);
}
