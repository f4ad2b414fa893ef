// Tests of the comm layer: World, LocalTensor, the simulated backend's
// collectives and CommDebugMode. Every collective is checked against an
// independent computation: groups come from row-major coordinates worked out
// here (not from DeviceMesh::group), gathers are rebuilt with narrow/copy_,
// reductions with plain loops in group order.
#include "comm/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <array>
#include <thread>
#include <vector>

#include "comm/sim_backend.h"
#include "dtensor/debug.h"
#include "dtensor/local_tensor.h"
#include "dtensor/mesh.h"
#include "dtensor/threads.h"
#include "dtensor/world.h"
#include "tensor/loops.h"

using namespace dtensor;

namespace {

// ---- independent reference helpers ------------------------------------------------

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// The group of `rank` over root dims `dims` of a default (row-major) mesh of
// `shape`: the ranks that agree with it on every other dim, ordered row-major
// over `dims`.
std::vector<int> ref_group(const std::vector<int64_t>& shape, int rank,
                           const std::vector<int>& dims) {
  std::vector<int64_t> coord(shape.size());
  int64_t r = rank;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    coord[d] = r % shape[d];
    r /= shape[d];
  }
  int64_t total = 1;
  for (int d : dims) total *= shape[d];
  std::vector<int> out;
  for (int64_t t = 0; t < total; ++t) {
    std::vector<int64_t> c = coord;
    int64_t rest = t;
    for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
      c[dims[k]] = rest % shape[dims[k]];
      rest /= shape[dims[k]];
    }
    int64_t lin = 0;
    for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + c[d];
    out.push_back(static_cast<int>(lin));
  }
  return out;
}

int64_t index_in(const std::vector<int>& group, int rank) {
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] == rank) return static_cast<int64_t>(i);
  ADD_FAILURE() << "rank " << rank << " not in its group";
  return -1;
}

// Sizes of L split n ways, DTensor style: c = ceil(L/n), piece i covers
// [c*i, c*(i+1)) clipped to [0, L).
std::vector<int64_t> chunk_sizes(int64_t L, int64_t n) {
  const int64_t c = (L + n - 1) / n;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(std::max<int64_t>(0, std::min(L, c * (i + 1)) - c * i));
  return out;
}
int64_t chunk_start(int64_t L, int64_t n, int64_t i) {
  int64_t s = 0;
  const std::vector<int64_t> sizes = chunk_sizes(L, n);
  for (int64_t k = 0; k < i; ++k) s += sizes[k];
  return s;
}

// A mesh and the dim of it a collective runs over: one root dim, or a
// flattened dim covering several.
struct MeshCase {
  std::vector<int64_t> shape;
  std::vector<int> dims;
};
std::string describe(const MeshCase& c) {
  std::ostringstream os;
  os << "mesh " << to_string(Shape(c.shape)) << " over root dims";
  for (int d : c.dims) os << " " << d;
  return os.str();
}

struct MeshAndDim {
  World world;
  DeviceMesh mesh;
  int mesh_dim;
};
MeshAndDim make_setup(const MeshCase& c, int extra_world_ranks = 0) {
  World w = World::simulated(static_cast<int>(prod(c.shape)) + extra_world_ranks);
  DeviceMesh root(w, Shape(c.shape));
  if (c.dims.size() == 1) return MeshAndDim{w, root, c.dims[0]};
  return MeshAndDim{w, root.flatten(c.dims), 0};
}

const std::vector<MeshCase> kMeshCases = {
    {{1}, {0}},          {{2}, {0}},
    {{3}, {0}},          {{4}, {0}},
    {{2, 3}, {0}},       {{2, 3}, {1}},
    {{2, 3}, {0, 1}},    {{3, 1, 2}, {1}},
    {{2, 2, 2}, {0}},    {{2, 2, 2}, {1}},
    {{2, 2, 2}, {2}},    {{2, 2, 2}, {0, 1}},
    {{2, 2, 2}, {1, 2}}, {{2, 2, 2}, {0, 1, 2}},
};

// Shard of `rank` from (rank, its group index, its group).
using ShardFn = std::function<Tensor(int rank, int64_t index, const std::vector<int>& group)>;

LocalTensor make_input(const MeshCase& c, const ShardFn& f) {
  LocalTensor in;
  for (int r = 0; r < prod(c.shape); ++r) {
    const std::vector<int> g = ref_group(c.shape, r, c.dims);
    in.set(r, f(r, index_in(g, r), g));
  }
  return in;
}

Tensor random_shard(const Shape& shape, DType dtype, int rank) {
  if (dtype == DType::Int64) return Tensor::randint(-50, 50, shape, /*seed=*/100 + rank);
  return Tensor::randn(shape, /*seed=*/rank, 0, dtype);
}

// Distinguishes groups by their first rank, so different groups get
// different (but within a group equal) sizes on the "other" dims.
int64_t group_width(const std::vector<int>& group) { return 2 + group[0] % 2; }

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(equal(got, want)) << what << "\n got " << got << "\nwant " << want;
}

// Reference reductions over plain vectors, left to right in group order.
template <class T>
T ref_op(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Max:
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      }
      return std::max(a, b);
    case ReduceOp::Min:
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      }
      return std::min(a, b);
  }
  return a;
}
template <class T>
std::vector<T> ref_reduce(const std::vector<Tensor>& shards, ReduceOp op) {
  std::vector<T> acc = shards[0].to_vector<T>();
  for (size_t j = 1; j < shards.size(); ++j) {
    const std::vector<T> v = shards[j].to_vector<T>();
    for (size_t e = 0; e < acc.size(); ++e) acc[e] = ref_op(op, acc[e], v[e]);
  }
  if (op == ReduceOp::Avg)
    for (T& x : acc) x = x / static_cast<T>(shards.size());
  return acc;
}
Tensor ref_reduce_tensor(const std::vector<Tensor>& shards, ReduceOp op) {
  const Shape shape = shards[0].shape();
  switch (shards[0].dtype()) {
    case DType::Float32: return Tensor::from_vector(ref_reduce<float>(shards, op), shape);
    case DType::Float64: return Tensor::from_vector(ref_reduce<double>(shards, op), shape);
    case DType::Int64: return Tensor::from_vector(ref_reduce<int64_t>(shards, op), shape);
    default: ADD_FAILURE() << "unexpected dtype"; return Tensor();
  }
}

std::vector<Tensor> group_shards(const LocalTensor& in, const std::vector<int>& group) {
  std::vector<Tensor> out;
  for (int r : group) out.push_back(in.shard(r));
  return out;
}

// Runs f, expecting a dtensor::Error whose message contains every needle.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected a dtensor::Error mentioning " << needles[0];
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
  }
}

const char* const kOpNames[] = {"sum", "avg", "max", "min"};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

}  // namespace

// ---- World ----------------------------------------------------------------------------

TEST(World, SimulatedHoldsEveryRank) {
  World w = World::simulated(4);
  EXPECT_EQ(w.size(), 4);
  EXPECT_TRUE(w.is_simulated());
  EXPECT_EQ(w.held_ranks(), (std::vector<int>{0, 1, 2, 3}));
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(w.holds(r));
  EXPECT_FALSE(w.holds(4));
  EXPECT_FALSE(w.holds(-1));
  World one = World::simulated(1);
  EXPECT_EQ(one.held_ranks(), std::vector<int>{0});
}

TEST(World, CopiesShareTheWorldAndItsBackend) {
  World a = World::simulated(3);
  World b = a;
  World c = World::simulated(3);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
  EXPECT_TRUE(a != c);
  EXPECT_EQ(&a.backend(), &b.backend());
  EXPECT_NE(&a.backend(), &c.backend());
  EXPECT_NE(dynamic_cast<SimBackend*>(&a.backend()), nullptr);
}

TEST(World, RejectsNonPositiveSize) {
  try {
    World::simulated(0);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "World::simulated: size must be >= 1, got 0");
  }
  expect_error([] { World::simulated(-3); }, {"World::simulated", "got -3"});
}

// ---- LocalTensor ----------------------------------------------------------------------

