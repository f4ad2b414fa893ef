// The dense kernels on several threads and every SIMD dispatch level give
// the same bits as on one thread at the baseline level: elementwise ops and
// copies (contiguous, broadcast, transposed and permuted operands, which
// take the tiled walk), reductions (split over output slots, or in fixed
// blocks for full reductions) and the row-wise NN kernels. Shapes are large
// enough to be split (the parallel grain is 32K elements) and odd-sized so
// the last block, tile and vector are partial.
//
// A few results are also checked against a plain scalar loop: exactly for
// elementwise ops and copies, within 1e-6 relative for float sums (double
// accumulation in a different order) and 2e-6 for softmax (its exp is a
// polynomial, under 1 ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/tensor.h"
#include "dtensor/threads.h"
#include "tensor/loops.h"
#include "tensor/simd.h"
#include "tensor/simd_threads.h"
#include "test_util.h"

using namespace dtensor;

namespace {

using detail::SimdLevel;

using ThreadsTest = dtensor::testing::ThreadsAndSimdTest;

using dtensor::testing::same_bits;

// Runs f at 1 thread on the baseline level, then at 1, 2, 3 and 8 threads
// on every level the CPU has, and expects the same bits each time.
void expect_stable(const std::string& what, const std::function<Tensor()>& f) {
  set_num_threads(1);
  detail::set_simd_level(SimdLevel::kBaseline);
  const Tensor ref = f();
  for (SimdLevel level : {SimdLevel::kBaseline, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > detail::simd_cpu_level()) continue;
    detail::set_simd_level(level);
    for (int threads : {1, 2, 3, 8}) {
      set_num_threads(threads);
      const Tensor got = f();
      EXPECT_TRUE(same_bits(ref, got))
          << what << ": differs at " << threads << " threads, level "
          << detail::simd_level_name(level);
    }
  }
}

// Values of many magnitudes, some negative zeros, so that sums round.
Tensor spread(const Shape& shape, uint64_t seed) {
  Tensor x = Tensor::randn(shape, seed);
  return x * exp(Tensor::randn(shape, seed + 100) * 3.0);
}

TEST_F(ThreadsTest, ReportsTheLevels) {
  // Not an assertion on the machine: a record of what the other tests ran.
  std::printf("cpu SIMD level: %s\n", detail::simd_level_name(detail::simd_cpu_level()));
  detail::set_simd_level(SimdLevel::kAvx512);
  EXPECT_LE(detail::simd_level(), detail::simd_cpu_level());
  detail::set_simd_level(SimdLevel::kBaseline);
  EXPECT_EQ(detail::simd_level(), SimdLevel::kBaseline);
}

TEST_F(ThreadsTest, ElementwiseAndCopies) {
  const Tensor a = Tensor::randn({517, 333}, 1);
  const Tensor b = Tensor::randn({333, 517}, 2);
  const Tensor row = Tensor::randn({517}, 3);
  const Tensor col = Tensor::randn({333, 1}, 4);
  const Tensor c3 = Tensor::randn({37, 61, 43}, 5);
  const Tensor d3 = Tensor::randn({43, 37, 61}, 6);
  const Tensor big = Tensor::randn({1 << 18}, 7);
  expect_stable("a.t() + b", [&] { return add(a.t(), b); });
  expect_stable("b + a.t()", [&] { return add(b, a.t()); });
  expect_stable("b + row", [&] { return add(b, row); });
  expect_stable("b * col", [&] { return mul(b, col); });
  expect_stable("permuted mul", [&] { return mul(c3.permute({2, 0, 1}), d3); });
  expect_stable("exp of a stepped slice", [&] { return exp(b.slice(1, 0, 517, 3)); });
  expect_stable("contiguous add", [&] { return add(big, 0.5); });
  expect_stable("where", [&] { return where(gt(a.t(), 0.0), b, row); });
  expect_stable("permuted contiguous()", [&] { return c3.permute({2, 0, 1}).contiguous(); });
  expect_stable("transposed clone", [&] { return a.t().clone(); });
  expect_stable("converting copy", [&] { return a.t().to(DType::Float64); });
  expect_stable("in-place add of a transposed operand", [&] {
    Tensor y = b.clone();
    y += a.t();
    return y;
  });
  expect_stable("copy into a transposed view", [&] {
    Tensor y = Tensor::zeros({517, 333});
    y.t().copy_(b);
    return y;
  });
  expect_stable("empty", [&] { return add(Tensor::randn({0, 5}, 1).t(), Tensor::ones({5, 0})); });
}

// Large outputs are written with non-temporal stores (loops.h,
// stream_values; from kStreamBytes, lowered to 0 here so these sizes
// stream): the bits must be those of the plain stores, at every thread
// count and level, for every path of the elementwise Map that streams, for
// converting copies, and for outputs that start off 16-byte alignment (the
// head written plainly) or end in a partial chunk.
TEST_F(ThreadsTest, StreamedOutputsKeepTheBits) {
  const int64_t n = (int64_t{1} << 18) + 37;  // a partial last chunk
  const Tensor x = spread({n}, 11), y = spread({n}, 12);
  const Tensor row = Tensor::randn({37}, 13), m = spread({n / 37 + 1, 37}, 14);
  const std::vector<std::pair<std::string, std::function<Tensor()>>> cases = {
      {"add", [&] { return add(x, y); }},
      {"add of a scalar", [&] { return add(x, 0.5); }},
      {"exp", [&] { return exp(x); }},
      {"comparison (bool output)", [&] { return gt(x, y); }},
      {"where", [&] { return where(gt(x, 0.0), x, y); }},
      {"broadcast row", [&] { return mul(m, row); }},
      {"in-place add (not streamed)",
       [&] {
         Tensor z = x.clone();
         z += y;
         return z;
       }},
      {"converting copy", [&] { return x.to(DType::Float64); }},
      {"converting copy, output 8 bytes off alignment",
       [&] {
         Tensor z = Tensor::zeros({n + 1}, DType::Float64);
         z.slice(0, 1, n + 1).copy_(x);
         return z;
       }},
      {"bool output 3 bytes off alignment", [&] {
         Tensor z = Tensor::zeros({n + 3}, DType::Bool);
         z.slice(0, 3, n + 3).copy_(x);
         return z;
       }}};
  for (const auto& [what, f] : cases) {
    set_num_threads(1);
    detail::set_simd_level(SimdLevel::kBaseline);
    const Tensor want = f();  // plain stores: 1 MiB is under kStreamBytes
    struct Threshold {
      int64_t before = detail::stream_bytes.exchange(0);
      ~Threshold() { detail::stream_bytes = before; }
    } threshold;
    for (SimdLevel level : dtensor::testing::simd_levels()) {
      detail::set_simd_level(level);
      for (int threads : {1, 2, 3, 8}) {
        set_num_threads(threads);
        EXPECT_TRUE(same_bits(want, f())) << what << ": differs when streamed at " << threads
                                          << " threads, level " << detail::simd_level_name(level);
      }
    }
  }
}

TEST_F(ThreadsTest, ElementwiseMatchesAScalarLoop) {
  set_num_threads(3);
  const Tensor a = Tensor::randn({517, 333}, 1);
  const Tensor b = Tensor::randn({333, 517}, 2);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> got = add(a.t(), b).to_vector<float>();
  const std::vector<float> perm = a.t().contiguous().to_vector<float>();
  for (int64_t i = 0; i < 333; ++i) {
    for (int64_t j = 0; j < 517; ++j) {
      ASSERT_EQ(got[i * 517 + j], av[j * 333 + i] + bv[i * 517 + j]) << i << "," << j;
      ASSERT_EQ(perm[i * 517 + j], av[j * 333 + i]);
    }
  }
}

TEST_F(ThreadsTest, Reductions) {
  const Tensor x = spread({301, 777}, 11);  // 234K elements
  const Tensor x3 = spread({23, 97, 131}, 12);
  const Tensor xd = spread({300001}, 13).to(DType::Float64);
  const Tensor xi = Tensor::randint(-1000, 1000, {301, 777}, 14);
  Tensor xn = x.clone();
  xn.narrow(0, 150, 1).narrow(1, 400, 1).fill_(std::nan(""));
  for (bool transposed : {false, true}) {
    const Tensor v = transposed ? x.t() : x;
    const std::string t = transposed ? " (transposed)" : "";
    expect_stable("sum" + t, [&] { return sum(v); });
    expect_stable("sum dim 0" + t, [&] { return sum(v, {0}); });
    expect_stable("sum dim 1" + t, [&] { return sum(v, {1}, true); });
    expect_stable("mean dim 0" + t, [&] { return mean(v, {0}); });
    expect_stable("mean" + t, [&] { return mean(v); });
    expect_stable("amax" + t, [&] { return amax(v); });
    expect_stable("amax dim 1" + t, [&] { return amax(v, {1}); });
    expect_stable("amin dim 0" + t, [&] { return amin(v, {0}); });
    expect_stable("var" + t, [&] { return var(v); });
    expect_stable("var dim 1" + t, [&] { return var(v, {1}); });
    expect_stable("argmax" + t, [&] { return argmax(v); });
    expect_stable("argmax dim 0" + t, [&] { return argmax(v, 0); });
    expect_stable("argmin dim 1" + t, [&] { return argmin(v, 1); });
  }
  expect_stable("sum dims 0,2", [&] { return sum(x3, {0, 2}); });
  expect_stable("sum dim 1 of a permuted 3-d", [&] { return sum(x3.permute({2, 0, 1}), {1}); });
  expect_stable("prod", [&] { return prod(add(mul(x, 1e-4), 1.0)); });
  expect_stable("float64 sum", [&] { return sum(xd); });
  expect_stable("float64 var", [&] { return var(xd); });
  expect_stable("int64 sum", [&] { return sum(xi); });
  expect_stable("int64 sum dim 0", [&] { return sum(xi, {0}); });
  expect_stable("amax with a NaN", [&] { return amax(xn); });
  expect_stable("amax dim 0 with a NaN", [&] { return amax(xn, {0}); });
  expect_stable("argmax with a NaN", [&] { return argmax(xn); });
  expect_stable("empty sum", [&] { return sum(Tensor::randn({0, 7}, 1), {0}); });
}

// Reductions over the outer dims of a contiguous tensor fold several rows
// per pass (reduce.cc, fold_columns). A view with every other column of a
// wider tensor has the same values but a column stride of 2, so it takes
// the row-by-row walk: each slot must come out with the same bits, whatever
// the op, dtype, thread count and SIMD level. 301 rows and 2077 columns
// leave a partial group of rows and a partial column chunk.
TEST_F(ThreadsTest, ColumnReductionsKeepTheRowByRowBits) {
  const Tensor wide = spread({301, 2 * 2077}, 31);
  Tensor wide_nan = wide.clone();
  wide_nan.narrow(0, 200, 1).narrow(1, 1000, 1).fill_(std::nan(""));
  const Tensor wide3 = spread({7, 43, 2 * 129}, 32);
  const Tensor wide_i = Tensor::randint(-1000, 1000, {301, 2 * 2077}, 33);
  const Tensor wide_d = wide.to(DType::Float64);
  auto every_other = [](const Tensor& t) { return t.slice(-1, 0, t.shape().back(), 2); };
  struct Case {
    std::string what;
    std::function<Tensor(const Tensor&)> op;
    const Tensor* input;
  };
  const std::vector<Case> cases = {
      {"sum dim 0", [](const Tensor& t) { return sum(t, {0}); }, &wide},
      {"mean dim 0", [](const Tensor& t) { return mean(t, {0}); }, &wide},
      {"var dim 0", [](const Tensor& t) { return var(t, {0}); }, &wide},
      {"prod dim 0", [](const Tensor& t) { return prod(add(mul(t, 1e-3), 1.0), {0}); }, &wide},
      {"amax dim 0 with a NaN", [](const Tensor& t) { return amax(t, {0}); }, &wide_nan},
      {"amin dim 0", [](const Tensor& t) { return amin(t, {0}); }, &wide},
      {"sum dims 0,1 of a 3-d", [](const Tensor& t) { return sum(t, {0, 1}); }, &wide3},
      {"int64 sum dim 0", [](const Tensor& t) { return sum(t, {0}); }, &wide_i},
      {"float64 sum dim 0", [](const Tensor& t) { return sum(t, {0}); }, &wide_d},
  };
  for (const Case& c : cases) {
    const Tensor strided = every_other(*c.input);
    const Tensor packed = strided.contiguous();
    set_num_threads(1);
    detail::set_simd_level(SimdLevel::kBaseline);
    const Tensor row_by_row = c.op(strided);
    EXPECT_TRUE(same_bits(c.op(packed), row_by_row)) << c.what;
    expect_stable(c.what, [&] { return c.op(packed); });
  }
}

TEST_F(ThreadsTest, FullReductionsMatchAScalarLoop) {
  set_num_threads(2);
  const Tensor x = spread({301, 777}, 21);
  const std::vector<float> v = x.to_vector<float>();
  double s = 0, m = -INFINITY;
  int64_t at = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    s += v[i];
    if (v[i] > m) {
      m = v[i];
      at = static_cast<int64_t>(i);
    }
  }
  EXPECT_NEAR(sum(x).item<float>(), s, 1e-6 * std::abs(s) + 1e-3);
  EXPECT_EQ(amax(x).item<float>(), static_cast<float>(m));
  EXPECT_EQ(argmax(x).item<int64_t>(), at);
  // The largest value repeated: the first occurrence wins across blocks.
  Tensor y = Tensor::zeros({300000});
  y.narrow(0, 70000, 1).fill_(5);
  y.narrow(0, 250000, 1).fill_(5);
  EXPECT_EQ(argmax(y).item<int64_t>(), 70000);
}

