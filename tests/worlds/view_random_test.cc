// View ops on random layouts, on every world (see world_util.h): for any
// placements, uneven and empty shards included, full_tensor(op(x)) ==
// op(full) exactly, with random valid arguments for every view op.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;

namespace {

class ViewRandomTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// ---- random layouts ------------------------------------------------------------------

// Random ints in [lo, hi].
int64_t uniform_view(std::mt19937& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// A random shape with the same number of elements as `shape`: a few random
// merges of adjacent dims, splits of a dim into two factors, and inserted or
// removed size-1 dims; sometimes one size given as -1.
Shape random_reshape(std::mt19937& rng, const Shape& shape) {
  Shape s = shape;
  const int steps = 1 + static_cast<int>(rng() % 3);
  for (int step = 0; step < steps; ++step) {
    const int64_t nd = static_cast<int64_t>(s.size());
    switch (rng() % 4) {
      case 0:  // merge two adjacent dims
        if (nd >= 2) {
          const int64_t i = uniform_view(rng, 0, nd - 2);
          s[i] *= s[i + 1];
          s.erase(i + 1);
        }
        break;
      case 1:  // split a dim into p * (n / p)
        if (nd >= 1 && nd < kMaxDims) {
          const int64_t i = uniform_view(rng, 0, nd - 1);
          const int64_t n = s[i];
          int64_t p = n == 0 ? uniform_view(rng, 0, 3) : 1;
          if (n > 0) {
            std::vector<int64_t> divisors;
            for (int64_t k = 1; k <= n; ++k)
              if (n % k == 0) divisors.push_back(k);
            p = divisors[rng() % divisors.size()];
          }
          const int64_t q = n == 0 ? (p == 0 ? uniform_view(rng, 0, 3) : 0) : n / p;
          s[i] = q;
          s.insert(i, p);
        }
        break;
      case 2:  // insert a size-1 dim
        if (nd < kMaxDims) s.insert(uniform_view(rng, 0, nd), 1);
        break;
      default:  // remove a size-1 dim
        for (int64_t i = 0; i < nd; ++i)
          if (s[i] == 1) {
            s.erase(i);
            break;
          }
        break;
    }
  }
  if (!s.empty() && rng() % 3 == 0) {
    const int64_t i = uniform_view(rng, 0, static_cast<int64_t>(s.size()) - 1);
    int64_t others = 1;
    for (int64_t k = 0; k < static_cast<int64_t>(s.size()); ++k)
      if (k != i) others *= s[k];
    if (others != 0) s[i] = -1;
  }
  return s;
}

// A random dim of an nd-d tensor, negative half the time.
int64_t random_dim_view(std::mt19937& rng, int64_t nd) {
  const int64_t d = uniform_view(rng, 0, nd - 1);
  return rng() % 2 ? d : d - nd;
}

// One op of the random test: its description, the plain result(s) and the
// DTensor result(s).
struct ViewRandomCase {
  std::string what;
  std::vector<Tensor> want;
  std::function<std::vector<DTensor>()> got;
};

ViewRandomCase random_case(std::mt19937& rng, int which, const Tensor& x, const DTensor& d) {
  const Shape& shape = x.shape();
  const int64_t nd = x.dim();
  std::ostringstream what;
  auto one = [](DTensor v) { return std::vector<DTensor>{std::move(v)}; };
  switch (which) {
    case 0: {
      const Shape to = random_reshape(rng, shape);
      what << "view " << to;
      return {what.str(), {x.reshape(to)}, [=] { return one(view(d, to)); }};
    }
    case 1: {
      const Shape to = random_reshape(rng, shape);
      what << "reshape " << to;
      return {what.str(), {x.reshape(to)}, [=] { return one(reshape(d, to)); }};
    }
    case 2: {  // a view of non-contiguous shards
      const int64_t a = random_dim_view(rng, nd), b = random_dim_view(rng, nd);
      const Tensor tx = x.transpose(a, b);
      const Shape to = random_reshape(rng, tx.shape());
      what << "transpose " << a << "," << b << " then view " << to;
      return {what.str(), {tx.reshape(to)}, [=] { return one(view(transpose(d, a, b), to)); }};
    }
    case 3: {
      int64_t a = uniform_view(rng, 0, nd - 1), b = uniform_view(rng, a, nd - 1);
      if (rng() % 2) a -= nd;
      if (rng() % 2) b -= nd;
      what << "flatten " << a << "," << b;
      return {what.str(), {x.flatten(a, b)}, [=] { return one(flatten(d, a, b)); }};
    }
    case 4:
      what << "squeeze";
      return {what.str(), {x.squeeze()}, [=] { return one(squeeze(d)); }};
    case 5: {
      const int64_t a = random_dim_view(rng, nd);
      what << "squeeze " << a;
      return {what.str(), {x.squeeze(a)}, [=] { return one(squeeze(d, a)); }};
    }
    case 6: {
      const int64_t a = random_dim_view(rng, nd + 1);
      what << "unsqueeze " << a;
      return {what.str(), {x.unsqueeze(a)}, [=] { return one(unsqueeze(d, a)); }};
    }
    case 7: {
      std::vector<int64_t> p(static_cast<size_t>(nd));
      for (int64_t i = 0; i < nd; ++i) p[i] = i;
      std::shuffle(p.begin(), p.end(), rng);
      for (int64_t& v : p)
        if (rng() % 3 == 0) v -= nd;
      const DimVector dims(p);
      what << "permute " << dims;
      return {what.str(), {x.permute(dims)}, [=] { return one(permute(d, dims)); }};
    }
    case 8: {
      if (nd <= 2) {
        what << "t";
        return {what.str(), {x.t()}, [=] { return one(t(d)); }};
      }
      const int64_t a = random_dim_view(rng, nd), b = random_dim_view(rng, nd);
      what << "transpose " << a << "," << b;
      return {what.str(), {x.transpose(a, b)}, [=] { return one(transpose(d, a, b)); }};
    }
    case 9: {
      Shape to;
      const int64_t lead = uniform_view(rng, 0, 2);
      for (int64_t i = 0; i < lead; ++i) to.push_back(uniform_view(rng, 0, 3));
      for (int64_t i = 0; i < nd; ++i) {
        const int64_t k = uniform_view(rng, 0, 2);
        if (shape[i] == 1 && k == 0) to.push_back(uniform_view(rng, 0, 5));
        else to.push_back(k == 1 ? -1 : shape[i]);
      }
      what << "expand " << to;
      return {what.str(), {x.expand(to)}, [=] { return one(expand(d, to)); }};
    }
    case 10: {
      const int64_t a = random_dim_view(rng, nd), n = shape[a < 0 ? a + nd : a];
      const int64_t start = uniform_view(rng, 0, n), length = uniform_view(rng, 0, n - start);
      const int64_t given = start < n && rng() % 2 ? start - n : start;
      what << "narrow " << a << "," << given << "," << length;
      return {what.str(), {x.narrow(a, given, length)},
              [=] { return one(narrow(d, a, given, length)); }};
    }
    case 11: {
      const int64_t a = random_dim_view(rng, nd), n = shape[a < 0 ? a + nd : a];
      const int64_t start = uniform_view(rng, -n - 2, n + 2), end = uniform_view(rng, -n - 2, n + 2);
      const int64_t step = uniform_view(rng, 1, 3);
      what << "slice " << a << "," << start << "," << end << "," << step;
      return {what.str(), {x.slice(a, start, end, step)},
              [=] { return one(slice(d, a, start, end, step)); }};
    }
    case 12: {
      const int64_t a = random_dim_view(rng, nd), n = shape[a < 0 ? a + nd : a];
      if (n == 0) {
        what << "narrow " << a << ",0,0";
        return {what.str(), {x.narrow(a, 0, 0)}, [=] { return one(narrow(d, a, 0, 0)); }};
      }
      const int64_t index = uniform_view(rng, -n, n - 1);
      what << "select " << a << "," << index;
      return {what.str(), {x.select(a, index)}, [=] { return one(select(d, a, index)); }};
    }
    case 13: {
      const int64_t a = random_dim_view(rng, nd), n = uniform_view(rng, 1, 5);
      what << "chunk " << n << "," << a;
      return {what.str(), x.chunk(n, a), [=] { return chunk(d, n, a); }};
    }
    default: {
      const int64_t a = random_dim_view(rng, nd), size = uniform_view(rng, 1, 4);
      what << "split " << size << "," << a;
      return {what.str(), x.split(size, a), [=] { return split(d, size, a); }};
    }
  }
}

// Op-by-op: random placements (Partials included) on meshes 4, 2x2, 2x3, 2x4,
// random shapes of sizes 0-7 (uneven and empty shards), random valid
// arguments; the result must equal the plain op exactly.
TEST_F(ViewRandomTest, RandomLayoutsMatchThePlainOps) {
  std::mt19937 rng(2024);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  constexpr int kOps = 15;
  const int iterations = dtensor::testing::property_cases(300);
  for (int iter = 0; iter < iterations; ++iter) {
    const int which = iter % kOps;
    const Shape mesh_shape = meshes[rng() % meshes.size()];
    DeviceMesh mesh(world, mesh_shape);
    Shape shape;
    const int nd = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < nd; ++i) shape.push_back(rng() % 8);
    if (rng() % 2) shape[rng() % nd] = 1;  // squeeze, expand and size-1 groups
    const Placements pl = dtensor::testing::random_placement_pair(
                              rng, static_cast<int>(mesh_shape.size()), nd).first;
    const Tensor x = int_valued(shape, iter);
    const DTensor d = make_dtensor(x, mesh, pl, iter);
    const ViewRandomCase c = random_case(rng, which, x, d);
    const std::string what = c.what + " of " + to_string(shape) + " placed " + to_string(pl) +
                             " on " + mesh.to_string();
    std::vector<DTensor> got;
    try {
      got = c.got();
    } catch (const Error& e) {
      FAIL() << what << ": " << e.what();
    }
    ASSERT_EQ(got.size(), c.want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string piece = what + " (piece " + std::to_string(i) + ", got " +
                                to_string(got[i].placements()) + ")";
      ASSERT_EQ(got[i].shape(), c.want[i].shape()) << piece;
      for (int rank : got[i].local().ranks())
        ASSERT_EQ(got[i].to_local(rank).shape(), got[i].spec().extent_of_rank(rank)->local_shape)
            << piece << " rank " << rank;
      if (!dtensor::testing::takes_part(mesh)) continue;  // MPI: this rank is not in the mesh
      const Tensor full = got[i].full_tensor();
      ASSERT_TRUE(equal(full, c.want[i])) << piece << "\n" << full << "\n" << c.want[i];
    }
  }
}

// ---- degenerate calls ------------------------------------------------------------------

// A random call of a view or shape op that returns x as it is (a
// full-range cut, a view/reshape/expand to the same shape, a flatten of one
// dim, a squeeze of a dim that is not 1, an identity permute, repeat by
// ones, pad by nothing, a one-piece chunk or split), or cuts a dim to
// nothing. Each keeps x's placements.
ViewRandomCase random_degenerate_case(std::mt19937& rng, const Tensor& x, const DTensor& d) {
  const Shape& shape = x.shape();
  const int64_t nd = x.dim();
  const int64_t a = random_dim_view(rng, nd), n = shape[a < 0 ? a + nd : a];
  std::ostringstream what;
  auto one = [](DTensor v) { return std::vector<DTensor>{std::move(v)}; };
  switch (rng() % 12) {
    case 0:
      what << "slice " << a << ",0," << n << ",1";
      return {what.str(), {x.slice(a, 0, n, 1)}, [=] { return one(slice(d, a, 0, n, 1)); }};
    case 1: {
      const int64_t past = uniform_view(rng, 0, 3);
      what << "slice " << a << "," << -n - past << "," << n + past << ",1";
      return {what.str(), {x.slice(a, -n - past, n + past, 1)},
              [=] { return one(slice(d, a, -n - past, n + past, 1)); }};
    }
    case 2: {
      const int64_t start = n > 0 && rng() % 2 ? -n : 0;
      what << "narrow " << a << "," << start << "," << n;
      return {what.str(), {x.narrow(a, start, n)}, [=] { return one(narrow(d, a, start, n)); }};
    }
    case 3: {  // to nothing
      const int64_t at = uniform_view(rng, 0, n);
      what << "narrow " << a << "," << at << ",0 / slice " << a << "," << at << "," << at;
      return {what.str(), {x.narrow(a, at, 0), x.slice(a, at, at, 1)},
              [=] { return std::vector<DTensor>{narrow(d, a, at, 0), slice(d, a, at, at, 1)}; }};
    }
    case 4:
      what << "view/reshape to the same shape";
      return {what.str(), {x, x},
              [=] { return std::vector<DTensor>{view(d, shape), reshape(d, shape)}; }};
    case 5:
      what << "flatten " << a << "," << a << " / squeeze " << a;
      if (n == 1)
        return {what.str(), {x.flatten(a, a)}, [=] { return one(flatten(d, a, a)); }};
      return {what.str(), {x.flatten(a, a), x.squeeze(a)},
              [=] { return std::vector<DTensor>{flatten(d, a, a), squeeze(d, a)}; }};
    case 6: {
      Shape to = shape;
      for (int64_t& v : to)
        if (rng() % 2) v = -1;
      what << "expand " << to;
      return {what.str(), {x.expand(to)}, [=] { return one(expand(d, to)); }};
    }
    case 7: {
      DimVector dims;
      for (int64_t i = 0; i < nd; ++i) dims.push_back(rng() % 2 ? i : i - nd);
      what << "transpose " << a << "," << a << " / permute " << dims;
      return {what.str(), {x.transpose(a, a), x.permute(dims)},
              [=] { return std::vector<DTensor>{transpose(d, a, a), permute(d, dims)}; }};
    }
    case 8: {
      const DimVector ones(std::vector<int64_t>(static_cast<size_t>(nd), 1));
      what << "repeat " << ones << " / tile (1)";
      return {what.str(), {repeat(x, ones), tile(x, {1})},
              [=] { return std::vector<DTensor>{repeat(d, ones), tile(d, {1})}; }};
    }
    case 9: {
      const std::vector<int64_t> zeros(static_cast<size_t>(2 * nd), 0);
      what << "pad by zeros";
      return {what.str(), {pad(x, zeros)}, [=] { return one(pad(d, zeros)); }};
    }
    case 10:
      what << "chunk 1," << a;
      return {what.str(), x.chunk(1, a), [=] { return chunk(d, 1, a); }};
    default: {
      const int64_t size = std::max<int64_t>(n, 1) + uniform_view(rng, 0, 2);
      what << "split " << size << "," << a << " / split {" << n << "}," << a;
      return {what.str(), {x.split(size, a)[0], split(x, std::vector<int64_t>{n}, a)[0]}, [=] {
                return std::vector<DTensor>{split(d, size, a)[0],
                                            split(d, std::vector<int64_t>{n}, a)[0]};
              }};
    }
  }
}

// Degenerate calls on random layouts (Partials, split orders, uneven and
// empty shards) on meshes of 1 to 4 dims: no collective, x's placements,
// the plain result.
TEST_F(ViewRandomTest, DegenerateCallsAreFreeAndKeepTheLayout) {
  std::mt19937 rng(38);
  const std::vector<Shape> meshes = dtensor::testing::test_meshes(world);
  const int iterations = dtensor::testing::property_cases(300);
  for (int iter = 0; iter < iterations; ++iter) {
    const Shape mesh_shape = meshes[rng() % meshes.size()];
    DeviceMesh mesh(world, mesh_shape);
    Shape shape;
    const int nd = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < nd; ++i) shape.push_back(rng() % 8);
    if (rng() % 2) shape[rng() % nd] = 1;
    const Placements pl = dtensor::testing::with_random_orders(
        rng, dtensor::testing::random_placement_pair(rng, static_cast<int>(mesh_shape.size()), nd)
                 .first);
    const Tensor x = int_valued(shape, iter);
    const DTensor d = make_dtensor(x, mesh, pl, iter);
    const ViewRandomCase c = random_degenerate_case(rng, x, d);
    const std::string what = c.what + " of " + to_string(shape) + " placed " + to_string(pl) +
                             " on " + mesh.to_string();
    std::vector<DTensor> got;
    CommDebugMode comm;
    try {
      got = c.got();
    } catch (const Error& e) {
      FAIL() << what << ": " << e.what();
    }
    ASSERT_EQ(comm.total_count(), 0) << what;
    ASSERT_EQ(got.size(), c.want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string piece = what + " (piece " + std::to_string(i) + ", got " +
                                to_string(got[i].placements()) + ")";
      ASSERT_EQ(got[i].placements(), d.placements()) << piece;
      ASSERT_EQ(got[i].shape(), c.want[i].shape()) << piece;
      for (int rank : got[i].local().ranks())
        ASSERT_EQ(got[i].to_local(rank).shape(), got[i].spec().extent_of_rank(rank)->local_shape)
            << piece << " rank " << rank;
    }
    if (!dtensor::testing::takes_part(mesh)) continue;  // MPI: this rank is not in the mesh
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(equal(got[i].full_tensor(), c.want[i])) << what << " (piece " << i << ")";
  }
}

}  // namespace