TEST(LocalTensor, KeepsShardsSortedByRank) {
  LocalTensor lt;
  EXPECT_TRUE(lt.empty());
  lt.set(2, Tensor::full({1}, 2.0));
  lt.set(0, Tensor::full({1}, 0.0));
  lt.set(3, Tensor::full({1}, 3.0));
  lt.set(1, Tensor::full({1}, 1.0));
  EXPECT_EQ(lt.ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(lt.size(), 4u);
  for (const auto& [rank, t] : lt.shards()) EXPECT_EQ(t.item<double>(), rank);
  std::vector<int> seen;
  lt.for_each([&](int rank, const Tensor& t) {
    seen.push_back(rank);
    EXPECT_EQ(t.item<double>(), rank);
  });
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  LocalTensor doubled = lt.map([](int, const Tensor& t) { return t * 2; });
  EXPECT_EQ(doubled.ranks(), lt.ranks());
  EXPECT_EQ(doubled.shard(3).item<double>(), 6.0);
}

TEST(LocalTensor, SetReplacesAndShardIsMutable) {
  LocalTensor lt;
  lt.set(1, Tensor::full({2}, 1.0));
  lt.set(1, Tensor::full({3}, 5.0));
  EXPECT_EQ(lt.size(), 1u);
  EXPECT_EQ(lt.shard(1).shape(), (Shape{3}));
  lt.shard(1) = Tensor::full({4}, 7.0);
  EXPECT_EQ(lt.shard(1).shape(), (Shape{4}));
  EXPECT_TRUE(lt.holds(1));
  EXPECT_FALSE(lt.holds(0));
  EXPECT_FALSE(lt.holds(2));
}

TEST(LocalTensor, ShardOfRankNotHeldThrows) {
  LocalTensor lt;
  for (int r : {3, 1, 0, 2}) lt.set(r, Tensor::zeros({1}));
  try {
    (void)lt.shard(5);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "LocalTensor: rank 5 is not held here (held: 0, 1, 2, 3)");
  }
  const LocalTensor& clt = lt;
  expect_error([&] { (void)clt.shard(-1); }, {"rank -1 is not held"});
  expect_error([] { (void)LocalTensor().shard(0); }, {"held: none"});
}

// ---- all_gather -------------------------------------------------------------------------

// Gathers shards whose length along the gather dim follows `sizes_of(n)`
// (by group index) and whose other dims vary between groups, on every mesh
// case, and rebuilds the expected result with narrow + copy_.
void check_all_gather(const std::function<std::vector<int64_t>(int64_t n)>& sizes_of, DType dtype,
                      int64_t gather_dim) {
  for (const MeshCase& c : kMeshCases) {
    SCOPED_TRACE(describe(c));
    MeshAndDim s = make_setup(c);
    const LocalTensor in = make_input(c, [&](int rank, int64_t i, const std::vector<int>& g) {
      const int64_t len = sizes_of(static_cast<int64_t>(g.size()))[i];
      Shape shape{group_width(g), 3};
      shape.insert(static_cast<size_t>(gather_dim), len);
      return random_shard(shape, dtype, rank);
    });
    const LocalTensor out = s.world.backend().all_gather(in, s.mesh, s.mesh_dim, gather_dim);
    EXPECT_EQ(out.ranks(), in.ranks());
    for (int r : in.ranks()) {
      const std::vector<int> g = ref_group(c.shape, r, c.dims);
      Shape shape = in.shard(r).shape();
      int64_t total = 0;
      for (int m : g) total += in.shard(m).size(gather_dim);
      shape[gather_dim] = total;
      Tensor want = Tensor::zeros(shape, dtype);
      int64_t at = 0;
      for (int m : g) {
        const int64_t len = in.shard(m).size(gather_dim);
        want.narrow(gather_dim, at, len).copy_(in.shard(m));
        at += len;
      }
      expect_same(out.shard(r), want, "rank " + std::to_string(r));
      EXPECT_TRUE(out.shard(r).is_contiguous());
    }
  }
}

TEST(SimBackend, AllGatherEvenShardsFloatAndInt) {
  auto even = [](int64_t n) { return std::vector<int64_t>(n, 2); };
  check_all_gather(even, DType::Float32, 0);
  check_all_gather(even, DType::Int64, 0);
  check_all_gather(even, DType::Float64, 1);
  check_all_gather(even, DType::Int64, 2);
}

TEST(SimBackend, AllGatherUnevenAndEmptyShards) {
  // The chunk sizes this test relies on, pinned against the documented examples.
  ASSERT_EQ(chunk_sizes(7, 3), (std::vector<int64_t>{3, 3, 1}));
  ASSERT_EQ(chunk_sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  ASSERT_EQ(chunk_sizes(13, 4), (std::vector<int64_t>{4, 4, 4, 1}));
  for (int64_t gather_dim : {0, 1, 2}) {
    SCOPED_TRACE("gather dim " + std::to_string(gather_dim));
    check_all_gather([](int64_t n) { return chunk_sizes(2 * n + 1, n); }, DType::Float32,
                     gather_dim);
    check_all_gather([](int64_t n) { return chunk_sizes(n / 2, n); }, DType::Int64, gather_dim);
    check_all_gather([](int64_t n) { return chunk_sizes(0, n); }, DType::Float32, gather_dim);
    // Not chunk-shaped at all: empty in the middle.
    check_all_gather(
        [](int64_t n) {
          std::vector<int64_t> v(n, 1);
          if (n > 2) v[1] = 0;
          return v;
        },
        DType::Float64, gather_dim);
  }
}

TEST(SimBackend, AllGatherExplicitTables) {
  // 3,3,1 and 1,1,0,0 on 1-d meshes, element by element.
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{3, 3, 1}, std::vector<int64_t>{1, 1, 0, 0}}) {
    const int n = static_cast<int>(sizes.size());
    World w = World::simulated(n);
    DeviceMesh mesh(w, Shape{n});
    LocalTensor in;
    int64_t base = 0;
    for (int r = 0; r < n; ++r) {
      // Row k of the gathered tensor holds 10*k, 10*k+1.
      std::vector<int64_t> vals;
      for (int64_t k = 0; k < sizes[r]; ++k)
        vals.insert(vals.end(), {10 * (base + k), 10 * (base + k) + 1});
      in.set(r, Tensor::from_vector(vals, Shape{sizes[r], 2}));
      base += sizes[r];
    }
    const LocalTensor out = w.backend().all_gather(in, mesh, 0, 0);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(out.shard(r).shape(), (Shape{base, 2}));
      const std::vector<int64_t> v = out.shard(r).to_vector<int64_t>();
      for (int64_t k = 0; k < base; ++k) {
        EXPECT_EQ(v[2 * k], 10 * k);
        EXPECT_EQ(v[2 * k + 1], 10 * k + 1);
      }
    }
  }
}

TEST(SimBackend, AllGatherOfNonContiguousShardsAndNegativeDims) {
  World w = World::simulated(2);
  DeviceMesh mesh(w, Shape{2});
  LocalTensor in;
  const Tensor a = Tensor::randn({4, 3}, 1), b = Tensor::randn({4, 3}, 2);
  in.set(0, a.t());  // (3, 4) transposed views
  in.set(1, b.t());
  const LocalTensor out = w.backend().all_gather(in, mesh, -1, -1);
  const Tensor want = cat({a.t().contiguous(), b.t().contiguous()}, 1);
  for (int r : {0, 1}) expect_same(out.shard(r), want, "rank " + std::to_string(r));
}

TEST(SimBackend, MeshSmallerThanWorldOnlyProducesMeshRanks) {
  World w = World::simulated(6);
  DeviceMesh mesh(w, Shape{4});
  LocalTensor in;
  for (int r = 0; r < 6; ++r) in.set(r, Tensor::full({1}, static_cast<int64_t>(r), DType::Int64));
  const LocalTensor out = w.backend().all_gather(in, mesh, 0, 0);
  EXPECT_EQ(out.ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(out.shard(2).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
}

// ---- all_reduce -------------------------------------------------------------------------

TEST(SimBackend, AllReduceAllOpsAllDtypesAllMeshes) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    for (int k = 0; k < 4; ++k) {
      const ReduceOp op = kOps[k];
      if (op == ReduceOp::Avg && dtype == DType::Int64) continue;
      for (const MeshCase& c : kMeshCases) {
        SCOPED_TRACE(describe(c) + " op " + kOpNames[k] + " dtype " + dtype_name(dtype));
        MeshAndDim s = make_setup(c);
        const LocalTensor in = make_input(c, [&](int rank, int64_t, const std::vector<int>& g) {
          return random_shard({3, group_width(g)}, dtype, rank);
        });
        const LocalTensor out = s.world.backend().all_reduce(in, s.mesh, s.mesh_dim, op);
        EXPECT_EQ(out.ranks(), in.ranks());
        for (int r : in.ranks()) {
          const std::vector<int> g = ref_group(c.shape, r, c.dims);
          expect_same(out.shard(r), ref_reduce_tensor(group_shards(in, g), op),
                      "rank " + std::to_string(r));
        }
      }
    }
  }
}

