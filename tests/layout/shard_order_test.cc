// Shard order (PyTorch's shard_order): the text form, the normalization
// DTensorSpec applies, and the chunking rule against an independent
// reference that applies each mesh dim's split in order to an explicit
// list of indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "dtensor/spec.h"
#include "layout_util.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

DeviceMesh mesh_of(const Shape& shape) {
  return DeviceMesh(World::simulated(shape.product()), shape);
}

// The indices of tensor dim d a coordinate holds: start from 0..L-1 and let
// each mesh dim sharding d, sorted by its order (mesh dim index when
// natural), keep its ceil-sized chunk of what is left.
std::vector<int64_t> reference_indices(const Placements& p, const Shape& mesh_shape,
                                       const DimVector& coord, int64_t length, int64_t d) {
  std::vector<int64_t> idx(static_cast<size_t>(length));
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<size_t> dims;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i].is_shard() && p[i].dim() == d) dims.push_back(i);
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) {
    return std::max(p[a].shard_order(), 0) < std::max(p[b].shard_order(), 0);
  });
  for (size_t m : dims) {
    const size_t n = static_cast<size_t>(mesh_shape[m]);
    const size_t chunk = (idx.size() + n - 1) / n;
    const size_t begin = std::min(idx.size(), chunk * static_cast<size_t>(coord[m]));
    const size_t end = std::min(idx.size(), begin + chunk);
    idx = std::vector<int64_t>(idx.begin() + static_cast<std::ptrdiff_t>(begin),
                               idx.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return idx;
}

}  // namespace

TEST(ShardOrder, TextForm) {
  EXPECT_EQ(to_string(Shard(0, 1)), "S(0)[1]");
  EXPECT_EQ(to_string(Shard(2)), "S(2)");
  EXPECT_EQ(Shard(0).shard_order(), -1);
  EXPECT_EQ(Shard(0, 1).shard_order(), 1);
  EXPECT_EQ(Replicate().shard_order(), -1);
  const Placements p{Shard(0, 1), Shard(0, 0)};
  EXPECT_EQ(to_string(p), "S(0)[1],S(0)[0]");
  EXPECT_EQ(parse_placements("S(0)[1],S(0)[0]"), p);
  EXPECT_EQ(parse_placements(" s(0) [1] , Shard(0)[0]"), p);
  EXPECT_NE(Shard(0, 1), Shard(0));
  EXPECT_NE(Shard(0, 1).hash(), Shard(0, 0).hash());
  EXPECT_NE(Shard(0).hash(), Shard(0, 0).hash());
  static_assert(sizeof(Placement) == 4);
  EXPECT_NE(error_of([] { parse_placement("R[1]"); }).find("only a shard takes an order"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_placement("S(0)[x]"); }).find("shard order 'x' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_placement("S(0)[8]"); }).find("shard order 8 out of range"),
            std::string::npos);
  EXPECT_NE(error_of([] { Shard(0, 9); }).find("shard order out of range"), std::string::npos);
}

TEST(ShardOrder, SpecValidatesAndNormalizes) {
  const DeviceMesh mesh = mesh_of({2, 2, 2});
  const Shape shape{8, 4};
  auto spec = [&](const char* text) { return DTensorSpec(mesh, parse_placements(text), shape); };
  // The natural order written out is the natural order.
  EXPECT_EQ(spec("S(0)[0],S(0)[1],R").placements(), parse_placements("S(0),S(0),R"));
  EXPECT_EQ(spec("S(0)[0],R,S(1)[0]").placements(), parse_placements("S(0),R,S(1)"));
  EXPECT_EQ(spec("S(0)[1],S(0)[0],R").placements(), parse_placements("S(0)[1],S(0)[0],R"));
  EXPECT_EQ(spec("S(0)[0],S(0)[2],S(0)[1]").placements(),
            parse_placements("S(0)[0],S(0)[2],S(0)[1]"));
  // Negative dims count as their positive form.
  EXPECT_EQ(spec("S(-2)[1],S(0)[0],R").placements(), parse_placements("S(0)[1],S(0)[0],R"));
  EXPECT_EQ(spec("S(1)[1],S(-1)[0],R"), spec("S(1)[1],S(1)[0],R"));
  EXPECT_NE(spec("S(0)[1],S(0)[0],R"), spec("S(0),S(0),R"));
  const std::string mixed = error_of([&] { spec("S(0)[1],S(0),R"); });
  EXPECT_NE(mixed.find("S(0)[1],S(0),R"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("all natural or a permutation of 0..1"), std::string::npos) << mixed;
  EXPECT_NE(error_of([&] { spec("S(0)[1],S(0)[1],R"); }).find("permutation"), std::string::npos);
  EXPECT_NE(error_of([&] { spec("S(0)[1],R,R"); }).find("permutation of 0..0"),
            std::string::npos);
}

// The example of the docs: mesh (dp=2, tp=2), [8, 4], S(0)[1],S(0)[0]: tp
// splits the rows first, (d, t) holds rows [4t+2d, 4t+2d+2).
TEST(ShardOrder, FsdpOverTpExample) {
  const DeviceMesh mesh = mesh_of({2, 2});
  const DTensorSpec ordered(mesh, parse_placements("S(0)[1],S(0)[0]"), Shape{8, 4});
  const DTensorSpec natural(mesh, parse_placements("S(0),S(0)"), Shape{8, 4});
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t t = 0; t < 2; ++t) {
      EXPECT_EQ(ordered.extent({d, t}).global_offset, (Shape{4 * t + 2 * d, 0}));
      EXPECT_EQ(ordered.extent({d, t}).local_shape, (Shape{2, 4}));
      EXPECT_EQ(natural.extent({d, t}).global_offset, (Shape{4 * d + 2 * t, 0}));
    }
}

