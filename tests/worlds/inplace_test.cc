// In-place DTensor ops on every world (see world_util.h): on random layouts
// (meshes of 1-4 dims, uneven and empty shards, every Partial kind,
// broadcasting operands) the result equals the plain op on the full
// tensors, self keeps its placements and each rank its own storage (whose
// version moves), and exactly the layouts that would need self to move
// throw. Autograd: leaves are refused in grad mode and allowed under
// NoGradGuard; recorded in-place ops give the gradients finite differences
// give; a saved tensor changed in place makes backward() throw.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

class InplaceTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

enum Op {
  kAdd, kAddAlpha, kSub, kMul, kDiv, kAddS, kSubS, kMulS, kDivS, kCopy, kFill, kZero,
  kAddcmul, kAddcdiv, kLerpS, kLerpT, kClamp, kClampMin, kNumOps
};

const char* const kNames[] = {"add_", "add_(alpha)", "sub_", "mul_", "div_", "add_(scalar)",
                              "sub_(scalar)", "mul_(scalar)", "div_(scalar)", "copy_", "fill_",
                              "zero_", "addcmul_", "addcdiv_", "lerp_(scalar)", "lerp_(tensor)",
                              "clamp_", "clamp_(min)"};

Tensor values_inplace(const Shape& shape, uint64_t seed) {
  return small_valued(shape, seed).to(DType::Float64);
}
// Nonzero divisors: multiples of 1/4 in [0.25, 13].
Tensor divisors(const Shape& shape, uint64_t seed) {
  return (abs(Tensor::randint(1, 50, shape, seed)).to(DType::Float64)) / 4.0;
}

// `shape` with some leading dims dropped and some dims set to 1.
Shape broadcastable(std::mt19937& rng, const Shape& shape) {
  const size_t drop = rng() % (shape.size() + 1);
  Shape s;
  for (size_t i = drop; i < shape.size(); ++i) s.push_back(rng() % 4 == 0 ? 1 : shape[i]);
  return s;
}

struct Storages {
  std::vector<const Storage*> ptr;
  std::vector<uint64_t> version;
};
Storages storages_of(const DTensor& d) {
  Storages s;
  for (const auto& [rank, t] : d.local().shards()) {
    s.ptr.push_back(t.storage().get());
    s.version.push_back(t.storage() ? t.storage()->version() : 0);
  }
  return s;
}

bool has_partial_inplace(const Placements& pl, std::initializer_list<ReduceOp> ops) {
  for (const Placement& p : pl)
    for (ReduceOp op : ops)
      if (p.is_partial() && p.reduce_op() == op) return true;
  return false;
}

