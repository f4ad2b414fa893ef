// Tests for the elementwise ops (src/tensor/elementwise.cc): hand-computed
// values, every op against a naive reference loop over random inputs of many
// shapes and layouts (empty, size-1, 0-d, transposed, step-sliced, expanded,
// broadcast), dtype promotion, int/bool behaviour, in-place ops on views and
// the errors raised on bad input.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "test_util.h"

namespace dtensor {
namespace {

constexpr double kNaNElementwise = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfElementwise = std::numeric_limits<double>::infinity();

// ---- reference machinery --------------------------------------------------------------

// A tensor's logical values in row-major order, with its shape.
struct Ref {
  Shape shape;
  std::vector<double> v;
};
Ref ref(const Tensor& t) { return {t.shape(), t.to_vector<double>()}; }

// numpy broadcasting, written out independently of broadcast_shapes.
Shape naive_broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The value of r at row-major index i of `out`, r broadcast to out.
double at(const Ref& r, const Shape& out, int64_t i) {
  int64_t idx = 0, step = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t coord = i % out[d];
    i /= out[d];
    const int64_t rd = static_cast<int64_t>(d) - static_cast<int64_t>(out.size() - r.shape.size());
    if (rd >= 0) {
      if (r.shape[rd] != 1) idx += coord * step;
      step *= r.shape[rd];
    }
  }
  return r.v[static_cast<size_t>(idx)];
}

// v rounded as storing it in dtype d would.
double round_to(double v, DType d) {
  switch (d) {
    case DType::Bool:
      return v != 0 ? 1 : 0;
    case DType::Int64:
      return static_cast<double>(static_cast<int64_t>(v));
    case DType::Float32:
      return static_cast<double>(static_cast<float>(v));
    case DType::Float64:
      return v;
    case DType::BFloat16:
      return static_cast<double>(static_cast<float>(BFloat16(v)));
    case DType::Float16:
      return static_cast<double>(static_cast<float>(Float16(v)));
  }
  return v;
}

// got has the given shape and dtype and its values match want (NaN matches
// NaN) within |got - want| <= atol + rtol * |want|.
::testing::AssertionResult matches(const Tensor& got, const Shape& shape, DType dtype,
                                   const std::vector<double>& want, double rtol = 0,
                                   double atol = 0) {
  if (got.shape() != shape) {
    return ::testing::AssertionFailure() << "shape " << got.shape() << ", expected " << shape;
  }
  if (got.dtype() != dtype) {
    return ::testing::AssertionFailure() << "dtype " << got.dtype() << ", expected " << dtype;
  }
  const std::vector<double> g = got.to_vector<double>();
  if (g.size() != want.size()) {
    return ::testing::AssertionFailure() << g.size() << " values, expected " << want.size();
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(want[i]);
    const bool same = g[i] == want[i];
    const bool close = std::abs(g[i] - want[i]) <= atol + rtol * std::abs(want[i]);
    if (!both_nan && !same && !close) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << g[i] << ", expected " << want[i] << " (shape " << shape
             << ", dtype " << dtype << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Expected result of a binary op: f over the broadcast reference values,
// rounded to the result dtype.
std::vector<double> ref_binary(const Tensor& a, const Tensor& b, DType result,
                               const std::function<double(double, double)>& f) {
  const Ref ra = ref(a), rb = ref(b);
  const Shape out = naive_broadcast(a.shape(), b.shape());
  std::vector<double> v(static_cast<size_t>(out.product()));
  for (int64_t i = 0; i < out.product(); ++i)
    v[i] = round_to(f(at(ra, out, i), at(rb, out, i)), result);
  return v;
}

std::vector<double> ref_unary(const Tensor& x, DType result,
                              const std::function<double(double)>& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = round_to(f(e), result);
  return v;
}

// Random values of any dtype: normal floats, small ints (so that products
// stay exact), or random bools.
Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  switch (dtype) {
    case DType::Bool:
      return Tensor::randint(0, 2, shape, seed).to(DType::Bool);
    case DType::Int64:
      return Tensor::randint(-6, 7, shape, seed);
    default:
      return Tensor::randn(shape, seed, 0, dtype);
  }
}

// The same logical shape in different memory layouts.
enum class Layout { Contiguous, Transposed, Strided, Expanded };
const Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided,
                           Layout::Expanded};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Strided:
      return "strided";
    case Layout::Expanded:
      return "expanded";
  }
  return "?";
}

Tensor make(const Shape& shape, DType dtype, Layout layout, uint64_t seed) {
  const size_t n = shape.size();
  if (layout == Layout::Transposed && n >= 2) {
    Shape s = shape;
    std::swap(s[n - 2], s[n - 1]);
    Tensor t = random(s, dtype, seed).transpose(n - 2, n - 1);
    return t;
  }
  if (layout == Layout::Strided && n >= 1) {
    Shape s = shape;
    s[n - 1] = 2 * shape[n - 1] + 1;
    return random(s, dtype, seed).slice(n - 1, 1, s[n - 1], 2);
  }
  if (layout == Layout::Expanded && n >= 1 && shape[0] > 1) {
    Shape s = shape;
    s[0] = 1;
    return random(s, dtype, seed).expand(shape);
  }
  return random(shape, dtype, seed);
}

// Shape pairs that broadcast, including 0-d, empty and size-1 dims.
const std::vector<std::pair<Shape, Shape>> kShapePairs = {{{2, 3}, {2, 3}},
                                                          {{2, 3}, {3}},
                                                          {{4, 1}, {1, 5}},
                                                          {{}, {3}},
                                                          {{}, {}},
                                                          {{3, 2}, {}},
                                                          {{0, 3}, {3}},
                                                          {{0, 3}, {1, 3}},
                                                          {{3, 1, 2}, {1, 4, 1}},
                                                          {{1}, {5}},
                                                          {{2, 3, 4, 5}, {4, 1}},
                                                          {{5, 1}, {5, 7}},
                                                          {{1, 1}, {1, 1}},
                                                          {{6, 5}, {6, 1}},
                                                          {{2, 1, 3, 1}, {2, 4, 1, 5}}};

const std::vector<Shape> kShapes = {{},     {1},    {7},       {0},          {0, 3},  {3, 4},
                                    {1, 5}, {4, 1}, {2, 3, 4}, {2, 1, 3, 2}, {33, 17}};

std::string describe(const Shape& a, Layout la, const Shape& b, Layout lb, DType d) {
  return to_string(a) + " " + layout_name(la) + " op " + to_string(b) + " " + layout_name(lb) +
         " (" + dtype_name(d) + ")";
}

// Expects `f` to throw dtensor::Error whose message contains `needle`.
template <class F>
void expect_error_elementwise(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected dtensor::Error containing '" << needle << "', nothing thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' lacks '" << needle << "'";
  }
}

Tensor f32(std::vector<float> v, std::optional<Shape> s = {}) { return Tensor::from_vector(v, s); }
Tensor f64(std::vector<double> v, std::optional<Shape> s = {}) { return Tensor::from_vector(v, s); }
Tensor i64(std::vector<int64_t> v, std::optional<Shape> s = {}) {
  return Tensor::from_vector(v, s);
}
Tensor bools(std::vector<bool> v, std::optional<Shape> s = {}) { return Tensor::from_vector(v, s); }

const DType kAllDTypes[] = {DType::Bool, DType::Int64, DType::Float32, DType::Float64};

// ---- hand-computed values -------------------------------------------------------------

