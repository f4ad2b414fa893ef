// Reductions: sum, mean, prod, amax, amin, var, argmax, argmin.
//
// One strided walk serves them all: the input is visited in memory order
// together with an accumulator that has stride 0 on the reduced dims, so a
// reduction over any set of dims reads the input sequentially (var reads it
// twice: mean, then squared deviations). When the reduced dims are innermost
// in memory (row reductions, the common case) the coalesced runs have
// accumulator stride 0 and go through vectorised whole-run kernels instead
// of a per-element read-modify-write.
//
// Threads: the walk splits over output slots (for_each_strided never cuts a
// slot's own sequence of inputs), so those results are the same bits as on
// one thread. A reduction into few slots over many elements (a full sum)
// instead folds fixed blocks of kReduceBlock elements and merges the block
// partials in block order; the blocks depend only on the shape, so the
// bits do not depend on the thread count either (they differ from a single
// sequential fold in the last places, as any reordering of a float sum
// does).
// FMA contraction off: the SIMD copies must round like the baseline (simd.h).
#pragma GCC optimize("fp-contract=off")
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "dtensor/tensor.h"
#include "tensor/half_compute.h"
#include "tensor/dispatch.h"
#include "tensor/loops.h"
#include "tensor/simd.h"

namespace dtensor {
namespace {

// Which dims are reduced, and the shapes that come out.
struct ReducePlan {
  bool reduced[kMaxDims] = {};
  Shape keep_shape;  // input shape with reduced dims set to 1
  Shape out_shape;   // keep_shape, or with reduced dims dropped
  int64_t count = 1;  // elements folded into each output (product of reduced sizes)
};

ReducePlan make_plan(const Tensor& x, const DimVector& dims, bool keepdim, const char* op) {
  ReducePlan plan;
  const int64_t ndim = x.dim();
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) plan.reduced[d] = true;
  } else {
    // A 0-d tensor accepts dim 0 / -1 as PyTorch does (it acts as one dim of
    // size 1); reducing over it changes nothing.
    bool seen[kMaxDims] = {};
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, std::max<int64_t>(ndim, 1), op);
      DT_CHECK(!seen[w], op, ": dim ", w, " appears more than once in dims ", dims,
               " (input shape ", x.shape(), ")");
      seen[w] = true;
      if (ndim > 0) plan.reduced[w] = true;
    }
  }
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t size = x.shape()[d];
    if (plan.reduced[d]) {
      plan.count *= size;
      plan.keep_shape.push_back(1);
      if (keepdim) plan.out_shape.push_back(1);
    } else {
      plan.keep_shape.push_back(size);
      plan.out_shape.push_back(size);
    }
  }
  return plan;
}

// Reorders the dims of a strided walk so the operand `lead` is visited in
// memory order (largest stride outermost). Broadcast (stride 0) dims go
// outermost so that inner runs keep moving through memory.
template <size_t N>
void sort_dims_by_stride(Shape& shape, detail::StridedOperands<N>& ops, size_t lead) {
  const size_t nd = shape.size();
  int order[kMaxDims];
  std::iota(order, order + nd, 0);
  auto key = [&](int d) {
    const int64_t s = ops.strides[lead][d];
    return s == 0 ? std::numeric_limits<int64_t>::max() : s;
  };
  // A stable insertion sort: at most kMaxDims entries, and std::stable_sort
  // allocates a buffer on every call (an eighth of a small sum's instructions).
  for (size_t i = 1; i < nd; ++i) {
    const int d = order[i];
    size_t j = i;
    for (; j > 0 && key(order[j - 1]) < key(d); --j) order[j] = order[j - 1];
    order[j] = d;
  }
  Shape sorted_shape;
  detail::StridedOperands<N> sorted = ops;
  for (size_t i = 0; i < nd; ++i) {
    sorted_shape.push_back(shape[order[i]]);
    for (size_t k = 0; k < N; ++k) sorted.strides[k][i] = ops.strides[k][order[i]];
  }
  shape = sorted_shape;
  ops = sorted;
}