TEST_F(InplaceTest, RandomLayoutsMatchThePlainOps) {
  std::mt19937 rng(77);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const int iterations = dtensor::testing::property_cases(400);
  int refused = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    const Op op = static_cast<Op>(iter % kNumOps);
    const Shape mesh_shape = meshes[rng() % meshes.size()];
    const int mesh_nd = static_cast<int>(mesh_shape.size());
    DeviceMesh mesh(world, mesh_shape);
    Shape shape;
    const int nd = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nd; ++i) shape.push_back(rng() % 8);
    const Shape oshape = broadcastable(rng, shape), tshape = broadcastable(rng, shape);
    const Placements spl = dtensor::testing::random_input_placements(rng, mesh_nd, nd);
    const Placements opl = dtensor::testing::random_input_placements(
        rng, mesh_nd, static_cast<int64_t>(oshape.size()));
    const Placements tpl = dtensor::testing::random_input_placements(
        rng, mesh_nd, static_cast<int64_t>(tshape.size()));
    const uint64_t seed = 1000 + static_cast<uint64_t>(iter) * 7;
    const Tensor s = values_inplace(shape, seed);
    const bool divides = op == kDiv || op == kAddcdiv;
    const Tensor o = op == kDiv ? divisors(oshape, seed + 1) : values_inplace(oshape, seed + 1);
    const Tensor t = divides ? divisors(tshape, seed + 2) : values_inplace(tshape, seed + 2);
    const Tensor w = values_inplace(tshape, seed + 3);
    DTensor self = make_dtensor(s, mesh, spl, seed);
    const DTensor other = make_dtensor(o, mesh, opl, seed + 4);
    const DTensor third = make_dtensor(t, mesh, tpl, seed + 5);
    const DTensor weight = make_dtensor(w, mesh, tpl, seed + 6);
    const std::string what = std::string(kNames[op]) + " on self " + to_string(shape) + " " +
                             to_string(spl) + ", operands " + to_string(oshape) + " " +
                             to_string(opl) + " / " + to_string(tshape) + " " + to_string(tpl) +
                             " on " + mesh.to_string();
    Tensor want;
    std::function<void()> run;
    switch (op) {
      case kAdd: want = s + o; run = [&] { self += other; }; break;
      case kAddAlpha: want = s + o * -1.5; run = [&] { self.add_(other, -1.5); }; break;
      case kSub: want = s - o; run = [&] { self -= other; }; break;
      case kMul: want = s * o; run = [&] { self *= other; }; break;
      case kDiv: want = s / o; run = [&] { self /= other; }; break;
      case kAddS: want = s + 2.5; run = [&] { self += 2.5; }; break;
      case kSubS: want = s - 1.25; run = [&] { self -= 1.25; }; break;
      case kMulS: want = s * -0.5; run = [&] { self *= -0.5; }; break;
      case kDivS: want = s / 4.0; run = [&] { self /= 4.0; }; break;
      case kCopy: want = o.expand(shape).contiguous(); run = [&] { self.copy_(other); }; break;
      case kFill: want = Tensor::full(shape, 3.5, DType::Float64); run = [&] { self.fill_(3.5); }; break;
      case kZero: want = Tensor::zeros(shape, DType::Float64); run = [&] { self.zero_(); }; break;
      case kAddcmul: want = s + o * t * 0.5; run = [&] { self.addcmul_(other, third, 0.5); }; break;
      case kAddcdiv: want = s + o / t * 0.5; run = [&] { self.addcdiv_(other, third, 0.5); }; break;
      case kLerpS: want = s + (o - s) * 0.25; run = [&] { self.lerp_(other, 0.25); }; break;
      case kLerpT: want = s + w * (o - s); run = [&] { self.lerp_(other, weight); }; break;
      case kClamp:
        want = masked_fill(masked_fill(s, lt(s, -1.0), -1.0), gt(s, 2.0), 2.0);
        run = [&] { self.clamp_(-1.0, 2.0); };
        break;
      case kClampMin: want = masked_fill(s, lt(s, 0.5), 0.5); run = [&] { self.clamp_(0.5); }; break;
      case kNumOps: break;
    }
    // Self would have to move exactly when the value ops need is not
    // kept by the pieces: a product of a Partial(max|min), a clamp of a
    // Partial(sum|avg).
    const bool product = op == kMul || op == kDiv || op == kMulS || op == kDivS;
    const bool clamp = op == kClamp || op == kClampMin;
    const bool must_refuse = (product && has_partial_inplace(spl, {ReduceOp::Max, ReduceOp::Min})) ||
                             (clamp && has_partial_inplace(spl, {ReduceOp::Sum, ReduceOp::Avg}));
    const Storages before = storages_of(self);
    const std::string error = dtensor::testing::error_of(run);
    if (must_refuse) {
      ++refused;
      EXPECT_NE(error.find(kNames[op] == std::string("clamp_(min)") ? "clamp_" : ""),
                std::string::npos) << what;
      EXPECT_NE(error.find("would have to be redistributed"), std::string::npos)
          << what << ": " << error;
      continue;
    }
    ASSERT_EQ(error, "<no error>") << what;
    ASSERT_EQ(self.placements(), spl) << what;
    const Storages after = storages_of(self);
    ASSERT_EQ(after.ptr, before.ptr) << what << ": self's shards moved to other storage";
    std::set<const Storage*> distinct;
    for (size_t i = 0; i < after.ptr.size(); ++i) {
      if (after.ptr[i] == nullptr || self.local().shards()[i].second.numel() == 0) continue;
      EXPECT_GT(after.version[i], before.version[i]) << what << ": shard " << i;
      EXPECT_TRUE(distinct.insert(after.ptr[i]).second) << what << ": ranks share storage";
    }
    for (int rank : self.local().ranks())
      ASSERT_EQ(self.to_local(rank).shape(), self.spec().extent_of_rank(rank)->local_shape) << what;
    if (!dtensor::testing::takes_part(mesh)) continue;
    const Tensor got = self.full_tensor();
    ASSERT_TRUE(allclose(got, want, 1e-12, 1e-12)) << what << "\n" << got << "\n" << want;
  }
  EXPECT_GT(refused, 0);
}