TEST_F(ThreadsTest, RowKernels) {
  const Tensor x = Tensor::randn({211, 1031}, 31) * 4.0;
  const Tensor x3 = Tensor::randn({7, 301, 97}, 32) * 4.0;
  const Tensor w = Tensor::randn({1031}, 33), bias = Tensor::randn({1031}, 34);
  const Tensor target = Tensor::randint(0, 1031, {211}, 35);
  Tensor target_ignored = target.clone();
  target_ignored.narrow(0, 5, 20).fill_(-100);
  const Tensor xd = x.to(DType::Float64);
  expect_stable("softmax", [&] { return softmax(x, -1); });
  expect_stable("softmax of a transposed input", [&] { return softmax(x.t(), -1); });
  expect_stable("softmax dim 0", [&] { return softmax(x, 0); });
  expect_stable("softmax dim 1 of 3-d", [&] { return softmax(x3, 1); });
  expect_stable("log_softmax", [&] { return log_softmax(x, 1); });
  expect_stable("log_softmax dim 0", [&] { return log_softmax(x3, 0); });
  expect_stable("float64 softmax", [&] { return softmax(xd, 1); });
  expect_stable("layer_norm", [&] { return layer_norm(x, {1031}, w, bias, 1e-5); });
  expect_stable("layer_norm without affine", [&] { return layer_norm(x, {1031}, {}, {}, 1e-5); });
  expect_stable("rms_norm", [&] { return rms_norm(x, {1031}, w, 1e-6); });
  expect_stable("cross_entropy", [&] { return cross_entropy(x, target); });
  expect_stable("cross_entropy none", [&] {
    return cross_entropy(x, target_ignored, Reduction::None);
  });
  expect_stable("cross_entropy sum", [&] { return cross_entropy(xd, target, Reduction::Sum); });
  expect_stable("nll_loss", [&] { return nll_loss(log_softmax(x, 1), target_ignored); });
  expect_stable("empty softmax", [&] { return softmax(Tensor::randn({0, 9}, 1), 1); });
}

