// vocab_parallel_cross_entropy (parallel.h), the fused vocabulary-parallel
// loss, against plain cross_entropy on the full tensor: its value on every
// rank and the logits' gradient, over tp sizes 1-4, a dp dim splitting the
// batch, class slices of uneven (and empty) size, ignored targets, large
// logits and float64; its collectives; the same bits at any thread count.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/parallel.h"
#include "dtensor/threads.h"
#include "test_util.h"

namespace dtensor {
namespace {

// A problem: logits (tokens..., V) and targets (tokens...).
struct Problem {
  Tensor logits, target;
  int64_t ignore_index = -100;
};

Problem make_problem(const Shape& tokens, int64_t classes, uint64_t seed, double scale,
                     DType dtype, double ignored_fraction, int64_t ignore_index = -100) {
  Shape shape = tokens;
  shape.push_back(classes);
  Problem p;
  p.logits = mul(Tensor::randn(shape, seed, 0, dtype), scale);
  p.target = Tensor::randint(0, classes, tokens, seed + 1);
  if (ignored_fraction > 0)
    p.target = masked_fill(p.target, lt(Tensor::rand(tokens, seed + 2), ignored_fraction),
                           ignore_index);
  p.ignore_index = ignore_index;
  return p;
}

struct Result {
  Tensor loss;  // every rank's loss, which must agree
  Tensor grad;  // d loss / d logits, full
};

// The reference: cross_entropy on the full tensors, on one rank.
Result reference(const Problem& p) {
  World world = World::simulated(1);
  DeviceMesh mesh(world, {1});
  DTensor logits = distribute_tensor(p.logits, mesh, {Replicate()});
  logits.requires_grad_();
  const int64_t classes = p.logits.shape().back();
  const int64_t tokens = p.target.numel();
  DTensor loss = cross_entropy(reshape(logits, {tokens, classes}),
                               reshape(distribute_tensor(p.target, mesh, {Replicate()}), {tokens}),
                               Reduction::Mean, p.ignore_index);
  loss.backward();
  return {loss.full_tensor(), logits.grad()->full_tensor()};
}

// The fused loss on `mesh_shape` (the last mesh dim tp; a first one, if
// any, splits the batch when batch_on_dp), checking that every rank holds
// the same loss.
Result vocab_parallel(const Problem& p, const Shape& mesh_shape, bool batch_on_dp = true,
                      Placement logits_on_tp = Shard(-1)) {
  World world = World::simulated(static_cast<int>(mesh_shape.product()));
  DeviceMesh mesh(world, mesh_shape);
  const int tp = mesh.ndim() - 1;
  Placements lp(static_cast<size_t>(mesh.ndim()), Replicate()), tl = lp;
  lp[static_cast<size_t>(tp)] = logits_on_tp;
  if (mesh.ndim() == 2 && batch_on_dp && p.target.dim() > 0) lp[0] = tl[0] = Shard(0);
  DTensor logits = distribute_tensor(p.logits, mesh, lp);
  logits.requires_grad_();
  DTensor loss = vocab_parallel_cross_entropy(logits, distribute_tensor(p.target, mesh, tl), tp,
                                              p.ignore_index);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.dtype(), p.logits.dtype());
  for (Placement pl : loss.placements()) EXPECT_TRUE(pl.is_replicate()) << to_string(pl);
  const Tensor first = loss.to_local(mesh.ranks().front());
  for (int r : mesh.ranks())
    EXPECT_TRUE(equal(loss.to_local(r), first) ||
                (std::isnan(first.item<double>()) && std::isnan(loss.to_local(r).item<double>())))
        << "rank " << r << " of " << mesh.to_string();
  loss.backward();
  // The gradient is laid out like the logits (S(-1) spelt S(ndim - 1)).
  Placements want = lp;
  for (Placement& pl : want)
    if (pl.is_shard() && pl.dim() < 0) pl = Shard(pl.dim() + logits.dim());
  EXPECT_EQ(logits.grad()->placements(), want);
  return {first, logits.grad()->full_tensor()};
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(DType::Float64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// Loss within `rel` relatively, gradient within `rel` of its scale. The
// mean loss's gradient is (softmax - one_hot) / N over N counted tokens,
// and a softmax entry near 1 is only known to a few ulps of 1, so when
// every entry is tiny (p_target = 1 - 1e-8) both computations still carry
// errors of about eps / N: the scale is at least 1 / tokens. (A floor of
// 1e-3 failed 25 of 50,000 float32 cases at 1e-8-1e-7, where cross_entropy
// itself is as far from the float64 gradient as the fused loss.)
void expect_close(const Result& got, const Result& want, double rel, const std::string& where,
                  const Problem& p) {
  const double l = want.loss.item<double>();
  EXPECT_NEAR(got.loss.item<double>(), l, rel * std::max(1.0, std::abs(l))) << where;
  const double tokens = static_cast<double>(std::max<int64_t>(p.target.numel(), 1));
  EXPECT_LE(max_abs_diff(got.grad, want.grad), rel * std::max(1.0 / tokens, max_abs(want.grad)))
      << where;
}

TEST(VocabParallelCrossEntropyTest, MatchesCrossEntropyOnRandomShapes) {
  std::mt19937 rng(2024);
  const int cases = testing::property_cases(60);
  for (int i = 0; i < cases; ++i) {
    const int64_t tp = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    const int64_t dp = std::uniform_int_distribution<int64_t>(1, 2)(rng);
    const Shape mesh = dp == 1 && i % 2 == 0 ? Shape{tp} : Shape{dp, tp};
    Shape tokens;
    const int nd = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int d = 0; d < nd; ++d) tokens.push_back(std::uniform_int_distribution<int64_t>(1, 5)(rng));
    const int64_t classes = std::uniform_int_distribution<int64_t>(1, 19)(rng);
    const DType dtype = i % 3 == 2 ? DType::Float64 : DType::Float32;
    const Problem p = make_problem(tokens, classes, 100 + i, 3.0, dtype, 0.2);
    const std::string where = "case " + std::to_string(i) + ": mesh " + to_string(mesh) +
                              " logits " + to_string(p.logits.shape()) + " " +
                              dtype_short_name(dtype);
    const Result want = reference(p);
    if (std::isnan(want.loss.item<double>())) continue;  // all ignored: its own test
    expect_close(vocab_parallel(p, mesh), want, dtype == DType::Float64 ? 1e-12 : 1e-5, where, p);
  }
}

// V not divisible by tp, down to ranks whose class slice is empty (V = 2 or
// 3 on tp 4: chunks of ceil(V / 4) leave the last ranks nothing).
TEST(VocabParallelCrossEntropyTest, UnevenAndEmptyClassSlices) {
  for (int64_t classes : {2, 3, 5, 7, 13}) {
    for (const Shape& mesh : {Shape{4}, Shape{3}, Shape{2, 4}, Shape{2, 3}}) {
      const Problem p = make_problem({4, 3}, classes, 7 + classes, 2.0, DType::Float32, 0.2);
      expect_close(vocab_parallel(p, mesh), reference(p), 1e-5,
                   "V " + std::to_string(classes) + " mesh " + to_string(mesh), p);
    }
  }
}

// Ignored rows add nothing to the loss, are not counted in the mean and get
// a zero gradient; the ignore_index may be a class index.
TEST(VocabParallelCrossEntropyTest, IgnoredTargets) {
  for (int64_t ignore : {int64_t{-100}, int64_t{-1}, int64_t{4}}) {
    const Problem p = make_problem({6, 5}, 11, 31, 2.0, DType::Float32, 0.4, ignore);
    const Result got = vocab_parallel(p, {2, 4});
    expect_close(got, reference(p), 1e-5, "ignore_index " + std::to_string(ignore), p);
    const std::vector<int64_t> t = p.target.to_vector<int64_t>();
    const std::vector<float> g = got.grad.to_vector<float>();
    for (size_t r = 0; r < t.size(); ++r) {
      if (t[r] != ignore) continue;
      for (size_t j = 0; j < 11; ++j) EXPECT_EQ(g[r * 11 + j], 0.0f) << "row " << r;
    }
  }
}

// All targets ignored: 0/0, NaN as in cross_entropy; nothing to learn.
TEST(VocabParallelCrossEntropyTest, AllIgnoredIsNaN) {
  Problem p = make_problem({4}, 6, 5, 1.0, DType::Float32, 0.0);
  p.target = Tensor::full({4}, -100, DType::Int64);
  EXPECT_TRUE(std::isnan(cross_entropy(p.logits, p.target).item<double>()));
  for (const Shape& mesh : {Shape{2}, Shape{2, 2}}) {
    const Result got = vocab_parallel(p, mesh);
    EXPECT_TRUE(std::isnan(got.loss.item<double>())) << mesh;
    EXPECT_EQ(max_abs(got.grad), 0.0) << mesh;
  }
}

TEST(VocabParallelCrossEntropyTest, OutOfRangeTargetsAreErrors) {
  World world = World::simulated(4);
  DeviceMesh mesh(world, {2, 2});
  const Tensor logits = Tensor::randn({4, 6}, 1);
  DTensor dl = distribute_tensor(logits, mesh, {Shard(0), Shard(1)});
  for (int64_t bad : {7, 6, -1, -101}) {
    const Tensor target = Tensor::from_vector(std::vector<int64_t>{0, bad, 2, 5});
    testing::expect_error(
        [&] {
          vocab_parallel_cross_entropy(dl, distribute_tensor(target, mesh, {Shard(0), Replicate()}),
                                       1);
        },
        {"vocab_parallel_cross_entropy: target " + std::to_string(bad) +
             " is out of bounds: expected a class index in [0, 6) or ignore_index (-100)"});
  }
  testing::expect_error(
      [&] {
        vocab_parallel_cross_entropy(dl, distribute_tensor(Tensor::zeros({4}), mesh,
                                                           {Replicate(), Replicate()}), 1);
      },
      {"vocab_parallel_cross_entropy: target must be int64 class indices, got f32"});
  testing::expect_error(
      [&] {
        vocab_parallel_cross_entropy(
            dl, distribute_tensor(Tensor::zeros({4, 6}, DType::Int64), mesh, {Shard(0), Replicate()}),
            1);
      },
      {"must differ by the class dim, got logits [4, 6] and target [4, 6]"});
  testing::expect_error([&] { vocab_parallel_cross_entropy(dl, dl, 2); },
                        {"vocab_parallel_cross_entropy: tensor-parallel mesh dim 2 is out of range"});
}

// Logits around 1e4 (exp overflows float at 89): the max shift keeps every
// exp in range and the loss (differences of large numbers) accurate.
TEST(VocabParallelCrossEntropyTest, LargeLogitsStayStable) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Problem p = make_problem({8, 3}, 10, 77, 1e4, dtype, 0.1);
    const Result want = reference(p);
    ASSERT_TRUE(std::isfinite(want.loss.item<double>()));
    for (const Shape& mesh : {Shape{1}, Shape{3}, Shape{2, 4}})
      expect_close(vocab_parallel(p, mesh), want, dtype == DType::Float64 ? 1e-12 : 1e-5,
                   "mesh " + to_string(mesh) + " " + dtype_short_name(dtype), p);
  }
}

