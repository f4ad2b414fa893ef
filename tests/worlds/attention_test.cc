// scaled_dot_product_attention on DTensors, on every world (see
// world_util.h): random meshes, shapes (uneven and empty shards, broadcast
// batch dims, L != S) and placements (every Partial kind) against the plain
// op on the full tensors; the layouts the rule keeps without communication
// (heads, query sequence with the causal mask at each shard's global
// offset, value columns, Partial values) checked with CommDebugMode and by
// their output placements; and gradients against finite differences and
// against the same computation on replicated inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "dtensor/debug.h"
#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "tensor/attention.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::make_dtensor;
using dtensor::testing::small_valued;

namespace {

class AttentionTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Random placements of a tensor of `ndim` dims: Shard/Replicate and, when
// allowed, Partials of one kind (or sum mixed with avg).
Placements random_placements(std::mt19937& rng, const DeviceMesh& mesh, int64_t ndim,
                             bool allow_partial) {
  return dtensor::testing::random_input_placements(rng, mesh.ndim(), ndim, allow_partial);
}

// q [batch..., L, E], k [batch'..., S, E], v [batch''..., S, Ev], each
// input dropping leading batch dims or having size 1 in some (broadcast).
struct Shapes {
  Shape q, k, v, mask;
};

Shapes random_shapes(std::mt19937& rng, int64_t max_seq) {
  Shape batch;
  const int nb = static_cast<int>(rng() % 3);
  for (int i = 0; i < nb; ++i) batch.push_back(rng() % 5);
  const int64_t L = rng() % (max_seq + 1), S = rng() % 7, E = 1 + rng() % 4, Ev = rng() % 4;
  auto make = [&](int64_t r, int64_t c) {
    Shape s;
    const size_t skip = rng() % 4 == 0 ? rng() % (batch.size() + 1) : 0;
    for (size_t i = skip; i < batch.size(); ++i) s.push_back(rng() % 4 == 0 ? 1 : batch[i]);
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  Shapes s{make(L, E), make(S, E), make(S, Ev), {}};
  // The mask broadcasts to the scores [batch..., L, S] of q, k and v: each
  // of its dims is the scores' or 1 (L too, at times), leading ones dropped.
  Shape scores = detail::sdpa_output_shape("test", s.q, DType::Float32, s.k, DType::Float32, s.v,
                                           DType::Float32, nullptr, DType::Bool, 0.0, false);
  scores.back() = S;
  const size_t skip = rng() % 4 == 0 ? rng() % (scores.size() - 1) : 0;
  for (size_t i = skip; i < scores.size(); ++i)
    s.mask.push_back(i + 1 < scores.size() && rng() % 4 == 0 ? 1 : scores[i]);
  return s;
}

std::string describe(const Shapes& s, const Placements* pl, int n) {
  const char* names[] = {"q", "k", "v", "mask"};
  std::string out;
  const Shape* shapes[] = {&s.q, &s.k, &s.v, &s.mask};
  for (int i = 0; i < n; ++i)
    out += std::string(" ") + names[i] + to_string(*shapes[i]) + " " + to_string(pl[i]);
  return out;
}

}  // namespace

// Every layout on random meshes of 1-4 dims against the plain op on the
// full tensors. The data are multiples of 1/8 so that Partial pieces add up
// exactly; the tolerance covers the kernels' own rounding (a shard's
// products may be blocked differently): float64 1e-10, float32 1e-4.
// Attention is linear in v, so a Partial(sum) v stays partial, and the
// tolerance also allows partial_sum_rounding (layout_util.h): a float32 case
// with v in 64 pieces was 2.4e-4 from the float64 result, where the plain op
// was 4e-7 from it.
TEST_F(AttentionTest, RandomLayoutsMatchThePlainOp) {
  std::mt19937 rng(4242);
  const int iterations = dtensor::testing::property_cases(240);
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, dtensor::testing::random_mesh(rng, world.size()));
    const DType dtype = iter % 2 == 0 ? DType::Float64 : DType::Float32;
    const Shapes s = random_shapes(rng, 9);
    const int kind = static_cast<int>(rng() % 4);  // none, causal, bool mask, float mask
    const Tensor q = small_valued(s.q, iter).to(dtype), k = small_valued(s.k, iter + 1).to(dtype);
    const Tensor v = small_valued(s.v, iter + 2).to(dtype);
    Tensor mask;
    if (kind == 2) mask = lt(Tensor::rand(s.mask, iter + 3), 0.7);
    if (kind == 3) mask = small_valued(s.mask, iter + 3).to(dtype);
    Placements pl[4];
    for (int i = 0; i < 3; ++i)
      pl[i] = random_placements(rng, mesh, static_cast<int64_t>((i == 0 ? s.q : i == 1 ? s.k : s.v).size()), true);
    if (kind >= 2) pl[3] = random_placements(rng, mesh, static_cast<int64_t>(s.mask.size()), kind == 3);
    const std::optional<double> scale = rng() % 3 == 0 ? std::optional<double>(0.25) : std::nullopt;
    const std::string what = "iter " + std::to_string(iter) + " mesh " + mesh.to_string() +
                             " kind " + std::to_string(kind) + describe(s, pl, kind >= 2 ? 4 : 3);
    const DTensor dq = make_dtensor(q, mesh, pl[0], iter), dk = make_dtensor(k, mesh, pl[1], iter + 1);
    const DTensor dv = make_dtensor(v, mesh, pl[2], iter + 2);
    std::optional<DTensor> dmask;
    if (kind >= 2) dmask = make_dtensor(mask, mesh, pl[3], iter + 3);
    const Tensor want = scaled_dot_product_attention(q, k, v, mask, 0.0, kind == 1, scale);
    const DTensor got = scaled_dot_product_attention(dq, dk, dv, dmask, 0.0, kind == 1, scale);
    for (int rank : got.local().ranks())
      ASSERT_EQ(got.to_local(rank).shape(), got.spec().extent_of_rank(rank)->local_shape) << what;
    if (!dtensor::testing::takes_part(mesh)) continue;  // MPI: this rank is not in the mesh
    const Tensor full = got.full_tensor();
    const double tol = std::max(dtype == DType::Float64 ? 1e-10 : 1e-4,
                                dtensor::testing::partial_sum_rounding(v, mesh, pl[2]));
    ASSERT_EQ(full.dtype(), want.dtype()) << what;
    ASSERT_TRUE(allclose(full, want, tol, tol)) << what << "\n" << full << "\n" << want;
  }
}

