// Tests of sum, mean, prod, amax, amin, var, argmax and argmin: hand-computed
// values, dtype rules, errors, then every op against a plain reference loop
// over to_vector() on random inputs of many shapes (0-d, empty and size-1
// dims), every set of reduced dims, keepdim both ways, negative dims and
// non-contiguous layouts (transpose, stepped slice, expand, permute).
//
// Tolerance: float32 results must be within 1.2e-7 * |ref| + 1e-12 of the
// double reference — one float32 ulp, which double accumulation guarantees
// and a float32 accumulator misses on the longer reductions; float64 within
// 1e-12 relative; int64 and bool results exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dtensor/tensor.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

constexpr double kNaNReduce = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfReduce = std::numeric_limits<double>::infinity();

bool close(double got, double ref, DType dtype) {
  if (std::isnan(ref)) return std::isnan(got);
  if (std::isinf(ref)) return got == ref;
  switch (dtype) {
    case DType::Float32: return std::fabs(got - ref) <= 1.2e-7 * std::fabs(ref) + 1e-12;
    case DType::Float64: return std::fabs(got - ref) <= 1e-12 * std::fabs(ref) + 1e-12;
    default: return got == ref;
  }
}

void expect_values_reduce(const Tensor& got, const Shape& shape, const std::vector<double>& ref,
                   const std::string& what) {
  ASSERT_EQ(got.shape(), shape) << what;
  const auto v = got.to_vector<double>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_TRUE(close(v[i], ref[i], got.dtype()))
        << what << ": element " << i << " is " << v[i] << ", expected " << ref[i];
}

// ---- layouts -------------------------------------------------------------------

enum class ReduceLayout { Contiguous, Transposed, Stepped, Expanded, Permuted };
const ReduceLayout kReduceLayouts[] = {ReduceLayout::Contiguous, ReduceLayout::Transposed, ReduceLayout::Stepped,
                           ReduceLayout::Expanded, ReduceLayout::Permuted};

const char* reduce_layout_name(ReduceLayout l) {
  switch (l) {
    case ReduceLayout::Contiguous: return "contiguous";
    case ReduceLayout::Transposed: return "transposed";
    case ReduceLayout::Stepped: return "stepped";
    case ReduceLayout::Expanded: return "expanded";
    case ReduceLayout::Permuted: return "permuted";
  }
  return "?";
}

// A tensor of logical shape `shape` laid out as `layout`, with values from
// gen(physical shape). Returns an undefined tensor when the layout does not
// apply to the rank.
Tensor make_reduce(const Shape& shape, ReduceLayout layout, const std::function<Tensor(const Shape&)>& gen) {
  const size_t n = shape.size();
  switch (layout) {
    case ReduceLayout::Contiguous: return gen(shape);
    case ReduceLayout::Transposed: {
      if (n < 2) return Tensor();
      Shape p = shape;
      std::swap(p[0], p[n - 1]);
      return gen(p).transpose(0, -1);
    }
    case ReduceLayout::Stepped: {
      if (n < 1) return Tensor();
      Shape p = shape;
      p[0] = 2 * shape[0];
      return gen(p).slice(0, 0, p[0], 2);
    }
    case ReduceLayout::Expanded: {
      if (n < 1) return Tensor();
      Shape p = shape;
      p[0] = 1;
      return gen(p).expand(shape);
    }
    case ReduceLayout::Permuted: {
      if (n < 3) return Tensor();
      Shape p, order;
      for (size_t d = 0; d < n; ++d) {
        p.push_back(shape[n - 1 - d]);
        order.push_back(static_cast<int64_t>(n - 1 - d));
      }
      return gen(p).permute(order);
    }
  }
  return Tensor();
}

// The same values as t, contiguous, as a new tensor of the given dtype.
Tensor with_values(const Shape& shape, const std::vector<double>& v, DType dtype) {
  return Tensor::from_vector(v, shape).to(dtype);
}

// ---- the reference ---------------------------------------------------------------

