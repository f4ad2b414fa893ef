// Every op the rules validator knows (src/rules/cases*.cc), on bfloat16 and
// float16 inputs: the result is, bit for bit, the float32 op on the widened
// inputs with its floating result rounded once (src/tensor/half_compute.h),
// and of the dtype PyTorch gives; bfloat16 products on a CPU with bf16
// instructions within one rounding of it (native_product). Plus gradients
// through autograd.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "dtensor/dtensor.h"
#include "rules/cases.h"
#include "tensor/attention.h"
#include "tensor/onednn_gemm.h"
#include "tensor/scan.h"
#include "tensor/simd_threads.h"
#include "test_util.h"

namespace dtensor {
namespace {

// The validator's inputs, with the floating ones moved off the integers
// (times 1 + u/10, u uniform in [0, 1): signs and zeros kept, so that
// log's and sqrt's inputs stay positive and all/any's zeros stay zeros) and
// then rounded to `half`, so that every op has rounding to do.
rules::Tensors half_inputs_of(const rules::OpCase& c, uint64_t seed, DType half) {
  rules::Tensors in = c.examples;
  if (in.empty())
    for (size_t i = 0; i < c.inputs.size(); ++i)
      in.push_back(rules::make_input(c.inputs[i], seed + i));
  for (size_t i = 0; i < in.size(); ++i) {
    if (!is_floating(in[i].dtype())) continue;
    const Tensor jitter = add(mul(Tensor::rand(in[i].shape(), seed + 100 + i), 0.1), 1.0);
    in[i] = mul(in[i].to(DType::Float32), jitter).to(half);
  }
  return in;
}

// Products whose bfloat16 form runs oneDNN's kernels where the CPU has bf16
// instructions (tensor/onednn_gemm.h): they accumulate in float32 too, but
// in the kernel's own order (and vdpbf16ps flushes denormals), so they
// equal the widened float32 product rounded once only within one rounding.
bool native_product(const std::string& name, DType half) {
  static const char* const products[] = {"mm",     "bmm",  "matmul", "addmm", "baddbmm",
                                         "linear", "sdpa", "einsum"};
  if (!detail::native_half_gemm(half)) return false;
  for (const char* p : products)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

// The largest |value| of t.
double max_abs(const Tensor& t) { return max_abs_diff(t, Tensor::zeros(t.shape(), t.dtype())); }

using HalfElementwiseLevels = dtensor::testing::ThreadsAndSimdTest;

using dtensor::testing::same_bits;

void sweep(DType half) {
  int checked = 0;
  for (const rules::OpCase& c : rules::all_cases()) {
    SCOPED_TRACE(c.name);
    for (uint64_t seed : {11u, 12u}) {
      const rules::Tensors in = half_inputs_of(c, seed, half);
      rules::Tensors wide;
      bool any_floating = false;
      for (const Tensor& t : in) {
        any_floating = any_floating || is_floating(t.dtype());
        wide.push_back(is_half(t.dtype()) ? t.to(DType::Float32) : t);
      }
      Tensor got;
      try {
        got = c.plain(in);
      } catch (const Error& e) {
        ADD_FAILURE() << c.name << " on " << half << ": " << e.what();
        continue;
      }
      const Tensor ref = c.plain(wide);
      // PyTorch's dtype: a float32 result of float32 inputs is a 16-bit
      // result of 16-bit inputs; int64 and bool results stay so.
      const bool rounds = any_floating && ref.dtype() == DType::Float32;
      const Tensor want = rounds ? ref.to(half) : ref;
      EXPECT_EQ(got.dtype(), want.dtype()) << c.name;
      if (native_product(c.name, half)) {  // within one rounding of the largest value
        EXPECT_LE(max_abs_diff(got, want), std::ldexp(max_abs(ref), -8)) << c.name;
      } else {
        EXPECT_TRUE(same_bits(got, want)) << c.name << " on " << half << "\ngot  " << got
                                          << "\nwant " << want;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * static_cast<int>(rules::all_cases().size()));
}

TEST(HalfOpsTest, EveryValidatorCaseIsTheFloat32OpRoundedOnceBFloat16) { sweep(DType::BFloat16); }
TEST(HalfOpsTest, EveryValidatorCaseIsTheFloat32OpRoundedOnceFloat16) { sweep(DType::Float16); }

// The ops the validator's cases do not call (in-place forms, the kernels
// the DTensor ops and backward use), by the same rule.
TEST(HalfOpsTest, OtherEntryPointsAreTheFloat32OpRoundedOnce) {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(half));
    const Tensor x = Tensor::randn({3, 4}, 8, 0, half);
    const Tensor w = x.to(DType::Float32);
    const Tensor mask = gt(Tensor::rand({3, 4}, 9), 0.5);
    const Tensor idx = Tensor::randint(0, 4, {3, 4}, 10);
    Tensor y = x.clone();
    y.relu_();
    EXPECT_TRUE(same_bits(y, relu(w).to(half)));
    y = x.clone();
    y.masked_fill_(mask, 0.1);
    EXPECT_TRUE(same_bits(y, masked_fill(w, mask, 0.1).to(half)));
    EXPECT_EQ(max_abs_diff(x, x.t().t()), 0.0);
    EXPECT_TRUE(same_bits(norm(x, 3, {1}), norm(w, 3, {1}).to(half)));
    EXPECT_TRUE(same_bits(clamp_max(x, 0.3), clamp_max(w, 0.3).to(half)));
    EXPECT_TRUE(same_bits(detail::reverse_cumsum(x, 1), detail::reverse_cumsum(w, 1).to(half)));
    EXPECT_TRUE(
        same_bits(detail::take_along_dim(x, idx, 1), detail::take_along_dim(w, idx, 1).to(half)));
    EXPECT_TRUE(same_bits(detail::scatter_add_along_dim(x, idx, 1, {3, 4}),
                          detail::scatter_add_along_dim(w, idx, 1, {3, 4}).to(half)));
    // A lone operand with its labels in order stays a view.
    EXPECT_EQ(einsum("ij->ij", {x}).storage(), x.storage());
    const Tensor q = Tensor::randn({2, 3, 4}, 11, 0, half);
    const Tensor k = Tensor::randn({2, 5, 4}, 12, 0, half);
    const Tensor v = Tensor::randn({2, 5, 4}, 13, 0, half);
    const Tensor g = Tensor::randn({2, 3, 4}, 14, 0, half);
    const auto f = [](const Tensor& t) { return t.to(DType::Float32); };
    using detail::SdpaInput;
    for (SdpaInput which : {SdpaInput::Query, SdpaInput::Key, SdpaInput::Value}) {
      EXPECT_TRUE(same_bits(
          detail::sdpa_backward(which, g, q, k, v, Tensor(), true, 0.5, 0),
          detail::sdpa_backward(which, f(g), f(q), f(k), f(v), Tensor(), true, 0.5, 0).to(half)));
    }
    // Mixed dtypes promote (bfloat16 with float32 is float32), no 16-bit path.
    EXPECT_EQ(mm(x, w.t()).dtype(), DType::Float32);
    EXPECT_THROW(detail::sdpa_forward(q, f(k), v, Tensor(), false, 0.5, 0), Error);
  }
}

// Accumulation in float32, not in 16 bits: 4096 ones sum to 4096 (a
// bfloat16 running sum would stop at 256), and a bfloat16 mm of such rows too.
TEST(HalfOpsTest, ReductionsAndProductsAccumulateInFloat32) {
  const Tensor ones = Tensor::ones({4096}, DType::BFloat16);
  EXPECT_EQ(sum(ones).item<double>(), 4096.0);
  EXPECT_EQ(mean(ones).item<double>(), 1.0);
  EXPECT_EQ(cumsum(ones, 0).to(DType::Float32).to_vector<float>().back(), 4096.0f);
  const Tensor m = mm(ones.view({1, 4096}), ones.view({4096, 1}));
  EXPECT_EQ(m.dtype(), DType::BFloat16);
  EXPECT_EQ(m.item<double>(), 4096.0);
  const Tensor h = Tensor::ones({3000}, DType::Float16);
  EXPECT_EQ(sum(h).item<double>(), 3000.0);  // float16 steps by 2 above 2048
  EXPECT_EQ(einsum("i,i->", {h, h}).item<double>(), 3000.0);
}

// bfloat16 products over the layouts linalg.cc takes apart (transposed and
// strided operands, a batch folded into rows, a broadcast batch, 1-wide
// sides, a bias with beta and alpha, products split into blocks, an empty
// inner dim) equal the widened float32 product rounded once: bit for bit
// where they widen, within one rounding where oneDNN's bf16 kernels run.
TEST(HalfOpsTest, BFloat16ProductsOfEveryLayout) {
  const auto bf = [](const Shape& s, uint64_t seed) {
    return Tensor::randn(s, seed, 0, DType::BFloat16);
  };
  const Tensor a = bf({300, 129}, 1), b = bf({129, 77}, 2), big = bf({1100, 520}, 3);
  const Tensor x3 = bf({4, 33, 129}, 4), w = bf({65, 129}, 5), bias = bf({65}, 6);
  const Tensor col = bf({129, 1}, 7), row = bf({1, 300}, 8), c = bf({300, 77}, 10);
  const Tensor strided = bf({300, 258}, 9).slice(1, 0, 258, 2);
  // The operands as the product gets them (the float32 reference widens
  // these views, as the product itself does).
  const Tensor at = a.t(), bt = b.t(), bigt = big.t(), x3t = x3.transpose(1, 2);
  const Tensor a3 = a.view({1, 300, 129});
  using Widen = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    std::function<Tensor(Widen)> run;
  };
  const std::vector<Case> cases = {
      {"mm", [&](Widen t) { return mm(t(a), t(b)); }},
      {"transposed operands", [&](Widen t) { return mm(t(bt), t(at)); }},
      {"strided operand", [&](Widen t) { return mm(t(strided), t(b)); }},
      {"split into blocks", [&](Widen t) { return mm(t(big), t(bigt)); }},
      {"batch folded into rows", [&](Widen t) { return linear(t(x3), t(w), t(bias)); }},
      {"batched", [&](Widen t) { return matmul(t(x3), t(x3t)); }},
      {"broadcast batch", [&](Widen t) { return matmul(t(a3), t(x3t)); }},
      {"matrix-vector", [&](Widen t) { return mm(t(a), t(col)); }},
      {"vector-matrix", [&](Widen t) { return mm(t(row), t(a)); }},
      {"addmm beta alpha", [&](Widen t) { return addmm(t(c), t(a), t(b), 0.5, 2.0); }},
      {"empty inner dim",
       [&](Widen t) { return mm(t(a.narrow(1, 0, 0)), t(b.narrow(0, 0, 0))); }},
  };
  const bool native = detail::native_half_gemm(DType::BFloat16);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const Tensor got = k.run([](const Tensor& t) { return t; });
    const Tensor want = k.run([](const Tensor& t) { return t.to(DType::Float32); });
    ASSERT_EQ(got.dtype(), DType::BFloat16);
    ASSERT_EQ(got.shape(), want.shape());
    const Tensor rounded = want.to(DType::BFloat16);
    if (native) EXPECT_LE(max_abs_diff(got, rounded), std::ldexp(max_abs(want), -8));
    else EXPECT_TRUE(same_bits(got, rounded));
  }
}

// The elementwise ops on 16-bit tensors run in blocks (HalfMap,
// elementwise_map.h): runs longer than a block, transposed and broadcast
// operands, scalars on either side, bool results, in-place forms, values
// that round to infinity, denormals and NaN, at every SIMD level and on 1
// and 2 threads, all give the bits of the widened float32 op rounded once.
TEST_F(HalfElementwiseLevels, BlocksGiveTheWidenedOpsBits) {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(half));
    Tensor x = mul(Tensor::randn({37, 611}, 21), 3.0).to(half).contiguous();
    // Specials where x's values land: the largest finite, a denormal, NaN.
    const Tensor specials =
        Tensor::from_vector(std::vector<float>{6.5e4f, 3.0e38f, 1e-40f, -1e-41f, NAN, -INFINITY},
                            Shape{6});
    x.narrow(0, 0, 1).narrow(1, 0, 6).copy_(specials.view({1, 6}));
    const Tensor y = Tensor::randn({611, 37}, 22, 0, half).t();  // transposed view
    const Tensor row = Tensor::randn({611}, 23, 0, half);
    const Tensor col = Tensor::randn({37, 1}, 24, 0, half);
    const auto w = [](const Tensor& t) { return t.to(DType::Float32); };
    struct Case {
      const char* name;
      std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&)> op;
    };
    const std::vector<Case> cases = {
        {"add", [](auto& a, auto& b, auto&, auto&) { return add(a, b); }},
        {"mul by a row", [](auto& a, auto&, auto& r, auto&) { return mul(a, r); }},
        {"column minus", [](auto& a, auto&, auto&, auto& c) { return sub(c, a); }},
        {"div by a scalar", [](auto& a, auto&, auto&, auto&) { return div(a, 0.3); }},
        {"scalar minus", [](auto& a, auto&, auto&, auto&) { return sub(2.5, a); }},
        {"exp", [](auto&, auto& b, auto&, auto&) { return exp(b); }},
        {"gelu", [](auto& a, auto&, auto&, auto&) { return gelu(a); }},
        {"gelu_backward", [](auto& a, auto& b, auto&, auto&) { return gelu_backward(b, a); }},
        {"gelu_backward tanh",
         [](auto& a, auto&, auto& r, auto&) { return gelu_backward(r, a, GeluApprox::Tanh); }},
        {"sigmoid", [](auto& a, auto&, auto&, auto&) { return sigmoid(a); }},
        {"maximum", [](auto& a, auto& b, auto&, auto&) { return maximum(a, b); }},
        {"gt", [](auto& a, auto& b, auto&, auto&) { return gt(a, b); }},
        {"gt scalar", [](auto& a, auto&, auto&, auto&) { return gt(a, 0.25); }},
        {"add_ in place", [](auto& a, auto& b, auto&, auto&) {
           Tensor t = a.clone();
           t.add_(b);
           return t;
         }},
    };
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (detail::SimdLevel level : dtensor::testing::simd_levels()) {
        detail::set_simd_level(level);
        SCOPED_TRACE(detail::simd_level_name(level));
        for (const Case& c : cases) {
          const Tensor got = c.op(x, y, row, col);
          const Tensor ref = c.op(w(x), w(y), w(row), w(col));
          const Tensor want = ref.dtype() == DType::Float32 ? ref.to(half) : ref;
          EXPECT_TRUE(same_bits(got, want)) << c.name << " on " << threads << " threads";
        }
      }
    }
  }
}