// The layouts the rule keeps: no collective runs, the output has the
// promised placements, and the values equal the plain op's. Heads sharded
// on 2-d meshes (with a mask broadcast over heads), the query sequence
// sharded with the causal mask on uneven and empty shards (L = 7, 2, 0 over
// 4 ranks, nested over two mesh dims, L != S), value columns, and a
// Partial(sum|avg) value.
TEST_F(AttentionTest, KeptLayoutsNeedNoCommunication) {
  struct Case {
    Shape mesh;
    Shape q, k, v;
    Placements pq, pk, pv;
    bool causal;
    int mask;  // 0 none, 1 bool [B, 1, L, S], 2 float [L, S]
    Placements pmask;
    Placements out;
  };
  const Placement R = Replicate();
  const std::vector<Case> cases = {
      // Tensor-parallel heads (dim 1) and batch (dim 0) on 2-d meshes.
      {{2, 2}, {3, 6, 5, 4}, {3, 6, 4, 4}, {3, 6, 4, 3}, {Shard(1), Shard(0)},
       {Shard(1), Shard(0)}, {Shard(1), Shard(0)}, false, 0, {}, {Shard(1), Shard(0)}},
      {{2, 3}, {3, 6, 5, 4}, {3, 6, 7, 4}, {3, 6, 7, 3}, {Shard(0), Shard(1)},
       {Shard(0), Shard(1)}, {Shard(0), Shard(1)}, true, 0, {}, {Shard(0), Shard(1)}},
      {{2, 4}, {3, 5, 6, 2}, {3, 5, 4, 2}, {3, 5, 4, 2}, {Shard(1), Shard(0)},
       {Shard(1), Shard(0)}, {Shard(1), Shard(0)}, false, 1, {R, Shard(0)}, {Shard(1), Shard(0)}},
      // Query sequence, causal: L = 7 over 4 (2, 2, 2, 1), L = 2 (1, 1, 0, 0), L = 0.
      {{4}, {2, 7, 3}, {2, 7, 3}, {2, 7, 2}, {Shard(1)}, {R}, {R}, true, 0, {}, {Shard(1)}},
      {{4}, {2, 2, 3}, {2, 5, 3}, {2, 5, 2}, {Shard(1)}, {R}, {R}, true, 0, {}, {Shard(1)}},
      {{4}, {2, 0, 3}, {2, 5, 3}, {2, 5, 2}, {Shard(1)}, {R}, {R}, true, 0, {}, {Shard(1)}},
      // Long enough for several of the kernel's causal row blocks per shard (38, 38, 38, 36).
      {{4}, {1, 150, 2}, {1, 140, 2}, {1, 140, 3}, {Shard(1)}, {R}, {R}, true, 0, {}, {Shard(1)}},
      // L != S (9 queries, 4 keys), nested over both mesh dims of 2x3 (uneven, empty).
      {{2, 3}, {9, 3}, {4, 3}, {4, 5}, {Shard(0), Shard(0)}, {R, R}, {R, R}, true, 0, {},
       {Shard(0), Shard(0)}},
      // Heads on one mesh dim, query sequence on the other, causal.
      {{2, 4}, {2, 4, 11, 2}, {2, 4, 6, 2}, {2, 4, 6, 3}, {Shard(1), Shard(2)},
       {Shard(1), R}, {Shard(1), R}, true, 0, {}, {Shard(1), Shard(2)}},
      // Query sequence with a float mask sharded alike on its L dim.
      {{4}, {6, 2}, {5, 2}, {5, 2}, {Shard(0)}, {R}, {R}, false, 2, {Shard(0)}, {Shard(0)}},
      // Value columns; a Partial value against replicated q, k.
      {{4}, {2, 5, 3}, {2, 4, 3}, {2, 4, 6}, {R}, {R}, {Shard(2)}, false, 0, {}, {Shard(2)}},
      {{2, 2}, {5, 3}, {4, 3}, {4, 2}, {R, Shard(0)}, {R, R}, {Partial(), R}, true, 0, {},
       {Partial(), Shard(0)}},
      {{2}, {5, 3}, {4, 3}, {4, 2}, {R}, {R}, {Partial(ReduceOp::Avg)}, false, 0, {},
       {Partial(ReduceOp::Avg)}},
  };
  int seed = 0;
  for (const Case& c : cases) {
    if (c.mesh.product() > world.size()) continue;
    DeviceMesh mesh(world, c.mesh);
    const Tensor q = small_valued(c.q, seed++).to(DType::Float64);
    const Tensor k = small_valued(c.k, seed++).to(DType::Float64);
    const Tensor v = small_valued(c.v, seed++).to(DType::Float64);
    const int64_t L = c.q[c.q.size() - 2], S = c.k[c.k.size() - 2];
    Tensor mask;
    if (c.mask == 1) mask = lt(Tensor::rand({c.q[0], 1, L, S}, seed++), 0.7);
    if (c.mask == 2) mask = small_valued({L, S}, seed++).to(DType::Float64);
    const DTensor dq = make_dtensor(q, mesh, c.pq, 1), dk = make_dtensor(k, mesh, c.pk, 2);
    const DTensor dv = make_dtensor(v, mesh, c.pv, 3);
    std::optional<DTensor> dmask;
    if (c.mask != 0) dmask = make_dtensor(mask, mesh, c.pmask, 4);
    const std::string what = "mesh " + mesh.to_string() + " q " + to_string(c.q) + " " +
                             to_string(c.pq) + " k " + to_string(c.pk) + " v " + to_string(c.pv);
    std::optional<DTensor> out;
    {
      CommDebugMode comm;
      out = scaled_dot_product_attention(dq, dk, dv, dmask, 0.0, c.causal);
      EXPECT_EQ(comm.total_count(), 0) << what << "\n" << comm.table();
    }
    EXPECT_EQ(out->placements(), c.out) << what;
    if (!dtensor::testing::takes_part(mesh)) continue;
    const Tensor want = scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal);
    EXPECT_TRUE(allclose(out->full_tensor(), want, 1e-10, 1e-10)) << what;
  }
}

