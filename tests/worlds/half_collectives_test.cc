// Collectives of bfloat16 and float16 bit for bit, in both worlds: each
// rank checks its own result against an oracle computed here, so passing
// on the simulated world and under mpirun -np 4 proves the two give the
// same bits.
//
// The rule (src/comm/reduce_kernel.h): 16-bit values travel as 16-bit
// words; a reduction widens each element's inputs to float32, folds them in
// group order ((x0 op x1) op x2) ..., divides for avg, and rounds once. The
// oracle below does that on its own; FoldingInFloat32ShowsOnALargeValue
// shows where it differs from a fold in the 16-bit type. Data movement
// (all_gather, all_to_all) keeps every 16-bit pattern, NaN payloads
// included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "comm/backend.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::input_bits;
using dtensor::testing::random_placement_pair;
using dtensor::testing::random_shape_for;
using dtensor::testing::takes_part;

namespace {

class HalfCollectivesTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Rank r's input of case `seed`: every 16-bit pattern may occur (NaN,
// infinities, subnormals, both zeros, magnitudes far apart), so sums
// round, overflow and cancel.
Tensor half_input(DType dtype, uint64_t seed, int r, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* w = static_cast<uint16_t*>(t.raw_data());
  for (int64_t e = 0; e < t.numel(); ++e)
    w[e] = static_cast<uint16_t>(input_bits(seed, r, e));
  return t;
}

float widen(DType dtype, uint16_t bits) {
  return dtype == DType::BFloat16 ? static_cast<float>(BFloat16::from_bits(bits))
                                  : static_cast<float>(Float16::from_bits(bits));
}
uint16_t round_to(DType dtype, float x) {
  return dtype == DType::BFloat16 ? BFloat16(x).bits : Float16(x).bits;
}

// The float32 op: NaN-propagating max / min (torch.maximum).
float combine_f32(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Max: return std::isnan(a) || a > b ? a : b;
    case ReduceOp::Min: return std::isnan(a) || a < b ? a : b;
  }
  return a;
}

// The oracle: each element of the inputs widened, folded in group order in
// float32, / n for avg, rounded once. `in_16_bits` instead rounds after
// every step (a fold in the 16-bit type), for contrast.
Tensor fold_half(const std::vector<Tensor>& inputs, ReduceOp op, bool in_16_bits = false) {
  const DType dtype = inputs[0].dtype();
  Tensor out = Tensor::empty(inputs[0].shape(), dtype);
  auto* o = static_cast<uint16_t*>(out.raw_data());
  std::vector<const uint16_t*> in;
  for (const Tensor& t : inputs) in.push_back(static_cast<const uint16_t*>(t.raw_data()));
  for (int64_t e = 0; e < out.numel(); ++e) {
    float acc = widen(dtype, in[0][e]);
    for (size_t k = 1; k < in.size(); ++k) {
      acc = combine_f32(op, acc, widen(dtype, in[k][e]));
      if (in_16_bits) acc = widen(dtype, round_to(dtype, acc));
    }
    if (op == ReduceOp::Avg) acc = acc / static_cast<float>(in.size());
    o[e] = round_to(dtype, acc);
  }
  return out;
}

::testing::AssertionResult same_half_bits(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "got " << got.dtype() << " " << got.shape()
                                         << ", want " << want.dtype() << " " << want.shape();
  const Tensor g = got.contiguous(), w = want.contiguous();
  const auto* gb = static_cast<const uint16_t*>(g.raw_data());
  const auto* wb = static_cast<const uint16_t*>(w.raw_data());
  const auto hex = [](uint16_t b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%04x", static_cast<unsigned>(b));
    return std::string(buf);
  };
  for (int64_t e = 0; e < g.numel(); ++e)
    if (gb[e] != wb[e])
      return ::testing::AssertionFailure()
             << "element " << e << " of " << g.numel() << ": got bits " << hex(gb[e]) << " ("
             << widen(got.dtype(), gb[e]) << "), want " << hex(wb[e]) << " ("
             << widen(got.dtype(), wb[e]) << ")";
  return ::testing::AssertionSuccess();
}

