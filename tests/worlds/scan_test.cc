// The scan family on DTensors (cumsum, sort, topk, logsumexp, all, any) on
// every world (see world_util.h):
//  - full_tensor() of the op equals the plain op on the full tensor, on
//    random meshes of 1-4 dims, random shapes with uneven and empty shards,
//    random placements with every Partial kind (integer-valued data: exact,
//    logsumexp within 1e-5);
//  - the layouts the rules promise to keep run no collective and give the
//    promised output placements (CommDebugMode), and sort/topk move their
//    input once for both outputs;
//  - gradients against finite differences and against the replicated
//    computation, the output's gradient given in random layouts.
#include <gtest/gtest.h>

#include <random>
#include <string>

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

class ScanWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// make_dtensor's layout with pieces that tell Partial kinds apart better:
// its avg pieces all hold the value and its max/min pieces hold it on the
// group's first member and value -/+ 7 elsewhere, so any monotone or
// shift-invariant op seems to commute with them (cumsum of such max pieces
// has its max on member 0 again). Here avg members hold value + k(2g-n+1)
// (offsets summing to 0), and each element's exact value sits on a random
// member, the others 7 below (max) or above (min).
DTensor mixed_partial(const Tensor& full, const DeviceMesh& mesh, const Placements& pl,
                      uint64_t seed) {
  Placements base = pl;
  for (Placement& p : base)
    if (p.is_partial()) p = Replicate();
  LocalTensor local = distribute_tensor(full, mesh, base).local();
  for (size_t m = 0; m < pl.size(); ++m) {
    if (!pl[m].is_partial()) continue;
    const int md = static_cast<int>(m);
    const ReduceOp op = pl[m].reduce_op();
    local = local.map([&](int rank, const Tensor& t) {
      const int64_t g = mesh.group_index(rank, md), n = mesh.size(md);
      if (op == ReduceOp::Sum) {
        const Tensor k = dtensor::testing::int_valued(t.shape(), seed + 17 * m).to(t.dtype());
        return g == 0 ? t - k * static_cast<double>(n - 1) : k.clone();
      }
      if (op == ReduceOp::Avg) {
        const Tensor k = dtensor::testing::int_valued(t.shape(), seed + 17 * m).to(t.dtype());
        return t + k * static_cast<double>(2 * g - n + 1);
      }
      // The same random owner per element on every member of the group.
      const Tensor mask = eq(Tensor::randint(0, n, t.shape(), seed + 31 * m), g);
      return where(mask, t, op == ReduceOp::Max ? t - 7.0 : t + 7.0);
    });
  }
  return DTensor(DTensorSpec(mesh, pl, full.shape(), full.dtype()), local);
}

