// Internal: the per-shard loops of vocab_parallel_cross_entropy (layers.cc).
//
// A shard of the logits is a contiguous (rows, n) block whose column j is
// global class offset + j; target holds the global class of each row (or
// ignore_index). The cross-rank steps live in layers.cc as DTensor
// redistributions of small tensors of the targets' shape; these loops are
// all that touches the (rows, n) data.
//
// Rows are independent and run through parallel_for in fixed chunks, each
// chunk's loop through simd_dispatch: a row's arithmetic is the same at any
// thread count or SIMD level, so are the bits.
#pragma once

#include <cstdint>

namespace dtensor::detail {

// One pass over each row: max[r] = the row's max (-inf when n == 0),
// sum[r] = sum_j exp(x[r, j] - max[r]) accumulated in double, and
// picked[r] = x[r, target[r] - offset] when this shard holds the target's
// class and target[r] != ignore_index, else 0. T is float or double.
template <class T>
void vocab_ce_row_stats(const T* x, int64_t rows, int64_t n, int64_t offset,
                        const int64_t* target, int64_t ignore_index, T* max, double* sum,
                        T* picked);

// grad[r, j] = coefs[r] * (exp(x[r, j] - max[r]) / sum[r] - [offset + j == target[r]]),
// with max and sum the global (over all shards of the row) statistics, and
// rows whose target is ignore_index zero. coefs[r]: the row's share of the
// loss's gradient (its weight, over the mean's divisor).
template <class T>
void vocab_ce_grad(const T* x, int64_t rows, int64_t n, int64_t offset, const int64_t* target,
                   int64_t ignore_index, const T* max, const T* sum, const double* coefs,
                   T* grad);

}  // namespace dtensor::detail