TEST(Elementwise, AddBroadcastsRowVector) {
  const Tensor a = f32({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor b = f32({10, 20, 30});
  EXPECT_TRUE(matches(add(a, b), {2, 3}, DType::Float32, {11, 22, 33, 14, 25, 36}));
  EXPECT_TRUE(matches(add(b, a), {2, 3}, DType::Float32, {11, 22, 33, 14, 25, 36}));
}

TEST(Elementwise, AddBroadcastsColumnAgainstRow) {
  const Tensor col = i64({0, 10, 20}, Shape{3, 1});
  const Tensor row = i64({1, 2, 3, 4}, Shape{1, 4});
  EXPECT_TRUE(
      matches(add(col, row), {3, 4}, DType::Int64, {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24}));
}

TEST(Elementwise, SubMulDivHandValues) {
  const Tensor a = f64({6, -4, 1.5});
  const Tensor b = f64({2, 8, -0.5});
  EXPECT_TRUE(matches(sub(a, b), {3}, DType::Float64, {4, -12, 2}));
  EXPECT_TRUE(matches(mul(a, b), {3}, DType::Float64, {12, -32, -0.75}));
  EXPECT_TRUE(matches(div(a, b), {3}, DType::Float64, {3, -0.5, -3}));
  EXPECT_TRUE(matches(div(a, f64({0, 0, -0.0})), {3}, DType::Float64, {kInfElementwise, -kInfElementwise, -kInfElementwise}));
}

TEST(Elementwise, ScalarFormsHandValues) {
  const Tensor x = f32({1, 2, 4});
  EXPECT_TRUE(matches(add(x, 2), {3}, DType::Float32, {3, 4, 6}));
  EXPECT_TRUE(matches(sub(x, 1), {3}, DType::Float32, {0, 1, 3}));
  EXPECT_TRUE(matches(sub(10, x), {3}, DType::Float32, {9, 8, 6}));
  EXPECT_TRUE(matches(mul(x, 0.5), {3}, DType::Float32, {0.5, 1, 2}));
  EXPECT_TRUE(matches(div(x, 4), {3}, DType::Float32, {0.25, 0.5, 1}));
  EXPECT_TRUE(matches(div(8, x), {3}, DType::Float32, {8, 4, 2}));
}

TEST(Elementwise, IntDivisionIsTrueDivisionInFloat32) {
  const Tensor a = i64({1, 2, 3, -7, 0});
  const Tensor b = i64({2, 2, 2, 2, 0});
  EXPECT_TRUE(matches(div(a, b), {5}, DType::Float32, {0.5, 1, 1.5, -3.5, kNaNElementwise}));
  EXPECT_TRUE(matches(div(a, 2), {5}, DType::Float32, {0.5, 1, 1.5, -3.5, 0}));
  EXPECT_TRUE(matches(div(3, i64({2, 0})), {2}, DType::Float32, {1.5, kInfElementwise}));
  EXPECT_TRUE(matches(div(bools({true, false}), 2), {2}, DType::Float32, {0.5, 0}));
}

TEST(Elementwise, TensorTensorPromotionIsTheLargerDType) {
  for (DType da : kAllDTypes) {
    for (DType db : kAllDTypes) {
      const Tensor a = Tensor::ones({2}, da);
      const Tensor b = Tensor::ones({2}, db);
      const DType want = static_cast<uint8_t>(da) > static_cast<uint8_t>(db) ? da : db;
      EXPECT_EQ(add(a, b).dtype(), want) << da << " + " << db;
      EXPECT_EQ(mul(a, b).dtype(), want) << da << " * " << db;
      EXPECT_EQ(maximum(a, b).dtype(), want) << da << " max " << db;
      EXPECT_EQ(div(a, b).dtype(), is_floating(want) ? want : DType::Float32) << da << " / " << db;
      EXPECT_EQ(lt(a, b).dtype(), DType::Bool);
      EXPECT_EQ(where(Tensor::ones({2}, DType::Bool), a, b).dtype(), want);
    }
  }
}

TEST(Elementwise, TensorScalarPromotionFollowsTheScalarKind) {
  const Tensor i = i64({1, 2});
  const Tensor b = bools({true, false});
  const Tensor f = f32({1, 2});
  const Tensor d = f64({1, 2});
  EXPECT_TRUE(matches(add(i, 2), {2}, DType::Int64, {3, 4}));
  EXPECT_TRUE(matches(add(i, 2.5), {2}, DType::Float32, {3.5, 4.5}));
  EXPECT_TRUE(matches(mul(i, true), {2}, DType::Int64, {1, 2}));
  EXPECT_TRUE(matches(add(b, true), {2}, DType::Bool, {1, 1}));
  EXPECT_TRUE(matches(add(b, 2), {2}, DType::Int64, {3, 2}));
  EXPECT_TRUE(matches(add(b, 0.5), {2}, DType::Float32, {1.5, 0.5}));
  EXPECT_TRUE(matches(add(f, 2.5), {2}, DType::Float32, {3.5, 4.5}));
  EXPECT_TRUE(matches(add(f, int64_t{3}), {2}, DType::Float32, {4, 5}));
  EXPECT_TRUE(matches(add(d, 0.1), {2}, DType::Float64, {1.1, 2.1}));
  // A float32 tensor keeps float32 with a double scalar: the scalar is rounded.
  EXPECT_TRUE(matches(add(f, 0.1), {2}, DType::Float32,
                      {static_cast<float>(1.0f + 0.1f), static_cast<float>(2.0f + 0.1f)}));
  EXPECT_TRUE(matches(2.5 * i, {2}, DType::Float32, {2.5, 5}));
}

TEST(Elementwise, BoolArithmeticIsLogical) {
  const Tensor a = bools({false, false, true, true});
  const Tensor b = bools({false, true, false, true});
  EXPECT_TRUE(matches(add(a, b), {4}, DType::Bool, {0, 1, 1, 1}));
  EXPECT_TRUE(matches(mul(a, b), {4}, DType::Bool, {0, 0, 0, 1}));
  EXPECT_TRUE(matches(maximum(a, b), {4}, DType::Bool, {0, 1, 1, 1}));
  EXPECT_TRUE(matches(minimum(a, b), {4}, DType::Bool, {0, 0, 0, 1}));
  EXPECT_TRUE(matches(abs(a), {4}, DType::Bool, {0, 0, 1, 1}));
  EXPECT_TRUE(matches(sub(a, b.to(DType::Int64)), {4}, DType::Int64, {0, -1, 1, 0}));
  EXPECT_TRUE(matches(add(a, i64({5, 5, 5, 5})), {4}, DType::Int64, {5, 5, 6, 6}));
}

TEST(Elementwise, BoolOnlyOpsRejectBool) {
  const Tensor b = bools({true, false});
  expect_error_elementwise([&] { sub(b, b); }, "sub: subtracting bool operands");
  expect_error_elementwise([&] { sub(b, true); }, "sub:");
  expect_error_elementwise([&] { sub(true, b); }, "sub:");
  expect_error_elementwise([&] { neg(b); }, "neg: negating a bool tensor");
  expect_error_elementwise([&] { -b; }, "neg:");
  expect_error_elementwise([&] { relu(b); }, "relu: not supported for bool");
  Tensor c = b.clone();
  expect_error_elementwise([&] { c.sub_(b); }, "sub_:");
  expect_error_elementwise([&] { c.relu_(); }, "relu_:");
}

TEST(Elementwise, Int64ArithmeticWrapsLikePyTorch) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const Tensor x = i64({kMax, kMin, -5});
  EXPECT_EQ(add(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{kMin, kMin + 1, -4}));
  EXPECT_EQ(sub(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{kMax - 1, kMax, -6}));
  EXPECT_EQ(mul(x, 2).to_vector<int64_t>(), (std::vector<int64_t>{-2, 0, -10}));
  EXPECT_EQ(neg(x).to_vector<int64_t>(), (std::vector<int64_t>{-kMax, kMin, 5}));
  EXPECT_EQ(abs(x).to_vector<int64_t>(), (std::vector<int64_t>{kMax, kMin, 5}));
  EXPECT_EQ(relu(x).to_vector<int64_t>(), (std::vector<int64_t>{kMax, 0, 0}));
  // Large int64 values stay exact (no detour through double).
  const Tensor big = i64({(int64_t{1} << 60) + 1});
  EXPECT_EQ(add(big, big).to_vector<int64_t>()[0], (int64_t{1} << 61) + 2);
}

TEST(Elementwise, MaximumMinimumPropagateNaN) {
  const Tensor a = f32({1, NAN, 3, NAN, -0.5f});
  const Tensor b = f32({2, 1, NAN, NAN, -1});
  EXPECT_TRUE(matches(maximum(a, b), {5}, DType::Float32, {2, kNaNElementwise, kNaNElementwise, kNaNElementwise, -0.5}));
  EXPECT_TRUE(matches(minimum(a, b), {5}, DType::Float32, {1, kNaNElementwise, kNaNElementwise, kNaNElementwise, -1}));
  EXPECT_TRUE(matches(maximum(i64({1, 5}), f64({2, 3})), {2}, DType::Float64, {2, 5}));
}

TEST(Elementwise, PowKeepsIntegersForIntegerExponents) {
  const Tensor i = i64({-3, 0, 2, 5});
  EXPECT_TRUE(matches(pow(i, 2), {4}, DType::Int64, {9, 0, 4, 25}));
  EXPECT_TRUE(matches(pow(i, 3), {4}, DType::Int64, {-27, 0, 8, 125}));
  EXPECT_TRUE(matches(pow(i, 0), {4}, DType::Int64, {1, 1, 1, 1}));
  EXPECT_EQ(pow(i64({3}), 39).item<int64_t>(), 4052555153018976267LL);  // 3^39 fits
  EXPECT_TRUE(matches(pow(i64({4, 9}), 0.5), {2}, DType::Float32, {2, 3}));
  EXPECT_TRUE(matches(pow(bools({true, false}), 2), {2}, DType::Int64, {1, 0}));
  EXPECT_TRUE(matches(pow(bools({true, false}), false), {2}, DType::Bool, {1, 1}));
  EXPECT_TRUE(matches(pow(bools({true, false}), true), {2}, DType::Bool, {1, 0}));
  expect_error_elementwise([&] { pow(i, -1); }, "pow: integers to negative integer powers");
}

TEST(Elementwise, PowFloatingExponents) {
  const Tensor x = f64({4, 2, -8, 0});
  EXPECT_TRUE(matches(pow(x, 2), {4}, DType::Float64, {16, 4, 64, 0}));
  EXPECT_TRUE(matches(pow(x, 0.5), {4}, DType::Float64, {2, std::sqrt(2.0), kNaNElementwise, 0}));
  EXPECT_TRUE(matches(pow(x, 3), {4}, DType::Float64, {64, 8, -512, 0}));
  EXPECT_TRUE(matches(pow(x, -1.0), {4}, DType::Float64, {0.25, 0.5, -0.125, kInfElementwise}));
  EXPECT_TRUE(matches(pow(x, 1.5), {4}, DType::Float64, {8, std::pow(2.0, 1.5), kNaNElementwise, 0}));
  EXPECT_EQ(pow(f32({2}), 2.0).dtype(), DType::Float32);
}

TEST(Elementwise, UnaryHandValues) {
  const Tensor x = f64({0, 1, 4});
  EXPECT_TRUE(matches(exp(x), {3}, DType::Float64, {1, std::exp(1.0), std::exp(4.0)}));
  EXPECT_TRUE(matches(log(x), {3}, DType::Float64, {-kInfElementwise, 0, std::log(4.0)}));
  EXPECT_TRUE(matches(sqrt(x), {3}, DType::Float64, {0, 1, 2}));
  EXPECT_TRUE(matches(rsqrt(x), {3}, DType::Float64, {kInfElementwise, 1, 0.5}));
  EXPECT_TRUE(matches(tanh(x), {3}, DType::Float64, {0, std::tanh(1.0), std::tanh(4.0)}));
  EXPECT_TRUE(matches(sigmoid(f64({0, 1000, -1000})), {3}, DType::Float64, {0.5, 1, 0}));
  EXPECT_TRUE(matches(relu(f64({-1, 0, 2, kNaNElementwise})), {4}, DType::Float64, {0, 0, 2, kNaNElementwise}));
  EXPECT_TRUE(matches(neg(f64({-1, 0, 2})), {3}, DType::Float64, {1, 0, -2}));
  EXPECT_TRUE(matches(abs(f64({-1.5, 0, 2})), {3}, DType::Float64, {1.5, 0, 2}));
  EXPECT_TRUE(matches(log(f64({-1})), {1}, DType::Float64, {kNaNElementwise}));
  // PyTorch: gelu(1) = 0.8413447460685429, gelu(1, approximate='tanh') = 0.8411919906082768.
  EXPECT_TRUE(matches(gelu(f64({1, 0, -1})), {3}, DType::Float64,
                      {0.8413447460685429, 0, -0.15865525393145707}, 1e-15));
  EXPECT_TRUE(matches(gelu(f64({1, 0, -1}), GeluApprox::Tanh), {3}, DType::Float64,
                      {0.8411919906082768, 0, -0.15880800939172324}, 1e-15));
  EXPECT_TRUE(matches(gelu(f32({1})), {1}, DType::Float32, {0.8413447460685429}, 1e-6));
  // PyTorch: silu(tensor([1., 0., -1., -1000.], dtype=float64)).
  EXPECT_TRUE(matches(silu(f64({1, 0, -1, -1000})), {4}, DType::Float64,
                      {0.7310585786300049, 0, -0.2689414213699951, -0.0}, 1e-15));
  EXPECT_TRUE(matches(silu(f32({1})), {1}, DType::Float32, {0.7310585786300049}, 1e-6));
  EXPECT_EQ(silu(i64({1})).dtype(), DType::Float32);
  // PyTorch 1.13: sign(tensor([nan, -0., -1.5, 2.])) = [0., 0., -1., 1.];
  // round(tensor([0.5, 1.5, 2.5, -0.5])) = [0., 2., 2., -0.];
  // round(tensor([1.2345, 125.]), decimals=2) = [1.23, 125.];
  // round(tensor([125., 135.]), decimals=-1) = [120., 140.];
  // softplus(tensor([1., 30., -30.], dtype=float64), beta=2, threshold=10)
  // = [1.0634640055214863, 30., 4.37825538134826e-27].
  EXPECT_TRUE(matches(sign(f64({NAN, -0.0, -1.5, 2})), {4}, DType::Float64, {0, 0, -1, 1}));
  EXPECT_FALSE(std::signbit(sign(f64({-0.0})).item<double>()));
  EXPECT_TRUE(matches(round(f64({0.5, 1.5, 2.5, -0.5})), {4}, DType::Float64, {0, 2, 2, -0.0}));
  EXPECT_TRUE(std::signbit(round(f64({-0.5})).item<double>()));
  EXPECT_TRUE(matches(round(f64({1.2345, 125}), 2), {2}, DType::Float64, {1.23, 125}));
  EXPECT_TRUE(matches(round(f64({125, 135}), -1), {2}, DType::Float64, {120, 140}));
  EXPECT_TRUE(matches(softplus(f64({1, 30, -30}), 2, 10), {3}, DType::Float64,
                      {1.0634640055214863, 30, 4.37825538134826e-27}, 1e-15));
  EXPECT_EQ(square(gt(i64({1, 0}), 0)).dtype(),
            DType::Int64);
  EXPECT_THROW(softplus(i64({1})), Error);
  EXPECT_THROW(floor(gt(i64({1}), 0)), Error);
  // isnan and the logical ops give bool for any dtype; non-zero is true.
  EXPECT_TRUE(matches(isnan(f64({NAN, 1, INFINITY})), {3}, DType::Bool, {1, 0, 0}));
  EXPECT_TRUE(matches(logical_not(f64({NAN, 0, -0.0})), {3}, DType::Bool, {0, 1, 1}));
  EXPECT_TRUE(matches(logical_xor(f64({0.5, 0, 2}), i64({1, 0, 0})), {3}, DType::Bool, {0, 0, 1}));
  // addcmul/addcdiv/lerp: torch.addcmul(1., 2., 3., value=0.5) = 4,
  // addcdiv(1., 3., 2., value=2) = 4, lerp(1., 3., 0.75) = 2.5.
  EXPECT_TRUE(matches(addcmul(f64({1}), f64({2}), f64({3}), 0.5), {1}, DType::Float64, {4}));
  EXPECT_TRUE(matches(addcdiv(f64({1}), f64({3}), f64({2}), 2), {1}, DType::Float64, {4}));
  EXPECT_TRUE(matches(lerp(f64({1}), f64({3}), 0.75), {1}, DType::Float64, {2.5}));
  EXPECT_TRUE(matches(lerp(f64({1, 1}), f64({3, 3}), f64({1, -0.25})), {2}, DType::Float64,
                      {3, 0.5}));
  EXPECT_THROW(addcdiv(i64({1}), i64({1}), i64({1})), Error);
  EXPECT_THROW(lerp(f32({1}), f64({1}), 0.5), Error);
}

using dtensor::testing::same_bits;

// gelu_backward is one pass of the formula autograd ran as nine ops before:
// in float32 and float64 every step rounds the same, so the bits are those
// of the ops (a broadcast grad, zeros, tails and a tiny x); against
// PyTorch's value;
// integral inputs are refused.
TEST(Elementwise, GeluBackwardIsTheFormulasOpsInOnePass) {
  for (DType d : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x = mul(Tensor::randn({7, 300}, 41, 0, d), 3.0).contiguous();
    x.narrow(0, 0, 1).narrow(1, 0, 5).copy_(
        Tensor::from_vector(std::vector<double>{0, -0.0, 40, -40, 1e-30}, Shape{1, 5}).to(d));
    const Tensor g = Tensor::randn({300}, 42, 0, d);  // broadcast over the rows
    const Tensor cdf = mul(add(erf(mul(x, 0.70710678118654752440)), 1), 0.5);
    const Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), 0.39894228040143267794);
    EXPECT_TRUE(same_bits(gelu_backward(g, x), mul(g, add(cdf, mul(x, pdf)))));
    const double k_beta = 0.79788456080286535588, k_kappa = 0.044715;
    const Tensor x_sq = mul(x, x);
    const Tensor t = tanh(mul(add(x, mul(mul(x_sq, x), k_kappa)), k_beta));
    const Tensor left = mul(add(t, 1), 0.5);
    const Tensor right = mul(mul(mul(x, 0.5), sub(1, mul(t, t))),
                             mul(add(mul(x_sq, 3 * k_kappa), 1), k_beta));
    EXPECT_TRUE(same_bits(gelu_backward(g, x, GeluApprox::Tanh), mul(g, add(left, right))));
  }
  // PyTorch: torch.ops.aten.gelu_backward(tensor([2.]), tensor([1.])) = 2 * 1.0833154.
  EXPECT_TRUE(matches(gelu_backward(f64({2}), f64({1})), {1}, DType::Float64,
                      {2 * 1.0833154705876864}, 1e-15));
  EXPECT_EQ(gelu_backward(f32({1}), f64({1})).dtype(), DType::Float64);
  EXPECT_THROW(gelu_backward(i64({1}), f32({1})), Error);
}

