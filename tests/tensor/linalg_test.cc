// Tests of mm, bmm, matmul, addmm, baddbmm and linear: hand-computed values,
// then every op against a plain triple-loop reference over to_vector<double>()
// on random inputs of many shapes and stride layouts (the layouts BLAS reads
// in place and those that force a copy), plus the error messages.
//
// Tolerance: a float result may differ from the exact (double) reference by
// rtol * sum_k |a_ik * b_kj| (the natural bound for a rounded dot product);
// rtol = 1e-4 for float32, 1e-12 for float64. int64 results must be exact.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dtensor/tensor.h"

using namespace dtensor;

namespace {

const DType kDTypes[] = {DType::Float32, DType::Float64, DType::Int64};

Tensor rnd(const Shape& shape, DType dtype, uint64_t seed) {
  if (dtype == DType::Int64) return Tensor::randint(-5, 6, shape, seed);
  return Tensor::randn(shape, seed, 0, dtype);
}

// The exact result of an op: shape, values and, per element, sum |terms|
// (the scale the rounding error of a float dot product is relative to).
struct LinalgRef {
  std::vector<int64_t> shape;
  std::vector<double> val, mag;
};

int64_t product_of(const std::vector<int64_t>& s) {
  int64_t p = 1;
  for (int64_t v : s) p *= v;
  return p;
}

// Row-major index into a tensor of shape `in` (right-aligned against `out`,
// size-1 dims broadcast) of the element at flat index `flat` of `out`.
int64_t broadcast_source(int64_t flat, const std::vector<int64_t>& out,
                         const std::vector<int64_t>& in) {
  std::vector<int64_t> idx(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    idx[d] = flat % out[d];
    flat /= out[d];
  }
  int64_t src = 0;
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) src = src * in[d] + (in[d] == 1 ? 0 : idx[lead + d]);
  return src;
}

std::vector<int64_t> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t nd = std::max(a.size(), b.size());
  std::vector<int64_t> out(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// torch.matmul from its definition, over plain vectors.
LinalgRef ref_matmul(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<int64_t> sa = a.shape().vec(), sb = b.shape().vec();
  const bool drop_n = sa.size() == 1, drop_m = sb.size() == 1;
  if (drop_n) sa.insert(sa.begin(), 1);
  if (drop_m) sb.push_back(1);
  const int64_t n = sa[sa.size() - 2], k = sa.back(), m = sb.back();
  const std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const std::vector<int64_t> batch = broadcast(ba, bb);
  LinalgRef r;
  r.shape = batch;
  if (!drop_n) r.shape.push_back(n);
  if (!drop_m) r.shape.push_back(m);
  const int64_t nb = product_of(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t ia = broadcast_source(bi, batch, ba), ib = broadcast_source(bi, batch, bb);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double s = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double t = va[(ia * n + i) * k + kk] * vb[(ib * k + kk) * m + j];
          s += t;
          mag += std::fabs(t);
        }
        r.val.push_back(s);
        r.mag.push_back(mag);
      }
    }
  }
  return r;
}

// beta * bias + alpha * ref, bias broadcast to ref's shape.
LinalgRef ref_add_bias(LinalgRef r, const Tensor& bias, double beta, double alpha) {
  const std::vector<double> vb = bias.to_vector<double>();
  const std::vector<int64_t> sb = bias.shape().vec();
  for (size_t i = 0; i < r.val.size(); ++i) {
    const double bv = beta == 0 ? 0 : beta * vb[broadcast_source(i, r.shape, sb)];
    r.val[i] = bv + alpha * r.val[i];
    r.mag[i] = std::fabs(bv) + std::fabs(alpha) * r.mag[i];
  }
  return r;
}

