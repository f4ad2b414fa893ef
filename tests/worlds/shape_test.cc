// The shape ops on DTensors (src/ops/shape.cc, src/ops/einsum.cc) on every
// world (see world_util.h): random meshes of 1-4 dims, random shapes with
// uneven and empty shards, random input placements with every Partial kind.
// Each case checks full_tensor() of the DTensor op against the plain op on
// the full tensors (exact: the data are integer-valued), and, where the
// input's layout is one the rule promises to keep, that the op ran no
// collective and gave the promised placements. Gradients are checked
// against finite differences and against replicated inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "einsum_reference.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::make_dtensor;
using dtensor::testing::takes_part;

namespace {

class ShapeOpsTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

int64_t uniform_shape(std::mt19937& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// A random mesh of the world and an input of a random shape and layout.
struct Draw {
  Shape mesh_shape;
  Shape shape;
  Placements placements;
  uint64_t seed;
};

Draw draw(std::mt19937& rng, const World& world, int64_t min_nd = 1) {
  Draw d;
  d.mesh_shape = dtensor::testing::random_mesh(rng, world.size());
  do d.shape = dtensor::testing::random_shape_for(rng, d.mesh_shape.product());
  while (static_cast<int64_t>(d.shape.size()) < min_nd);
  d.placements = dtensor::testing::random_placement_pair(
                     rng, static_cast<int>(d.mesh_shape.size()),
                     static_cast<int64_t>(d.shape.size()))
                     .first;
  d.seed = rng();
  return d;
}

std::string describe_shape(const Draw& d, const DTensor& out) {
  std::ostringstream o;
  o << "mesh " << d.mesh_shape << " shape " << d.shape << " " << to_string(d.placements) << " -> "
    << to_string(out.placements());
  return o.str();
}

// Whether placement p on a mesh dim of size n is a Partial that moves data.
bool is_reducing(const Placement& p, int64_t n) { return p.is_partial() && n > 1; }

}  // namespace

TEST_F(ShapeOpsTest, RepeatAndTileKeepUnrepeatedShardsAndEveryPartial) {
  std::mt19937 rng(11);
  const int cases = dtensor::testing::property_cases(150);
  for (int iter = 0; iter < cases; ++iter) {
    const Draw d = draw(rng, world);
    const int64_t nd = static_cast<int64_t>(d.shape.size());
    const int64_t lead = uniform_shape(rng, 0, 2);
    DimVector repeats;
    for (int64_t k = 0; k < lead + nd; ++k) repeats.push_back(rng() % 2 ? 1 : uniform_shape(rng, 0, 3));
    const bool use_tile = rng() % 3 == 0 && lead == 0;
    DeviceMesh mesh(world, d.mesh_shape);
    if (!takes_part(mesh)) continue;
    const Tensor full = dtensor::testing::int_valued(d.shape, d.seed);
    const DTensor x = make_dtensor(full, mesh, d.placements, d.seed + 1);
    // The promised layout when every placement passes: shards of dims
    // repeated once move past the new leading dims, Partials stay.
    bool passes = true;
    Placements promised;
    for (const Placement& p : d.placements) {
      if (p.is_shard()) {
        passes = passes && repeats[lead + p.dim()] == 1;
        promised.push_back(Shard(p.dim() + lead));
      } else {
        promised.push_back(p);
      }
    }
    CommDebugMode comm;
    const DTensor out = use_tile ? tile(x, repeats) : repeat(x, repeats);
    const int64_t comms = comm.total_count();  // before full_tensor() gathers
    const std::string what = describe_shape(d, out) + " repeats " + to_string(repeats);
    ASSERT_TRUE(equal(out.full_tensor(), repeat(full, repeats))) << what;
    if (passes) {
      EXPECT_EQ(comms, 0) << what;
      EXPECT_EQ(out.placements(), promised) << what;
    }
  }
}

TEST_F(ShapeOpsTest, ConstantPadRule) {
  std::mt19937 rng(12);
  const int cases = dtensor::testing::property_cases(200);
  for (int iter = 0; iter < cases; ++iter) {
    const Draw d = draw(rng, world);
    const int64_t nd = static_cast<int64_t>(d.shape.size());
    std::vector<int64_t> pads(static_cast<size_t>(2 * uniform_shape(rng, 0, nd)));
    for (int64_t& v : pads) v = rng() % 2 ? 0 : uniform_shape(rng, -2, 3);
    // Crops never cut below 0.
    for (size_t k = 0; k < pads.size() / 2; ++k) {
      const int64_t n = d.shape[static_cast<size_t>(nd) - 1 - k];
      if (n + pads[2 * k] + pads[2 * k + 1] < 0) pads[2 * k] = pads[2 * k + 1] = 0;
    }
    const double value = rng() % 2 ? 0.0 : 3.0;
    DeviceMesh mesh(world, d.mesh_shape);
    if (!takes_part(mesh)) continue;
    const Tensor full = dtensor::testing::int_valued(d.shape, d.seed);
    const DTensor x = make_dtensor(full, mesh, d.placements, d.seed + 1);
    auto padded = [&](int64_t dim) {
      const size_t k = static_cast<size_t>(nd - 1 - dim);
      return 2 * k < pads.size() && (pads[2 * k] != 0 || pads[2 * k + 1] != 0);
    };
    // Padding nothing writes no value: x as it is, in any layout.
    const bool pads_any = std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v != 0; });
    bool passes = true, sum_blocked = false;
    for (size_t m = 0; m < d.placements.size(); ++m) {
      const Placement& p = d.placements[m];
      if (p.is_shard()) passes = passes && !padded(p.dim());
      const bool sum = p.is_partial() && p.reduce_op() == ReduceOp::Sum;
      if (sum && value != 0 && pads_any) {
        passes = false;
        sum_blocked = sum_blocked || is_reducing(p, d.mesh_shape[m]);
      }
    }
    CommDebugMode comm;
    const DTensor out = pad(x, pads, "constant", value);
    const int64_t comms = comm.total_count();  // before full_tensor() gathers
    const std::string what = describe_shape(d, out) + " value " + std::to_string(value);
    ASSERT_TRUE(equal(out.full_tensor(), pad(full, pads, "constant", value))) << what;
    if (passes) {
      EXPECT_EQ(comms, 0) << what;
      EXPECT_EQ(out.placements(), d.placements) << what;
    }
    // A nonzero value can not stay Partial(sum): it would be counted n times.
    if (sum_blocked) {
      for (const Placement& p : out.placements())
        EXPECT_FALSE(p.is_partial() && p.reduce_op() == ReduceOp::Sum) << what;
    }
  }
}