TEST(Elementwise, TranscendentalOpsOnIntegersGiveFloat32) {
  using UnaryFn = Tensor (*)(const Tensor&);
  const UnaryFn fns[] = {exp, log, sqrt, rsqrt, tanh, sigmoid};
  for (UnaryFn f : fns) {
    EXPECT_EQ(f(i64({1, 2})).dtype(), DType::Float32);
    EXPECT_EQ(f(bools({true})).dtype(), DType::Float32);
    EXPECT_EQ(f(f64({1})).dtype(), DType::Float64);
    EXPECT_EQ(f(f32({1})).dtype(), DType::Float32);
  }
  EXPECT_EQ(gelu(i64({1})).dtype(), DType::Float32);
  EXPECT_TRUE(matches(sqrt(i64({4, 9})), {2}, DType::Float32, {2, 3}));
  EXPECT_TRUE(matches(exp(bools({true, false})), {2}, DType::Float32,
                      {static_cast<float>(std::exp(1.0)), 1}, 1e-7));
}

TEST(Elementwise, NegAbsReluKeepTheDType) {
  for (DType d : {DType::Int64, DType::Float32, DType::Float64}) {
    const Tensor x = Tensor::arange(-2, 3, 1, d);
    EXPECT_TRUE(matches(neg(x), {5}, d, {2, 1, 0, -1, -2}));
    EXPECT_TRUE(matches(abs(x), {5}, d, {2, 1, 0, 1, 2}));
    EXPECT_TRUE(matches(relu(x), {5}, d, {0, 0, 0, 1, 2}));
  }
}