// Rows longer than the kernel's block (1024), rising along the row so that
// each block raises the running max and the sum so far is rescaled.
TEST(VocabParallelCrossEntropyTest, RowsSpanningBlocksRescaleTheSum) {
  const int64_t classes = 5000;
  Tensor ramp = Tensor::arange(0, static_cast<double>(classes), 1, DType::Float32) / 100.0;
  Problem p = make_problem({6}, classes, 9, 1.0, DType::Float32, 0.0);
  p.logits = add(p.logits, ramp);
  for (const Shape& mesh : {Shape{1}, Shape{2}, Shape{2, 3}})
    expect_close(vocab_parallel(p, mesh), reference(p), 1e-5, "mesh " + to_string(mesh), p);
}

// Logits that arrive replicated on tp (or with their batch replicated on
// dp) are sliced locally; the gradient returns in their layout.
TEST(VocabParallelCrossEntropyTest, OtherInputLayouts) {
  const Problem p = make_problem({4, 5}, 9, 3, 2.0, DType::Float32, 0.2);
  const Result want = reference(p);
  expect_close(vocab_parallel(p, {2, 2}, /*batch_on_dp=*/false), want, 1e-5, "batch replicated", p);
  expect_close(vocab_parallel(p, {2, 2}, true, Replicate()), want, 1e-5, "logits replicated", p);
  expect_close(vocab_parallel(p, {3}, true, Replicate()), want, 1e-5, "logits replicated, 1-d", p);
}