TEST(SimBackend, AllReduceCombinesInGroupOrder) {
  // ((1e8 + -1e8) + 1) = 1 in float32, but 1e8 + (-1e8 + 1) = 0: the order is visible.
  World w = World::simulated(3);
  DeviceMesh mesh(w, Shape{3});
  LocalTensor in;
  in.set(0, Tensor::from_vector(std::vector<float>{1e8f}));
  in.set(1, Tensor::from_vector(std::vector<float>{-1e8f}));
  in.set(2, Tensor::from_vector(std::vector<float>{1.0f}));
  const LocalTensor out = w.backend().all_reduce(in, mesh, 0, ReduceOp::Sum);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(out.shard(r).item<float>(), 1.0f);
  // Reordering the data (not the mesh) changes the result accordingly.
  in.set(0, Tensor::from_vector(std::vector<float>{1.0f}));
  in.set(2, Tensor::from_vector(std::vector<float>{1e8f}));
  const LocalTensor out2 = w.backend().all_reduce(in, mesh, 0, ReduceOp::Sum);
  EXPECT_EQ(out2.shard(0).item<float>(), 0.0f);
}

TEST(SimBackend, AllReduceIsDeterministicAndEqualAcrossTheGroup) {
  World w = World::simulated(4);
  DeviceMesh mesh(w, Shape{4});
  LocalTensor in;
  // Large, varied magnitudes so that a different summation order would show.
  for (int r = 0; r < 4; ++r) in.set(r, Tensor::randn({10000}, r) * std::pow(10.0, r));
  Backend& b = w.backend();
  const LocalTensor x = b.all_reduce(in, mesh, 0, ReduceOp::Sum);
  const LocalTensor y = b.all_reduce(in, mesh, 0, ReduceOp::Sum);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(std::memcmp(x.shard(r).raw_data(), x.shard(0).raw_data(), x.shard(0).nbytes()), 0);
    EXPECT_EQ(std::memcmp(x.shard(r).raw_data(), y.shard(r).raw_data(), x.shard(0).nbytes()), 0);
  }
  expect_same(x.shard(0), ref_reduce_tensor(group_shards(in, {0, 1, 2, 3}), ReduceOp::Sum), "sum");
}

TEST(SimBackend, AllReduceEdgeShapesAndNaN) {
  World w = World::simulated(2);
  DeviceMesh mesh(w, Shape{2});
  Backend& b = w.backend();
  // 0-d shards.
  LocalTensor scalars;
  scalars.set(0, Tensor::scalar(2.5));
  scalars.set(1, Tensor::scalar(4.0));
  const LocalTensor avg = b.all_reduce(scalars, mesh, 0, ReduceOp::Avg);
  EXPECT_EQ(avg.shard(1).dim(), 0);
  EXPECT_EQ(avg.shard(1).item<double>(), 3.25);
  // Empty shards.
  LocalTensor empty;
  empty.set(0, Tensor::zeros({0, 3}));
  empty.set(1, Tensor::zeros({0, 3}));
  EXPECT_EQ(b.all_reduce(empty, mesh, 0, ReduceOp::Max).shard(0).shape(), (Shape{0, 3}));
  // NaN propagates through max and min, like torch.maximum.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  LocalTensor with_nan;
  with_nan.set(0, Tensor::from_vector(std::vector<float>{1.0f, nan}));
  with_nan.set(1, Tensor::from_vector(std::vector<float>{nan, 2.0f}));
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    const std::vector<float> v = b.all_reduce(with_nan, mesh, 0, op).shard(0).to_vector<float>();
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
  }
  // Bool: sum is logical or, min logical and.
  LocalTensor bools;
  bools.set(0, Tensor::from_vector(std::vector<bool>{true, false, false}));
  bools.set(1, Tensor::from_vector(std::vector<bool>{true, true, false}));
  EXPECT_EQ(b.all_reduce(bools, mesh, 0, ReduceOp::Sum).shard(1).to_vector<bool>(),
            (std::vector<bool>{true, true, false}));
  EXPECT_EQ(b.all_reduce(bools, mesh, 0, ReduceOp::Min).shard(1).to_vector<bool>(),
            (std::vector<bool>{true, false, false}));
  // A larger than one-block tensor with a non-contiguous input.
  LocalTensor big;
  big.set(0, Tensor::randn({97, 131}, 7).t());
  big.set(1, Tensor::randn({97, 131}, 8).t());
  expect_same(b.all_reduce(big, mesh, 0, ReduceOp::Sum).shard(0),
              ref_reduce_tensor({big.shard(0), big.shard(1)}, ReduceOp::Sum), "big");
}

// ---- reduce_scatter ---------------------------------------------------------------------

TEST(SimBackend, ReduceScatterUnevenEmptyAllOps) {
  for (DType dtype : {DType::Float32, DType::Int64}) {
    for (int k = 0; k < 4; ++k) {
      const ReduceOp op = kOps[k];
      if (op == ReduceOp::Avg && dtype == DType::Int64) continue;
      for (int64_t scatter_dim : {0, 1, 2}) {
        for (const MeshCase& c : kMeshCases) {
          // The scattered length as a function of the group size: even, uneven,
          // fewer rows than ranks, none.
          for (int variant = 0; variant < 4; ++variant) {
            SCOPED_TRACE(describe(c) + " op " + kOpNames[k] + " dim " +
                         std::to_string(scatter_dim) + " variant " + std::to_string(variant));
            MeshAndDim s = make_setup(c);
            auto length = [&](int64_t n) {
              switch (variant) {
                case 0: return 2 * n;
                case 1: return 2 * n + 1;
                case 2: return n / 2;
                default: return int64_t{0};
              }
            };
            const LocalTensor in = make_input(c, [&](int rank, int64_t, const std::vector<int>& g) {
              Shape shape{group_width(g), 2};
              shape.insert(static_cast<size_t>(scatter_dim),
                           length(static_cast<int64_t>(g.size())));
              return random_shard(shape, dtype, rank);
            });
            const LocalTensor out =
                s.world.backend().reduce_scatter(in, s.mesh, s.mesh_dim, op, scatter_dim);
            for (int r : in.ranks()) {
              const std::vector<int> g = ref_group(c.shape, r, c.dims);
              const int64_t n = static_cast<int64_t>(g.size()), i = index_in(g, r);
              const Tensor full = ref_reduce_tensor(group_shards(in, g), op);
              const int64_t L = full.size(scatter_dim);
              const Tensor want =
                  full.narrow(scatter_dim, chunk_start(L, n, i), chunk_sizes(L, n)[i]).contiguous();
              expect_same(out.shard(r), want, "rank " + std::to_string(r));
              EXPECT_TRUE(out.shard(r).is_contiguous());
            }
          }
        }
      }
    }
  }
}

TEST(SimBackend, ReduceScatterExplicitSevenRowsOverThree) {
  World w = World::simulated(3);
  DeviceMesh mesh(w, Shape{3});
  LocalTensor in;
  // Rank r holds 7 rows, row k = [k + 100 r].
  for (int r = 0; r < 3; ++r) in.set(r, Tensor::arange(7).view({7, 1}) + 100 * r);
  const LocalTensor out = w.backend().reduce_scatter(in, mesh, 0, ReduceOp::Sum, 0);
  // Sum row k = 3k + 300; chunks 3,3,1.
  EXPECT_EQ(out.shard(0).to_vector<int64_t>(), (std::vector<int64_t>{300, 303, 306}));
  EXPECT_EQ(out.shard(1).to_vector<int64_t>(), (std::vector<int64_t>{309, 312, 315}));
  EXPECT_EQ(out.shard(2).to_vector<int64_t>(), (std::vector<int64_t>{318}));
}

// ---- all_to_all -------------------------------------------------------------------------