LocalTensor held_half(const DeviceMesh& mesh, const std::function<Tensor(int)>& make) {
  LocalTensor in;
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) in.set(r, make(r));
  return in;
}

// Mesh dims of groups of 4 and 2 ranks, a flattened 2x2, and the whole
// world (64 ranks simulated, 4 processes under mpirun -np 4).
std::vector<std::pair<DeviceMesh, int>> half_mesh_dims(const World& world) {
  std::vector<std::pair<DeviceMesh, int>> out;
  out.emplace_back(DeviceMesh(world, {4}), 0);
  const DeviceMesh m22(world, {2, 2});
  out.emplace_back(m22, 0);
  out.emplace_back(m22, 1);
  out.emplace_back(m22.flatten({0, 1}), 0);
  if (world.size() > 4) out.emplace_back(DeviceMesh(world, {world.size()}), 0);
  return out;
}

// The inputs of one case (rank r's made by make(r)) and the oracle's fold
// of each group, each computed once: the simulated world checks 64 ranks
// of groups of up to 64.
class HalfCase {
 public:
  explicit HalfCase(std::function<Tensor(int)> make) : make_(std::move(make)) {}
  const Tensor& input(int r) {
    auto it = inputs_.find(r);
    if (it == inputs_.end()) it = inputs_.emplace(r, make_(r)).first;
    return it->second;
  }
  const Tensor& fold(const std::vector<int>& group, ReduceOp op) {
    auto it = folds_.find(group);
    if (it == folds_.end()) {
      std::vector<Tensor> ins;
      for (int m : group) ins.push_back(input(m));
      it = folds_.emplace(group, fold_half(ins, op)).first;
    }
    return it->second;
  }
  LocalTensor held(const DeviceMesh& mesh) {
    return held_half(mesh, [&](int r) { return input(r).clone(); });
  }

 private:
  std::function<Tensor(int)> make_;
  std::map<int, Tensor> inputs_;
  std::map<std::vector<int>, Tensor> folds_;
};

bool native_reduce_set() {
  const char* env = std::getenv("DTENSOR_MPI_NATIVE_REDUCE");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

constexpr DType kHalves[] = {DType::BFloat16, DType::Float16};

}  // namespace

// all_reduce (sum, avg, max, min) and reduce_scatter: the float32 fold of
// the widened inputs, rounded once, on every rank; each call recorded once
// in its 16-bit dtype. Shapes: single elements, uneven and empty chunks,
// several 4096-element fold blocks, and shards over 64 KiB (under MPI a
// reduce-scatter of flat pieces, then an all-gather).
TEST_F(HalfCollectivesTest, ReductionsAreTheFloat32FoldRoundedOnce) {
  if (native_reduce_set()) GTEST_SKIP() << "DTENSOR_MPI_NATIVE_REDUCE is set: MPI orders the terms";
  Backend& backend = world.backend();
  const std::vector<Shape> all_reduce_shapes = {{1}, {7, 3}, {0, 4}, {4099}, {70001}};
  const std::vector<std::pair<Shape, int64_t>> scatter_cases = {
      {{5, 3}, 0}, {{3, 9, 2}, 1}, {{2, 3, 10}, 2}, {{0, 5}, 1}, {{3, 20000, 2}, 1}};
  const auto dims = half_mesh_dims(world);
  for (size_t i = 0; i < dims.size(); ++i) {
    const auto& [mesh, md] = dims[i];
    // Seeded by the mesh, not by what ran before: a process that takes no
    // part in a mesh skips it, and must still agree with the others on the
    // inputs of the next.
    uint64_t seed = 1 + 1000 * i;
    if (!takes_part(mesh)) continue;
    for (DType dtype : kHalves) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        const std::string what =
            std::string(dtype_name(dtype)) + " " + to_string(op) + " over " + mesh.to_string() +
            " dim " + std::to_string(md);
        for (const Shape& shape : all_reduce_shapes) {
          ++seed;
          if (shape.product() > 10000 && i != 0) continue;  // the large path on 4 ranks
          HalfCase data([&](int r) { return half_input(dtype, seed, r, shape); });
          CommDebugMode comm;
          const LocalTensor out = backend.all_reduce(data.held(mesh), mesh, md, op);
          EXPECT_EQ(comm.collectives(),
                    (std::vector<CollectiveRecord>{{CollectiveKind::AllReduce, md,
                                                    shape.product() * 2, dtype}}))
              << what;
          for (int r : out.ranks())
            EXPECT_TRUE(same_half_bits(out.shard(r), data.fold(mesh.group(r, md), op)))
                << "all_reduce " << what << " of " << shape << ", rank " << r;
        }
        for (const auto& [shape, dim] : scatter_cases) {
          ++seed;
          if (shape.product() > 10000 && i != 0) continue;
          HalfCase data([&](int r) { return half_input(dtype, seed, r, shape); });
          CommDebugMode comm;
          const LocalTensor out = backend.reduce_scatter(data.held(mesh), mesh, md, op, dim);
          EXPECT_EQ(comm.count(CollectiveKind::ReduceScatter, dtype), 1) << what;
          EXPECT_EQ(comm.total_count(), 1) << what;
          for (int r : out.ranks()) {
            const std::vector<int> group = mesh.group(r, md);
            const Tensor want = data.fold(group, op).chunk(static_cast<int64_t>(group.size()),
                                                           dim)[mesh.group_index(r, md)];
            EXPECT_TRUE(same_half_bits(out.shard(r), want))
                << "reduce_scatter " << what << " of " << shape << " dim " << dim << ", rank "
                << r;
          }
        }
      }
    }
  }
}

