// vector_norm / norm on DTensors, in both worlds:
//  - random meshes of 1-4 dims, random shapes with uneven and empty shards,
//    random placements with every Partial kind, random dims / keepdim / ord:
//    full_tensor() equals the plain op on the full tensor (exactly for
//    ords 0, 1, 2, inf, -inf on integer-valued float64 data, whose power
//    sums are exact in any order; 1e-12 relative for other ords);
//  - the layouts the rule claims: from Shard/Replicate inputs, ords 0, 1
//    and ±inf need no collective and give Partial(sum|max|min) on the mesh
//    dims sharding a reduced dim; other ords need all_reduces only (one
//    per such mesh dim at most, never a gather) and give Replicate there,
//    and no collective when no reduced dim is sharded;
//  - gradients: finite differences, the gradient on replicated inputs, and
//    PyTorch's formula computed with plain Tensor ops.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool exact_ord(double ord) { return ord == 0 || ord == 1 || ord == 2 || std::isinf(ord); }
bool rootless(double ord) { return ord == 0 || ord == 1 || std::isinf(ord); }

Placement combined(double ord) {
  if (ord == kInfNorm) return Partial(ReduceOp::Max);
  if (ord == -kInfNorm) return Partial(ReduceOp::Min);
  return Partial(ReduceOp::Sum);
}

// Random dims to reduce: none (= all) a quarter of the time, else a random
// non-empty subset, each dim given negative half of the time.
DimVector random_dims(std::mt19937& rng, int64_t ndim) {
  DimVector dims;
  if (rng() % 4 == 0) return dims;
  for (int64_t d = 0; d < ndim; ++d)
    if (rng() % 2) dims.push_back(rng() % 2 ? d : d - ndim);
  if (dims.empty()) dims.push_back(static_cast<int64_t>(rng() % ndim));
  return dims;
}

bool is_reduced(const DimVector& dims, int64_t d, int64_t ndim) {
  if (dims.empty()) return true;
  for (int64_t r : dims)
    if (r == d || r + ndim == d) return true;
  return false;
}

TEST(NormWorld, MatchesPlainOnRandomLayouts) {
  const World world = test_world();
  std::mt19937 rng(2024);
  const double ords[] = {2, 1, 0, kInfNorm, -kInfNorm, 3, 0.5, -1, 1.5, -kInfNorm, kInfNorm};
  int checked = 0, lazy = 0, reduced_once = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const Shape mesh_shape = random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const Shape shape = random_shape_for(rng, mesh_shape.product());
    const int64_t nd = static_cast<int64_t>(shape.size());
    const bool partial = rng() % 3 == 0;
    const Placements pl = random_input_placements(rng, mesh.ndim(), nd, partial);
    const double ord = ords[rng() % std::size(ords)];
    const DimVector dims = random_dims(rng, nd);
    const bool keepdim = rng() % 2;
    const bool use_norm = rng() % 4 == 0;
    const uint64_t seed = 300 + iter;
    if (!takes_part(mesh)) continue;
    const Tensor full = int_valued(shape, seed).to(DType::Float64);
    const DTensor x = make_dtensor(full, mesh, pl, seed + 1);
    const std::string what = "mesh " + str(mesh_shape) + " shape " + str(shape) +
                             " placements " + to_string(pl) + " ord " + std::to_string(ord) +
                             " dims " + str(dims) + (keepdim ? " keepdim" : "");
    bool empty_reduced = false;
    for (int64_t d = 0; d < nd; ++d) empty_reduced |= is_reduced(dims, d, nd) && shape[d] == 0;
    if (empty_reduced && (ord < 0 || ord == kInfNorm)) {
      // No identity: the DTensor op refuses like the plain one.
      EXPECT_THROW(vector_norm(x, ord, dims, keepdim), Error) << what;
      EXPECT_THROW(vector_norm(full, ord, dims, keepdim), Error) << what;
      continue;
    }
    CommDebugMode comm;
    const DTensor got = use_norm ? norm(x, ord, dims, keepdim) : vector_norm(x, ord, dims, keepdim);
    // Counted before full_tensor() gathers the result.
    const int64_t collectives = comm.total_count();
    const int64_t moves =
        comm.count(CollectiveKind::AllGather) + comm.count(CollectiveKind::AllToAll);
    const int64_t all_reduces = comm.count(CollectiveKind::AllReduce);
    const std::string table = comm.table();
    const Tensor want = vector_norm(full, ord, dims, keepdim);
    const Tensor g = got.full_tensor();
    ASSERT_EQ(g.shape(), want.shape()) << what;
    if (exact_ord(ord)) {
      EXPECT_TRUE(equal(g, want)) << what << "\n" << g << "\nwant " << want;
    } else {
      EXPECT_TRUE(allclose(g, want, 1e-12, 1e-300)) << what << "\n" << g << "\nwant " << want;
    }
    ++checked;
    if (partial) continue;
    // The rule, from Shard/Replicate inputs.
    int sharding_reduced = 0;  // mesh dims of size > 1 sharding a reduced dim
    for (size_t m = 0; m < pl.size(); ++m)
      if (pl[m].is_shard() && is_reduced(dims, pl[m].dim(), nd) && mesh.size(static_cast<int>(m)) > 1)
        ++sharding_reduced;
    EXPECT_EQ(moves, 0) << what << table;
    if (rootless(ord) || sharding_reduced == 0) {
      EXPECT_EQ(collectives, 0) << what << table;
      // Kept dims stay sharded (renumbered), reduced ones give the Partial.
      for (size_t m = 0; m < pl.size(); ++m) {
        Placement expected = Replicate();
        if (pl[m].is_shard()) {
          const int64_t d = pl[m].dim();
          if (is_reduced(dims, d, nd)) {
            // A size-1 mesh dim sharding a reduced dim: root ords reduce
            // its (trivial) Partial before the root, without a collective.
            if (!rootless(ord)) {
              EXPECT_FALSE(got.placements()[m].is_partial()) << what;
              continue;
            }
            expected = combined(ord);
          } else {
            int64_t out_d = 0;
            for (int64_t k = 0; k < d; ++k) out_d += !is_reduced(dims, k, nd) || keepdim;
            expected = Shard(out_d);
          }
        }
        EXPECT_EQ(got.placements()[m], expected) << what << " mesh dim " << m;
      }
      lazy += sharding_reduced > 0;
    } else {
      // The power sums are all-reduced (once per mesh dim at most, once in
      // all when the planner merges); those mesh dims become Replicate.
      EXPECT_GE(collectives, 1) << what;
      EXPECT_LE(collectives, sharding_reduced) << what << table;
      EXPECT_EQ(all_reduces, collectives) << what << table;
      for (size_t m = 0; m < pl.size(); ++m) {
        const bool reduces = pl[m].is_shard() && is_reduced(dims, pl[m].dim(), nd);
        if (reduces) {
          EXPECT_EQ(got.placements()[m], Replicate()) << what << " mesh dim " << m;
        } else {
          EXPECT_FALSE(got.placements()[m].is_partial()) << what;
        }
      }
      ++reduced_once;
    }
  }
  // Enough of each kind of case came up (on worlds holding every rank).
  if (world.held_ranks().size() == static_cast<size_t>(world.size())) {
    EXPECT_GT(checked, 200);
    EXPECT_GT(lazy, 10);
    EXPECT_GT(reduced_once, 10);
  }
}