void expect_matches(const Tensor& got, const LinalgRef& ref, DType dtype, const std::string& what) {
  ASSERT_EQ(got.shape().vec(), ref.shape) << what;
  ASSERT_EQ(got.dtype(), dtype) << what;
  const std::vector<double> v = got.to_vector<double>();
  ASSERT_EQ(v.size(), ref.val.size()) << what;
  const double rtol = dtype == DType::Float32 ? 1e-4 : dtype == DType::Float64 ? 1e-12 : 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::Int64) {
      ASSERT_EQ(v[i], ref.val[i]) << what << " at flat index " << i;
    } else {
      ASSERT_LE(std::fabs(v[i] - ref.val[i]), rtol * ref.mag[i] + 1e-30)
          << what << " at flat index " << i << ": got " << v[i] << ", expected " << ref.val[i];
    }
  }
}

void expect_error_linalg(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' lacks '" << needle << "'";
  }
}

// A rows x cols matrix in one of several stride layouts.
enum class LinalgLayout {
  kContiguous,      // (c, 1)
  kTransposed,      // (1, r): BLAS reads it as CblasTrans
  kRowStep,         // (2c, 1): row-major with lda = 2c
  kNarrowed,        // (c+3, 1), offset 2
  kTransposedStep,  // (1, 2r): transposed with lda = 2r
  kColStep,         // (2c, 2): BLAS cannot read it, copied
  kExpandedRows,    // (0, 1): broadcast rows, copied
};
const LinalgLayout kLinalgLayouts[] = {LinalgLayout::kContiguous,     LinalgLayout::kTransposed, LinalgLayout::kRowStep,
                           LinalgLayout::kNarrowed,       LinalgLayout::kTransposedStep,
                           LinalgLayout::kColStep,        LinalgLayout::kExpandedRows};
const char* linalg_layout_name(LinalgLayout l) {
  switch (l) {
    case LinalgLayout::kContiguous: return "contiguous";
    case LinalgLayout::kTransposed: return "transposed";
    case LinalgLayout::kRowStep: return "row-step";
    case LinalgLayout::kNarrowed: return "narrowed";
    case LinalgLayout::kTransposedStep: return "transposed-step";
    case LinalgLayout::kColStep: return "col-step";
    case LinalgLayout::kExpandedRows: return "expanded-rows";
  }
  return "?";
}

Tensor make_matrix(int64_t r, int64_t c, LinalgLayout layout, DType dtype, uint64_t seed) {
  switch (layout) {
    case LinalgLayout::kContiguous: return rnd({r, c}, dtype, seed);
    case LinalgLayout::kTransposed: return rnd({c, r}, dtype, seed).t();
    case LinalgLayout::kRowStep: return rnd({2 * r, c}, dtype, seed).slice(0, 0, 2 * r, 2);
    case LinalgLayout::kNarrowed: return rnd({r, c + 3}, dtype, seed).narrow(1, 2, c);
    case LinalgLayout::kTransposedStep: return rnd({2 * c, r}, dtype, seed).slice(0, 0, 2 * c, 2).t();
    case LinalgLayout::kColStep: return rnd({r, 2 * c}, dtype, seed).slice(1, 0, 2 * c, 2);
    case LinalgLayout::kExpandedRows: return rnd({1, c}, dtype, seed).expand({r, c});
  }
  return Tensor();
}

std::string describe_linalg(const Tensor& a, const Tensor& b) {
  return to_string(a.shape()) + " strides " + to_string(a.strides()) + " @ " +
         to_string(b.shape()) + " strides " + to_string(b.strides()) + " " +
         dtype_name(a.dtype());
}

}  // namespace

// ---- hand-computed values ---------------------------------------------------

TEST(Linalg, MmHandComputed) {
  for (DType dt : kDTypes) {
    Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, Shape{2, 3}).to(dt);
    Tensor b = Tensor::from_vector(std::vector<double>{7, 8, 9, 10, 11, 12}, Shape{3, 2}).to(dt);
    Tensor c = mm(a, b);
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_EQ(c.shape(), (Shape{2, 2}));
    EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{58, 64, 139, 154})) << dtype_name(dt);
    // a^T a through the transposed (no-copy) path.
    EXPECT_EQ(mm(a.t(), a).to_vector<double>(),
              (std::vector<double>{17, 22, 27, 22, 29, 36, 27, 36, 45}))
        << dtype_name(dt);
  }
}

