// Tests of DeviceMesh: coordinates and groups (checked against a brute force
// computed from the row-major layout), explicit rank lists, meshes smaller
// than the world, sub-meshes, flattening and its registry, equality, printing,
// parse_mesh_shape, and that every bad input throws an Error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "dtensor/mesh.h"

using namespace dtensor;

// Counts heap allocations made by this thread while `counting` is set, to
// check that copying a mesh does not allocate. new and delete are replaced as
// a malloc/free pair (so ASan sees matching calls); GCC cannot tell that they
// pair up once inlined and warns about every delete, hence the pragma.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local bool counting = false;
thread_local int allocations = 0;
}  // namespace

void* operator new(size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

using Groups = std::vector<std::vector<int>>;

// Runs fn, expecting a dtensor::Error whose message contains every needle.
template <class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a dtensor::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
}

// The coordinate of position p in a row-major array of the given shape.
std::vector<int64_t> unravel(int64_t p, const std::vector<int64_t>& shape) {
  std::vector<int64_t> c(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    c[i] = p % shape[i];
    p /= shape[i];
  }
  return c;
}

// Brute force over the root: the group of the root dims in `covered` for
// `rank` is the ranks agreeing with it on every other root dim, ordered
// row-major over the covered dims.
std::vector<int> brute_group(const std::vector<int>& ranks, const std::vector<int64_t>& shape,
                             int rank, const std::vector<int>& covered) {
  const int64_t pos = std::find(ranks.begin(), ranks.end(), rank) - ranks.begin();
  const auto mine = unravel(pos, shape);
  std::vector<std::pair<int64_t, int>> members;
  for (size_t p = 0; p < ranks.size(); ++p) {
    const auto c = unravel(static_cast<int64_t>(p), shape);
    bool same = true;
    for (size_t i = 0; i < shape.size(); ++i) {
      const bool is_covered = std::count(covered.begin(), covered.end(), static_cast<int>(i));
      if (!is_covered && c[i] != mine[i]) same = false;
    }
    if (!same) continue;
    int64_t idx = 0;
    for (int i : covered) idx = idx * shape[i] + c[i];
    members.emplace_back(idx, ranks[p]);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> out;
  for (auto& m : members) out.push_back(m.second);
  return out;
}

std::vector<int> iota_ranks(int64_t n) {
  std::vector<int> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = static_cast<int>(i);
  return r;
}

// Checks coordinate, group, group_index, groups and sizes of every dim of a
// root mesh against the brute force.
void check_against_brute_force(const DeviceMesh& mesh, const std::vector<int>& ranks,
                               const std::vector<int64_t>& shape) {
  SCOPED_TRACE(mesh.to_string());
  ASSERT_EQ(mesh.ndim(), static_cast<int>(shape.size()));
  EXPECT_EQ(mesh.shape(), Shape(shape));
  EXPECT_EQ(mesh.size(), static_cast<int64_t>(ranks.size()));
  EXPECT_EQ(mesh.ranks(), ranks);
  for (size_t p = 0; p < ranks.size(); ++p) {
    const auto coord = mesh.coordinate(ranks[p]);
    ASSERT_TRUE(coord.has_value()) << "rank " << ranks[p];
    EXPECT_EQ(coord->vec(), unravel(static_cast<int64_t>(p), shape)) << "rank " << ranks[p];
  }
  for (int d = 0; d < mesh.ndim(); ++d) {
    EXPECT_EQ(mesh.size(d), shape[d]);
    std::set<std::vector<int>> distinct;
    for (int r : ranks) {
      const auto expected = brute_group(ranks, shape, r, {d});
      const auto got = mesh.group(r, d);
      EXPECT_EQ(got, expected) << "rank " << r << " dim " << d;
      const int64_t idx = mesh.group_index(r, d);
      EXPECT_EQ(idx, (*mesh.coordinate(r))[d]);
      ASSERT_LT(idx, static_cast<int64_t>(got.size()));
      EXPECT_EQ(got[idx], r);
      distinct.insert(expected);
    }
    Groups expected_groups(distinct.begin(), distinct.end());
    std::sort(expected_groups.begin(), expected_groups.end(),
              [](const auto& a, const auto& b) { return a[0] < b[0]; });
    EXPECT_EQ(mesh.groups(d), expected_groups) << "dim " << d;
  }
}

}  // namespace

