// scaled_dot_product_attention on dense tensors, as PyTorch's math backend
// computes it: softmax(q k^T * scale + mask) v, with its backward.
//
// The work goes one (batch..., head) slice at a time: the slice's (L x S)
// scores come from one matmul, are scaled, masked and softmaxed in a single
// pass over each row, and are multiplied by v at once, so the block is still
// in cache for the second product. The plain composition (matmul, mul,
// softmax, matmul) streams the whole [batch, L, S] tensor through memory
// four times. A causal slice goes in blocks of query rows, each seeing only
// the keys up to its last row, so the masked triangle is never computed.
// Slices run in parallel; the arithmetic of a slice does not depend on the
// thread count, so neither do the bits.
//
// Fully masked rows: PyTorch's math backend softmaxes with _safe_softmax
// (since 2.5), which gives 0 for a row whose every score is -inf instead of
// the 0/0 = NaN of a plain softmax, so a padded query gets a zero output
// (and zero gradients). That is matched here. A NaN score still makes its
// row NaN, as there. The row pass runs through simd_dispatch with the
// softmax family's exp (tensor/row_math.h), so every SIMD level gives the
// same bits.
// FMA contraction off: the SIMD copies must round like the baseline (simd.h).
#pragma GCC optimize("fp-contract=off")
#include "tensor/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/parallel.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"
#include "tensor/row_math.h"
#include "tensor/simd.h"

namespace dtensor {
namespace detail {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// All dims but the last two.
Shape batch_dims(const Shape& s) {
  Shape b;
  for (size_t i = 0; i + 2 < s.size(); ++i) b.push_back(s[i]);
  return b;
}

// The numpy broadcast of two batch shapes, or nullopt when they clash.
std::optional<Shape> broadcast_batch(const Shape& a, const Shape& b) {
  const int64_t na = static_cast<int64_t>(a.size()), nb = static_cast<int64_t>(b.size());
  const int64_t n = std::max(na, nb);
  Shape out(static_cast<size_t>(n), 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = i - (n - na) >= 0 ? a[static_cast<size_t>(i - (n - na))] : 1;
    const int64_t y = i - (n - nb) >= 0 ? b[static_cast<size_t>(i - (n - nb))] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[static_cast<size_t>(i)] = x == 1 ? y : x;
  }
  return out;
}

// `x` broadcast to batch + its own last two dims, cut into 2-d slices.
class Slices {
 public:
  // q, k, v or a gradient: [..., rows, cols].
  Slices(const Tensor& x, const Shape& batch) : Slices(x, batch, x.size(-2), x.size(-1)) {}
  // A mask, expanded to the scores' (rows, cols) as well.
  Slices(const Tensor& x, const Shape& batch, int64_t rows, int64_t cols) : batch_(batch) {
    if (!x.defined()) return;
    Shape shape = batch;
    shape.push_back(rows);
    shape.push_back(cols);
    expanded_ = x.expand(shape);
  }
  bool defined() const { return expanded_.defined(); }
  // Slice b, counted row-major over the batch dims.
  Tensor at(int64_t b) const {
    Tensor t = expanded_;
    int64_t idx[kMaxDims] = {};
    for (int64_t d = static_cast<int64_t>(batch_.size()) - 1; d >= 0; --d) {
      idx[d] = b % batch_[static_cast<size_t>(d)];
      b /= batch_[static_cast<size_t>(d)];
    }
    for (size_t d = 0; d < batch_.size(); ++d) t = t.select(0, idx[d]);
    return t;
  }

