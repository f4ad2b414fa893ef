// Internal to linalg.cc: matrix products through oneDNN (Debian's
// libdnnl-dev), the only file that includes dnnl.h is onednn_gemm.cc.
//
// Why oneDNN and not OpenBLAS for float32 and 16-bit products: oneDNN picks
// its kernels from the CPU's feature flags (AVX2, AVX-512, AVX-512 BF16,
// AVX-512 FP16, AMX) where OpenBLAS 0.3.21 looks the CPU model up in a table
// and falls back to older kernels on a model it does not know: on an AMD
// Zen 5 it runs its Haswell kernels at half of what the machine does, and
// on some current Intel Xeons its Prescott ones (docs/PERFORMANCE.md,
// "Matrix products through oneDNN"). And oneDNN multiplies bfloat16 with
// the CPU's bf16 dot-product instructions, accumulating in float32.
//
// Every call runs on the calling thread only (linalg.cc splits a large
// product into fixed blocks itself, so the bits do not depend on the thread
// count), row-major, c = alpha op(a) op(b) + beta c; beta == 0 does not read
// c. float64 and matrix-vector products stay with OpenBLAS.
#pragma once

#include "dtensor/half.h"
#include "dtensor/tensor.h"

namespace dtensor::detail {

void onednn_gemm(bool ta, bool tb, int n, int m, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);

// a, b and c in bfloat16: products of two bfloat16 values are exact in
// float32, they accumulate there (with beta times c's values) and the sum
// rounds to bfloat16 once, in the kernel. Only where native_half_gemm.
void onednn_gemm(bool ta, bool tb, int n, int m, int k, float alpha, const BFloat16* a, int lda,
                 const BFloat16* b, int ldb, float beta, BFloat16* c, int ldc);

// Whether oneDNN multiplies `half` with this CPU's own instructions:
// bfloat16 with AVX-512 BF16 (or AMX). Never float16: Debian's oneDNN 2.6
// has no float16 kernels for CPUs (AVX-512 FP16 came with oneDNN 3).
// Where not, a 16-bit product widens its operands to float32 and runs the
// float32 product instead, which beats oneDNN's portable 16-bit kernels.
// Decided once per process; DNNL_MAX_CPU_ISA (oneDNN's own variable, e.g.
// AVX512_CORE) lowers what it sees, which is how the tests take the
// widening path on a CPU that has the instructions.
bool native_half_gemm(DType half);

}  // namespace dtensor::detail