// Row-major multi-index walk: groups every element of x by the output slot
// it reduces into, in increasing flat order.
template <class V>
std::vector<std::vector<V>> group(const Tensor& x, const std::vector<bool>& reduced) {
  const auto vals = x.to_vector<V>();
  const Shape& s = x.shape();
  const size_t nd = s.size();
  Shape keep = s;
  for (size_t d = 0; d < nd; ++d)
    if (reduced[d]) keep[d] = 1;
  std::vector<std::vector<V>> groups(static_cast<size_t>(keep.product()));
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < vals.size(); ++i) {
    // decompose i
    int64_t rem = static_cast<int64_t>(i);
    for (size_t d = nd; d-- > 0;) {
      idx[d] = rem % s[d];
      rem /= s[d];
    }
    int64_t out = 0;
    for (size_t d = 0; d < nd; ++d) out = out * keep[d] + (reduced[d] ? 0 : idx[d]);
    groups[static_cast<size_t>(out)].push_back(vals[i]);
  }
  return groups;
}

Shape out_shape(const Shape& s, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!reduced[d]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double ref_prod(const std::vector<double>& g) {
  double p = 1;
  for (double v : g) p *= v;
  return p;
}
double ref_max_reduce(const std::vector<double>& g) {
  double m = -kInfReduce;
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}
double ref_min_reduce(const std::vector<double>& g) {
  double m = kInfReduce;
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::min(m, v);
  }
  return m;
}
double ref_mean(const std::vector<double>& g) {
  return ref_sum(g) / static_cast<double>(g.size());
}
double ref_var(const std::vector<double>& g, int64_t correction) {
  const double mu = ref_mean(g);
  double m2 = 0;
  for (double v : g) m2 += (v - mu) * (v - mu);
  return m2 / std::max(static_cast<double>(g.size()) - static_cast<double>(correction), 0.0);
}
// Integer sums and products wrap like int64 arithmetic in PyTorch.
int64_t ref_isum(const std::vector<int64_t>& g) {
  uint64_t s = 0;
  for (int64_t v : g) s += static_cast<uint64_t>(v);
  return static_cast<int64_t>(s);
}
int64_t ref_iprod(const std::vector<int64_t>& g) {
  uint64_t p = 1;
  for (int64_t v : g) p *= static_cast<uint64_t>(v);
  return static_cast<int64_t>(p);
}
template <bool kMax>
int64_t ref_arg(const std::vector<double>& g) {
  size_t best = 0;
  for (size_t i = 1; i < g.size(); ++i) {
    if (std::isnan(g[best])) break;
    if (std::isnan(g[i]) || (kMax ? g[i] > g[best] : g[i] < g[best])) best = i;
  }
  return static_cast<int64_t>(best);
}

// The shapes every sweep runs over: 0-d, empty dims, size-1 dims, rows long
// enough for the multi-lane kernel, up to 4 dims.
const std::vector<Shape> kReduceShapes = {{},        {5},          {1},       {0},
                                    {3, 4},    {4, 1, 5},    {2, 3, 4}, {0, 3},
                                    {3, 0, 2}, {2, 3, 4, 5}, {7, 33},   {3, 70, 5},
                                    {130, 9},  {1, 1},       {2, 1, 3, 1}, {3, 100}};

// Every dim list to try for a rank: each non-empty subset in increasing
// order, the same with negative dims in reverse order, and {} (all dims).
std::vector<std::vector<int64_t>> dim_lists(size_t nd) {
  std::vector<std::vector<int64_t>> lists = {{}};
  if (nd == 0) return {{}, {0}, {-1}};
  for (uint32_t mask = 1; mask < (1u << nd); ++mask) {
    std::vector<int64_t> pos, neg;
    for (size_t d = 0; d < nd; ++d) {
      if (mask & (1u << d)) {
        pos.push_back(static_cast<int64_t>(d));
        neg.insert(neg.begin(), static_cast<int64_t>(d) - static_cast<int64_t>(nd));
      }
    }
    lists.push_back(pos);
    lists.push_back(neg);
  }
  return lists;
}

std::vector<bool> reduced_mask(size_t nd, const std::vector<int64_t>& dims) {
  std::vector<bool> r(nd, dims.empty());
  for (int64_t d : dims) {
    if (nd == 0) continue;
    r[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(nd) : d)] = true;
  }
  return r;
}

std::string describe_reduce(const char* op, const Tensor& x, ReduceLayout layout,
                     const std::vector<int64_t>& dims, bool keepdim) {
  return std::string(op) + " of " + to_string(x.shape()) + " " + dtype_name(x.dtype()) + " " +
         reduce_layout_name(layout) + " dims " + to_string(DimVector(dims)) +
         (keepdim ? " keepdim" : "");
}