// A large value and many small ones: folded in float32 the small ones add
// up (256 + 1 + 1 + 1 = 259, rounded once to the bfloat16 260); folded in
// the 16-bit type each 256 + 1 rounds back to 256. The collectives give
// the float32 fold.
TEST_F(HalfCollectivesTest, FoldingInFloat32ShowsOnALargeValue) {
  if (native_reduce_set()) GTEST_SKIP() << "DTENSOR_MPI_NATIVE_REDUCE is set";
  for (const auto& [mesh, md] : half_mesh_dims(world)) {
    if (!takes_part(mesh)) continue;
    if (mesh.size(md) < 4) continue;  // three small values at least
    for (DType dtype : kHalves) {
      const float large = dtype == DType::BFloat16 ? 256.0f : 2048.0f;  // spacing 2 there
      const auto input = [&](int r) {
        const bool first = mesh.group_index(r, md) == 0;
        return Tensor::full({3}, first ? large : 1.0f).to(dtype);
      };
      const LocalTensor out = world.backend().all_reduce(held_half(mesh, input), mesh, md,
                                                         ReduceOp::Sum);
      for (int r : out.ranks()) {
        std::vector<Tensor> ins;
        for (int m : mesh.group(r, md)) ins.push_back(input(m));
        const Tensor want = fold_half(ins, ReduceOp::Sum);
        const Tensor stepwise = fold_half(ins, ReduceOp::Sum, /*in_16_bits=*/true);
        const auto n = static_cast<float>(mesh.size(md));
        EXPECT_EQ(want.to(DType::Float32).select(0, 0).item<double>(),
                  static_cast<double>(widen(dtype, round_to(dtype, large + (n - 1)))));
        EXPECT_EQ(stepwise.to(DType::Float32).select(0, 0).item<double>(), large);
        EXPECT_TRUE(same_half_bits(out.shard(r), want)) << dtype << " over " << mesh.to_string();
        EXPECT_FALSE(same_half_bits(out.shard(r), stepwise)) << dtype;
      }
    }
  }
}