TEST(Linalg, MatmulHandComputedVectors) {
  Tensor v = Tensor::from_vector(std::vector<float>{1, 2, 3});
  Tensor w = Tensor::from_vector(std::vector<float>{4, -5, 6});
  Tensor dot = matmul(v, w);
  EXPECT_EQ(dot.dim(), 0);
  EXPECT_EQ(dot.item<double>(), 12.0);
  Tensor m = Tensor::from_vector(std::vector<float>{1, 0, 2, 0, 1, 3}, Shape{2, 3});
  Tensor mv = matmul(m, v);  // [1 + 6, 2 + 9]
  EXPECT_EQ(mv.shape(), (Shape{2}));
  EXPECT_EQ(mv.to_vector<float>(), (std::vector<float>{7, 11}));
  Tensor vm = matmul(Tensor::from_vector(std::vector<float>{1, 2}), m);  // [1, 2, 8]
  EXPECT_EQ(vm.shape(), (Shape{3}));
  EXPECT_EQ(vm.to_vector<float>(), (std::vector<float>{1, 2, 8}));
}

TEST(Linalg, AddmmHandComputedBetaAlpha) {
  for (DType dt : kDTypes) {
    Tensor bias = Tensor::from_vector(std::vector<double>{10, 20}).to(dt);
    Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, Shape{2, 2}).to(dt);
    Tensor eye = Tensor::from_vector(std::vector<double>{1, 0, 0, 1}, Shape{2, 2}).to(dt);
    // 2 * [10, 20] + 3 * a
    EXPECT_EQ(addmm(bias, a, eye, 2, 3).to_vector<double>(),
              (std::vector<double>{23, 46, 29, 52}))
        << dtype_name(dt);
    EXPECT_EQ(addmm(bias, a, eye).to_vector<double>(), (std::vector<double>{11, 22, 13, 24}));
  }
}

TEST(Linalg, Int64IsExactBeyondDoublePrecisionAndWraps) {
  const int64_t big = (int64_t{1} << 31) + 1;  // big^2 = 2^62 + 2^32 + 1 needs 63 bits
  Tensor a = Tensor::from_vector(std::vector<int64_t>{big, 1}, Shape{1, 2});
  Tensor b = Tensor::from_vector(std::vector<int64_t>{big, 0}, Shape{2, 1});
  EXPECT_EQ(mm(a, b).item<int64_t>(), (int64_t{1} << 62) + (int64_t{1} << 32) + 1);
  // Overflow wraps (two's complement) as in PyTorch: 2^62 * 4 = 2^64 = 0.
  Tensor c = Tensor::from_vector(std::vector<int64_t>{int64_t{1} << 62}, Shape{1, 1});
  Tensor four = Tensor::from_vector(std::vector<int64_t>{4}, Shape{1, 1});
  EXPECT_EQ(mm(c, four).item<int64_t>(), 0);
  EXPECT_EQ(addmm(Tensor::from_vector(std::vector<int64_t>{7}), c, four, -1, 1).item<int64_t>(),
            -7);
}

// ---- mm against the reference -----------------------------------------------

TEST(Linalg, MmMatchesReferenceAcrossShapes) {
  const int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 4},  {5, 7, 3},   {0, 3, 4},   {3, 0, 4},
                               {3, 4, 0}, {0, 0, 0},  {1, 9, 6},   {6, 9, 1},   {1, 9, 1},
                               {1, 1, 7}, {17, 33, 9}, {64, 65, 66}, {130, 2, 70}};
  uint64_t seed = 1;
  for (DType dt : kDTypes) {
    for (const auto& s : shapes) {
      Tensor a = rnd({s[0], s[1]}, dt, seed++);
      Tensor b = rnd({s[1], s[2]}, dt, seed++);
      expect_matches(mm(a, b), ref_matmul(a, b), dt, describe_linalg(a, b));
    }
  }
}

