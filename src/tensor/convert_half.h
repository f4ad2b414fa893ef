// Internal: float32 <-> float16 over contiguous runs, with the CPU's F16C
// instructions where it has them (picked at run time: the library is built
// for baseline x86-64, where each conversion is a call to libgcc's
// __truncsfhf2 / __extendhfsf2, ~10x slower). Both give IEEE 754 binary16
// round to nearest even, the same bits (tests/tensor/half_test.cc compares
// them over every float16 and random float32 bit patterns); Tensor::copy_
// uses these for its contiguous float32/float16 runs.
#pragma once

#include <cstdint>

#include "dtensor/half.h"

namespace dtensor::detail {

void float_to_half(const float* src, Float16* dst, int64_t n);
void half_to_float(const Float16* src, float* dst, int64_t n);
// Whether the F16C path runs (for tests; DTENSOR_SIMD=baseline turns it off).
bool f16c_enabled();

}  // namespace dtensor::detail
