// Reductions bit for bit: all_reduce and reduce_scatter (sum, avg, max, min
// over float32, float64, int64, bool) of adversarial data, compared
// byte for byte with an ordered fold ((s0 op s1) op s2) ... computed here in
// one process. Every rank can make every rank's input (a hash of seed, rank
// and element), so each rank checks its own result against the oracle. The
// same test runs on the simulated world and under MPI (np 4 and 8), so
// passing in both proves the two worlds give the same bits.
//
// The data: floats of magnitudes from 2^-40 to 2^40 with both signs (so the
// order of the terms changes the sum), signed zeros, and NaN (which max and
// min must propagate, as torch.maximum does); int64 anywhere in its range
// (sums wrap); random bools. Shapes give uneven and empty chunks.
//
// Also all_to_all with uneven shards and empty chunks, on every
// combination of packed / in-place sides, against chunk + cat, and
// all_gather of uneven and empty shards along every dim against cat.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include "comm/backend.h"
#include "dtensor/dtensor.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::input_bits;
using dtensor::testing::same_bits;
using dtensor::testing::takes_part;

namespace {

class ReduceBitsTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Element e of rank r's input for test case `seed`.
template <class T>
T value(uint64_t seed, int r, int64_t e) {
  const uint64_t h = input_bits(seed, r, e);
  if constexpr (std::is_same_v<T, bool>) {
    return h % 3 == 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(h);
  } else {
    switch (h % 16) {
      case 0: return std::numeric_limits<T>::quiet_NaN();
      case 1: return T(0);
      case 2: return -T(0);
      default: break;
    }
    const int exponent = static_cast<int>((h >> 8) % 81) - 40;
    const T mantissa = T(1) + static_cast<T>((h >> 20) % 4096) / T(4096);
    const T v = std::ldexp(mantissa, exponent);
    return (h >> 40) & 1 ? -v : v;
  }
}

template <class T>
Tensor input_reduce_bits(uint64_t seed, int r, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dtype_of<T>::value);
  T* p = t.data_ptr<T>();
  for (int64_t e = 0; e < t.numel(); ++e) p[e] = value<T>(seed, r, e);
  return t;
}

// The oracle's ops, written out here on their own: the NaN-propagating max /
// min of torch.maximum, wrapping integer sums, or for bools.
template <class T>
T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      if constexpr (std::is_same_v<T, bool>) return a || b;
      else if constexpr (std::is_integral_v<T>)
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      else return a + b;
    case ReduceOp::Max:
      if constexpr (std::is_floating_point_v<T>) return std::isnan(a) || a > b ? a : b;
      else return a > b ? a : b;
    case ReduceOp::Min: break;
  }
  if constexpr (std::is_floating_point_v<T>) return std::isnan(a) || a < b ? a : b;
  else return a < b ? a : b;
}

// The reduction of the group's inputs, element by element in group order.
// input_of(r) gives rank r's input.
template <class T>
Tensor ordered_fold(const std::function<const Tensor&(int)>& input_of,
                    const std::vector<int>& group, ReduceOp op) {
  Tensor acc = input_of(group[0]).clone();
  T* a = acc.data_ptr<T>();
  for (size_t k = 1; k < group.size(); ++k) {
    const T* b = input_of(group[k]).template data_ptr<T>();
    for (int64_t e = 0; e < acc.numel(); ++e) a[e] = combine(op, a[e], b[e]);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::Avg)
      for (int64_t e = 0; e < acc.numel(); ++e) a[e] = a[e] / static_cast<T>(group.size());
  }
  return acc;
}

// fold_of(group): ordered_fold of the group, computed once per group (the
// simulated world holds several groups of one mesh dim).
template <class T>
auto group_folds(std::function<const Tensor&(int)> input_of, ReduceOp op) {
  return [input_of = std::move(input_of), op,
          folds = std::map<std::vector<int>, Tensor>()](const std::vector<int>& group) mutable
         -> const Tensor& {
    auto it = folds.find(group);
    if (it == folds.end()) it = folds.emplace(group, ordered_fold<T>(input_of, group, op)).first;
    return it->second;
  };
}

// Each rank's input of a case, made once: an input depends on the case and
// the rank only, not on the mesh, and hashing every element again for each
// mesh dim and group member was most of the test's time (96 s of a Release
// run on 64 simulated ranks).
template <class T>
class RankInputs {
 public:
  const Tensor& of(uint64_t case_seed, int r, const Shape& shape) {
    auto [it, added] = cache_.try_emplace({case_seed, r});
    if (added) it->second = input_reduce_bits<T>(case_seed, r, shape);
    return it->second;
  }

 private:
  std::map<std::pair<uint64_t, int>, Tensor> cache_;
};