TEST(Elementwise, ComparisonsHandValues) {
  const Tensor a = i64({1, 2, 3});
  const Tensor b = f32({2, 2, 2});
  EXPECT_TRUE(matches(eq(a, b), {3}, DType::Bool, {0, 1, 0}));
  EXPECT_TRUE(matches(ne(a, b), {3}, DType::Bool, {1, 0, 1}));
  EXPECT_TRUE(matches(lt(a, b), {3}, DType::Bool, {1, 0, 0}));
  EXPECT_TRUE(matches(le(a, b), {3}, DType::Bool, {1, 1, 0}));
  EXPECT_TRUE(matches(gt(a, b), {3}, DType::Bool, {0, 0, 1}));
  EXPECT_TRUE(matches(ge(a, b), {3}, DType::Bool, {0, 1, 1}));
  // int tensor vs float scalar compares in float: 2 < 2.5.
  EXPECT_TRUE(matches(lt(a, 2.5), {3}, DType::Bool, {1, 1, 0}));
  EXPECT_TRUE(matches(eq(a, 2), {3}, DType::Bool, {0, 1, 0}));
  EXPECT_TRUE(matches(ge(a, 2), {3}, DType::Bool, {0, 1, 1}));
  EXPECT_TRUE(matches(eq(bools({true, false}), 1), {2}, DType::Bool, {1, 0}));
  // NaN is unequal to everything, itself included.
  const Tensor n = f32({NAN, 1});
  EXPECT_TRUE(matches(eq(n, n), {2}, DType::Bool, {0, 1}));
  EXPECT_TRUE(matches(ne(n, n), {2}, DType::Bool, {1, 0}));
  EXPECT_TRUE(matches(lt(n, 5), {2}, DType::Bool, {0, 1}));
  // Broadcasting: column against row.
  EXPECT_TRUE(matches(lt(i64({0, 1, 2}, Shape{3, 1}), i64({1, 2}, Shape{1, 2})), {3, 2},
                      DType::Bool, {1, 1, 0, 1, 0, 0}));
}

TEST(Elementwise, ComparisonsComputeInThePromotedDType) {
  // 2^53 + 1 is not a double: compared as int64 the two differ, but an int64
  // tensor against a float64 tensor compares in float64 where they are equal.
  const int64_t big = (int64_t{1} << 53) + 1;
  EXPECT_TRUE(matches(eq(i64({big}), i64({big - 1})), {1}, DType::Bool, {0}));
  EXPECT_TRUE(matches(eq(i64({big}), f64({static_cast<double>(big - 1)})), {1}, DType::Bool, {1}));
  // float32 vs float64: 0.1f != 0.1 in float64.
  EXPECT_TRUE(matches(eq(f32({0.1f}), f64({0.1})), {1}, DType::Bool, {0}));
  // but the float scalar 0.1 is rounded to float32 against a float32 tensor.
  EXPECT_TRUE(matches(eq(f32({0.1f}), 0.1), {1}, DType::Bool, {1}));
}

TEST(Elementwise, WhereSelectsAndBroadcastsAllThree) {
  const Tensor cond = bools({true, false, true}, Shape{3, 1});
  const Tensor a = i64({1, 2}, Shape{1, 2});
  const Tensor b = f32({-1});
  EXPECT_TRUE(matches(where(cond, a, b), {3, 2}, DType::Float32, {1, 2, -1, -1, 1, 2}));
  EXPECT_TRUE(matches(where(cond, a, 7), {3, 2}, DType::Int64, {1, 2, 7, 7, 1, 2}));
  EXPECT_TRUE(matches(where(cond, a, 0.5), {3, 2}, DType::Float32, {1, 2, 0.5, 0.5, 1, 2}));
  EXPECT_TRUE(
      matches(where(bools({false}), f64({1, 2}), f64({3, 4})), {2}, DType::Float64, {3, 4}));
}

