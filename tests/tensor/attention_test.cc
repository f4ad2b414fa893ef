// Tests of scaled_dot_product_attention on plain tensors: hand-computed
// values (default and given scale, causal with L != S, bool and float
// masks, a fully masked row), NaN and empty edge cases, errors, the kernel
// against a double-precision reference loop on random broadcast shapes,
// the shard kernel's causal query offset, and the backward kernel against
// central finite differences.
//
// Tolerances against the double reference: float64 1e-12 * (1 + |ref|),
// float32 2e-5 * (1 + |ref|) (sums of E products in float32 via BLAS).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "tensor/attention.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A float32 column [n, 1].
Tensor col(const std::vector<float>& v) {
  return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size()), 1});
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// softmax(q k^T * scale + mask) v in double over broadcast copies of the
// inputs; the mask is undefined, bool or additive.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              bool causal, double scale, Shape* out_shape) {
  const Shape out = detail::sdpa_output_shape("ref", q.shape(), q.dtype(), k.shape(), k.dtype(),
                                              v.shape(), v.dtype(),
                                              mask.defined() ? &mask.shape() : nullptr,
                                              mask.dtype(), 0.0, causal);
  *out_shape = out;
  Shape batch = out;
  const int64_t L = batch[batch.size() - 2], Ev = batch.back();
  batch.pop_back();
  batch.pop_back();
  const int64_t S = k.size(-2), E = q.size(-1), B = batch.product();
  auto full = [&](const Tensor& x, int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return x.expand(s).contiguous().to_vector<double>();
  };
  const auto qv = full(q, L, E), kv = full(k, S, E), vv = full(v, S, Ev);
  std::vector<double> mv;
  if (mask.defined()) mv = full(mask, L, S);
  std::vector<double> res(static_cast<size_t>(B * L * Ev), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -kInf;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        double x = E == 0 ? 0.0 : dot * scale;
        if (causal && j > i) x = -kInf;
        if (mask.defined()) {
          const double m = mv[(b * L + i) * S + j];
          if (mask.dtype() == DType::Bool) x = m != 0 ? x : -kInf;
          else x += m;
        }
        s[j] = x;
        mx = std::max(mx, x);
      }
      if (mx == -kInf) continue;  // fully masked: zeros
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < Ev; ++c)
          res[(b * L + i) * Ev + c] += s[j] / sum * vv[(b * S + j) * Ev + c];
    }
  }
  return res;
}

void expect_close(const Tensor& got, const Shape& shape, const std::vector<double>& ref,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), shape) << what;
  const auto v = values(got);
  ASSERT_EQ(v.size(), ref.size()) << what;
  const double rel = got.dtype() == DType::Float64 ? 1e-12 : 2e-5;
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_LE(std::fabs(v[i] - ref[i]), rel * (1 + std::fabs(ref[i])))
        << what << ": element " << i << " is " << v[i] << ", expected " << ref[i];
}

}  // namespace

// q = [[1], [0]], k = [[1], [0]], v = [[1], [3]] with E = 1 (scale 1):
// row 0 scores [1, 0] -> (e + 3) / (e + 1); row 1 scores [0, 0] -> 2.
TEST(Attention, HandComputedValues) {
  const Tensor q = col({1, 0}), k = col({1, 0}), v = col({1, 3});
  const double e = std::exp(1.0);
  auto vals = values(scaled_dot_product_attention(q, k, v));
  EXPECT_NEAR(vals[0], (e + 3) / (e + 1), 1e-6);
  EXPECT_NEAR(vals[1], 2.0, 1e-6);
  // scale 2: row 0 scores [2, 0].
  vals = values(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, 2.0));
  EXPECT_NEAR(vals[0], (std::exp(2.0) + 3) / (std::exp(2.0) + 1), 1e-6);
  // Default scale is 1/sqrt(E): E = 4 with q = k = [1, 1, 1, 1] gives score 2.
  const Tensor q4 = Tensor::ones({1, 4}), k4 = Tensor::ones({2, 4}) * Tensor::from_vector(
                                              std::vector<float>{1, 0}, Shape{2, 1});
  vals = values(scaled_dot_product_attention(q4, k4, v));
  EXPECT_NEAR(vals[0], (std::exp(2.0) + 3) / (std::exp(2.0) + 1), 1e-6);
  // Causal: row 0 sees key 0 only.
  vals = values(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true));
  EXPECT_NEAR(vals[0], 1.0, 1e-6);
  EXPECT_NEAR(vals[1], 2.0, 1e-6);
}

