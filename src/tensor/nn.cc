// Neural-network math: softmax, log_softmax, layer_norm, rms_norm, nll_loss,
// cross_entropy.
//
// Each op makes its input contiguous and runs a tight loop per row (or, for
// softmax over a non-last dim, per block of columns), so the hot loops see
// unit strides and vectorise. Row statistics accumulate in double.
//
// Rows (column blocks for softmax over a non-last dim) are independent, so
// they run through parallel_for in fixed chunks, and each chunk's loops
// through simd_dispatch (AVX2 / AVX-512 copies in a portable build). Every
// row's arithmetic is the same whatever the thread count or SIMD level, so
// are the bits.
// FMA contraction off: the SIMD copies must round like the baseline (simd.h).
#pragma GCC optimize("fp-contract=off")
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dtensor/tensor.h"
#include "common/parallel.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"
#include "tensor/row_math.h"
#include "tensor/simd.h"

namespace dtensor {
namespace {

// Rows per parallel chunk: enough rows of n elements to carry about
// kParallelGrain elements of work.
constexpr int64_t kRowGrainElements = int64_t{1} << 15;
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(n, 1)); }

// Runs body(r) for every row r in [0, rows), in parallel chunks, each
// chunk's loop through simd_dispatch.
template <class Body>
void for_rows(int64_t rows, int64_t n, const Body& body) {
  detail::parallel_for(rows, row_grain(n), [&](int64_t b, int64_t e) {
    detail::simd_dispatch([&] {
      for (int64_t r = b; r < e; ++r) body(r);
    });
  });
}

// ---- exp, row max, row sum: tensor/row_math.h ------------------------------------

using detail::exp_f32_core;
using detail::row_max;
using detail::sum_lanes;