using FloatRef = std::function<double(const std::vector<double>&)>;
using FloatOp = std::function<Tensor(const Tensor&, const DimVector&, bool)>;

// Runs op on every shape/layout/dims/keepdim against ref for a floating dtype.
// Returns how many cases ran so a test can assert the sweep is not vacuous.
int sweep_floating(const char* name, const FloatOp& op, const FloatRef& ref, DType dtype,
                   const std::function<Tensor(const Shape&, uint64_t)>& gen,
                   bool throws_on_empty = false) {
  int cases = 0;
  uint64_t seed = 1;
  for (const Shape& shape : kReduceShapes) {
    for (ReduceLayout layout : kReduceLayouts) {
      const Tensor x = make_reduce(shape, layout, [&](const Shape& s) { return gen(s, seed++); });
      if (!x.defined()) continue;
      for (const auto& dims : dim_lists(shape.size())) {
        const auto reduced = reduced_mask(shape.size(), dims);
        bool empty_reduction = false;
        for (size_t d = 0; d < shape.size(); ++d)
          if (reduced[d] && shape[d] == 0) empty_reduction = true;
        for (bool keepdim : {false, true}) {
          const std::string what = describe_reduce(name, x, layout, dims, keepdim);
          if (throws_on_empty && empty_reduction) {
            EXPECT_THROW(op(x, DimVector(dims), keepdim), Error) << what;
            continue;
          }
          const Tensor got = op(x, DimVector(dims), keepdim);
          EXPECT_EQ(got.dtype(), dtype) << what;
          std::vector<double> expected;
          for (const auto& g : group<double>(x, reduced)) expected.push_back(ref(g));
          expect_values_reduce(got, out_shape(shape, reduced, keepdim), expected, what);
          ++cases;
        }
      }
    }
  }
  return cases;
}

Tensor randn_of(const Shape& s, uint64_t seed, DType dtype) {
  return Tensor::randn(s, seed, 0, dtype);
}

}  // namespace

// ---- hand-computed -------------------------------------------------------------------

TEST(Reduce, HandComputedSumMeanProd) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  expect_values_reduce(sum(x), {}, {21}, "sum all");
  expect_values_reduce(sum(x, {0}), {3}, {5, 7, 9}, "sum 0");
  expect_values_reduce(sum(x, {1}), {2}, {6, 15}, "sum 1");
  expect_values_reduce(sum(x, {-1}, true), {2, 1}, {6, 15}, "sum -1 keepdim");
  expect_values_reduce(sum(x, {0, 1}, true), {1, 1}, {21}, "sum 0,1 keepdim");
  expect_values_reduce(sum(x, {1, 0}), {}, {21}, "sum 1,0");
  expect_values_reduce(mean(x, {1}), {2}, {2, 5}, "mean 1");
  expect_values_reduce(mean(x), {}, {3.5}, "mean all");
  expect_values_reduce(prod(x), {}, {720}, "prod all");
  expect_values_reduce(prod(x, {0}), {3}, {4, 10, 18}, "prod 0");
}

TEST(Reduce, HandComputedExtremesAndVar) {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 5, 3, 4, 2, 6}, Shape{2, 3});
  expect_values_reduce(amax(x), {}, {6}, "amax all");
  expect_values_reduce(amax(x, {0}), {3}, {4, 5, 6}, "amax 0");
  expect_values_reduce(amin(x, {1}, true), {2, 1}, {1, 2}, "amin 1 keepdim");
  // mean 3.5; squared deviations sum to 17.5
  expect_values_reduce(var(x), {}, {3.5}, "var all");
  expect_values_reduce(var(x, {}, 0), {}, {17.5 / 6}, "var all correction 0");
  expect_values_reduce(var(x, {1}), {2}, {4, 4}, "var 1");
  // Bessel divisor N - correction clamps at 0: 0/0 -> NaN, m2/0 -> inf.
  expect_values_reduce(var(Tensor::from_vector(std::vector<double>{3})), {}, {kNaNReduce}, "var of one");
  expect_values_reduce(var(Tensor::from_vector(std::vector<double>{1, 2}), {}, 2), {}, {kInfReduce},
                "var correction 2");
  expect_values_reduce(var(Tensor::from_vector(std::vector<double>{1, 2}), {}, 3), {}, {kInfReduce},
                "var correction 3");
}

