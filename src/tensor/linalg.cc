// Linear algebra: mm, bmm, matmul, addmm, baddbmm, linear, all funnelled into
// one batched product beta * bias + alpha * (a @ b) with broadcast batch dims.
// float32 runs oneDNN's gemm (onednn_gemm.h says why), float64 OpenBLAS's,
// and matrix-vector shapes OpenBLAS's gemv, on the operands' own memory
// whenever the library can read their strides; bfloat16 runs oneDNN's
// bf16 matmul (bfloat16 in and out, float32 inside) where the CPU has bf16
// instructions and widens to float32 otherwise; int64 runs an exact loop.
// This is the only file that includes cblas.h.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"
#include "tensor/onednn_gemm.h"

namespace dtensor {
namespace {

// ---- shapes ---------------------------------------------------------------

// The first s.size() - drop dims of s.
Shape leading_dims(const Shape& s, size_t drop) {
  Shape out;
  for (size_t i = 0; i + drop < s.size(); ++i) out.push_back(s[i]);
  return out;
}

// Numpy broadcast of two batch shapes, or nullopt when they do not broadcast.
std::optional<Shape> broadcast_batch(const Shape& a, const Shape& b) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd, 1);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  }
  return true;
}

// ---- operands -------------------------------------------------------------

// One side of a batched product: a batch of rows x cols matrices sharing the
// matrix strides. batch_strides is aligned with the product's batch shape
// (0 where this operand is broadcast). All strides are in elements.
struct Operand {
  Tensor tensor;  // owns the memory: the input, or a contiguous copy of it
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;
  DimVector batch_strides;
};

// REQUIRES: t.dim() >= 2 and t's batch dims broadcast to batch.
// Size and stride of the dim `back` places from the last (0: the last),
// without size(-1)'s out-of-line range check, which cost more than a small
// product's kernel. REQUIRES: t.dim() > back (the product's checks).
int64_t size_back(const Tensor& t, size_t back) { return t.shape()[t.shape().size() - 1 - back]; }
int64_t stride_back(const Tensor& t, size_t back) {
  return t.strides()[t.strides().size() - 1 - back];
}

Operand make_operand(const Tensor& t, const Shape& batch) {
  Operand op;
  op.tensor = t;
  op.rows = size_back(t, 1);
  op.cols = size_back(t, 0);
  op.row_stride = stride_back(t, 1);
  op.col_stride = stride_back(t, 0);
  op.batch_strides = DimVector(batch.size(), 0);
  const size_t t_batch = static_cast<size_t>(t.dim()) - 2;
  const size_t lead = batch.size() - t_batch;
  for (size_t d = 0; d < t_batch; ++d) {
    if (t.shape()[d] != 1) op.batch_strides[lead + d] = t.strides()[d];
  }
  return op;
}

// How BLAS reads a matrix: as stored (row-major, row i at i * ld) or as the
// transpose of a row-major matrix (column j at j * ld).
struct BlasLayout {
  bool trans = false;
  int ld = 1;
};

// The BLAS view of a rows x cols matrix with the given strides, or nullopt
// when BLAS cannot read it in place (then the caller copies it). A size-1 dim
// never moves the pointer, so its stride is ignored: a strided row vector is
// a transposed 1 x k matrix with ld = its stride, and needs no copy.
std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const auto fits = [](int64_t v) { return v >= 1 && v <= INT_MAX; };
  if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= std::max<int64_t>(1, cols))) {
    const int64_t ld = rows <= 1 ? std::max<int64_t>(1, cols) : rs;
    if (fits(ld)) return BlasLayout{false, static_cast<int>(ld)};
  }
  if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= std::max<int64_t>(1, rows))) {
    const int64_t ld = cols <= 1 ? std::max<int64_t>(1, rows) : cs;
    if (fits(ld)) return BlasLayout{true, static_cast<int>(ld)};
  }
  return std::nullopt;
}

std::optional<BlasLayout> blas_layout(const Operand& op) {
  return blas_layout(op.rows, op.cols, op.row_stride, op.col_stride);
}