// is_causal is top-left aligned (query i sees keys j <= i) for L != S too.
TEST(Attention, CausalWithLNotEqualS) {
  const Tensor v = col({1, 3});
  auto vals = values(scaled_dot_product_attention(Tensor::zeros({3, 1}), Tensor::zeros({2, 1}), v,
                                                  Tensor(), 0.0, true));
  EXPECT_EQ(vals, (std::vector<double>{1, 2, 2}));
  const Tensor v3 = col({1, 3, 5});
  vals = values(scaled_dot_product_attention(Tensor::zeros({1, 1}), Tensor::zeros({3, 1}), v3,
                                             Tensor(), 0.0, true));
  EXPECT_EQ(vals, (std::vector<double>{1}));
}

// bool masks keep the true entries; a row with none left gives 0 (PyTorch's
// _safe_softmax), not NaN. Float masks are added (-inf removes a key).
TEST(Attention, BoolAndFloatMasks) {
  const Tensor q = col({1, 0}), k = col({1, 0}), v = col({1, 3});
  const Tensor bmask = Tensor::from_vector(std::vector<bool>{true, false, false, false}, Shape{2, 2});
  auto vals = values(scaled_dot_product_attention(q, k, v, bmask));
  EXPECT_EQ(vals, (std::vector<double>{1, 0}));
  const Tensor fmask = Tensor::from_vector(
      std::vector<float>{0, -std::numeric_limits<float>::infinity(), std::log(3.0f), 0}, Shape{2, 2});
  vals = values(scaled_dot_product_attention(q, k, v, fmask));
  EXPECT_NEAR(vals[0], 1.0, 1e-6);
  EXPECT_NEAR(vals[1], 0.75 * 1 + 0.25 * 3, 1e-6);
  // A float row of -inf is fully masked too.
  const Tensor all_inf = Tensor::full({1, 2}, -kInf);
  vals = values(scaled_dot_product_attention(q, k, v, all_inf));
  EXPECT_EQ(vals, (std::vector<double>{0, 0}));
  // A mask broadcast from [S] (one row for every query).
  const Tensor row = Tensor::from_vector(std::vector<bool>{false, true}, Shape{2});
  vals = values(scaled_dot_product_attention(q, k, v, row));
  EXPECT_EQ(vals, (std::vector<double>{3, 3}));
}