TEST(Reduce, HandComputedArgExtremes) {
  const Tensor x =
      Tensor::from_vector(std::vector<float>{1, 7, 7, 0, 3, 0, 9, 9}, Shape{2, 4});
  EXPECT_EQ(argmax(x).item<int64_t>(), 6);  // first of the two 9s
  EXPECT_EQ(argmin(x).item<int64_t>(), 3);  // first of the two 0s
  expect_values_reduce(argmax(x, 1), {2}, {1, 2}, "argmax 1");
  expect_values_reduce(argmin(x, -1), {2}, {3, 1}, "argmin -1");
  expect_values_reduce(argmax(x, 0), {4}, {1, 0, 1, 1}, "argmax 0");
  expect_values_reduce(argmin(x, 0, true), {1, 4}, {0, 1, 0, 0}, "argmin 0 keepdim");
  const Tensor flat = argmax(x, std::nullopt, true);
  EXPECT_EQ(flat.shape(), (Shape{1, 1}));
  EXPECT_EQ(flat.dtype(), DType::Int64);
  EXPECT_EQ(flat.item<int64_t>(), 6);
  // Flattened index follows the logical (row-major) order of a view.
  EXPECT_EQ(argmax(x.t()).item<int64_t>(), 5);  // x.t() is 4x2; 9 at (2,1) -> 5
}

// ---- dtype rules and special values ------------------------------------------------