// The row stride of the (batch..., rows) dims of `a` merged into one row dim,
// or nullopt when the strides cannot express the merge (the test view() uses;
// size-1 dims are skipped since their stride is meaningless).
std::optional<int64_t> folded_row_stride(const Operand& a, const Shape& batch) {
  int64_t sizes[kMaxDims + 1], strides[kMaxDims + 1];
  int nd = 0;
  for (size_t d = 0; d < batch.size(); ++d) {
    if (batch[d] == 1) continue;
    sizes[nd] = batch[d];
    strides[nd++] = a.batch_strides[d];
  }
  if (a.rows != 1) {
    sizes[nd] = a.rows;
    strides[nd++] = a.row_stride;
  }
  for (int d = 0; d + 1 < nd; ++d) {
    if (strides[d] != strides[d + 1] * sizes[d + 1]) return std::nullopt;
  }
  return nd == 0 ? a.row_stride : strides[nd - 1];
}

// Calls f(a_offset, b_offset, batch_index) for every index of `batch`
// (row-major), with element offsets from the per-dim batch strides.
template <class F>
void for_each_batch(const Shape& batch, const DimVector& a_strides, const DimVector& b_strides,
                    F&& f) {
  const int64_t count = batch.product();
  const int nd = static_cast<int>(batch.size());
  int64_t idx[kMaxDims] = {};
  int64_t a_off = 0, b_off = 0;
  for (int64_t i = 0; i < count; ++i) {
    f(a_off, b_off, i);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < batch[d]) {
        a_off += a_strides[d];
        b_off += b_strides[d];
        break;
      }
      a_off -= a_strides[d] * (batch[d] - 1);
      b_off -= b_strides[d] * (batch[d] - 1);
      idx[d] = 0;
    }
  }
}

// ---- BLAS kernels -----------------------------------------------------------
//
// OpenBLAS runs on one thread (its bits change with its thread count); a
// product big enough to pay for threads is split here into fixed blocks of
// output rows (or columns, when there are more of them), one BLAS call
// each, run on the pool. The blocks depend only on the shape, so 1 thread
// and 8 give the same bits; an MPI process and a simulated rank holding the
// same shard make the same calls.

// Every block packs the whole other operand again, so small blocks cost
// memory traffic: with blocks of 64 rows, a simulated rank's 512 x 512 x 512
// product of the TP demo packed its weight 8 times, and packing took a
// seventh of the forward pass. Blocks of at least 256 rows or columns keep
// the repacking at most 1/256 of the multiply-adds.
constexpr int64_t kGemmSplitWork = int64_t{1} << 21;  // multiply-adds
constexpr int64_t kGemmMaxBlocks = 8;
constexpr int64_t kGemmMinBlock = 256;  // rows or columns per block

void blas_gemm(bool ta, bool tb, int n, int m, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  detail::onednn_gemm(ta, tb, n, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int n, int m, int k, float alpha, const BFloat16* a, int lda,
               const BFloat16* b, int ldb, float beta, BFloat16* c, int ldc) {
  detail::onednn_gemm(ta, tb, n, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int n, int m, int k, double alpha, const double* a, int lda,
               const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, m,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// c (n x m, row-major, ldc) = alpha op(a) op(b) + beta c, with a, b and c
// of type S and alpha, beta of type T (S, or float for bfloat16).
template <class S, class T>
void gemm(bool ta, bool tb, int n, int m, int k, T alpha, const S* a, int lda, const S* b,
          int ldb, T beta, S* c, int ldc) {
  detail::init_blas_threads();
  const int64_t work = int64_t{n} * m * k;
  const bool by_rows = n >= m;
  const int64_t len = by_rows ? n : m;
  const int64_t blocks = work < kGemmSplitWork
                             ? 1
                             : std::clamp<int64_t>(len / kGemmMinBlock, 1, kGemmMaxBlocks);
  if (blocks == 1) return blas_gemm(ta, tb, n, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const int64_t size = (len + blocks - 1) / blocks;
  detail::parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int64_t lo = blk * size, cnt = std::min(len, lo + size) - lo;
      if (cnt <= 0) continue;
      if (by_rows) {  // rows lo.. of op(a) and c
        const S* ab = ta ? a + lo : a + lo * lda;
        blas_gemm(ta, tb, static_cast<int>(cnt), m, k, alpha, ab, lda, b, ldb, beta,
                  c + lo * ldc, ldc);
      } else {  // columns lo.. of op(b) and c
        const S* bb = tb ? b + lo * ldb : b + lo;
        blas_gemm(ta, tb, n, static_cast<int>(cnt), k, alpha, a, lda, bb, ldb, beta, c + lo,
                  ldc);
      }
    }
  });
}

void gemv(bool trans, int rows, int cols, float alpha, const float* a, int lda, const float* x,
          int incx, float beta, float* y) {
  detail::init_blas_threads();
  cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, rows, cols, alpha, a, lda, x, incx,
              beta, y, 1);
}
void gemv(bool trans, int rows, int cols, double alpha, const double* a, int lda, const double* x,
          int incx, double beta, double* y) {
  detail::init_blas_threads();
  cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, rows, cols, alpha, a, lda, x, incx,
              beta, y, 1);
}

