// bfloat16 and float16: conversions bit for bit, promotion, factories,
// printing, and ops computing in float32 with one rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "dtensor/tensor.h"
#include "tensor/convert_half.h"

namespace dtensor {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, written the long way: the two bfloat16 neighbours
// of f and the one closer (the even one on a tie).
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = bits(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  const uint32_t rest = u & 0xFFFF;
  if (rest < 0x8000) return lo;
  if (rest > 0x8000) return static_cast<uint16_t>(lo + 1);
  return (lo & 1) ? static_cast<uint16_t>(lo + 1) : lo;
}

TEST(HalfTest, BFloat16RoundsToNearestEvenOnEdgeAndRandomBits) {
  std::vector<uint32_t> cases = {0x00000000, 0x80000000, 0x3F800000, 0x3F808000, 0x3F818000,
                                 0x3F80FFFF, 0x7F7FFFFF, 0x7F7F8000, 0x7F800000, 0xFF800000,
                                 0x00000001, 0x00008000, 0x00018000, 0x807FFFFF};
  std::mt19937 gen(7);
  for (int i = 0; i < 1000000; ++i) cases.push_back(gen());
  for (uint32_t u : cases) {
    const float f = from_bits(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(BFloat16(f).bits, bf16_reference(f)) << std::hex << u;
    // Widening is exact, so a round trip through float32 changes nothing.
    const BFloat16 b = BFloat16::from_bits(static_cast<uint16_t>(u >> 16));
    if (!std::isnan(static_cast<float>(b))) {
      ASSERT_EQ(BFloat16(static_cast<float>(b)).bits, b.bits) << std::hex << u;
    }
  }
  // 0x7F7F8000 ties between the largest finite bfloat16 (odd) and infinity.
  EXPECT_EQ(BFloat16(from_bits(0x7F7F8000)).bits, 0x7F80);
  EXPECT_EQ(BFloat16(from_bits(0x3F808000)).bits, 0x3F80);  // tie to even (down)
  EXPECT_EQ(BFloat16(from_bits(0x3F818000)).bits, 0x3F82);  // tie to even (up)
}

TEST(HalfTest, NaNStaysNaN) {
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FFFFFFFu, 0xFF800001u}) {
    EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(from_bits(u))))) << std::hex << u;
    EXPECT_TRUE(std::isnan(static_cast<float>(Float16(from_bits(u))))) << std::hex << u;
  }
}

TEST(HalfTest, Float16IsIEEEBinary16) {
  // Every float16 widens and narrows back to itself; the midpoint between
  // two neighbours rounds to the even one, a hair above it to the upper.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const Float16 x = Float16::from_bits(static_cast<uint16_t>(h));
    const float f = x;
    if (std::isnan(f)) continue;
    ASSERT_EQ(Float16(f).bits, h) << std::hex << h;
    if ((h & 0x7FFF) >= 0x7BFF) continue;  // the largest finite and beyond
    const float g = Float16::from_bits(static_cast<uint16_t>(h + 1));
    if (std::signbit(f) != std::signbit(g) || (h & 0x7FFF) == 0) continue;
    const double mid = (static_cast<double>(f) + g) / 2;
    const float fm = static_cast<float>(mid);  // exact: 11 + 1 bits
    ASSERT_EQ(static_cast<double>(fm), mid);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(Float16(fm).bits, even) << std::hex << h;
    ASSERT_EQ(Float16(std::nextafter(fm, g)).bits, h + 1) << std::hex << h;
  }
  EXPECT_EQ(Float16(65520.0f).bits, 0x7C00);  // rounds to infinity
  EXPECT_EQ(Float16(65519.0f).bits, 0x7BFF);
  EXPECT_EQ(static_cast<float>(Float16::from_bits(0x0001)), std::ldexp(1.0f, -24));
}

TEST(HalfTest, DoubleAndIntegersConvertThroughFloat32) {
  // 1 + 2^-8 + 2^-30: to float32 it becomes 1 + 2^-8 exactly (a bfloat16
  // tie), which rounds to even (1.0); rounded once from the double it would
  // have gone up.
  const double d = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(BFloat16(d).bits, 0x3F80);
  EXPECT_EQ(BFloat16(int64_t{257}).bits, BFloat16(257.0f).bits);
  Tensor t = Tensor::from_vector(std::vector<double>{d}).to(DType::BFloat16);
  EXPECT_EQ(t.item<float>(), 1.0f);
}

TEST(HalfTest, PromotionIsPyTorchs) {
  const DType bf = DType::BFloat16, h = DType::Float16;
  EXPECT_EQ(promote_types(bf, DType::Float32), DType::Float32);
  EXPECT_EQ(promote_types(h, DType::Float64), DType::Float64);
  EXPECT_EQ(promote_types(bf, h), DType::Float32);
  EXPECT_EQ(promote_types(h, bf), DType::Float32);
  EXPECT_EQ(promote_types(DType::Int64, bf), bf);
  EXPECT_EQ(promote_types(DType::Bool, h), h);
  EXPECT_EQ(promote_types(bf, bf), bf);
  // A Python-style scalar does not promote a floating tensor.
  EXPECT_EQ(Scalar(2.5).result_type(bf), bf);
  EXPECT_EQ(Scalar(2).result_type(h), h);
  Tensor x = Tensor::ones({3}, bf);
  EXPECT_EQ(add(x, 2.5).dtype(), bf);
  EXPECT_EQ(add(x, Tensor::ones({3})).dtype(), DType::Float32);
  EXPECT_EQ(add(x, Tensor::ones({3}, h)).dtype(), DType::Float32);
  EXPECT_EQ(add(x, Tensor::ones({3}, DType::Int64)).dtype(), bf);
}