TEST(Elementwise, MaskedFillKeepsDTypeAndBroadcastsMask) {
  const Tensor x = i64({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor row_mask = bools({true, false, true});
  EXPECT_TRUE(matches(masked_fill(x, row_mask, 0), {2, 3}, DType::Int64, {0, 2, 0, 0, 5, 0}));
  // A float value is converted to the tensor's dtype, as in PyTorch.
  EXPECT_TRUE(matches(masked_fill(x, row_mask, 9.7), {2, 3}, DType::Int64, {9, 2, 9, 9, 5, 9}));
  const Tensor f = f32({1, 2});
  EXPECT_TRUE(
      matches(masked_fill(f, bools({false, true}), -INFINITY), {2}, DType::Float32, {1, -kInfElementwise}));
  // The input is untouched.
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  // A float an int64 cannot hold is refused, not converted.
  expect_error_elementwise([&] { masked_fill(x, row_mask, 1e30); },
               "masked_fill: value 1e+30 cannot be converted to int64 without overflow");
  Tensor y = x.clone();
  expect_error_elementwise([&] { y.masked_fill_(row_mask, -1e19); }, "masked_fill_: value");
  EXPECT_TRUE(matches(masked_fill(x.to(DType::Bool), row_mask, 0.0), {2, 3}, DType::Bool,
                      {0, 1, 0, 0, 1, 0}));
}

TEST(Elementwise, OperatorsForwardToTheOps) {
  const Tensor a = f32({1, 2});
  const Tensor b = f32({4, 8});
  EXPECT_TRUE(matches(a + b, {2}, DType::Float32, {5, 10}));
  EXPECT_TRUE(matches(a - b, {2}, DType::Float32, {-3, -6}));
  EXPECT_TRUE(matches(a * b, {2}, DType::Float32, {4, 16}));
  EXPECT_TRUE(matches(a / b, {2}, DType::Float32, {0.25, 0.25}));
  EXPECT_TRUE(matches(a + 1, {2}, DType::Float32, {2, 3}));
  EXPECT_TRUE(matches(a - 1, {2}, DType::Float32, {0, 1}));
  EXPECT_TRUE(matches(a * 3, {2}, DType::Float32, {3, 6}));
  EXPECT_TRUE(matches(a / 2, {2}, DType::Float32, {0.5, 1}));
  EXPECT_TRUE(matches(1 + a, {2}, DType::Float32, {2, 3}));
  EXPECT_TRUE(matches(1 - a, {2}, DType::Float32, {0, -1}));
  EXPECT_TRUE(matches(3 * a, {2}, DType::Float32, {3, 6}));
  EXPECT_TRUE(matches(2 / a, {2}, DType::Float32, {2, 1}));
  EXPECT_TRUE(matches(-a, {2}, DType::Float32, {-1, -2}));
  Tensor c = a.clone();
  c += b;
  EXPECT_TRUE(matches(c, {2}, DType::Float32, {5, 10}));
  c -= a;
  EXPECT_TRUE(matches(c, {2}, DType::Float32, {4, 8}));
  c *= b;
  EXPECT_TRUE(matches(c, {2}, DType::Float32, {16, 64}));
  c /= b;
  EXPECT_TRUE(matches(c, {2}, DType::Float32, {4, 8}));
  c += 1;
  c -= 2;
  c *= 3;
  c /= 2;
  EXPECT_TRUE(matches(c, {2}, DType::Float32, {4.5, 10.5}));
  // += returns self, so it chains.
  Tensor d = a.clone();
  (d += 1) *= 2;
  EXPECT_TRUE(matches(d, {2}, DType::Float32, {4, 6}));
  // a was never touched.
  EXPECT_TRUE(matches(a, {2}, DType::Float32, {1, 2}));
}

// ---- every op against the reference, over shapes x layouts x dtypes -------------------

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  // The result dtype given the promoted dtype.
  std::function<DType(DType)> result;
  bool bool_ok;
};

DType same(DType d) { return d; }
DType floating_or_f32(DType d) { return is_floating(d) ? d : DType::Float32; }
DType to_bool(DType) { return DType::Bool; }

double ref_max(double x, double y) {
  return std::isnan(x) || std::isnan(y) ? kNaNElementwise : std::max(x, y);
}
double ref_min(double x, double y) {
  return std::isnan(x) || std::isnan(y) ? kNaNElementwise : std::min(x, y);
}

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](auto& a, auto& b) { return add(a, b); }, [](double x, double y) { return x + y; },
       same, true},
      {"sub", [](auto& a, auto& b) { return sub(a, b); }, [](double x, double y) { return x - y; },
       same, false},
      {"mul", [](auto& a, auto& b) { return mul(a, b); }, [](double x, double y) { return x * y; },
       same, true},
      {"div", [](auto& a, auto& b) { return div(a, b); }, [](double x, double y) { return x / y; },
       floating_or_f32, true},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); }, ref_max, same, true},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); }, ref_min, same, true},
      {"eq", [](auto& a, auto& b) { return eq(a, b); },
       [](double x, double y) { return double(x == y); }, to_bool, true},
      {"ne", [](auto& a, auto& b) { return ne(a, b); },
       [](double x, double y) { return double(x != y); }, to_bool, true},
      {"lt", [](auto& a, auto& b) { return lt(a, b); },
       [](double x, double y) { return double(x < y); }, to_bool, true},
      {"le", [](auto& a, auto& b) { return le(a, b); },
       [](double x, double y) { return double(x <= y); }, to_bool, true},
      {"gt", [](auto& a, auto& b) { return gt(a, b); },
       [](double x, double y) { return double(x > y); }, to_bool, true},
      {"ge", [](auto& a, auto& b) { return ge(a, b); },
       [](double x, double y) { return double(x >= y); }, to_bool, true},
  };
  return cases;
}

// Arithmetic on values exactly representable in the compute dtype, done in
// double and rounded once, equals the op done in that dtype (double has more
// than twice float32's precision), so these comparisons are exact.
TEST(Elementwise, BinaryOpsMatchReferenceOverShapesAndLayouts) {
  int checked = 0;
  uint64_t seed = 1;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : kShapePairs) {
      for (Layout la : kLayouts) {
        for (Layout lb : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
          for (DType d : {DType::Float32, DType::Float64, DType::Int64}) {
            const Tensor a = make(sa, d, la, seed++);
            const Tensor b = make(sb, d, lb, seed++);
            const DType result = c.result(d);
            const Tensor got = c.op(a, b);
            EXPECT_TRUE(
                matches(got, naive_broadcast(sa, sb), result, ref_binary(a, b, result, c.ref)))
                << c.name << ": " << describe(sa, la, sb, lb, d);
            // Swapped operands exercise the other broadcast fast path.
            EXPECT_TRUE(matches(c.op(b, a), naive_broadcast(sb, sa), result,
                                ref_binary(b, a, result, c.ref)))
                << c.name << " swapped: " << describe(sb, lb, sa, la, d);
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(Elementwise, BinaryOpsMatchReferenceForMixedAndBoolDTypes) {
  uint64_t seed = 1000;
  for (const BinaryCase& c : binary_cases()) {
    for (DType da : kAllDTypes) {
      for (DType db : kAllDTypes) {
        const DType promoted = static_cast<uint8_t>(da) > static_cast<uint8_t>(db) ? da : db;
        if (promoted == DType::Bool && !c.bool_ok) continue;
        for (const auto& [sa, sb] : {std::pair<Shape, Shape>{{3, 4}, {4}}, {{2, 1, 3}, {5, 1}}}) {
          const Tensor a = make(sa, da, Layout::Transposed, seed++);
          const Tensor b = make(sb, db, Layout::Strided, seed++);
          const DType result = c.result(promoted);
          // The reference rounds each input to the promoted dtype first (a no-op
          // except int -> float32, exact for these small ints).
          EXPECT_TRUE(
              matches(c.op(a, b), naive_broadcast(sa, sb), result, ref_binary(a, b, result, c.ref)))
              << c.name << ": " << da << " op " << db;
        }
      }
    }
  }
}

struct ScalarCase {
  const char* name;
  std::function<Tensor(const Tensor&, Scalar)> op;
  std::function<double(double, double)> ref;  // (tensor value, scalar value)
  std::function<DType(DType)> result;
};

TEST(Elementwise, ScalarOpsMatchReference) {
  const std::vector<ScalarCase> cases = {
      {"add", [](const Tensor& a, Scalar s) { return add(a, s); },
       [](double x, double s) { return x + s; }, same},
      {"sub", [](const Tensor& a, Scalar s) { return sub(a, s); },
       [](double x, double s) { return x - s; }, same},
      {"rsub", [](const Tensor& a, Scalar s) { return sub(s, a); },
       [](double x, double s) { return s - x; }, same},
      {"mul", [](const Tensor& a, Scalar s) { return mul(a, s); },
       [](double x, double s) { return x * s; }, same},
      {"div", [](const Tensor& a, Scalar s) { return div(a, s); },
       [](double x, double s) { return x / s; }, floating_or_f32},
      {"rdiv", [](const Tensor& a, Scalar s) { return div(s, a); },
       [](double x, double s) { return s / x; }, floating_or_f32},
      {"eq", [](const Tensor& a, Scalar s) { return eq(a, s); },
       [](double x, double s) { return double(x == s); }, to_bool},
      {"ne", [](const Tensor& a, Scalar s) { return ne(a, s); },
       [](double x, double s) { return double(x != s); }, to_bool},
      {"lt", [](const Tensor& a, Scalar s) { return lt(a, s); },
       [](double x, double s) { return double(x < s); }, to_bool},
      {"le", [](const Tensor& a, Scalar s) { return le(a, s); },
       [](double x, double s) { return double(x <= s); }, to_bool},
      {"gt", [](const Tensor& a, Scalar s) { return gt(a, s); },
       [](double x, double s) { return double(x > s); }, to_bool},
      {"ge", [](const Tensor& a, Scalar s) { return ge(a, s); },
       [](double x, double s) { return double(x >= s); }, to_bool},
  };
  uint64_t seed = 5000;
  int checked = 0;
  for (const ScalarCase& c : cases) {
    for (const Shape& shape : kShapes) {
      for (Layout l : kLayouts) {
        for (DType d : {DType::Float32, DType::Float64, DType::Int64}) {
          const Tensor a = make(shape, d, l, seed++);
          // Scalars exactly representable in every dtype, so the reference
          // needs no rounding of the scalar. 0 hits the rounding in div.
          for (Scalar s : {Scalar(int64_t{3}), Scalar(-2), Scalar(0.5), Scalar(0)}) {
            const DType compute = s.result_type(d);
            const DType result = c.result(compute);
            EXPECT_TRUE(
                matches(c.op(a, s), shape, result,
                        ref_unary(a, result, [&](double x) { return c.ref(x, s.to_double()); })))
                << c.name << ": " << shape << " " << layout_name(l) << " " << d << " scalar " << s;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(Elementwise, PowMatchesReference) {
  uint64_t seed = 7000;
  for (const Shape& shape : kShapes) {
    for (Layout l : kLayouts) {
      for (DType d : {DType::Float32, DType::Float64}) {
        const Tensor a = abs(make(shape, d, l, seed++));  // positive bases: real results
        for (double e : {2.0, 0.5, 3.0, -1.5, 0.0, 1.0}) {
          const double rtol = d == DType::Float32 ? 2e-6 : 1e-14;
          EXPECT_TRUE(matches(pow(a, e), shape, d,
                              ref_unary(a, d, [e](double x) { return std::pow(x, e); }), rtol))
              << shape << " " << layout_name(l) << " " << d << " ** " << e;
        }
      }
      const Tensor i = make(shape, DType::Int64, l, seed++);
      for (int64_t e : {0, 1, 2, 3, 7}) {
        EXPECT_TRUE(
            matches(pow(i, e), shape, DType::Int64,
                    ref_unary(i, DType::Int64,
                              [e](double x) { return std::pow(x, static_cast<double>(e)); })))
            << shape << " " << layout_name(l) << " int64 ** " << e;
      }
    }
  }
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  bool transcendental;  // int input -> float32 result
  bool bool_ok;
};

TEST(Elementwise, UnaryOpsMatchReference) {
  const double k_beta = std::sqrt(2.0 / std::numbers::pi);
  const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, false, false},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, false,
       true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x < 0 ? 0.0 : x; },
       false, false},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, true,
       true},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true,
       true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true,
       true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
       true, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, true,
       true},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, true, true},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, true,
       true},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](double x) { return x / (1 + std::exp(-x)); }, true, true},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, true, true},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, true,
       true},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, true,
       true},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); },
       true, true},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); },
       true, true},
      {"sign", [](const Tensor& x) { return sign(x); },
       [](double x) { return double((0 < x) - (x < 0)); }, false, true},
      {"floor", [](const Tensor& x) { return floor(x); }, [](double x) { return std::floor(x); },
       false, false},
      {"round", [](const Tensor& x) { return round(x); },
       [](double x) { return std::nearbyint(x); }, false, false},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, false,
       false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); },
       [k_beta](double x) {
         return 0.5 * x * (1 + std::tanh(k_beta * (x + 0.044715 * x * x * x)));
       },
       true, true},
  };
  uint64_t seed = 9000;
  for (const UnaryCase& c : cases) {
    for (const Shape& shape : kShapes) {
      for (Layout l : kLayouts) {
        for (DType d : kAllDTypes) {
          if (d == DType::Bool && !c.bool_ok) continue;
          const Tensor x = make(shape, d, l, seed++);
          const DType result = c.transcendental && !is_floating(d) ? DType::Float32 : d;
          // Exact for the non-transcendental ops; libm-accuracy otherwise.
          const double rtol = !c.transcendental ? 0 : result == DType::Float32 ? 1e-6 : 1e-14;
          // gelu(x) for x << 0 is x times a cancelling 1 + erf(...): its absolute
          // error is about |x| * eps(dtype), hence the absolute tolerance.
          const double atol = !c.transcendental ? 0 : result == DType::Float32 ? 1e-6 : 1e-14;
          EXPECT_TRUE(matches(c.op(x), shape, result, ref_unary(x, result, c.ref), rtol, atol))
              << c.name << ": " << shape << " " << layout_name(l) << " " << d;
        }
      }
    }
  }
}