Placements replicate_scan(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// A random dim of an nd-d tensor, negative half the time (0 or -1 for 0-d).
int64_t random_dim(std::mt19937& rng, int64_t nd) {
  const int64_t n = std::max<int64_t>(nd, 1);
  return static_cast<int64_t>(rng() % static_cast<unsigned>(2 * n)) - n;
}

// Some dims of nd, as given to a reduction (empty = all).
DimVector random_dims_scan(std::mt19937& rng, int64_t nd) {
  DimVector dims;
  for (int64_t d = 0; d < nd; ++d)
    if (rng() % 2) dims.push_back(rng() % 2 ? d : d - nd);
  return dims;
}

void expect_same(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (tol == 0) {
    EXPECT_TRUE(equal(got, want)) << what << "\n" << got << "\n" << want;
  } else {
    EXPECT_TRUE(allclose(got, want, tol, tol, /*equal_nan=*/true)) << what << "\n"
                                                                   << got << "\n" << want;
  }
}

// Every shard has the shape its spec says.
void expect_local_shapes(const DTensor& d, const std::string& what) {
  for (int rank : d.local().ranks())
    EXPECT_EQ(d.to_local(rank).shape(), d.spec().extent_of_rank(rank)->local_shape) << what;
}

TEST_F(ScanWorldTest, MatchesThePlainOps) {
  std::mt19937 rng(2026);
  const int cases = dtensor::testing::property_cases(240);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh_shape.product());
    const int64_t nd = static_cast<int64_t>(shape.size());
    const Placements pl =
        dtensor::testing::random_placement_pair(rng, mesh.ndim(), nd).first;
    const int op = iter % 6;
    const int64_t dim = random_dim(rng, nd);
    const DimVector dims = random_dims_scan(rng, nd);
    const bool flag = rng() % 2;
    const int64_t n = shape[dim < 0 ? dim + nd : dim];
    const int64_t k = static_cast<int64_t>(rng() % static_cast<unsigned>(n + 1));
    if (!dtensor::testing::takes_part(mesh)) continue;
    // Few distinct values: ties for sort/topk, zeros for all/any.
    const Tensor full = op >= 4 ? Tensor::randint(-1, 2, shape, iter).to(DType::Float32)
                                : dtensor::testing::int_valued(shape, iter);
    const DTensor x = (iter / 6) % 2 ? mixed_partial(full, mesh, pl, iter + 1)
                               : make_dtensor(full, mesh, pl, iter + 1);
    ASSERT_TRUE(equal(x.full_tensor(), full));
    std::string what = "mesh " + mesh.to_string() + " " + x.spec().to_string() + " op " +
                       std::to_string(op) + " dim " + std::to_string(dim) + " dims " +
                       to_string(dims) + " k " + std::to_string(k) + " flag " +
                       std::to_string(flag);
    switch (op) {
      case 0: {
        const DTensor got = cumsum(x, dim);
        expect_local_shapes(got, what);
        expect_same(got.full_tensor(), cumsum(full, dim), 0, what);
        break;
      }
      case 1: {
        const auto [v, i] = sort(x, dim, flag);
        const auto [wv, wi] = sort(full, dim, flag);
        EXPECT_EQ(v.placements(), i.placements()) << what;
        expect_local_shapes(v, what);
        expect_local_shapes(i, what);
        expect_same(v.full_tensor(), wv, 0, what);
        expect_same(i.full_tensor(), wi, 0, what);
        break;
      }
      case 2: {
        const auto [v, i] = topk(x, k, dim, flag);
        const auto [wv, wi] = topk(full, k, dim, flag);
        EXPECT_EQ(v.placements(), i.placements()) << what;
        expect_same(v.full_tensor(), wv, 0, what);
        expect_same(i.full_tensor(), wi, 0, what);
        break;
      }
      case 3:
        expect_same(logsumexp(x, dims, flag).full_tensor(), logsumexp(full, dims, flag), 1e-5,
                    what);
        break;
      case 4: {
        const DTensor got = all(x, dims, flag);
        expect_local_shapes(got, what);
        expect_same(got.full_tensor(), all(full, dims, flag), 0, what);
        break;
      }
      case 5: {
        const DTensor got = any(x, dims, flag);
        expect_local_shapes(got, what);
        expect_same(got.full_tensor(), any(full, dims, flag), 0, what);
        break;
      }
    }
  }
}

// int64 and bool inputs (Shard / Replicate: the test's Partial pieces are
// built with float arithmetic): cumsum's int64 output, sort of bools,
// all/any of integers.
TEST_F(ScanWorldTest, IntegerAndBoolInputs) {
  std::mt19937 rng(77);
  const int cases = dtensor::testing::property_cases(60);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const Shape shape = dtensor::testing::random_shape_for(rng, mesh_shape.product());
    const int64_t nd = static_cast<int64_t>(shape.size());
    Placements pl;
    for (int m = 0; m < mesh.ndim(); ++m)
      pl.push_back(dtensor::testing::random_placement(rng, nd, false));
    const int64_t dim = random_dim(rng, nd);
    const DimVector dims = random_dims_scan(rng, nd);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const Tensor ints = Tensor::randint(-2, 3, shape, iter);
    const Tensor bools = gt(ints, 0);
    const std::string what = "mesh " + mesh.to_string() + " " + to_string(pl) + " shape " +
                             to_string(shape) + " dim " + std::to_string(dim);
    const DTensor di = distribute_tensor(ints, mesh, pl), db = distribute_tensor(bools, mesh, pl);
    expect_same(cumsum(di, dim).full_tensor(), cumsum(ints, dim), 0, what);
    expect_same(cumsum(db, dim).full_tensor(), cumsum(bools, dim), 0, what);
    expect_same(sort(db, dim).indices.full_tensor(), sort(bools, dim).indices, 0, what);
    expect_same(all(di, dims).full_tensor(), all(ints, dims), 0, what);
    expect_same(any(db, dims, true).full_tensor(), any(bools, dims, true), 0, what);
  }
}