// A sharded key/value sequence is never kept (each query's softmax needs
// every key): it is gathered, and the result is still right.
TEST_F(AttentionTest, ShardedKeySequenceIsGathered) {
  DeviceMesh mesh(world, {4});
  const Tensor q = small_valued({2, 5, 3}, 1), k = small_valued({2, 6, 3}, 2);
  const Tensor v = small_valued({2, 6, 2}, 3);
  const DTensor dq = distribute_tensor(q, mesh, {Replicate()});
  const DTensor dk = distribute_tensor(k, mesh, {Shard(1)}), dv = distribute_tensor(v, mesh, {Shard(1)});
  CommDebugMode comm;
  const DTensor out = scaled_dot_product_attention(dq, dk, dv, std::nullopt, 0.0, true);
  if (!dtensor::testing::takes_part(mesh)) return;  // MPI: this rank is not in the mesh
  EXPECT_GT(comm.count(CollectiveKind::AllGather), 0);
  EXPECT_TRUE(allclose(out.full_tensor(), scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true),
                       1e-5, 1e-5));
}

TEST_F(AttentionTest, ErrorsNameTheOpAndPlacements) {
  DeviceMesh mesh(world, {2});
  const DTensor q = distribute_tensor(Tensor::ones({2, 3, 4}), mesh, {Shard(0)});
  const DTensor k = distribute_tensor(Tensor::ones({2, 5, 3}), mesh, {Shard(0)});
  const DTensor v = distribute_tensor(Tensor::ones({2, 5, 2}), mesh, {Shard(0)});
  dtensor::testing::expect_error([&] { scaled_dot_product_attention(q, k, v); },
                                 {"scaled_dot_product_attention", "key's last dim", "S(0)"});
  const DTensor k4 = distribute_tensor(Tensor::ones({2, 5, 4}), mesh, {Shard(0)});
  dtensor::testing::expect_error([&] { scaled_dot_product_attention(q, k4, v, std::nullopt, 0.5); },
                                 {"dropout_p must be 0"});
}

