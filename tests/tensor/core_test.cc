// Tests of the tensor basics: DimVector, dtypes and promotion, creation,
// conversion, copy_, the counter-based generator and printing.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "dtensor/tensor.h"

using namespace dtensor;

TEST(DimVector, BasicsAndLimit) {
  DimVector v{2, 3, 4};
  EXPECT_EQ(v.size(), 3u);
  EXPECT_EQ(v.product(), 24);
  v.insert(1, 7);
  EXPECT_EQ(v, (DimVector{2, 7, 3, 4}));
  v.erase(0);
  EXPECT_EQ(v, (DimVector{7, 3, 4}));
  EXPECT_EQ(to_string(v), "[7, 3, 4]");
  EXPECT_EQ(DimVector{}.product(), 1);
  DimVector full(kMaxDims, 1);
  EXPECT_THROW(full.push_back(1), Error);
}

TEST(DType, NamesParsingAndPromotion) {
  EXPECT_EQ(parse_dtype("f32"), DType::Float32);
  EXPECT_EQ(parse_dtype("float64"), DType::Float64);
  EXPECT_EQ(parse_dtype("i64"), DType::Int64);
  EXPECT_EQ(parse_dtype("bool"), DType::Bool);
  try {
    parse_dtype("f8");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'f8'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(promote_types(DType::Int64, DType::Float32), DType::Float32);
  EXPECT_EQ(promote_types(DType::Float64, DType::Float32), DType::Float64);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int64), DType::Int64);
  EXPECT_EQ(Scalar(2).result_type(DType::Int64), DType::Int64);
  EXPECT_EQ(Scalar(2.5).result_type(DType::Int64), DType::Float32);
  EXPECT_EQ(Scalar(2).result_type(DType::Bool), DType::Int64);
  EXPECT_EQ(Scalar(2.5).result_type(DType::Float64), DType::Float64);
  EXPECT_EQ(Scalar(true).result_type(DType::Float32), DType::Float32);
}

TEST(Creation, ZerosOnesFullArange) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (int64_t v : Tensor::ones({4}, DType::Int64).to_vector<int64_t>()) EXPECT_EQ(v, 1);
  for (double v : Tensor::full({3}, 2.5, DType::Float64).to_vector<double>()) EXPECT_EQ(v, 2.5);
  EXPECT_EQ(Tensor::arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(1, 2, 0.25, DType::Float32).to_vector<float>(),
            (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(Tensor::arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(Tensor::arange(3, 3).numel(), 0);
  EXPECT_THROW(Tensor::arange(0, 3, 0), Error);
  Tensor s = Tensor::scalar(3);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), DType::Int64);
  EXPECT_EQ(s.item<int64_t>(), 3);
  EXPECT_EQ(Tensor::scalar(1.5).dtype(), DType::Float32);
  EXPECT_EQ(Tensor::zeros({0, 3}).numel(), 0);
}

TEST(Creation, FromVectorChecksSize) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Tensor::from_vector(std::vector<bool>{true, false}).dtype(), DType::Bool);
  try {
    Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{2, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 2]"), std::string::npos) << e.what();
  }
}

TEST(Creation, ItemRequiresOneElement) {
  EXPECT_THROW(Tensor::zeros({2}).item(), Error);
  EXPECT_EQ(Tensor::full({1, 1}, 7).item<int64_t>(), 7);
}

TEST(Conversion, ToDTypeTruncatesAndBoolsAreNonZero) {
  Tensor x = Tensor::from_vector(std::vector<double>{-1.7, 0.0, 0.5, 2.9});
  EXPECT_EQ(x.to(DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 0, 2}));
  EXPECT_EQ(x.to(DType::Bool).to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(x.to(DType::Float32).dtype(), DType::Float32);
  // to() with the same dtype shares storage.
  EXPECT_EQ(x.to(DType::Float64).storage(), x.storage());
}