TEST_F(ShapeOpsTest, ConstantPadKeepsPartialMaxWithANonzeroValue) {
  // max over the ranks of (v, v, ..., v) is v: the padded positions are
  // right without reducing first, so Partial(max|min|avg) pass.
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  DeviceMesh mesh(world, meshes.front());
  if (!takes_part(mesh)) return;
  const Tensor full = dtensor::testing::int_valued({5, 3}, 4);
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
    const Placements pl{Partial(op)};
    const DTensor x = make_dtensor(full, mesh, pl, 5);
    CommDebugMode comm;
    const DTensor out = pad(x, {2, 1, 0, 1}, "constant", -60.0);
    EXPECT_EQ(comm.total_count(), 0);  // (before full_tensor() gathers)
    EXPECT_EQ(out.placements(), pl);
    EXPECT_TRUE(equal(out.full_tensor(), pad(full, {2, 1, 0, 1}, "constant", -60.0)));
  }
}

TEST_F(ShapeOpsTest, ConstantPadOfFiveDimsAndItsGradient) {
  // 10 pads are more than one op schema holds: two pads, one backward.
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  const Tensor full = dtensor::testing::int_valued({2, 3, 1, 2, 3}, 8).to(DType::Float64);
  const std::vector<int64_t> pads{1, 0, 0, 0, 0, 2, 1, 1, 1, -1};  // dim 3 unpadded
  const Placements pl{Shard(3), Partial(ReduceOp::Max)};
  DTensor x = make_dtensor(full, mesh, pl, 9);
  const DTensor out = pad(x, pads, "constant", 4.0);
  EXPECT_EQ(out.placements(), pl);
  EXPECT_TRUE(equal(out.full_tensor(), pad(full, pads, "constant", 4.0)));
  const DTensor y = make_dtensor(full, mesh, {Shard(2), Partial(ReduceOp::Sum)}, 10);
  const dtensor::testing::GradFn f = [pads](const std::vector<DTensor>& in) {
    return pad(in[0], pads, "constant", 4.0);
  };
  EXPECT_EQ(dtensor::testing::check_matches_replicated(f, {y.detach().requires_grad_()}, 11), "");
  EXPECT_EQ(dtensor::testing::check_gradients(f, {y.detach().requires_grad_()}, 12), "");
}