 private:
  Shape batch_;
  Tensor expanded_;
};

// softmax of one masked row in place: the maximum subtracted, exp through
// the vectorisable float32 polynomial of the softmax family (row_math.h;
// arguments clamped at -110, where exp is already 0, so masked -inf entries
// give 0), the sum in double lanes.
template <class T>
void softmax_row(T* row, int64_t n) {
  const T mx = row_max(row, n);
  if (mx == -std::numeric_limits<T>::infinity()) {
    // Every entry -inf (fully masked: _safe_softmax's zeros), or NaN among them.
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) nan = nan || std::isnan(row[j]);
    std::fill(row, row + n, nan ? std::numeric_limits<T>::quiet_NaN() : T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; ++j) {
      const float d = row[j] - mx;
      row[j] = d < -110.0f ? -110.0f : d;
    }
    for (int64_t j = 0; j < n; ++j) row[j] = exp_f32_core(row[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - mx);
  }
  const T inv = static_cast<T>(1.0 / sum_lanes(row, n));
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
}

// A slice's raw scores (rows x cols, contiguous) become attention
// probabilities in place: scaled, masked (causal: global query row
// q_offset + i sees keys j <= q_offset + i; a bool mask keeps the true
// entries; a float mask is added), then softmaxed. A NaN score makes its
// row NaN (through exp(x - max)), as softmax does.
template <class T>
void probabilities(T* s, int64_t rows, int64_t cols, T scale, const Tensor& mask, bool causal,
                   int64_t q_offset) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const bool bool_mask = mask.defined() && mask.dtype() == DType::Bool;
  const bool float_mask = mask.defined() && !bool_mask;
  const int64_t ms0 = mask.defined() ? mask.stride(0) : 0, ms1 = mask.defined() ? mask.stride(1) : 0;
  const bool* mb = bool_mask ? mask.data_ptr<bool>() : nullptr;
  const T* mf = float_mask ? mask.data_ptr<T>() : nullptr;
  simd_dispatch([&] {
    for (int64_t i = 0; i < rows; ++i) {
      T* row = s + i * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] *= scale;
      if (causal) {
        const int64_t first_masked = std::clamp<int64_t>(q_offset + i + 1, 0, cols);
        for (int64_t j = first_masked; j < cols; ++j) row[j] = kNegInf;
      }
      if (bool_mask) {
        for (int64_t j = 0; j < cols; ++j)
          if (!mb[i * ms0 + j * ms1]) row[j] = kNegInf;
      } else if (float_mask) {
        for (int64_t j = 0; j < cols; ++j) row[j] += mf[i * ms0 + j * ms1];
      }
      softmax_row(row, cols);
    }
  });
}

// grad_S = P * (grad_P - rowsum(grad_P * P)), in place over grad_P.
template <class T>
void softmax_backward(const T* p, T* g, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* pr = p + i * cols;
    T* gr = g + i * cols;
    double dot = 0;
    for (int64_t j = 0; j < cols; ++j) dot += static_cast<double>(gr[j]) * static_cast<double>(pr[j]);
    const T d = static_cast<T>(dot);
    for (int64_t j = 0; j < cols; ++j) gr[j] = pr[j] * (gr[j] - d);
  }
}

// What every kernel call shares: the broadcast batch and the slices.
struct Problem {
  Shape batch;
  int64_t slices = 0, L = 0, S = 0, E = 0, Ev = 0;
  Slices q, k, v, mask;
  // E == 0 makes every score an empty sum, exactly 0; PyTorch scales q and
  // k by sqrt(scale) before the product, so its scores stay 0 even for the
  // default scale 1/sqrt(0) = inf, where 0 * inf would be NaN here.
  double scale = 1;

  Problem(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& mask_,
          bool is_causal, double scale_)
      : batch(batch_dims(sdpa_output_shape(kOp, q_.shape(), q_.dtype(), k_.shape(), k_.dtype(),
                                           v_.shape(), v_.dtype(),
                                           mask_.defined() ? &mask_.shape() : nullptr,
                                           mask_.dtype(), 0.0, is_causal))),
        slices(batch.product()), L(q_.size(-2)), S(k_.size(-2)), E(q_.size(-1)),
        Ev(v_.size(-1)), q(q_, batch), k(k_, batch), v(v_, batch), mask(mask_, batch, L, S),
        scale(E == 0 ? 1.0 : scale_) {}

  // Slices per parallel chunk: about 2^16 multiply-adds of work each.
  int64_t grain() const {
    // In double: L * S * (E + Ev) may exceed int64 where L * S alone does not.
    const double work = static_cast<double>(L) * static_cast<double>(S) *
                        static_cast<double>(E + Ev + 1);
    return work >= 65536.0 ? 1 : static_cast<int64_t>(65536.0 / std::max(work, 1.0));
  }

  // Slice b's attention probabilities (L x S, contiguous).
  template <class T>
  Tensor probs(int64_t b, bool is_causal, int64_t q_offset) const {
    Tensor p = matmul(q.at(b), k.at(b).t()).contiguous();
    probabilities<T>(p.data_ptr<T>(), L, S, static_cast<T>(scale),
                     mask.defined() ? mask.at(b) : Tensor(), is_causal, q_offset);
    return p;
  }
};

// Query rows per block of the causal forward.
constexpr int64_t kCausalRows = 64;