// The meshes and mesh dims to reduce over: every dim of the test meshes, the
// flattened 2-d meshes, and one group of the whole world.
std::vector<std::pair<DeviceMesh, int>> mesh_dims(const World& world) {
  std::vector<std::pair<DeviceMesh, int>> out;
  for (const Shape& shape : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, shape);
    for (int d = 0; d < mesh.ndim(); ++d) out.emplace_back(mesh, d);
    if (mesh.ndim() == 2) out.emplace_back(mesh.flatten({0, 1}), 0);
  }
  out.emplace_back(DeviceMesh(world, {world.size()}), 0);
  return out;
}

LocalTensor held_inputs(const DeviceMesh& mesh, const std::function<Tensor(int)>& make) {
  LocalTensor in;
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) in.set(r, make(r));
  return in;
}

bool native_reduce_requested() {
  const char* env = std::getenv("DTENSOR_MPI_NATIVE_REDUCE");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

template <class T>
void check_reductions(const World& world, uint64_t seed) {
  const bool floating = std::is_floating_point_v<T>;
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
  if (floating) ops.push_back(ReduceOp::Avg);
  // all_reduce: small shards (one exchange of whole shards under MPI) and
  // ones over 64 KiB even as bool (a reduce-scatter of flat pieces, then an
  // all-gather): pieces of 0 or 1 elements ({1}, {3}), uneven ones ({7, 3},
  // {70001}), an empty tensor, and ones folded in several blocks.
  // {300001}: pieces over 256 KiB on 4 ranks, received and folded in two
  // rounds (fold_temp.h).
  const std::vector<Shape> all_reduce_shapes = {{1}, {3}, {7, 3}, {0, 4}, {2, 3, 5}, {4099},
                                                {70001}, {300001}};
  // reduce_scatter: (shape, scatter dim) with short and empty trailing chunks.
  // The last two: chunks of several rounds under MPI (float32 and float64
  // pieces over 256 KiB on 4 ranks, 16 KiB slots on 64), each round's range
  // starting and ending inside rows of a strided chunk.
  const std::vector<std::pair<Shape, int64_t>> scatter_cases = {
      {{5, 3}, 0},     {{5, 3}, 1},         {{1, 6}, 0},        {{3, 9, 2}, 1},
      {{2, 3, 10}, 2}, {{0, 5}, 1},         {{9, 1000}, 0},     {{3, 40000, 2}, 1},
      {{300001}, 0}};
  Backend& backend = world.backend();
  RankInputs<T> inputs;
  const auto dims = mesh_dims(world);
  for (size_t i = 0; i < dims.size(); ++i) {
    const auto& [mesh, md] = dims[i];
    if (!takes_part(mesh)) continue;
    // The large path (pieces over 64 KiB) on groups of 4 and 2 ranks and on
    // the whole world: its split into pieces depends on the group's size and
    // on nothing else of the mesh, and running it on every mesh dim made
    // this the slowest test under the sanitizers.
    const bool large_path = i < 3 || i + 1 == dims.size();
    for (ReduceOp op : ops) {
      uint64_t case_seed = seed;
      for (const Shape& shape : all_reduce_shapes) {
        ++case_seed;
        // The large path once per kind of op (avg and min share it with sum
        // and max), to keep the test quick.
        if (shape.product() > 10000 &&
            (!large_path || op == ReduceOp::Avg || op == ReduceOp::Min))
          continue;
        auto input_of = [&](int r) -> const Tensor& { return inputs.of(case_seed, r, shape); };
        const LocalTensor in = held_inputs(mesh, [&](int r) { return input_of(r).clone(); });
        const LocalTensor out = backend.all_reduce(in, mesh, md, op);
        auto fold_of = group_folds<T>(input_of, op);
        for (int r : in.ranks())
          EXPECT_TRUE(same_bits(out.shard(r), fold_of(mesh.group(r, md))))
              << "all_reduce " << to_string(op) << " of " << dtype_of<T>::value << " " << shape
              << " over " << mesh.to_string() << " dim " << md << ", rank " << r;
      }
      for (const auto& [shape, dim] : scatter_cases) {
        ++case_seed;
        if (shape.product() > 10000 &&
            (!large_path || op == ReduceOp::Avg || op == ReduceOp::Min))
          continue;
        auto input_of = [&](int r) -> const Tensor& { return inputs.of(case_seed, r, shape); };
        const LocalTensor in = held_inputs(mesh, [&](int r) { return input_of(r).clone(); });
        const LocalTensor out = backend.reduce_scatter(in, mesh, md, op, dim);
        auto fold_of = group_folds<T>(input_of, op);
        for (int r : in.ranks()) {
          const std::vector<int> group = mesh.group(r, md);
          const Tensor want =
              fold_of(group).chunk(static_cast<int64_t>(group.size()), dim)[mesh.group_index(r, md)];
          EXPECT_TRUE(same_bits(out.shard(r), want))
              << "reduce_scatter " << to_string(op) << " of " << dtype_of<T>::value << " " << shape
              << " dim " << dim << " over " << mesh.to_string() << " dim " << md << ", rank " << r;
        }
      }
    }
  }
}

}  // namespace