TEST(SimBackend, AllToAllUnevenBothWays) {
  for (DType dtype : {DType::Float32, DType::Int64}) {
    for (const MeshCase& c : kMeshCases) {
      for (const auto& [split_dim, concat_dim] :
           {std::pair<int64_t, int64_t>{1, 0}, {0, 1}, {2, 0}, {0, 2}}) {
        for (int variant : {0, 1}) {
          SCOPED_TRACE(describe(c) + " split " + std::to_string(split_dim) + " concat " +
                       std::to_string(concat_dim) + " variant " + std::to_string(variant));
          MeshAndDim s = make_setup(c);
          // Uneven along the concat dim (by group index) and uneven to split
          // (7 along the split dim), other dims differ between groups.
          const LocalTensor in = make_input(c, [&](int rank, int64_t i, const std::vector<int>& g) {
            Shape shape{group_width(g), group_width(g), group_width(g)};
            const int64_t n = static_cast<int64_t>(g.size());
            // Concat-dim lengths: uneven (2n-1 chunked), or fewer rows than ranks.
            shape[concat_dim] = chunk_sizes(variant == 0 ? 2 * n - 1 : n / 2, n)[i];
            shape[split_dim] = 7;
            return random_shard(shape, dtype, rank);
          });
          const LocalTensor out =
              s.world.backend().all_to_all(in, s.mesh, s.mesh_dim, split_dim, concat_dim);
          for (int r : in.ranks()) {
            const std::vector<int> g = ref_group(c.shape, r, c.dims);
            const int64_t n = static_cast<int64_t>(g.size()), i = index_in(g, r);
            const int64_t start = chunk_start(7, n, i), size = chunk_sizes(7, n)[i];
            Shape shape = in.shard(r).shape();
            shape[split_dim] = size;
            int64_t total = 0;
            for (int m : g) total += in.shard(m).size(concat_dim);
            shape[concat_dim] = total;
            Tensor want = Tensor::zeros(shape, dtype);
            int64_t at = 0;
            for (int m : g) {
              const int64_t len = in.shard(m).size(concat_dim);
              want.narrow(concat_dim, at, len).copy_(in.shard(m).narrow(split_dim, start, size));
              at += len;
            }
            expect_same(out.shard(r), want, "rank " + std::to_string(r));
          }
        }
      }
    }
  }
}

// ---- broadcast and scatter ----------------------------------------------------------------

TEST(SimBackend, BroadcastFromEveryRoot) {
  for (const MeshCase& c : kMeshCases) {
    MeshAndDim s = make_setup(c);
    const int64_t n = s.mesh.size(s.mesh_dim);
    for (int64_t root = 0; root < n; ++root) {
      SCOPED_TRACE(describe(c) + " root " + std::to_string(root));
      LocalTensor in = make_input(c, [&](int rank, int64_t, const std::vector<int>& g) {
        return random_shard({group_width(g), 2}, DType::Float32, rank);
      });
      // Non-root shards are not read: drop one and leave another undefined.
      for (int r : in.ranks()) {
        const std::vector<int> g = ref_group(c.shape, r, c.dims);
        if (index_in(g, r) != root && r % 2 == 0) in.set(r, Tensor());
      }
      const LocalTensor out = s.world.backend().broadcast(in, s.mesh, s.mesh_dim, root);
      EXPECT_EQ(out.size(), static_cast<size_t>(prod(c.shape)));
      for (int r = 0; r < prod(c.shape); ++r) {
        const std::vector<int> g = ref_group(c.shape, r, c.dims);
        expect_same(out.shard(r), in.shard(g[root]), "rank " + std::to_string(r));
      }
    }
  }
}

TEST(SimBackend, ScatterChunksTheRootsShard) {
  for (const MeshCase& c : kMeshCases) {
    MeshAndDim s = make_setup(c);
    const int64_t n = s.mesh.size(s.mesh_dim);
    for (int64_t scatter_dim : {0, 1}) {
      for (int64_t root : {int64_t{0}, n - 1}) {
        SCOPED_TRACE(describe(c) + " root " + std::to_string(root));
        const LocalTensor full = make_input(c, [&](int rank, int64_t, const std::vector<int>& g) {
          Shape shape{group_width(g), 3};
          shape[scatter_dim] = 2 * static_cast<int64_t>(g.size()) + 1;
          return random_shard(shape, DType::Int64, rank);
        });
        LocalTensor in;  // only the roots hold data
        for (int r : full.ranks()) {
          const std::vector<int> g = ref_group(c.shape, r, c.dims);
          if (index_in(g, r) == root) in.set(r, full.shard(r));
        }
        const LocalTensor out =
            s.world.backend().scatter(in, s.mesh, s.mesh_dim, root, scatter_dim);
        for (int r : full.ranks()) {
          const std::vector<int> g = ref_group(c.shape, r, c.dims);
          const Tensor& src = full.shard(g[root]);
          const int64_t L = src.size(scatter_dim), i = index_in(g, r);
          expect_same(
              out.shard(r),
              src.narrow(scatter_dim, chunk_start(L, n, i), chunk_sizes(L, n)[i]).contiguous(),
              "rank " + std::to_string(r));
        }
      }
    }
  }
}

// ---- no aliasing ------------------------------------------------------------------------

TEST(SimBackend, OutputsShareNoMemoryWithInputsOrEachOther) {
  World w = World::simulated(4);
  DeviceMesh mesh(w, Shape{2, 2});
  DeviceMesh singles(w, Shape{4, 1});  // mesh dim 1: groups of one rank
  LocalTensor in;
  for (int r = 0; r < 4; ++r) in.set(r, Tensor::randn({4, 4}, r));
  std::vector<Tensor> saved;
  for (int r = 0; r < 4; ++r) saved.push_back(in.shard(r).clone());
  Backend& b = w.backend();
  const std::vector<std::pair<std::string, std::function<LocalTensor()>>> calls = {
      {"all_gather", [&] { return b.all_gather(in, mesh, 1, 0); }},
      {"all_reduce", [&] { return b.all_reduce(in, mesh, 0, ReduceOp::Sum); }},
      {"all_reduce flattened",
       [&] {
         return b.all_reduce(in, mesh.flatten(std::vector<int>{0, 1}), 0, ReduceOp::Max);
       }},
      {"all_reduce n=1", [&] { return b.all_reduce(in, singles, 1, ReduceOp::Sum); }},
      {"all_gather n=1", [&] { return b.all_gather(in, singles, 1, 1); }},
      {"broadcast n=1", [&] { return b.broadcast(in, singles, 1, 0); }},
      {"reduce_scatter", [&] { return b.reduce_scatter(in, mesh, 1, ReduceOp::Avg, 1); }},
      {"all_to_all", [&] { return b.all_to_all(in, mesh, 0, 0, 1); }},
      {"broadcast", [&] { return b.broadcast(in, mesh, 1, 0); }},
      {"scatter", [&] { return b.scatter(in, mesh, 0, 1, 0); }},
  };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    LocalTensor out = call();
    std::vector<Tensor> before;
    for (int r = 0; r < 4; ++r) before.push_back(out.shard(r).clone());
    for (int r = 0; r < 4; ++r) {
      for (int q = 0; q < 4; ++q) {
        EXPECT_NE(out.shard(r).storage(), in.shard(q).storage());
        if (q != r) {
          EXPECT_NE(out.shard(r).storage(), out.shard(q).storage());
        }
      }
    }
    out.shard(0).add_(1000);
    for (int r = 1; r < 4; ++r) EXPECT_TRUE(equal(out.shard(r), before[r])) << "rank " << r;
    for (int r = 0; r < 4; ++r) EXPECT_TRUE(equal(in.shard(r), saved[r])) << "input of rank " << r;
  }
}

// ---- against chunk + cat on random layouts -------------------------------------------
//
// all_to_all, all_gather and scatter copy runs of bytes straight from the
// shards (sim_backend.cc); here they are checked bit for bit against the
// definitions in backend.h written with Tensor::chunk and cat, on random
// meshes of 1-4 dims (up to 64 ranks, collectives over one root dim or a
// flattened set), random dtypes and shapes with uneven and empty pieces,
// and non-contiguous input shards.

namespace {

// Same dtype, shape and bytes; the output contiguous. Bytes rather than
// values: a move must not even turn -0.0 into 0.0.
void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(got.is_contiguous()) << what;
  const Tensor w = want.contiguous();
  EXPECT_EQ(std::memcmp(got.raw_data(), w.raw_data(), got.nbytes()), 0)
      << what << "\n got " << got << "\nwant " << want;
}

// Every output has storage of its own: none of the inputs', none shared.
void expect_no_sharing(const LocalTensor& out, const LocalTensor& in) {
  std::vector<const Storage*> seen;
  in.for_each([&](int, const Tensor& t) { seen.push_back(t.storage().get()); });
  std::sort(seen.begin(), seen.end());
  std::vector<const Storage*> outs;
  out.for_each([&](int, const Tensor& t) { outs.push_back(t.storage().get()); });
  std::sort(outs.begin(), outs.end());
  EXPECT_EQ(std::adjacent_find(outs.begin(), outs.end()), outs.end()) << "two outputs share storage";
  for (const Storage* s : outs)
    EXPECT_FALSE(std::binary_search(seen.begin(), seen.end(), s)) << "an output uses an input's storage";
}