// Slice b of a causal forward into `out`, by blocks of query rows: a block
// whose last row is global row g sees keys 0..g only, so its scores and its
// product with v cover just those keys, skipping the masked upper triangle
// (about half the multiply-adds of a square attention).
template <class T>
void causal_slice(const Problem& pr, int64_t b, int64_t q_offset, Tensor& out) {
  const Tensor q = pr.q.at(b), k = pr.k.at(b), v = pr.v.at(b);
  T* dst = out.data_ptr<T>() + b * pr.L * pr.Ev;
  for (int64_t r0 = 0; r0 < pr.L; r0 += kCausalRows) {
    const int64_t rows = std::min(kCausalRows, pr.L - r0);
    const int64_t keys = std::clamp<int64_t>(q_offset + r0 + rows, 0, pr.S);
    Tensor p = matmul(q.narrow(0, r0, rows), k.narrow(0, 0, keys).t()).contiguous();
    probabilities<T>(p.data_ptr<T>(), rows, keys, static_cast<T>(pr.scale), Tensor(), true,
                     q_offset + r0);
    const Tensor o = matmul(p, v.narrow(0, 0, keys)).contiguous();
    std::memcpy(dst + r0 * pr.Ev, o.data_ptr<T>(), static_cast<size_t>(rows * pr.Ev) * sizeof(T));
  }
}

// Copies contiguous slice `r` (times `factor` unless 1) into slice b of out.
template <class T>
void store(const Tensor& r, Tensor& out, int64_t b, T factor) {
  const Tensor c = r.contiguous();
  const int64_t n = c.numel();
  const T* src = c.data_ptr<T>();
  T* dst = out.data_ptr<T>() + b * n;
  if (factor == T(1)) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  else for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * factor;
}

// g summed over the dims along which an input of `shape` was broadcast.
Tensor sum_to(const Tensor& g, const Shape& shape) {
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  DimVector dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && g.size(d) != 1)) dims.push_back(d);
  if (dims.empty()) return g;
  return sum(g, dims, true).reshape(shape);
}

}  // namespace

Shape sdpa_output_shape(const char* op, const Shape& q, DType q_dtype, const Shape& k,
                        DType k_dtype, const Shape& v, DType v_dtype, const Shape* mask,
                        DType mask_dtype, double dropout_p, bool is_causal) {
  DT_CHECK(dropout_p == 0.0, op, ": dropout_p must be 0 (attention dropout is not supported), got ",
           dropout_p);
  DT_CHECK(is_floating(q_dtype), op,
           ": query dtype must be floating point (float32 or float64), got ", q_dtype);
  DT_CHECK(k_dtype == q_dtype && v_dtype == q_dtype, op,
           ": query, key and value must have the same dtype, got query ", q_dtype, ", key ",
           k_dtype, " and value ", v_dtype);
  DT_CHECK(q.size() >= 2 && k.size() >= 2 && v.size() >= 2, op,
           ": query, key and value must be at least 2-d ([..., L, E], [..., S, E], [..., S, Ev]), "
           "got shapes ", q, ", ", k, " and ", v);
  const int64_t L = q[q.size() - 2], E = q.back(), S = k[k.size() - 2];
  DT_CHECK(k.back() == E, op, ": key's last dim must equal query's (E = ", E, "), got query ", q,
           " and key ", k);
  DT_CHECK(v[v.size() - 2] == S, op, ": value's sequence dim must equal key's (S = ", S,
           "), got key ", k, " and value ", v);
  std::optional<Shape> batch = broadcast_batch(batch_dims(q), batch_dims(k));
  if (batch) batch = broadcast_batch(*batch, batch_dims(v));
  DT_CHECK(batch.has_value(), op, ": the batch dims of query ", q, ", key ", k, " and value ", v,
           " do not broadcast");
  Shape scores = *batch;
  scores.push_back(L);
  scores.push_back(S);
  checked_numel(scores, op);  // the probabilities are made a slice at a time, but backward sums them
  if (mask != nullptr) {
    DT_CHECK(!is_causal, op, ": an explicit attn_mask must not be given with is_causal=true");
    DT_CHECK(mask_dtype == DType::Bool || mask_dtype == q_dtype, op,
             ": attn_mask must be bool or have the query's dtype ", q_dtype, ", got ", mask_dtype);
    bool ok = mask->size() <= scores.size();
    for (size_t i = 0; ok && i < mask->size(); ++i) {
      const int64_t m = (*mask)[i], want = scores[scores.size() - mask->size() + i];
      ok = m == 1 || m == want;
    }
    DT_CHECK(ok, op, ": attn_mask of shape ", *mask, " does not broadcast to the scores' shape ",
             scores, " ([batch..., L, S])");
  }
  Shape out = *batch;
  out.push_back(L);
  out.push_back(v.back());
  checked_numel(out, op);
  return out;
}

