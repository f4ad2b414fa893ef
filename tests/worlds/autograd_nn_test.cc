// Gradients of the NN ops (softmax, log_softmax, layer_norm, rms_norm,
// nll_loss, cross_entropy, embedding, dropout) on every world (see
// world_util.h): float64, random small shapes (uneven and empty shards) and
// random placements, Partials of the float inputs included, against finite
// differences and against the same computation on replicated inputs; plus
// the layouts the gradients keep (sequence-sharded norms, vocab-parallel
// tables) and the conventions checked exactly (ignored targets).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::check_gradients;
using dtensor::testing::check_matches_replicated;
using dtensor::testing::GradFn;
using dtensor::testing::make_dtensor;

namespace {

class AutogradNnTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Sharded computations add in another order than replicated ones.
constexpr double kTol = 1e-10;

// A shape of rank min_nd..3 with sizes 0-5 and at most 48 elements (finite
// differences cost two forwards per element), so that shards are uneven or
// empty on the grad meshes.
Shape small_shape(std::mt19937& rng, int min_nd = 1) {
  for (;;) {
    Shape s;
    const int nd = min_nd + static_cast<int>(rng() % static_cast<unsigned>(4 - min_nd));
    for (int i = 0; i < nd; ++i) s.push_back(rng() % 6);
    if (s.product() <= 48) return s;
  }
}

Placements float_placements(std::mt19937& rng, const DeviceMesh& mesh, int64_t ndim) {
  return dtensor::testing::random_input_placements(rng, mesh.ndim(), ndim);
}

// Integer tensors (indices, targets): Shard or Replicate.
Placements index_placements(std::mt19937& rng, const DeviceMesh& mesh, int64_t ndim) {
  return dtensor::testing::random_input_placements(rng, mesh.ndim(), ndim, false);
}

DTensor leaf_nn(const Tensor& full, const DeviceMesh& mesh, const Placements& pl, uint64_t seed) {
  DTensor x = make_dtensor(full, mesh, pl, seed);
  x.requires_grad_();
  return x;
}

Placements replicate_nn(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// The leaves' gradients (full tensors) when f's output receives a random
// gradient laid out in `pg` (Partial included: the backward ops then see
// gradients of every layout, not only the replicated ones the weighted loss
// of grad_util.h gives).
std::vector<Tensor> gradients_given(const GradFn& f, std::vector<DTensor> inputs,
                                    const Placements& pg, uint64_t seed) {
  for (DTensor& x : inputs) x.zero_grad();
  const DTensor out = f(inputs);
  const Tensor g_full = Tensor::randn(out.shape(), seed, 0, out.dtype());
  out.backward(make_dtensor(g_full, out.mesh(), pg, seed + 1));
  std::vector<Tensor> grads;
  for (const DTensor& x : inputs) grads.push_back(x.grad() ? x.grad()->full_tensor() : Tensor());
  return grads;
}

// gradients_given with the output's gradient in `pg` against the same
// computation on replicated inputs given a replicated gradient.
std::string check_gradient_layout(const GradFn& f, const std::vector<DTensor>& inputs,
                                  const Placements& pg, uint64_t seed) {
  const DeviceMesh& mesh = inputs[0].mesh();
  std::vector<DTensor> replicated;
  for (const DTensor& x : inputs) {
    DTensor r = distribute_tensor(x.full_tensor(), mesh, replicate_nn(mesh));
    if (x.requires_grad()) r.requires_grad_();
    replicated.push_back(r);
  }
  const std::vector<Tensor> got = gradients_given(f, inputs, pg, seed);
  const std::vector<Tensor> want = gradients_given(f, replicated, replicate_nn(mesh), seed);
  std::string problems;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    if (got[i].defined() != want[i].defined()) {
      problems += "input " + std::to_string(i) + ": a gradient reached only one of the two\n";
    } else if (got[i].defined() && !allclose(got[i], want[i], kTol, kTol, /*equal_nan=*/true)) {
      problems += "input " + std::to_string(i) + " given a gradient in " + to_string(pg) +
                  ": sharded and replicated gradients differ\n";
    }
  }
  return problems;
}

// The checks of one case; `what` names it in failures. `pg`: the
// placements the output's gradient is given in for the third check.
void check_all(const GradFn& f, const std::vector<DTensor>& inputs, const Placements& pg,
               uint64_t seed, const std::string& what, bool finite_differences = true) {
  if (finite_differences) {
    EXPECT_EQ(check_gradients(f, inputs, seed), "") << what;
  }
  EXPECT_EQ(check_matches_replicated(f, inputs, seed, kTol, kTol), "") << what;
  EXPECT_EQ(check_gradient_layout(f, inputs, pg, seed), "") << what;
}

std::string describe_autograd_nn(const DeviceMesh& mesh, const std::vector<DTensor>& inputs) {
  std::string s = "mesh " + mesh.to_string();
  for (const DTensor& x : inputs) s.append(" ").append(x.spec().to_string());
  return s;
}

}  // namespace