struct RandomCase {
  MeshCase mesh;
  int extra_ranks = 0;  // world ranks outside the mesh, whose shards are ignored
  DType dtype = DType::Float32;
};

RandomCase random_case(std::mt19937_64& rng) {
  RandomCase c;
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  do {
    c.mesh.shape.assign(static_cast<size_t>(pick(1, 4)), 0);
    for (int64_t& s : c.mesh.shape) s = pick(1, 4);
  } while (prod(c.mesh.shape) > 64);
  const int nd = static_cast<int>(c.mesh.shape.size());
  c.mesh.dims.clear();
  for (int d = 0; d < nd; ++d)
    if (pick(0, 1) == 1) c.mesh.dims.push_back(d);
  if (c.mesh.dims.empty()) c.mesh.dims.push_back(pick(0, nd - 1));
  c.extra_ranks = pick(0, 3) == 0 ? pick(1, 3) : 0;
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Int64, DType::Bool};
  c.dtype = dtypes[pick(0, 3)];
  return c;
}

// A shard of `shape` and `dtype`, drawn from `seed`, laid out in one of
// three ways: contiguous, as a permuted view (dims reversed in memory), or
// as every other element of a larger tensor along one dim.
Tensor random_layout_shard(const Shape& shape, DType dtype, uint64_t seed, int layout) {
  auto make = [&](const Shape& s) {
    if (dtype == DType::Bool) return Tensor::randint(0, 2, s, seed).to(DType::Bool);
    if (dtype == DType::Int64) return Tensor::randint(-1000, 1000, s, seed);
    return Tensor::randn(s, seed, 0, dtype);
  };
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (layout == 1 && nd >= 2) {
    Shape reversed;
    for (int64_t d = nd - 1; d >= 0; --d) reversed.push_back(shape[d]);
    DimVector order;
    for (int64_t d = nd - 1; d >= 0; --d) order.push_back(d);
    return make(reversed).permute(order);
  }
  if (layout == 2 && nd >= 1) {
    const int64_t d = static_cast<int64_t>(seed % static_cast<uint64_t>(nd));
    Shape wide = shape;
    wide[d] = 2 * shape[d] + 1;
    return make(wide).slice(d, 1, 2 * shape[d] + 1, 2);
  }
  return make(shape);
}

// Reference all_to_all for member i of a group's shards (backend.h's words).
Tensor ref_all_to_all(const std::vector<Tensor>& shards, int64_t i, int64_t split_dim,
                      int64_t concat_dim) {
  std::vector<Tensor> received;
  for (const Tensor& s : shards)
    received.push_back(s.chunk(static_cast<int64_t>(shards.size()), split_dim)[i]);
  return cat(received, concat_dim);
}

}  // namespace

TEST(SimBackend, AllToAllMatchesChunkAndCatOnRandomLayouts) {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 150; ++trial) {
    const RandomCase c = random_case(rng);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t nd = pick(2, 4);
    const int64_t split_dim = pick(0, nd - 1);
    int64_t concat_dim = pick(0, nd - 2);
    if (concat_dim >= split_dim) ++concat_dim;
    const int layout = static_cast<int>(pick(0, 2));
    const int64_t n = [&] {
      int64_t k = 1;
      for (int d : c.mesh.dims) k *= c.mesh.shape[d];
      return k;
    }();
    // Per group (by its first rank): the common dims and the split length,
    // which runs from empty to more than 2n so chunks are even, uneven,
    // short and empty; per member: its concat length, often 0.
    std::vector<Shape> group_shape(prod(c.mesh.shape) + c.extra_ranks);
    for (auto& s : group_shape) {
      s = Shape(static_cast<size_t>(nd), 0);
      for (int64_t d = 0; d < nd; ++d) s[d] = pick(1, 3);
      s[split_dim] = pick(0, 2 * n + 3);
    }
    SCOPED_TRACE(describe(c.mesh) + " dtype " + dtype_name(c.dtype) + " split " +
                 std::to_string(split_dim) + " concat " + std::to_string(concat_dim) +
                 " layout " + std::to_string(layout) + " trial " + std::to_string(trial));
    MeshAndDim s = make_setup(c.mesh, c.extra_ranks);
    LocalTensor in = make_input(c.mesh, [&](int rank, int64_t, const std::vector<int>& g) {
      Shape shape = group_shape[g[0]];
      shape[concat_dim] = pick(0, 3);
      return random_layout_shard(shape, c.dtype, static_cast<uint64_t>(rank) * 7 + trial, layout);
    });
    for (int r = 0; r < c.extra_ranks; ++r)  // ignored: even a mismatched shape is not read
      in.set(static_cast<int>(prod(c.mesh.shape)) + r, Tensor::zeros({5}, c.dtype));
    const LocalTensor out =
        s.world.backend().all_to_all(in, s.mesh, s.mesh_dim, split_dim, concat_dim);
    ASSERT_EQ(out.size(), static_cast<size_t>(prod(c.mesh.shape)));
    for (int r = 0; r < prod(c.mesh.shape); ++r) {
      const std::vector<int> g = ref_group(c.mesh.shape, r, c.mesh.dims);
      expect_bitwise(out.shard(r),
                     ref_all_to_all(group_shards(in, g), index_in(g, r), split_dim, concat_dim),
                     "rank " + std::to_string(r));
    }
    expect_no_sharing(out, in);
  }
}

TEST(SimBackend, AllGatherMatchesCatOnRandomLayouts) {
  std::mt19937_64 rng(1818);
  for (int trial = 0; trial < 150; ++trial) {
    const RandomCase c = random_case(rng);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t nd = pick(1, 4);
    const int64_t gather_dim = pick(0, nd - 1);
    const int layout = static_cast<int>(pick(0, 2));
    const bool chunked = pick(0, 1) == 1;  // lengths of a chunked dim, or arbitrary
    std::vector<Shape> group_shape(prod(c.mesh.shape));
    std::vector<int64_t> group_len(prod(c.mesh.shape));
    for (size_t k = 0; k < group_shape.size(); ++k) {
      group_shape[k] = Shape(static_cast<size_t>(nd), 0);
      for (int64_t d = 0; d < nd; ++d) group_shape[k][d] = pick(0, 3) == 0 ? 1 : pick(1, 4);
      group_len[k] = pick(0, 9);
    }
    SCOPED_TRACE(describe(c.mesh) + " dtype " + dtype_name(c.dtype) + " gather " +
                 std::to_string(gather_dim) + " layout " + std::to_string(layout) + " trial " +
                 std::to_string(trial));
    MeshAndDim s = make_setup(c.mesh, c.extra_ranks);
    const LocalTensor in = make_input(c.mesh, [&](int rank, int64_t i, const std::vector<int>& g) {
      Shape shape = group_shape[g[0]];
      const int64_t n = static_cast<int64_t>(g.size());
      shape[gather_dim] = chunked ? chunk_sizes(group_len[g[0]], n)[i] : pick(0, 3);
      return random_layout_shard(shape, c.dtype, static_cast<uint64_t>(rank) * 5 + trial, layout);
    });
    const LocalTensor out = s.world.backend().all_gather(in, s.mesh, s.mesh_dim, gather_dim);
    ASSERT_EQ(out.ranks(), in.ranks());
    for (int r : in.ranks()) {
      const std::vector<int> g = ref_group(c.mesh.shape, r, c.mesh.dims);
      expect_bitwise(out.shard(r), cat(group_shards(in, g), gather_dim),
                     "rank " + std::to_string(r));
    }
    expect_no_sharing(out, in);
  }
}