// A Partial(sum) self adds a replicated value once, not once per rank.
TEST_F(InplaceTest, PartialSumAddsAReplicatedValueOnce) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  const Tensor s = values_inplace({5, 3}, 1), o = values_inplace({3}, 2);
  DTensor self = make_dtensor(s, mesh, {Partial()}, 3);
  const DTensor other = distribute_tensor(o, mesh, {Replicate()});
  self.add_(other);
  self += 1.0;
  EXPECT_TRUE(self.placements()[0].is_partial());
  EXPECT_TRUE(equal(self.full_tensor(), s + o + 1.0));
  self.zero_();  // zero pieces sum to zero
  self.add_(other, 2);
  EXPECT_TRUE(equal(self.full_tensor(), (o * 2.0).expand({5, 3}).contiguous()));
  DTensor filled = make_dtensor(s, mesh, {Partial()}, 4);
  filled.fill_(2.0);
  EXPECT_TRUE(equal(filled.full_tensor(), Tensor::full({5, 3}, 2.0, DType::Float64)));
}

TEST_F(InplaceTest, ErrorsNameTheOpAndThePlacements) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  const Tensor s = values_inplace({4, 4}, 1);
  DTensor psum = make_dtensor(s, mesh, {Partial(), Shard(0)}, 2);
  DTensor pmax = make_dtensor(s, mesh, {Partial(ReduceOp::Max), Replicate()}, 2);
  dtensor::testing::expect_error([&] { psum.clamp_(0.0, 1.0); },
                                 {"clamp_", "P(sum)", "would have to be redistributed"});
  dtensor::testing::expect_error([&] { pmax.mul_(2.0); }, {"mul_", "P(max)"});
  const DTensor big = distribute_tensor(values_inplace({3, 4, 4}, 3), mesh, {Replicate(), Replicate()});
  dtensor::testing::expect_error([&] { psum.add_(big); }, {"add_", "broadcast"});
  DTensor ints = distribute_tensor(Tensor::zeros({4, 4}, DType::Int64), mesh,
                                   {Shard(0), Replicate()});
  dtensor::testing::expect_error([&] { ints.add_(1.5); }, {"add_", "can't be cast"});
  DTensor empty;
  dtensor::testing::expect_error([&] { empty.add_(1.0); }, {"add_", "empty"});
  dtensor::testing::expect_error([&] { psum.add_(empty); }, {"add_", "empty"});
  DeviceMesh other_mesh(world, {4});
  const DTensor elsewhere = distribute_tensor(s, other_mesh, {Replicate()});
  dtensor::testing::expect_error([&] { psum.copy_(elsewhere); }, {"copy_", "mesh"});
}

// Dtypes follow the plain in-place ops: copy_ converts, an integral self
// takes integral operands, a retained gradient follows the rebased tensor.
TEST_F(InplaceTest, DtypesAndRetainedGradients) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  DTensor f64 = distribute_tensor(values_inplace({5, 3}, 1), mesh, {Shard(0), Shard(1)});
  const Tensor src32 = small_valued({3}, 2);
  f64.copy_(distribute_tensor(src32, mesh, {Replicate(), Shard(0)}));
  EXPECT_EQ(f64.dtype(), DType::Float64);
  EXPECT_TRUE(equal(f64.full_tensor(), src32.to(DType::Float64).expand({5, 3}).contiguous()));
  const Tensor ints = Tensor::randint(-9, 9, {6}, 3);
  DTensor di = distribute_tensor(ints, mesh, {Shard(0), Replicate()});
  di.add_(distribute_tensor(ints, mesh, {Replicate(), Shard(0)}), 2);
  di *= 3;
  EXPECT_EQ(di.dtype(), DType::Int64);
  EXPECT_TRUE(equal(di.full_tensor(), (ints + ints * 2) * 3));

  DTensor x = distribute_tensor(values_inplace({4, 3}, 4), mesh, {Shard(0), Replicate()});
  x.requires_grad_();
  DTensor h = mul(x, 1.0);
  h.retain_grad();
  h.mul_(2.0);
  sum(mul(h, 3.0)).backward();
  ASSERT_TRUE(h.grad().has_value());
  EXPECT_TRUE(equal(h.grad()->full_tensor(), Tensor::full({4, 3}, 3.0, DType::Float64)));
  EXPECT_TRUE(equal(x.grad()->full_tensor(), Tensor::full({4, 3}, 6.0, DType::Float64)));
}