// Operand k of a reduction walk: a contiguous accumulator of keep_shape with
// elements of `item` bytes, stride 0 on the reduced dims.
template <size_t N>
void set_accumulator(detail::StridedOperands<N>& ops, size_t k, void* base, const ReducePlan& plan,
                     int64_t item) {
  ops.base[k] = static_cast<char*>(base);
  const Shape strides = contiguous_strides(plan.keep_shape);
  if (plan.keep_shape.product() == 0) item = 0;  // empty: strides may overflow in bytes
  for (size_t d = 0; d < plan.keep_shape.size(); ++d)
    ops.strides[k][d] = plan.reduced[d] ? 0 : strides[d] * item;
}

template <size_t N>
void set_input(detail::StridedOperands<N>& ops, size_t k, const Tensor& x) {
  ops.base[k] = static_cast<char*>(x.raw_data());
  // An empty input may have strides that overflow in bytes; none is used.
  const int64_t item = x.numel() == 0 ? 0 : static_cast<int64_t>(x.itemsize());
  for (size_t d = 0; d < x.shape().size(); ++d) ops.strides[k][d] = x.strides()[d] * item;
}

// ---- the fold operations -------------------------------------------------------
// step folds one input into an accumulator; merge joins two accumulators.
// Integer sums and products wrap on overflow (as PyTorch's do) through
// unsigned arithmetic, which keeps them free of undefined behaviour.

template <class A>
A wrapping_add(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <class A>
A wrapping_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}

template <class T>
struct SumOp {
  using Acc = detail::acc_type_t<T>;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, T x) { return wrapping_add(a, static_cast<Acc>(x)); }
  static Acc merge(Acc a, Acc b) { return wrapping_add(a, b); }
};

template <class T>
struct ProdOp {
  using Acc = detail::acc_type_t<T>;
  static Acc init() { return Acc(1); }
  static Acc step(Acc a, T x) { return wrapping_mul(a, static_cast<Acc>(x)); }
  static Acc merge(Acc a, Acc b) { return wrapping_mul(a, b); }
};

// NaN wins: once an accumulator holds NaN no comparison replaces it.
template <class T>
struct MaxOp {
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static Acc step(Acc a, T x) {
    if constexpr (std::is_floating_point_v<T>) return (x > a || x != x) ? x : a;
    else return x > a ? x : a;
  }
  static Acc merge(Acc a, Acc b) { return step(a, b); }
};

template <class T>
struct MinOp {
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static Acc step(Acc a, T x) {
    if constexpr (std::is_floating_point_v<T>) return (x < a || x != x) ? x : a;
    else return x < a ? x : a;
  }
  static Acc merge(Acc a, Acc b) { return step(a, b); }
};

// Sum of squared deviations from a fixed centre (the second pass of var).
template <class T>
struct SquaredDevOp {
  using Acc = double;
  double centre;
  Acc step(Acc a, T x) const {
    const double d = static_cast<double>(x) - centre;
    return a + d * d;
  }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static Acc init() { return 0.0; }
};

// Floating folds run at the machine's SIMD level (simd.h); integer and bool
// ones are compiled at the baseline only. Their AVX2/AVX-512 copies were a
// fifth of this file's compile time (docs/testing.md, "Build times"), and
// they are rarely hot: a sum of 16M int64 elements takes 1.2x as long at
// the baseline, of bools 1.6x (docs/PERFORMANCE.md, "The house and the
// unity build").
template <class T>
constexpr int kWalkFlags = detail::kNoTiles | (std::is_floating_point_v<T> ? detail::kSimd : 0);
template <class T, class F>
void simd_if_floating(F&& f) {
  if constexpr (std::is_floating_point_v<T>) detail::simd_dispatch(f);
  else f();
}

// Software prefetch for the sequential reads of the folds over elements of
// 4 bytes or less, kReadAhead bytes ahead, one per 64-byte line. Such a
// fold spends longer on each line than a fold over doubles, and on the Zen 3
// machine of docs/PERFORMANCE.md ("Reductions read ahead") the hardware
// prefetcher alone then kept a 64 MiB float sum at 1.2-1.3x torch's time;
// 2 KiB ahead took sum and amax 11-16% faster at 1 thread (512 bytes ahead:
// no change). Over doubles it made the fold 4-14% slower, and loops that
// also write (add_) were no faster, so only these folds read ahead.
// (A prefetch never faults; the address is formed as an integer because
// near a run's end it lies past the run.)
constexpr uintptr_t kReadAhead = 2048;
template <class T>
inline void read_ahead(const T* p) {
  if constexpr (sizeof(T) <= 4)
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kReadAhead));
}