// Products big enough to be cut into blocks of output rows or columns, one
// BLAS call each (src/tensor/linalg.cc): the blocks depend on the shape
// alone, so the bits do not depend on the thread count. Shapes cut by rows
// (more rows than columns), by columns, into the most blocks, and a last
// block that is partial; operands transposed; a batch folded into rows.
TEST_F(ThreadsTest, Products) {
  const Tensor a = Tensor::randn({613, 301}, 41), b = Tensor::randn({301, 257}, 42);
  const Tensor wide = Tensor::randn({97, 2100}, 43), tall = Tensor::randn({2100, 97}, 44);
  const Tensor x3 = Tensor::randn({3, 333, 128}, 45), w = Tensor::randn({515, 128}, 46);
  const Tensor bias = Tensor::randn({515}, 47);
  expect_stable("mm by rows", [&] { return mm(a, b); });
  expect_stable("mm by columns", [&] { return mm(b.t(), a.t()); });
  expect_stable("mm, most blocks", [&] { return mm(tall, wide); });
  expect_stable("mm, transposed operands", [&] { return mm(wide.t(), tall.t()); });
  expect_stable("float64 mm", [&] { return mm(a.to(DType::Float64), b.to(DType::Float64)); });
  expect_stable("linear, batch folded into rows", [&] { return linear(x3, w, bias); });
  expect_stable("bmm", [&] { return matmul(x3, x3.transpose(1, 2)); });
  // bfloat16: oneDNN's bf16 kernels where the CPU has them, the widened
  // float32 product elsewhere; fixed blocks either way.
  const Tensor ah = a.to(DType::BFloat16), bh = b.to(DType::BFloat16);
  expect_stable("bfloat16 mm by rows", [&] { return mm(ah, bh); });
  expect_stable("bfloat16 mm by columns", [&] { return mm(bh.t(), ah.t()); });
  expect_stable("bfloat16 linear", [&] {
    return linear(x3.to(DType::BFloat16), w.to(DType::BFloat16), bias.to(DType::BFloat16));
  });
}

