// Values that every process must agree on when tensors live on meshes of
// different ranks (a mesh over part of the world, a sub-mesh's views): run
// here in each world (world_util.h) and compared, bit for bit, with the
// same program on a simulated world of the same size built inside the
// test. Under mpirun a process holding no rank of some mesh must still get
// the value the simulated world gets, or a clear error there too.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dtensor/optim.h"
#include "dtensor/parallel.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

class SubmeshTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// The same bits, element by element (and the same shape and dtype).
bool bits_equal_submesh(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// The max and min of `v` over every process of the world: equal when every
// process holds the same value.
std::pair<double, double> spread_over_world(const World& world, double v) {
  const DeviceMesh all(world, Shape{world.size()});
  auto reduce = [&](ReduceOp op) {
    LocalTensor local;
    for (int r : world.held_ranks()) local.set(r, Tensor::full({1}, v, DType::Float64));
    return DTensor(DTensorSpec(all, {Partial(op)}, Shape{1}, DType::Float64), local)
        .full_tensor()
        .item<double>();
  };
  return {reduce(ReduceOp::Max), reduce(ReduceOp::Min)};
}

struct ClipCase {
  Placements a, b;
  double norm_type;
  DType dtype;
  double max_norm;
};

struct ClipResult {
  double total = 0;
  std::vector<DTensor> grads;  // after clipping, per parameter
};

// Parameter A on a mesh of ranks 0-3, B on ranks 0-1 only, C on a mesh of
// every rank (replicated or sharded): the layout, on `w`.
ClipResult clip_on(const World& w, const ClipCase& c, bool clip) {
  const DeviceMesh a(w, {4});
  const DeviceMesh b(w, {2}, std::vector<int>{0, 1});
  const DeviceMesh everyone(w, Shape{w.size()});
  const std::vector<std::pair<DeviceMesh, Placements>> layouts = {
      {a, c.a}, {b, c.b}, {everyone, c.a}};
  const std::vector<Shape> shapes = {{6, 3}, {5}, {9, 2}};
  std::vector<DTensor> params;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto& [mesh, pl] = layouts[i];
    DTensor p = distribute_tensor(Tensor::zeros(shapes[i], c.dtype), mesh, pl);
    p.requires_grad_();
    p.set_grad(distribute_tensor(Tensor::randn(shapes[i], 70 + i, 0, c.dtype), mesh, pl));
    params.push_back(p);
  }
  ClipResult out;
  out.total = clip ? optim::clip_grad_norm_(params, c.max_norm, c.norm_type)
                   : optim::total_grad_norm(params, c.norm_type);
  for (const DTensor& p : params) out.grads.push_back(*p.grad());
  return out;
}

double submesh_reference_norm(const ClipCase& c) {
  const std::vector<Shape> shapes = {{6, 3}, {5}, {9, 2}};
  double acc = 0;
  for (size_t i = 0; i < shapes.size(); ++i)
    for (double x : Tensor::randn(shapes[i], 70 + i, 0, c.dtype).to_vector<double>())
      acc = std::isinf(c.norm_type) ? std::max(acc, std::abs(x))
                                    : acc + std::pow(std::abs(x), c.norm_type);
  return std::isinf(c.norm_type) ? acc : std::pow(acc, 1 / c.norm_type);
}

}  // namespace