TEST(Linalg, MmZeroInnerDimGivesZeros) {
  Tensor c = mm(Tensor::empty({3, 0}), Tensor::empty({0, 4}));
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  Tensor ci = mm(Tensor::empty({2, 0}, DType::Int64), Tensor::empty({0, 2}, DType::Int64));
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>(4, 0)));
}

// Every pair of stride layouts, including the matrix-vector shapes that take
// the gemv path, for every dtype.
TEST(Linalg, MmStridedLayouts) {
  const int64_t shapes[][3] = {{5, 4, 6}, {1, 4, 6}, {5, 4, 1}, {1, 4, 1}, {5, 1, 6}, {3, 0, 2}};
  uint64_t seed = 100;
  int checked = 0;
  for (DType dt : kDTypes) {
    for (const auto& s : shapes) {
      for (LinalgLayout la : kLinalgLayouts) {
        for (LinalgLayout lb : kLinalgLayouts) {
          Tensor a = make_matrix(s[0], s[1], la, dt, seed++);
          Tensor b = make_matrix(s[1], s[2], lb, dt, seed++);
          const std::vector<double> a_before = a.to_vector<double>();
          expect_matches(mm(a, b), ref_matmul(a, b), dt,
                         describe_linalg(a, b) + " (" + linalg_layout_name(la) + " @ " + linalg_layout_name(lb) + ")");
          EXPECT_EQ(a.to_vector<double>(), a_before) << "mm modified its input";
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 6 * 7 * 7);
}

// ---- bmm ----------------------------------------------------------------------

namespace {

// A (B, r, c) batch in one of several stride layouts.
Tensor make_batch(int64_t nb, int64_t r, int64_t c, int layout, DType dtype, uint64_t seed) {
  switch (layout) {
    case 0: return rnd({nb, r, c}, dtype, seed);                                // contiguous
    case 1: return rnd({nb, c, r}, dtype, seed).transpose(1, 2);                // CblasTrans
    case 2: return rnd({r, nb, c}, dtype, seed).permute({1, 0, 2});             // lda = B*c
    case 3: return rnd({2 * nb, r, c}, dtype, seed).slice(0, 0, 2 * nb, 2);     // batch step
    case 4: return rnd({1, r, c}, dtype, seed).expand({nb, r, c});              // batch stride 0
    case 5: return rnd({nb, r, 2 * c}, dtype, seed).slice(2, 0, 2 * c, 2);      // copied
    default: return Tensor();
  }
}

}  // namespace

TEST(Linalg, BmmMatchesReference) {
  const int64_t shapes[][4] = {{3, 4, 5, 6}, {1, 1, 1, 1}, {2, 1, 7, 5}, {2, 5, 7, 1},
                               {0, 2, 3, 4}, {2, 0, 3, 4}, {2, 3, 0, 4}, {2, 3, 4, 0}};
  uint64_t seed = 1000;
  for (DType dt : kDTypes) {
    for (const auto& s : shapes) {
      for (int la = 0; la < 6; ++la) {
        for (int lb = 0; lb < 6; ++lb) {
          Tensor a = make_batch(s[0], s[1], s[2], la, dt, seed++);
          Tensor b = make_batch(s[0], s[2], s[3], lb, dt, seed++);
          expect_matches(bmm(a, b), ref_matmul(a, b), dt,
                         describe_linalg(a, b) + " layouts " + std::to_string(la) + "," +
                             std::to_string(lb));
        }
      }
    }
  }
}

TEST(Linalg, BaddbmmBroadcastBiasBetaAlpha) {
  const std::vector<Shape> bias_shapes = {{3, 4, 5}, {4, 5}, {5}, {3, 1, 5}, {1, 4, 1}, {}};
  uint64_t seed = 2000;
  for (DType dt : kDTypes) {
    const bool is_int = dt == DType::Int64;
    for (const Shape& bs : bias_shapes) {
      Tensor a = rnd({3, 4, 6}, dt, seed++);
      Tensor b = make_batch(3, 6, 5, 1, dt, seed++);
      Tensor bias = rnd(bs, dt, seed++);
      expect_matches(baddbmm(bias, a, b), ref_add_bias(ref_matmul(a, b), bias, 1, 1), dt,
                     "baddbmm bias " + to_string(bs));
      const Scalar beta = is_int ? Scalar(3) : Scalar(0.5);
      const Scalar alpha = is_int ? Scalar(-2) : Scalar(-1.5);
      expect_matches(baddbmm(bias, a, b, beta, alpha),
                     ref_add_bias(ref_matmul(a, b), bias, beta.to_double(), alpha.to_double()),
                     dt, "baddbmm beta/alpha bias " + to_string(bs));
    }
  }
}

// ---- matmul -----------------------------------------------------------------------

TEST(Linalg, MatmulAllRankCombinationsAndBroadcast) {
  struct Case {
    Shape a, b, expected;
  };
  const Case cases[] = {
      {{3}, {3}, {}},
      {{3}, {3, 4}, {4}},
      {{2, 3}, {3}, {2}},
      {{2, 3}, {3, 4}, {2, 4}},
      {{3}, {2, 3, 4}, {2, 4}},
      {{2, 3, 4}, {4}, {2, 3}},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},       // folded into one (6 x 4) @ (4 x 5)
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},       // a broadcast over b's batch
      {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},
      {{1, 3, 4}, {6, 4, 2}, {6, 3, 2}},
      {{6, 3, 4}, {1, 4, 2}, {6, 3, 2}},    // b's size-1 batch: folded
      {{4}, {2, 2, 4, 3}, {2, 2, 3}},
      {{2, 2, 3, 4}, {4}, {2, 2, 3}},
      {{2, 1, 1, 3}, {1, 3, 3, 1}, {2, 3, 1, 1}},
      {{0, 3, 4}, {4, 5}, {0, 3, 5}},
      {{2, 0, 4}, {4, 5}, {2, 0, 5}},
      {{2, 3, 0}, {0, 5}, {2, 3, 5}},
      {{0}, {0}, {}},
      {{1}, {1, 1}, {1}},
  };
  uint64_t seed = 3000;
  for (DType dt : kDTypes) {
    for (const Case& c : cases) {
      Tensor a = rnd(c.a, dt, seed++);
      Tensor b = rnd(c.b, dt, seed++);
      Tensor out = matmul(a, b);
      EXPECT_EQ(out.shape(), c.expected) << describe_linalg(a, b);
      expect_matches(out, ref_matmul(a, b), dt, describe_linalg(a, b));
    }
  }
}

// N-d @ 2-d folds a's batch into rows when a's strides allow it and copies a
// otherwise; broadcast (stride-0) operands on either side stay correct.
TEST(Linalg, MatmulStridedBatchOperands) {
  uint64_t seed = 4000;
  for (DType dt : kDTypes) {
    const auto r = [&](const Shape& shape) { return rnd(shape, dt, seed++); };
    std::vector<std::pair<Tensor, Tensor>> pairs = {
        {r({3, 2, 4}).transpose(0, 1), r({4, 5})},  // not viewable
        {r({2, 4, 3}).transpose(1, 2), r({4, 5})},  // trans matrices
        {r({4, 3, 2}).permute({2, 1, 0}), r({4, 5})},
        {r({2, 3, 4}), r({5, 4}).t()},
        {r({2, 3, 4}), r({4, 5}).expand({2, 4, 5})},
        {r({1, 3, 4}).expand({2, 3, 4}), r({2, 4, 5})},
        {r({1, 3, 4}), r({4, 5}).expand({2, 4, 5})},
        {r({2, 1, 4}).expand({2, 3, 4}), r({4, 5})},
        {r({2, 6, 4}).slice(1, 0, 6, 2), r({4, 1})},
        {r({2, 3, 8}).slice(2, 0, 8, 2), r({4})},
        {r({8}).slice(0, 0, 8, 2), r({3, 4, 2})},
        {r({2, 2, 3, 4}).permute({1, 0, 2, 3}), r({2, 4, 5})},
    };
    for (const auto& [a, b] : pairs) {
      expect_matches(matmul(a, b), ref_matmul(a, b), dt, describe_linalg(a, b));
    }
  }
}

// ---- addmm --------------------------------------------------------------------------

TEST(Linalg, AddmmBroadcastBiasAndScalars) {
  const std::vector<Shape> bias_shapes = {{5}, {1, 5}, {4, 1}, {}, {4, 5}};
  uint64_t seed = 5000;
  for (DType dt : kDTypes) {
    const bool is_int = dt == DType::Int64;
    const std::vector<std::pair<Scalar, Scalar>> scalars =
        is_int ? std::vector<std::pair<Scalar, Scalar>>{{1, 1}, {2, -3}, {0, 2}}
               : std::vector<std::pair<Scalar, Scalar>>{{1, 1}, {0.5, -2.0}, {0, 1.5}};
    for (const Shape& bs : bias_shapes) {
      for (const auto& [beta, alpha] : scalars) {
        for (int64_t k : {int64_t{6}, int64_t{0}}) {
          for (LinalgLayout lb : {LinalgLayout::kContiguous, LinalgLayout::kTransposed, LinalgLayout::kColStep}) {
            Tensor bias = rnd(bs, dt, seed++);
            Tensor a = rnd({4, k}, dt, seed++);
            Tensor b = make_matrix(k, 5, lb, dt, seed++);
            expect_matches(
                addmm(bias, a, b, beta, alpha),
                ref_add_bias(ref_matmul(a, b), bias, beta.to_double(), alpha.to_double()), dt,
                "addmm bias " + to_string(bs) + " " + describe_linalg(a, b));
          }
        }
      }
    }
  }
}

// beta == 0 must not read the bias at all: NaN/Inf in it do not propagate
// (PyTorch semantics), on the gemm, gemv and k == 0 paths alike.
TEST(Linalg, BetaZeroIgnoresNanBias) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t shapes[][3] = {{4, 6, 5}, {1, 6, 5}, {4, 6, 1}, {4, 0, 5}};
  uint64_t seed = 6000;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const auto& s : shapes) {
      Tensor bias = Tensor::full({s[0], s[2]}, nan, dt);
      Tensor a = rnd({s[0], s[1]}, dt, seed++);
      Tensor b = rnd({s[1], s[2]}, dt, seed++);
      Tensor out = addmm(bias, a, b, 0, 2);
      LinalgRef ref = ref_matmul(a, b);
      for (double& v : ref.val) v *= 2;
      for (double& v : ref.mag) v *= 2;
      expect_matches(out, ref, dt, "addmm beta=0 " + describe_linalg(a, b));
      Tensor bias3 = Tensor::full({2, s[0], s[2]}, nan, dt);
      Tensor a3 = rnd({2, s[0], s[1]}, dt, seed++);
      Tensor b3 = rnd({2, s[1], s[2]}, dt, seed++);
      expect_matches(baddbmm(bias3, a3, b3, 0, 1), ref_matmul(a3, b3), dt,
                     "baddbmm beta=0 " + describe_linalg(a3, b3));
    }
    // With beta != 0 the NaN does come through.
    Tensor out = addmm(Tensor::full({2, 2}, nan, dt), rnd({2, 3}, dt, 1), rnd({3, 2}, dt, 2));
    for (double v : out.to_vector<double>()) EXPECT_TRUE(std::isnan(v));
  }
}