TEST(Attention, NaNAndEmptyEdgeCases) {
  const Tensor v = col({1, 3});
  // A NaN score makes its row NaN, the other row stays finite.
  auto vals = values(scaled_dot_product_attention(col({std::nanf(""), 0}), col({1, 0}), v));
  EXPECT_TRUE(std::isnan(vals[0]));
  EXPECT_NEAR(vals[1], 2.0, 1e-6);
  // S = 0: every row is an empty sum of values, zeros.
  Tensor out = scaled_dot_product_attention(Tensor::ones({2, 3, 4}), Tensor::ones({2, 0, 4}),
                                            Tensor::ones({2, 0, 5}));
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5}));
  EXPECT_TRUE(equal(out, Tensor::zeros({2, 3, 5})));
  // L = 0 and an empty batch.
  EXPECT_EQ(scaled_dot_product_attention(Tensor::ones({0, 4}), Tensor::ones({3, 4}),
                                         Tensor::ones({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(scaled_dot_product_attention(Tensor::ones({0, 2, 4}), Tensor::ones({3, 4}),
                                         Tensor::ones({3, 2})).shape(), (Shape{0, 2, 2}));
  // E = 0: every score is 0 (PyTorch scales q and k, not their empty
  // product, so the default scale 1/sqrt(0) = inf does not make NaN).
  out = scaled_dot_product_attention(Tensor::ones({2, 0}), Tensor::ones({2, 0}), v);
  EXPECT_EQ(values(out), (std::vector<double>{2, 2}));
}

TEST(Attention, Errors) {
  const Tensor q = Tensor::ones({2, 3, 4}), k = Tensor::ones({2, 5, 4}), v = Tensor::ones({2, 5, 6});
  const char* op = "scaled_dot_product_attention";
  expect_error([&] { scaled_dot_product_attention(q, k, v, Tensor(), 0.1); },
               {op, "dropout_p must be 0", "0.1"});
  expect_error([&] {
    scaled_dot_product_attention(q.to(DType::Int64), k.to(DType::Int64), v.to(DType::Int64));
  }, {op, "floating point", "int64"});
  expect_error([&] { scaled_dot_product_attention(q, k.to(DType::Float64), v); },
               {op, "same dtype", "float32", "float64"});
  expect_error([&] { scaled_dot_product_attention(Tensor::ones({4}), k, v); },
               {op, "at least 2-d", "[4]"});
  expect_error([&] { scaled_dot_product_attention(q, Tensor::ones({2, 5, 3}), v); },
               {op, "key's last dim", "E = 4", "[2, 5, 3]"});
  expect_error([&] { scaled_dot_product_attention(q, k, Tensor::ones({2, 4, 6})); },
               {op, "value's sequence dim", "S = 5", "[2, 4, 6]"});
  expect_error([&] { scaled_dot_product_attention(q, Tensor::ones({3, 5, 4}), v); },
               {op, "do not broadcast", "[3, 5, 4]"});
  expect_error([&] { scaled_dot_product_attention(q, k, v, Tensor::ones({3, 5}, DType::Int64)); },
               {op, "attn_mask must be bool", "int64"});
  expect_error([&] { scaled_dot_product_attention(q, k, v, Tensor::ones({3, 4}, DType::Bool)); },
               {op, "attn_mask of shape [3, 4]", "[2, 3, 5]"});
  expect_error([&] { scaled_dot_product_attention(q, k, v, Tensor::ones({3, 5}), 0.0, true); },
               {op, "must not be given with is_causal"});
  expect_error([&] {
    detail::sdpa_backward(detail::SdpaInput::Mask, Tensor::ones({2, 3, 6}), q, k, v,
                          Tensor::ones({3, 5}, DType::Bool), false, 0.5, 0);
  }, {op, "only a float attn_mask has a gradient"});
  // Sizes whose scores [batch, L, S] overflow int64 are refused before any allocation.
  const int64_t big = int64_t{1} << 40;
  expect_error([&] {
    detail::sdpa_output_shape(op, {big, 2, 1}, DType::Float32, {1, big, 1}, DType::Float32,
                              {1, big, 1}, DType::Float32, nullptr, DType::Bool, 0.0, false);
  }, {op, "int64 can count"});
}

// Random shapes with broadcast batch dims, masks of every kind, causal,
// both dtypes: the kernel against the double reference.
TEST(Attention, MatchesReferenceOnRandomShapes) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    const DType dtype = iter % 2 == 0 ? DType::Float32 : DType::Float64;
    const int64_t L = rng() % 6, S = rng() % 6, E = 1 + rng() % 5, Ev = rng() % 4;
    const int nb = static_cast<int>(rng() % 3);
    Shape batch;
    for (int i = 0; i < nb; ++i) batch.push_back(1 + rng() % 3);
    // Each input drops leading batch dims or sets some to 1 at random.
    auto input_shape = [&](int64_t r, int64_t c) {
      Shape s;
      const size_t skip = rng() % (batch.size() + 1);
      for (size_t i = skip; i < batch.size(); ++i) s.push_back(rng() % 3 == 0 ? 1 : batch[i]);
      s.push_back(r);
      s.push_back(c);
      return s;
    };
    const Tensor q = Tensor::randn(input_shape(L, E), iter, 0, dtype);
    const Tensor k = Tensor::randn(input_shape(S, E), iter + 1, 0, dtype);
    const Tensor v = Tensor::randn(input_shape(S, Ev), iter + 2, 0, dtype);
    const int kind = static_cast<int>(rng() % 4);  // none, causal, bool, float
    Tensor mask;
    if (kind >= 2) {
      // Broadcastable to the scores [batch..., L, S] of q, k and v.
      Shape ms = detail::sdpa_output_shape("test", q.shape(), dtype, k.shape(), dtype, v.shape(),
                                           dtype, nullptr, DType::Bool, 0.0, false);
      ms.back() = S;
      const size_t skip = rng() % (ms.size() - 1);
      Shape kept;
      for (size_t i = skip; i < ms.size(); ++i)
        kept.push_back(i + 2 < ms.size() && rng() % 3 == 0 ? 1 : ms[i]);
      ms = kept;
      if (rng() % 3 == 0) ms[ms.size() - 2] = 1;
      mask = kind == 2 ? lt(Tensor::rand(ms, iter + 3), 0.7)
                       : Tensor::randn(ms, iter + 3, 0, dtype);
    }
    const double scale = rng() % 2 == 0 ? 1.0 / std::sqrt(static_cast<double>(E)) : 0.3;
    const std::string what = "iter " + std::to_string(iter) + " q " + to_string(q.shape()) +
                             " k " + to_string(k.shape()) + " v " + to_string(v.shape()) +
                             " mask kind " + std::to_string(kind);
    Shape shape;
    const auto ref = reference(q, k, v, mask, kind == 1, scale, &shape);
    const std::optional<double> given =
        scale == 0.3 ? std::optional<double>(0.3) : std::nullopt;
    expect_close(scaled_dot_product_attention(q, k, v, mask, 0.0, kind == 1, given), shape, ref,
                 what);
  }
}

// The shard kernel: query rows [off, off + n) of a causal attention, run
// with q_offset = off, equal those rows of the whole one (uneven and empty
// pieces); without the offset they would not.
TEST(Attention, ShardKernelUsesTheGlobalQueryOffset) {
  const Tensor q = Tensor::randn({2, 7, 3}, 1, 0, DType::Float64);
  const Tensor k = Tensor::randn({2, 9, 3}, 2, 0, DType::Float64);
  const Tensor v = Tensor::randn({2, 9, 4}, 3, 0, DType::Float64);
  const double scale = 1 / std::sqrt(3.0);
  const Tensor whole = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  for (const auto& [off, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 3}, {6, 1}, {7, 0}}) {
    const Tensor part = detail::sdpa_forward(q.narrow(1, off, n), k, v, Tensor(), true, scale, off);
    EXPECT_LE(max_abs_diff(part, whole.narrow(1, off, n)), 1e-12) << "rows from " << off;
  }
  const Tensor wrong = detail::sdpa_forward(q.narrow(1, 3, 3), k, v, Tensor(), true, scale, 0);
  EXPECT_GT(max_abs_diff(wrong, whole.narrow(1, 3, 3)), 1e-3);
}