// Issue 38: parameters on meshes of different ranks. Every process (those
// outside B's ranks 0-1 and, on 8 or more processes, those outside both A
// and B) gets the norm of all three gradients with the bits of the
// simulated world, and clips its shards by the same coefficient.
TEST_F(SubmeshTest, ClipGradNormIsOneValueAcrossMeshesOfDifferentRanks) {
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const World sim = World::simulated(world.size());
  std::vector<ClipCase> cases;
  for (double p : {2.0, 1.0, 3.0, double(INFINITY)})
    for (DType dtype : {DType::Float32, DType::Float64}) {
      cases.push_back({{Shard(0)}, {Replicate()}, p, dtype, 0.5});
      cases.push_back({{Replicate()}, {Shard(0)}, p, dtype, 0.5});
      cases.push_back({{Shard(0)}, {Shard(0)}, p, dtype, 1e9});  // nothing clipped
    }
  for (const ClipCase& c : cases) {
    for (bool clip : {true, false}) {
      const std::string what = std::string(clip ? "clip_grad_norm_" : "total_grad_norm") +
                               " norm " + std::to_string(c.norm_type) + " " +
                               dtype_name(c.dtype) + " A " + to_string(c.a) + " B " +
                               to_string(c.b);
      const ClipResult got = clip_on(world, c, clip);
      const ClipResult want = clip_on(sim, c, clip);
      EXPECT_EQ(got.total, want.total) << what << ": the simulated world's bits";
      EXPECT_NEAR(got.total, submesh_reference_norm(c), 1e-5 * got.total) << what;
      const auto [hi, lo] = spread_over_world(world, got.total);
      EXPECT_EQ(hi, lo) << what << ": every process the same";
      for (size_t i = 0; i < got.grads.size(); ++i)
        for (const auto& [rank, shard] : got.grads[i].local().shards())
          EXPECT_TRUE(bits_equal_submesh(shard, want.grads[i].to_local(rank)))
              << what << ": parameter " << i << " rank " << rank << "'s clipped gradient";
    }
  }
}

// A sub-mesh's gradient that every view holds alike (replicas) counts once:
// on a (2, 2) mesh, B on mesh["tp"] (two views) adds its norm once to A's,
// with the same bits on every process, in both worlds.
TEST_F(SubmeshTest, ClipGradNormCountsASubMeshReplicaOnce) {
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  auto run = [](const World& w) {
    const DeviceMesh mesh(w, {2, 2}, {"dp", "tp"});
    DTensor a =
        distribute_tensor(Tensor::zeros({4, 3}, DType::Float64), mesh, {Shard(0), Shard(1)});
    DTensor b = distribute_tensor(Tensor::zeros({5}, DType::Float64), mesh["tp"], {Shard(0)});
    a.requires_grad_();
    b.requires_grad_();
    a.set_grad(distribute_tensor(Tensor::randn({4, 3}, 1, 0, DType::Float64), mesh,
                                 {Shard(0), Shard(1)}));
    b.set_grad(distribute_tensor(Tensor::randn({5}, 2, 0, DType::Float64), mesh["tp"], {Shard(0)}));
    return optim::clip_grad_norm_({a, b}, 1e9);
  };
  const double got = run(world);
  EXPECT_EQ(got, run(World::simulated(world.size())));
  double acc = 0;
  for (const Tensor& g : {Tensor::randn({4, 3}, 1, 0, DType::Float64),
                          Tensor::randn({5}, 2, 0, DType::Float64)})
    for (double x : g.to_vector<double>()) acc += x * x;
  EXPECT_NEAR(got, std::sqrt(acc), 1e-12 * got);
  const auto [hi, lo] = spread_over_world(world, got);
  EXPECT_EQ(hi, lo);
}

// Views of a sub-mesh holding different gradients have no one norm that
// every process could return: every process throws, naming the sub-mesh
// and the views' norms (before, the simulated world returned the view of
// rank 0's and each MPI process its own view's).
TEST_F(SubmeshTest, ClipGradNormThrowsWhenSubMeshViewsDiffer) {
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  const DeviceMesh tp = mesh["tp"];
  LocalTensor local;
  for (int r : world.held_ranks())
    if (mesh.contains(r))  // view dp = r / 2 holds dp + 1 everywhere
      local.set(r, Tensor::full({3}, 1.0 + r / 2, DType::Float64));
  DTensor b = distribute_tensor(Tensor::zeros({6}, DType::Float64), tp, {Shard(0)});
  b.requires_grad_();
  b.set_grad(DTensor(DTensorSpec(tp, {Shard(0)}, Shape{6}, DType::Float64), local));
  for (bool clip : {true, false}) {
    const std::string message = dtensor::testing::error_of([&] {
      if (clip)
        optim::clip_grad_norm_({b}, 1.0);
      else
        optim::total_grad_norm({b});
    });
    EXPECT_NE(message.find("different norms in its 2 views"), std::string::npos) << message;
    EXPECT_NE(message.find("view of rank 0"), std::string::npos) << message;
    EXPECT_NE(message.find("that of rank 2"), std::string::npos) << message;
  }
}