// A 2-norm of a tensor sharded on both dims of a 2-d mesh over all dims:
// the local sums of squares are reduced once, and nothing is gathered.
TEST(NormWorld, TwoNormOfFullyShardedTensorReducesOnce) {
  const World world = test_world();
  if (world.size() < 4) return;
  DeviceMesh mesh(world, {2, 2});
  if (!takes_part(mesh)) return;
  const Tensor full = Tensor::randn({7, 5}, 11, 0, DType::Float64);
  const DTensor x = distribute_tensor(full, mesh, {Shard(0), Shard(1)});
  CommDebugMode comm;
  const DTensor n = vector_norm(x);
  EXPECT_EQ(comm.total_count(), 1) << comm.table();
  EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 1) << comm.table();
  EXPECT_EQ(n.placements(), (Placements{Replicate(), Replicate()}));
  EXPECT_NEAR(n.full_tensor().item<double>(), vector_norm(full).item<double>(), 1e-12);
}

// ords 0, 1, inf, -inf over a sharded dim stay Partial until asked for.
TEST(NormWorld, RootlessOrdsStayPartial) {
  const World world = test_world();
  DeviceMesh mesh(world, {std::min<int64_t>(4, world.size())});
  if (!takes_part(mesh)) return;
  const Tensor full = Tensor::randn({9, 3}, 12, 0, DType::Float32);
  const DTensor x = distribute_tensor(full, mesh, {Shard(0)});
  const std::pair<double, Placement> cases[] = {{0, Partial(ReduceOp::Sum)},
                                                {1, Partial(ReduceOp::Sum)},
                                                {kInfNorm, Partial(ReduceOp::Max)},
                                                {-kInfNorm, Partial(ReduceOp::Min)}};
  for (const auto& [ord, placement] : cases) {
    CommDebugMode comm;
    const DTensor n = vector_norm(x, ord, {0});
    EXPECT_EQ(comm.total_count(), 0) << ord << comm.table();
    if (mesh.size(0) > 1) {
      EXPECT_EQ(n.placements(), Placements{placement}) << ord;
    }
    const DTensor r = n.redistribute({Replicate()});
    EXPECT_LE(comm.count(CollectiveKind::AllReduce), 1);
    EXPECT_TRUE(allclose(r.full_tensor(), vector_norm(full, ord, {0}), 1e-6, 1e-6)) << ord;
  }
  // A kept sharded dim: the norm of each row is local, for every ord.
  for (double ord : {2.0, 3.0, -0.5, 0.0, kInfNorm}) {
    CommDebugMode comm;
    const DTensor n = vector_norm(x, ord, {1}, true);
    EXPECT_EQ(comm.total_count(), 0) << ord << comm.table();
    EXPECT_EQ(n.placements(), Placements{Shard(0)}) << ord;
    EXPECT_TRUE(equal(n.full_tensor(), vector_norm(full, ord, {1}, true))) << ord;
  }
}

