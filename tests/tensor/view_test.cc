// Tests of views (which must share storage), chunk/split, and joining and
// indexing, checked against index arithmetic on arange tensors.
#include <gtest/gtest.h>

#include "test_util.h"

#include "dtensor/tensor.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {
std::vector<int64_t> view_values(const Tensor& t) { return t.to_vector<int64_t>(); }

}  // namespace

TEST(View, ViewSharesStorageAndInfersMinusOne) {
  Tensor x = Tensor::arange(24);
  Tensor v = x.view({2, -1, 4});
  EXPECT_EQ(v.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(v.storage(), x.storage());
  v.select(0, 1).select(0, 2).fill_(-1);  // elements 20..23
  EXPECT_EQ(view_values(x)[20], -1);
  EXPECT_EQ(view_values(x)[19], 19);
  EXPECT_NE(error_of([&] { x.view({5, -1}); }).find("view: shape"), std::string::npos);
  EXPECT_NE(error_of([&] { x.view({-1, -1}); }).find("only one dim"), std::string::npos);
}

TEST(View, ViewOfNonContiguousWhenStridesAllow) {
  Tensor x = Tensor::arange(24).view({2, 3, 4}).permute({1, 0, 2});  // (3,2,4)
  // Splitting the last (contiguous) dim is a view.
  Tensor v = x.view({3, 2, 2, 2});
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_EQ(view_values(v), view_values(x.contiguous()));
  // Merging the permuted dims is not expressible: view throws, reshape copies.
  EXPECT_THROW(x.view({6, 4}), Error);
  Tensor r = x.reshape({6, 4});
  EXPECT_NE(r.storage(), x.storage());
  EXPECT_EQ(view_values(r), view_values(x.contiguous()));
  // A transposed matrix flattened must copy; the values follow row-major order.
  Tensor t = Tensor::arange(6).view({2, 3}).t();
  EXPECT_EQ(view_values(t.reshape({-1})), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(View, ViewWithSizeOneAndEmptyDims) {
  Tensor x = Tensor::arange(6).view({1, 6, 1});
  EXPECT_EQ(x.view({3, 1, 2}).shape(), (Shape{3, 1, 2}));
  Tensor e = Tensor::zeros({0, 4});
  EXPECT_EQ(e.view({4, 0}).shape(), (Shape{4, 0}));
  EXPECT_EQ(Tensor::scalar(5).view({1, 1}).item<int64_t>(), 5);
}

TEST(View, PermuteTransposeMatchIndexMath) {
  Tensor x = Tensor::arange(24).view({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  ASSERT_EQ(p.shape(), (Shape{4, 2, 3}));
  std::vector<int64_t> v = view_values(p);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(v[(k * 2 + i) * 3 + j], i * 12 + j * 4 + k);
  EXPECT_EQ(view_values(x.transpose(0, -1)), view_values(x.permute({2, 1, 0})));
  EXPECT_NE(error_of([&] { x.permute({0, 0, 1}); }).find("repeated"), std::string::npos);
  EXPECT_NE(error_of([&] { x.permute({0, 1}); }).find("permute"), std::string::npos);
  EXPECT_NE(error_of([&] { x.transpose(0, 3); }).find("dim 3 out of range"), std::string::npos);
  EXPECT_THROW(x.t(), Error);
}

TEST(View, NarrowSliceSelect) {
  Tensor x = Tensor::arange(20).view({4, 5});
  EXPECT_EQ(view_values(x.narrow(1, 1, 2)), (std::vector<int64_t>{1, 2, 6, 7, 11, 12, 16, 17}));
  EXPECT_EQ(view_values(x.slice(1, 0, 5, 2).select(0, -1)), (std::vector<int64_t>{15, 17, 19}));
  EXPECT_EQ(view_values(x.slice(0, -2, 100)), (std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(x.slice(0, 3, 1).shape(), (Shape{0, 5}));
  EXPECT_EQ(view_values(x.select(1, 2)), (std::vector<int64_t>{2, 7, 12, 17}));
  EXPECT_NE(error_of([&] { x.narrow(0, 3, 2); }).find("exceeds dim 0 of size 4"), std::string::npos);
  EXPECT_NE(error_of([&] { x.select(0, 4); }).find("index 4 out of range"), std::string::npos);
  EXPECT_THROW(x.slice(0, 0, 2, 0), Error);
}

TEST(View, SqueezeUnsqueezeFlatten) {
  Tensor x = Tensor::arange(6).view({1, 2, 1, 3});
  EXPECT_EQ(x.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(2).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), x.shape());  // size 2: unchanged
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{1, 2, 1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 1, 2, 1, 3}));
  EXPECT_EQ(x.flatten().shape(), (Shape{6}));
  EXPECT_EQ(x.flatten(1, 2).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(Tensor::scalar(1).flatten().shape(), (Shape{1}));
  EXPECT_THROW(x.unsqueeze(6), Error);
  // unsqueeze of a transposed view stays a view with the right values.
  Tensor t = Tensor::arange(6).view({2, 3}).t().unsqueeze(1);
  EXPECT_EQ(view_values(t), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(View, ExpandBroadcastsWithStrideZero) {
  Tensor x = Tensor::arange(3).view({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.strides()[2], 0);
  std::vector<int64_t> v = view_values(e);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_EQ(v[(b * 3 + i) * 4 + j], i);
  EXPECT_EQ(x.expand({-1, 2}).shape(), (Shape{3, 2}));
  EXPECT_NE(error_of([&] { x.expand({4, 1}); }).find("cannot expand"), std::string::npos);
}

TEST(View, ChunkAlwaysGivesNPiecesWithTrailingEmpty) {
  auto sizes = [](int64_t len, int64_t n) {
    std::vector<int64_t> s;
    for (const Tensor& c : Tensor::arange(len).chunk(n)) s.push_back(c.numel());
    return s;
  };
  EXPECT_EQ(sizes(7, 3), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(sizes(13, 4), (std::vector<int64_t>{4, 4, 4, 1}));
  EXPECT_EQ(sizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(sizes(0, 2), (std::vector<int64_t>{0, 0}));
  std::vector<Tensor> c = Tensor::arange(12).view({3, 4}).chunk(2, 1);
  EXPECT_EQ(view_values(c[1]), (std::vector<int64_t>{2, 3, 6, 7, 10, 11}));
  EXPECT_THROW(Tensor::arange(3).chunk(0), Error);
}

TEST(View, SplitAndSplitWithSizes) {
  std::vector<Tensor> s = Tensor::arange(7).split(3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(view_values(s[2]), (std::vector<int64_t>{6}));
  std::vector<Tensor> w = Tensor::arange(6).split_with_sizes({1, 0, 5});
  EXPECT_EQ(w[1].numel(), 0);
  EXPECT_EQ(view_values(w[2]), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_NE(error_of([&] { Tensor::arange(6).split_with_sizes({1, 2}); }).find("sum to 3"),
            std::string::npos);
}

TEST(Join, CatAlongEachDimAndPromotes) {
  Tensor a = Tensor::arange(6).view({2, 3});
  Tensor b = Tensor::arange(6, 12).view({2, 3});
  EXPECT_EQ(view_values(cat({a, b}, 0)), view_values(Tensor::arange(12)));
  EXPECT_EQ(view_values(cat({a, b}, 1)), (std::vector<int64_t>{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11}));
  Tensor f = cat({a, Tensor::zeros({1, 3})}, 0);
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.shape(), (Shape{3, 3}));
  // 1-d empty tensors are skipped as in PyTorch.
  EXPECT_EQ(cat({Tensor::zeros({0}, DType::Int64), a}, 1).shape(), (Shape{2, 3}));
  // Non-contiguous inputs.
  EXPECT_EQ(view_values(cat({a.t(), b.t()}, 1)), view_values(cat({a, b}, 0).t()));
  EXPECT_NE(error_of([&] { cat({a, Tensor::zeros({2, 2})}, 0); }).find("sizes must match"),
            std::string::npos);
  EXPECT_THROW(cat({}, 0), Error);
  EXPECT_THROW(cat({Tensor::scalar(1), Tensor::scalar(2)}, 0), Error);
}

TEST(Join, StackAddsADim) {
  Tensor a = Tensor::arange(3), b = Tensor::arange(3, 6);
  EXPECT_EQ(stack({a, b}, 0).shape(), (Shape{2, 3}));
  EXPECT_EQ(view_values(stack({a, b}, 1)), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(view_values(stack({a, b}, -1)), view_values(stack({a, b}, 1)));
  EXPECT_NE(error_of([&] { stack({a, Tensor::arange(4)}); }).find("stack: tensor 1"),
            std::string::npos);
}

TEST(Index, IndexSelectAndEmbedding) {
  Tensor x = Tensor::arange(12).view({4, 3});
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{3, 0, -1});
  EXPECT_EQ(view_values(index_select(x, 0, idx)), (std::vector<int64_t>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  EXPECT_EQ(view_values(index_select(x, 1, Tensor::from_vector(std::vector<int64_t>{2, 2}))),
            (std::vector<int64_t>{2, 2, 5, 5, 8, 8, 11, 11}));
  EXPECT_EQ(view_values(index_select(x.t(), 0, Tensor::from_vector(std::vector<int64_t>{1}))),
            (std::vector<int64_t>{1, 4, 7, 10}));
  EXPECT_NE(error_of([&] { index_select(x, 0, Tensor::from_vector(std::vector<int64_t>{4})); })
                .find("index 4 out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { index_select(x, 0, Tensor::zeros({1})); }).find("must be int64"),
            std::string::npos);
  Tensor w = Tensor::randn({10, 4}, 3);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 9, 1, 0, 5, 2}, Shape{2, 3});
  Tensor e = embedding(w, ids);
  ASSERT_EQ(e.shape(), (Shape{2, 3, 4}));
  std::vector<float> ev = e.to_vector<float>(), wv = w.to_vector<float>();
  std::vector<int64_t> iv = view_values(ids);
  for (int i = 0; i < 6; ++i)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(ev[i * 4 + d], wv[iv[i] * 4 + d]);
  EXPECT_THROW(embedding(Tensor::zeros({3}), ids), Error);
}