// e[i] = exp(x[i] - m[i * m_step]) where x[i] - m <= 0 or is NaN. m_step is
// 0 for a row (one max) and 1 for columns (a max per column). Flat loops,
// which GCC vectorises whole; folding the sum in as well made it vectorise
// only an 8-wide lane body, with an alias check and constant reloads every
// 8 elements.
template <class T>
void exp_shifted(const T* x, T* e, int64_t n, const T* m, int64_t m_step) {
  if constexpr (std::is_same_v<T, float>) {
    constexpr float kLow = -110.0f;
    if (m_step == 0) {
      const float mv = *m;
      for (int64_t i = 0; i < n; ++i) {
        const float d = x[i] - mv;
        e[i] = d < kLow ? kLow : d;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float d = x[i] - m[i];
        e[i] = d < kLow ? kLow : d;
      }
    }
    for (int64_t i = 0; i < n; ++i) e[i] = exp_f32_core(e[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) e[i] = std::exp(x[i] - m[i * m_step]);
  }
}

// ---- row kernels -------------------------------------------------------------------

template <class T>
void softmax_row(const T* x, T* y, int64_t n) {
  const T m = row_max(x, n);
  exp_shifted(x, y, n, &m, 0);
  const T inv = static_cast<T>(1.0 / sum_lanes(y, n));
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// log(sum(exp(x - m))) for a row with max m; scratch holds n elements.
template <class T>
T row_log_sum_exp_shifted(const T* x, T* scratch, int64_t n, T m) {
  exp_shifted(x, scratch, n, &m, 0);
  return static_cast<T>(std::log(sum_lanes(scratch, n)));
}

// The output row doubles as the scratch for the exps.
template <class T>
void log_softmax_row(const T* x, T* y, int64_t n) {
  const T m = row_max(x, n);
  const T lse = row_log_sum_exp_shifted(x, y, n, m);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - lse;
}

// Softmax over the middle dim of a contiguous (outer, len, inner) block with
// inner > 1: the per-column max and sum live in small buffers and every pass
// walks the block row by row, so memory is read sequentially without a
// transpose.
// Columns [j0, j1) of one (len, inner) block, rows `inner` apart.
template <class T, bool kLog>
void softmax_columns(const T* xb, T* yb, int64_t len, int64_t inner, int64_t j0, int64_t j1) {
  const int64_t w = j1 - j0;
  std::vector<T> mx(static_cast<size_t>(w), -std::numeric_limits<T>::infinity());
  std::vector<double> sum(static_cast<size_t>(w), 0.0);
  std::vector<T> fix(static_cast<size_t>(w));
  xb += j0;
  yb += j0;
  for (int64_t k = 0; k < len; ++k) {
    const T* row = xb + k * inner;
    for (int64_t j = 0; j < w; ++j) mx[j] = row[j] > mx[j] ? row[j] : mx[j];
  }
  // The exps go to the output (overwritten by the last pass for log).
  for (int64_t k = 0; k < len; ++k) {
    const T* row = xb + k * inner;
    T* out = yb + k * inner;
    exp_shifted(row, out, w, mx.data(), 1);
    for (int64_t j = 0; j < w; ++j) sum[j] += static_cast<double>(out[j]);
  }
  for (int64_t j = 0; j < w; ++j)
    fix[j] = kLog ? static_cast<T>(std::log(sum[j])) : static_cast<T>(1.0 / sum[j]);
  for (int64_t k = 0; k < len; ++k) {
    const T* row = xb + k * inner;
    T* out = yb + k * inner;
    if constexpr (kLog) {
      for (int64_t j = 0; j < w; ++j) out[j] = (row[j] - mx[j]) - fix[j];
    } else {
      for (int64_t j = 0; j < w; ++j) out[j] *= fix[j];
    }
  }
}

// Columns per unit of softmax_columns' parallel split: 1 KiB of float row
// per unit keeps every pass reading whole cache lines.
constexpr int64_t kColumnBlock = 256;

template <bool kLog>
Tensor softmax_impl(const Tensor& x, int64_t dim, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  DT_CHECK(is_floating(x.dtype()), op,
           ": input dtype must be floating point (float32 or float64), got ",
           x.dtype(), "; convert the input with .to(DType::Float32) first");
  const int64_t ndim = x.dim();
  const int64_t d = wrap_dim(dim, std::max<int64_t>(ndim, 1), op);
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return y;
  int64_t outer = 1, inner = 1;
  const int64_t len = ndim == 0 ? 1 : x.shape()[d];
  for (int64_t k = 0; k < d && k < ndim; ++k) outer *= x.shape()[k];
  for (int64_t k = d + 1; k < ndim; ++k) inner *= x.shape()[k];
  detail::dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = xc.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    if (inner == 1) {
      for_rows(outer, len, [&](int64_t o) {
        if constexpr (kLog) log_softmax_row(xp + o * len, yp + o * len, len);
        else softmax_row(xp + o * len, yp + o * len, len);
      });
    } else {
      // Softmax over the middle dim of (outer, len, inner) blocks: units of
      // kColumnBlock columns of one block, each computed on its own.
      const int64_t per_block = (inner + kColumnBlock - 1) / kColumnBlock;
      detail::parallel_for(
          outer * per_block, row_grain(len * kColumnBlock), [&](int64_t b, int64_t e) {
            detail::simd_dispatch([&] {
              for (int64_t u = b; u < e; ++u) {
                const int64_t o = u / per_block, j0 = (u % per_block) * kColumnBlock;
                softmax_columns<T, kLog>(xp + o * len * inner, yp + o * len * inner, len, inner,
                                         j0, std::min(inner, j0 + kColumnBlock));
              }
            });
          });
    }
  });
  return y;
}

// ---- normalisation -----------------------------------------------------------------