double sdpa_scale(int64_t head_dim, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

Tensor sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                    bool is_causal, double scale, int64_t q_offset) {
  // 16-bit inputs (all of one dtype; else Problem refuses them): scores,
  // softmax and products in float32, the output rounded once.
  if (const auto half = shared_half({&q, &k, &v, &mask})) {
    return round_to(sdpa_forward(widen(q), widen(k), widen(v), widen(mask), is_causal, scale,
                                 q_offset),
                    *half);
  }
  const Problem pr(q, k, v, mask, is_causal, scale);
  Shape out_shape = pr.batch;
  out_shape.push_back(pr.L);
  out_shape.push_back(pr.Ev);
  Tensor out = Tensor::empty(out_shape, q.dtype());
  if (out.numel() == 0) return out;
  dispatch_floating(q.dtype(), kOp, [&]<class T>() {
    parallel_for(pr.slices, pr.grain(), [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        if (is_causal) {
          causal_slice<T>(pr, b, q_offset, out);
          continue;
        }
        const Tensor p = pr.probs<T>(b, is_causal, q_offset);
        store<T>(matmul(p, pr.v.at(b)), out, b, T(1));
      }
    });
  });
  return out;
}

Tensor sdpa_backward(SdpaInput which, const Tensor& grad, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& mask, bool is_causal, double scale,
                     int64_t q_offset) {
  if (const auto half = shared_half({&grad, &q, &k, &v, &mask})) {
    return round_to(sdpa_backward(which, widen(grad), widen(q), widen(k), widen(v), widen(mask),
                                  is_causal, scale, q_offset),
                    *half);
  }
  const Problem pr(q, k, v, mask, is_causal, scale);
  Shape out_shape = pr.batch;
  out_shape.push_back(pr.L);
  out_shape.push_back(pr.Ev);
  DT_CHECK(grad.shape() == out_shape && grad.dtype() == q.dtype(), kOp,
           ": the output's gradient must have the output's shape ", out_shape, " and dtype ",
           q.dtype(), ", got ", grad.shape(), " and ", grad.dtype());
  DT_CHECK(which != SdpaInput::Mask || (mask.defined() && mask.dtype() != DType::Bool), kOp,
           ": only a float attn_mask has a gradient");
  const Tensor& input = which == SdpaInput::Query ? q
                        : which == SdpaInput::Key ? k
                        : which == SdpaInput::Value ? v
                                                    : mask;
  Shape full_shape = pr.batch;
  if (which == SdpaInput::Mask) {
    full_shape.push_back(pr.L);
    full_shape.push_back(pr.S);
  } else {
    full_shape.push_back(input.size(-2));
    full_shape.push_back(input.size(-1));
  }
  Tensor full = Tensor::zeros(full_shape, q.dtype());
  if (full.numel() == 0) return sum_to(full, input.shape());
  const Slices g(grad, pr.batch);
  dispatch_floating(q.dtype(), kOp, [&]<class T>() {
    const T factor = static_cast<T>(pr.scale);
    parallel_for(pr.slices, pr.grain(), [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const Tensor p = pr.probs<T>(b, is_causal, q_offset);
        if (which == SdpaInput::Value) {
          store<T>(matmul(p.t(), g.at(b)), full, b, T(1));
          continue;
        }
        Tensor gs = matmul(g.at(b), pr.v.at(b).t()).contiguous();
        softmax_backward<T>(p.data_ptr<T>(), gs.data_ptr<T>(), pr.L, pr.S);
        if (which == SdpaInput::Query) store<T>(matmul(gs, pr.k.at(b)), full, b, factor);
        else if (which == SdpaInput::Key) store<T>(matmul(gs.t(), pr.q.at(b)), full, b, factor);
        else store<T>(gs, full, b, T(1));
      }
    });
  });
  return sum_to(full, input.shape());
}

}  // namespace detail

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  DT_CHECK(query.defined() && key.defined() && value.defined(), detail::kOp,
           ": query, key and value must be defined tensors");
  detail::sdpa_output_shape(detail::kOp, query.shape(), query.dtype(), key.shape(), key.dtype(),
                            value.shape(), value.dtype(),
                            attn_mask.defined() ? &attn_mask.shape() : nullptr, attn_mask.dtype(),
                            dropout_p, is_causal);
  return detail::sdpa_forward(query, key, value, attn_mask, is_causal,
                              detail::sdpa_scale(query.size(-1), scale), 0);
}

}  // namespace dtensor