// The layouts the rules keep: no collective, and the output placements
// the rule promises; then the values (whose full_tensor() resolves the
// bool Partial(min/max) of all/any through the comm layer).
TEST_F(ScanWorldTest, LayoutsThatNeedNoCommunication) {
  const Shape ms = world.size() >= 4 ? Shape{2, 2} : Shape{1, 1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const Placement sum = Partial(ReduceOp::Sum), avg = Partial(ReduceOp::Avg);
  // Dim 0 of 3 rows on 2 ranks and dim 1 of 5 on 2: uneven shards.
  const Tensor full = dtensor::testing::int_valued({3, 5}, 1);
  const Tensor sparse = Tensor::randint(-1, 2, {3, 5}, 2).to(DType::Float32);
  auto check = [&](const char* name, const Placements& in, auto&& f, const Placements& want_out,
                   auto&& plain, const Tensor& data) {
    const DTensor x = mixed_partial(data, mesh, in, 3);
    CommDebugMode comm;
    const DTensor out = f(x);
    EXPECT_EQ(comm.total_count(), 0) << name << " on " << to_string(in) << ":\n" << comm.table();
    EXPECT_EQ(out.placements(), want_out) << name << " on " << to_string(in);
    expect_same(out.full_tensor(), plain(data), 0, name);
  };
  const Placements s0p{Shard(0), sum}, s0a{Shard(0), avg}, s1s0{Shard(1), Shard(0)};
  const Placements s0r{Shard(0), Replicate()}, s0s1{Shard(0), Shard(1)};
  check("cumsum", s0p, [](const DTensor& x) { return cumsum(x, 1); }, s0p,
        [](const Tensor& x) { return cumsum(x, 1); }, full);
  check("cumsum", s0a, [](const DTensor& x) { return cumsum(x, -1); }, s0a,
        [](const Tensor& x) { return cumsum(x, -1); }, full);
  check("cumsum", Placements{sum, Shard(1)}, [](const DTensor& x) { return cumsum(x, 0); },
        Placements{sum, Shard(1)}, [](const Tensor& x) { return cumsum(x, 0); }, full);
  check("sort values", s0r, [](const DTensor& x) { return sort(x, 1, true).values; }, s0r,
        [](const Tensor& x) { return sort(x, 1, true).values; }, full);
  check("topk indices", Placements{Replicate(), Shard(1)},
        [](const DTensor& x) { return topk(x, 2, 0).indices; }, Placements{Replicate(), Shard(1)},
        [](const Tensor& x) { return topk(x, 2, 0).indices; }, full);
  check("logsumexp", s0r, [](const DTensor& x) { return logsumexp(x, {1}); }, s0r,
        [](const Tensor& x) { return logsumexp(x, {1}); }, sparse);
  check("all", s0s1, [](const DTensor& x) { return all(x, {1}); },
        Placements{Shard(0), Partial(ReduceOp::Min)}, [](const Tensor& x) { return all(x, {1}); },
        sparse);
  check("any", s1s0, [](const DTensor& x) { return any(x, {0}); },
        Placements{Shard(0), Partial(ReduceOp::Max)}, [](const Tensor& x) { return any(x, {0}); },
        sparse);
  check("all keepdim", s0s1, [](const DTensor& x) { return all(x, {}, true); },
        Placements{Partial(ReduceOp::Min), Partial(ReduceOp::Min)},
        [](const Tensor& x) { return all(x, {}, true); }, sparse);
}

// An all/any over a dim with empty shards (2 elements on 4 ranks): the
// empty ranks hold the identity, so the reduced Partial is right.
TEST_F(ScanWorldTest, LogicalReductionsWithEmptyShards) {
  if (world.size() < 4) return;
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  for (const std::vector<double>& v : {std::vector<double>{1, 1}, std::vector<double>{0, 0},
                                       std::vector<double>{0, 1}}) {
    const Tensor full = Tensor::from_vector(v, Shape{2});
    const DTensor x = distribute_tensor(full, mesh, {Shard(0)});
    const DTensor a = all(x), o = any(x);
    EXPECT_EQ(a.placements(), Placements{Partial(ReduceOp::Min)});
    EXPECT_EQ(o.placements(), Placements{Partial(ReduceOp::Max)});
    EXPECT_EQ(a.full_tensor().item<bool>(), all(full).item<bool>());
    EXPECT_EQ(o.full_tensor().item<bool>(), any(full).item<bool>());
  }
}

// sort/topk gather the sorted dim once for both outputs, and reduce a
// Partial once.
TEST_F(ScanWorldTest, SortMovesItsInputOnce) {
  if (world.size() < 4) return;
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor full = dtensor::testing::int_valued({6, 7}, 5);
  {
    const DTensor x = distribute_tensor(full, mesh, {Shard(1)});
    CommDebugMode comm;
    const auto [v, i] = sort(x, 1);
    EXPECT_EQ(comm.count(CollectiveKind::AllToAll) + comm.count(CollectiveKind::AllGather), 1)
        << comm.table();
    EXPECT_EQ(comm.total_count(), 1) << comm.table();
    EXPECT_EQ(v.placements(), i.placements());
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    const DTensor x = mixed_partial(full, mesh, {Partial(op)}, 9);
    CommDebugMode comm;
    const auto [v, i] = topk(x, 3, 1);
    EXPECT_EQ(comm.total_count(), 1) << comm.table();
    EXPECT_TRUE(equal(v.full_tensor(), topk(full, 3, 1).values));
    EXPECT_TRUE(equal(i.full_tensor(), topk(full, 3, 1).indices));
  }
}

// cumsum is not max- or min-linear, and a bool sum is a logical or: those
// Partials are reduced (one all_reduce) before the scan, and the result is
// right with pieces whose maxima sit on different members.
TEST_F(ScanWorldTest, CumsumReducesNonLinearPartials) {
  if (world.size() < 4) return;
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const Tensor full = dtensor::testing::int_valued({3, 9}, 4);
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    const DTensor x = mixed_partial(full, mesh, {Partial(op)}, 5);
    CommDebugMode comm;
    const DTensor y = cumsum(x, 1);
    EXPECT_EQ(comm.count(CollectiveKind::AllReduce) + comm.count(CollectiveKind::ReduceScatter), 1)
        << comm.table();
    EXPECT_FALSE(y.placements()[0].is_partial());
    EXPECT_TRUE(equal(y.full_tensor(), cumsum(full, 1)));
  }
  // Two bool pieces true at the same place: their sum (or) is one true.
  const Tensor b = Tensor::from_vector(std::vector<bool>{true, false, true}, Shape{3});
  const DTensor xb = DTensor(DTensorSpec(mesh, {Partial(ReduceOp::Sum)}, b.shape(), b.dtype()),
                             distribute_tensor(b, mesh, {Replicate()}).local());
  EXPECT_TRUE(equal(cumsum(xb, 0).full_tensor(), cumsum(b, 0)));
}