TEST_F(AutogradNnTest, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(101);
  const int cases = dtensor::testing::property_cases(4);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const Shape shape = small_shape(rng);
      const int64_t nd = static_cast<int64_t>(shape.size());
      const int64_t dim = static_cast<int64_t>(rng() % (2 * nd)) - nd;
      const bool log = rng() % 2 == 0;
      const Placements pl = float_placements(rng, mesh, nd);
      const Placements pg = float_placements(rng, mesh, nd);
      if (!dtensor::testing::takes_part(mesh)) continue;
      const DTensor x = leaf_nn(Tensor::randn(shape, 10 + k, 0, DType::Float64), mesh, pl, 3);
      const GradFn f = [dim, log](const std::vector<DTensor>& in) {
        return log ? log_softmax(in[0], dim) : softmax(in[0], dim);
      };
      check_all(f, {x}, pg, 5 + k,
                 std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim) +
                     " " + describe_autograd_nn(mesh, {x}));
    }
  }
}

TEST_F(AutogradNnTest, LayerNormAndRmsNorm) {
  std::mt19937 rng(202);
  const int cases = dtensor::testing::property_cases(4);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const Shape shape = small_shape(rng);
      const int64_t nd = static_cast<int64_t>(shape.size());
      const int64_t nk = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(nd, 2));
      Shape ns;
      for (int64_t i = nd - nk; i < nd; ++i) ns.push_back(shape[i]);
      const bool layer = rng() % 2 == 0;
      const bool with_w = rng() % 3 != 0, with_b = layer && rng() % 3 != 0;
      const std::optional<double> eps =
          rng() % 2 == 0 ? std::optional<double>(0.1) : std::nullopt;  // none: the default
      const Placements px = float_placements(rng, mesh, nd);
      const Placements pw = float_placements(rng, mesh, nk);
      const Placements pb = float_placements(rng, mesh, nk);
      const Placements pg = float_placements(rng, mesh, nd);
      if (!dtensor::testing::takes_part(mesh)) continue;
      std::vector<DTensor> in = {leaf_nn(Tensor::randn(shape, 20 + k, 0, DType::Float64), mesh, px, 3)};
      if (with_w) in.push_back(leaf_nn(Tensor::randn(ns, 30 + k, 0, DType::Float64), mesh, pw, 4));
      if (with_b) in.push_back(leaf_nn(Tensor::randn(ns, 40 + k, 0, DType::Float64), mesh, pb, 5));
      const GradFn f = [=](const std::vector<DTensor>& v) {
        const std::optional<DTensor> w = with_w ? std::optional<DTensor>(v[1]) : std::nullopt;
        const std::optional<DTensor> b =
            with_b ? std::optional<DTensor>(v[with_w ? 2 : 1]) : std::nullopt;
        if (layer) return eps ? layer_norm(v[0], ns, w, b, *eps) : layer_norm(v[0], ns, w, b);
        return rms_norm(v[0], ns, w, eps);
      };
      check_all(f, in, pg, 7 + k,
                 std::string(layer ? "layer_norm" : "rms_norm") + " normalized " +
                     to_string(ns) + " " + describe_autograd_nn(mesh, in));
    }
  }
}