// Forward: an all_reduce max and an all_reduce sum of per-token values on
// tp, then one all_reduce of the mean's total and count; nothing of the
// logits' size. Backward: no collective.
TEST(VocabParallelCrossEntropyTest, CollectivesAreSmallAndFew) {
  const Problem p = make_problem({4, 3}, 13, 11, 2.0, DType::Float32, 0.0);
  for (const Shape& shape : {Shape{4}, Shape{2, 4}}) {
    World world = World::simulated(static_cast<int>(shape.product()));
    DeviceMesh mesh(world, shape);
    const bool with_dp = shape.size() == 2;
    const int tp = with_dp ? 1 : 0;
    const Placements lp = with_dp ? Placements{Shard(0), Shard(2)} : Placements{Shard(2)};
    const Placements tl = with_dp ? Placements{Shard(0), Replicate()} : Placements{Replicate()};
    DTensor logits = distribute_tensor(p.logits, mesh, lp);
    logits.requires_grad_();
    const DTensor target = distribute_tensor(p.target, mesh, tl);
    DTensor loss;
    {
      CommDebugMode comm;
      loss = vocab_parallel_cross_entropy(logits, target, tp);
      EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 3) << mesh << "\n" << comm.table();
      EXPECT_EQ(comm.total_count(), 3) << mesh << "\n" << comm.table();
      // Per rank at most 12 tokens: 12 floats (max), 12 floats (sums), 2 doubles.
      EXPECT_LE(comm.bytes(CollectiveKind::AllReduce), 12 * 4 + 12 * 4 + 16) << mesh;
    }
    CommDebugMode backward;
    loss.backward();
    EXPECT_EQ(backward.total_count(), 0) << mesh << "\n" << backward.table();
  }
}