TEST_F(ScanWorldTest, ErrorsNameTheOpAndPlacements) {
  const Shape ms = world.size() >= 2 ? Shape{2} : Shape{1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const DTensor x = distribute_tensor(Tensor::zeros({3, 4}), mesh, {Shard(0)});
  dtensor::testing::expect_error([&] { cumsum(x, 2); }, {"cumsum", "S(0)"});
  dtensor::testing::expect_error([&] { topk(x, 5, 1); }, {"topk", "k = 5", "S(0)"});
  dtensor::testing::expect_error([&] { sort(x, -3); }, {"sort"});
  dtensor::testing::expect_error([&] { logsumexp(x, {0, 0}); }, {"logsumexp", "more than once"});
  dtensor::testing::expect_error([&] { all(x, {3}); }, {"all"});
}

// ---- gradients -------------------------------------------------------------------------

constexpr double kTolScan = 1e-10;

// The leaves' gradients when f's output gets a random gradient laid out in
// `pg` (every layout the backward ops may be handed, Partials included).
std::vector<Tensor> gradients_given_scan(const GradFn& f, std::vector<DTensor> inputs,
                                    const Placements& pg, uint64_t seed) {
  for (DTensor& x : inputs) x.zero_grad();
  const DTensor out = f(inputs);
  const Tensor g = Tensor::randn(out.shape(), seed, 0, out.dtype());
  out.backward(make_dtensor(g, out.mesh(), pg, seed + 1));
  std::vector<Tensor> grads;
  for (const DTensor& x : inputs) grads.push_back(x.grad() ? x.grad()->full_tensor() : Tensor());
  return grads;
}

void check_all_scan(const GradFn& f, const DTensor& x, const Placements& pg, uint64_t seed,
               const std::string& what) {
  EXPECT_EQ(check_gradients(f, {x}, seed), "") << what;
  EXPECT_EQ(check_matches_replicated(f, {x}, seed, kTolScan, kTolScan), "") << what;
  DTensor r = distribute_tensor(x.full_tensor(), x.mesh(), replicate_scan(x.mesh()));
  r.requires_grad_();
  const Tensor got = gradients_given_scan(f, {x}, pg, seed)[0];
  const Tensor want = gradients_given_scan(f, {r}, replicate_scan(x.mesh()), seed)[0];
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  EXPECT_TRUE(allclose(got, want, kTolScan, kTolScan, true)) << what << " gradient in " << to_string(pg);
}

// Shapes of 1-3 dims, sizes 0-5, at most 36 elements (finite differences
// run two forwards per element).
Shape grad_shape(std::mt19937& rng) {
  for (;;) {
    Shape s;
    const int nd = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nd; ++i) s.push_back(rng() % 6);
    if (s.product() <= 36) return s;
  }
}