// ---- linear ---------------------------------------------------------------------------

TEST(Linalg, LinearMatchesReference) {
  uint64_t seed = 7000;
  for (DType dt : kDTypes) {
    const auto r = [&](const Shape& shape) { return rnd(shape, dt, seed++); };
    struct Case {
      Tensor x, w, b;
      Shape expected;
    };
    const std::vector<Case> cases = {
        {r({2, 3, 4}), r({5, 4}), r({5}), {2, 3, 5}},
        {r({2, 3, 4}), r({5, 4}), Tensor(), {2, 3, 5}},
        {r({6, 4}), r({5, 4}), r({5}), {6, 5}},
        {r({4}), r({5, 4}), r({5}), {5}},
        {r({4}), r({1, 4}), Tensor(), {1}},
        {r({2, 2, 3, 4}), r({5, 4}), r({1}), {2, 2, 3, 5}},
        // input that cannot be flattened without a copy, and a transposed weight
        {r({3, 2, 4}).transpose(0, 1), r({5, 4}), r({5}),
         {2, 3, 5}},
        {r({2, 3, 4}), r({4, 5}).t(), r({5}), {2, 3, 5}},
        {r({2, 3, 8}).slice(2, 0, 8, 2), r({5, 4}), Tensor(), {2, 3, 5}},
        {r({0, 4}), r({5, 4}), r({5}), {0, 5}},
        {r({2, 0}), r({5, 0}), r({5}), {2, 5}},
        {r({1, 1}), r({1, 1}), r({1}), {1, 1}},
    };
    for (const Case& c : cases) {
      Tensor out = linear(c.x, c.w, c.b);
      EXPECT_EQ(out.shape(), c.expected) << describe_linalg(c.x, c.w);
      LinalgRef ref = ref_matmul(c.x, c.w.t());
      if (c.b.defined()) ref = ref_add_bias(ref, c.b, 1, 1);
      expect_matches(out, ref, dt, "linear " + describe_linalg(c.x, c.w));
    }
  }
}