// Random meshes of 1-4 dims up to 64 ranks, shapes with uneven and empty
// shards, random orders: every coordinate's extent is the reference's
// index set (contiguous, so [offset, offset + size)); empty ones report the
// global length as offset.
TEST(ShardOrder, ChunkingMatchesTheReference) {
  std::mt19937 rng(7);
  const int cases = dtensor::testing::property_cases(300);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape ms = dtensor::testing::random_mesh(rng, 64);
    const Shape shape = dtensor::testing::random_shape_for(rng, ms.product());
    const int64_t nd = static_cast<int64_t>(shape.size());
    Placements p;
    for (size_t i = 0; i < ms.size(); ++i)
      p.push_back(rng() % 4 == 0 ? Replicate() : Shard(static_cast<int64_t>(rng() % nd)));
    p = dtensor::testing::with_random_orders(rng, p);
    const DTensorSpec spec(mesh_of(ms), p, shape);
    DimVector coord(ms.size(), 0);
    for (int64_t c = 0; c < ms.product(); ++c) {
      int64_t rest = c;
      for (size_t i = ms.size(); i-- > 0;) {
        coord[i] = rest % ms[i];
        rest /= ms[i];
      }
      const ShardExtent e = spec.extent(coord);
      for (int64_t d = 0; d < nd; ++d) {
        const std::vector<int64_t> want = reference_indices(p, ms, coord, shape[d], d);
        const std::string where = to_string(p) + " on " + to_string(ms) + " shape " +
                                  to_string(shape) + " coord " + to_string(coord) + " dim " +
                                  std::to_string(d);
        ASSERT_EQ(e.local_shape[d], static_cast<int64_t>(want.size())) << where;
        if (want.empty()) {
          EXPECT_EQ(e.global_offset[d], shape[d]) << where;
        } else {
          EXPECT_EQ(e.global_offset[d], want[0]) << where;
        }
      }
    }
  }
}

TEST(ShardOrder, ReplacePlacementsKeepsTheOthersOrder) {
  const Placements p = parse_placements("S(0)[2],S(0)[0],S(0)[1]");
  // Mesh dim 0 leaves: 1 then 2 remain, natural.
  EXPECT_EQ(replace_placements(p, DimVector{0}, Placements{Replicate()}),
            parse_placements("R,S(0),S(0)"));
  // Mesh dim 1 leaves: 2 then 0 remain.
  EXPECT_EQ(replace_placements(p, DimVector{1}, Placements{Replicate()}),
            parse_placements("S(0)[1],R,S(0)[0]"));
  // Mesh dim 1 comes back as the last splitter.
  EXPECT_EQ(replace_placements(parse_placements("S(0)[1],R,S(0)[0]"), DimVector{1},
                               Placements{Shard(0, 2)}),
            parse_placements("S(0)[1],S(0)[2],S(0)[0]"));
  // Natural: its natural place.
  EXPECT_EQ(replace_placements(parse_placements("S(0),R,S(0)"), DimVector{1},
                               Placements{Shard(0)}),
            parse_placements("S(0),S(0),S(0)"));
  EXPECT_TRUE(has_shard_order(p));
  EXPECT_EQ(without_shard_order(p), parse_placements("S(0),S(0),S(0)"));
  EXPECT_EQ(shard_split_order(p, 0), (DimVector{1, 2, 0}));
}