TEST(DeviceMesh, SemanticsExampleGroups) {
  DeviceMesh mesh(World::simulated(8), {2, 2, 2}, {"dp", "cp", "tp"});
  EXPECT_EQ(mesh.groups(0), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh.groups(1), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh.groups(2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  DeviceMesh flat = mesh.flatten({"dp", "cp"});
  EXPECT_EQ(flat.groups(0), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(flat.names(), (std::vector<std::string>{"dp_cp"}));
  EXPECT_EQ(flat.root_dims(0), 0b011u);
}

TEST(DeviceMesh, Coordinates1d2d3d) {
  World world = World::simulated(24);
  DeviceMesh m1(world, {8});
  for (int r = 0; r < 8; ++r) EXPECT_EQ(*m1.coordinate(r), (DimVector{r}));
  DeviceMesh m2(world, {2, 4});
  EXPECT_EQ(*m2.coordinate(0), (DimVector{0, 0}));
  EXPECT_EQ(*m2.coordinate(5), (DimVector{1, 1}));
  EXPECT_EQ(*m2.coordinate(7), (DimVector{1, 3}));
  DeviceMesh m3(world, {2, 3, 4});
  for (int r = 0; r < 24; ++r) {
    EXPECT_EQ(*m3.coordinate(r), (DimVector{r / 12, r / 4 % 3, r % 4})) << "rank " << r;
  }
}

TEST(DeviceMesh, GroupsMatchBruteForce) {
  World world = World::simulated(24);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {8}, {2, 4}, {4, 2}, {2, 3, 4}, {3, 1, 2}, {2, 2, 2, 3}, {1}}) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    check_against_brute_force(DeviceMesh(world, Shape(shape)), iota_ranks(n), shape);
  }
}

TEST(DeviceMesh, ExplicitRanks) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2}, std::vector<int>{7, 5, 3, 1}, {"a", "b"});
  EXPECT_EQ(*mesh.coordinate(7), (DimVector{0, 0}));
  EXPECT_EQ(*mesh.coordinate(5), (DimVector{0, 1}));
  EXPECT_EQ(*mesh.coordinate(3), (DimVector{1, 0}));
  EXPECT_EQ(*mesh.coordinate(1), (DimVector{1, 1}));
  for (int r : {0, 2, 4, 6}) {
    EXPECT_FALSE(mesh.coordinate(r).has_value()) << r;
    EXPECT_FALSE(mesh.contains(r)) << r;
  }
  EXPECT_EQ(mesh.group(7, 0), (std::vector<int>{7, 3}));
  EXPECT_EQ(mesh.group(1, 1), (std::vector<int>{3, 1}));
  EXPECT_EQ(mesh.group_index(1, 1), 1);
  // Ordered by first rank, not by position in the mesh.
  EXPECT_EQ(mesh.groups(0), (Groups{{5, 1}, {7, 3}}));
  EXPECT_EQ(mesh.groups(1), (Groups{{3, 1}, {7, 5}}));
  EXPECT_EQ(mesh.ranks(), (std::vector<int>{7, 5, 3, 1}));
  EXPECT_EQ(mesh.flatten({0, 1}).groups(0), (Groups{{7, 5, 3, 1}}));
  check_against_brute_force(mesh, {7, 5, 3, 1}, {2, 2});

  const std::vector<int> shuffled{5, 0, 11, 2, 9, 4, 1, 10, 3, 8, 7, 6};
  check_against_brute_force(DeviceMesh(World::simulated(12), {2, 3, 2}, shuffled), shuffled,
                            {2, 3, 2});
}