TEST(Elementwise, WhereAndMaskedFillMatchReference) {
  uint64_t seed = 11000;
  const std::vector<std::array<Shape, 3>> triples = {
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}}, {Shape{3, 1}, Shape{1, 4}, Shape{4}},
      {Shape{}, Shape{2, 2}, Shape{}},         {Shape{0, 2}, Shape{2}, Shape{1}},
      {Shape{5}, Shape{}, Shape{1}},           {Shape{2, 1, 3}, Shape{4, 1}, Shape{1, 3}}};
  for (const auto& [sc, sa, sb] : triples) {
    for (Layout l : kLayouts) {
      const Tensor cond = make(sc, DType::Bool, l, seed++);
      const Tensor a = make(sa, DType::Float32, l, seed++);
      const Tensor b = make(sb, DType::Int64, Layout::Strided, seed++);
      const Shape out = naive_broadcast(sc, naive_broadcast(sa, sb));
      const Ref rc = ref(cond), ra = ref(a), rb = ref(b);
      std::vector<double> want(static_cast<size_t>(out.product()));
      std::vector<double> want_scalar(want.size());
      for (int64_t i = 0; i < out.product(); ++i) {
        want[i] = at(rc, out, i) != 0 ? at(ra, out, i) : at(rb, out, i);
        want_scalar[i] = at(rc, out, i) != 0 ? at(ra, out, i) : 2.5;
      }
      EXPECT_TRUE(matches(where(cond, a, b), out, DType::Float32, want))
          << sc << " " << sa << " " << sb << " " << layout_name(l);
      const Shape out2 = naive_broadcast(sc, sa);
      std::vector<double> want2(static_cast<size_t>(out2.product()));
      for (int64_t i = 0; i < out2.product(); ++i) {
        want2[i] = at(rc, out2, i) != 0 ? at(ra, out2, i) : 2.5;
      }
      EXPECT_TRUE(matches(where(cond, a, 2.5), out2, DType::Float32, want2))
          << sc << " " << sa << " " << layout_name(l);
      // masked_fill(a, cond, v) == where(cond, v, a).
      std::vector<double> want3(want2.size());
      for (int64_t i = 0; i < out2.product(); ++i) {
        want3[i] = at(rc, out2, i) != 0 ? -7 : at(ra, out2, i);
      }
      EXPECT_TRUE(matches(masked_fill(a, cond, -7), out2, DType::Float32, want3))
          << sc << " " << sa << " " << layout_name(l);
    }
  }
}

// ---- in place -------------------------------------------------------------------------