TEST(SimBackend, ScatterMatchesChunkOnRandomLayouts) {
  std::mt19937_64 rng(181818);
  for (int trial = 0; trial < 150; ++trial) {
    const RandomCase c = random_case(rng);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t nd = pick(1, 4);
    const int64_t scatter_dim = pick(0, nd - 1);
    const int layout = static_cast<int>(pick(0, 2));
    MeshAndDim s = make_setup(c.mesh, c.extra_ranks);
    const int64_t n = s.mesh.size(s.mesh_dim);
    const int64_t root = pick(0, n - 1);
    SCOPED_TRACE(describe(c.mesh) + " dtype " + dtype_name(c.dtype) + " scatter " +
                 std::to_string(scatter_dim) + " root " + std::to_string(root) + " layout " +
                 std::to_string(layout) + " trial " + std::to_string(trial));
    LocalTensor in;  // only the roots hold data
    for (int r = 0; r < prod(c.mesh.shape); ++r) {
      const std::vector<int> g = ref_group(c.mesh.shape, r, c.mesh.dims);
      if (index_in(g, r) != root) continue;
      Shape shape(static_cast<size_t>(nd), 0);
      for (int64_t d = 0; d < nd; ++d) shape[d] = pick(1, 3);
      shape[scatter_dim] = pick(0, 2 * n + 3);
      in.set(r, random_layout_shard(shape, c.dtype, static_cast<uint64_t>(r) * 3 + trial, layout));
    }
    const LocalTensor out = s.world.backend().scatter(in, s.mesh, s.mesh_dim, root, scatter_dim);
    ASSERT_EQ(out.size(), static_cast<size_t>(prod(c.mesh.shape)));
    for (int r = 0; r < prod(c.mesh.shape); ++r) {
      const std::vector<int> g = ref_group(c.mesh.shape, r, c.mesh.dims);
      const Tensor& src = in.shard(g[root]);
      expect_bitwise(out.shard(r), src.chunk(n, scatter_dim)[index_in(g, r)],
                     "rank " + std::to_string(r));
    }
    expect_no_sharing(out, in);
  }
}

// Large enough (4 MiB a shard, 8-34 MiB a call) that the collectives run on the thread pool
// (the copying ones from kParallelCopyBytes, sim_backend.h): one thread and four must give the
// same bits.
TEST(SimBackend, ThreadCountChangesNoBit) {
  World w = World::simulated(8);
  DeviceMesh mesh(w, Shape{2, 4});
  LocalTensor in;
  for (int r = 0; r < 8; ++r) in.set(r, Tensor::randn({1024, 1031}, r));
  Backend& b = w.backend();
  auto run_all = [&] {
    std::vector<LocalTensor> outs;
    for (int d : {0, 1}) {
      outs.push_back(b.all_gather(in, mesh, d, 1));
      outs.push_back(b.all_to_all(in, mesh, d, 1, 0));
      outs.push_back(b.all_to_all(in, mesh, d, 0, 1));
      outs.push_back(b.scatter(in, mesh, d, 1, 1));
      outs.push_back(b.broadcast(in, mesh, d, 1));
      outs.push_back(b.all_reduce(in, mesh, d, ReduceOp::Sum));
      outs.push_back(b.reduce_scatter(in, mesh, d, ReduceOp::Avg, 1));
    }
    return outs;
  };
  const int saved = num_threads();
  set_num_threads(1);
  const std::vector<LocalTensor> one = run_all();
  set_num_threads(4);
  const std::vector<LocalTensor> four = run_all();
  set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  for (size_t k = 0; k < one.size(); ++k) {
    ASSERT_EQ(one[k].ranks(), four[k].ranks()) << "call " << k;
    for (int r : one[k].ranks())
      expect_bitwise(four[k].shard(r), one[k].shard(r),
                     "call " + std::to_string(k) + " rank " + std::to_string(r));
  }
}

// The reductions copy their result to the members with streaming stores
// only above tensor/loops.h's threshold; plain stores below it. Both give
// the same bits, for every op, dtype and a block-sized and a ragged count.
TEST(SimBackend, StreamingOrPlainStoresChangeNoBit) {
  World w = World::simulated(4);
  DeviceMesh mesh(w, Shape{4});
  Backend& b = w.backend();
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    LocalTensor in;
    for (int r = 0; r < 4; ++r) in.set(r, (Tensor::randn({37, 1031}, r) * 100).to(dtype));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Avg && dtype == DType::Int64) continue;
      const LocalTensor plain = b.all_reduce(in, mesh, 0, op);
      const int64_t before = detail::stream_bytes.exchange(0);
      const LocalTensor streamed = b.all_reduce(in, mesh, 0, op);
      detail::stream_bytes = before;
      for (int r = 0; r < 4; ++r)
        expect_bitwise(streamed.shard(r), plain.shard(r),
                       std::string(dtype_name(dtype)) + " " + to_string(op) + " rank " + std::to_string(r));
    }
  }
}

// 1024 ranks with tiny shards, most pieces empty: the case that was
// quadratic. A 1-d mesh of 1024 is checked element by element from values
// that encode (rank, row, column); a 32x32 mesh, whose outer-dim groups
// interleave ranks, against chunk + cat.
TEST(SimBackend, CollectivesOnAThousandRanks) {
  constexpr int kN = 1024;
  World w = World::simulated(kN);
  DeviceMesh line(w, Shape{kN});
  Backend& b = w.backend();
  // Rank j holds j % 3 rows (0, 1 or 2) of 6 columns: 1000 j + 10 y + c.
  LocalTensor rows;
  std::vector<int64_t> at(kN + 1, 0);
  for (int j = 0; j < kN; ++j) {
    const int64_t len = j % 3;
    std::vector<int64_t> v;
    for (int64_t y = 0; y < len; ++y)
      for (int64_t c = 0; c < 6; ++c) v.push_back(1000 * j + 10 * y + c);
    rows.set(j, Tensor::from_vector(v, Shape{len, 6}));
    at[j + 1] = at[j] + len;
  }
  const int64_t total = at[kN];
  auto value_at_row = [&](int64_t row, int64_t c) {
    const int j = static_cast<int>(std::upper_bound(at.begin(), at.end(), row) - at.begin()) - 1;
    return 1000 * j + 10 * (row - at[j]) + c;
  };
  {  // S(0) -> S(1): column i of 6 to members 0..5, nothing to the others.
    const LocalTensor out = b.all_to_all(rows, line, 0, /*split_dim=*/1, /*concat_dim=*/0);
    ASSERT_EQ(out.size(), static_cast<size_t>(kN));
    for (int i = 0; i < kN; ++i) {
      const int64_t cols = i < 6 ? 1 : 0;
      ASSERT_EQ(out.shard(i).shape(), (Shape{total, cols})) << "rank " << i;
      if (cols == 0) continue;
      const std::vector<int64_t> v = out.shard(i).to_vector<int64_t>();
      for (int64_t row = 0; row < total; ++row)
        ASSERT_EQ(v[row], value_at_row(row, i)) << "rank " << i << " row " << row;
    }
  }
  {  // all_gather along rows: every rank gets all `total` rows.
    const LocalTensor out = b.all_gather(rows, line, 0, 0);
    const std::vector<int64_t> first = out.shard(0).to_vector<int64_t>();
    ASSERT_EQ(out.shard(0).shape(), (Shape{total, 6}));
    for (int64_t row = 0; row < total; ++row)
      for (int64_t c = 0; c < 6; ++c) ASSERT_EQ(first[row * 6 + c], value_at_row(row, c));
    for (int r = 1; r < kN; ++r) expect_bitwise(out.shard(r), out.shard(0), "rank " + std::to_string(r));
  }
  {  // S(1) -> S(0) of the transposed layout: row i of 7 to members 0..6.
    LocalTensor cols;
    for (int j = 0; j < kN; ++j) cols.set(j, rows.shard(j).t().contiguous());
    LocalTensor seven;  // [7, j % 3]: a seventh row of -j
    for (int j = 0; j < kN; ++j)
      seven.set(j, cat({cols.shard(j), Tensor::full({1, j % 3}, int64_t{-j}, DType::Int64)}, 0));
    const LocalTensor out = b.all_to_all(seven, line, 0, /*split_dim=*/0, /*concat_dim=*/1);
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(out.shard(i).shape(), (Shape{i < 7 ? 1 : 0, total})) << "rank " << i;
      if (i >= 7) continue;
      const std::vector<int64_t> v = out.shard(i).to_vector<int64_t>();
      for (int64_t row = 0; row < total; ++row) {
        const int j = static_cast<int>(std::upper_bound(at.begin(), at.end(), row) - at.begin()) - 1;
        ASSERT_EQ(v[row], i < 6 ? value_at_row(row, i) : -j) << "rank " << i << " column " << row;
      }
    }
  }
  // 32 x 32: both mesh dims, against the reference; shards [2, 3] of rank-dependent values.
  DeviceMesh square(w, Shape{32, 32});
  LocalTensor small;
  for (int r = 0; r < kN; ++r) small.set(r, Tensor::randint(-99, 99, {2, 3}, r));
  for (int d : {0, 1}) {
    SCOPED_TRACE("32x32 over mesh dim " + std::to_string(d));
    const LocalTensor gathered = b.all_gather(small, square, d, 1);
    const LocalTensor swapped = b.all_to_all(small, square, d, 0, 1);
    const LocalTensor scattered = b.scatter(small, square, d, 3, 1);
    for (int r = 0; r < kN; ++r) {
      const std::vector<int> g = ref_group({32, 32}, r, {d});
      const int64_t i = index_in(g, r);
      const std::vector<Tensor> shards = group_shards(small, g);
      expect_bitwise(gathered.shard(r), cat(shards, 1), "all_gather rank " + std::to_string(r));
      expect_bitwise(swapped.shard(r), ref_all_to_all(shards, i, 0, 1),
                     "all_to_all rank " + std::to_string(r));
      expect_bitwise(scattered.shard(r), shards[3].chunk(32, 1)[i],
                     "scatter rank " + std::to_string(r));
    }
  }
}