// ---- dtypes -------------------------------------------------------------------------------

// Unlike PyTorch (which refuses mixed dtypes in mm), operands are promoted.
TEST(Linalg, MixedDtypesPromote) {
  Tensor f32 = rnd({3, 4}, DType::Float32, 1);
  Tensor f64 = rnd({4, 2}, DType::Float64, 2);
  Tensor i64 = rnd({4, 2}, DType::Int64, 3);
  Tensor bools = Tensor::from_vector(std::vector<bool>{true, false, true, true}, Shape{2, 2});
  expect_matches(mm(f32, f64), ref_matmul(f32, f64), DType::Float64, "f32 @ f64");
  expect_matches(mm(f32, i64), ref_matmul(f32, i64), DType::Float32, "f32 @ i64");
  expect_matches(matmul(i64.t(), f32.t()), ref_matmul(i64.t(), f32.t()), DType::Float32,
                 "i64 @ f32");
  Tensor i22 = rnd({2, 2}, DType::Int64, 4);
  expect_matches(mm(bools, i22), ref_matmul(bools, i22), DType::Int64, "bool @ i64");
  // The bias takes part in the promotion.
  Tensor bias64 = rnd({2}, DType::Float64, 5);
  Tensor f32b = rnd({4, 2}, DType::Float32, 6);
  expect_matches(addmm(bias64, f32, f32b), ref_add_bias(ref_matmul(f32, f32b), bias64, 1, 1),
                 DType::Float64, "addmm f64 bias");
}

