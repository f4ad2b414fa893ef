// clamp, tril/triu, gather, scatter, scatter_add, index_add and index_put
// on DTensors, on every world (see world_util.h):
//  - property cases: random meshes of 1-4 dims, random shapes (uneven and
//    empty shards), random placements (every Partial kind for the value
//    inputs, Shard/Replicate for index tensors); full_tensor() of the
//    DTensor op must equal the plain op on the full tensors exactly (the
//    data are integer-valued, so even the sums of Partial pieces and of
//    scatter_add / index_add are exact);
//  - layouts the rules promise to keep: no collective (CommDebugMode) and
//    the promised output placements, on every test mesh;
//  - gradients (float64) against finite differences of the op on full
//    tensors and against the same computation on replicated inputs.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "tensor/indexing.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::int_valued;
using dtensor::testing::make_dtensor;
using dtensor::testing::takes_part;

namespace {

using Inputs = std::vector<Tensor>;
using DInputs = std::vector<DTensor>;

int64_t uniform_indexing(std::mt19937& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// A case: full inputs, which of them are index tensors (never Partial),
// the plain op and the DTensor op.
struct IndexingCase {
  std::string what;
  Inputs full;
  std::vector<bool> is_index;
  std::function<Tensor(const Inputs&)> plain;
  std::function<DTensor(const DInputs&)> dist;
};

// A shape of min_nd..3 dims, sizes 0-9 (sometimes larger on big meshes).
Shape draw_shape(std::mt19937& rng, int64_t mesh_ranks, int min_nd = 1) {
  Shape s = dtensor::testing::random_shape_for(rng, mesh_ranks);
  while (static_cast<int>(s.size()) < min_nd) s.push_back(uniform_indexing(rng, 0, 9));
  while (s.size() > 3) s.erase(0);
  return s;
}

// An index shape for gather/scatter on `x` along dim: often x's size on
// the other dims (so that they can stay sharded), else smaller.
Shape gather_index_shape(std::mt19937& rng, const Shape& x, int64_t dim) {
  Shape s = x;
  for (size_t d = 0; d < s.size(); ++d) {
    if (static_cast<int64_t>(d) == dim) s[d] = uniform_indexing(rng, 0, 6);
    else if (rng() % 3 == 0) s[d] = uniform_indexing(rng, 0, x[d]);
  }
  return s;
}

IndexingCase draw_case(std::mt19937& rng, int64_t ranks, int kind, uint64_t seed) {
  IndexingCase c;
  switch (kind) {
    case 0: {  // clamp
      const Shape s = draw_shape(rng, ranks);
      c.full = {int_valued(s, seed)};
      c.is_index = {false};
      const int which = static_cast<int>(rng() % 3);
      const double lo = static_cast<double>(uniform_indexing(rng, -30, 10)), hi = lo + static_cast<double>(uniform_indexing(rng, -5, 40));
      c.what = std::string("clamp") + std::to_string(which);
      if (which == 0) {
        c.plain = [=](const Inputs& x) { return clamp(x[0], lo, hi); };
        c.dist = [=](const DInputs& x) { return clamp(x[0], lo, hi); };
      } else if (which == 1) {
        c.plain = [=](const Inputs& x) { return clamp_min(x[0], lo + 0.5); };
        c.dist = [=](const DInputs& x) { return clamp_min(x[0], lo + 0.5); };
      } else {
        c.plain = [=](const Inputs& x) { return clamp_max(x[0], hi); };
        c.dist = [=](const DInputs& x) { return clamp_max(x[0], hi); };
      }
      return c;
    }
    case 1: {  // tril / triu
      const Shape s = draw_shape(rng, ranks, 2);
      const int64_t diag = uniform_indexing(rng, -5, 5);
      c.full = {int_valued(s, seed)};
      c.is_index = {false};
      const bool lower = rng() % 2 == 0;
      c.what = std::string(lower ? "tril " : "triu ") + std::to_string(diag);
      c.plain = [=](const Inputs& x) { return lower ? tril(x[0], diag) : triu(x[0], diag); };
      c.dist = [=](const DInputs& x) { return lower ? tril(x[0], diag) : triu(x[0], diag); };
      return c;
    }
    case 2: {  // gather
      Shape s = draw_shape(rng, ranks);
      const int64_t dim = uniform_indexing(rng, 0, static_cast<int64_t>(s.size()) - 1);
      if (s[dim] == 0) s[dim] = 3;
      const Shape is = gather_index_shape(rng, s, dim);
      c.full = {int_valued(s, seed), Tensor::randint(0, s[dim], is, seed + 1)};
      c.is_index = {false, true};
      c.what = std::string("gather dim ") + std::to_string(dim);
      c.plain = [=](const Inputs& x) { return gather(x[0], dim, x[1]); };
      c.dist = [=](const DInputs& x) { return gather(x[0], dim, x[1]); };
      return c;
    }
    case 3:
    case 4:
    case 5: {  // scatter, scatter of a value, scatter_add
      Shape s = draw_shape(rng, ranks);
      const int64_t dim = uniform_indexing(rng, 0, static_cast<int64_t>(s.size()) - 1);
      if (s[dim] == 0) s[dim] = 3;
      const Shape is = gather_index_shape(rng, s, dim);
      Shape ss = is;
      for (int64_t& v : ss)
        if (rng() % 4 == 0) v += uniform_indexing(rng, 1, 2);
      c.full = {int_valued(s, seed), Tensor::randint(0, s[dim], is, seed + 1),
                int_valued(ss, seed + 2)};
      c.is_index = {false, true, false};
      c.what = std::string("scatter") + std::to_string(kind) + " dim " + std::to_string(dim);
      if (kind == 3) {
        c.plain = [=](const Inputs& x) { return scatter(x[0], dim, x[1], x[2]); };
        c.dist = [=](const DInputs& x) { return scatter(x[0], dim, x[1], x[2]); };
      } else if (kind == 4) {
        c.full.pop_back();
        c.is_index.pop_back();
        c.plain = [=](const Inputs& x) { return scatter(x[0], dim, x[1], -2.5); };
        c.dist = [=](const DInputs& x) { return scatter(x[0], dim, x[1], -2.5); };
      } else {
        c.plain = [=](const Inputs& x) { return scatter_add(x[0], dim, x[1], x[2]); };
        c.dist = [=](const DInputs& x) { return scatter_add(x[0], dim, x[1], x[2]); };
      }
      return c;
    }
    case 6: {  // index_add
      Shape s = draw_shape(rng, ranks);
      const int64_t dim = uniform_indexing(rng, 0, static_cast<int64_t>(s.size()) - 1);
      if (s[dim] == 0) s[dim] = 2;
      const int64_t m = uniform_indexing(rng, 0, 6);
      Shape ss = s;
      ss[dim] = m;
      const double alpha = rng() % 2 == 0 ? 1.0 : -2.0;
      c.full = {int_valued(s, seed), Tensor::randint(0, s[dim], {m}, seed + 1),
                int_valued(ss, seed + 2)};
      c.is_index = {false, true, false};
      c.what = std::string("index_add dim ") + std::to_string(dim);
      c.plain = [=](const Inputs& x) { return index_add(x[0], dim, x[1], x[2], alpha); };
      c.dist = [=](const DInputs& x) { return index_add(x[0], dim, x[1], x[2], alpha); };
      return c;
    }
    default: {  // index_put
      Shape s = draw_shape(rng, ranks);
      const int64_t nd = static_cast<int64_t>(s.size());
      const int64_t entries = uniform_indexing(rng, 1, nd);
      int64_t mask = 0;
      for (int64_t k = 0; k < entries; ++k)
        if (rng() % 3 != 0) mask |= int64_t{1} << k;
      if (mask == 0) mask = int64_t{1} << (entries - 1);
      const Shape b = rng() % 3 == 0 ? Shape{uniform_indexing(rng, 1, 3), uniform_indexing(rng, 0, 3)}
                                     : Shape{uniform_indexing(rng, 0, 5)};
      c.full = {int_valued(s, seed), Tensor()};
      c.is_index = {false, false};
      std::vector<std::optional<Shape>> shapes;
      for (int64_t k = 0; k < entries; ++k) {
        if (((mask >> k) & 1) == 0) {
          shapes.emplace_back();
          continue;
        }
        if (s[k] == 0) s[k] = 2;  // something to index
        Shape is = b;
        if (is.size() == 2 && rng() % 2 == 0) is[1] = 1;  // broadcast
        shapes.push_back(is);
        c.full.push_back(Tensor::randint(-s[k], s[k], is, seed + 3 + static_cast<uint64_t>(k)));
        c.is_index.push_back(true);
      }
      c.full[0] = int_valued(s, seed);
      Shape vs = dtensor::detail::advanced_index(s, shapes, "test").result;
      if (!vs.empty() && rng() % 3 == 0) vs.erase(0);
      if (!vs.empty() && rng() % 3 == 0) vs[rng() % vs.size()] = 1;
      c.full[1] = int_valued(vs, seed + 2);
      const bool acc = rng() % 2 == 0;
      c.what = std::string("index_put") + (acc ? " accumulate" : "") + " mask " + std::to_string(mask);
      c.plain = [=](const Inputs& x) {
        std::vector<std::optional<Tensor>> idx;
        size_t next = 2;
        for (int64_t k = 0; k < entries; ++k)
          idx.push_back(((mask >> k) & 1) ? std::optional<Tensor>(x[next++]) : std::nullopt);
        return index_put(x[0], idx, x[1], acc);
      };
      c.dist = [=](const DInputs& x) {
        std::vector<std::optional<DTensor>> idx;
        size_t next = 2;
        for (int64_t k = 0; k < entries; ++k)
          idx.push_back(((mask >> k) & 1) ? std::optional<DTensor>(x[next++]) : std::nullopt);
        return index_put(x[0], idx, x[1], acc);
      };
      return c;
    }
  }
}

// make_dtensor, except that Partial(max|min) pieces put the extreme on a
// different member for different elements (member (k + mesh dim) mod n for
// local element k; the others hold 7 less / more). With make_dtensor's
// pieces member 0 holds every extreme, which hides a rule that wrongly
// lets max pass through a sum (max_r(a_r + b_r) = max a + max b then).
DTensor make_input(const Tensor& full, const DeviceMesh& mesh, const Placements& pl,
                   uint64_t seed) {
  Placements base = pl;
  for (Placement& p : base)
    if (p.is_partial() && (p.reduce_op() == ReduceOp::Max || p.reduce_op() == ReduceOp::Min))
      p = Replicate();
  if (base == pl) return make_dtensor(full, mesh, pl, seed);
  LocalTensor local = distribute_tensor(full, mesh, base).local();
  for (size_t i = 0; i < pl.size(); ++i) {
    if (base[i] == pl[i]) continue;
    const int md = static_cast<int>(i);
    const double step = pl[i].reduce_op() == ReduceOp::Max ? -7.0 : 7.0;
    local = local.map([&](int rank, const Tensor& t) {
      const int64_t g = mesh.group_index(rank, md), n = mesh.size(md);
      std::vector<bool> holds(static_cast<size_t>(t.numel()));
      for (size_t k = 0; k < holds.size(); ++k)
        holds[k] = (static_cast<int64_t>(k) + md) % n == g;
      return where(Tensor::from_vector(holds, t.shape()), t, t + step);
    });
  }
  return DTensor(DTensorSpec(mesh, pl, full.shape(), full.dtype()), local);
}

constexpr int kKinds = 8;

class IndexingWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

TEST_F(IndexingWorldTest, MatchesPlainOpsOnRandomLayouts) {
  std::mt19937 rng(7);
  const int cases = dtensor::testing::property_cases(40 * kKinds);
  for (int iter = 0; iter < cases; ++iter) {
    const Shape mesh_shape = dtensor::testing::random_mesh(rng, world.size());
    DeviceMesh mesh(world, mesh_shape);
    const int mnd = static_cast<int>(mesh_shape.size());
    const IndexingCase c = draw_case(rng, mesh_shape.product(), iter % kKinds, 5 * static_cast<uint64_t>(iter));
    std::vector<Placements> pls;
    std::string what = c.what + " on " + mesh.to_string() + ":";
    for (size_t i = 0; i < c.full.size(); ++i) {
      const int64_t nd = std::max<int64_t>(c.full[i].dim(), 1);
      Placements pl = dtensor::testing::random_placement_pair(rng, mnd, nd).first;
      for (Placement& p : pl)
        if ((p.is_partial() && c.is_index[i]) || (p.is_shard() && c.full[i].dim() == 0))
          p = Replicate();
      pls.push_back(pl);
    }
    // A third of the cases give every value input the first one's layout,
    // so that joint Partials (x and src both P(max), ...) come up often.
    if (rng() % 3 == 0)
      for (size_t i = 1; i < c.full.size(); ++i) {
        if (c.is_index[i]) continue;
        pls[i] = pls[0];
        for (Placement& p : pls[i])
          if (p.is_shard() && p.dim() >= c.full[i].dim()) p = Replicate();
      }
    for (size_t i = 0; i < c.full.size(); ++i) {
      what += ' ';
      what += to_string(pls[i]);
      what += ' ';
      what += ::testing::PrintToString(c.full[i].shape());
    }
    if (!takes_part(mesh)) continue;
    DInputs in;
    for (size_t i = 0; i < c.full.size(); ++i)
      in.push_back(make_input(c.full[i], mesh, pls[i], iter + 11 * i));
    const Tensor want = c.plain(c.full);
    const DTensor got = c.dist(in);
    what += " -> ";
    what += to_string(got.placements());
    for (int rank : got.local().ranks())
      ASSERT_EQ(got.to_local(rank).shape(), got.spec().extent_of_rank(rank)->local_shape) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    const Tensor full = got.full_tensor();
    ASSERT_TRUE(equal(full, want)) << what << "\n" << full << "\n" << want;
  }
}

// ---- layouts kept without communication -----------------------------------------------

// Runs f on inputs with the given placements (same on every mesh dim),
// expecting no collective, output placement `out` on every mesh dim, and
// the plain op's value.
void expect_local(const DeviceMesh& mesh, const std::string& what, const Inputs& full,
                  const std::vector<Placement>& in, Placement out,
                  const std::function<Tensor(const Inputs&)>& plain,
                  const std::function<DTensor(const DInputs&)>& dist) {
  const size_t mnd = static_cast<size_t>(mesh.ndim());
  DInputs xs;
  std::string where = what + " on " + mesh.to_string() + ":";
  for (size_t i = 0; i < full.size(); ++i) {
    xs.push_back(make_input(full[i], mesh, Placements(mnd, in[i]), 3 + i));
    where += ' ';
    where += to_string(xs.back().placements());
  }
  std::optional<DTensor> got;
  {
    CommDebugMode comm;
    got = dist(xs);
    EXPECT_EQ(comm.total_count(), 0) << where << "\n" << comm.table();
  }
  EXPECT_EQ(got->placements(), Placements(mnd, out)) << where << " gave "
                                                     << to_string(got->placements());
  EXPECT_TRUE(equal(got->full_tensor(), plain(full))) << where;
}

TEST_F(IndexingWorldTest, PromisedLayoutsNeedNoCommunication) {
  const Placement r = Replicate();
  const ReduceOp all[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  for (const Shape& ms : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, ms);
    if (!takes_part(mesh)) continue;
    // Sizes that split unevenly (and emptily on the bigger meshes).
    const Shape s{5, 7, 3};
    const Tensor x = int_valued(s, 1);
    // clamp: shards, Partial(max|min).
    auto cl = [](const auto& v) { return clamp(v[0], -10, 20.5); };
    for (int64_t d = 0; d < 3; ++d) expect_local(mesh, "clamp", {x}, {Shard(d)}, Shard(d), cl, cl);
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
      expect_local(mesh, "clamp", {x}, {Partial(op)}, Partial(op), cl, cl);
    // tril/triu: every dim (the matrix dims with offsets), every Partial.
    auto tl = [](const auto& v) { return tril(v[0], 1); };
    auto tu = [](const auto& v) { return triu(v[0], -2); };
    for (int64_t d = 0; d < 3; ++d) {
      expect_local(mesh, "tril", {x}, {Shard(d)}, Shard(d), tl, tl);
      expect_local(mesh, "triu", {x}, {Shard(d)}, Shard(d), tu, tu);
    }
    for (ReduceOp op : all) {
      expect_local(mesh, "tril", {x}, {Partial(op)}, Partial(op), tl, tl);
      expect_local(mesh, "triu", {x}, {Partial(op)}, Partial(op), tu, tu);
    }
    // gather along dim 1: dims 0 and 2 sharded alike; the index sharded on
    // dim 1 against a replicated x; every Partial with a replicated index;
    const Tensor gi = Tensor::randint(0, 7, {5, 9, 3}, 2);
    auto ga = [](const auto& v) { return gather(v[0], 1, v[1]); };
    for (int64_t d : {0, 2}) expect_local(mesh, "gather", {x, gi}, {Shard(d), Shard(d)}, Shard(d), ga, ga);
    expect_local(mesh, "gather", {x, gi}, {r, Shard(1)}, Shard(1), ga, ga);
    for (ReduceOp op : all) expect_local(mesh, "gather", {x, gi}, {Partial(op), r}, Partial(op), ga, ga);
    // x sharded on the gathered dim (7 over the mesh: uneven, some empty),
    // the index whole: a masked Partial(sum), as PyTorch's.
    expect_local(mesh, "gather", {x, gi}, {Shard(1), r}, Partial(), ga, ga);
    // scatter / scatter_add along dim 1 with index and src of x's sizes on dims 0, 2.
    const Tensor si = Tensor::randint(0, 7, {5, 4, 3}, 3);
    const Tensor src = int_valued({5, 4, 3}, 4);
    auto sc = [](const auto& v) { return scatter(v[0], 1, v[1], v[2]); };
    auto sa = [](const auto& v) { return scatter_add(v[0], 1, v[1], v[2]); };
    auto sv = [](const auto& v) { return scatter(v[0], 1, v[1], 4); };
    for (int64_t d : {0, 2}) {
      expect_local(mesh, "scatter", {x, si, src}, {Shard(d), Shard(d), Shard(d)}, Shard(d), sc, sc);
      expect_local(mesh, "scatter_add", {x, si, src}, {Shard(d), Shard(d), Shard(d)}, Shard(d), sa, sa);
      expect_local(mesh, "scatter value", {x, si}, {Shard(d), Shard(d)}, Shard(d), sv, sv);
    }
    for (ReduceOp op : all) {
      expect_local(mesh, "scatter", {x, si, src}, {Partial(op), r, Partial(op)}, Partial(op), sc, sc);
      if (op == ReduceOp::Sum || op == ReduceOp::Avg)
        expect_local(mesh, "scatter_add", {x, si, src}, {Partial(op), r, Partial(op)}, Partial(op), sa, sa);
      else
        expect_local(mesh, "scatter value", {x, si}, {Partial(op), r}, Partial(op), sv, sv);
    }
    expect_local(mesh, "scatter value", {x, si}, {Partial(ReduceOp::Avg), r},
                 Partial(ReduceOp::Avg), sv, sv);
    // scatter_add split over the ranks along dim: each adds its part of src.
    const Placement psum = Partial(ReduceOp::Sum);
    expect_local(mesh, "scatter_add", {x, si, src}, {psum, Shard(1), Shard(1)}, psum, sa, sa);
    // A replicated amount added to every piece keeps max and min.
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
      expect_local(mesh, "scatter_add", {x, si, src}, {Partial(op), r, r}, Partial(op), sa, sa);
    // index_add along dim 1: dims 0 and 2 with source sharded alike; Partial(sum|avg).
    const Tensor ai = Tensor::from_vector(std::vector<int64_t>{6, 0, 6, 2});
    const Tensor source = int_valued({5, 4, 3}, 5);
    auto ia = [](const auto& v) { return index_add(v[0], 1, v[1], v[2], 3); };
    for (int64_t d : {0, 2})
      expect_local(mesh, "index_add", {x, ai, source}, {Shard(d), r, Shard(d)}, Shard(d), ia, ia);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      expect_local(mesh, "index_add", {x, ai, source}, {Partial(op), r, Partial(op)}, Partial(op), ia, ia);
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
      expect_local(mesh, "index_add", {x, ai, source}, {Partial(op), r, r}, Partial(op), ia, ia);
    expect_local(mesh, "index_add", {x, ai, source}, {psum, Shard(0), Shard(1)}, psum, ia, ia);
    // index_put x[:, i] = v: dims 0 and 2 keep their shards, with values
    // sharded alike (dims 0 and 2 of x[:, i] of shape (5, 4, 3)) or
    // replicated where it broadcasts; every Partial without accumulating.
    const Tensor pi = Tensor::from_vector(std::vector<int64_t>{-1, 0, 3, 0});
    const Tensor values = int_valued({5, 4, 3}, 6);
    const Tensor row = int_valued({4, 1}, 7);
    auto put = [](bool acc) {
      return [acc](const auto& v) {
        using T = std::decay_t<decltype(v[0])>;
        return index_put(v[0], {std::nullopt, std::optional<T>(v[2])}, v[1], acc);
      };
    };
    for (bool acc : {false, true}) {
      for (int64_t d : {0, 2}) {
        expect_local(mesh, "index_put", {x, values, pi}, {Shard(d), Shard(d), r}, Shard(d),
                     put(acc), put(acc));
        expect_local(mesh, "index_put broadcast", {x, row, pi}, {Shard(d), r, r}, Shard(d),
                     put(acc), put(acc));
      }
      for (ReduceOp op : all)
        if (!acc || op == ReduceOp::Sum || op == ReduceOp::Avg)
          expect_local(mesh, "index_put", {x, values, pi}, {Partial(op), Partial(op), r},
                       Partial(op), put(acc), put(acc));
        else  // adding replicated values to every piece keeps max and min
          expect_local(mesh, "index_put", {x, values, pi}, {Partial(op), r, r}, Partial(op),
                       put(acc), put(acc));
    }
  }
}

// Partials an op does not commute with are reduced first: the value is
// right, and it took a collective.
void expect_reduced(const DeviceMesh& mesh, const std::string& what, const Inputs& full,
                    const std::vector<Placement>& in,
                    const std::function<Tensor(const Inputs&)>& plain,
                    const std::function<DTensor(const DInputs&)>& dist) {
  const size_t mnd = static_cast<size_t>(mesh.ndim());
  DInputs xs;
  std::string where = what + " on " + mesh.to_string() + ":";
  for (size_t i = 0; i < full.size(); ++i) {
    xs.push_back(make_input(full[i], mesh, Placements(mnd, in[i]), 5 + i));
    where += ' ';
    where += to_string(xs.back().placements());
  }
  std::optional<DTensor> got;
  {
    CommDebugMode comm;
    got = dist(xs);
    EXPECT_GT(comm.total_count(), 0) << where;
  }
  for (const Placement& p : got->placements())
    EXPECT_TRUE(!p.is_partial() || p.reduce_op() == in[0].reduce_op()) << where;
  EXPECT_TRUE(equal(got->full_tensor(), plain(full))) << where;
}

TEST_F(IndexingWorldTest, OtherPartialsAreReducedFirst) {
  const Placement r = Replicate();
  const Placement sum = Partial(ReduceOp::Sum), avg = Partial(ReduceOp::Avg);
  const Placement max = Partial(ReduceOp::Max), min = Partial(ReduceOp::Min);
  for (const Shape& ms : dtensor::testing::test_meshes(world)) {
    DeviceMesh mesh(world, ms);
    if (!takes_part(mesh)) continue;
    const Tensor x = int_valued({4, 6, 3}, 8), src = int_valued({4, 2, 3}, 9);
    const Tensor si = Tensor::randint(0, 6, {4, 2, 3}, 10);
    const Tensor ai = Tensor::from_vector(std::vector<int64_t>{5, 5});
    auto cl = [](const auto& v) { return clamp(v[0], -3, 4); };
    auto sv = [](const auto& v) { return scatter(v[0], 1, v[1], 4); };
    auto sa = [](const auto& v) { return scatter_add(v[0], 1, v[1], v[2]); };
    auto ia = [](const auto& v) { return index_add(v[0], 1, v[1], v[2]); };
    auto ip = [](const auto& v) {
      using T = std::decay_t<decltype(v[0])>;
      return index_put(v[0], {std::nullopt, std::optional<T>(v[1])}, v[2], true);
    };
    for (Placement p : {sum, avg}) expect_reduced(mesh, "clamp", {x}, {p}, cl, cl);
    for (Placement p : {max, min}) {
      expect_reduced(mesh, "scatter_add", {x, si, src}, {p, r, p}, sa, sa);
      expect_reduced(mesh, "index_add", {x, ai, src}, {p, r, p}, ia, ia);
      expect_reduced(mesh, "index_put accumulate", {x, ai, src}, {p, r, p}, ip, ip);
    }
    expect_reduced(mesh, "scatter value", {x, si}, {sum, r}, sv, sv);
  }
}

TEST_F(IndexingWorldTest, ErrorsNameTheOpAndPlacements) {
  DeviceMesh mesh(world, {2});
  if (!takes_part(mesh)) return;
  const DTensor x = distribute_tensor(Tensor::zeros({4, 3}), mesh, {Shard(0)});
  const DTensor bad = distribute_tensor(Tensor::zeros({4, 3}), mesh, {Replicate()});
  dtensor::testing::expect_error([&] { gather(x, 1, bad); }, {"gather", "int64", "S(0)"});
  dtensor::testing::expect_error([&] { tril(distribute_tensor(Tensor::zeros({4}), mesh, {Shard(0)})); },
                                 {"tril", "at least 2 dims"});
  dtensor::testing::expect_error([&] { clamp(x, std::nullopt, std::nullopt); }, {"clamp"});
  const DTensor mask = distribute_tensor(Tensor::zeros({4}, DType::Bool), mesh, {Replicate()});
  dtensor::testing::expect_error([&] { index_put(x, {mask}, bad); },
                                 {"index_put", "int64", "bool"});
  const DTensor idx = distribute_tensor(Tensor::from_vector(std::vector<int64_t>{4}), mesh, {Replicate()});
  const DTensor v = distribute_tensor(Tensor::zeros({1, 3}), mesh, {Replicate()});
  dtensor::testing::expect_error([&] { index_add(x, 0, idx, v); },
                                 {"index_add", "index 4", "size 4"});
}

// ---- gradients ---------------------------------------------------------------------------

using IndexingOp = std::function<DTensor(const std::vector<DTensor>&)>;

// f = op(inputs) * w (w random, replicated) against finite differences and
// against replicated inputs (index tensors do not require grad).
void check_grads(const IndexingOp& op, const std::vector<DTensor>& inputs, uint64_t seed,
                 const std::string& what) {
  using dtensor::testing::check_gradients;
  using dtensor::testing::check_matches_replicated;
  std::ostringstream where;
  where << what;
  for (const DTensor& x : inputs) where << " " << x.spec().to_string();
  EXPECT_EQ(check_gradients(op, inputs, seed), "") << where.str();
  EXPECT_EQ(check_matches_replicated(op, inputs, seed + 1, 1e-12, 1e-12), "") << where.str();
}

DTensor value_input(const Shape& s, const DeviceMesh& mesh, const Placements& pl, uint64_t seed) {
  DTensor x = make_input(Tensor::randn(s, seed, 0, DType::Float64), mesh, pl, seed + 1);
  x.requires_grad_();
  return x;
}

DTensor index_input(const Tensor& t, const DeviceMesh& mesh, const Placements& pl) {
  return distribute_tensor(t, mesh, pl);
}

// Each position along dim of every other index gets distinct values (a
// rotated arange), so that scatter and index_put write each element once
// (their gradients with duplicates follow PyTorch's formula, not the
// last-write semantics finite differences see).
Tensor distinct_index(const Shape& index_shape, int64_t dim, int64_t n, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(index_shape.product()));
  const Shape strides = contiguous_strides(index_shape);
  for (size_t k = 0; k < v.size(); ++k) {
    const int64_t at = static_cast<int64_t>(k);
    const int64_t i = (at / strides[dim]) % index_shape[dim];
    // i + c (mod n) with c fixed along dim: distinct along dim.
    const int64_t c = (at - i * strides[dim] + static_cast<int64_t>(seed)) % 7;
    v[k] = (i + c) % n;
  }
  return Tensor::from_vector(v, index_shape);
}

TEST_F(IndexingWorldTest, Gradients) {
  std::mt19937 rng(11);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    const int mnd = mesh.ndim();
    for (int k = 0; k < dtensor::testing::property_cases(1); ++k) {
      auto pl = [&](int64_t nd, bool partial = true) {
        return dtensor::testing::random_input_placements(rng, mnd, nd, partial);
      };
      auto ipl = [&](int64_t nd) { return pl(nd, false); };
      const uint64_t seed = rng() % 1000;
      const Placements p3a = pl(3), p3b = pl(3), i3 = ipl(3), p2 = pl(2), i1 = ipl(1);
      const int64_t diag = uniform_indexing(rng, -2, 2);
      if (!takes_part(mesh)) continue;
      const std::string m = std::string(" mesh ") + to_string(ms);
      // clamp (bounds off the data's grid of randn values).
      check_grads([](const auto& v) { return clamp(v[0], -0.3, 0.45); },
                  {value_input({3, 2, 2}, mesh, p3a, seed)}, seed, "clamp" + m);
      check_grads([](const auto& v) { return clamp_min(v[0], 0.1); },
                  {value_input({4, 3}, mesh, p2, seed)}, seed, "clamp_min" + m);
      check_grads([diag](const auto& v) { return tril(v[0], diag); },
                  {value_input({2, 3, 3}, mesh, p3a, seed)}, seed, "tril" + m);
      check_grads([diag](const auto& v) { return triu(v[0], diag); },
                  {value_input({3, 4}, mesh, p2, seed)}, seed, "triu" + m);
      // gather (duplicates fine: its backward adds).
      const Tensor gi = Tensor::randint(0, 3, {3, 2, 2}, seed);
      check_grads([](const auto& v) { return gather(v[0], 1, v[1]); },
                  {value_input({3, 3, 2}, mesh, p3a, seed), index_input(gi, mesh, i3)}, seed,
                  "gather" + m);
      // scatter / scatter_add with src bigger than index on dim 2.
      const Tensor si = distinct_index({3, 2, 2}, 1, 3, seed);
      check_grads([](const auto& v) { return scatter(v[0], 1, v[2], v[1]); },
                  {value_input({3, 3, 2}, mesh, p3a, seed), value_input({3, 2, 3}, mesh, p3b, seed + 5),
                   index_input(si, mesh, i3)},
                  seed, "scatter" + m);
      check_grads([](const auto& v) { return scatter_add(v[0], 1, v[2], v[1]); },
                  {value_input({3, 3, 2}, mesh, p3a, seed), value_input({3, 2, 3}, mesh, p3b, seed + 5),
                   index_input(Tensor::randint(0, 3, {3, 2, 2}, seed), mesh, i3)},
                  seed, "scatter_add" + m);
      check_grads([](const auto& v) { return scatter(v[0], 0, v[1], 2.0); },
                  {value_input({3, 3, 2}, mesh, p3a, seed), index_input(si, mesh, i3)}, seed,
                  "scatter value" + m);
      // index_add with repeated indices.
      const Tensor ai = Tensor::from_vector(std::vector<int64_t>{2, 0, 2});
      check_grads([](const auto& v) { return index_add(v[0], 1, v[2], v[1], -1.5); },
                  {value_input({2, 4, 2}, mesh, p3a, seed), value_input({2, 3, 2}, mesh, p3b, seed + 5),
                   index_input(ai, mesh, i1)},
                  seed, "index_add" + m);
      // index_put x[:, i] = v, distinct (non-accumulating) and repeated (accumulating).
      const Tensor pi = Tensor::from_vector(std::vector<int64_t>{3, -4, 1});
      const Tensor ri = Tensor::from_vector(std::vector<int64_t>{1, 1, -3});
      for (bool acc : {false, true})
        check_grads([acc](const auto& v) { return index_put(v[0], {std::nullopt, v[2]}, v[1], acc); },
                    {value_input({2, 4, 3}, mesh, p3a, seed), value_input({3, 3}, mesh, p2, seed + 5),
                     index_input(acc ? ri : pi, mesh, i1)},
                    seed, std::string("index_put") + (acc ? " accumulate" : "") + m);
    }
  }
}

}  // namespace