// ---- gradients ---------------------------------------------------------------------

namespace {

using dtensor::testing::GradFn;

DTensor leaf(const Tensor& full, const DeviceMesh& mesh, const Placements& pl, uint64_t seed) {
  DTensor x = make_dtensor(full, mesh, pl, seed);
  x.requires_grad_();
  return x;
}

}  // namespace

// Float64 gradients on random small shapes and layouts (Partials included,
// causal and both mask kinds, a float mask differentiated too): against
// central differences of the full tensors, and against the same
// computation on replicated inputs.
TEST_F(AttentionTest, GradientsMatchFiniteDifferencesAndReplicated) {
  std::mt19937 rng(77);
  const std::vector<Shape> meshes = dtensor::testing::grad_meshes(world.size());
  const int iterations = dtensor::testing::property_cases(32);
  for (int iter = 0; iter < iterations; ++iter) {
    DeviceMesh mesh(world, meshes[rng() % meshes.size()]);
    Shapes s = random_shapes(rng, 5);
    const int kind = static_cast<int>(rng() % 4);
    const Tensor q = Tensor::randn(s.q, iter, 0, DType::Float64);
    const Tensor k = Tensor::randn(s.k, iter + 1, 0, DType::Float64);
    const Tensor v = Tensor::randn(s.v, iter + 2, 0, DType::Float64);
    Placements pl[4];
    for (int i = 0; i < 3; ++i)
      pl[i] = random_placements(rng, mesh, static_cast<int64_t>((i == 0 ? s.q : i == 1 ? s.k : s.v).size()), true);
    // A bool mask is a constant; a float one is a fourth input with a gradient.
    std::optional<DTensor> dmask;
    Tensor fmask;
    if (kind >= 2) {
      pl[3] = random_placements(rng, mesh, static_cast<int64_t>(s.mask.size()), kind == 3);
      if (kind == 2) dmask = distribute_tensor(lt(Tensor::rand(s.mask, iter + 3), 0.7), mesh, pl[3]);
      else fmask = Tensor::randn(s.mask, iter + 3, 0, DType::Float64);
    }
    const std::string what = "iter " + std::to_string(iter) + " mesh " + mesh.to_string() +
                             " kind " + std::to_string(kind) + describe(s, pl, kind >= 2 ? 4 : 3);
    const GradFn f = [&](const std::vector<DTensor>& x) {
      return scaled_dot_product_attention(x[0], x[1], x[2], x.size() > 3 ? x[3] : dmask, 0.0,
                                          kind == 1, 0.6);
    };
    if (!dtensor::testing::takes_part(mesh)) continue;  // MPI: the checks gather full tensors
    std::vector<DTensor> inputs = {leaf(q, mesh, pl[0], iter), leaf(k, mesh, pl[1], iter + 1),
                                   leaf(v, mesh, pl[2], iter + 2)};
    if (kind == 3) inputs.push_back(leaf(fmask, mesh, pl[3], iter + 3));
    if (q.numel() + k.numel() + v.numel() + (fmask.defined() ? fmask.numel() : 0) <= 80) {
      const std::string fd = dtensor::testing::check_gradients(f, inputs, iter);
      EXPECT_EQ(fd, "") << what;
    }
    const std::string rep = dtensor::testing::check_matches_replicated(f, inputs, iter, 1e-10, 1e-10);
    EXPECT_EQ(rep, "") << what;
  }
}