// The backward kernel against central differences of sum(out * w) in
// float64, with broadcasting, masks and causal; a float mask's gradient too.
TEST(Attention, BackwardMatchesFiniteDifferences) {
  struct Case {
    Shape q, k, v, mask;
    int kind;  // 0 none, 1 causal, 2 bool mask, 3 float mask
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {2, 5, 4}, {2, 5, 2}, {}, 0},  {{2, 4, 3}, {2, 3, 3}, {2, 3, 2}, {}, 1},
      {{2, 3, 2}, {1, 4, 2}, {4, 3}, {3, 4}, 2}, {{3, 2}, {2, 4, 2}, {2, 4, 3}, {2, 1, 4}, 3},
      {{1, 2, 3, 2}, {2, 1, 3, 2}, {2, 2, 3, 1}, {}, 1},
  };
  const double eps = 1e-6;
  int seed = 10;
  for (const Case& c : cases) {
    const Tensor q = Tensor::randn(c.q, seed++, 0, DType::Float64);
    const Tensor k = Tensor::randn(c.k, seed++, 0, DType::Float64);
    const Tensor v = Tensor::randn(c.v, seed++, 0, DType::Float64);
    Tensor mask;
    if (c.kind == 2) {
      mask = lt(Tensor::rand(c.mask, seed++), 0.7);
      mask.select(mask.dim() - 2, 0).fill_(false);  // a fully masked row too
    }
    if (c.kind == 3) mask = Tensor::randn(c.mask, seed++, 0, DType::Float64);
    const bool causal = c.kind == 1;
    const double scale = 0.7;
    const Tensor out = scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale);
    const Tensor w = Tensor::randn(out.shape(), seed++, 0, DType::Float64);
    const Tensor inputs[4] = {q, k, v, mask};
    for (int which = 0; which < (c.kind == 3 ? 4 : 3); ++which) {
      const Tensor got = detail::sdpa_backward(static_cast<detail::SdpaInput>(which), w, q, k, v,
                                               mask, causal, scale, 0);
      ASSERT_EQ(got.shape(), inputs[which].shape());
      const auto g = values(got);
      std::vector<double> x = values(inputs[which]);
      for (size_t j = 0; j < x.size(); ++j) {
        auto loss = [&](double delta) {
          std::vector<double> moved = x;
          moved[j] += delta;
          Tensor in[4] = {q, k, v, mask};
          in[which] = Tensor::from_vector(moved, inputs[which].shape());
          return sum(scaled_dot_product_attention(in[0], in[1], in[2], in[3], 0.0, causal, scale) *
                     w).item<double>();
        };
        const double numeric = (loss(eps) - loss(-eps)) / (2 * eps);
        ASSERT_NEAR(g[j], numeric, 1e-6 + 1e-5 * std::fabs(numeric))
            << "input " << which << " element " << j << " of case q " << c.q;
      }
    }
  }
}