TEST(Copy, BroadcastsIntoNonContiguousDestination) {
  Tensor base = Tensor::zeros({3, 4}, DType::Int64);
  Tensor dst = base.t();  // (4, 3), non-contiguous
  Tensor row = Tensor::arange(3);
  dst.copy_(row);  // every row of dst is [0, 1, 2] => every column of base
  std::vector<int64_t> got = base.to_vector<int64_t>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(got[i * 4 + j], i);
  EXPECT_THROW(dst.copy_(Tensor::zeros({4})), Error);
  EXPECT_THROW(Tensor::zeros({3}).copy_(Tensor::zeros({2, 3})), Error);
}

TEST(Copy, CloneIsIndependentAndContiguous) {
  Tensor x = Tensor::arange(6).view({2, 3});
  Tensor c = x.t().clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  x.fill_(9);
  EXPECT_EQ(c.to_vector<int64_t>()[1], 3);
}

TEST(Fill, FillsOnlyTheView) {
  Tensor x = Tensor::zeros({4, 4});
  x.narrow(0, 1, 2).slice(1, 0, 4, 2).fill_(5.0);
  std::vector<float> v = x.to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(v[i * 4 + j], (i == 1 || i == 2) && j % 2 == 0 ? 5.0f : 0.0f) << i << "," << j;
}

TEST(Random, CounterBasedAndShapeIndependent) {
  Tensor a = Tensor::randn({6, 5}, 42);
  Tensor b = Tensor::randn({30}, 42);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  // Element i with offset o equals element o + i of the whole.
  Tensor tail = Tensor::randn({10}, 42, /*offset=*/20);
  std::vector<float> whole = b.to_vector<float>();
  std::vector<float> t = tail.to_vector<float>();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(t[i], whole[20 + i]);
  EXPECT_NE(Tensor::randn({30}, 43).to_vector<float>(), whole);
}

TEST(Random, UniformRangeAndMoments) {
  const int64_t n = 200000;
  std::vector<double> u = Tensor::rand({n}, 7, 0, DType::Float64).to_vector<double>();
  double mean = 0, m2 = 0;
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    mean += v;
  }
  mean /= n;
  EXPECT_NEAR(mean, 0.5, 0.005);
  std::vector<float> z = Tensor::randn({n}, 8).to_vector<float>();
  double zm = 0;
  for (float v : z) zm += v;
  zm /= n;
  for (float v : z) m2 += (v - zm) * (v - zm);
  EXPECT_NEAR(zm, 0.0, 0.01);
  EXPECT_NEAR(m2 / n, 1.0, 0.02);
  for (float v : Tensor::rand({1000}, 9).to_vector<float>()) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
  }
}

TEST(Random, RandintInRangeAndCoversIt) {
  std::vector<int64_t> r = Tensor::randint(-3, 4, {5000}, 1).to_vector<int64_t>();
  std::set<int64_t> seen(r.begin(), r.end());
  EXPECT_EQ(seen, (std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3}));
  EXPECT_THROW(Tensor::randint(2, 2, {1}, 0), Error);
  EXPECT_THROW(Tensor::rand({2}, 0, 0, DType::Int64), Error);
}

TEST(Printing, SmallAndSummarized) {
  Tensor x = Tensor::arange(4).view({2, 2});
  EXPECT_EQ(to_string(x), "tensor([[0, 1],\n        [2, 3]], shape=[2, 2], dtype=int64)");
  EXPECT_EQ(to_string(Tensor::from_vector(std::vector<bool>{true, false})),
            "tensor([True, False], shape=[2], dtype=bool)");
  EXPECT_EQ(to_string(Tensor::scalar(1.5)), "tensor(1.5, shape=[], dtype=float32)");
  std::string big = to_string(Tensor::arange(5000));
  EXPECT_NE(big.find("[0, 1, 2, ..., 4997, 4998, 4999]"), std::string::npos) << big;
  EXPECT_EQ(to_string(Tensor()), "tensor(undefined)");
}

TEST(Errors, CarryTheCheckLocation) {
  try {
    Tensor::zeros({2}).size(3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 3 out of range"), std::string::npos) << e.what();
    EXPECT_NE(e.where().find(".cc:"), std::string::npos);
  }
}