// all_gather and all_to_all move 16-bit words: every pattern arrives as it
// was sent (uneven and empty shards along the gather / concat dim).
TEST_F(HalfCollectivesTest, DataMovementKeepsEveryPattern) {
  Backend& backend = world.backend();
  const auto dims = half_mesh_dims(world);
  for (size_t i = 0; i < dims.size(); ++i) {
    const auto& [mesh, md] = dims[i];
    uint64_t seed = 100000 + 1000 * i;  // by the mesh, as above
    if (!takes_part(mesh)) continue;
    for (DType dtype : kHalves) {
      ++seed;
      // all_gather along dim 1 of shards [3, r % 3, 2].
      const auto gather_in = [&](int r) { return half_input(dtype, seed, r, {3, r % 3, 2}); };
      CommDebugMode comm;
      const LocalTensor gathered = backend.all_gather(held_half(mesh, gather_in), mesh, md, 1);
      EXPECT_EQ(comm.count(CollectiveKind::AllGather, dtype), 1);
      for (int r : gathered.ranks()) {
        std::vector<Tensor> pieces;
        for (int m : mesh.group(r, md)) pieces.push_back(gather_in(m));
        EXPECT_TRUE(same_half_bits(gathered.shard(r), cat(pieces, 1)))
            << "all_gather " << dtype << " over " << mesh.to_string() << " dim " << md
            << ", rank " << r;
      }
      // all_to_all: split dim 0 (5 rows, uneven chunks), concat dim 1 (r % 3 columns).
      const auto a2a_in = [&](int r) { return half_input(dtype, seed + 500, r, {5, r % 3}); };
      const LocalTensor moved = backend.all_to_all(held_half(mesh, a2a_in), mesh, md, 0, 1);
      EXPECT_EQ(comm.count(CollectiveKind::AllToAll, dtype), 1);
      for (int r : moved.ranks()) {
        const std::vector<int> group = mesh.group(r, md);
        std::vector<Tensor> pieces;
        for (int m : group)
          pieces.push_back(a2a_in(m).chunk(static_cast<int64_t>(group.size()),
                                           0)[mesh.group_index(r, md)]);
        EXPECT_TRUE(same_half_bits(moved.shard(r), cat(pieces, 1)))
            << "all_to_all " << dtype << " over " << mesh.to_string() << " dim " << md
            << ", rank " << r;
      }
    }
  }
}

// DTensors: Partial -> Replicate is one all_reduce and Partial -> Shard one
// reduce_scatter, each in the 16-bit dtype, and their values are the
// float32 fold of the partial shards rounded once. The bytes a bfloat16
// all_gather hands in are half those of the same float32 one.
TEST_F(HalfCollectivesTest, PartialRedistributionsAndBytes) {
  if (native_reduce_set()) GTEST_SKIP() << "DTENSOR_MPI_NATIVE_REDUCE is set";
  const DeviceMesh line(world, {4});
  const DeviceMesh square(world, {2, 2});
  const Shape shape{6, 5};
  uint64_t seed = 200000;
  for (DType dtype : kHalves) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      // (mesh, from, to, the partial mesh dim, the collective, shard dim of the result or -1)
      struct Case {
        const DeviceMesh* mesh;
        Placements from, to;
        int dim;
        CollectiveKind kind;
        int64_t shard_dim;
      };
      const Placement p = Partial(op);
      const std::vector<Case> cases = {
          {&line, {p}, {Replicate()}, 0, CollectiveKind::AllReduce, -1},
          {&line, {p}, {Shard(0)}, 0, CollectiveKind::ReduceScatter, 0},
          {&square, {p, Shard(1)}, {Replicate(), Shard(1)}, 0, CollectiveKind::AllReduce, -1},
          {&square, {Replicate(), p}, {Replicate(), Shard(0)}, 1, CollectiveKind::ReduceScatter, 0}};
      for (const Case& c : cases) {
        ++seed;
        if (!takes_part(*c.mesh)) continue;
        const DeviceMesh& mesh = *c.mesh;
        // Each rank's shard: a hash of its rank, the shape its placements give.
        const DTensorSpec spec(mesh, c.from, shape, dtype);
        const auto local = [&](int r) {
          return half_input(dtype, seed, r, spec.extent_of_rank(r)->local_shape);
        };
        const DTensor x = from_local(local, mesh, c.from, {.shape = shape});
        CommDebugMode comm;
        const DTensor y = x.redistribute(c.to);
        const std::string what = std::string(dtype_name(dtype)) + " " + to_string(c.from) +
                                 " -> " + to_string(c.to) + " on " + mesh.to_string();
        const std::vector<CollectiveRecord> ran = comm.collectives();
        ASSERT_EQ(ran.size(), 1u) << what << "\n" << comm.table();
        EXPECT_EQ(ran[0].kind, c.kind) << what;
        EXPECT_EQ(ran[0].dtype, dtype) << what;
        EXPECT_EQ(ran[0].mesh_dim, c.dim) << what;
        for (int r : world.held_ranks()) {
          if (!mesh.contains(r)) continue;
          std::vector<Tensor> ins;
          for (int m : mesh.group(r, c.dim)) ins.push_back(local(m));
          Tensor want = fold_half(ins, op);
          if (c.shard_dim >= 0) {
            const ShardExtent e = *y.spec().extent_of_rank(r);
            want = want.narrow(c.shard_dim, e.global_offset[static_cast<size_t>(c.shard_dim)],
                               e.local_shape[static_cast<size_t>(c.shard_dim)]);
          }
          EXPECT_TRUE(same_half_bits(y.to_local(r), want)) << what << ", rank " << r;
        }
      }
    }
  }
  // Bytes: S(0) -> R of [8, 6] on 4 ranks, bfloat16 against float32.
  if (!takes_part(line)) return;
  const Tensor full = Tensor::randn({8, 6}, 3);
  int64_t bytes[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const DType dtype = k == 0 ? DType::Float32 : DType::BFloat16;
    const DTensor s = distribute_tensor(full.to(dtype), line, {Shard(0)});
    CommDebugMode comm;
    const DTensor r = s.redistribute({Replicate()});
    EXPECT_EQ(comm.count(CollectiveKind::AllGather, dtype), 1) << comm.table();
    bytes[k] = comm.bytes(CollectiveKind::AllGather);
    EXPECT_EQ(comm.bytes(CollectiveKind::AllGather, dtype), bytes[k]);
  }
  EXPECT_EQ(bytes[0], 2 * 6 * 4);  // a shard of [2, 6] float32
  EXPECT_EQ(bytes[1] * 2, bytes[0]);
}