// Checks that normalized_shape is the tail of x's shape and that weight/bias
// (when given) have exactly that shape; returns the row length.
int64_t check_norm_shapes(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                          const Tensor& bias, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  DT_CHECK(is_floating(x.dtype()), op,
           ": input dtype must be floating point (float32 or float64), got ",
           x.dtype());
  const size_t k = normalized_shape.size();
  DT_CHECK(k >= 1, op, ": normalized_shape must have at least one dim, got ", normalized_shape);
  bool ok = k <= x.shape().size();
  for (size_t i = 0; ok && i < k; ++i)
    ok = normalized_shape[i] == x.shape()[x.shape().size() - k + i];
  DT_CHECK(ok, op, ": normalized_shape ", normalized_shape,
           " does not match the trailing dims of the input of shape ", x.shape(),
           " (expected an input of shape [*, ", to_string(normalized_shape).substr(1), ")");
  DT_CHECK(!weight.defined() || weight.shape() == normalized_shape, op, ": weight of shape ",
           weight.shape(), " does not match normalized_shape ", normalized_shape);
  DT_CHECK(!bias.defined() || bias.shape() == normalized_shape, op, ": bias of shape ",
           bias.shape(), " does not match normalized_shape ", normalized_shape);
  return normalized_shape.product();
}

// weight / bias as contiguous tensors of x's dtype (or undefined).
Tensor as_param(const Tensor& p, DType dtype) {
  return p.defined() ? p.to(dtype).contiguous() : Tensor();
}

// y = (x - mean) * rstd * w + b over one row; the affine variants are
// compile-time so the inner loop stays a straight multiply-add.
template <class T, bool kW, bool kB>
void normalize_row(const T* x, T* y, int64_t n, T centre, T scale, const T* w, const T* b) {
  for (int64_t i = 0; i < n; ++i) {
    T v = (x[i] - centre) * scale;
    if constexpr (kW) v *= w[i];
    if constexpr (kB) v += b[i];
    y[i] = v;
  }
}

template <class T>
void normalize_row_dispatch(const T* x, T* y, int64_t n, T centre, T scale, const T* w,
                            const T* b) {
  if (w && b) normalize_row<T, true, true>(x, y, n, centre, scale, w, b);
  else if (w) normalize_row<T, true, false>(x, y, n, centre, scale, w, b);
  else if (b) normalize_row<T, false, true>(x, y, n, centre, scale, w, b);
  else normalize_row<T, false, false>(x, y, n, centre, scale, w, b);
}

// sum over a contiguous row of f(x) in eight double lanes.
template <class T, class F>
double row_sum(const T* x, int64_t n, F f) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += f(static_cast<double>(x[i + j]));
  for (; i < n; ++i) lanes[0] += f(static_cast<double>(x[i]));
  double s = 0;
  for (int j = 0; j < kLanes; ++j) s += lanes[j];
  return s;
}

// ---- losses ------------------------------------------------------------------------

// (N, C, S) geometry of a loss input, checked against the target.
struct LossGeometry {
  int64_t batch = 1, classes = 1, spatial = 1;
};

LossGeometry check_loss_shapes(const Tensor& input, const Tensor& target, const char* op) {
  DT_CHECK(input.defined() && target.defined(), op, ": input and target must be defined");
  DT_CHECK(is_floating(input.dtype()), op,
           ": input dtype must be floating point (float32 or float64), got ", input.dtype());
  DT_CHECK(target.dtype() == DType::Int64, op, ": target must hold int64 class indices, got ",
           target.dtype());
  LossGeometry g;
  const Shape& is = input.shape();
  if (is.size() == 1) {
    DT_CHECK(target.dim() == 0, op, ": for an input of shape ", is,
             " (a single sample of C classes) the target must be 0-d, got shape ", target.shape());
    g.classes = is[0];
    return g;
  }
  DT_CHECK(is.size() >= 2, op, ": input must have shape (C), (N, C) or (N, C, d1, ...), got ",
           is);
  Shape expected;
  expected.push_back(is[0]);
  for (size_t k = 2; k < is.size(); ++k) expected.push_back(is[k]);
  DT_CHECK(target.shape() == expected, op, ": target of shape ", target.shape(),
           " does not match input of shape ", is, " (expected target shape ", expected, ")");
  g.batch = is[0];
  g.classes = is[1];
  for (size_t k = 2; k < is.size(); ++k) g.spatial *= is[k];
  return g;
}

[[noreturn]] void throw_bad_target(const char* op, int64_t t, int64_t classes,
                                   int64_t ignore_index) {
  DT_THROW(op, ": target ", t, " is out of bounds: expected a class index in [0, ", classes,
           ") or ignore_index (", ignore_index, ")");
}