// VerifyMode checks in-place ops against the plain op on the full tensors.
TEST_F(InplaceTest, VerifyModeChecksInPlaceOps) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  DTensor d = make_dtensor(values_inplace({5, 3}, 1), mesh, {Partial(), Shard(1)}, 2);
  const DTensor r = distribute_tensor(values_inplace({3}, 3), mesh, {Replicate(), Replicate()});
  VerifyMode verify;
  d.add_(r);
  const int64_t after_add = verify.checks();
  EXPECT_GT(after_add, 0);
  d.mul_(2.0);
  d.fill_(1.5);
  EXPECT_GT(verify.checks(), after_add);
}

// ---- autograd --------------------------------------------------------------------------

TEST_F(InplaceTest, LeavesThatRequireGradOnlyChangeUnderNoGrad) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  DTensor w = distribute_tensor(values_inplace({4, 3}, 1), mesh, {Shard(0), Replicate()});
  w.requires_grad_();
  dtensor::testing::expect_error([&] { w.add_(1.0); },
                                 {"add_", "a leaf DTensor that requires grad", "in-place"});
  // An SGD step: w -= lr * grad, under NoGradGuard, keeps w a leaf.
  const DTensor x = distribute_tensor(values_inplace({2, 4}, 2), mesh, {Replicate(), Replicate()});
  sum(mm(x, w)).backward();
  const Tensor before = w.full_tensor();
  const Tensor grad = w.grad()->full_tensor();
  {
    NoGradGuard no_grad;
    w.add_(*w.grad(), -0.5);
  }
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(allclose(w.full_tensor(), before - grad * 0.5));
}

TEST_F(InplaceTest, ASavedTensorChangedInPlaceMakesBackwardThrow) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  DTensor x = distribute_tensor(values_inplace({4, 3}, 1), mesh, {Shard(0), Shard(1)});
  x.requires_grad_();
  DTensor a = mul(x, 2.0);
  DTensor b = mul(a, a);  // saves a
  a.add_(1.0);
  dtensor::testing::expect_error([&] { sum(b).backward(); },
                                 {"changed in place after it was saved"});
  // exp saves its output.
  DTensor y = exp(x);
  DTensor z = sum(y);
  y.mul_(2.0);
  dtensor::testing::expect_error([&] { z.backward(); }, {"changed in place"});
}

TEST_F(InplaceTest, CopiesShareTheRebasedHistory) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: not in the mesh
  DTensor x = distribute_tensor(values_inplace({4, 3}, 1), mesh, {Shard(0), Replicate()});
  x.requires_grad_();
  DTensor a = mul(x, 1.0);
  DTensor alias = a;
  a.mul_(3.0);
  EXPECT_STREQ(alias.grad_fn_name(), "mul_");
  sum(alias).backward();
  EXPECT_TRUE(equal(x.grad()->full_tensor(), Tensor::full({4, 3}, 3.0, DType::Float64)));
  // x.mul_(x) saves x as it was: d(x^2)/dx = 2x.
  DTensor sq = mul(x, 1.0);
  sq.mul_(sq);
  sum(sq).backward();
  EXPECT_TRUE(allclose(x.grad()->full_tensor(),
                       Tensor::full({4, 3}, 3.0, DType::Float64) + x.full_tensor() * 2.0));
  // A tensor that did not require grad starts to, made by the op.
  DTensor acc = zeros_like(x.detach());
  acc.add_(x);
  EXPECT_TRUE(acc.requires_grad());
  EXPECT_FALSE(acc.is_leaf());
}