TEST_F(ReduceBitsTest, ReductionsMatchTheOrderedFoldBitForBit) {
  if (native_reduce_requested())
    GTEST_SKIP() << "DTENSOR_MPI_NATIVE_REDUCE is set: the MPI library orders the terms";
  check_reductions<float>(world, 100);
  check_reductions<double>(world, 200);
  check_reductions<int64_t>(world, 300);
  check_reductions<bool>(world, 400);
}

// The classic case where the order shows: 1e8 + 1 - 1e8 + 1 in float32 is
// 1 in group order, and 0 or 2 in others.
TEST_F(ReduceBitsTest, CancellingSumIsTheGroupOrderOne) {
  if (native_reduce_requested()) GTEST_SKIP() << "DTENSOR_MPI_NATIVE_REDUCE is set";
  DeviceMesh mesh(world, {4});
  if (!takes_part(mesh)) return;
  const float values[] = {1e8f, 1.0f, -1e8f, 1.0f};
  const LocalTensor in = held_inputs(mesh, [&](int r) { return Tensor::full({3}, values[r]); });
  world.backend().all_reduce(in, mesh, 0, ReduceOp::Sum).for_each([](int, const Tensor& t) {
    EXPECT_TRUE(equal(t, Tensor::full({3}, 1.0f))) << t;
  });
  // Partial(max) with a NaN on one rank is NaN on every rank.
  const LocalTensor with_nan = held_inputs(mesh, [](int r) {
    return Tensor::full({2}, r == 2 ? std::numeric_limits<float>::quiet_NaN() : float(r));
  });
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
    world.backend().all_reduce(with_nan, mesh, 0, op).for_each([](int, const Tensor& t) {
      for (int64_t e = 0; e < 2; ++e) EXPECT_TRUE(std::isnan(t.select(0, e).item<double>())) << t;
    });
}

// all_to_all with shards uneven along the concat dim (rank r: r % 3 rows,
// so some are empty) and split dims shorter than the group (empty chunks),
// for each pairing of split and concat dims of a 3-d shard: the sent chunks
// contiguous or packed, the received pieces in place or copied into place.
TEST_F(ReduceBitsTest, AllToAllOfUnevenAndEmptyPiecesMatchesChunkAndCat) {
  Backend& backend = world.backend();
  for (const auto& [mesh, md] : mesh_dims(world)) {
    if (!takes_part(mesh)) continue;
    for (int64_t split = 0; split < 3; ++split) {
      for (int64_t concat = 0; concat < 3; ++concat) {
        if (split == concat) continue;
        for (int64_t split_len : {2, 5, 11}) {
          auto make = [&](int r) {
            Shape shape = {3, 4, 2};
            shape[split] = split_len;
            shape[concat] = r % 3;
            const int64_t numel = shape.product();
            return (Tensor::arange(numel, DType::Float64) + 1000.0 * r).reshape(shape);
          };
          const LocalTensor in = held_inputs(mesh, make);
          const LocalTensor out = backend.all_to_all(in, mesh, md, split, concat);
          for (int r : in.ranks()) {
            const std::vector<int> group = mesh.group(r, md);
            const int64_t n = static_cast<int64_t>(group.size());
            std::vector<Tensor> pieces;
            for (int j : group) pieces.push_back(make(j).chunk(n, split)[mesh.group_index(r, md)]);
            const Tensor want = cat(pieces, concat);
            EXPECT_TRUE(same_bits(out.shard(r), want))
                << "all_to_all split " << split << " (length " << split_len << ") concat "
                << concat << " over " << mesh.to_string() << " dim " << md << ", rank " << r;
          }
        }
      }
    }
  }
}

// all_gather along each dim of a 3-d shard with uneven and empty shards
// (rank r: r % 3 along the gather dim) against cat: along a later dim each
// member's shard is a strided block of the output, which MPI writes in
// place (a subarray per member), as the simulated backend copies it.
TEST_F(ReduceBitsTest, AllGatherOfUnevenAndEmptyShardsMatchesCat) {
  Backend& backend = world.backend();
  for (const auto& [mesh, md] : mesh_dims(world)) {
    if (!takes_part(mesh)) continue;
    for (int64_t dim = 0; dim < 3; ++dim) {
      auto make = [&](int r) {
        Shape shape = {3, 4, 2};
        shape[dim] = r % 3;
        return (Tensor::arange(shape.product(), DType::Float64) + 1000.0 * r).reshape(shape);
      };
      const LocalTensor in = held_inputs(mesh, make);
      const LocalTensor out = backend.all_gather(in, mesh, md, dim);
      for (int r : in.ranks()) {
        std::vector<Tensor> pieces;
        for (int j : mesh.group(r, md)) pieces.push_back(make(j));
        EXPECT_TRUE(same_bits(out.shard(r), cat(pieces, dim)))
            << "all_gather dim " << dim << " over " << mesh.to_string() << " dim " << md
            << ", rank " << r;
      }
    }
  }
}