// Under VerifyMode the backward is rerun on replicated copies of what it
// saved: it must bring them back to its layouts and agree.
TEST(VocabParallelCrossEntropyTest, BackwardPassesVerifyMode) {
  const Problem p = make_problem({4, 3}, 7, 13, 2.0, DType::Float32, 0.2);
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 4});
  DTensor logits = distribute_tensor(p.logits, mesh, {Shard(0), Shard(2)});
  logits.requires_grad_();
  VerifyMode verify;
  vocab_parallel_cross_entropy(logits, distribute_tensor(p.target, mesh, {Shard(0), Replicate()}),
                               1)
      .backward();
  EXPECT_GT(verify.checks(), 0);
  EXPECT_LE(max_abs_diff(logits.grad()->full_tensor(), reference(p).grad), 1e-6);
}

// Rows run in fixed chunks on the thread pool: the same bits at 1, 2 and 3
// threads (large enough to span several chunks and blocks).
TEST(VocabParallelCrossEntropyTest, SameBitsAtAnyThreadCount) {
  const Problem p = make_problem({128}, 3000, 17, 3.0, DType::Float32, 0.1);
  const int before = num_threads();
  std::vector<Result> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    runs.push_back(vocab_parallel(p, {2}));
  }
  set_num_threads(before);
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(equal(runs[i].loss, runs[0].loss)) << i;
    EXPECT_TRUE(equal(runs[i].grad, runs[0].grad)) << i;
  }
  expect_close(runs[0], reference(p), 1e-5, "1 thread", p);
}

}  // namespace
}  // namespace dtensor