// ---- errors ---------------------------------------------------------------------------------

TEST(Linalg, ErrorsNameOpShapesAndExpectation) {
  const Tensor m23 = Tensor::zeros({2, 3}), m45 = Tensor::zeros({4, 5});
  const Tensor m234 = Tensor::zeros({2, 3, 4}), m345 = Tensor::zeros({3, 4, 5});
  expect_error_linalg([&] { mm(m23, m45); },
               "mm: inner dimensions differ: [2, 3] @ [4, 5] (expected a.size(1) == b.size(0), "
               "got 3 vs 4)");
  expect_error_linalg([&] { mm(m234, m45); }, "mm: expected 2-d tensors, got [2, 3, 4] and [4, 5]");
  expect_error_linalg([&] { mm(Tensor::zeros({3}), m45); }, "mm: expected 2-d tensors");
  expect_error_linalg([&] { bmm(m23, m234); }, "bmm: expected 3-d tensors, got [2, 3] and [2, 3, 4]");
  expect_error_linalg([&] { bmm(m234, m345); }, "bmm: batch sizes differ: 2 vs 3");
  expect_error_linalg([&] { bmm(m234, Tensor::zeros({2, 5, 6})); },
               "bmm: inner dimensions differ: [2, 3, 4] @ [2, 5, 6]");
  expect_error_linalg([&] { matmul(Tensor::scalar(1.0), m23); },
               "matmul: both arguments need at least 1 dim, got a 0-d tensor");
  expect_error_linalg([&] { matmul(m23, Tensor::scalar(1.0)); }, "matmul: both arguments");
  expect_error_linalg([&] { matmul(Tensor::zeros({3}), Tensor::zeros({4})); },
               "matmul: 1-d sizes differ: [3] @ [4]");
  expect_error_linalg([&] { matmul(m23, Tensor::zeros({4})); },
               "matmul: inner dimensions differ: [2, 3] @ [4] (expected a.size(-1) == b.size(0), "
               "got 3 vs 4)");
  expect_error_linalg([&] { matmul(m234, Tensor::zeros({3, 5, 6})); }, "matmul: inner dimensions differ");
  expect_error_linalg([&] { matmul(m234, Tensor::zeros({3, 4, 6})); },
               "matmul: batch dims [2] and [3] cannot be broadcast");
  expect_error_linalg([&] { linear(m23, Tensor::zeros({3})); },
               "linear: weight must be 2-d (out_features, in_features), got [3]");
  expect_error_linalg([&] { linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 4})); },
               "linear: input's last dim 5 != weight's in_features 4");
  expect_error_linalg([&] { linear(Tensor::scalar(1.0), Tensor::zeros({3, 1})); },
               "linear: input must have at least 1 dim");
  expect_error_linalg([&] { linear(m23, Tensor::zeros({4, 3}), Tensor::zeros({3})); },
               "linear: bias must be 1-d of out_features = 4, got [3]");
  expect_error_linalg([&] { linear(m23, Tensor::zeros({4, 3}), Tensor::zeros({2, 4})); },
               "linear: bias must be 1-d");
  expect_error_linalg([&] { addmm(Tensor::zeros({3}), m23, Tensor::zeros({3, 2})); },
               "addmm: bias of shape [3] cannot be broadcast to the result shape [2, 2]");
  expect_error_linalg([&] { addmm(Tensor::zeros({2, 2}), m23, m45); }, "addmm: inner dimensions differ");
  expect_error_linalg([&] { addmm(Tensor(), m23, Tensor::zeros({3, 2})); }, "addmm: bias is undefined");
  expect_error_linalg([&] { baddbmm(Tensor::zeros({3, 3, 5}), m234, Tensor::zeros({2, 4, 5})); },
               "baddbmm: bias of shape [3, 3, 5] cannot be broadcast");
  expect_error_linalg([&] { baddbmm(Tensor::zeros({1}), m234, m345); }, "baddbmm: batch sizes differ");
  const Tensor b22 = Tensor::from_vector(std::vector<bool>{true, false, true, true}, Shape{2, 2});
  expect_error_linalg([&] { mm(b22, b22); }, "mm: bool is not supported");
  expect_error_linalg([&] { matmul(b22, b22); }, "matmul: bool is not supported");
  expect_error_linalg([&] { mm(Tensor(), m23); }, "mm: got an undefined tensor");
  const Tensor i22 = Tensor::zeros({2, 2}, DType::Int64);
  expect_error_linalg([&] { addmm(i22, i22, i22, 0.5, 1); },
               "addmm: beta and alpha must be integers for int64 tensors");
  expect_error_linalg([&] { baddbmm(Tensor::zeros({1, 2, 2}, DType::Int64), i22.unsqueeze(0),
                             i22.unsqueeze(0), 1, 2.5); },
               "baddbmm: beta and alpha must be integers");
}
