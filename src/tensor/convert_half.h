// Internal: float32 <-> float16 and bfloat16 over contiguous runs, in the
// widest vectors the CPU has (picked at run time: the library is built for
// baseline x86-64). float16 uses F16C's conversions (on the baseline each
// is a call to libgcc's __truncsfhf2 / __extendhfsf2, ~10x slower); both
// give IEEE 754 binary16 round to nearest even, the same bits
// (tests/tensor/half_test.cc compares them over every float16 and random
// float32 bit patterns). bfloat16 runs BFloat16's own integer rounding in
// AVX2 or AVX-512 registers (not AVX-512 BF16's vcvtneps2bf16, which
// flushes denormals to zero and keeps a NaN's payload: other bits than
// BFloat16(float)). Tensor::copy_ uses these for its contiguous runs, the
// elementwise ops for their 16-bit blocks.
#pragma once

#include <cstdint>

#include "dtensor/half.h"

namespace dtensor::detail {

void float_to_half(const float* src, Float16* dst, int64_t n);
void half_to_float(const Float16* src, float* dst, int64_t n);
void float_to_half(const float* src, BFloat16* dst, int64_t n);
void half_to_float(const BFloat16* src, float* dst, int64_t n);
// Whether the F16C path runs (for tests; DTENSOR_SIMD=baseline turns it off).
bool f16c_enabled();

}  // namespace dtensor::detail