// The causal forward works in blocks of 64 query rows that see only the
// keys up to their last row: long sequences (several blocks, L > S and
// L < S, a block's keys clamped at S) against the reference, and shards
// starting inside a block against the rows of the whole.
TEST(Attention, CausalBlocksMatchReference) {
  for (const auto& [L, S] : std::vector<std::pair<int64_t, int64_t>>{{150, 130}, {70, 200}, {64, 64}}) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      const Tensor q = Tensor::randn({2, L, 5}, L, 0, dtype);
      const Tensor k = Tensor::randn({2, S, 5}, S, 0, dtype);
      const Tensor v = Tensor::randn({2, S, 3}, L + S, 0, dtype);
      const double scale = 1 / std::sqrt(5.0);
      Shape shape;
      const auto ref = reference(q, k, v, Tensor(), true, scale, &shape);
      const Tensor whole = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
      const std::string what = "L " + std::to_string(L) + " S " + std::to_string(S);
      expect_close(whole, shape, ref, what);
      for (int64_t off : {int64_t{0}, int64_t{37}, L - 1}) {
        const int64_t n = std::min<int64_t>(L - off, 90);
        const Tensor part = detail::sdpa_forward(q.narrow(1, off, n), k, v, Tensor(), true, scale, off);
        EXPECT_LE(max_abs_diff(part, whole.narrow(1, off, n)), dtype == DType::Float64 ? 1e-12 : 1e-5)
            << what << " rows from " << off;
      }
    }
  }
}