// A sequence-sharded input (PyTorch's SequenceParallel): the input's
// gradient stays sharded on the sequence dim and the replicated weight's and
// bias's come out Partial(sum), reduced by nobody until the optimizer wants
// them.
TEST_F(AutogradNnTest, SequenceShardedNormsKeepTheirLayout) {
  for (const Shape& ms : std::vector<Shape>{{4}, {2, 2}}) {
    if (ms.product() > world.size()) continue;
    DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;
    Placements px(static_cast<size_t>(mesh.ndim()), Shard(1));
    if (mesh.ndim() == 2) px[0] = Shard(0);  // batch on one mesh dim, sequence on the other
    const Shape shape = {2, 8, 6};
    for (bool layer : {true, false}) {
      DTensor x = leaf_nn(Tensor::randn(shape, 1, 0, DType::Float64), mesh, px, 0);
      DTensor w = leaf_nn(Tensor::randn({6}, 2, 0, DType::Float64), mesh, replicate_nn(mesh), 0);
      DTensor b = leaf_nn(Tensor::randn({6}, 3, 0, DType::Float64), mesh, replicate_nn(mesh), 0);
      const DTensor y = layer ? layer_norm(x, {6}, w, b) : rms_norm(x, {6}, w);
      ASSERT_EQ(y.placements(), px);
      const DTensor g = distribute_tensor(Tensor::randn(shape, 4, 0, DType::Float64), mesh, px);
      {
        CommDebugMode comm;
        y.backward(g);
        EXPECT_EQ(comm.total_count(), 0) << comm.table();
      }
      EXPECT_EQ(x.grad()->placements(), px);
      EXPECT_EQ(w.grad()->placements(), Placements(px.size(), Partial()));
      if (layer) {
        EXPECT_EQ(b.grad()->placements(), Placements(px.size(), Partial()));
      }
      // The same values as the replicated computation.
      const GradFn f = [layer](const std::vector<DTensor>& v) {
        return layer ? layer_norm(v[0], {6}, v[1], v[2]) : rms_norm(v[0], {6}, v[1]);
      };
      std::vector<DTensor> in = {x, w};
      if (layer) in.push_back(b);
      EXPECT_EQ(check_matches_replicated(f, in, 9, kTol, kTol), "");
    }
  }
}

// A norm whose normalized dim is sharded (x Shard(2), weight and bias
// Shard(0)): the forward gathers them (three all_gathers, as the rule
// would) as autograd steps of their own, so backward computes on the
// gathered values and needs no collective for the norm itself (before, it
// recomputed the statistics from the sharded input: on a 1-d mesh of 4, 2
// all_gathers, 3 all_reduces and 2 reduce_scatters); the gradients go back to the shards by local cuts and
// equal the replicated computation's. On (2, 2) with the batch on mesh
// dim 0, the weight's and bias's gradients are sums over the batch shards
// of a weight Replicate there: one all_reduce each, as data parallelism.
TEST_F(AutogradNnTest, NormsOverAShardedDimNeedNoBackwardCollective) {
  for (const Shape& ms : std::vector<Shape>{{4}, {2, 2}}) {
    if (ms.product() > world.size()) continue;
    DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;
    Placements px(static_cast<size_t>(mesh.ndim()), Shard(2));
    Placements pw(static_cast<size_t>(mesh.ndim()), Shard(0));
    if (mesh.ndim() == 2) px[0] = Shard(0), pw[0] = Replicate();
    const Shape shape = {2, 3, 8};
    for (bool layer : {true, false}) {
      const std::string where = std::string(layer ? "layer_norm" : "rms_norm") + " mesh " +
                                mesh.to_string();
      DTensor x = leaf_nn(Tensor::randn(shape, 1, 0, DType::Float64), mesh, px, 0);
      DTensor w = leaf_nn(Tensor::randn({8}, 2, 0, DType::Float64), mesh, pw, 0);
      DTensor b = leaf_nn(Tensor::randn({8}, 3, 0, DType::Float64), mesh, pw, 0);
      std::optional<CommDebugMode> forward(std::in_place);
      const DTensor y = layer ? layer_norm(x, {8}, w, b) : rms_norm(x, {8}, w);
      EXPECT_EQ(forward->count(CollectiveKind::AllGather), layer ? 3 : 2) << where;
      EXPECT_EQ(forward->total_count(), layer ? 3 : 2) << where << forward->table();
      forward.reset();
      const DTensor g = distribute_tensor(Tensor::randn(shape, 4, 0, DType::Float64), mesh,
                                          y.placements());
      {
        CommDebugMode comm;
        y.backward(g);
        const int64_t params = mesh.ndim() == 2 ? (layer ? 2 : 1) : 0;
        EXPECT_EQ(comm.count(CollectiveKind::AllReduce), params) << where << comm.table();
        EXPECT_EQ(comm.total_count(), params) << where << comm.table();
      }
      EXPECT_EQ(x.grad()->placements(), px) << where;
      EXPECT_EQ(w.grad()->placements(), pw) << where;
      const GradFn f = [layer](const std::vector<DTensor>& v) {
        return layer ? layer_norm(v[0], {8}, v[1], v[2]) : rms_norm(v[0], {8}, v[1]);
      };
      std::vector<DTensor> in = {x, w};
      if (layer) in.push_back(b);
      EXPECT_EQ(check_matches_replicated(f, in, 9, kTol, kTol), "") << where;
    }
  }
}