TEST_F(ScanWorldTest, Gradients) {
  std::mt19937 rng(505);
  const int cases = dtensor::testing::property_cases(3);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      for (int op = 0; op < 4; ++op) {
        const Shape shape = grad_shape(rng);
        const int64_t nd = static_cast<int64_t>(shape.size());
        const int64_t dim = random_dim(rng, nd);
        const DimVector dims = random_dims_scan(rng, nd);
        const bool flag = rng() % 2;
        const int64_t n = shape[dim < 0 ? dim + nd : dim];
        const int64_t top = static_cast<int64_t>(rng() % static_cast<unsigned>(n + 1));
        const Placements pl = dtensor::testing::random_input_placements(rng, mesh.ndim(), nd);
        const Placements pg = dtensor::testing::random_input_placements(rng, mesh.ndim(), nd);
        if (!dtensor::testing::takes_part(mesh)) continue;
        // randn: distinct values, so sort and topk are differentiable here.
        DTensor x = mixed_partial(Tensor::randn(shape, 10 + k, 0, DType::Float64), mesh, pl, 3);
        x.requires_grad_();
        GradFn f;
        std::string name;
        switch (op) {
          case 0:
            f = [dim](const std::vector<DTensor>& in) { return cumsum(in[0], dim); };
            name = "cumsum";
            break;
          case 1:
            f = [dim, flag](const std::vector<DTensor>& in) { return sort(in[0], dim, flag).values; };
            name = "sort";
            break;
          case 2:
            f = [dim, flag, top](const std::vector<DTensor>& in) {
              return topk(in[0], top, dim, flag).values;
            };
            name = "topk k " + std::to_string(top);
            break;
          default:
            f = [dims, flag](const std::vector<DTensor>& in) { return logsumexp(in[0], dims, flag); };
            name = "logsumexp dims " + to_string(dims);
            break;
        }
        // The output's gradient layout: pg fits x's rank; reductions and
        // topk change the shape, so give those a replicated gradient
        // unless the shape is kept.
        const DTensor probe = f({x.detach()});
        Placements pgo = pg;
        if (probe.shape() != x.shape()) pgo = replicate_scan(mesh);
        check_all_scan(f, x, pgo, 7 + k,
                  name + " dim " + std::to_string(dim) + " flag " + std::to_string(flag) +
                      " mesh " + mesh.to_string() + " " + x.spec().to_string());
      }
    }
  }
}

// cumsum's gradient keeps the layout: a P(sum) gradient on a row-sharded
// output gives a P(sum) row-sharded input gradient, with no collective.
TEST_F(ScanWorldTest, CumsumBackwardKeepsPartialGradients) {
  const Shape ms = world.size() >= 4 ? Shape{2, 2} : Shape{1, 1};
  DeviceMesh mesh(world, ms);
  if (!dtensor::testing::takes_part(mesh)) return;
  const Placements pl{Shard(0), Replicate()}, pg{Shard(0), Partial(ReduceOp::Sum)};
  DTensor x = distribute_tensor(Tensor::randn({4, 5}, 1, 0, DType::Float64), mesh, pl);
  x.requires_grad_();
  const DTensor y = cumsum(x, 1);
  const Tensor g = Tensor::randn({4, 5}, 2, 0, DType::Float64);
  const DTensor gd = make_dtensor(g, mesh, pg, 3);
  {
    CommDebugMode comm;
    const DTensor gx = cumsum(gd, 1);  // the forward rule the backward uses
    EXPECT_EQ(comm.total_count(), 0);
    EXPECT_EQ(gx.placements(), pg);
  }
  y.backward(gd);
  // The reverse cumulative sum: element j gets the sum of g over j..end.
  const Tensor want = sub(add(sum(g, {1}, true), g), cumsum(g, 1));
  EXPECT_TRUE(allclose(x.grad()->full_tensor(), want, 1e-12, 1e-12));
}

}  // namespace