// Gradients of programs with in-place ops on non-leaves, against finite
// differences, on random meshes and placements.
TEST_F(InplaceTest, GradientsMatchFiniteDifferences) {
  using dtensor::testing::GradFn;
  std::mt19937 rng(5);
  const std::vector<Shape> meshes = dtensor::testing::grad_meshes(world.size());
  struct Program {
    const char* name;
    GradFn f;
    bool positive_third;
  };
  const std::vector<Program> programs = {
      {"add_ sub_ alpha", [](const std::vector<DTensor>& in) {
         DTensor s = mul(in[0], 1.0);
         s.add_(in[1], 2.0);
         s.sub_(in[2], 0.5);
         return s;
       }, false},
      {"mul_ div_", [](const std::vector<DTensor>& in) {
         DTensor s = mul(in[0], 1.0);
         s.mul_(in[1]);
         s.div_(in[2]);
         return s;
       }, true},
      {"scalars", [](const std::vector<DTensor>& in) {
         DTensor s = add(in[0], in[1]);
         s *= 3.0;
         s += 1.0;
         s /= 2.0;
         s -= 0.5;
         return s;
       }, false},
      {"copy_ fill_", [](const std::vector<DTensor>& in) {
         DTensor s = mul(in[0], 2.0);
         DTensor u = mul(in[0], 1.0);
         u.fill_(1.5);
         s.copy_(in[1]);
         return add(mul(s, in[0]), u);
       }, false},
      {"addcmul_ addcdiv_", [](const std::vector<DTensor>& in) {
         DTensor s = mul(in[0], 1.0);
         s.addcmul_(in[1], in[0], 0.5);
         s.addcdiv_(in[1], in[2], -2.0);
         return s;
       }, true},
      {"lerp_", [](const std::vector<DTensor>& in) {
         DTensor s = mul(in[0], 1.0);
         s.lerp_(in[1], 0.25);
         s.lerp_(in[0], in[2]);
         return s;
       }, false},
      {"clamp_", [](const std::vector<DTensor>& in) {
         DTensor s = add(in[0], in[1]);
         s.clamp_(-0.5, 0.5);
         return mul(s, in[2]);
       }, false},
  };
  int checked = 0;
  for (size_t p = 0; p < programs.size(); ++p) {
    for (int trial = 0; trial < 3; ++trial) {
      const Shape mesh_shape = meshes[rng() % meshes.size()];
      DeviceMesh mesh(world, mesh_shape);
      const int mesh_nd = static_cast<int>(mesh_shape.size());
      Shape shape;
      const int nd = 1 + static_cast<int>(rng() % 2);
      for (int i = 0; i < nd; ++i) shape.push_back(1 + rng() % 4);
      const Shape oshape = broadcastable(rng, shape);
      const uint64_t seed = 40 + p * 10 + static_cast<uint64_t>(trial);
      // Values away from the clamp bounds, so that finite differences see
      // one side.
      Tensor a = Tensor::randn(shape, seed, 0, DType::Float64);
      a = where(lt(abs(a), 0.6), a * 0.2, a);
      const Tensor b = Tensor::randn(oshape, seed + 1, 0, DType::Float64) * 0.1;
      const Tensor c = programs[p].positive_third ? divisors(oshape, seed + 2)
                                                  : Tensor::randn(oshape, seed + 2, 0,
                                                                  DType::Float64);
      std::vector<DTensor> in = {
          distribute_tensor(a, mesh, dtensor::testing::random_input_placements(
                                         rng, mesh_nd, nd, false)),
          distribute_tensor(b, mesh, dtensor::testing::random_input_placements(
                                         rng, mesh_nd, static_cast<int64_t>(oshape.size()),
                                         false)),
          distribute_tensor(c, mesh, dtensor::testing::random_input_placements(
                                         rng, mesh_nd, static_cast<int64_t>(oshape.size()),
                                         false))};
      if (!dtensor::testing::takes_part(mesh)) continue;
      for (DTensor& d : in) d.requires_grad_();
      const std::string what = std::string(programs[p].name) + " on " + to_string(shape) + " " +
                               to_string(in[0].placements()) + " / " + to_string(oshape) + " " +
                               to_string(in[1].placements()) + ", " +
                               to_string(in[2].placements()) + " on " + mesh.to_string();
      EXPECT_EQ(dtensor::testing::check_gradients(programs[p].f, in, seed), "") << what;
      EXPECT_EQ(dtensor::testing::check_matches_replicated(programs[p].f, in, seed, 1e-12, 1e-12), "") << what;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
