// Counter-based random numbers (Philox4x32-10).
//
// Element i of a tensor made with seed s and offset o is a pure function of
// (s, o + i): the generator has no state to advance, so any shard of a big
// random tensor can be produced on its own and equals the same slice of the
// whole. This is what makes random DTensors layout-invariant.
#include <cmath>
#include <numbers>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"

namespace dtensor {
namespace {

struct Philox4x32 {
  uint32_t x[4];
};

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11): counter = the 64-bit element index, key = the seed.
Philox4x32 philox(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 53 random bits.
double to_unit(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

template <class T, class Gen>
Tensor generate(const char* op, const Shape& shape, DType dtype, uint64_t seed, uint64_t offset,
                Gen gen) {
  checked_bytes(checked_numel(shape, op), itemsize(dtype), op);
  Tensor t = Tensor::empty(shape, dtype);
  T* p = t.data_ptr<T>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(gen(philox(seed, offset + i)));
  return t;
}

}  // namespace

Tensor Tensor::rand(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype) {
  if (is_half(dtype)) {
    // As many random bits as the type has digits (8 for bfloat16, 11 for
    // float16), so that every value is exact and below 1, as PyTorch's.
    const int digits = dtype == DType::BFloat16 ? 8 : 11;
    const float scale = std::ldexp(1.0f, -digits);
    return generate<float>("rand", shape, DType::Float32, seed, offset,
                           [=](const Philox4x32& r) {
                             return static_cast<float>(r.x[0] >> (32 - digits)) * scale;
                           })
        .to(dtype);
  }
  return detail::dispatch_floating(dtype, "rand", [&]<class T>() {
    return generate<T>("rand", shape, dtype, seed, offset, [](const Philox4x32& r) {
      if constexpr (std::is_same_v<T, float>) {
        return static_cast<float>(r.x[0] >> 8) * 0x1.0p-24f;  // exact in float, < 1
      } else {
        return to_unit(r.x[0], r.x[1]);
      }
    });
  });
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype) {
  // The 16-bit floats round the float32 draws (through float32, as c10).
  if (is_half(dtype)) return randn(shape, seed, offset, DType::Float32).to(dtype);
  return detail::dispatch_floating(dtype, "randn", [&]<class T>() {
    return generate<T>("randn", shape, dtype, seed, offset, [](const Philox4x32& r) {
      // Box-Muller on two uniforms from the same counter; u1 in (0, 1].
      const double u1 = 1.0 - to_unit(r.x[0], r.x[1]);
      const double u2 = to_unit(r.x[2], r.x[3]);
      return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    });
  });
}

Tensor Tensor::randint(int64_t low, int64_t high, const Shape& shape, uint64_t seed,
                       uint64_t offset) {
  DT_CHECK(low < high, "randint: expected low < high, got low=", low, " high=", high);
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return generate<int64_t>("randint", shape, DType::Int64, seed, offset, [=](const Philox4x32& r) {
    const uint64_t bits = (static_cast<uint64_t>(r.x[0]) << 32) | r.x[1];
    return static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
  });
}

}  // namespace dtensor