namespace {

// (C), (N, C), (N, C, d1) or (N, C, d1, d2) with C >= 1, and its target shape.
std::pair<Shape, Shape> loss_shapes(std::mt19937& rng) {
  const int nd = 1 + static_cast<int>(rng() % 4);
  Shape in;
  for (int i = 0; i < nd; ++i) in.push_back(rng() % (nd > 2 ? 4 : 6));
  in[nd == 1 ? 0 : 1] = 1 + rng() % 5;
  Shape t;
  if (nd >= 2) {
    t.push_back(in[0]);
    for (int i = 2; i < nd; ++i) t.push_back(in[i]);
  }
  return {in, t};
}

}  // namespace

TEST_F(AutogradNnTest, NllLossAndCrossEntropy) {
  std::mt19937 rng(303);
  const int cases = dtensor::testing::property_cases(5);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const auto [shape, ts] = loss_shapes(rng);
      const int64_t classes = shape.size() == 1 ? shape[0] : shape[1];
      const int64_t ignore =
          rng() % 2 == 0 ? int64_t{-100} : static_cast<int64_t>(rng() % classes);
      const Reduction red = static_cast<Reduction>(rng() % 3);
      const bool ce = rng() % 2 == 0;
      const Placements px = float_placements(rng, mesh, static_cast<int64_t>(shape.size()));
      const Placements pt = index_placements(rng, mesh, static_cast<int64_t>(ts.size()));
      const Placements pg =
          float_placements(rng, mesh, red == Reduction::None ? static_cast<int64_t>(ts.size()) : 0);
      if (!dtensor::testing::takes_part(mesh)) continue;
      const Tensor target = dtensor::testing::class_targets(ts, classes, ignore, 50 + k);
      const DTensor x = leaf_nn(Tensor::randn(shape, 60 + k, 0, DType::Float64), mesh, px, 3);
      const DTensor t = distribute_tensor(target, mesh, pt);
      const GradFn f = [&t, red, ignore, ce](const std::vector<DTensor>& in) {
        return ce ? cross_entropy(in[0], t, red, ignore) : nll_loss(in[0], t, red, ignore);
      };
      // A Mean over no counted target is NaN whatever x is: finite
      // differences say nothing there (AllIgnoredTargets pins it).
      const bool none_counted = sum(ne(target, ignore)).item<int64_t>() == 0;
      check_all(f, {x}, pg, 11 + k,
                 std::string(ce ? "cross_entropy" : "nll_loss") + " reduction " +
                     std::to_string(static_cast<int>(red)) + " ignore " + std::to_string(ignore) +
                     " " + describe_autograd_nn(mesh, {x, t}),
                 !(none_counted && red == Reduction::Mean));
    }
  }
}