TEST_F(ShapeOpsTest, RepeatGradientOfEightDims) {
  // kMaxDims dims leave no room to split a dim into (r, n): the backward
  // folds the other dims around it instead.
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  const Tensor full =
      dtensor::testing::int_valued({2, 1, 3, 1, 1, 1, 1, 2}, 20).to(DType::Float64);
  const DimVector repeats{1, 2, 2, 1, 1, 1, 1, 3};
  DTensor x = make_dtensor(full, mesh, {Shard(2), Partial(ReduceOp::Sum)}, 21);
  x.requires_grad_();
  EXPECT_TRUE(equal(repeat(x, repeats).full_tensor(), repeat(full, repeats)));
  const dtensor::testing::GradFn f = [repeats](const std::vector<DTensor>& in) {
    return repeat(in[0], repeats);
  };
  EXPECT_EQ(dtensor::testing::check_gradients(f, {x}, 22), "");
  EXPECT_EQ(dtensor::testing::check_matches_replicated(f, {x}, 23, 1e-12, 1e-12), "");
}

TEST_F(ShapeOpsTest, ReflectAndReplicatePadPassEveryPartial) {
  std::mt19937 rng(13);
  const int cases = dtensor::testing::property_cases(120);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    const int64_t k = uniform_shape(rng, 1, 3);
    const int64_t nd = k + uniform_shape(rng, 1, 2);
    Shape shape;
    for (int64_t i = 0; i < nd; ++i) shape.push_back(uniform_shape(rng, i == 0 && nd == k + 2 ? 0 : 1, 5));
    std::vector<int64_t> pads;
    const bool reflect = rng() % 2 == 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t n = shape[static_cast<size_t>(nd - 1 - j)];
      for (int s = 0; s < 2; ++s) pads.push_back(uniform_shape(rng, 0, reflect ? n - 1 : 3));
    }
    const Placements pl = dtensor::testing::random_placement_pair(
                              rng, static_cast<int>(mesh_shape.size()), nd).first;
    const uint64_t seed = rng();
    DeviceMesh mesh(world, mesh_shape);
    if (!takes_part(mesh)) continue;
    const char* mode = reflect ? "reflect" : "replicate";
    const Tensor full = dtensor::testing::int_valued(shape, seed);
    const DTensor x = make_dtensor(full, mesh, pl, seed + 1);
    bool passes = true;
    for (const Placement& p : pl) {
      if (!p.is_shard()) continue;
      const size_t j = static_cast<size_t>(nd - 1 - p.dim());
      passes = passes && !(2 * j < pads.size() && (pads[2 * j] != 0 || pads[2 * j + 1] != 0));
    }
    CommDebugMode comm;
    const DTensor out = pad(x, pads, mode);
    const int64_t comms = comm.total_count();  // before full_tensor() gathers
    std::ostringstream what;
    what << mode << " mesh " << mesh_shape << " shape " << shape << " " << to_string(pl) << " -> "
         << to_string(out.placements());
    ASSERT_TRUE(equal(out.full_tensor(), pad(full, pads, mode))) << what.str();
    if (passes) {
      EXPECT_EQ(comms, 0) << what.str();
      EXPECT_EQ(out.placements(), pl) << what.str();
    }
  }
}