// One (n x k) @ (k x m) product into contiguous c, the same for every matrix
// of a batch, with matrices of type S and scalars of type T (see gemm).
// REQUIRES: n, m, k >= 1 and both layouts valid for the sizes.
template <class S, class T>
struct BlasPlan {
  int n, m, k;
  BlasLayout la, lb;
  int a_inc, b_inc;  // element step along k of a's row / b's column
  T alpha, beta;

  void run(const S* a, const S* b, S* c) const {
    // gemm with a 1-wide side wastes most of its packing; gemv streams the
    // matrix once. OpenBLAS 0.3.21 does not make this switch by itself.
    // (oneDNN's bfloat16 matmul takes every shape.)
    if constexpr (std::is_same_v<S, T>) {
      if (m == 1 || n == 1) {
        // BLAS says y need not be set when beta == 0, but some OpenBLAS
        // versions scale it anyway (NaN * 0); y is uninitialised here.
        if (beta == T(0)) std::fill(c, c + static_cast<int64_t>(n) * m, T(0));
        if (m == 1) {  // c (n) = op(a) @ b's column
          if (!la.trans) gemv(false, n, k, alpha, a, la.ld, b, b_inc, beta, c);
          else gemv(true, k, n, alpha, a, la.ld, b, b_inc, beta, c);
        } else {  // c (m) = op(b)^T @ a's row
          if (!lb.trans) gemv(true, k, m, alpha, b, lb.ld, a, a_inc, beta, c);
          else gemv(false, m, k, alpha, b, lb.ld, a, a_inc, beta, c);
        }
        return;
      }
    }
    gemm(la.trans, lb.trans, n, m, k, alpha, a, la.ld, b, lb.ld, beta, c, m);
  }
};

int to_blas_int(int64_t v, const char* op, const char* what) {
  DT_CHECK(v <= INT_MAX, op, ": ", what, " = ", v, " exceeds BLAS's 32-bit index limit (",
           INT_MAX, ")");
  return static_cast<int>(v);
}

