// The two 16-bit floating types: BFloat16 (DType::BFloat16) and Float16
// (DType::Float16), each one word of storage and a conversion to and from
// float32.
//
// They are storage types, not arithmetic types: every op on a bfloat16 or
// float16 tensor computes in float32 and rounds its result once, as PyTorch
// does on the CPU (docs/mixed_precision.md). So these classes convert and
// compare but have no operator+; code that needs the value takes float(x).
//
// Rounding, bit for bit as PyTorch:
// - float32 -> bfloat16 rounds to nearest, ties to even; any NaN becomes the
//   quiet NaN 0x7FC0 (c10::BFloat16's round_to_nearest_even; PyTorch's
//   vectorised conversion gives 0xFFFF, so compare NaNs by class).
// - float32 -> float16 is IEEE 754 binary16 round to nearest even (GCC's
//   _Float16: F16C's vcvtps2ph where the code is compiled for it, libgcc's
//   __truncsfhf2 elsewhere; both give the same bits).
// - float64 and int64 convert through float32 first, as c10 does
//   (static_cast<c10::BFloat16>(double) is BFloat16(float(double))): a double
//   can round twice. float32 -> float64 and back is exact for both types.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dtensor {

namespace half_detail {
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace half_detail

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  // Round to nearest even; NaN -> quiet NaN.
  explicit BFloat16(float f) : bits(round(f)) {}
  // Through float32, as c10 (see above).
  template <class T,
            std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, float>, int> = 0>
  explicit BFloat16(T v) : BFloat16(static_cast<float>(v)) {}

  static BFloat16 from_bits(uint16_t b) {
    BFloat16 x;
    x.bits = b;
    return x;
  }
  static uint16_t round(float f) {
    const uint32_t u = half_detail::bits_of(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const { return half_detail::float_of(static_cast<uint32_t>(bits) << 16); }
};

struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  explicit Float16(float f) {
    const _Float16 h = static_cast<_Float16>(f);
    std::memcpy(&bits, &h, 2);
  }
  template <class T,
            std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, float>, int> = 0>
  explicit Float16(T v) : Float16(static_cast<float>(v)) {}

  static Float16 from_bits(uint16_t b) {
    Float16 x;
    x.bits = b;
    return x;
  }
  operator float() const {
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    return static_cast<float>(h);
  }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

// The 16-bit floating types, for `if constexpr`.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

}  // namespace dtensor