// max (kMax) or min of a contiguous floating run, NaN if any element is NaN.
// GCC will not vectorise a float max/min reduction (NaN and -0 semantics
// would change), so this compares integer keys instead: the float bits with
// the magnitude flipped for negatives order exactly like the floats, and
// integer max/min reductions vectorise. NaNs are caught separately by the
// largest magnitude bits (above infinity's). 3x faster than the scalar form
// on SSE2, 10x with AVX-512.
template <class T, bool kMax>
T extreme_run(const T* x, int64_t n) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  constexpr I kMag = std::numeric_limits<I>::max();
  constexpr int kSignShift = static_cast<int>(sizeof(I) * 8 - 1);
  constexpr I kInfBits = std::bit_cast<I>(std::numeric_limits<T>::infinity());
  auto key = [](I b) { return static_cast<I>(b ^ ((b >> kSignShift) & kMag)); };  // an involution
  const I start = key(std::bit_cast<I>(kMax ? -std::numeric_limits<T>::infinity()
                                            : std::numeric_limits<T>::infinity()));
  auto fold = [key](I& best, I& mag, I b) {
    const I k = key(b);
    if constexpr (kMax) best = k > best ? k : best;
    else best = k < best ? k : best;
    const I a = static_cast<I>(b & kMag);
    mag = a > mag ? a : mag;
  };
  // kLanes independent keys: integer max/min is exact and associative, so
  // the lane layout cannot change the result. Several vector registers of
  // lanes shorten the dependency chains: on a 1 MiB (L2) input the baseline
  // copy ran 1.7x and AVX2 1.1x faster than with one chain, AVX-512 the
  // same; 16 lanes compiled to slower code than either (docs/PERFORMANCE.md).
  constexpr int kLanes = 32;
  I best[kLanes], mag[kLanes];
  for (int j = 0; j < kLanes; ++j) best[j] = start, mag[j] = 0;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t b = 0; b < kLanes * sizeof(T); b += 64) read_ahead<T>(x + i + b / sizeof(T));
    for (int j = 0; j < kLanes; ++j) fold(best[j], mag[j], std::bit_cast<I>(x[i + j]));
  }
  for (; i < n; ++i) fold(best[0], mag[0], std::bit_cast<I>(x[i]));
  for (int j = 1; j < kLanes; ++j) {
    if constexpr (kMax) best[0] = best[j] > best[0] ? best[j] : best[0];
    else best[0] = best[j] < best[0] ? best[j] : best[0];
    mag[0] = mag[j] > mag[0] ? mag[j] : mag[0];
  }
  return mag[0] > kInfBits ? std::numeric_limits<T>::quiet_NaN() : std::bit_cast<T>(key(best[0]));
}

// Folds n elements `stride` apart into one accumulator. Contiguous runs use
// eight independent lanes: that breaks the serial dependency chain so the
// compiler can vectorise (it may not reassociate a single FP chain itself),
// and the lane layout depends only on n, so results stay deterministic.
template <class T, class Op>
typename Op::Acc fold_run(const Op& op, const T* x, int64_t n, int64_t stride) {
  using Acc = typename Op::Acc;
  if constexpr (std::is_floating_point_v<T> && std::is_same_v<Op, MaxOp<T>>) {
    if (stride == 1) return extreme_run<T, true>(x, n);
  }
  if constexpr (std::is_floating_point_v<T> && std::is_same_v<Op, MinOp<T>>) {
    if (stride == 1) return extreme_run<T, false>(x, n);
  }
  if (stride == 1 && n >= 16) {
    constexpr int kLanes = 8;
    Acc lanes[kLanes];
    for (int j = 0; j < kLanes; ++j) lanes[j] = Op::init();
    int64_t i = 0;
    // Whole lines at a time, each read ahead once; the lanes take the same
    // elements as in the loop after it, so the bits do not change.
    constexpr int64_t kLine = std::max<int64_t>(kLanes, 64 / static_cast<int64_t>(sizeof(T)));
    for (; i + kLine <= n; i += kLine) {
      read_ahead(x + i);
      for (int64_t k = 0; k < kLine; k += kLanes)
        for (int j = 0; j < kLanes; ++j) lanes[j] = op.step(lanes[j], x[i + k + j]);
    }
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lanes[j] = op.step(lanes[j], x[i + j]);
    for (; i < n; ++i) lanes[0] = op.step(lanes[0], x[i]);
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int j = 0; j < w; ++j) lanes[j] = Op::merge(lanes[j], lanes[j + w]);
    return lanes[0];
  }
  Acc a = Op::init();
  for (int64_t i = 0; i < n; ++i) a = op.step(a, x[i * stride]);
  return a;
}