// Applies the reduction to per-element losses (double) kept in `losses`
// (None) or in `total` / `counted`.
Tensor finish_loss(Reduction reduction, DType dtype, const Shape& target_shape,
                   const std::vector<double>& losses, double total, int64_t counted) {
  if (reduction == Reduction::None) {
    Tensor out = Tensor::empty(target_shape, dtype);
    detail::dispatch_floating(dtype, "nll_loss", [&]<class T>() {
      T* dst = out.data_ptr<T>();
      for (size_t i = 0; i < losses.size(); ++i) dst[i] = static_cast<T>(losses[i]);
    });
    return out;
  }
  // Mean over zero counted targets is 0/0 = NaN, as in PyTorch.
  const double value = reduction == Reduction::Sum ? total : total / static_cast<double>(counted);
  Tensor out = Tensor::empty({}, dtype);
  detail::dispatch_floating(dtype, "nll_loss", [&]<class T>() {
    *out.data_ptr<T>() = static_cast<T>(value);
  });
  return out;
}

Tensor nll_loss_impl(const Tensor& log_probs, const Tensor& target, Reduction reduction,
                     int64_t ignore_index, const char* op) {
  const LossGeometry g = check_loss_shapes(log_probs, target, op);
  const Tensor xc = log_probs.contiguous();
  const Tensor tc = target.contiguous();
  const int64_t* t = tc.data_ptr<int64_t>();
  const int64_t n_targets = g.batch * g.spatial;
  std::vector<double> losses(reduction == Reduction::None ? static_cast<size_t>(n_targets) : 0);
  double total = 0;
  int64_t counted = 0;
  detail::dispatch_floating(log_probs.dtype(), op, [&]<class T>() {
    const T* x = xc.data_ptr<T>();
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t s = 0; s < g.spatial; ++s) {
        const int64_t i = b * g.spatial + s;
        const int64_t cls = t[i];
        double loss = 0;
        if (cls != ignore_index) {
          if (cls < 0 || cls >= g.classes) throw_bad_target(op, cls, g.classes, ignore_index);
          loss = -static_cast<double>(x[(b * g.classes + cls) * g.spatial + s]);
          total += loss;
          ++counted;
        }
        if (reduction == Reduction::None) losses[static_cast<size_t>(i)] = loss;
      }
    }
  });
  return finish_loss(reduction, log_probs.dtype(), target.shape(), losses, total, counted);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (detail::is_half_tensor(x)) return detail::round_to(softmax(detail::widen(x), dim), x.dtype());
  return softmax_impl<false>(x, dim, "softmax");
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(log_softmax(detail::widen(x), dim), x.dtype());
  return softmax_impl<true>(x, dim, "log_softmax");
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  // weight and bias of another floating dtype are used as they are, in
  // float32 or wider: PyTorch's mixed-type layer_norm.
  if (detail::is_half_tensor(x)) {
    return detail::round_to(layer_norm(detail::widen(x), normalized_shape, detail::widen(weight),
                                       detail::widen(bias), eps),
                            x.dtype());
  }
  const int64_t n = check_norm_shapes(x, normalized_shape, weight, bias, "layer_norm");
  const Tensor xc = x.contiguous();
  const Tensor w = as_param(weight, x.dtype());
  const Tensor b = as_param(bias, x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / n;
  detail::dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    const T* wp = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
    const T* xp = xc.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    for_rows(rows, n, [&](int64_t r) {
      const T* xr = xp + r * n;
      // Two passes over a row that sits in cache: mean, then the biased
      // variance as the mean squared deviation (no cancellation).
      const double mu = row_sum(xr, n, [](double v) { return v; }) / static_cast<double>(n);
      const double var =
          row_sum(xr, n, [mu](double v) { return (v - mu) * (v - mu); }) / static_cast<double>(n);
      const double rstd = 1.0 / std::sqrt(var + eps);
      normalize_row_dispatch(xr, yp + r * n, n, static_cast<T>(mu),
                             static_cast<T>(rstd), wp, bp);
    });
  });
  return y;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  // The default eps of a 16-bit input is float32's, as PyTorch's (that of
  // its compute type, not torch.finfo(bfloat16).eps).
  if (detail::is_half_tensor(x)) {
    return detail::round_to(
        rms_norm(detail::widen(x), normalized_shape, detail::widen(weight), eps), x.dtype());
  }
  const int64_t n = check_norm_shapes(x, normalized_shape, weight, Tensor(), "rms_norm");
  const Tensor xc = x.contiguous();
  const Tensor w = as_param(weight, x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / n;
  detail::dispatch_floating(x.dtype(), "rms_norm", [&]<class T>() {
    const double e = eps ? *eps : static_cast<double>(std::numeric_limits<T>::epsilon());
    const T* wp = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* xp = xc.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    for_rows(rows, n, [&](int64_t r) {
      const T* xr = xp + r * n;
      const double ms = row_sum(xr, n, [](double v) { return v * v; }) / static_cast<double>(n);
      const double scale = 1.0 / std::sqrt(ms + e);
      normalize_row_dispatch(xr, yp + r * n, n, T(0), static_cast<T>(scale), wp,
                             static_cast<const T*>(nullptr));
    });
  });
  return y;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  if (detail::is_half_tensor(log_probs)) {
    return detail::round_to(nll_loss(detail::widen(log_probs), target, reduction, ignore_index),
                            log_probs.dtype());
  }
  return nll_loss_impl(log_probs, target, reduction, ignore_index, "nll_loss");
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  if (detail::is_half_tensor(logits)) {
    return detail::round_to(cross_entropy(detail::widen(logits), target, reduction, ignore_index),
                            logits.dtype());
  }
  const LossGeometry g = check_loss_shapes(logits, target, "cross_entropy");
  if (g.spatial != 1 || g.classes == 0) {
    return nll_loss_impl(log_softmax(logits, logits.dim() == 1 ? 0 : 1), target, reduction,
                         ignore_index, "cross_entropy");
  }
  // (N, C) / (C): fused per row, so the (N, C) log-probabilities are never
  // written out (for a large vocabulary that is the bulk of the memory
  // traffic). Same arithmetic as log_softmax_row, so the results agree with
  // the unfused composition.
  const Tensor xc = logits.contiguous();
  const Tensor tc = target.contiguous();
  const int64_t* t = tc.data_ptr<int64_t>();
  // Rows in parallel chunks, each row's loss kept; the total then adds them
  // in row order, as the one-thread loop did. A bad target throws from its
  // chunk, and parallel_for rethrows the lowest chunk's error: the first
  // bad target, whatever the threads.
  std::vector<double> losses(static_cast<size_t>(g.batch), 0.0);
  std::vector<char> used(static_cast<size_t>(g.batch), 0);
  detail::dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    const T* xp = xc.data_ptr<T>();
    detail::parallel_for(g.batch, row_grain(g.classes), [&](int64_t b0, int64_t b1) {
      std::vector<T> scratch(static_cast<size_t>(g.classes));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t cls = t[b];
        if (cls == ignore_index) continue;
        if (cls < 0 || cls >= g.classes)
          throw_bad_target("cross_entropy", cls, g.classes, ignore_index);
      }
      detail::simd_dispatch([&] {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t cls = t[b];
          if (cls == ignore_index) continue;
          const T* row = xp + b * g.classes;
          const T m = row_max(row, g.classes);
          const T lse = row_log_sum_exp_shifted(row, scratch.data(), g.classes, m);
          losses[static_cast<size_t>(b)] = -static_cast<double>((row[cls] - m) - lse);
          used[static_cast<size_t>(b)] = 1;
        }
      });
    });
  });
  double total = 0;
  int64_t counted = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    if (!used[static_cast<size_t>(b)]) continue;
    total += losses[static_cast<size_t>(b)];
    ++counted;
  }
  if (reduction != Reduction::None) losses.clear();
  return finish_loss(reduction, logits.dtype(), target.shape(), losses, total, counted);
}

}  // namespace dtensor