TEST_F(ShapeOpsTest, PadErrorsNameThePlacements) {
  DeviceMesh mesh(world, {2});
  if (!takes_part(mesh)) return;
  const DTensor x = distribute_tensor(Tensor::zeros({2, 3}), mesh, {Shard(0)});
  dtensor::testing::expect_error([&] { pad(x, {1}); }, {"pad", "divisible by 2", "S(0)"});
  dtensor::testing::expect_error([&] { pad(x, {3, 0}, "reflect"); },
                                 {"should be less than", "S(0)"});
  dtensor::testing::expect_error([&] { pad(x, {1, 1}, "circular"); }, {"circular"});
}

TEST_F(ShapeOpsTest, UnbindAndSplitGatherOnce) {
  std::mt19937 rng(14);
  const int cases = dtensor::testing::property_cases(120);
  for (int iter = 0; iter < cases; ++iter) {
    const Draw d = draw(rng, world);
    const int64_t nd = static_cast<int64_t>(d.shape.size());
    const int64_t dim = uniform_shape(rng, -nd, nd - 1);
    const int64_t len = d.shape[static_cast<size_t>(dim < 0 ? dim + nd : dim)];
    std::vector<int64_t> sizes;
    for (int64_t left = len; left > 0;) {
      sizes.push_back(uniform_shape(rng, 0, left));
      left -= sizes.back();
    }
    if (rng() % 4 == 0) sizes.push_back(0);
    const bool use_unbind = rng() % 2 == 0;
    DeviceMesh mesh(world, d.mesh_shape);
    if (!takes_part(mesh)) continue;
    const Tensor full = dtensor::testing::int_valued(d.shape, d.seed);
    const DTensor x = make_dtensor(full, mesh, d.placements, d.seed + 1);
    // What one gather of `dim` costs, for comparison.
    Placements gathered = x.placements();
    for (Placement& p : gathered)
      if (p.is_shard(dim < 0 ? dim + nd : dim)) p = Replicate();
    int64_t one_gather = 0;
    {
      CommDebugMode comm;
      x.redistribute(gathered);
      one_gather = comm.total_count();
    }
    CommDebugMode comm;
    const std::vector<DTensor> got = use_unbind ? unbind(x, dim) : split(x, sizes, dim);
    const int64_t used = comm.total_count();
    const std::vector<Tensor> want = use_unbind ? unbind(full, dim) : split(full, sizes, dim);
    std::ostringstream what;
    what << (use_unbind ? "unbind" : "split") << " dim " << dim << " mesh " << d.mesh_shape
         << " shape " << d.shape << " " << to_string(d.placements);
    ASSERT_EQ(got.size(), want.size()) << what.str();
    // Pieces that are each all of `dim` or empty need no gather.
    const bool cuts = use_unbind || std::any_of(sizes.begin(), sizes.end(), [&](int64_t n) {
      return n != 0 && n != len;
    });
    EXPECT_EQ(used, cuts ? one_gather : 0) << what.str();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(equal(got[i].full_tensor(), want[i])) << what.str() << " piece " << i;
  }
}