// The backward of head-sharded and query-sequence-sharded attention runs
// without a collective: gradients sharded like their inputs, and the
// replicated key and value of the sequence-sharded case get Partial(sum)
// gradients (each rank's query rows), which equal the plain gradients.
TEST_F(AttentionTest, BackwardOfKeptLayoutsNeedsNoCommunication) {
  struct Case {
    Shape mesh, q, k, v;
    Placements pq, pk, pv, pg;
    Placements gq, gk, gv;
  };
  const Placement R = Replicate();
  const std::vector<Case> cases = {
      {{2, 2}, {2, 4, 5, 3}, {2, 4, 6, 3}, {2, 4, 6, 2}, {Shard(1), Shard(0)},
       {Shard(1), Shard(0)}, {Shard(1), Shard(0)}, {Shard(1), Shard(0)}, {Shard(1), Shard(0)},
       {Shard(1), Shard(0)}, {Shard(1), Shard(0)}},
      {{4}, {2, 7, 3}, {2, 7, 3}, {2, 7, 2}, {Shard(1)}, {R}, {R}, {Shard(1)}, {Shard(1)},
       {Partial()}, {Partial()}},
      {{2, 3}, {2, 7, 3}, {2, 5, 3}, {2, 5, 2}, {Shard(0), Shard(1)}, {Shard(0), R},
       {Shard(0), R}, {Shard(0), Shard(1)}, {Shard(0), Shard(1)}, {Shard(0), Partial()},
       {Shard(0), Partial()}},
  };
  int seed = 100;
  for (const Case& c : cases) {
    if (c.mesh.product() > world.size()) continue;
    DeviceMesh mesh(world, c.mesh);
    const Tensor q = Tensor::randn(c.q, seed++, 0, DType::Float64);
    const Tensor k = Tensor::randn(c.k, seed++, 0, DType::Float64);
    const Tensor v = Tensor::randn(c.v, seed++, 0, DType::Float64);
    DTensor dq = distribute_tensor(q, mesh, c.pq).requires_grad_();
    DTensor dk = distribute_tensor(k, mesh, c.pk).requires_grad_();
    DTensor dv = distribute_tensor(v, mesh, c.pv).requires_grad_();
    const DTensor out = scaled_dot_product_attention(dq, dk, dv, std::nullopt, 0.0, true);
    const Tensor g = Tensor::randn(out.shape(), seed++, 0, DType::Float64);
    const std::string what = "mesh " + mesh.to_string() + " q " + to_string(c.pq);
    {
      CommDebugMode comm;
      out.backward(distribute_tensor(g, mesh, c.pg));
      EXPECT_EQ(comm.total_count(), 0) << what << "\n" << comm.table();
    }
    ASSERT_TRUE(dq.grad() && dk.grad() && dv.grad()) << what;
    EXPECT_EQ(dq.grad()->placements(), c.gq) << what;
    EXPECT_EQ(dk.grad()->placements(), c.gk) << what;
    EXPECT_EQ(dv.grad()->placements(), c.gv) << what;
    if (!dtensor::testing::takes_part(mesh)) continue;
    const std::optional<DTensor> got[3] = {dq.grad(), dk.grad(), dv.grad()};
    const double scale = 1 / std::sqrt(static_cast<double>(c.q.back()));
    for (int i = 0; i < 3; ++i) {
      const Tensor want = detail::sdpa_backward(static_cast<detail::SdpaInput>(i), g, q, k, v,
                                                Tensor(), true, scale, 0);
      EXPECT_TRUE(allclose(got[i]->full_tensor(), want, 1e-10, 1e-10)) << what << " input " << i;
    }
  }
}