namespace dtensor {
namespace {

// F.cross_entropy with class weights and a reduction, from its definition
// on one rank in float64: per target -w[t] * log_softmax(logits)[t] (0 when
// ignored), then their sum, or the sum over the targets' weights, or each;
// the logits' gradient by autograd, for the upstream gradient `up` (of the
// loss's shape).
Result weighted_reference(const Problem& p, const Tensor& w, Reduction reduction,
                          const Tensor& up) {
  World world = World::simulated(1);
  DeviceMesh mesh(world, {1});
  DTensor logits = distribute_tensor(p.logits.to(DType::Float64), mesh, {Replicate()});
  logits.requires_grad_();
  const DTensor t = distribute_tensor(p.target, mesh, {Replicate()});
  const DTensor kept = distribute_tensor(ne(p.target, p.ignore_index), mesh, {Replicate()});
  const DTensor safe = where(kept, t, 0);  // any class for an ignored one: masked below
  const DTensor logp = squeeze(gather(log_softmax(logits, -1), -1, unsqueeze(safe, -1)), -1);
  const DTensor wt = where(
      kept,
      gather(distribute_tensor(w.to(DType::Float64), mesh, {Replicate()}), 0,
             reshape(safe, {-1}))
          .reshape(p.target.shape()),
      0.0);
  const DTensor each = neg(mul(wt, logp));
  DTensor loss = reduction == Reduction::None ? each
                 : reduction == Reduction::Sum ? sum(each)
                                               : div(sum(each), sum(wt));
  loss.backward(distribute_tensor(up.to(DType::Float64), mesh, {Replicate()}));
  return {loss.full_tensor(), logits.grad()->full_tensor()};
}

}  // namespace

// Class weights (zeros among them), every reduction, and the classes at
// dim 1 (F.cross_entropy's (N, C, d1, ...)) or last, on random shapes and
// meshes of tp 1-4 with a dp dim, against the definition.
TEST(VocabParallelCrossEntropyTest, WeightsReductionsAndTheClassDim) {
  std::mt19937 rng(77);
  const int cases = testing::property_cases(40);
  int checked = 0;
  for (int i = 0; i < cases; ++i) {
    const int64_t tp = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    const Shape mesh_shape = i % 2 == 0 ? Shape{tp} : Shape{2, tp};
    Shape tokens;
    const int nd = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int d = 0; d < nd; ++d) tokens.push_back(std::uniform_int_distribution<int64_t>(1, 4)(rng));
    const int64_t classes = std::uniform_int_distribution<int64_t>(1, 11)(rng);
    const DType dtype = i % 3 == 0 ? DType::Float64 : DType::Float32;
    const Reduction reduction = std::array{Reduction::Mean, Reduction::Sum, Reduction::None}[i % 3];
    const bool weighted = i % 4 != 3;
    const bool class_first = tokens.size() >= 2 && i % 2 == 1;  // classes at dim 1
    const Problem p = make_problem(tokens, classes, 500 + i, 2.0, dtype, 0.2);
    Tensor w = Tensor::rand({classes}, 900 + i) * 2.0;
    if (classes > 2) w = masked_fill(w, eq(Tensor::arange(classes), 1), 0.0);
    if (!weighted) w = Tensor::ones({classes});
    const Tensor up = reduction == Reduction::None ? Tensor::randn(tokens, 40 + i, 0, dtype)
                                                   : Tensor::scalar(1.5, dtype);
    const Result want = weighted_reference(p, w, reduction, up);
    bool nan = false;  // all weights 0 or all ignored: a mean of nothing
    for (double v : want.loss.to_vector<double>()) nan = nan || std::isnan(v);
    if (nan) continue;
    const std::string where = "case " + std::to_string(i) + ": mesh " + to_string(mesh_shape) +
                              " logits " + to_string(p.logits.shape()) + " " +
                              dtype_short_name(dtype) + (class_first ? " classes at dim 1" : "");
    World world = World::simulated(static_cast<int>(mesh_shape.product()));
    DeviceMesh mesh(world, mesh_shape);
    const int tpd = mesh.ndim() - 1;
    Placements lp(static_cast<size_t>(mesh.ndim()), Replicate()), tl = lp;
    Tensor logits_full = p.logits;
    int64_t class_dim = -1;
    if (class_first) {
      DimVector perm = {0, logits_full.dim() - 1};
      for (int64_t d = 1; d < logits_full.dim() - 1; ++d) perm.push_back(d);
      logits_full = logits_full.permute(perm).contiguous();
      class_dim = 1;
    }
    lp[static_cast<size_t>(tpd)] = Shard(class_dim < 0 ? logits_full.dim() - 1 : 1);
    if (mesh.ndim() == 2) lp[0] = tl[0] = Shard(0);
    DTensor logits = distribute_tensor(logits_full, mesh, lp);
    logits.requires_grad_();
    VocabParallelLossOptions o;
    o.reduction = reduction;
    o.class_dim = class_dim;
    if (weighted) o.weight = distribute_tensor(w, mesh, Placements(lp.size(), Replicate()));
    DTensor loss = vocab_parallel_cross_entropy(logits, distribute_tensor(p.target, mesh, tl),
                                                tpd, o);
    EXPECT_EQ(loss.shape(), reduction == Reduction::None ? tokens : Shape{}) << where;
    loss.backward(distribute_tensor(
        up, mesh, reduction == Reduction::None ? tl : Placements(lp.size(), Replicate())));
    Tensor grad = logits.grad()->full_tensor();
    if (class_first) {
      DimVector back = {0};
      for (int64_t d = 2; d < grad.dim(); ++d) back.push_back(d);
      back.push_back(1);
      grad = grad.permute(back).contiguous();
    }
    const double tol = dtype == DType::Float64 ? 1e-10 : 2e-5;
    const double scale = std::max(1.0, max_abs(want.loss));
    EXPECT_LE(max_abs_diff(loss.full_tensor().to(DType::Float64), want.loss), tol * scale) << where;
    EXPECT_LE(max_abs_diff(grad.to(DType::Float64), want.grad),
              tol * std::max(1.0, max_abs(want.grad)))
        << where;
    ++checked;
  }
  EXPECT_GE(checked, cases * 3 / 4);
}

}  // namespace dtensor