TEST(NormWorld, Errors) {
  const World world = test_world();
  DeviceMesh mesh(world, {std::min<int64_t>(2, world.size())});
  if (!takes_part(mesh)) return;
  const DTensor i = distribute_tensor(Tensor::zeros({4}, DType::Int64), mesh, {Shard(0)});
  expect_error([&] { vector_norm(i); }, {"vector_norm", "int64"});
  expect_error([&] { norm(i, 1); }, {"norm", "int64"});
  const DTensor e = distribute_tensor(Tensor::zeros({0, 3}, DType::Float32), mesh, {Shard(1)});
  expect_error([&] { vector_norm(e, kInfNorm, {0}); }, {"vector_norm", "inf norm", "empty dim 0"});
  expect_error([&] { vector_norm(e, 2, {2}); }, {"vector_norm", "out of range"});
  expect_error([&] { vector_norm(e, 2, {0, -2}); }, {"vector_norm", "more than once"});
}

// Gradients of every ord from random layouts: finite differences and the
// gradient on replicated inputs.
TEST(NormWorld, GradientsMatchFiniteDifferencesAndReplicated) {
  const World world = test_world();
  std::mt19937 rng(77);
  const double ords[] = {2, 1, 0, kInfNorm, -kInfNorm, 3, 1.5, 0.5, -1};
  int n = 0;
  for (const Shape& mesh_shape : grad_meshes(world.size())) {
    for (int rep = 0; rep < 3; ++rep) {
      DeviceMesh mesh(world, mesh_shape);
      const Shape shape = {1 + static_cast<int64_t>(rng() % 5), 1 + static_cast<int64_t>(rng() % 4)};
      const Placements pl = random_input_placements(rng, mesh.ndim(), 2, rng() % 3 == 0);
      const double ord = ords[rng() % std::size(ords)];
      const DimVector dims = random_dims(rng, 2);
      const bool keepdim = rng() % 2;
      const uint64_t seed = 900 + n++;
      if (!takes_part(mesh)) continue;
      // Values away from 0 and from each other's magnitude (finite
      // differences across a kink of |x| or a tie of max |x| would fail).
      const Tensor base = Tensor::randn(shape, seed, 0, DType::Float64);
      const Tensor full = add(base, mul(gt(base, 0.0).to(DType::Float64), 0.5)) - 0.25;
      DTensor x = make_dtensor(full, mesh, pl, seed + 1);
      x.requires_grad_();
      const GradFn f = [&](const std::vector<DTensor>& in) {
        return vector_norm(in[0], ord, dims, keepdim);
      };
      const std::string what = "mesh " + str(mesh_shape) + " " + to_string(pl) + " ord " +
                               std::to_string(ord) + " dims " + str(dims);
      EXPECT_EQ(check_gradients(f, {x}, seed), "") << what;
      EXPECT_EQ(check_matches_replicated(f, {x}, seed, 1e-12, 1e-10), "") << what;
    }
  }
}

// PyTorch's formulas, on plain tensors: x / ||x|| for 2, sign(x) for 1,
// sign(x) |x|^(p-1) / ||x||^(p-1) for p, the arg max |x| for inf.
TEST(NormWorld, GradientIsPyTorchsFormula) {
  const World world = test_world();
  DeviceMesh mesh(world, {std::min<int64_t>(4, world.size())});
  if (!takes_part(mesh)) return;
  const Tensor full = Tensor::from_vector(std::vector<double>{3, -4, 0, 1, -2, 6, 2, 1, -5, 0.5},
                                          Shape{5, 2});
  for (double ord : {2.0, 1.0, 3.0, kInfNorm, 0.0}) {
    DTensor x = distribute_tensor(full, mesh, {Shard(0)});
    x.requires_grad_();
    vector_norm(x, ord, {0}).backward(distribute_tensor(
        Tensor::from_vector(std::vector<double>{1, 2}), mesh, {Replicate()}));
    const Tensor nrm = vector_norm(full, ord, {0}, true);
    const Tensor up = Tensor::from_vector(std::vector<double>{1, 2}, Shape{1, 2});
    const Tensor sign = sub(gt(full, 0.0).to(DType::Float64), lt(full, 0.0).to(DType::Float64));
    Tensor want;
    if (ord == 2) want = mul(div(full, nrm), up);
    else if (ord == 1) want = mul(sign, up);
    else if (ord == 3) want = mul(div(mul(full, abs(full)), pow(nrm, 2.0)), up);
    else if (ord == 0) want = zeros_like(full);
    else want = mul(mul(sign, eq(abs(full), nrm).to(DType::Float64)), up);  // no ties here
    EXPECT_TRUE(allclose(x.grad()->full_tensor(), want, 1e-12, 1e-12))
        << ord << "\n" << x.grad()->full_tensor() << "\nwant " << want;
  }
}

}  // namespace