TEST(Reduce, DtypeRules) {
  const Tensor i = Tensor::from_vector(std::vector<int64_t>{1, -2, 3, 4}, Shape{2, 2});
  const Tensor b = Tensor::from_vector(std::vector<bool>{true, false, true, true}, Shape{2, 2});
  EXPECT_EQ(sum(i).dtype(), DType::Int64);
  EXPECT_EQ(sum(i).item<int64_t>(), 6);
  EXPECT_EQ(prod(i).item<int64_t>(), -24);
  EXPECT_EQ(sum(b).dtype(), DType::Int64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  expect_values_reduce(sum(b, {0}), {2}, {2, 1}, "bool sum 0");
  EXPECT_EQ(prod(b).dtype(), DType::Int64);
  EXPECT_EQ(prod(b).item<int64_t>(), 0);
  EXPECT_EQ(amax(b).dtype(), DType::Bool);
  expect_values_reduce(amin(b, {1}), {2}, {0, 1}, "bool amin 1");
  EXPECT_EQ(amax(i).dtype(), DType::Int64);
  EXPECT_EQ(amin(i).item<int64_t>(), -2);
  EXPECT_EQ(sum(i.to(DType::Float32)).dtype(), DType::Float32);
  EXPECT_EQ(mean(i.to(DType::Float64)).dtype(), DType::Float64);
  EXPECT_EQ(var(i.to(DType::Float32)).dtype(), DType::Float32);
  EXPECT_EQ(argmax(i).dtype(), DType::Int64);
  EXPECT_EQ(argmax(b).item<int64_t>(), 0);
  EXPECT_EQ(argmin(b).item<int64_t>(), 1);
  // int64 sums are exact past 2^53 (a double accumulator would round).
  const int64_t big = int64_t{1} << 53;
  EXPECT_EQ(sum(Tensor::from_vector(std::vector<int64_t>{big, 1, 1})).item<int64_t>(), big + 2);
  // and wrap on overflow like PyTorch's int64 arithmetic
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(sum(Tensor::from_vector(std::vector<int64_t>{max, 1})).item<int64_t>(),
            std::numeric_limits<int64_t>::min());
}

TEST(Reduce, FloatSumsAccumulateInDouble) {
  // 2^20 copies of 0.1f: the exact sum fits a double, so the float32 result
  // must be exactly that sum rounded once; a float accumulator is off by ~1%.
  const int64_t n = int64_t{1} << 20;
  const Tensor x = Tensor::full({n}, 0.1f, DType::Float32);
  const float expected = static_cast<float>(static_cast<double>(0.1f) * static_cast<double>(n));
  EXPECT_EQ(sum(x).item<float>(), expected);
  EXPECT_EQ(mean(x).item<float>(), 0.1f);
  // Same along an outer dim (the non-row path) and over a 2-d view.
  const Tensor x2 = Tensor::full({n / 4, 4}, 0.1f, DType::Float32);
  const float col = static_cast<float>(static_cast<double>(0.1f) * static_cast<double>(n / 4));
  expect_values_reduce(sum(x2, {0}), {4}, {col, col, col, col}, "column sum");
  EXPECT_EQ(sum(x2.t(), {1}).to_vector<float>(), std::vector<float>(4, col));
}

TEST(Reduce, VarIsStableForLargeMeans) {
  // Values 1e8 + N(0, 1): a one-pass sum-of-squares formula loses everything
  // (x^2 ~ 1e16, where a double's ulp is 2), the two-pass one does not.
  const Tensor noise = Tensor::randn({1000}, 7, 0, DType::Float64);
  auto v = noise.to_vector<double>();
  for (double& e : v) e += 1e8;
  const Tensor x = Tensor::from_vector(v);
  const double got = var(x).item<double>();
  EXPECT_NEAR(got, ref_var(v, 1), 1e-9 * ref_var(v, 1));
  EXPECT_GT(got, 0.5);
  EXPECT_LT(got, 1.5);
}

TEST(Reduce, NaNPropagation) {
  const double nan = kNaNReduce;
  const Tensor x =
      Tensor::from_vector(std::vector<float>{1, static_cast<float>(nan), 3, 2, 5, 4}, Shape{2, 3});
  EXPECT_TRUE(std::isnan(amax(x).item<double>()));
  EXPECT_TRUE(std::isnan(amin(x).item<double>()));
  expect_values_reduce(amax(x, {1}), {2}, {nan, 5}, "amax rows");
  expect_values_reduce(amin(x, {0}), {3}, {1, nan, 3}, "amin cols");
  expect_values_reduce(sum(x, {1}), {2}, {nan, 11}, "sum rows");
  // NaN counts as the extreme for both argmax and argmin, as in PyTorch.
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 1);
  expect_values_reduce(argmax(x, 0), {3}, {1, 0, 1}, "argmax 0");
  // A NaN after the max still wins; the first NaN is reported.
  const Tensor y = Tensor::from_vector(std::vector<double>{9, 1, nan, nan});
  EXPECT_EQ(argmax(y).item<int64_t>(), 2);
  EXPECT_EQ(argmin(y, 0).item<int64_t>(), 2);
  // A long row goes through the multi-lane kernel: NaN in any lane wins.
  std::vector<double> long_row(100, 1.0);
  long_row[37] = nan;
  long_row[80] = 1e300;
  EXPECT_TRUE(std::isnan(amax(Tensor::from_vector(long_row)).item<double>()));
  EXPECT_TRUE(std::isnan(amin(Tensor::from_vector(long_row)).item<double>()));
  // +-inf behave as ordinary extremes.
  const Tensor z = Tensor::from_vector(std::vector<double>{-kInfReduce, 0, kInfReduce});
  EXPECT_EQ(amax(z).item<double>(), kInfReduce);
  EXPECT_EQ(amin(z).item<double>(), -kInfReduce);
}

TEST(Reduce, EmptyAndZeroDim) {
  const Tensor e = Tensor::zeros({0, 3});
  expect_values_reduce(sum(e, {0}), {3}, {0, 0, 0}, "sum over empty dim");
  expect_values_reduce(prod(e, {0}), {3}, {1, 1, 1}, "prod over empty dim");
  expect_values_reduce(mean(e, {0}), {3}, {kNaNReduce, kNaNReduce, kNaNReduce}, "mean over empty dim");
  expect_values_reduce(var(e, {0}), {3}, {kNaNReduce, kNaNReduce, kNaNReduce}, "var over empty dim");
  expect_values_reduce(sum(e, {1}), {0}, {}, "sum over non-empty dim of empty tensor");
  expect_values_reduce(amax(e, {1}), {0}, {}, "amax over non-empty dim of empty tensor");
  EXPECT_EQ(sum(e).item<double>(), 0.0);
  EXPECT_EQ(sum(Tensor::zeros({0}, DType::Int64)).dtype(), DType::Int64);
  EXPECT_EQ(argmax(e, 1).shape(), (Shape{0}));

  const Tensor s = Tensor::scalar(2.5);
  for (const DimVector& dims : {DimVector{}, DimVector{0}, DimVector{-1}}) {
    for (bool keepdim : {false, true}) {
      expect_values_reduce(sum(s, dims, keepdim), {}, {2.5}, "0-d sum");
      expect_values_reduce(amax(s, dims, keepdim), {}, {2.5}, "0-d amax");
      expect_values_reduce(mean(s, dims, keepdim), {}, {2.5}, "0-d mean");
      expect_values_reduce(var(s, dims, 0, keepdim), {}, {0}, "0-d var");
    }
  }
  EXPECT_EQ(argmax(s).item<int64_t>(), 0);
  EXPECT_EQ(argmin(s, 0).item<int64_t>(), 0);
  EXPECT_EQ(argmax(s, -1, true).shape(), Shape{});
}

TEST(Reduce, Errors) {
  const Tensor x = Tensor::randn({2, 3}, 1);
  expect_error([&] { sum(x, {2}); }, {"sum", "dim 2", "out of range"});
  expect_error([&] { mean(x, {-3}); }, {"mean", "-3"});
  expect_error([&] { sum(x, {1, -1}); }, {"sum", "more than once"});
  expect_error([&] { amax(x, {0, 0}); }, {"amax", "more than once"});
  expect_error([&] { sum(Tensor::scalar(1.0), {1}); }, {"sum", "out of range"});
  expect_error([&] { argmax(x, 2); }, {"argmax", "out of range"});
  expect_error([&] { argmin(x, -3); }, {"argmin", "out of range"});
  // mean / var need floating input, and say so naming the dtype.
  const Tensor i = Tensor::randint(0, 5, {2, 3}, 1);
  expect_error([&] { mean(i); }, {"mean", "int64", "floating"});
  expect_error([&] { var(i, {0}); }, {"var", "int64", "floating"});
  expect_error([&] { mean(i.to(DType::Bool)); }, {"mean", "bool"});
  // amax/amin/argmax have no identity for an empty reduction.
  const Tensor e = Tensor::zeros({3, 0});
  expect_error([&] { amax(e, {1}); }, {"amax", "dim 1", "[3, 0]"});
  expect_error([&] { amin(e); }, {"amin", "[3, 0]"});
  expect_error([&] { argmax(e); }, {"argmax", "empty"});
  expect_error([&] { argmin(e, 1); }, {"argmin", "dim 1", "[3, 0]"});
  expect_error([&] { sum(Tensor()); }, {"sum", "undefined"});
}

// ---- against the reference -------------------------------------------------------------

TEST(Reduce, SumMatchesReference) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const int n = sweep_floating(
        "sum", [](const Tensor& x, const DimVector& d, bool k) { return sum(x, d, k); }, ref_sum,
        dt, [dt](const Shape& s, uint64_t seed) { return randn_of(s, seed, dt); });
    EXPECT_GT(n, 500);
  }
}

TEST(Reduce, MeanMatchesReference) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    sweep_floating(
        "mean", [](const Tensor& x, const DimVector& d, bool k) { return mean(x, d, k); },
        ref_mean, dt, [dt](const Shape& s, uint64_t seed) { return randn_of(s, seed, dt); });
  }
}

TEST(Reduce, ProdMatchesReference) {
  // Factors in [0.5, 1.5) keep products of up to 1170 factors in range.
  for (DType dt : {DType::Float32, DType::Float64}) {
    sweep_floating(
        "prod", [](const Tensor& x, const DimVector& d, bool k) { return prod(x, d, k); },
        ref_prod, dt, [dt](const Shape& s, uint64_t seed) {
          auto v = Tensor::rand(s, seed, 0, DType::Float64).to_vector<double>();
          for (double& e : v) e += 0.5;
          return with_values(s, v, dt);
        });
  }
}

TEST(Reduce, AmaxAminMatchReference) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    auto gen = [dt](const Shape& s, uint64_t seed) { return randn_of(s, seed, dt); };
    sweep_floating(
        "amax", [](const Tensor& x, const DimVector& d, bool k) { return amax(x, d, k); },
        ref_max_reduce, dt, gen, /*throws_on_empty=*/true);
    sweep_floating(
        "amin", [](const Tensor& x, const DimVector& d, bool k) { return amin(x, d, k); },
        ref_min_reduce, dt, gen, /*throws_on_empty=*/true);
  }
}

TEST(Reduce, VarMatchesReference) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t corr : {0, 1, 2}) {
      sweep_floating(
          "var",
          [corr](const Tensor& x, const DimVector& d, bool k) { return var(x, d, corr, k); },
          [corr](const std::vector<double>& g) { return ref_var(g, corr); }, dt,
          [dt](const Shape& s, uint64_t seed) { return randn_of(s, seed, dt); });
    }
  }
}

TEST(Reduce, IntegerAndBoolMatchReference) {
  // int64 in [-3, 3] (products wrap, and must wrap exactly like int64) and
  // bool; sums and products come back int64, amax/amin keep the dtype.
  int cases = 0;
  uint64_t seed = 100;
  for (DType dt : {DType::Int64, DType::Bool}) {
    for (const Shape& shape : kReduceShapes) {
      for (ReduceLayout layout : kReduceLayouts) {
        const Tensor x = make_reduce(shape, layout, [&](const Shape& s) {
          return dt == DType::Bool ? Tensor::randint(0, 2, s, seed++).to(DType::Bool)
                                   : Tensor::randint(-3, 4, s, seed++);
        });
        if (!x.defined()) continue;
        for (const auto& dims : dim_lists(shape.size())) {
          const auto reduced = reduced_mask(shape.size(), dims);
          const auto groups = group<int64_t>(x, reduced);
          for (bool keepdim : {false, true}) {
            const std::string what = describe_reduce("int", x, layout, dims, keepdim);
            const Shape os = out_shape(shape, reduced, keepdim);
            const Tensor s = sum(x, DimVector(dims), keepdim);
            const Tensor p = prod(x, DimVector(dims), keepdim);
            ASSERT_EQ(s.dtype(), DType::Int64) << what;
            ASSERT_EQ(p.dtype(), DType::Int64) << what;
            ASSERT_EQ(s.shape(), os) << what;
            std::vector<int64_t> es, ep;
            for (const auto& g : groups) {
              es.push_back(ref_isum(g));
              ep.push_back(ref_iprod(g));
            }
            EXPECT_EQ(s.to_vector<int64_t>(), es) << what;
            EXPECT_EQ(p.to_vector<int64_t>(), ep) << what;
            bool empty_reduction = false;
            for (size_t d = 0; d < shape.size(); ++d)
              if (reduced[d] && shape[d] == 0) empty_reduction = true;
            if (empty_reduction) {
              EXPECT_THROW(amax(x, DimVector(dims), keepdim), Error) << what;
              continue;
            }
            const Tensor mx = amax(x, DimVector(dims), keepdim);
            const Tensor mn = amin(x, DimVector(dims), keepdim);
            ASSERT_EQ(mx.dtype(), dt) << what;
            std::vector<int64_t> emx, emn;
            for (const auto& g : groups) {
              emx.push_back(*std::max_element(g.begin(), g.end()));
              emn.push_back(*std::min_element(g.begin(), g.end()));
            }
            EXPECT_EQ(mx.to_vector<int64_t>(), emx) << what;
            EXPECT_EQ(mn.to_vector<int64_t>(), emn) << what;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

TEST(Reduce, ArgExtremesMatchReference) {
  // Values from {0, 1, 2, 3} give many ties (first occurrence must win);
  // a few NaNs must win over everything. Covers the row path (dim innermost
  // in memory) and the slice-sweep path (dim outer in memory).
  int cases = 0;
  uint64_t seed = 500;
  for (bool with_nan : {false, true}) {
    for (const Shape& shape : kReduceShapes) {
      for (ReduceLayout layout : kReduceLayouts) {
        const Tensor x = make_reduce(shape, layout, [&](const Shape& s) {
          auto v = Tensor::randint(0, 4, s, seed++).to_vector<double>();
          if (with_nan)
            for (size_t i = 0; i < v.size(); i += 7) v[(i * 13 + seed) % v.size()] = kNaNReduce;
          return with_values(s, v, DType::Float32);
        });
        if (!x.defined()) continue;
        const size_t nd = shape.size();
        // flattened
        for (bool keepdim : {false, true}) {
          if (x.numel() == 0) {
            EXPECT_THROW(argmax(x, std::nullopt, keepdim), Error);
            continue;
          }
          const auto all = x.to_vector<double>();
          const Tensor a = argmax(x, std::nullopt, keepdim);
          EXPECT_EQ(a.shape(), keepdim ? Shape(nd, 1) : Shape{});
          EXPECT_EQ(a.item<int64_t>(), ref_arg<true>(all)) << to_string(x);
          EXPECT_EQ(argmin(x, std::nullopt, keepdim).item<int64_t>(), ref_arg<false>(all));
        }
        for (int64_t d = -static_cast<int64_t>(std::max<size_t>(nd, 1));
             d < static_cast<int64_t>(std::max<size_t>(nd, 1)); ++d) {
          std::vector<bool> reduced(nd, false);
          if (nd > 0) reduced[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(nd) : d)] = true;
          bool empty_reduction = false;
          for (size_t k = 0; k < nd; ++k)
            if (reduced[k] && shape[k] == 0) empty_reduction = true;
          for (bool keepdim : {false, true}) {
            const std::string what =
                describe_reduce("argmax", x, layout, {d}, keepdim) + (with_nan ? " nan" : "");
            if (empty_reduction) {
              EXPECT_THROW(argmax(x, d, keepdim), Error) << what;
              continue;
            }
            const Tensor amx = argmax(x, d, keepdim);
            const Tensor amn = argmin(x, d, keepdim);
            ASSERT_EQ(amx.dtype(), DType::Int64) << what;
            ASSERT_EQ(amx.shape(), out_shape(shape, reduced, keepdim)) << what;
            ASSERT_EQ(amn.shape(), out_shape(shape, reduced, keepdim)) << what;
            std::vector<int64_t> emx, emn;
            for (const auto& g : group<double>(x, reduced)) {
              emx.push_back(ref_arg<true>(g));
              emn.push_back(ref_arg<false>(g));
            }
            EXPECT_EQ(amx.to_vector<int64_t>(), emx) << what;
            EXPECT_EQ(amn.to_vector<int64_t>(), emn) << what;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 200);
}

TEST(Reduce, ArgExtremesOfLongRowsWithTiesAndSignedZeros) {
  // Rows of 100 go through the vectorised extreme + first-occurrence search.
  std::vector<double> v(100, -1.0);
  v[10] = -0.0;
  v[20] = 0.0;  // equal to -0.0: the first of the two is the argmax
  v[30] = -5.0;
  v[40] = -5.0;
  const Tensor x = Tensor::from_vector(v).to(DType::Float32);
  EXPECT_EQ(argmax(x, 0).item<int64_t>(), 10);
  EXPECT_EQ(argmin(x, 0).item<int64_t>(), 30);
  EXPECT_EQ(amax(x).item<double>(), 0.0);
  v[50] = kNaNReduce;
  v[60] = kNaNReduce;
  const Tensor y = Tensor::from_vector(v, Shape{1, 100});
  EXPECT_EQ(argmax(y, 1).item<int64_t>(), 50);
  EXPECT_EQ(argmin(y, -1).item<int64_t>(), 50);
  EXPECT_EQ(argmax(y).item<int64_t>(), 50);
}

TEST(Reduce, LargeRowsAndColumns) {
  // Sizes around the lane width and beyond, where the multi-lane kernel, its
  // tail and the column path meet.
  for (int64_t cols : {15, 16, 17, 63, 64, 65, 1000}) {
    const Tensor x = Tensor::randn({9, cols}, static_cast<uint64_t>(cols), 0, DType::Float32);
    for (int64_t d : {0, 1}) {
      std::vector<bool> reduced = {d == 0, d == 1};
      const auto groups = group<double>(x, reduced);
      std::vector<double> es, emx, ev;
      for (const auto& g : groups) {
        es.push_back(ref_sum(g));
        emx.push_back(ref_max_reduce(g));
        ev.push_back(ref_var(g, 1));
      }
      const Shape os = out_shape(x.shape(), reduced, false);
      expect_values_reduce(sum(x, {d}), os, es, "sum cols=" + std::to_string(cols));
      expect_values_reduce(amax(x, {d}), os, emx, "amax cols=" + std::to_string(cols));
      expect_values_reduce(var(x, {d}), os, ev, "var cols=" + std::to_string(cols));
    }
  }
}