// The scatter, exactly: -g at each counted target's class, divided by the
// count for Mean; ignored targets (here a valid class index) get nothing.
TEST_F(AutogradNnTest, NllLossGradientIsTheScatterOfMinusG) {
  const Shape ms = world.size() >= 4 ? Shape{4} : Shape{1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor lp = Tensor::randn({5, 3}, 1, 0, DType::Float64);
  const Tensor target = Tensor::from_vector(std::vector<int64_t>{2, 1, 1, 0, 1}, Shape{5});
  for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    DTensor x = leaf_nn(lp, mesh, {Shard(0)}, 0);
    const DTensor t = distribute_tensor(target, mesh, {Shard(0)});
    DTensor loss = nll_loss(x, t, red, /*ignore_index=*/1);
    if (red == Reduction::None) loss = sum(loss);
    loss.backward();
    const double v = red == Reduction::Mean ? -0.5 : -1.0;  // two counted targets
    std::vector<double> want(15, 0.0);
    want[0 * 3 + 2] = v;
    want[3 * 3 + 0] = v;
    EXPECT_TRUE(equal(x.grad()->full_tensor(), Tensor::from_vector(want, Shape{5, 3})))
        << x.grad()->full_tensor();
    EXPECT_EQ(x.grad()->placements(), Placements{Shard(0)});
  }
}

// Every target ignored: Mean's loss is NaN (0/0, as the forward and PyTorch
// give) and the gradient is 0 everywhere; Sum's loss is 0, gradient 0.
TEST_F(AutogradNnTest, AllIgnoredTargets) {
  const Shape ms = world.size() >= 4 ? Shape{2, 2} : Shape{1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const Placements pl(static_cast<size_t>(mesh.ndim()), Shard(0));
  for (bool ce : {false, true}) {
    for (Reduction red : {Reduction::Sum, Reduction::Mean}) {
      DTensor x = leaf_nn(Tensor::randn({3, 4}, 1, 0, DType::Float64), mesh, pl, 0);
      const DTensor t = distribute_tensor(Tensor::full({3}, -100, DType::Int64), mesh, pl);
      const DTensor loss = ce ? cross_entropy(x, t, red) : nll_loss(x, t, red);
      const double value = loss.full_tensor().item<double>();
      if (red == Reduction::Mean) {
        EXPECT_TRUE(std::isnan(value));
      } else {
        EXPECT_EQ(value, 0.0);
      }
      loss.backward();
      EXPECT_TRUE(equal(x.grad()->full_tensor(), Tensor::zeros({3, 4}, DType::Float64)))
          << x.grad()->full_tensor();
    }
  }
}

TEST_F(AutogradNnTest, Embedding) {
  std::mt19937 rng(404);
  const int cases = dtensor::testing::property_cases(5);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const int64_t v = 1 + static_cast<int64_t>(rng() % 7), d = rng() % 4;
      Shape is;
      const int ind = static_cast<int>(rng() % 3);
      for (int i = 0; i < ind; ++i) is.push_back(rng() % 5);
      const Placements pw = float_placements(rng, mesh, 2);
      const Placements pi = index_placements(rng, mesh, ind);
      const Placements pg = float_placements(rng, mesh, ind + 1);
      if (!dtensor::testing::takes_part(mesh)) continue;
      // Few rows, many lookups: duplicates are common.
      const DTensor idx = distribute_tensor(Tensor::randint(0, v, is, 70 + k), mesh, pi);
      const DTensor w = leaf_nn(Tensor::randn({v, d}, 80 + k, 0, DType::Float64), mesh, pw, 3);
      const GradFn f = [&idx](const std::vector<DTensor>& in) { return embedding(in[0], idx); };
      check_all(f, {w}, pg, 13 + k, "embedding " + describe_autograd_nn(mesh, {w, idx}));
    }
  }
}