TEST(DeviceMesh, MeshSmallerThanWorld) {
  DeviceMesh mesh(World::simulated(8), {2, 2}, {"x", "y"});
  EXPECT_EQ(mesh.size(), 4);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(mesh.contains(r));
  for (int r : {4, 5, 6, 7, -1, 8, 100}) {
    EXPECT_FALSE(mesh.coordinate(r).has_value()) << r;
    EXPECT_FALSE(mesh.contains(r)) << r;
  }
  // The held ranks of a mesh are its own only, ascending, on every view.
  EXPECT_EQ(mesh.held_ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(mesh["y"].held_ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(DeviceMesh(World::simulated(8), {2}, std::vector<int>{6, 3}).held_ranks(),
            (std::vector<int>{3, 6}));
  expect_error([&] { mesh.group(5, 0); }, {"rank 5", "DeviceMesh([2, 2]"});
  expect_error([&] { mesh.group_index(6, 1); }, {"rank 6"});
  expect_error([&] { mesh["y"].group(4, 0); }, {"rank 4"});
  EXPECT_EQ(mesh.groups(1), (Groups{{0, 1}, {2, 3}}));
}

TEST(DeviceMesh, SubMeshKeepsOrder) {
  DeviceMesh mesh(World::simulated(8), {2, 2, 2}, {"dp", "cp", "tp"});
  DeviceMesh dt = mesh[{"dp", "tp"}];
  EXPECT_EQ(dt.ndim(), 2);
  EXPECT_EQ(dt.names(), (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(dt.shape(), (Shape{2, 2}));
  EXPECT_EQ(dt.size(), 4);
  EXPECT_EQ(dt.root_dims(0), 0b001u);
  EXPECT_EQ(dt.root_dims(1), 0b100u);
  // Rank 5 is (dp=1, cp=0, tp=1).
  EXPECT_EQ(*dt.coordinate(5), (DimVector{1, 1}));
  EXPECT_EQ(dt.group(5, 1), (std::vector<int>{4, 5}));
  EXPECT_EQ(dt.group(6, 0), (std::vector<int>{2, 6}));
  EXPECT_EQ(dt.groups(1), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // Every rank of the root sees its own sub-mesh.
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(dt.contains(r)) << r;
  EXPECT_FALSE(dt.is_root());
  EXPECT_EQ(dt.root(), mesh);

  DeviceMesh tp = mesh["tp"];
  EXPECT_EQ(tp.ndim(), 1);
  EXPECT_EQ(tp.size(), 2);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(*tp.coordinate(r), (DimVector{r % 2})) << r;
    EXPECT_EQ(tp.group(r, 0), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1})) << r;
    EXPECT_EQ(tp.group_index(r, 0), r % 2);
  }
  DeviceMesh cp = mesh["cp"];
  EXPECT_EQ(cp.group(5, 0), (std::vector<int>{5, 7}));
  EXPECT_EQ(*cp.coordinate(7), (DimVector{1}));

  EXPECT_EQ((mesh[{"dp", "cp", "tp"}]), mesh);
  EXPECT_TRUE((mesh[{"dp", "cp", "tp"}].is_root()));
  EXPECT_EQ(mesh["tp"], tp);
  EXPECT_NE(mesh["cp"], tp);
  EXPECT_EQ(dt["tp"], tp);
}

TEST(DeviceMesh, SubMeshErrors) {
  DeviceMesh mesh(World::simulated(8), {2, 2, 2}, {"dp", "cp", "tp"});
  try {
    mesh[std::vector<std::string>{"tp", "dp"}];
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "sub-mesh dims must be in mesh order: got (tp, dp), mesh dims are (dp, cp, tp)");
  }
  expect_error([&] { mesh["pp"]; }, {"'pp'", "(dp, cp, tp)"});
  expect_error([&] { mesh[std::vector<std::string>{"dp", "dp"}]; }, {"'dp'", "repeated"});
  expect_error([&] { mesh[std::vector<std::string>{}]; }, {"at least one"});
  // A sub-mesh only knows its own dims.
  expect_error([&] { mesh["tp"]["dp"]; }, {"'dp'", "(tp)"});
  expect_error([&] { mesh.dim_index("zz"); }, {"'zz'", "(dp, cp, tp)"});
  EXPECT_EQ(mesh.dim_index("cp"), 1);
}

TEST(DeviceMesh, FlattenNonAdjacent) {
  DeviceMesh mesh(World::simulated(8), {2, 2, 2}, {"dp", "cp", "tp"});
  DeviceMesh dp_tp = mesh.flatten({"dp", "tp"});
  EXPECT_EQ(dp_tp.groups(0), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(dp_tp.names(), (std::vector<std::string>{"dp_tp"}));
  EXPECT_EQ(dp_tp.size(), 4);
  EXPECT_EQ(dp_tp.root_dims(0), 0b101u);
  // Rank 5 is (dp=1, cp=0, tp=1): row-major index over (dp, tp) is 3.
  EXPECT_EQ(*dp_tp.coordinate(5), (DimVector{3}));
  EXPECT_EQ(dp_tp.group(5, 0), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(dp_tp.group_index(6, 0), 2);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(dp_tp.group(r, 0), brute_group(iota_ranks(8), {2, 2, 2}, r, {0, 2})) << r;
  }
  // A bigger uneven case against the brute force.
  DeviceMesh big(World::simulated(24), {2, 3, 4}, {"a", "b", "c"});
  for (const auto& [names, covered] :
       std::vector<std::pair<std::vector<std::string>, std::vector<int>>>{
           {{"a", "b"}, {0, 1}}, {{"a", "c"}, {0, 2}}, {{"b", "c"}, {1, 2}},
           {{"a", "b", "c"}, {0, 1, 2}}}) {
    DeviceMesh f = big.flatten(names);
    for (int r = 0; r < 24; ++r) {
      const auto expected = brute_group(iota_ranks(24), {2, 3, 4}, r, covered);
      EXPECT_EQ(f.group(r, 0), expected) << f << " rank " << r;
      EXPECT_EQ(expected[f.group_index(r, 0)], r);
      EXPECT_EQ((*f.coordinate(r))[0], f.group_index(r, 0));
    }
  }
}

TEST(DeviceMesh, FlattenRegistry) {
  DeviceMesh mesh(World::simulated(8), {2, 2, 2}, {"dp", "cp", "tp"});
  EXPECT_FALSE(mesh.find_flattened(0b011).has_value());
  EXPECT_TRUE(mesh.flattened_dims().empty());

  DeviceMesh a = mesh.flatten(std::vector<std::string>{"dp", "cp"});
  EXPECT_EQ(mesh.find_flattened(0b011), std::optional<std::string>("dp_cp"));
  // Flattening the same dims again (by index, by name, or naming the
  // registered name) returns the same mesh.
  EXPECT_EQ(mesh.flatten({0, 1}), a);
  EXPECT_EQ(mesh.flatten(std::vector<std::string>{"dp", "cp"}, "dp_cp"), a);
  expect_error([&] { mesh.flatten({0, 1}, "data"); }, {"'dp_cp'", "'data'"});

  DeviceMesh ctx = mesh.flatten({"cp", "tp"}, "ctx");
  EXPECT_EQ(ctx.names(), (std::vector<std::string>{"ctx"}));
  EXPECT_EQ(mesh.find_flattened(0b110), std::optional<std::string>("ctx"));
  EXPECT_EQ(mesh.flatten({1, 2}), ctx);  // the default name is not re-registered
  EXPECT_EQ(ctx.to_string(), "DeviceMesh([4], names=(ctx))");

  // The registry lives on the root: views and copies see it.
  DeviceMesh sub = mesh[std::vector<std::string>{"dp", "tp"}];
  EXPECT_EQ(sub.find_flattened(0b011), std::optional<std::string>("dp_cp"));
  DeviceMesh via_sub = sub.flatten({0, 1});
  EXPECT_EQ(mesh.find_flattened(0b101), std::optional<std::string>("dp_tp"));
  EXPECT_EQ(mesh.flatten({0, 2}), via_sub);
  EXPECT_EQ(mesh.flattened_dims(),
            (std::vector<std::pair<MeshDimMask, std::string>>{
                {0b011, "dp_cp"}, {0b101, "dp_tp"}, {0b110, "ctx"}}));

  // Registered flattened dims can be picked by name, alone or with others.
  EXPECT_EQ(mesh["dp_cp"], a);
  DeviceMesh two = mesh[{"dp_cp", "tp"}];
  EXPECT_EQ(two.shape(), (Shape{4, 2}));
  EXPECT_EQ(two.names(), (std::vector<std::string>{"dp_cp", "tp"}));
  EXPECT_EQ(two.groups(0), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(*two.coordinate(6), (DimVector{3, 0}));
  expect_error([&] { mesh[std::vector<std::string>{"dp_cp", "cp"}]; }, {"overlap"});
  expect_error([&] { mesh[std::vector<std::string>{"tp", "dp_cp"}]; }, {"mesh order"});
  // Flattening a flattened dim with another one unions their root dims.
  DeviceMesh all = two.flatten({0, 1});
  EXPECT_EQ(all.root_dims(0), 0b111u);
  EXPECT_EQ(all.names(), (std::vector<std::string>{"dp_cp_tp"}));
  EXPECT_EQ(all.groups(0), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(mesh.flatten({0, 1, 2}), all);
}

TEST(DeviceMesh, FlattenNamingAndErrors) {
  World world = World::simulated(8);
  DeviceMesh unnamed(world, {2, 2, 2});
  DeviceMesh d02 = unnamed.flatten({0, 2});
  EXPECT_EQ(d02.names(), (std::vector<std::string>{"d0_d2"}));
  EXPECT_EQ(d02.to_string(), "DeviceMesh([4], names=(d0_d2))");
  EXPECT_EQ(unnamed.to_string(), "DeviceMesh([2, 2, 2])");
  EXPECT_EQ(d02.groups(0), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // Negative dims count from the end.
  EXPECT_EQ(unnamed.flatten({-3, -1}), d02);

  DeviceMesh mesh(world, {2, 2, 2}, {"dp", "cp", "tp"});
  // A single dim flattens to a 1-d view of itself.
  DeviceMesh single = mesh.flatten(std::vector<std::string>{"tp"});
  EXPECT_EQ(single, mesh["tp"]);
  EXPECT_EQ(mesh.flatten({1}, "cp"), mesh["cp"]);
  EXPECT_TRUE(mesh.flattened_dims().empty());
  expect_error([&] { mesh.flatten({1}, "ctx"); }, {"'cp'", "'ctx'"});

  expect_error([&] { mesh.flatten({1, 0}); }, {"ascending", "[1, 0]"});
  expect_error([&] { mesh.flatten({0, 0}); }, {"ascending", "[0, 0]"});
  expect_error([&] { mesh.flatten(std::vector<int>{}); }, {"at least one"});
  expect_error([&] { mesh.flatten({0, 3}); }, {"mesh dim 3", "DeviceMesh([2, 2, 2]"});
  expect_error([&] { mesh.flatten({"tp", "dp"}); },
               {"mesh order", "(tp, dp)"});
  expect_error([&] { mesh.flatten(std::vector<std::string>{"dp", "pp"}); }, {"'pp'"});
  expect_error([&] { mesh.flatten(std::vector<std::string>{"dp", "dp"}); }, {"'dp'", "repeated"});
  // Names may not clash with root dims or with another flattened dim.
  expect_error([&] { mesh.flatten({0, 1}, "tp"); }, {"'tp'"});
  EXPECT_FALSE(mesh.find_flattened(0b011).has_value());
  mesh.flatten({0, 1}, "outer");
  expect_error([&] { mesh.flatten({1, 2}, "outer"); }, {"'outer'"});
  EXPECT_FALSE(mesh.find_flattened(0b110).has_value());
}

// The default name of a flattened dim must not collide: dims named a, b and
// a_b flattened over (a, b) take "a_b_1" (the planner flattens with default
// names, so a clash there made a valid redistribution throw).
TEST(DeviceMesh, FlattenDefaultNameNeverCollides) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2}, {"a", "b", "a_b"});
  DeviceMesh ab = mesh.flatten({0, 1});
  EXPECT_EQ(ab.names(), (std::vector<std::string>{"a_b_1"}));
  EXPECT_EQ(ab.groups(0), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(mesh.flatten({"a", "b"}), ab);  // registered: found again, same name
  EXPECT_EQ(mesh["a_b"].size(), 2);         // the root dim keeps its name
  EXPECT_EQ(mesh["a_b_1"], ab);
  // A user's flattened dim taking "a_b_2" pushes the next default further.
  DeviceMesh other(world, {2, 2, 2, 1}, {"a", "b", "a_b", "a_b_1"});
  other.flatten({1, 2}, "a_b_2");
  EXPECT_EQ(other.flatten({0, 1}).names(), (std::vector<std::string>{"a_b_3"}));
  // A name the caller chose still may not clash.
  expect_error([&] { mesh.flatten({1, 2}, "a_b_1"); }, {"'a_b_1'"});
  // Unnamed dims: a user's "d0_d2" on other dims moves the default aside.
  DeviceMesh unnamed(world, {2, 2, 2});
  unnamed.flatten({1, 2}, "d0_d2");
  EXPECT_EQ(unnamed.flatten({0, 2}).names(), (std::vector<std::string>{"d0_d2_1"}));
}

// size(), shape() and ranks() agree for every view: a sub-mesh's ranks()
// are those of one sub-mesh (the lowest rank's in a simulated world), and
// ranks(r) those of the sub-mesh containing r, row-major over shape().
TEST(DeviceMesh, SubMeshRanksAreOneSubMesh) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  EXPECT_EQ(mesh["tp"].size(), 2);
  EXPECT_EQ(mesh["tp"].ranks(), (std::vector<int>{0, 1}));
  EXPECT_EQ(mesh["dp"].ranks(), (std::vector<int>{0, 2}));
  EXPECT_EQ(mesh["tp"].ranks(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(mesh["dp"].ranks(3), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh.ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(mesh.ranks(2), (std::vector<int>{0, 1, 2, 3}));
  expect_error([&] { mesh["tp"].ranks(5); }, {"rank 5", "not in"});

  // Every view of a 2x3x4 mesh over explicit, shuffled ranks: ranks(r) is
  // the group structure's own answer, consistent with coordinate().
  World w24 = World::simulated(24);
  std::vector<int> perm(24);
  for (int i = 0; i < 24; ++i) perm[i] = (i * 7 + 5) % 24;
  DeviceMesh big(w24, {2, 3, 4}, perm, {"dp", "cp", "tp"});
  big.flatten({0, 2}, "dp_tp");
  const std::vector<DeviceMesh> views = {big,           big["dp"],          big["cp"],
                                         big["tp"],     big[{"dp", "tp"}],  big[{"cp", "tp"}],
                                         big["dp_tp"],  big[{"dp_tp", "cp"}], big.flatten({1, 2})};
  for (const DeviceMesh& v : views) {
    const Shape shape = v.shape();
    int64_t product = 1;
    for (int64_t s : shape) product *= s;
    EXPECT_EQ(v.size(), product) << v;
    EXPECT_EQ(static_cast<int64_t>(v.ranks().size()), v.size()) << v;
    EXPECT_EQ(v.ranks(), v.ranks(0)) << v;  // simulated: the sub-mesh of rank 0
    for (int r = 0; r < 24; ++r) {
      const std::vector<int> sub = v.ranks(r);
      ASSERT_EQ(static_cast<int64_t>(sub.size()), v.size()) << v << " rank " << r;
      EXPECT_NE(std::find(sub.begin(), sub.end(), r), sub.end()) << v << " rank " << r;
      for (size_t k = 0; k < sub.size(); ++k) {
        EXPECT_EQ(v.coordinate(sub[k])->vec(), unravel(static_cast<int64_t>(k), shape.vec()))
            << v << " rank " << r << " member " << k;
        EXPECT_EQ(v.ranks(sub[k]), sub) << v;  // the members share one sub-mesh
      }
    }
  }
}

TEST(DeviceMesh, FlattenFromManyThreads) {
  DeviceMesh mesh(World::simulated(16), {2, 2, 2, 2}, {"a", "b", "c", "d"});
  std::vector<std::thread> threads;
  std::vector<DeviceMesh> results(8, mesh);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        // Every thread flattens every pair; all must agree on the registry.
        for (int x = 0; x < 4; ++x) {
          for (int y = x + 1; y < 4; ++y) mesh.flatten({x, y});
        }
      }
      results[t] = mesh.flatten({1, 3});
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mesh.flattened_dims().size(), 6u);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
  EXPECT_EQ(results[0].names(), (std::vector<std::string>{"b_d"}));
}

TEST(DeviceMesh, EqualityHashAndCopy) {
  World world = World::simulated(8);
  DeviceMesh a(world, {2, 4}, {"x", "y"});
  DeviceMesh b(world, {2, 4}, {"x", "y"});
  DeviceMesh copy = a;
  EXPECT_EQ(copy, a);
  EXPECT_EQ(copy.hash(), a.hash());
  // Separately built meshes have separate roots (and registries).
  EXPECT_NE(a, b);
  EXPECT_NE(a["x"], a["y"]);
  EXPECT_NE(a["x"].hash(), a["y"].hash());
  EXPECT_EQ(a["y"], copy["y"]);
  EXPECT_EQ(a["y"].hash(), copy["y"].hash());
  EXPECT_NE(a, a["x"]);
  EXPECT_NE(a.flatten({0, 1}), a);

  std::unordered_set<size_t> hashes{a.hash(), a["x"].hash(), a["y"].hash(),
                                    a.flatten({0, 1}).hash(), b.hash()};
  EXPECT_EQ(hashes.size(), 5u);

  // Specs hold meshes and are copied on hot paths: copying must not allocate.
  DeviceMesh sub = a["y"];
  counting = true;
  allocations = 0;
  DeviceMesh c1 = a;
  DeviceMesh c2 = sub;
  c1 = c2;
  const bool same = c1 == sub;
  counting = false;
  EXPECT_EQ(allocations, 0);
  EXPECT_TRUE(same);
  // Control: the counter does see allocations.
  counting = true;
  const std::vector<int> ranks = c1.ranks();
  counting = false;
  EXPECT_GT(allocations, 0);
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3}));  // the sub-mesh of rank 0
  EXPECT_EQ(&c1.world(), &a.world());
  EXPECT_EQ(c1.world(), world);
}