// ---- bad input ----------------------------------------------------------------------------

TEST(SimBackend, BadInputsThrowNamingTheCollective) {
  World w = World::simulated(4);
  DeviceMesh mesh(w, Shape{4});
  DeviceMesh mesh2(w, Shape{2, 2});
  Backend& b = w.backend();
  auto make = [](std::vector<Shape> shapes, DType dtype = DType::Float32) {
    LocalTensor lt;
    for (size_t r = 0; r < shapes.size(); ++r)
      lt.set(static_cast<int>(r), Tensor::zeros(shapes[r], dtype));
    return lt;
  };
  const LocalTensor ok = make({{2, 3}, {2, 3}, {2, 3}, {2, 3}});

  // Missing and undefined shards.
  LocalTensor missing = make({{2, 3}, {2, 3}});
  missing.set(3, Tensor::zeros({2, 3}));
  expect_error([&] { b.all_gather(missing, mesh, 0, 0); },
               {"all_gather over mesh dim 0", "no input shard for rank 2", "0, 1, 3"});
  LocalTensor undefined = ok;
  undefined.set(1, Tensor());
  expect_error([&] { b.all_reduce(undefined, mesh, 0, ReduceOp::Sum); },
               {"all_reduce over mesh dim 0", "rank 1 is undefined"});
  // Mesh dim out of range.
  expect_error([&] { b.all_gather(ok, mesh, 1, 0); }, {"all_gather", "mesh dim 1 out of range"});
  expect_error([&] { b.reduce_scatter(ok, mesh2, -3, ReduceOp::Sum, 0); },
               {"reduce_scatter", "mesh dim -3"});
  // Dtype mismatch.
  LocalTensor mixed = ok;
  mixed.set(2, Tensor::zeros({2, 3}, DType::Int64));
  expect_error([&] { b.all_gather(mixed, mesh, 0, 0); },
               {"all_gather over mesh dim 0", "dtype int64", "float32"});
  // Rank mismatch (ndim).
  expect_error(
      [&] {
        b.all_to_all(make({{2, 3}, {2, 3}, {6}, {2, 3}}), mesh, 0, 0, 1);
      },
      {"all_to_all over mesh dim 0", "[6]", "[2, 3]"});
  // Shapes differing on a dim that must agree.
  expect_error(
      [&] {
        b.all_gather(make({{2, 3}, {2, 3}, {2, 4}, {2, 3}}), mesh, 0, 0);
      },
      {"all_gather over mesh dim 0", "rank 2", "[2, 4]", "[2, 3]", "gather dim 0"});
  expect_error(
      [&] {
        b.all_reduce(make({{2, 3}, {2, 3}, {2, 3}, {1, 3}}), mesh, 0, ReduceOp::Max);
      },
      {"all_reduce over mesh dim 0", "[1, 3]", "[2, 3]", "same shape"});
  expect_error(
      [&] {
        b.reduce_scatter(make({{2, 3}, {3, 3}, {2, 3}, {2, 3}}), mesh, 0, ReduceOp::Sum, 0);
      },
      {"reduce_scatter over mesh dim 0", "[3, 3]"});
  expect_error(
      [&] {
        b.all_to_all(make({{2, 3}, {2, 3}, {2, 4}, {2, 3}}), mesh, 0, 1, 0);
      },
      {"all_to_all over mesh dim 0", "[2, 4]", "concat dim 0"});
  // Within a group on a 2-d mesh (group [1, 3] of mesh dim 0).
  expect_error(
      [&] {
        b.all_reduce(make({{2, 3}, {2, 3}, {2, 3}, {2, 5}}), mesh2, 0, ReduceOp::Sum);
      },
      {"all_reduce over mesh dim 0", "rank 3", "rank 1", "[2, 5]"});
  // Tensor dims out of range.
  expect_error([&] { b.all_gather(ok, mesh, 0, 2); },
               {"all_gather over mesh dim 0", "gather dim 2", "[2, 3]"});
  expect_error(
      [&] {
        b.all_gather(make({{}, {}, {}, {}}), mesh, 0, 0);
      },
      {"all_gather", "gather dim 0"});
  expect_error([&] { b.reduce_scatter(ok, mesh, 0, ReduceOp::Sum, -3); },
               {"reduce_scatter", "scatter dim -3"});
  expect_error([&] { b.all_to_all(ok, mesh, 0, 5, 0); }, {"all_to_all", "split dim 5"});
  expect_error([&] { b.all_to_all(ok, mesh, 0, 0, 2); }, {"all_to_all", "concat dim 2"});
  expect_error([&] { b.scatter(ok, mesh, 0, 0, 2); }, {"scatter over mesh dim 0", "scatter dim 2"});
  // all_to_all with the same dim twice (also when spelled differently).
  expect_error([&] { b.all_to_all(ok, mesh, 0, 1, 1); }, {"all_to_all", "must differ"});
  expect_error([&] { b.all_to_all(ok, mesh, 0, -1, 1); }, {"all_to_all", "must differ"});
  // avg of integers.
  expect_error(
      [&] {
        b.all_reduce(make({{2}, {2}, {2}, {2}}, DType::Int64), mesh, 0, ReduceOp::Avg);
      },
      {"all_reduce over mesh dim 0", "avg", "int64"});
  expect_error(
      [&] {
        b.reduce_scatter(make({{4}, {4}, {4}, {4}}, DType::Bool), mesh, 0, ReduceOp::Avg, 0);
      },
      {"reduce_scatter", "avg", "bool"});
  // Roots.
  expect_error([&] { b.broadcast(ok, mesh, 0, 4); },
               {"broadcast over mesh dim 0", "root 4", "4 ranks"});
  expect_error([&] { b.broadcast(ok, mesh2, 1, -1); }, {"broadcast over mesh dim 1", "root -1"});
  expect_error([&] { b.scatter(ok, mesh2, 0, 2, 0); }, {"scatter over mesh dim 0", "root 2"});
  LocalTensor no_root = ok;
  no_root.set(0, Tensor());
  expect_error([&] { b.scatter(no_root, mesh, 0, 0, 0); }, {"scatter", "rank 0 is undefined"});
}

// ---- CommDebugMode ------------------------------------------------------------------------

TEST(CommDebugMode, KindNames) {
  EXPECT_STREQ(to_string(CollectiveKind::AllGather), "all_gather");
  EXPECT_STREQ(to_string(CollectiveKind::AllReduce), "all_reduce");
  EXPECT_STREQ(to_string(CollectiveKind::ReduceScatter), "reduce_scatter");
  EXPECT_STREQ(to_string(CollectiveKind::AllToAll), "all_to_all");
  EXPECT_STREQ(to_string(CollectiveKind::Broadcast), "broadcast");
  EXPECT_STREQ(to_string(CollectiveKind::Scatter), "scatter");
}