// Ops that only move elements keep the 16-bit bits (also a NaN's payload
// where they move it directly).
TEST(HalfOpsTest, MovesKeepBits) {
  Tensor x = Tensor::randn({3, 4}, 5, 0, DType::BFloat16).contiguous();
  x.data_ptr<BFloat16>()[1] = BFloat16::from_bits(0x7FA1);  // a NaN with a payload
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{2, 0, 1, 1}, Shape{1, 4});
  const Tensor g = gather(x, 0, idx);
  for (int64_t j = 0; j < 4; ++j) {
    const int64_t r = idx.to_vector<int64_t>()[static_cast<size_t>(j)];
    EXPECT_TRUE(same_bits(g.select(0, 0).select(0, j), x.select(0, r).select(0, j)));
  }
  const Tensor last_row = x.narrow(0, 2, 1).narrow(1, 0, 3);  // tril(x) keeps it
  EXPECT_TRUE(same_bits(tril(x).narrow(0, 2, 1).narrow(1, 0, 3), last_row));
  EXPECT_TRUE(same_bits(cat({x, x}, 0).narrow(0, 3, 3), x));
  EXPECT_TRUE(same_bits(index_select(x, 1, Tensor::arange(4)), x));
  EXPECT_TRUE(same_bits(x.t().contiguous().t(), x));
}