// Random layout changes of 16-bit DTensors on every test mesh (1-4 dims,
// up to 64 ranks; uneven and empty shards, shard orders, every Partial
// kind) keep the value bit for bit: the Partial pieces distribute_tensor
// makes (the value on one member and zeros for sum, the value everywhere
// for avg, max and min) fold exactly in float32 (a 16-bit value times at
// most 64 needs at most 17 bits), so any rounding or misplaced element
// shows. The first mesh runs under VerifyMode.
TEST_F(HalfCollectivesTest, RandomLayoutChangesKeepTheBits) {
  std::mt19937 rng(4040);
  bool first = true;
  for (const Shape& mesh_shape : dtensor::testing::test_meshes(world)) {
    const DeviceMesh mesh(world, mesh_shape);
    std::optional<VerifyMode> verify;
    if (first) verify.emplace();
    for (int trial = 0; trial < 12; ++trial) {
      // Every process draws the same numbers, whether it takes part or not.
      const Shape shape = random_shape_for(rng, mesh_shape.product());
      const auto [from, to] = random_placement_pair(rng, mesh.ndim(), shape.size());
      const DType dtype = kHalves[rng() % 2];
      const uint64_t seed = rng();
      if (!takes_part(mesh)) continue;
      // Finite values (NaN would not compare): randn scaled, rounded to dtype.
      const Tensor full = mul(Tensor::randn(shape, seed), 100.0).to(dtype);
      RedistributeOptions o;
      o.allow_new_partial = true;
      const DTensor y = distribute_tensor(full, mesh, from).redistribute(to, o);
      const std::string what = std::string(dtype_name(dtype)) + " " + to_string(shape) + " on " +
                               mesh.to_string() + ": " + to_string(from) + " -> " + to_string(to);
      EXPECT_EQ(y.dtype(), dtype) << what;
      EXPECT_TRUE(same_half_bits(y.full_tensor(), full)) << what;
    }
    if (verify && takes_part(mesh)) {
      EXPECT_GT(verify->checks(), 0) << mesh.to_string();
    }
    first = false;
  }
}