// A vocab-parallel table (rows sharded) looked up with replicated indices:
// its gradient stays S(0), each rank adding the rows it owns, and nothing
// moves in backward (no all_gather of the table).
TEST_F(AutogradNnTest, RowShardedTableGradientStaysSharded) {
  for (const Shape& ms : std::vector<Shape>{{4}, {2, 2}}) {
    if (ms.product() > world.size()) continue;
    DeviceMesh mesh(world, ms);
    if (!dtensor::testing::takes_part(mesh)) continue;
    // 2-d mesh: rows on mesh dim 0, indices batch-sharded on mesh dim 1.
    const Placements pw = mesh.ndim() == 1 ? Placements{Shard(0)} : Placements{Shard(0), Replicate()};
    const Placements pi = mesh.ndim() == 1 ? Placements{Replicate()} : Placements{Replicate(), Shard(0)};
    const Tensor table = Tensor::randn({10, 3}, 1, 0, DType::Float64);
    const Tensor ids = Tensor::from_vector(std::vector<int64_t>{9, 0, 3, 3, 7, 9, 9, 2}, Shape{2, 4});
    DTensor w = leaf_nn(table, mesh, pw, 0);
    const DTensor idx = distribute_tensor(ids, mesh, pi);
    const DTensor out = embedding(w, idx);
    Placements pg = out.placements();
    for (Placement& p : pg)
      if (p.is_partial()) p = Replicate();  // the gradient of a masked partial: replicated
    const Tensor gfull = Tensor::randn({2, 4, 3}, 2, 0, DType::Float64);
    const DTensor g = distribute_tensor(gfull, mesh, pg);
    {
      CommDebugMode comm;
      out.backward(g);
      EXPECT_EQ(comm.total_count(), 0) << comm.table();
    }
    const Placements want_pl =
        mesh.ndim() == 1 ? Placements{Shard(0)} : Placements{Shard(0), Partial()};
    EXPECT_EQ(w.grad()->placements(), want_pl);
    // Duplicates accumulate: the plain reference adds every row's gradient.
    Tensor want = Tensor::zeros({10, 3}, DType::Float64);
    const std::vector<int64_t> iv = ids.to_vector<int64_t>();
    std::vector<double> wv = want.to_vector<double>();
    const std::vector<double> gv = gfull.to_vector<double>();
    for (size_t i = 0; i < iv.size(); ++i)
      for (int64_t j = 0; j < 3; ++j) wv[iv[i] * 3 + j] += gv[i * 3 + j];
    EXPECT_TRUE(allclose(w.grad()->full_tensor(), Tensor::from_vector(wv, Shape{10, 3}), 1e-12, 1e-12));
  }
}

TEST_F(AutogradNnTest, Dropout) {
  std::mt19937 rng(505);
  const int cases = dtensor::testing::property_cases(3);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const Shape shape = small_shape(rng);
      const double p = (rng() % 3) * 0.3;
      const uint64_t seed = rng() % 1000;
      const Placements pl = float_placements(rng, mesh, static_cast<int64_t>(shape.size()));
      const Placements pg = float_placements(rng, mesh, static_cast<int64_t>(shape.size()));
      if (!dtensor::testing::takes_part(mesh)) continue;
      const DTensor x = leaf_nn(Tensor::randn(shape, 90 + k, 0, DType::Float64), mesh, pl, 3);
      const GradFn f = [p, seed](const std::vector<DTensor>& in) {
        return dropout(in[0], p, seed);
      };
      check_all(f, {x}, pg, 17 + k,
                 "dropout p " + std::to_string(p) + " " + describe_autograd_nn(mesh, {x}));
    }
  }
}