TEST_F(ShapeOpsTest, Factories) {
  std::mt19937 rng(15);
  for (int iter = 0; iter < dtensor::testing::property_cases(40); ++iter) {
    const Draw d = draw(rng, world);
    DeviceMesh mesh(world, d.mesh_shape);
    if (!takes_part(mesh)) continue;
    const DTensor x = make_dtensor(dtensor::testing::int_valued(d.shape, d.seed), mesh,
                                   d.placements, d.seed + 1);
    const Placements all_r(d.mesh_shape.size(), Replicate());
    // x's shards, Partial -> Replicate: the layout of empty_like and of the
    // new_* factories given x's own shape (PyTorch's new_factory_strategy).
    Placements promised = d.placements;
    for (Placement& p : promised)
      if (p.is_partial()) p = Replicate();
    const auto layout_for = [&](const Shape& s) { return s == x.shape() ? promised : all_r; };
    const DTensor z = new_zeros(x, {3, 2});
    EXPECT_EQ(z.placements(), layout_for({3, 2}));
    EXPECT_EQ(z.dtype(), DType::Float32);
    EXPECT_TRUE(equal(z.full_tensor(), Tensor::zeros({3, 2})));
    const DTensor o = new_ones(x, {4}, DType::Int64);
    EXPECT_EQ(o.dtype(), DType::Int64);
    EXPECT_TRUE(equal(o.full_tensor(), Tensor::ones({4}, DType::Int64)));
    const DTensor f = new_full(x, {2, 2}, 1.5, DType::Float64);
    EXPECT_EQ(f.placements(), layout_for({2, 2}));
    EXPECT_TRUE(equal(f.full_tensor(), Tensor::full({2, 2}, 1.5, DType::Float64)));
    EXPECT_EQ(new_empty(x, {0, 5}).shape(), (Shape{0, 5}));
    {
      // Of x's own shape: x's shards, no communication, and the value once
      // (a Partial(sum) input must not make a sum of fills).
      CommDebugMode comm;
      const DTensor same = new_full(x, x.shape(), 2.5, DType::Float64);
      const DTensor same_zeros = new_zeros(x, x.shape());
      const DTensor same_empty = new_empty(x, x.shape(), DType::Int64);
      EXPECT_EQ(comm.total_count(), 0);
      EXPECT_EQ(same.placements(), promised);
      EXPECT_EQ(same_zeros.placements(), promised);
      EXPECT_EQ(same_empty.placements(), promised);
      EXPECT_EQ(same_empty.dtype(), DType::Int64);
      EXPECT_TRUE(equal(same.full_tensor(), Tensor::full(x.shape(), 2.5, DType::Float64)));
      EXPECT_TRUE(equal(same_zeros.full_tensor(), Tensor::zeros(x.shape())));
      for (int rank : same.local().ranks())
        EXPECT_EQ(same.to_local(rank).shape(), x.to_local(rank).shape());
    }
    // empty_like: x's shards, Partial -> Replicate, no communication.
    CommDebugMode comm;
    const DTensor e = empty_like(x);
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(e.placements(), promised);
    EXPECT_EQ(e.shape(), x.shape());
    EXPECT_EQ(e.dtype(), x.dtype());
    for (int rank : e.local().ranks())
      EXPECT_EQ(e.to_local(rank).shape(), e.spec().extent_of_rank(rank)->local_shape);
  }
}

TEST_F(ShapeOpsTest, EinsumMatchesLoopsOnRandomEquationsAndLayouts) {
  std::mt19937 rng(16);
  const int cases = dtensor::testing::property_cases(150);
  for (int iter = 0; iter < cases; ++iter) {
    const auto eq = dtensor::testing::random_einsum(rng);
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    std::vector<Placements> pls;
    for (const Shape& s : eq.shapes) {
      Placements pl = dtensor::testing::random_placement_pair(
                          rng, static_cast<int>(mesh_shape.size()),
                          std::max<int64_t>(1, static_cast<int64_t>(s.size()))).first;
      for (Placement& p : pl)
        if (p.is_shard() && s.empty()) p = Replicate();
      pls.push_back(pl);
    }
    const uint64_t seed = rng();
    DeviceMesh mesh(world, mesh_shape);
    if (!takes_part(mesh)) continue;
    std::vector<Tensor> full;
    std::vector<DTensor> dist;
    std::ostringstream what;
    what << eq.equation << " on mesh " << mesh_shape << ":";
    for (size_t i = 0; i < eq.shapes.size(); ++i) {
      full.push_back(Tensor::randint(-5, 5, eq.shapes[i], seed + i).to(DType::Float64));
      dist.push_back(make_dtensor(full.back(), mesh, pls[i], seed + 10 + i));
      what << " " << eq.shapes[i] << " " << to_string(pls[i]);
    }
    const DTensor got = einsum(eq.equation, dist);
    const Tensor want = dtensor::testing::einsum_reference(eq.equation, full);
    ASSERT_TRUE(allclose(got.full_tensor(), want, 1e-12, 1e-9))
        << what.str() << "\n" << got.full_tensor() << "\n" << want;
  }
}