TEST(HalfTest, NamesParseAndPrint) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BFloat16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BFloat16);
  EXPECT_EQ(parse_dtype("half"), DType::Float16);
  EXPECT_EQ(parse_dtype("f16"), DType::Float16);
  EXPECT_STREQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_STREQ(dtype_short_name(DType::Float16), "f16");
  EXPECT_EQ(itemsize(DType::BFloat16), 2u);
  EXPECT_TRUE(is_floating(DType::Float16));
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f, 0.1f, 300.7f}).to(DType::BFloat16);
  EXPECT_EQ(to_string(t), "tensor([1, 0.1001, 300], shape=[3], dtype=bfloat16)");
}

TEST(HalfTest, FactoriesAndConversions) {
  for (DType d : {DType::BFloat16, DType::Float16}) {
    Tensor z = Tensor::zeros({2, 3}, d);
    EXPECT_EQ(z.dtype(), d);
    EXPECT_EQ(z.nbytes(), 12u);
    EXPECT_EQ(Tensor::full({4}, 0.1, d).to(DType::Float32).to_vector<float>()[0],
              d == DType::BFloat16 ? static_cast<float>(BFloat16(0.1f))
                                   : static_cast<float>(Float16(0.1f)));
    Tensor a = Tensor::arange(0, 300, 1, d).to(DType::Float64);
    // Integers beyond 256 (bfloat16) and 2048 (float16) round to even.
    EXPECT_EQ(a.to_vector<double>()[257], d == DType::BFloat16 ? 256.0 : 257.0);
    Tensor r = Tensor::randn({1000}, /*seed=*/3, /*offset=*/0, d);
    EXPECT_EQ(r.dtype(), d);
    // to() and back, bool and int64 through float32.
    Tensor i = Tensor::from_vector(std::vector<int64_t>{-3, 0, 7}).to(d);
    EXPECT_EQ(i.to(DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{-3, 0, 7}));
    EXPECT_EQ(i.to(DType::Bool).to_vector<bool>(), (std::vector<bool>{true, false, true}));
    EXPECT_EQ(i.to(DType::BFloat16).to(DType::Float16).to(DType::Float32).to_vector<float>(),
              (std::vector<float>{-3, 0, 7}));
  }
}

// Each elementwise op on 16-bit inputs equals the float32 op on the widened
// inputs, rounded once.
TEST(HalfTest, ElementwiseComputesInFloat32AndRoundsOnce) {
  Tensor a = Tensor::randn({257}, 1, 0), b = Tensor::randn({257}, 2, 0);
  for (DType d : {DType::BFloat16, DType::Float16}) {
    Tensor ah = a.to(d), bh = b.to(d);
    Tensor af = ah.to(DType::Float32), bf = bh.to(DType::Float32);
    auto same = [&](const Tensor& got, const Tensor& want, const char* what) {
      ASSERT_EQ(got.dtype(), want.dtype()) << what;
      ASSERT_TRUE(equal(got, want)) << what << " " << d;
    };
    same(add(ah, bh), add(af, bf).to(d), "add");
    same(mul(ah, bh), mul(af, bf).to(d), "mul");
    same(div(ah, bh), div(af, bf).to(d), "div");
    same(exp(ah), exp(af).to(d), "exp");
    same(mul(ah, 0.3), mul(af, 0.3).to(d), "mul scalar");
    same(lt(ah, bh), lt(af, bf), "lt");
    Tensor c = ah.clone();
    c.mul_(bh);
    same(c, mul(af, bf).to(d), "mul_");
  }
}

}  // namespace
}  // namespace dtensor

namespace dtensor {
namespace {

// The F16C conversions (convert_half.h) give the scalar conversion's bits:
// every float16 widened, and float32 patterns (ties, subnormals, out of
// range) narrowed; NaN by class.
TEST(HalfTest, F16cRunsMatchTheScalarConversion) {
  std::vector<float> wide(0x10000);
  std::vector<Float16> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = Float16::from_bits(static_cast<uint16_t>(h));
  detail::half_to_float(all.data(), wide.data(), 0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float want = static_cast<float>(all[h]);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(wide[h])) << std::hex << h;
    else ASSERT_EQ(bits(wide[h]), bits(want)) << std::hex << h;
  }
  std::vector<float> src;
  std::mt19937 gen(11);
  for (int i = 0; i < 200000; ++i) src.push_back(from_bits(gen()));
  for (uint32_t h = 0; h + 1 < 0x7C00; h += 7) {  // midpoints of neighbours: ties
    const double mid = (static_cast<double>(static_cast<float>(Float16::from_bits(h))) +
                        static_cast<float>(Float16::from_bits(h + 1))) / 2;
    src.push_back(static_cast<float>(mid));
  }
  std::vector<Float16> got(src.size());
  detail::float_to_half(src.data(), got.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    if (std::isnan(src[i])) ASSERT_TRUE(std::isnan(static_cast<float>(got[i])));
    else ASSERT_EQ(got[i].bits, Float16(src[i]).bits) << std::hex << bits(src[i]);
  }
  // And through Tensor::to, strided and contiguous.
  Tensor t = Tensor::from_vector(std::vector<float>(src.begin(), src.begin() + 1000), Shape{10, 100});
  Tensor a = t.to(DType::Float16), b = t.transpose(0, 1).to(DType::Float16).transpose(0, 1);
  const Tensor bc = b.contiguous();
  EXPECT_EQ(std::memcmp(a.raw_data(), bc.raw_data(), a.nbytes()), 0);
}

}  // namespace
}  // namespace dtensor