// Gradients on bfloat16 run the same ops, each in float32 rounded once: a
// linear layer into cross_entropy gives bfloat16 gradients within a few
// bfloat16 steps of the float32 gradients (rounded per op, not once, so
// not bitwise).
TEST(HalfOpsTest, LinearCrossEntropyBackwardInBFloat16) {
  const DeviceMesh mesh(World::simulated(1), {1});
  // Values a bfloat16 holds, so that both runs start from the same numbers.
  const Tensor x = Tensor::randn({6, 8}, 1, 0, DType::BFloat16).to(DType::Float32);
  const Tensor w = Tensor::randn({5, 8}, 2, 0, DType::BFloat16).to(DType::Float32);
  const Tensor b = Tensor::randn({5}, 3, 0, DType::BFloat16).to(DType::Float32);
  const Tensor target = Tensor::randint(0, 5, {6}, 4);
  auto grads = [&](DType dtype) {
    DTensor dx = distribute_tensor(x.to(dtype), mesh, {Replicate()});
    DTensor dw = distribute_tensor(w.to(dtype), mesh, {Replicate()});
    DTensor db = distribute_tensor(b.to(dtype), mesh, {Replicate()});
    const DTensor t = distribute_tensor(target, mesh, {Replicate()});
    dx.requires_grad_();
    dw.requires_grad_();
    db.requires_grad_();
    const DTensor loss = cross_entropy(linear(dx, dw, db), t);
    EXPECT_EQ(loss.dtype(), dtype);
    loss.backward();
    return std::vector<Tensor>{dx.grad()->full_tensor(), dw.grad()->full_tensor(),
                               db.grad()->full_tensor()};
  };
  const std::vector<Tensor> half = grads(DType::BFloat16);
  const std::vector<Tensor> full = grads(DType::Float32);
  for (size_t i = 0; i < half.size(); ++i) {
    EXPECT_EQ(half[i].dtype(), DType::BFloat16);
    // A bfloat16 step is 2^-8 of the value; a few per-op roundings.
    EXPECT_TRUE(allclose(half[i].to(DType::Float32), full[i], 0x1p-5, 0x1p-9))
        << i << "\n" << half[i] << "\n" << full[i];
  }
}