// The kernel for for_each_strided over (accumulator, input). A run whose
// accumulator stride is 0 reduces into a single slot; otherwise each input
// element folds into its own slot (reductions over outer dims).
template <class T, class Op>
auto fold_kernel(const Op& op) {
  using Acc = typename Op::Acc;
  return [&op](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
    Acc* acc = reinterpret_cast<Acc*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const int64_t sx = s[1] / static_cast<int64_t>(sizeof(T));
    if (s[0] == 0) {
      *acc = Op::merge(*acc, fold_run(op, x, n, sx));
      return;
    }
    const int64_t sa = s[0] / static_cast<int64_t>(sizeof(Acc));
    if (sa == 1 && sx == 1) {
      for (int64_t i = 0; i < n; ++i) acc[i] = op.step(acc[i], x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) acc[i * sa] = op.step(acc[i * sa], x[i * sx]);
    }
  };
}

// Elements per block of a fixed-block reduction, and the slot count below
// which a reduction over at least two blocks per slot uses them: with fewer
// slots than that, splitting over slots leaves threads idle.
constexpr int64_t kReduceBlock = int64_t{1} << 16;
constexpr int64_t kFewSlots = 8;

bool use_blocks(const ReducePlan& plan) {
  return plan.keep_shape.product() < kFewSlots && plan.count >= 2 * kReduceBlock;
}

// The walk over the inputs of output slot `slot` (row-major index into
// keep_shape): x with the kept dims pinned, in memory order.
detail::loops::Walk<1> slot_walk(const Tensor& x, const ReducePlan& plan, int64_t slot,
                                 char*& base) {
  detail::StridedOperands<1> ops;
  set_input(ops, 0, x);
  Shape shape = x.shape();
  int64_t rem = slot;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    if (plan.reduced[d]) continue;
    const int64_t i = rem % shape[d];
    rem /= shape[d];
    ops.base[0] += i * ops.strides[0][d];
    shape[d] = 1;
  }
  sort_dims_by_stride(shape, ops, 0);
  detail::loops::Walk<1> w;
  detail::loops::coalesce(shape, ops, w);
  base = ops.base[0];
  return w;
}

// One slot's fold in fixed blocks of kReduceBlock inputs (walk order), the
// blocks run in parallel and their partials merged in block order.
template <class T, class Op>
typename Op::Acc fold_slot_blocked(const Op& op, const Tensor& x, const ReducePlan& plan,
                                   int64_t slot) {
  using Acc = typename Op::Acc;
  char* base = nullptr;
  const detail::loops::Walk<1> w = slot_walk(x, plan, slot, base);
  const int64_t blocks = (plan.count + kReduceBlock - 1) / kReduceBlock;
  std::vector<Acc> partial(static_cast<size_t>(blocks), Op::init());
  detail::parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    simd_if_floating<T>([&] {
      for (int64_t blk = b; blk < e; ++blk) {
        Acc a = Op::init();
        auto kernel = [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
          a = Op::merge(a, fold_run(op, reinterpret_cast<const T*>(p[0]), n,
                                    s[0] / static_cast<int64_t>(sizeof(T))));
        };
        detail::walk_range(w, std::array<char*, 1>{base}, blk * kReduceBlock,
                           std::min(plan.count, (blk + 1) * kReduceBlock), kernel);
        partial[static_cast<size_t>(blk)] = a;
      }
    });
  });
  Acc result = Op::init();
  for (const Acc& a : partial) result = Op::merge(result, a);
  return result;
}

// Rows folded per pass over an accumulator chunk in fold_columns, and the
// chunk's width (8 KiB of doubles: it stays in L1 beside the rows' lines).
constexpr int64_t kColumnRows = 8;
constexpr int64_t kColumnChunk = 1024;