TEST(DeviceMesh, SizesAndNames) {
  DeviceMesh mesh(World::simulated(24), {2, 3, 4}, {"dp", "cp", "tp"});
  EXPECT_EQ(mesh.size(), 24);
  EXPECT_EQ(mesh.size(0), 2);
  EXPECT_EQ(mesh.size(-1), 4);
  EXPECT_EQ(mesh.size(-3), 2);
  EXPECT_EQ(mesh.size("cp"), 3);
  EXPECT_EQ(mesh.names(), (std::vector<std::string>{"dp", "cp", "tp"}));
  EXPECT_EQ(mesh.group(23, -1), (std::vector<int>{20, 21, 22, 23}));
  expect_error([&] { mesh.size(3); }, {"mesh dim 3", "DeviceMesh([2, 3, 4], names=(dp, cp, tp))"});
  expect_error([&] { mesh.size(-4); }, {"mesh dim -4"});
  expect_error([&] { mesh.group(0, 5); }, {"mesh dim 5"});
  expect_error([&] { mesh.groups(-7); }, {"mesh dim -7"});
  expect_error([&] { mesh.size("pp"); }, {"'pp'", "(dp, cp, tp)"});
  EXPECT_EQ(DeviceMesh(World::simulated(4), {4}).names(), (std::vector<std::string>{""}));
  expect_error([&] { DeviceMesh(World::simulated(4), {4}).dim_index(""); }, {"no dim named"});
}