TEST_F(ShapeOpsTest, EinsumLayoutsComeFromMatmulRules) {
  DeviceMesh mesh(world, {4});
  if (!takes_part(mesh)) return;
  const Tensor a = dtensor::testing::int_valued({8, 3, 5}, 1);
  const Tensor b = dtensor::testing::int_valued({8, 5, 2}, 2);
  {
    // Batch sharded on both: stays sharded, nothing moves.
    const DTensor da = distribute_tensor(a, mesh, {Shard(0)});
    const DTensor db = distribute_tensor(b, mesh, {Shard(0)});
    CommDebugMode comm;
    const DTensor out = einsum("bij,bjk->bik", {da, db});
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(out.placements(), (Placements{Shard(0)}));
    EXPECT_TRUE(equal(out.full_tensor(), bmm(a, b)));
  }
  {
    // Contracted dim sharded on both: Partial(sum), nothing moves.
    const Tensor m = dtensor::testing::int_valued({6, 8}, 3);
    const Tensor n = dtensor::testing::int_valued({8, 7}, 4);
    const DTensor dm = distribute_tensor(m, mesh, {Shard(1)});
    const DTensor dn = distribute_tensor(n, mesh, {Shard(0)});
    CommDebugMode comm;
    const DTensor out = einsum("ij,jk->ik", {dm, dn});
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(out.placements(), (Placements{Partial(ReduceOp::Sum)}));
    EXPECT_TRUE(equal(out.full_tensor(), mm(m, n)));
    // Rows sharded against a replicated right side: rows stay sharded.
    const DTensor rows = distribute_tensor(m, mesh, {Shard(0)});
    const DTensor rep = distribute_tensor(n, mesh, {Replicate()});
    const DTensor out2 = einsum("ij,jk->ik", {rows, rep});
    EXPECT_EQ(out2.placements(), (Placements{Shard(0)}));
    EXPECT_TRUE(equal(out2.full_tensor(), mm(m, n)));
  }
}

// ---- gradients ------------------------------------------------------------------------

namespace {

using ShapeOp = std::function<DTensor(const std::vector<DTensor>&)>;

// Checks the gradients of op at inputs (float64, requires grad): f =
// op(inputs) * w with w replicated random, against finite differences and
// against replicated inputs (exact for data movement, `atol` otherwise).
void check_shape_op(const ShapeOp& op, const std::vector<DTensor>& inputs, uint64_t seed,
              const std::string& what, double atol = 0) {
  const dtensor::testing::GradFn f = [op](const std::vector<DTensor>& in) { return op(in); };
  EXPECT_EQ(dtensor::testing::check_gradients(f, inputs, seed), "") << what;
  EXPECT_EQ(dtensor::testing::check_matches_replicated(f, inputs, seed + 1, atol, atol), "")
      << what;
}

// A float64 DTensor of `shape` with random placements (Partials included)
// that requires grad.
DTensor grad_input(const Shape& shape, const DeviceMesh& mesh, const Placements& pl,
                   uint64_t seed) {
  DTensor x = make_dtensor(Tensor::randn(shape, seed, 0, DType::Float64), mesh, pl, seed + 1);
  x.requires_grad_();
  return x;
}

Shape grad_shape_shape(std::mt19937& rng, int64_t min_nd, int64_t max_nd) {
  Shape s;
  const int64_t nd = uniform_shape(rng, min_nd, max_nd);
  for (int64_t i = 0; i < nd; ++i) s.push_back(uniform_shape(rng, 0, 4));
  return s;
}

}  // namespace