// A walk of (rows, columns) where the accumulator moves only along the
// contiguous columns (sum(dim=0) of a matrix, any reduction over the outer
// dims of a contiguous tensor): one row at a time, every input costs an
// accumulator load and store besides its own load. Folding kColumnRows rows
// into a register per slot cuts that traffic 8-fold. Each slot still takes
// its inputs one by one in row order, exactly as the row-by-row walk does,
// so the bits are unchanged; threads split the columns (disjoint slots).
template <class T, class Op>
void fold_columns(const Op& op, const detail::loops::Walk<2>& w, char* in,
                  typename Op::Acc* acc) {
  const int64_t rows = w.sizes[0], cols = w.sizes[1], rs = w.st[1][0];
  const int64_t grain = std::max<int64_t>(
      kColumnChunk, (detail::kParallelGrain + rows - 1) / rows / kColumnChunk * kColumnChunk);
  detail::parallel_for(cols, grain, [&](int64_t b, int64_t e) {
    simd_if_floating<T>([&] {
      for (int64_t c0 = b; c0 < e; c0 += kColumnChunk) {
        const int64_t c1 = std::min(e, c0 + kColumnChunk);
        int64_t r = 0;
        for (; r + kColumnRows <= rows; r += kColumnRows) {
          const T* x[kColumnRows];
          for (int64_t k = 0; k < kColumnRows; ++k) x[k] = reinterpret_cast<const T*>(in + (r + k) * rs);
          for (int64_t i = c0; i < c1; ++i) {
            auto a = acc[i];
            for (int64_t k = 0; k < kColumnRows; ++k) a = op.step(a, x[k][i]);
            acc[i] = a;
          }
        }
        for (; r < rows; ++r) {
          const T* x = reinterpret_cast<const T*>(in + r * rs);
          for (int64_t i = c0; i < c1; ++i) acc[i] = op.step(acc[i], x[i]);
        }
      }
    });
  });
}

// Folds x into acc (a contiguous buffer of keep_shape, pre-filled with
// Op::init()) in x's memory order.
template <class T, class Op>
void fold_into(const Op& op, const Tensor& x, const ReducePlan& plan, typename Op::Acc* acc) {
  using Acc = typename Op::Acc;
  if (x.numel() == 0) return;
  if (use_blocks(plan)) {
    const int64_t slots = plan.keep_shape.product();
    for (int64_t o = 0; o < slots; ++o) acc[o] = Op::merge(acc[o], fold_slot_blocked<T>(op, x, plan, o));
    return;
  }
  detail::StridedOperands<2> ops;
  set_accumulator(ops, 0, acc, plan, sizeof(Acc));
  set_input(ops, 1, x);
  Shape shape = x.shape();
  sort_dims_by_stride(shape, ops, 1);
  detail::loops::Walk<2> w;
  detail::loops::coalesce(shape, ops, w);
  if (w.nd == 2 && w.st[0][0] == 0 && w.st[0][1] == int64_t{sizeof(Acc)} &&
      w.st[1][1] == int64_t{sizeof(T)} && w.sizes[0] >= kColumnRows) {
    fold_columns<T>(op, w, ops.base[1], acc);
    return;
  }
  detail::for_each_strided<2, kWalkFlags<T>>(shape, ops, fold_kernel<T>(op));
}

// Accumulates x with Op into out (of dtype Out) and applies finish(acc) to
// each slot. Folds directly into the output when the types agree.
template <class T, class Op, class Out, class Finish>
void reduce_to(const Op& op, const Tensor& x, const ReducePlan& plan, Tensor& out,
               Finish&& finish) {
  using Acc = typename Op::Acc;
  const int64_t n = out.numel();
  Out* dst = out.data_ptr<Out>();
  if constexpr (std::is_same_v<Acc, Out>) {
    std::fill(dst, dst + n, Op::init());
    fold_into<T>(op, x, plan, dst);
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(finish(dst[i]));
  } else {
    std::vector<Acc> acc(static_cast<size_t>(n), Op::init());
    fold_into<T>(op, x, plan, acc.data());
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(finish(acc[i]));
  }
}

DType sum_dtype(DType d) { return is_floating(d) ? d : DType::Int64; }