TEST(CommDebugMode, CountsEachCallOnceWithMaxShardBytes) {
  World w = World::simulated(4);
  DeviceMesh mesh(w, Shape{4});
  DeviceMesh mesh2(w, Shape{2, 2});
  Backend& b = w.backend();
  LocalTensor even, uneven;
  for (int r = 0; r < 4; ++r) even.set(r, Tensor::zeros({3, 4}));  // 48 bytes
  const std::vector<int64_t> rows = {3, 3, 1, 0};
  for (int r = 0; r < 4; ++r) uneven.set(r, Tensor::zeros({rows[r], 2}, DType::Float64));  // max 48

  CommDebugMode mode;
  EXPECT_EQ(mode.total_count(), 0);
  b.all_gather(even, mesh, 0, 0);
  b.all_gather(uneven, mesh, 0, 0);
  b.all_reduce(even, mesh2, 1, ReduceOp::Sum);  // two groups, still one call
  b.reduce_scatter(even, mesh, 0, ReduceOp::Sum, 1);
  b.all_to_all(even, mesh2, 0, 1, 0);
  LocalTensor root_only;
  root_only.set(0, Tensor::zeros({8}, DType::Int64));  // 64 bytes
  root_only.set(2, Tensor::zeros({8}, DType::Int64));
  b.broadcast(root_only, mesh2, 1, 0);
  b.scatter(root_only, mesh2, 1, 0, 0);
  b.scatter(root_only, mesh2, 1, 0, 0);

  EXPECT_EQ(mode.count(CollectiveKind::AllGather), 2);
  EXPECT_EQ(mode.bytes(CollectiveKind::AllGather), 96);
  EXPECT_EQ(mode.count(CollectiveKind::AllReduce), 1);
  EXPECT_EQ(mode.bytes(CollectiveKind::AllReduce), 48);
  EXPECT_EQ(mode.count(CollectiveKind::ReduceScatter), 1);
  EXPECT_EQ(mode.bytes(CollectiveKind::ReduceScatter), 48);
  EXPECT_EQ(mode.count(CollectiveKind::AllToAll), 1);
  EXPECT_EQ(mode.count(CollectiveKind::Broadcast), 1);
  EXPECT_EQ(mode.bytes(CollectiveKind::Broadcast), 64);
  EXPECT_EQ(mode.count(CollectiveKind::Scatter), 2);
  EXPECT_EQ(mode.bytes(CollectiveKind::Scatter), 128);
  EXPECT_EQ(mode.total_count(), 8);
  // Each call's record, in order: kind, mesh dim, bytes, dtype.
  using R = CollectiveRecord;
  const std::vector<R> want = {
      {CollectiveKind::AllGather, 0, 48, DType::Float32},
      {CollectiveKind::AllGather, 0, 48, DType::Float64},
      {CollectiveKind::AllReduce, 1, 48, DType::Float32},
      {CollectiveKind::ReduceScatter, 0, 48, DType::Float32},
      {CollectiveKind::AllToAll, 0, 48, DType::Float32},
      {CollectiveKind::Broadcast, 1, 64, DType::Int64},
      {CollectiveKind::Scatter, 1, 64, DType::Int64},
      {CollectiveKind::Scatter, 1, 64, DType::Int64}};
  const std::vector<R> got = mode.collectives();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << i << ": " << to_string(got[i]) << ", want " << to_string(want[i]);
  EXPECT_EQ(mode.count(CollectiveKind::AllGather, DType::Float64), 1);
  EXPECT_EQ(mode.bytes(CollectiveKind::AllGather, DType::Float32), 48);
  EXPECT_EQ(mode.count(CollectiveKind::AllGather, DType::BFloat16), 0);

  // A call rejected by validation records nothing.
  EXPECT_THROW(b.all_gather(even, mesh, 0, 5), Error);
  EXPECT_THROW(b.all_reduce(LocalTensor(), mesh, 0, ReduceOp::Sum), Error);
  EXPECT_EQ(mode.total_count(), 8);
}

TEST(CommDebugMode, NestedModesCountTheirOwnLifetimes) {
  World w = World::simulated(2);
  DeviceMesh mesh(w, Shape{2});
  LocalTensor in;
  for (int r = 0; r < 2; ++r) in.set(r, Tensor::zeros({2}));
  Backend& b = w.backend();
  b.all_reduce(in, mesh, 0, ReduceOp::Sum);  // no mode alive: not counted anywhere
  CommDebugMode outer;
  b.all_reduce(in, mesh, 0, ReduceOp::Sum);
  {
    CommDebugMode inner;
    b.all_gather(in, mesh, 0, 0);
    {
      CommDebugMode innermost;
      b.all_gather(in, mesh, 0, 0);
      EXPECT_EQ(innermost.total_count(), 1);
    }
    b.broadcast(in, mesh, 0, 1);
    EXPECT_EQ(inner.count(CollectiveKind::AllGather), 2);
    EXPECT_EQ(inner.count(CollectiveKind::AllReduce), 0);
    EXPECT_EQ(inner.count(CollectiveKind::Broadcast), 1);
    EXPECT_EQ(inner.total_count(), 3);
  }
  b.all_reduce(in, mesh, 0, ReduceOp::Sum);
  EXPECT_EQ(outer.count(CollectiveKind::AllReduce), 2);
  EXPECT_EQ(outer.count(CollectiveKind::AllGather), 2);
  EXPECT_EQ(outer.total_count(), 5);
  CommDebugMode fresh;
  EXPECT_EQ(fresh.total_count(), 0);
}

TEST(CommDebugMode, TableAndJson) {
  CommDebugMode mode;
  record_collective(CollectiveKind::AllGather, 1234567, DType::Float32, 0);
  record_collective(CollectiveKind::AllReduce, 10, DType::Float32, 1);
  record_collective(CollectiveKind::AllReduce, 20, DType::BFloat16, 0);
  record_collective(CollectiveKind::AllReduce, 6, DType::Float32, 0);
  EXPECT_EQ(mode.json(),
            "{\"all_gather\":1,\"all_reduce\":3,\"reduce_scatter\":0,\"all_to_all\":0,"
            "\"broadcast\":0,\"scatter\":0,\"box_exchange\":0,\"total\":4}");
  const std::string table = mode.table();
  std::istringstream lines(table);
  std::string line;
  std::vector<std::string> all;
  while (std::getline(lines, line)) all.push_back(line);
  // Header, a line per kind and dtype that ran (all_reduce: bfloat16 and
  // float32, in DType order), one per kind that did not, total.
  ASSERT_EQ(all.size(), 10u) << table;
  for (const std::string& l : all) EXPECT_EQ(l.size(), all[0].size()) << "misaligned:\n" << table;
  auto fields = [](const std::string& l) {
    std::istringstream is(l);
    std::vector<std::string> f;
    for (std::string w; is >> w;) f.push_back(w);
    return f;
  };
  using F = std::vector<std::string>;
  EXPECT_EQ(fields(all[0]), (F{"collective", "dtype", "count", "bytes"}));
  EXPECT_EQ(fields(all[1]), (F{"all_gather", "float32", "1", "1234567"}));
  EXPECT_EQ(fields(all[2]), (F{"all_reduce", "float32", "2", "16"}));
  EXPECT_EQ(fields(all[3]), (F{"all_reduce", "bfloat16", "1", "20"}));
  EXPECT_EQ(fields(all[4]), (F{"reduce_scatter", "-", "0", "0"}));
  EXPECT_EQ(fields(all[7]), (F{"scatter", "-", "0", "0"}));
  EXPECT_EQ(fields(all[8]), (F{"box_exchange", "-", "0", "0"}));
  EXPECT_EQ(fields(all[9]), (F{"total", "4", "1234603"}));
  EXPECT_EQ(to_string(mode.collectives()[2]), "all_reduce mesh dim 0 bfloat16 20 bytes");
  EXPECT_EQ(to_string(CollectiveRecord{CollectiveKind::BoxExchange, -1, 8, DType::Float16}),
            "box_exchange float16 8 bytes");
}

// A mode counts its own thread's collectives only (as PyTorch's thread-local
// mode): threads recording at once each see exactly their own, and a mode
// on the main thread sees none of theirs, while modes come and go.
TEST(CommDebugMode, CountsOnlyItsOwnThread) {
  CommDebugMode outer;
  std::vector<std::thread> threads;
  std::vector<std::array<int64_t, 3>> seen(4);  // all_to_all, scatter, bytes
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &seen] {
      CommDebugMode mine;
      for (int i = 0; i < 2000; ++i) {
        record_collective(t % 2 ? CollectiveKind::AllToAll : CollectiveKind::Scatter, 3,
                          DType::Float32, 0);
        if (i % 500 == 0) CommDebugMode transient;  // modes come and go meanwhile
      }
      seen[t] = {mine.count(CollectiveKind::AllToAll), mine.count(CollectiveKind::Scatter),
                 mine.bytes(t % 2 ? CollectiveKind::AllToAll : CollectiveKind::Scatter)};
    });
  }
  record_collective(CollectiveKind::Broadcast, 5, DType::Float32, 0);
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(seen[t][0], t % 2 ? 2000 : 0) << "thread " << t;
    EXPECT_EQ(seen[t][1], t % 2 ? 0 : 2000) << "thread " << t;
    EXPECT_EQ(seen[t][2], 6000) << "thread " << t;
  }
  EXPECT_EQ(outer.total_count(), 1);
  EXPECT_EQ(outer.count(CollectiveKind::Broadcast), 1);
  EXPECT_EQ(outer.bytes(CollectiveKind::Broadcast), 5);
}