// The backwards of softmax, log_softmax, layer_norm and rms_norm take
// 16-bit tensors in float32 and round each gradient once (PyTorch's CPU
// kernels): the bits of the float32 formula on the widened values, rounded
// once. The gradient reaching the op is given (backward(gradient)).
TEST(HalfOpsTest, NormAndSoftmaxBackwardsRoundOnce) {
  const DeviceMesh mesh(World::simulated(2), {2});
  const auto f32 = [](const Tensor& t) { return t.to(DType::Float32); };
  const auto bf = [](const Tensor& t) { return t.to(DType::BFloat16); };
  const Tensor x = bf(mul(Tensor::randn({5, 3, 24}, 31), 2.0));
  const Tensor w = bf(Tensor::randn({24}, 32)), b = bf(Tensor::randn({24}, 33));
  const Tensor up = bf(Tensor::randn({5, 3, 24}, 34));
  // softmax's and log_softmax's formulas read the saved output, a bfloat16
  // tensor here: the reference widens that.
  const Tensor y = f32(softmax(x, -1)), ly = f32(log_softmax(x, 1));
  const Tensor want_softmax = bf(mul(y, sub(f32(up), sum(mul(f32(up), y), {-1}, true))));
  const Tensor want_log_softmax = bf(sub(f32(up), mul(exp(ly), sum(f32(up), {1}, true))));
  for (const Placement& p : {Placement(Shard(0)), Placement(Replicate())}) {
    SCOPED_TRACE(to_string(Placements{p}));
    auto input = [&](const Tensor& t, DType dtype, Placement q) {
      DTensor d = distribute_tensor(t.to(dtype), mesh, {q});
      d.requires_grad_();
      return d;
    };
    {
      DTensor dx = input(x, DType::BFloat16, p);
      softmax(dx, -1).backward(distribute_tensor(up, mesh, {p}));
      EXPECT_TRUE(same_bits(dx.grad()->full_tensor(), want_softmax));
      dx = input(x, DType::BFloat16, p);
      log_softmax(dx, 1).backward(distribute_tensor(up, mesh, {p}));
      EXPECT_TRUE(same_bits(dx.grad()->full_tensor(), want_log_softmax));
    }
    for (bool layer : {true, false}) {
      SCOPED_TRACE(layer ? "layer_norm" : "rms_norm");
      auto grads = [&](DType dtype) {
        DTensor dx = input(x, dtype, p), dw = input(w, dtype, Replicate());
        DTensor db = input(b, dtype, Replicate());
        const DTensor out = layer ? layer_norm(dx, {24}, dw, db) : rms_norm(dx, {24}, dw);
        out.backward(distribute_tensor(f32(up).to(dtype), mesh, {p}));
        std::vector<Tensor> g = {dx.grad()->full_tensor(), dw.grad()->full_tensor()};
        if (layer) g.push_back(db.grad()->full_tensor());
        return g;
      };
      const std::vector<Tensor> half = grads(DType::BFloat16);
      const std::vector<Tensor> full = grads(DType::Float32);
      // Sharded rows make the weight's and bias's gradients sums over the
      // ranks of per-rank gradients, each rounded to bfloat16 first (as in
      // PyTorch, where each rank's gradient has the parameter's dtype).
      const size_t exact = p.is_shard() ? 1 : half.size();
      for (size_t i = 0; i < half.size(); ++i) {
        if (i < exact) {
          EXPECT_TRUE(same_bits(half[i], bf(full[i]))) << "gradient " << i;
        } else {
          // Two roundings of partial sums that may cancel: a few bfloat16
          // steps of the largest value, not of each result.
          EXPECT_TRUE(allclose(f32(half[i]), full[i], 0x1p-7, 0x1p-7 * max_abs(full[i])))
              << "gradient " << i << "\n" << f32(half[i]) << "\n" << full[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtensor
