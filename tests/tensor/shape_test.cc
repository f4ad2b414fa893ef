// Tests of the plain shape ops: repeat, tile, unbind, split with sizes, pad,
// new_*, einsum. Expected values are worked out by hand (and agree with
// PyTorch / NumPy: np.pad's "edge" is replicate); einsum is also checked
// against a direct loop on random equations.
#include <gtest/gtest.h>

#include <random>

#include "einsum_reference.h"
#include "test_util.h"

#include "dtensor/tensor.h"

using namespace dtensor;
using dtensor::testing::expect_error;

namespace {

std::vector<int64_t> shape_values(const Tensor& t) { return t.contiguous().to_vector<int64_t>(); }
Tensor iota(const Shape& s) { return Tensor::arange(s.product()).view(s); }

}  // namespace

TEST(ShapeOps, RepeatCopiesBlocks) {
  const Tensor x = iota({2, 3});
  Tensor r = repeat(x, {2, 1});
  EXPECT_EQ(r.shape(), (Shape{4, 3}));
  EXPECT_EQ(shape_values(r), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  r = repeat(x, {1, 2});
  EXPECT_EQ(shape_values(r), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  // New leading dims, and three copies (doubling then a partial copy).
  r = repeat(Tensor::arange(2), {2, 3});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(shape_values(r), (std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
  r = repeat(x, {2, 1, 1});
  EXPECT_EQ(r.shape(), (Shape{2, 2, 3}));
  // A transposed (non-contiguous) input, float and bool dtypes.
  r = repeat(x.t().to(DType::Float32), {1, 2});
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to(DType::Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
  r = repeat(Tensor::from_vector(std::vector<bool>{true, false}), {3});
  EXPECT_EQ(r.to_vector<bool>(), (std::vector<bool>{true, false, true, false, true, false}));
  // Zero repeats, a 0-d input, and the result never aliases the input.
  EXPECT_EQ(repeat(x, {0, 2}).shape(), (Shape{0, 6}));
  EXPECT_EQ(shape_values(repeat(Tensor::scalar(int64_t{7}), {3})), (std::vector<int64_t>{7, 7, 7}));
  Tensor same = repeat(x, {1, 1});
  EXPECT_NE(same.storage(), x.storage());
  EXPECT_EQ(shape_values(same), shape_values(x));
}

TEST(ShapeOps, RepeatErrors) {
  const Tensor x = iota({2, 3});
  expect_error([&] { repeat(x, {2}); }, {"repeat", "can not be smaller", "[2]", "[2, 3]"});
  expect_error([&] { repeat(x, {2, -1}); }, {"repeat", "non-negative", "[2, -1]"});
  expect_error([&] { repeat(x, {int64_t{1} << 62, 4}); }, {"repeat", "overflow"});
}

TEST(ShapeOps, TilePadsRepsWithLeadingOnes) {
  const Tensor x = iota({2, 3});
  EXPECT_EQ(shape_values(tile(x, {2})), shape_values(repeat(x, {1, 2})));
  Tensor t = tile(Tensor::arange(3), {2, 2});
  EXPECT_EQ(t.shape(), (Shape{2, 6}));
  EXPECT_EQ(shape_values(t), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(shape_values(tile(x, {})), shape_values(x));
  expect_error([&] { tile(x, {-2}); }, {"non-negative"});
}

TEST(ShapeOps, UnbindAndSplitWithSizes) {
  const Tensor x = iota({2, 3});
  std::vector<Tensor> u = unbind(x, 1);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(shape_values(u[0]), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(shape_values(u[2]), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(u[1].storage(), x.storage());  // views
  EXPECT_EQ(unbind(x, -2).size(), 2u);
  EXPECT_EQ(unbind(iota({0, 2})).size(), 0u);
  expect_error([&] { unbind(Tensor::scalar(1.0)); }, {"unbind", "no dimensions"});
  expect_error([&] { unbind(x, 2); }, {"unbind", "2"});

  std::vector<Tensor> s = split(Tensor::arange(10), std::vector<int64_t>{3, 0, 7});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(shape_values(s[0]), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(s[1].numel(), 0);
  EXPECT_EQ(shape_values(s[2]).front(), 3);
  s = split(x, std::vector<int64_t>{1, 2}, -1);
  EXPECT_EQ(shape_values(s[1]), (std::vector<int64_t>{1, 2, 4, 5}));
  expect_error([&] { split(x, std::vector<int64_t>{1, 1}, 1); }, {"sum to 2", "size 3"});
  expect_error([&] { split(x, std::vector<int64_t>{4, -1}, 1); }, {"negative size -1"});
}

TEST(ShapeOps, ConstantPad) {
  const Tensor x = iota({2, 3});
  Tensor p = pad(x, {1, 2}, "constant", 9);
  EXPECT_EQ(p.shape(), (Shape{2, 6}));
  EXPECT_EQ(shape_values(p), (std::vector<int64_t>{9, 0, 1, 2, 9, 9, 9, 3, 4, 5, 9, 9}));
  // (0, 0) for the last dim, (1, 0) for the first.
  p = pad(x, {0, 0, 1, 0}, "constant", 9);
  EXPECT_EQ(shape_values(p), (std::vector<int64_t>{9, 9, 9, 0, 1, 2, 3, 4, 5}));
  // Negative pads crop; the default value is 0; dtype kept.
  p = pad(x.to(DType::Float64), {-1, 1});
  EXPECT_EQ(p.dtype(), DType::Float64);
  EXPECT_EQ(shape_values(p.to(DType::Int64)), (std::vector<int64_t>{1, 2, 0, 4, 5, 0}));
  p = pad(x, {-2, -1, 0, 1}, "constant", 9);
  EXPECT_EQ(p.shape(), (Shape{3, 0}));
  p = pad(x, {-2, -1, 0, 0});
  EXPECT_EQ(p.shape(), (Shape{2, 0}));
  EXPECT_EQ(pad(x, {-3, 0}).shape(), (Shape{2, 0}));
  // Cropping past the data and padding beyond it: nothing of x is left.
  p = pad(iota({2, 1}), {-2, 3}, "constant", 7);
  EXPECT_EQ(shape_values(p), (std::vector<int64_t>{7, 7, 7, 7}));
  p = pad(iota({1, 2}), {3, -4}, "constant", 7);
  EXPECT_EQ(shape_values(p), (std::vector<int64_t>{7}));
  // Float value into a float tensor; bool pads with a bool.
  p = pad(Tensor::ones({1, 1}), {1, 0}, "constant", 0.5);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, 1.0f}));
  p = pad(Tensor::from_vector(std::vector<bool>{true}), {1, 1});
  EXPECT_EQ(p.to_vector<bool>(), (std::vector<bool>{false, true, false}));
}

TEST(ShapeOps, ReflectAndReplicatePad) {
  const Tensor row = iota({1, 4}).to(DType::Float32);
  EXPECT_EQ(shape_values(pad(row, {2, 1}, "reflect").to(DType::Int64)),
            (std::vector<int64_t>{2, 1, 0, 1, 2, 3, 2}));
  EXPECT_EQ(shape_values(pad(row, {2, 1}, "replicate").to(DType::Int64)),
            (std::vector<int64_t>{0, 0, 0, 1, 2, 3, 3}));
  // 2-d padding of a (1, 2, 3) input: (1, 1) on the last dim, (1, 0) on dim 1.
  const Tensor img = iota({1, 2, 3});
  Tensor p = pad(img, {1, 1, 1, 0}, "replicate");
  EXPECT_EQ(p.shape(), (Shape{1, 3, 5}));
  EXPECT_EQ(shape_values(p), (std::vector<int64_t>{0, 0, 1, 2, 2, 0, 0, 1, 2, 2, 3, 3, 4, 5, 5}));
  p = pad(img, {1, 1, 1, 0}, "reflect");
  EXPECT_EQ(shape_values(p), (std::vector<int64_t>{4, 3, 4, 5, 4, 1, 0, 1, 2, 1, 4, 3, 4, 5, 4}));
  // Batch mode with an empty batch; zero pads still copy.
  EXPECT_EQ(pad(Tensor::zeros({0, 2, 3}), {1, 1}, "reflect").shape(), (Shape{0, 2, 5}));
  Tensor same = pad(row, {0, 0}, "reflect");
  EXPECT_NE(same.storage(), row.storage());
}

TEST(ShapeOps, PadErrors) {
  const Tensor x = iota({2, 3}).to(DType::Float32);
  expect_error([&] { pad(x, {1}); }, {"pad", "divisible by 2", "1"});
  expect_error([&] { pad(x, {1, 1, 1, 1, 1, 1}); }, {"padding length 6", "dimension 2"});
  expect_error([&] { pad(x, {-2, -2}); }, {"input size 3", "-2", "negative output size",
                                           "dimension 1"});
  expect_error([&] { pad(x, {1, 1}, "circular"); }, {"unsupported padding mode 'circular'"});
  expect_error([&] { pad(x, {1, 1}, "reflect", 0); }, {"doesn't take in value argument"});
  expect_error([&] { pad(x, {3, 0}, "reflect"); }, {"should be less than", "(3, 0)",
                                                    "dimension 1", "[2, 3]"});
  expect_error([&] { pad(x, {-1, 0}, "replicate"); }, {"non-negative", "(-1, 0)"});
  expect_error([&] { pad(Tensor::arange(4).to(DType::Float32), {1, 1}, "reflect"); },
               {"2-d or 3-d", "[4]"});
  expect_error([&] { pad(Tensor::zeros({2, 0}), {1, 1}, "replicate"); }, {"non-zero", "[2, 0]"});
  expect_error([&] { pad(Tensor::zeros({2, 2}, DType::Bool), {1, 1}, "replicate"); },
               {"numeric dtype", "bool"});
  expect_error([&] { pad(x, {int64_t{1} << 62, int64_t{1} << 62}); }, {"overflow"});
}

TEST(ShapeOps, NewFactories) {
  const Tensor x = Tensor::ones({2}, DType::Float64);
  Tensor z = new_zeros(x, {2, 3});
  EXPECT_EQ(z.dtype(), DType::Float64);
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(sum(z).item<double>(), 0.0);
  EXPECT_EQ(sum(new_ones(x, {4})).item<double>(), 4.0);
  Tensor f = new_full(x, {2}, 2.5);
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  // PyTorch's new_full keeps x's dtype: 2.5 into int64 truncates.
  EXPECT_EQ(new_full(Tensor::arange(1), {1}, 2.5).to_vector<int64_t>(), (std::vector<int64_t>{2}));
  EXPECT_EQ(new_zeros(x, {1}, DType::Int64).dtype(), DType::Int64);
  EXPECT_EQ(new_empty(x, {3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(new_empty(x, {3}, DType::Bool).dtype(), DType::Bool);
  expect_error([&] { new_zeros(x, {-1}); }, {"negative"});
}

TEST(ShapeOps, EinsumNamedCases) {
  const Tensor a = iota({2, 3}), b = iota({3, 2}), c = iota({2, 2, 3});
  EXPECT_TRUE(equal(einsum("ij,jk->ik", {a, b}), mm(a, b)));
  EXPECT_TRUE(equal(einsum("ij,jk", {a, b}), mm(a, b)));  // implicit output "ik"
  EXPECT_TRUE(equal(einsum("bij,bjk->bik", {c, iota({2, 3, 4})}), bmm(c, iota({2, 3, 4}))));
  EXPECT_TRUE(equal(einsum("ij->ji", {a}), a.t()));
  EXPECT_TRUE(equal(einsum("ba", {a}), a.t()));  // implicit: alphabetical
  EXPECT_TRUE(equal(einsum("aB", {a}), a.t()));  // upper case first
  EXPECT_EQ(einsum("i,i->", {Tensor::arange(4), Tensor::arange(4)}).item<int64_t>(), 14);
  EXPECT_EQ(shape_values(einsum("i,j->ij", {Tensor::arange(2), Tensor::arange(3)})),
            (std::vector<int64_t>{0, 0, 0, 0, 1, 2}));
  EXPECT_EQ(shape_values(einsum("ij->", {a})), (std::vector<int64_t>{15}));
  EXPECT_EQ(shape_values(einsum("ij->j", {a})), (std::vector<int64_t>{3, 5, 7}));
  // Ellipsis: broadcast batch dims, explicit and implicit.
  EXPECT_TRUE(equal(einsum("...ij,...jk->...ik", {c, b}), matmul(c, b)));
  EXPECT_TRUE(equal(einsum("...ij,jk", {c, b}), matmul(c, b)));
  EXPECT_TRUE(equal(einsum("...j->...", {c}), sum(c, {-1})));
  EXPECT_TRUE(equal(einsum("b...->...", {c}), sum(c, {0})));
  // Size-1 dims broadcast: a contracted one and a batch one.
  EXPECT_EQ(shape_values(einsum("ij,j->i", {a, Tensor::scalar(int64_t{2}).reshape({1})})),
            (std::vector<int64_t>{6, 24}));
  EXPECT_EQ(shape_values(einsum("ij,ij->ij", {a, Tensor::arange(3).view({1, 3})})),
            (std::vector<int64_t>{0, 1, 4, 0, 4, 10}));
  // Three operands, spaces ignored; 0-d operands.
  EXPECT_TRUE(equal(einsum("ij, jk, kl -> il", {a, b, a}), mm(mm(a, b), a)));
  EXPECT_EQ(einsum(",->", {Tensor::scalar(3.0), Tensor::scalar(4.0)}).item<double>(), 12.0);
  EXPECT_EQ(einsum("ij,jk->ik", {iota({2, 0}), iota({0, 3})}).shape(), (Shape{2, 3}));
  EXPECT_EQ(shape_values(einsum("ij,jk->ik", {iota({2, 0}), iota({0, 3})})), std::vector<int64_t>(6, 0));
}

TEST(ShapeOps, EinsumErrors) {
  const Tensor a = iota({2, 3}), b = iota({3, 2});
  expect_error([&] { einsum("ii->i", {iota({2, 2})}); }, {"subscript i is repeated", "diagonal"});
  expect_error([&] { einsum("ij,jk->ik", {a}); }, {"specifies 2 operands but 1 were given"});
  expect_error([&] { einsum("ij->k", {a}); }, {"output subscript k does not appear"});
  expect_error([&] { einsum("ij->ii", {a}); }, {"appears more than once"});
  expect_error([&] { einsum("i1->i", {Tensor::arange(2).view({2, 1})}); }, {"invalid subscript '1'"});
  expect_error([&] { einsum("ijk->i", {a}); }, {"subscripts", "(3)", "dimensions (2)"});
  expect_error([&] { einsum("ij,jk", {a, a}); }, {"subscript j has size 2", "size 3"});
  expect_error([&] { einsum("ij,jk", {a, b.to(DType::Float32)}); }, {"one dtype"});
  expect_error([&] { einsum("i->i", {Tensor::zeros({2}, DType::Bool)}); }, {"bool"});
  expect_error([&] { einsum("..i.->i", {a}); }, {"'.' that is not part of any ellipsis"});
  expect_error([&] { einsum("...i...->i", {a}); }, {"more than one ellipsis"});
  expect_error([&] { einsum("i->i->i", {Tensor::arange(2)}); }, {"invalid subscript '-'"});
}

TEST(ShapeOps, EinsumMatchesLoopsOnRandomEquations) {
  std::mt19937 rng(7);
  const int cases = dtensor::testing::property_cases(400);
  for (int iter = 0; iter < cases; ++iter) {
    const auto r = dtensor::testing::random_einsum(rng);
    std::vector<Tensor> ops;
    for (size_t i = 0; i < r.shapes.size(); ++i)
      ops.push_back(Tensor::randint(-5, 5, r.shapes[i], 100 * iter + i));
    const Tensor want = dtensor::testing::einsum_reference(r.equation, ops);
    const Tensor got = einsum(r.equation, ops);
    ASSERT_EQ(got.dtype(), DType::Int64) << r.equation;
    ASSERT_TRUE(equal(got, want)) << r.equation << "\n" << got << "\n" << want;
    std::vector<Tensor> f64;
    for (const Tensor& t : ops) f64.push_back(t.to(DType::Float64));
    ASSERT_TRUE(equal(einsum(r.equation, f64), want)) << r.equation;
  }
}