void check_floating(const Tensor& x, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  DT_CHECK(is_floating(x.dtype()), op,
           ": input dtype must be floating point (float32 or float64), got ",
           x.dtype(), "; convert the input with .to(DType::Float32) first");
}

void check_nonempty_reduction(const Tensor& x, const ReducePlan& plan, const char* op) {
  for (int64_t d = 0; d < x.dim(); ++d) {
    DT_CHECK(!(plan.reduced[d] && x.shape()[d] == 0), op, ": cannot reduce over dim ", d,
             " of size 0 (input shape ", x.shape(), "); the reduction has no identity");
  }
}

template <template <class> class OpT>
Tensor sum_like(const Tensor& x, const DimVector& dims, bool keepdim, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  const ReducePlan plan = make_plan(x, dims, keepdim, op);
  Tensor out = Tensor::empty(plan.out_shape, sum_dtype(x.dtype()));
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    using Out = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    reduce_to<T, OpT<T>, Out>(OpT<T>{}, x, plan, out, [](auto a) { return a; });
  });
  return out;
}

template <template <class> class OpT>
Tensor extreme(const Tensor& x, const DimVector& dims, bool keepdim, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  const ReducePlan plan = make_plan(x, dims, keepdim, op);
  check_nonempty_reduction(x, plan, op);
  Tensor out = Tensor::empty(plan.out_shape, x.dtype());
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    reduce_to<T, OpT<T>, T>(OpT<T>{}, x, plan, out, [](auto a) { return a; });
  });
  return out;
}

// ---- argmax / argmin -----------------------------------------------------------

// True when v should replace the current best b: strictly more extreme (so the
// first occurrence wins), or the first NaN (NaN beats everything, as in PyTorch).
template <bool kMax, class T>
inline bool better(T v, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b != b) return false;
    if (v != v) return true;
  }
  if constexpr (kMax) return v > b;
  else return v < b;
}

// Index of the best element of a strided run of n >= 1 elements.
template <bool kMax, class T>
int64_t arg_run(const T* x, int64_t n, int64_t stride) {
  if constexpr (std::is_floating_point_v<T>) {
    // Contiguous: find the extreme with the vectorised reduction, then its
    // first occurrence with a plain search. Two cheap passes beat one pass
    // of compare-and-branch (about 4x on a 4096-element float row).
    if (stride == 1 && n >= 64) {
      const T target = extreme_run<T, kMax>(x, n);
      int64_t i = 0;
      if (target != target) {
        while (x[i] == x[i]) ++i;
      } else {
        while (x[i] != target) ++i;
      }
      return i;
    }
  }
  T best = x[0];
  int64_t at = 0;
  for (int64_t i = 1; i < n; ++i) {
    const T v = x[i * stride];
    if (better<kMax>(v, best)) {
      best = v;
      at = i;
    }
  }
  return at;
}