// A float mask's gradient keeps the layouts too: sharded like the query
// sequence it is sharded alike, and broadcast over sharded heads it is a
// Partial(sum) of each rank's heads; no collective either way.
TEST_F(AttentionTest, FloatMaskGradientLayouts) {
  struct Case {
    Shape mesh, q, mask;
    Placements pq, pmask, gmask;
  };
  const std::vector<Case> cases = {
      {{4}, {2, 7, 3}, {7, 5}, {Shard(1)}, {Shard(0)}, {Shard(0)}},
      {{2, 2}, {2, 4, 5, 3}, {2, 1, 5, 5}, {Shard(1), Shard(0)}, {Replicate(), Shard(0)},
       {Partial(), Shard(0)}},
  };
  int seed = 200;
  for (const Case& c : cases) {
    if (c.mesh.product() > world.size()) continue;
    DeviceMesh mesh(world, c.mesh);
    Shape ks = c.q, vs = c.q;
    ks[ks.size() - 2] = 5;
    vs[vs.size() - 2] = 5;
    vs.back() = 2;
    // Key and value follow the query on batch and heads, replicated on its sequence.
    Placements pkv = c.pq;
    for (Placement& p : pkv)
      if (p.is_shard(static_cast<int64_t>(c.q.size()) - 2)) p = Replicate();
    const Tensor q = Tensor::randn(c.q, seed++, 0, DType::Float64);
    const Tensor k = Tensor::randn(ks, seed++, 0, DType::Float64);
    const Tensor v = Tensor::randn(vs, seed++, 0, DType::Float64);
    const Tensor m = Tensor::randn(c.mask, seed++, 0, DType::Float64);
    const DTensor dq = distribute_tensor(q, mesh, c.pq), dk = distribute_tensor(k, mesh, pkv);
    const DTensor dv = distribute_tensor(v, mesh, pkv);
    DTensor dm = distribute_tensor(m, mesh, c.pmask).requires_grad_();
    const DTensor out = scaled_dot_product_attention(dq, dk, dv, dm);
    const Tensor g = Tensor::randn(out.shape(), seed++, 0, DType::Float64);
    const std::string what = "mesh " + mesh.to_string() + " q " + to_string(c.pq);
    {
      CommDebugMode comm;
      out.backward(distribute_tensor(g, mesh, out.placements()));
      EXPECT_EQ(comm.total_count(), 0) << what << "\n" << comm.table();
    }
    ASSERT_TRUE(dm.grad().has_value()) << what;
    EXPECT_EQ(dm.grad()->placements(), c.gmask) << what;
    if (!dtensor::testing::takes_part(mesh)) continue;
    const Tensor want = detail::sdpa_backward(detail::SdpaInput::Mask, g, q, k, v, m, false,
                                              1 / std::sqrt(3.0), 0);
    EXPECT_TRUE(allclose(dm.grad()->full_tensor(), want, 1e-10, 1e-10)) << what;
  }
}