// out (batch..., n, m), contiguous, already holds the bias when use_bias.
// out = beta out + alpha (a @ b), matrices of type S, scalars of type T.
template <class S, class T>
void float_product(const char* op, Tensor& out, const Tensor& a_in, const Tensor& b_in,
                   const Shape& batch, T alpha, T beta, bool use_bias) {
  const int64_t n = size_back(a_in, 1), k = size_back(a_in, 0), m = size_back(b_in, 0);
  S* c = out.data_ptr<S>();
  if (k == 0) {  // an empty sum: only the bias term is left
    const int64_t total = out.numel();
    if (!use_bias || beta == T(0)) std::fill(c, c + total, S(0));
    else if (beta != T(1)) for (int64_t i = 0; i < total; ++i) c[i] = S(T(c[i]) * beta);
    return;
  }

  const int n32 = to_blas_int(n, op, "rows");
  const int m32 = to_blas_int(m, op, "columns");
  const int k32 = to_blas_int(k, op, "inner dim");

  Operand a = make_operand(a_in, batch);
  Operand b = make_operand(b_in, batch);
  // A layout BLAS cannot read costs one contiguous copy of the whole operand
  // (the batch shares the layout, so it is decided once).
  std::optional<BlasLayout> la = blas_layout(a);
  if (!la) {
    a = make_operand(a_in.contiguous(), batch);
    la = blas_layout(a);
  }
  std::optional<BlasLayout> lb = blas_layout(b);
  if (!lb) {
    b = make_operand(b_in.contiguous(), batch);
    lb = blas_layout(b);
  }
  DT_CHECK(la && lb, op, ": internal error: contiguous operand not BLAS-compatible");

  // When b is the same matrix for every batch entry (a 2-d weight), a's batch
  // folds into its rows: one (B*n x k) gemm instead of B small ones, so b is
  // packed once and OpenBLAS gets enough rows to use its threads. If a's
  // strides do not allow the fold we copy a (as torch.matmul's reshape
  // does): the copy is O(B*n*k) against the gemm's O(B*n*k*m).
  Shape run_batch = batch;
  int64_t run_n = n;
  const bool b_shared = std::all_of(b.batch_strides.begin(), b.batch_strides.end(),
                                    [](int64_t s) { return s == 0; });
  bool a_owns_batch = true;  // a fold is impossible where a is broadcast itself
  for (size_t d = 0; d < batch.size(); ++d) {
    if (batch[d] != 1 && a.batch_strides[d] == 0) a_owns_batch = false;
  }
  if (!batch.empty() && batch.product() > 1 && b_shared && a_owns_batch) {
    const auto try_fold = [&](const Operand& cand) -> bool {
      const std::optional<int64_t> rs = folded_row_stride(cand, batch);
      if (!rs) return false;
      Operand folded = cand;
      folded.rows = batch.product() * n;
      folded.row_stride = *rs;
      const std::optional<BlasLayout> lf = blas_layout(folded);
      if (!lf || folded.rows > INT_MAX) return false;
      a = folded;
      la = lf;
      return true;
    };
    bool ok = try_fold(a);
    if (!ok && !a.tensor.is_contiguous()) ok = try_fold(make_operand(a_in.contiguous(), batch));
    if (ok) {
      run_n = a.rows;
      run_batch = Shape();
      a.batch_strides = DimVector();
      b.batch_strides = DimVector();
    }
  }

  BlasPlan<S, T> plan{run_n == n ? n32 : static_cast<int>(run_n),  // a fold checked its rows
                   m32,
                   k32,
                   *la,
                   *lb,
                   k > 1 ? static_cast<int>(a.col_stride) : 1,
                   k > 1 ? static_cast<int>(b.row_stride) : 1,
                   alpha,
                   use_bias ? beta : T(0)};
  // gemv reads a's row / b's column with these steps; the layout check
  // guarantees them in [1, INT_MAX] whenever the matching side is 1 wide.
  const S* ap = a.tensor.template data_ptr<S>();
  const S* bp = b.tensor.template data_ptr<S>();
  const int64_t c_step = run_n * m;
  for_each_batch(run_batch, a.batch_strides, b.batch_strides,
                 [&](int64_t a_off, int64_t b_off, int64_t i) {
                   plan.run(ap + a_off, bp + b_off, c + i * c_step);
                 });
}

// Exact int64 product with two's-complement wrap-around (as PyTorch), done in
// uint64 so overflow is defined. i-k-j order: the inner loop walks a row of b
// and of the accumulator, which is contiguous for contiguous b.
void int_product(Tensor& out, const Tensor& a_in, const Tensor& b_in, const Shape& batch,
                 int64_t alpha, int64_t beta, bool use_bias) {
  const Operand a = make_operand(a_in, batch);
  const Operand b = make_operand(b_in, batch);
  const int64_t n = a.rows, k = a.cols, m = b.cols;
  const uint64_t ualpha = static_cast<uint64_t>(alpha);
  const uint64_t ubeta = use_bias ? static_cast<uint64_t>(beta) : 0;
  const int64_t* ap = a.tensor.data_ptr<int64_t>();
  const int64_t* bp = b.tensor.data_ptr<int64_t>();
  int64_t* cp = out.data_ptr<int64_t>();
  std::vector<uint64_t> acc(static_cast<size_t>(m));
  for_each_batch(batch, a.batch_strides, b.batch_strides,
                 [&](int64_t a_off, int64_t b_off, int64_t bi) {
    const int64_t* am = ap + a_off;
    const int64_t* bm = bp + b_off;
    int64_t* cm = cp + bi * n * m;
    for (int64_t i = 0; i < n; ++i) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t kk = 0; kk < k; ++kk) {
        const uint64_t aik = static_cast<uint64_t>(am[i * a.row_stride + kk * a.col_stride]);
        const int64_t* brow = bm + kk * b.row_stride;
        if (b.col_stride == 1) {
          for (int64_t j = 0; j < m; ++j) acc[j] += aik * static_cast<uint64_t>(brow[j]);
        } else {
          for (int64_t j = 0; j < m; ++j) {
            acc[j] += aik * static_cast<uint64_t>(brow[j * b.col_stride]);
          }
        }
      }
      int64_t* crow = cm + i * m;
      for (int64_t j = 0; j < m; ++j) {
        // beta == 0 must not read c: it is uninitialised (or holds no bias).
        const uint64_t scaled = ubeta == 0 ? 0 : ubeta * static_cast<uint64_t>(crow[j]);
        crow[j] = static_cast<int64_t>(scaled + ualpha * acc[j]);
      }
    }
  });
}