template <bool kMax>
Tensor arg_extreme(const Tensor& x, std::optional<int64_t> dim, bool keepdim, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  const int64_t ndim = x.dim();
  if (!dim) {
    DT_CHECK(x.numel() > 0, op, ": cannot take the ", op, " of an empty tensor (shape ", x.shape(),
             ")");
    Shape out_shape = keepdim ? Shape(static_cast<size_t>(ndim), 1) : Shape();
    Tensor out = Tensor::empty(out_shape, DType::Int64);
    const Tensor xc = x.contiguous();
    detail::dispatch_all(x.dtype(), op, [&]<class T>() {
      // Fixed blocks, each block's first best, then the first best of those
      // in block order: the first best overall, on any thread count.
      const T* xp = xc.data_ptr<T>();
      const int64_t n = xc.numel();
      const int64_t blocks = (n + kReduceBlock - 1) / kReduceBlock;
      std::vector<int64_t> at(static_cast<size_t>(blocks));
      detail::parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
        simd_if_floating<T>([&] {
          for (int64_t blk = b; blk < e; ++blk) {
            const int64_t lo = blk * kReduceBlock;
            at[static_cast<size_t>(blk)] = lo + arg_run<kMax>(xp + lo, std::min(kReduceBlock, n - lo), 1);
          }
        });
      });
      int64_t best = at[0];
      for (int64_t i : at) {
        if (better<kMax>(xp[i], xp[best])) best = i;
      }
      *out.data_ptr<int64_t>() = best;
    });
    return out;
  }
  const int64_t d = wrap_dim(*dim, std::max<int64_t>(ndim, 1), op);
  if (ndim == 0) return Tensor::zeros({}, DType::Int64);
  const int64_t len = x.shape()[d];
  DT_CHECK(len > 0, op, ": cannot reduce over dim ", d, " of size 0 (input shape ", x.shape(), ")");

  ReducePlan plan = make_plan(x, DimVector{d}, keepdim, op);
  Tensor out = Tensor::empty(plan.out_shape, DType::Int64);
  if (out.numel() == 0) return out;
  int64_t* idx = out.data_ptr<int64_t>();

  // Walking a row per output is cache-friendly when dim is the innermost in
  // memory; otherwise sweep whole slices x.select(dim, i) in memory order,
  // keeping the running best per output, so the input is still read sequentially.
  const int64_t dim_stride = x.strides()[d];
  bool dim_innermost = true;
  for (int64_t k = 0; k < ndim; ++k) {
    if (k != d && x.shape()[k] > 1 && x.strides()[k] < dim_stride) dim_innermost = false;
  }
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    if (dim_innermost || out.numel() == 1) {
      detail::StridedOperands<2> ops;
      set_accumulator(ops, 0, idx, plan, sizeof(int64_t));
      set_input(ops, 1, x);
      ops.strides[1][d] = 0;  // the kernel walks dim itself
      Shape shape = plan.keep_shape;
      sort_dims_by_stride(shape, ops, 1);
      using Ptrs = std::array<char*, 2>;
      using Strides = std::array<int64_t, 2>;
      detail::for_each_strided<2, kWalkFlags<T>>(
          shape, ops, [&](const Ptrs& p, int64_t n, const Strides& s) {
            int64_t* o = reinterpret_cast<int64_t*>(p[0]);
            const T* xs = reinterpret_cast<const T*>(p[1]);
            const int64_t so = s[0] / 8, sx = s[1] / static_cast<int64_t>(sizeof(T));
            for (int64_t i = 0; i < n; ++i) o[i * so] = arg_run<kMax>(xs + i * sx, len, dim_stride);
          });
      return;
    }
    // (not std::vector: vector<bool> has no data())
    std::unique_ptr<T[]> best(new T[static_cast<size_t>(out.numel())]);
    for (int64_t i = 0; i < len; ++i) {
      detail::StridedOperands<3> ops;
      set_accumulator(ops, 0, idx, plan, sizeof(int64_t));
      set_accumulator(ops, 1, best.get(), plan, sizeof(T));
      set_input(ops, 2, x);
      ops.base[2] += i * dim_stride * static_cast<int64_t>(sizeof(T));
      ops.strides[2][d] = 0;
      Shape shape = plan.keep_shape;
      sort_dims_by_stride(shape, ops, 2);
      using Ptrs = std::array<char*, 3>;
      using Strides = std::array<int64_t, 3>;
      // Writes operands 0 and 1, which share their layout.
      detail::for_each_strided<3, kWalkFlags<T>>(
          shape, ops, [&](const Ptrs& p, int64_t n, const Strides& s) {
            int64_t* o = reinterpret_cast<int64_t*>(p[0]);
            T* b = reinterpret_cast<T*>(p[1]);
            const T* xs = reinterpret_cast<const T*>(p[2]);
            const int64_t so = s[0] / 8, sb = s[1] / static_cast<int64_t>(sizeof(T)),
                          sx = s[2] / static_cast<int64_t>(sizeof(T));
            for (int64_t j = 0; j < n; ++j) {
              const T v = xs[j * sx];
              if (i == 0 || better<kMax>(v, b[j * sb])) {
                b[j * sb] = v;
                o[j * so] = i;
              }
            }
          });
    }
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(sum(detail::widen(x), dims, keepdim), x.dtype());
  return sum_like<SumOp>(x, dims, keepdim, "sum");
}

Tensor prod(const Tensor& x, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(prod(detail::widen(x), dims, keepdim), x.dtype());
  return sum_like<ProdOp>(x, dims, keepdim, "prod");
}