// The mask of backward is the forward's: the gradient is zero exactly where
// the output is, and 1/(1-p) elsewhere.
TEST_F(AutogradNnTest, DropoutGradientUsesTheForwardMask) {
  const Shape ms = world.size() >= 6 ? Shape{2, 3} : Shape{1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const Placements pl(static_cast<size_t>(mesh.ndim()), Shard(1));
  DTensor x = leaf_nn(Tensor::rand({4, 7}, 1, 0, DType::Float64) + 1.0, mesh, pl, 0);
  const DTensor y = dropout(x, 0.5, 42);
  sum(y).backward();
  const Tensor kept = ne(y.full_tensor(), 0.0);
  EXPECT_TRUE(equal(x.grad()->full_tensor(), where(kept, Tensor::full({4, 7}, 2.0, DType::Float64), 0.0)));
}

// float32 inputs: the backward computes in float32 (rms_norm's default eps
// is float32's) and agrees with the float64 gradients to float32 precision.
TEST_F(AutogradNnTest, Float32GradientsMatchFloat64) {
  const Shape ms = world.size() >= 4 ? Shape{2, 2} : Shape{1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const Placements pl(static_cast<size_t>(mesh.ndim()), Shard(0));
  const Tensor xf = Tensor::randn({6, 5}, 1, 0, DType::Float64);
  const Tensor wf = Tensor::randn({5}, 2, 0, DType::Float64);
  const Tensor tf = dtensor::testing::class_targets({6}, 5, -100, 3);
  const Tensor table = Tensor::randn({7, 5}, 4, 0, DType::Float64);
  const Tensor ids = Tensor::randint(0, 7, {6}, 5);
  auto grads = [&](DType dtype) {
    DTensor x = leaf_nn(xf.to(dtype), mesh, pl, 0);
    DTensor w = leaf_nn(wf.to(dtype), mesh, replicate_nn(mesh), 0);
    DTensor e = leaf_nn(table.to(dtype), mesh, Placements(pl.size(), Shard(0)), 0);
    const DTensor t = distribute_tensor(tf, mesh, pl);
    const DTensor i = distribute_tensor(ids, mesh, pl);
    const DTensor h = add(rms_norm(layer_norm(x, {5}), {5}, w), embedding(e, i));
    const DTensor loss = cross_entropy(dropout(softmax(h, 1), 0.2, 7), t);
    loss.backward();
    for (const DTensor* p : {&x, &w, &e}) EXPECT_EQ(p->grad()->dtype(), dtype);
    return std::vector<Tensor>{x.grad()->full_tensor(), w.grad()->full_tensor(),
                               e.grad()->full_tensor()};
  };
  const std::vector<Tensor> f32 = grads(DType::Float32), f64 = grads(DType::Float64);
  for (size_t k = 0; k < f32.size(); ++k)
    EXPECT_TRUE(allclose(f32[k].to(DType::Float64), f64[k], 1e-3, 1e-5)) << k << "\n"
                                                                        << f32[k] << "\n"
                                                                        << f64[k];
}

// What each op keeps for its backward: softmax and log_softmax their output,
// the norms their input and weight (the statistics are recomputed), the
// losses their targets (cross_entropy also its log-probabilities), a lookup
// its indices (never the table), dropout nothing (the mask is its seed's).
TEST_F(AutogradNnTest, SavesOnlyWhatBackwardNeeds) {
  DeviceMesh mesh(world, {1});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Placements r = {Replicate()};
  const DTensor x = leaf_nn(Tensor::randn({4, 5}, 1, 0, DType::Float64), mesh, r, 0);  // 160 bytes
  const DTensor w = leaf_nn(Tensor::randn({5}, 2, 0, DType::Float64), mesh, r, 0);     // 40
  const DTensor b = leaf_nn(Tensor::randn({5}, 3, 0, DType::Float64), mesh, r, 0);
  const DTensor t = distribute_tensor(Tensor::randint(0, 5, {4}, 4), mesh, r);  // 32
  const DTensor table = leaf_nn(Tensor::randn({7, 5}, 5, 0, DType::Float64), mesh, r, 0);
  const DTensor ids = distribute_tensor(Tensor::randint(0, 7, {6}, 6), mesh, r);  // 48
  EXPECT_EQ(graph_memory(softmax(x, 1)).saved_bytes, 160);
  EXPECT_EQ(graph_memory(log_softmax(x, 0)).saved_bytes, 160);
  EXPECT_EQ(graph_memory(layer_norm(x, {5}, w, b)).saved_bytes, 200);
  EXPECT_EQ(graph_memory(rms_norm(x, {5})).saved_bytes, 160);
  EXPECT_EQ(graph_memory(nll_loss(x, t)).saved_bytes, 32);
  EXPECT_EQ(graph_memory(cross_entropy(x, t)).saved_bytes, 192);
  EXPECT_EQ(graph_memory(embedding(table, ids)).saved_bytes, 48);
  EXPECT_EQ(graph_memory(dropout(x, 0.5, 1)).saved_bytes, 0);
}