void check_defined(const char* op, const Tensor& a, const Tensor& b) {
  DT_CHECK(a.defined() && b.defined(), op, ": got an undefined tensor");
}

// beta * bias + alpha * (a @ b) with a (..., n, k) and b (..., k, m), batch
// dims broadcast; bias (optional) broadcasts to the result. Callers have
// checked ranks and inner dims with their own messages.
//
// Mixed dtypes are promoted to the common dtype (bias included) before the
// product. PyTorch refuses mixed dtypes in mm/bmm; we promote like every
// other dtensor op so that, e.g., an int64 @ float32 product just works.
Tensor product(const char* op, const Tensor& a_in, const Tensor& b_in, const Tensor& bias,
               Scalar beta, Scalar alpha) {
  DType dtype = promote_types(a_in.dtype(), b_in.dtype());
  if (bias.defined()) dtype = promote_types(dtype, bias.dtype());
  DT_CHECK(dtype != DType::Bool, op, ": bool is not supported (PyTorch refuses it too); convert "
           "to int64 or a floating dtype first");
  // 16-bit products accumulate in float32 and round once: bfloat16 in
  // oneDNN's kernels where the CPU multiplies bfloat16 itself (the operands
  // stay 16-bit), otherwise widened to a float32 product.
  const bool half = is_half(dtype);
  if (half && !detail::native_half_gemm(dtype)) {
    return detail::round_to(product(op, detail::widen(a_in), detail::widen(b_in),
                                    detail::widen(bias), beta, alpha),
                            dtype);
  }
  const Tensor a = a_in.to(dtype);
  const Tensor b = b_in.to(dtype);

  const Shape a_batch = leading_dims(a.shape(), 2);
  const Shape b_batch = leading_dims(b.shape(), 2);
  const std::optional<Shape> batch = broadcast_batch(a_batch, b_batch);
  DT_CHECK(batch, op, ": batch dims ", a_batch, " and ", b_batch, " cannot be broadcast (",
           a_in.shape(), " @ ", b_in.shape(), ")");
  Shape out_shape = *batch;
  out_shape.push_back(a.size(-2));
  out_shape.push_back(b.size(-1));

  if (bias.defined()) {
    DT_CHECK(broadcasts_to(bias.shape(), out_shape), op, ": bias of shape ", bias.shape(),
             " cannot be broadcast to the result shape ", out_shape);
  }
  // beta == 0 ignores the bias entirely, NaN and Inf included (as PyTorch).
  const bool use_bias = bias.defined() && beta.to_double() != 0.0;
  Tensor out = Tensor::empty(out_shape, dtype);
  if (use_bias) out.copy_(bias);
  if (out.numel() == 0) return out;

  if (half) {  // bfloat16 in oneDNN's kernels (native_half_gemm)
    float_product<BFloat16, float>(op, out, a, b, *batch, alpha.to<float>(), beta.to<float>(),
                                   use_bias);
    return out;
  }
  detail::dispatch_numeric(dtype, op, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      float_product<T, T>(op, out, a, b, *batch, alpha.to<T>(), beta.to<T>(), use_bias);
    } else {
      // PyTorch's rule: integer products take integer beta/alpha only.
      DT_CHECK(!alpha.is_floating() && !(bias.defined() && beta.is_floating()), op,
               ": beta and alpha must be integers for int64 tensors, got beta=", beta,
               ", alpha=", alpha);
      int_product(out, a, b, *batch, alpha.to_int(), beta.to_int(), use_bias);
    }
  });
  return out;
}