Tensor mean(const Tensor& x, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(mean(detail::widen(x), dims, keepdim), x.dtype());
  check_floating(x, "mean");
  const ReducePlan plan = make_plan(x, dims, keepdim, "mean");
  Tensor out = Tensor::empty(plan.out_shape, x.dtype());
  // count == 0 gives 0/0 = NaN, as in PyTorch.
  const double n = static_cast<double>(plan.count);
  detail::dispatch_floating(x.dtype(), "mean", [&]<class T>() {
    reduce_to<T, SumOp<T>, T>(SumOp<T>{}, x, plan, out, [n](double a) { return a / n; });
  });
  return out;
}

Tensor amax(const Tensor& x, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(amax(detail::widen(x), dims, keepdim), x.dtype());
  return extreme<MaxOp>(x, dims, keepdim, "amax");
}

Tensor amin(const Tensor& x, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(amin(detail::widen(x), dims, keepdim), x.dtype());
  return extreme<MinOp>(x, dims, keepdim, "amin");
}

Tensor var(const Tensor& x, const DimVector& dims, int64_t correction, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(var(detail::widen(x), dims, correction, keepdim), x.dtype());
  check_floating(x, "var");
  const ReducePlan plan = make_plan(x, dims, keepdim, "var");
  Tensor out = Tensor::empty(plan.out_shape, x.dtype());
  // Two passes (mean, then squared deviations from it) rather than one pass
  // of sum and sum of squares: the one-pass form cancels catastrophically
  // when the mean is large against the spread, even in double.
  const double n = static_cast<double>(plan.count);
  const double denom = std::max(n - static_cast<double>(correction), 0.0);
  const size_t slots = static_cast<size_t>(out.numel());
  detail::dispatch_floating(x.dtype(), "var", [&]<class T>() {
    std::vector<double> centre(slots, 0.0);
    fold_into<T>(SumOp<T>{}, x, plan, centre.data());
    for (double& c : centre) c /= n;
    std::vector<double> m2(slots, 0.0);
    if (x.numel() > 0 && use_blocks(plan)) {
      for (size_t o = 0; o < slots; ++o)
        m2[o] = fold_slot_blocked<T>(SquaredDevOp<T>{centre[o]}, x, plan, static_cast<int64_t>(o));
    } else if (x.numel() > 0) {
      detail::StridedOperands<3> ops;
      set_accumulator(ops, 0, m2.data(), plan, sizeof(double));
      set_accumulator(ops, 1, centre.data(), plan, sizeof(double));
      set_input(ops, 2, x);
      Shape shape = x.shape();
      sort_dims_by_stride(shape, ops, 2);
      using Ptrs = std::array<char*, 3>;
      using Strides = std::array<int64_t, 3>;
      detail::for_each_strided<3, kWalkFlags<T>>(
          shape, ops, [&](const Ptrs& p, int64_t len, const Strides& s) {
            double* acc = reinterpret_cast<double*>(p[0]);
            const double* c = reinterpret_cast<const double*>(p[1]);
            const T* xs = reinterpret_cast<const T*>(p[2]);
            const int64_t sx = s[2] / static_cast<int64_t>(sizeof(T));
            if (s[0] == 0) {
              *acc += fold_run(SquaredDevOp<T>{*c}, xs, len, sx);
              return;
            }
            const int64_t sa = s[0] / 8;  // the two buffers share strides
            if (sa == 1 && sx == 1) {
              for (int64_t i = 0; i < len; ++i) {
                const double dv = static_cast<double>(xs[i]) - c[i];
                acc[i] += dv * dv;
              }
            } else {
              for (int64_t i = 0; i < len; ++i) {
                const double dv = static_cast<double>(xs[i * sx]) - c[i * sa];
                acc[i * sa] += dv * dv;
              }
            }
          });
    }
    T* dst = out.data_ptr<T>();
    for (size_t i = 0; i < slots; ++i) dst[i] = static_cast<T>(m2[i] / denom);
  });
  return out;
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (detail::is_half_tensor(x)) return argmax(detail::widen(x), dim, keepdim);
  return arg_extreme<true>(x, dim, keepdim, "argmax");
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (detail::is_half_tensor(x)) return argmin(detail::widen(x), dim, keepdim);
  return arg_extreme<false>(x, dim, keepdim, "argmin");
}

}  // namespace dtensor