TEST(Elementwise, InPlaceOpsMatchOutOfPlaceOnViews) {
  // For each view of a base tensor, self.op_(other) must equal op(self, other)
  // and be visible through the base, leaving the rest of the base untouched.
  struct InPlaceCase {
    const char* name;
    std::function<void(Tensor&, const Tensor&)> inplace;
    std::function<Tensor(const Tensor&, const Tensor&)> outplace;
  };
  const std::vector<InPlaceCase> cases = {
      {"add_", [](Tensor& s, const Tensor& o) { s.add_(o); },
       [](auto& a, auto& b) { return add(a, b); }},
      {"sub_", [](Tensor& s, const Tensor& o) { s.sub_(o); },
       [](auto& a, auto& b) { return sub(a, b); }},
      {"mul_", [](Tensor& s, const Tensor& o) { s.mul_(o); },
       [](auto& a, auto& b) { return mul(a, b); }},
      {"div_", [](Tensor& s, const Tensor& o) { s.div_(o); },
       [](auto& a, auto& b) { return div(a, b); }},
      {"add_(2.5)", [](Tensor& s, const Tensor&) { s.add_(2.5); },
       [](auto& a, auto&) { return add(a, 2.5); }},
      {"sub_(1)", [](Tensor& s, const Tensor&) { s.sub_(1); },
       [](auto& a, auto&) { return sub(a, 1); }},
      {"mul_(-3)", [](Tensor& s, const Tensor&) { s.mul_(-3); },
       [](auto& a, auto&) { return mul(a, -3); }},
      {"div_(4)", [](Tensor& s, const Tensor&) { s.div_(4); },
       [](auto& a, auto&) { return div(a, 4); }},
      {"relu_", [](Tensor& s, const Tensor&) { s.relu_(); },
       [](auto& a, auto&) { return relu(a); }},
      {"masked_fill_", [](Tensor& s, const Tensor& o) { s.masked_fill_(gt(o, 0), 9); },
       [](auto& a, auto& b) { return masked_fill(a, gt(b, 0), 9); }},
      {"+=", [](Tensor& s, const Tensor& o) { s += o; }, [](auto& a, auto& b) { return a + b; }},
      {"*= 2", [](Tensor& s, const Tensor&) { s *= 2; }, [](auto& a, auto&) { return a * 2; }},
  };
  // Views of a (6, 8) base, each with the shape of `other` below or one it broadcasts to.
  const std::vector<std::function<Tensor(const Tensor&)>> views = {
      [](const Tensor& t) { return t; },
      [](const Tensor& t) { return t.transpose(0, 1); },                   // (8, 6)
      [](const Tensor& t) { return t.slice(1, 1, 8, 2); },                 // (6, 4) step 2
      [](const Tensor& t) { return t.slice(0, 2, 5).slice(1, 0, 8, 3); },  // (3, 3)
      [](const Tensor& t) { return t.select(0, 4); },                      // (8)
      [](const Tensor& t) { return t.narrow(1, 2, 1); },                   // (6, 1)
  };
  uint64_t seed = 13000;
  for (DType d : {DType::Float32, DType::Float64}) {
    for (const InPlaceCase& c : cases) {
      for (size_t vi = 0; vi < views.size(); ++vi) {
        const Tensor base = Tensor::randn({6, 8}, seed++, 0, d);
        Tensor view = views[vi](base);
        const Shape& s = view.shape();
        // other: same shape, or its last dim broadcast.
        Shape os = s;
        if (!os.empty()) os.back() = 1;
        for (const Tensor& other :
             {Tensor::randn(s, seed++, 0, d).to(DType::Float32), Tensor::randn(os, seed++, 0, d)}) {
          const Tensor base_now = base.clone();
          const Tensor want = c.outplace(view.clone(), other);
          c.inplace(view, other);
          EXPECT_TRUE(matches(view, s, d, want.to_vector<double>())) << c.name << " view " << vi;
          // Through the base: the view's elements changed as computed, no others.
          const Tensor marker = Tensor::zeros({6, 8}, DType::Int64);
          Tensor mview = views[vi](marker);
          mview.fill_(1);
          const std::vector<double> b = base.to_vector<double>(), b0 = base_now.to_vector<double>();
          const std::vector<int64_t> m = marker.to_vector<int64_t>();
          const Tensor recomputed = views[vi](base).contiguous();
          EXPECT_TRUE(matches(recomputed, s, d, want.to_vector<double>()))
              << c.name << " base " << vi;
          for (size_t i = 0; i < b.size(); ++i) {
            if (m[i] == 0) {
              EXPECT_EQ(b[i], b0[i]) << c.name << " view " << vi << " touched " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Elementwise, InPlaceOnIntAndBoolTensors) {
  Tensor i = i64({1, 2, 3});
  i.add_(i64({10, 20, 30}));
  i.mul_(2);
  i.sub_(bools({true, false, true}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{21, 44, 65}));
  i.add_(true);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{22, 45, 66}));
  Tensor b = bools({true, false, false});
  b.add_(bools({false, false, true}));
  EXPECT_TRUE(matches(b, {3}, DType::Bool, {1, 0, 1}));
  b.mul_(false);
  EXPECT_TRUE(matches(b, {3}, DType::Bool, {0, 0, 0}));
  Tensor r = i64({-1, 5});
  r.relu_();
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{0, 5}));
  // float32 self with a float64 operand computes in float64, stores float32.
  Tensor f = f32({1, 2});
  f.add_(f64({0.1, 0.2}));
  EXPECT_TRUE(
      matches(f, {2}, DType::Float32, {static_cast<float>(1 + 0.1), static_cast<float>(2 + 0.2)}));
  f.mul_(i64({2, 3}));
  EXPECT_EQ(f.dtype(), DType::Float32);
}

TEST(Elementwise, InPlaceRejectsResultsSelfCannotHold) {
  Tensor i = i64({1, 2});
  expect_error_elementwise(
      [&] {
        i.add_(f32({1, 2}));
      },
      "add_: result type float32 can't be cast to the desired output type int64");
  expect_error_elementwise([&] { i.add_(0.5); }, "add_: result type float32 can't be cast");
  expect_error_elementwise([&] { i.div_(2); },
               "div_: result type float32 can't be cast to the desired output type int64");
  expect_error_elementwise([&] { i /= i64({1, 1}); }, "div_:");
  expect_error_elementwise([&] { i.mul_(f64({1, 1})); }, "mul_: result type float64");
  Tensor b = bools({true});
  expect_error_elementwise([&] { b.add_(2); },
               "add_: result type int64 can't be cast to the desired output type bool");
  expect_error_elementwise([&] { b.mul_(i64({1})); }, "mul_: result type int64");
  // Nothing was written by the failed calls.
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
}

TEST(Elementwise, InPlaceCannotBroadcastSelf) {
  Tensor x = f32({1, 2, 3});
  expect_error_elementwise(
      [&] {
        x.add_(Tensor::ones({2, 3}));
      },
      "add_: output with shape [3] doesn't match the broadcast shape [2, 3]");
  expect_error_elementwise([&] { x.mul_(Tensor::ones({2})); }, "mul_: shapes [3] and [2] cannot be broadcast");
  expect_error_elementwise(
      [&] {
        x.masked_fill_(bools({true, false, true, true}, Shape{2, 2}), 0);
      },
      "masked_fill_:");
  // An expanded view has elements sharing memory: writing it is refused.
  Tensor e = f32({1}).expand({4});
  expect_error_elementwise([&] { e.add_(1); },
               "add_: cannot write in place to a tensor whose elements share memory");
  expect_error_elementwise([&] { e.relu_(); }, "relu_:");
  expect_error_elementwise([&] { e.masked_fill_(bools({true}), 0); }, "masked_fill_:");
}

TEST(Elementwise, InPlaceWithAliasedOperands) {
  // Exactly the same view: every element reads itself.
  Tensor x = f32({1, 2, 3, 4});
  x.add_(x);
  EXPECT_TRUE(matches(x, {4}, DType::Float32, {2, 4, 6, 8}));
  x.mul_(x);
  EXPECT_TRUE(matches(x, {4}, DType::Float32, {4, 16, 36, 64}));
  // Partial overlap: behaves as if the operand were read before writing.
  Tensor y = f32({1, 2, 3, 4});
  Tensor tail = y.slice(0, 1, 4);
  tail.add_(y.slice(0, 0, 3));
  EXPECT_TRUE(matches(y, {4}, DType::Float32, {1, 3, 5, 7}));
  Tensor z = i64({1, 2, 3, 4});
  Tensor head = z.slice(0, 0, 3);
  head.sub_(z.slice(0, 1, 4));
  EXPECT_EQ(z.to_vector<int64_t>(), (std::vector<int64_t>{-1, -1, -1, 4}));
  // A broadcast element of self: x += x[0] adds the original x[0] everywhere.
  Tensor w = f64({5, 1, 2});
  w.add_(w.slice(0, 0, 1));
  EXPECT_TRUE(matches(w, {3}, DType::Float64, {10, 6, 7}));
  // Transposed self onto itself.
  Tensor m = f32({1, 2, 3, 4}, Shape{2, 2});
  Tensor mt = m.t();
  m.add_(mt);
  EXPECT_TRUE(matches(m, {2, 2}, DType::Float32, {2, 5, 5, 8}));
  // A mask that is self.
  Tensor b = bools({true, false, true});
  b.masked_fill_(b, false);
  EXPECT_TRUE(matches(b, {3}, DType::Bool, {0, 0, 0}));
}

// ---- errors ---------------------------------------------------------------------------

TEST(Elementwise, BroadcastErrorsNameTheOpAndShapes) {
  const Tensor a = Tensor::ones({2, 3});
  const Tensor b = Tensor::ones({4});
  expect_error_elementwise([&] { add(a, b); },
               "add: shapes [2, 3] and [4] cannot be broadcast (dim -1: 3 vs 4)");
  expect_error_elementwise([&] { sub(a, b); }, "sub: shapes [2, 3] and [4]");
  expect_error_elementwise([&] { mul(a, b); }, "mul: shapes");
  expect_error_elementwise([&] { div(a, b); }, "div: shapes");
  expect_error_elementwise([&] { maximum(a, b); }, "maximum: shapes");
  expect_error_elementwise([&] { minimum(a, b); }, "minimum: shapes");
  expect_error_elementwise([&] { a + b; }, "add:");
  expect_error_elementwise([&] { a - b; }, "sub:");
  expect_error_elementwise([&] { a* b; }, "mul:");
  expect_error_elementwise([&] { a / b; }, "div:");
  expect_error_elementwise([&] { eq(a, b); }, "eq: shapes");
  expect_error_elementwise([&] { ne(a, b); }, "ne: shapes");
  expect_error_elementwise([&] { lt(a, b); }, "lt: shapes");
  expect_error_elementwise([&] { le(a, b); }, "le: shapes");
  expect_error_elementwise([&] { gt(a, b); }, "gt: shapes");
  expect_error_elementwise([&] { ge(a, b); }, "ge: shapes");
  expect_error_elementwise([&] { where(Tensor::ones({2, 3}, DType::Bool), a, b); }, "where: shapes");
  expect_error_elementwise([&] { where(Tensor::ones({5}, DType::Bool), a, 1); }, "where: shapes");
  expect_error_elementwise([&] { masked_fill(a, Tensor::ones({4}, DType::Bool), 1); }, "masked_fill: shapes");
  expect_error_elementwise([&] { allclose(a, b); }, "allclose: shapes");
  expect_error_elementwise([&] { max_abs_diff(a, b); }, "max_abs_diff: shapes");
  expect_error_elementwise([&] { add(Tensor::ones({0}), Tensor::ones({2})); }, "add: shapes [0] and [2]");
}

TEST(Elementwise, MaskAndConditionMustBeBool) {
  const Tensor x = Tensor::ones({2});
  expect_error_elementwise([&] { where(x, x, x); }, "where: condition must be bool, got float32");
  expect_error_elementwise([&] { where(Tensor::ones({2}, DType::Int64), x, 0); },
               "where: condition must be bool, got int64");
  expect_error_elementwise([&] { masked_fill(x, x, 0); }, "masked_fill: mask must be bool, got float32");
  Tensor y = x.clone();
  expect_error_elementwise([&] { y.masked_fill_(x, 0); }, "masked_fill_: mask must be bool, got float32");
}

TEST(Elementwise, UndefinedTensorsAreRejected) {
  const Tensor u;
  const Tensor x = Tensor::ones({2});
  expect_error_elementwise([&] { add(u, x); }, "add: undefined tensor");
  expect_error_elementwise([&] { add(x, u); }, "add: undefined tensor");
  expect_error_elementwise([&] { add(u, 1); }, "add: undefined tensor");
  expect_error_elementwise([&] { sub(1, u); }, "sub: undefined tensor");
  expect_error_elementwise([&] { div(u, x); }, "div: undefined tensor");
  expect_error_elementwise([&] { exp(u); }, "exp: undefined tensor");
  expect_error_elementwise([&] { neg(u); }, "neg: undefined tensor");
  expect_error_elementwise([&] { relu(u); }, "relu: undefined tensor");
  expect_error_elementwise([&] { gelu(u); }, "gelu: undefined tensor");
  expect_error_elementwise([&] { pow(u, 2); }, "pow: undefined tensor");
  expect_error_elementwise([&] { lt(u, 2); }, "lt: undefined tensor");
  expect_error_elementwise([&] { where(u, x, x); }, "where: undefined tensor");
  expect_error_elementwise([&] { masked_fill(u, x, 0); }, "masked_fill: undefined tensor");
  expect_error_elementwise([&] { equal(u, x); }, "equal: undefined tensor");
  expect_error_elementwise([&] { allclose(x, u); }, "allclose: undefined tensor");
  expect_error_elementwise([&] { max_abs_diff(u, u); }, "max_abs_diff: undefined tensor");
  Tensor v;
  expect_error_elementwise([&] { v.add_(x); }, "add_: undefined tensor");
  expect_error_elementwise([&] { v.relu_(); }, "relu_: undefined tensor");
  Tensor w = x.clone();
  expect_error_elementwise([&] { w.mul_(u); }, "mul_: undefined tensor");
}

// ---- comparison helpers ---------------------------------------------------------------

TEST(Elementwise, EqualComparesShapeAndValuesAfterPromotion) {
  EXPECT_TRUE(equal(f32({1, 2}), f32({1, 2})));
  EXPECT_TRUE(equal(f32({1, 2}), i64({1, 2})));
  EXPECT_TRUE(equal(bools({true}), i64({1})));
  EXPECT_FALSE(equal(f32({1, 2}), f32({1, 2.5})));
  EXPECT_FALSE(equal(f32({1, 2}), f32({1, 2}, Shape{1, 2})));  // no broadcasting
  EXPECT_FALSE(equal(f32({1, 2, 3}), f32({1, 2})));            // no throw either
  EXPECT_FALSE(equal(f32({NAN}), f32({NAN})));
  EXPECT_TRUE(equal(Tensor::ones({0, 3}), Tensor::zeros({0, 3})));
  EXPECT_TRUE(equal(Tensor::scalar(2.0), Tensor::scalar(int64_t{2})));
  const Tensor m = Tensor::randn({5, 4}, 3);
  EXPECT_TRUE(equal(m.t(), m.t().contiguous()));
  EXPECT_FALSE(equal(m.t(), m.t().contiguous() + 1e-3));
}

TEST(Elementwise, AllcloseUsesToleranceAndNaNRule) {
  const Tensor a = f64({1, 100, 0});
  EXPECT_TRUE(allclose(a, f64({1 + 1e-9, 100 + 5e-4, 1e-9})));
  EXPECT_FALSE(allclose(a, f64({1, 100 + 2e-3, 0})));  // 2e-3 > 1e-8 + 1e-5 * 100
  EXPECT_FALSE(allclose(a, f64({1, 100, 1e-7})));      // atol 1e-8
  EXPECT_TRUE(allclose(a, f64({1, 100, 1e-7}), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(a, f64({1.1, 110, 0}), 0.1, 0));  // relative to b
  EXPECT_FALSE(allclose(f64({1.1}), f64({1}), 0.09, 0));
  EXPECT_FALSE(allclose(f64({NAN}), f64({NAN})));
  EXPECT_TRUE(allclose(f64({NAN, 1}), f64({NAN, 1}), 1e-5, 1e-8, true));
  EXPECT_FALSE(allclose(f64({NAN}), f64({1}), 1e-5, 1e-8, true));
  EXPECT_TRUE(allclose(f64({INFINITY}), f64({INFINITY})));
  EXPECT_FALSE(allclose(f64({INFINITY}), f64({-INFINITY}), 1, 1));
  EXPECT_FALSE(allclose(f64({1e300}), f64({INFINITY}), 1, 1));
  EXPECT_TRUE(allclose(f32({1, 2}, Shape{1, 2}), f32({1, 2, 1, 2}, Shape{2, 2})));  // broadcasts
  EXPECT_TRUE(allclose(i64({3}), f32({3.00001f})));
  EXPECT_TRUE(allclose(Tensor::ones({0}), Tensor::ones({0})));
  expect_error_elementwise([&] { allclose(a, a, -1); }, "allclose: rtol and atol must be >= 0");
}

TEST(Elementwise, MaxAbsDiffOverBroadcastElements) {
  EXPECT_DOUBLE_EQ(max_abs_diff(f64({1, 5, -2}), f64({1.5, 4, 1})), 3.0);
  EXPECT_DOUBLE_EQ(max_abs_diff(f64({1, 5, -2}), f64({0})), 5.0);
  EXPECT_DOUBLE_EQ(max_abs_diff(i64({10}), f32({-0.5f})), 10.5);
  EXPECT_DOUBLE_EQ(max_abs_diff(bools({true, false}), bools({false, false})), 1.0);
  EXPECT_EQ(max_abs_diff(Tensor::ones({0, 3}), Tensor::ones({3})), 0.0);
  EXPECT_TRUE(std::isnan(max_abs_diff(f64({1, NAN, 2}), f64({1, 1, 1}))));
  EXPECT_TRUE(std::isnan(max_abs_diff(f64({NAN, 1, 100}), f64({1, 1, 1}))));
  const Tensor m = Tensor::randn({7, 9}, 4);
  const Tensor p = m.t().contiguous() + 0.25;
  EXPECT_NEAR(max_abs_diff(m.t(), p), 0.25, 1e-6);
  EXPECT_EQ(max_abs_diff(m.t(), m.t()), 0.0);
}

TEST(Elementwise, LargeTensorsTakeTheFastPathsCorrectly) {
  // Big enough for vector loops with remainders; checks the contiguous,
  // broadcast-row, broadcast-column and scalar paths against the reference.
  const Tensor a = Tensor::randn({257, 131}, 21);
  const Tensor row = Tensor::randn({131}, 22);
  const Tensor col = Tensor::randn({257, 1}, 23);
  const auto plus = [](double x, double y) { return x + y; };
  EXPECT_TRUE(matches(a + a, a.shape(), DType::Float32, ref_binary(a, a, DType::Float32, plus)));
  EXPECT_TRUE(
      matches(a + row, a.shape(), DType::Float32, ref_binary(a, row, DType::Float32, plus)));
  EXPECT_TRUE(
      matches(col + a, a.shape(), DType::Float32, ref_binary(col, a, DType::Float32, plus)));
  EXPECT_TRUE(
      matches(a + col, a.shape(), DType::Float32, ref_binary(a, col, DType::Float32, plus)));
  EXPECT_TRUE(matches(a * 3, a.shape(), DType::Float32,
                      ref_unary(a, DType::Float32, [](double x) { return x * 3; })));
  // Rows broadcast (inner run contiguous) and columns broadcast (inner
  // stride 0: the value is computed once per run).
  for (const Tensor& e : {Tensor::randn({1, 131}, 24).expand({257, 131}),
                          Tensor::randn({257, 1}, 25).expand({257, 131})}) {
    EXPECT_TRUE(matches(exp(e), e.shape(), DType::Float32,
                        ref_unary(e, DType::Float32, [](double x) { return std::exp(x); }), 1e-6));
  }
  EXPECT_TRUE(
      matches(lt(a, row), a.shape(), DType::Bool,
              ref_binary(a, row, DType::Bool, [](double x, double y) { return double(x < y); })));
}

}  // namespace
}  // namespace dtensor