void check_mm_args(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, b);
  DT_CHECK(a.dim() == 2 && b.dim() == 2, op, ": expected 2-d tensors, got ", a.shape(), " and ",
           b.shape());
  DT_CHECK(a.size(1) == b.size(0), op, ": inner dimensions differ: ", a.shape(), " @ ", b.shape(),
           " (expected a.size(1) == b.size(0), got ", a.size(1), " vs ", b.size(0), ")");
}

void check_bmm_args(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, b);
  DT_CHECK(a.dim() == 3 && b.dim() == 3, op, ": expected 3-d tensors, got ", a.shape(), " and ",
           b.shape());
  DT_CHECK(a.size(0) == b.size(0), op, ": batch sizes differ: ", a.size(0), " vs ", b.size(0),
           " (", a.shape(), " @ ", b.shape(), ")");
  DT_CHECK(a.size(2) == b.size(1), op, ": inner dimensions differ: ", a.shape(), " @ ", b.shape(),
           " (expected a.size(2) == b.size(1), got ", a.size(2), " vs ", b.size(1), ")");
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_mm_args("mm", a, b);
  return product("mm", a, b, Tensor(), 0, 1);
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  check_mm_args("addmm", a, b);
  DT_CHECK(bias.defined(), "addmm: bias is undefined");
  return product("addmm", a, b, bias, beta, alpha);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_bmm_args("bmm", a, b);
  return product("bmm", a, b, Tensor(), 0, 1);
}

Tensor baddbmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  check_bmm_args("baddbmm", a, b);
  DT_CHECK(bias.defined(), "baddbmm: bias is undefined");
  return product("baddbmm", a, b, bias, beta, alpha);
}

// torch.matmul: a 1-d operand becomes a 1-row (a) or 1-column (b) matrix and
// that dim is dropped from the result; everything else is a batched product
// with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined("matmul", a, b);
  const int64_t da = a.dim(), db = b.dim();
  DT_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dim, got a 0-d tensor (",
           a.shape(), " @ ", b.shape(), ")");
  const int64_t a_inner = a.size(-1);
  const int64_t b_inner = db == 1 ? b.size(0) : b.size(-2);
  if (da == 1 && db == 1) {
    DT_CHECK(a_inner == b_inner, "matmul: 1-d sizes differ: ", a.shape(), " @ ", b.shape(),
             " (expected equal lengths, got ", a_inner, " vs ", b_inner, ")");
  } else {
    DT_CHECK(a_inner == b_inner, "matmul: inner dimensions differ: ", a.shape(), " @ ", b.shape(),
             " (expected a.size(-1) == ", db == 1 ? "b.size(0)" : "b.size(-2)", ", got ",
             a_inner, " vs ", b_inner, ")");
  }
  const Tensor a2 = da == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
  Tensor out = product("matmul", a2, b2, Tensor(), 0, 1);
  if (da > 1 && db > 1) return out;
  Shape shape = leading_dims(out.shape(), 2);
  if (da > 1) shape.push_back(out.size(-2));
  if (db > 1) shape.push_back(out.size(-1));
  return out.view(shape);
}

// weight is used through its transposed view, so an (out, in) row-major
// weight reaches BLAS as a CblasTrans operand with no copy.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined("linear", x, weight);
  DT_CHECK(weight.dim() == 2, "linear: weight must be 2-d (out_features, in_features), got ",
           weight.shape());
  DT_CHECK(x.dim() >= 1, "linear: input must have at least 1 dim, got a 0-d tensor");
  DT_CHECK(x.size(-1) == weight.size(1), "linear: input's last dim ", x.size(-1),
           " != weight's in_features ", weight.size(1), " (input ", x.shape(), ", weight ",
           weight.shape(), ")");
  if (bias.defined()) {
    DT_CHECK(bias.dim() <= 1 && broadcasts_to(bias.shape(), Shape{weight.size(0)}),
             "linear: bias must be 1-d of out_features = ", weight.size(0), ", got ",
             bias.shape());
  }
  const Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x;
  Tensor out = product("linear", x2, weight.t(), bias, 1, 1);
  if (x.dim() == 1) return out.view(Shape{weight.size(0)});
  return out;
}

}  // namespace dtensor