TEST(DeviceMesh, ToString) {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2}, {"dp", "cp", "tp"});
  EXPECT_EQ(mesh.to_string(), "DeviceMesh([2, 2, 2], names=(dp, cp, tp))");
  EXPECT_EQ(mesh["tp"].to_string(), "DeviceMesh([2], names=(tp))");
  EXPECT_EQ((mesh[{"dp", "tp"}].to_string()),
            "DeviceMesh([2, 2], names=(dp, tp))");
  EXPECT_EQ(mesh.flatten({0, 1}).to_string(), "DeviceMesh([4], names=(dp_cp))");
  EXPECT_EQ(DeviceMesh(world, {8}).to_string(), "DeviceMesh([8])");
  std::ostringstream os;
  os << mesh;
  EXPECT_EQ(os.str(), mesh.to_string());
}

TEST(DeviceMesh, ConstructorErrors) {
  World world = World::simulated(8);
  expect_error([&] { DeviceMesh(world, Shape{}); }, {"at least one dim"});
  expect_error([&] { DeviceMesh(world, {2, 0}); }, {"[2, 0]", "size 0"});
  expect_error([&] { DeviceMesh(world, {-2}); }, {"[-2]", "size -2"});
  try {
    DeviceMesh(world, {4, 4});
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "mesh [4, 4] needs 16 ranks but the world has 8");
  }
  // A product that overflows int64 is still reported, not wrapped around.
  expect_error([&] { DeviceMesh(world, {1LL << 40, 1LL << 40}); }, {"the world has 8"});
  expect_error([&] { DeviceMesh(world, {2, 2}, {"a"}); }, {"(a)", "[2, 2]"});
  expect_error([&] { DeviceMesh(world, {2, 2}, {"a", "b", "c"}); }, {"(a, b, c)"});
  expect_error([&] { DeviceMesh(world, {2, 2}, {"a", "a"}); }, {"'a'", "repeated"});
  expect_error([&] { DeviceMesh(world, {2, 2}, {"a", ""}); }, {"empty name", "dim 1"});

  expect_error([&] { DeviceMesh(world, {2, 2}, std::vector<int>{0, 1, 2}); },
               {"needs 4 ranks", "[0, 1, 2]"});
  expect_error([&] { DeviceMesh(world, {2, 2}, std::vector<int>{0, 1, 2, 9}); },
               {"rank 9", "world of 8"});
  expect_error([&] { DeviceMesh(world, {2, 2}, std::vector<int>{0, -1, 2, 3}); }, {"rank -1"});
  expect_error([&] { DeviceMesh(world, {2, 2}, std::vector<int>{0, 1, 1, 3}); },
               {"rank 1", "more than once", "[0, 1, 1, 3]"});
  expect_error([&] { DeviceMesh(world, {3, 3}, iota_ranks(9)); }, {"[3, 3]", "needs 9"});
  expect_error([&] { DeviceMesh(world, {2, 2}, std::vector<int>{0, 1, 2, 3}, {"a", "a"}); },
               {"'a'"});
  // A full world and a mesh of one rank are fine.
  EXPECT_EQ(DeviceMesh(world, {2, 2, 2}).size(), 8);
  DeviceMesh one(world, {1}, std::vector<int>{6});
  EXPECT_EQ(one.group(6, 0), (std::vector<int>{6}));
  EXPECT_FALSE(one.contains(0));
  // At most kMaxDims dims: the full 8-d mesh of 2^8 ranks works.
  DeviceMesh eight(World::simulated(256), Shape(kMaxDims, 2));
  EXPECT_EQ(eight.size(), 256);
  EXPECT_EQ(eight.group(255, 0), (std::vector<int>{127, 255}));
  EXPECT_EQ(eight.flatten({0, 1, 2, 3, 4, 5, 6, 7}).groups(0).size(), 1u);
}

TEST(DeviceMesh, ParseMeshShape) {
  EXPECT_EQ(parse_mesh_shape("2x2x2"), (Shape{2, 2, 2}));
  EXPECT_EQ(parse_mesh_shape("8"), (Shape{8}));
  EXPECT_EQ(parse_mesh_shape("4x16"), (Shape{4, 16}));
  EXPECT_EQ(parse_mesh_shape("1x1x1x1x1x1x1x1"), Shape(kMaxDims, 1));
  for (const std::string bad :
       {"2x", "x2", "0x2", "a", "", "2xx2", "2x-2", "-2", "2 x 2", "2X2", "2x2 ", "+2",
        "99999999999999999999", "1x1x1x1x1x1x1x1x1"}) {
    expect_error([&] { parse_mesh_shape(bad); },
                 {"expected a mesh shape like 2x4", "got '" + bad + "'"});
  }
}