namespace {

// Targets of 6 tokens for view `view` of a sub-mesh: view 1 ignores more
// of them, so the two views' means have different counts.
Tensor view_targets(int64_t view) {
  return Tensor::from_vector(view == 0 ? std::vector<int64_t>{1, 4, -100, 0, 6, 2}
                                       : std::vector<int64_t>{-100, 3, -100, -100, 5, 2});
}

}  // namespace

// A loss on a sub-mesh's views is each view's own: vocab_parallel_cross_entropy
// on mesh["tp"] of a (2, 2) mesh, with targets that ignore a different
// number of tokens in each view, gives each view's ranks the loss and
// logits' gradient of the same call on a mesh of that view's ranks alone
// (the backward's mean divided by the count of the view holding the rank,
// not one count per process).
TEST_F(SubmeshTest, VocabParallelCrossEntropyOnSubMeshViewsIsEachViewsOwn) {
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  const Tensor logits = Tensor::randn({6, 7}, 5, 0, DType::Float64);
  auto run = [&](const DeviceMesh& m, const std::function<Tensor(int)>& targets) {
    DTensor z = distribute_tensor(logits, m, {Shard(1)});
    z.requires_grad_();
    LocalTensor local;
    for (int r : world.held_ranks())
      if (m.contains(r)) local.set(r, targets(r));
    const DTensor t(DTensorSpec(m, {Replicate()}, Shape{6}, DType::Int64), local);
    DTensor loss = vocab_parallel_cross_entropy(z, t, 0);
    loss.backward();
    return std::make_pair(loss, *z.grad());
  };
  const auto [loss, grad] = run(mesh["tp"], [](int r) { return view_targets(r / 2); });
  for (int64_t view = 0; view < 2; ++view) {
    const DeviceMesh alone(world, {2}, mesh["tp"].ranks(static_cast<int>(2 * view)));
    const auto [want_loss, want_grad] = run(alone, [view](int) { return view_targets(view); });
    for (const auto& [rank, shard] : want_loss.local().shards()) {
      EXPECT_TRUE(bits_equal_submesh(loss.to_local(rank), shard)) << "loss of rank " << rank;
      EXPECT_TRUE(bits_equal_submesh(grad.to_local(rank), want_grad.to_local(rank)))
          << "logits' gradient of rank " << rank;
    }
  }
}

// One norm is reduced over one world: gradients on meshes of two worlds
// throw, naming the parameter.
TEST_F(SubmeshTest, ClipGradNormRejectsGradientsOfTwoWorlds) {
  const World other = World::simulated(1);
  DTensor a = distribute_tensor(Tensor::zeros({3}), DeviceMesh(world, {1}), {Replicate()});
  DTensor b = distribute_tensor(Tensor::zeros({3}), DeviceMesh(other, {1}), {Replicate()});
  for (DTensor* p : {&a, &b}) {
    p->requires_grad_();
    p->set_grad(distribute_tensor(Tensor::ones({3}), p->mesh(), {Replicate()}));
  }
  const std::string message =
      dtensor::testing::error_of([&] { optim::clip_grad_norm_({a, b}, 1.0); });
  EXPECT_NE(message.find("parameter 1 lives on another world than that of parameter 0"),
            std::string::npos)
      << message;
}

// A loss on a mesh of ranks 0-1 is a DTensor: the processes of the mesh
// read its value, and a process outside it (under mpirun) holds no shard
// of it and gets a clear error from full_tensor, never another value.
TEST_F(SubmeshTest, LossOnAMeshOfSomeRanksIsReadOnlyThere) {
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const DeviceMesh b(world, {2}, std::vector<int>{0, 1});
  const Tensor logits = Tensor::randn({4, 5}, 3, 0, DType::Float64);
  const Tensor target = Tensor::from_vector(std::vector<int64_t>{0, 4, 2, 1});
  const DTensor loss = cross_entropy(distribute_tensor(logits, b, {Shard(0)}),
                                     distribute_tensor(target, b, {Shard(0)}));
  if (dtensor::testing::takes_part(b)) {
    EXPECT_NEAR(loss.full_tensor().item<double>(), cross_entropy(logits, target).item<double>(),
                1e-12);
  } else {
    EXPECT_TRUE(loss.local().empty());
    const std::string message = dtensor::testing::error_of([&] { loss.full_tensor(); });
    EXPECT_NE(message.find("full_tensor: this process holds no rank of mesh DeviceMesh([2]"),
              std::string::npos)
        << message;
  }
}