TEST_F(ShapeOpsTest, Gradients) {
  std::mt19937 rng(17);
  const int per_mesh = dtensor::testing::property_cases(3);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < per_mesh; ++k) {
      // repeat
      const Shape rs = grad_shape_shape(rng, 1, 3);
      const Placements rpl =
          dtensor::testing::random_input_placements(rng, mesh.ndim(), static_cast<int64_t>(rs.size()));
      DimVector repeats{uniform_shape(rng, 1, 2)};
      for (size_t i = 0; i < rs.size(); ++i) repeats.push_back(uniform_shape(rng, 0, 2));
      // constant pad (crops too) and reflect pad
      const Shape ps = grad_shape_shape(rng, 2, 3);
      const Placements ppl =
          dtensor::testing::random_input_placements(rng, mesh.ndim(), static_cast<int64_t>(ps.size()));
      const std::vector<int64_t> cpads{uniform_shape(rng, -1, 2), uniform_shape(rng, 0, 2), uniform_shape(rng, 0, 1),
                                       uniform_shape(rng, -1, 1)};
      Shape fs{uniform_shape(rng, 1, 2), uniform_shape(rng, 2, 4), uniform_shape(rng, 2, 4)};
      const Placements fpl = dtensor::testing::random_input_placements(rng, mesh.ndim(), 3);
      const std::vector<int64_t> rpads{uniform_shape(rng, 0, 1), uniform_shape(rng, 0, 1), 1, 0};
      // split
      const Shape ss = grad_shape_shape(rng, 1, 3);
      const Placements spl =
          dtensor::testing::random_input_placements(rng, mesh.ndim(), static_cast<int64_t>(ss.size()));
      // einsum
      const auto eq = dtensor::testing::random_einsum(rng);
      std::vector<Placements> epl;
      for (const Shape& s : eq.shapes)
        epl.push_back(dtensor::testing::random_input_placements(
            rng, mesh.ndim(), static_cast<int64_t>(s.size())));
      const uint64_t seed = rng();
      if (!takes_part(mesh)) continue;
      const std::string on = " mesh " + to_string(ms);
      check_shape_op([repeats](const auto& in) { return repeat(in[0], repeats); },
               {grad_input(rs, mesh, rpl, seed)}, seed,
               "repeat " + to_string(repeats) + " of " + to_string(rs) + " " + to_string(rpl) + on);
      bool fits = true;
      for (size_t j = 0; j < 2; ++j)
        fits = fits && ps[ps.size() - 1 - j] + cpads[2 * j] + cpads[2 * j + 1] >= 0;
      if (fits)
        check_shape_op([cpads](const auto& in) { return pad(in[0], cpads, "constant", 2.0); },
                 {grad_input(ps, mesh, ppl, seed + 2)}, seed + 2,
                 "constant pad of " + to_string(ps) + " " + to_string(ppl) + on);
      for (const char* mode : {"reflect", "replicate"})
        check_shape_op([rpads, mode](const auto& in) { return pad(in[0], rpads, mode); },
                 {grad_input(fs, mesh, fpl, seed + 4)}, seed + 4,
                 std::string(mode) + " pad of " + to_string(fs) + " " + to_string(fpl) + on);
      const int64_t sd = static_cast<int64_t>(ss.size()) - 1;
      const std::vector<int64_t> sizes{ss[sd] / 2, ss[sd] - ss[sd] / 2};
      check_shape_op([sizes, sd](const auto& in) {
                 std::vector<DTensor> p = split(in[0], sizes, sd);
                 std::vector<DTensor> u = unbind(in[0], sd);
                 DTensor out = cat({p[1], p[0]}, sd);
                 return u.empty() ? out : cat({out, unsqueeze(u.back(), sd)}, sd);
               },
               {grad_input(ss, mesh, spl, seed + 6)}, seed + 6,
               "split/unbind of " + to_string(ss) + " " + to_string(spl) + on);
      std::vector<DTensor> ein;
      for (size_t i = 0; i < eq.shapes.size(); ++i)
        ein.push_back(grad_input(eq.shapes[i], mesh, epl[i], seed + 8 + 2 * i));
      check_shape_op([e = eq.equation](const auto& in) { return einsum(e, in); }, ein, seed + 8,
               "einsum " + eq.equation + on, 1e-9);
    }
  }
}