TEST_F(ThreadsTest, SoftmaxMatchesAScalarLoop) {
  set_num_threads(2);
  const Tensor x = Tensor::randn({211, 1031}, 41) * 4.0;
  const std::vector<float> v = x.to_vector<float>();
  const std::vector<float> got = softmax(x, 1).to_vector<float>();
  for (int64_t r = 0; r < 211; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < 1031; ++j) m = std::max(m, double(v[r * 1031 + j]));
    for (int64_t j = 0; j < 1031; ++j) s += std::exp(v[r * 1031 + j] - m);
    for (int64_t j = 0; j < 1031; ++j) {
      const double want = std::exp(v[r * 1031 + j] - m) / s;
      ASSERT_NEAR(got[r * 1031 + j], want, 2e-6 * want + 1e-30) << r << "," << j;
    }
  }
}

TEST_F(ThreadsTest, TheFirstBadTargetIsReported) {
  const Tensor x = Tensor::randn({4000, 100}, 51);
  Tensor target = Tensor::zeros({4000}, DType::Int64);
  target.narrow(0, 1234, 1).fill_(100);
  target.narrow(0, 3900, 1).fill_(-7);
  for (int threads : {1, 2, 8}) {
    set_num_threads(threads);
    try {
      cross_entropy(x, target);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("target 100 is out of bounds"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
