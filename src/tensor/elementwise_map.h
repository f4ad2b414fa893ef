// Internal to the elementwise ops (src/tensor/elementwise_*.cc): the loop
// that applies a functor over broadcast operands (Map) and the dtype dispatch
// over the types an op supports.
//
// These headers keep their definitions in an anonymous namespace, as when
// the ops were one file: each op file compiles its own copies, with the
// code generation the one file had. With external linkage, the contiguous
// float32 add of NaN + NaN returned the payload of the other operand than
// the tiled path does (GCC may swap the operands of a commutative add), and
// tests/tensor/transpose_test.cc compares the two paths bit for bit.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dtensor/tensor.h"
#include "tensor/convert_half.h"
#include "tensor/dispatch.h"
#include "tensor/loops.h"
#include "tensor/simd.h"

namespace dtensor {
namespace {

// ---- the loop -------------------------------------------------------------------------

template <class T>
inline T load(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

// body(i) for i in [0, n), on the fast paths of Map. The first loop's trip
// count is a multiple of 16 so that GCC vectorises it even at -O2, whose
// "very cheap" cost model refuses loops that would need a scalar epilogue
// (that alone makes a contiguous add 2x slower in RelWithDebInfo builds).
template <class Body>
inline void vector_loop(int64_t n, Body body) {
  const int64_t main = n & ~int64_t{15};
#pragma GCC ivdep
  for (int64_t i = 0; i < main; ++i) body(i);
  for (int64_t i = main; i < n; ++i) body(i);
}

// out[i] = op(in_0[i], ..., in_k[i]) over out's shape, each input broadcast
// to it; R is out's element type and In... the inputs'. The runs handed over
// by for_each_strided take one of three paths: all operands contiguous (a
// plain loop the compiler vectorises), one input broadcast along the run
// (stride 0: its value is loaded once), or the general strided walk.
//
// The fast loops use `#pragma GCC ivdep` rather than __restrict: in-place
// ops pass self as both the output and an input, and restrict would make
// that exact aliasing undefined. What does hold, and is all the vectoriser
// needs, is that no iteration reads what another one writes; callers
// guarantee it by copying inputs that overlap the output partially.
template <class R, class... In>
struct Map {
  static constexpr size_t N = sizeof...(In) + 1;
  using Ptrs = std::array<char*, N>;
  using Strides = std::array<int64_t, N>;
  static constexpr Strides kContiguous{static_cast<int64_t>(sizeof(R)),
                                       static_cast<int64_t>(sizeof(In))...};

  template <class Op, class... Ts>
  static void apply(const Tensor& out, Op op, const Ts&... ins) {
    static_assert(sizeof...(Ts) == sizeof...(In));
    // Small and contiguous, every operand of the output's shape (most ops
    // of a small model, a DTensor's shards): the one contiguous run the
    // walk below makes of it, called directly. The walk's set-up (operands,
    // coalescing, tiles, the type-erased kernel) was half of an 8x8 add's
    // instructions. The same kernel on the same run gives the same bits;
    // larger tensors take the walk, which splits them over threads.
    const int64_t n = out.numel();
    if (n > 0 && n < 2 * detail::kParallelGrain && out.is_contiguous() &&
        ((ins.shape() == out.shape() && ins.is_contiguous()) && ...)) {
      const Ptrs p{static_cast<char*>(out.raw_data()), static_cast<char*>(ins.raw_data())...};
      run(std::index_sequence_for<In...>{}, op, p, n, kContiguous);
      return;
    }
    detail::StridedOperands<N> ops;
    size_t k = 0;
    detail::set_operand(ops, k++, out, out.shape());
    (detail::set_operand(ops, k++, ins, out.shape()), ...);
    auto kernel = [op](const Ptrs& p, int64_t n, const Strides& st) {
      run(std::index_sequence_for<In...>{}, op, p, n, st);
    };
    detail::for_each_strided<N, detail::kOverwrite>(out.shape(), ops, kernel);
  }

  // Whether the contiguous loop gets a copy per instruction set (simd.h)
  // rather than the baseline's only: for functors that declare
  // `kWide<R>`, whose arithmetic per element (the exp polynomial)
  // outweighs its memory traffic. add and the like are bound by the memory
  // bus on the baseline already. Their files turn FMA contraction off, as
  // simd.h asks.
  //
  // Only the contiguous loop is copied, and the level is picked per run
  // (simd_dispatch_run): copying the whole walk, with the kernel's
  // broadcast and strided paths inlined into its tile and row loops, made
  // elementwise_unary.cc take 50 s to compile, a third of a first
  // `make run`, for paths that do not vectorise anyway.
  template <class Op>
  static constexpr bool wide() {
    if constexpr (requires { Op::template kWide<R>; }) return Op::template kWide<R>;
    else return false;
  }

  // o[i] = op(x_0[i], ...) for i in [0, n), all operands contiguous.
  template <class Op, size_t... K>
  static void contiguous(std::index_sequence<K...>, Op op, const Ptrs& p, int64_t n) {
    R* o = reinterpret_cast<R*>(p[0]);
    const std::tuple<const In*...> x(reinterpret_cast<const In*>(p[K + 1])...);
    auto loop = [=] { vector_loop(n, [&](int64_t i) { o[i] = op(std::get<K>(x)[i]...); }); };
    if constexpr (wide<Op>()) detail::simd_dispatch_run(n, loop);
    else loop();
  }

  template <class Op, size_t... K>
  static void run(std::index_sequence<K...> k, Op op, const Ptrs& p, int64_t n, const Strides& st) {
    if (st == kContiguous) return contiguous(k, op, p, n);
    R* o = reinterpret_cast<R*>(p[0]);
    if constexpr (sizeof...(In) == 1) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      if (st[0] == kContiguous[0] && st[1] == 0) {
        const R v = op(load<A>(p[1]));
        vector_loop(n, [&](int64_t i) { o[i] = v; });
        return;
      }
    } else if constexpr (sizeof...(In) == 2) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      if (st[0] == kContiguous[0] && st[1] == kContiguous[1] && st[2] == 0) {
        const A* x = reinterpret_cast<const A*>(p[1]);
        const B y = load<B>(p[2]);
        vector_loop(n, [&](int64_t i) { o[i] = op(x[i], y); });
        return;
      }
      if (st[0] == kContiguous[0] && st[1] == 0 && st[2] == kContiguous[2]) {
        const A x = load<A>(p[1]);
        const B* y = reinterpret_cast<const B*>(p[2]);
        vector_loop(n, [&](int64_t i) { o[i] = op(x, y[i]); });
        return;
      }
    }
    Ptrs q = p;
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<R*>(q[0]) = op(load<In>(q[K + 1])...);
      for (size_t k = 0; k < N; ++k) q[k] += st[k];
    }
  }
};

// ---- 16-bit storage, float32 arithmetic -----------------------------------------------

// Map for operands that all hold one 16-bit dtype (`half`: bfloat16 or
// float16) while the op computes in float32, PyTorch's CPU semantics
// (half_compute.h). R is float (rounded into the 16-bit output) or bool (a
// comparison's output, stored as it is); In... are float.
//
// Each run for_each_strided hands over is cut into blocks of kBlock
// elements: the inputs' blocks are widened into float32 buffers on the
// stack (convert_half.h's vector loops; a broadcast input is one value
// repeated), Map<R, In...>::contiguous, the float32 op's own loop,
// computes the block, and the block rounds into the output once. The bits
// are those of widening whole tensors, running the float32 op and rounding
// its result (the same op on the same values, rounded by the same
// function), without the float32 temporaries: their traffic and page
// faults made a bfloat16 add 2.6x slower than float32's where it moves
// half the bytes.
template <class R, class... In>
struct HalfMap {
  using F = Map<R, In...>;
  static constexpr size_t N = F::N;
  static constexpr int64_t kBlock = 256;

  template <class Op, class... Ts>
  static void apply(DType half, const Tensor& out, Op op, const Ts&... ins) {
    static_assert(sizeof...(Ts) == sizeof...(In));
    detail::StridedOperands<N> ops;
    size_t k = 0;
    detail::set_operand(ops, k++, out, out.shape());
    (detail::set_operand(ops, k++, ins, out.shape()), ...);
    auto kernel = [op, half](const typename F::Ptrs& p, int64_t n,
                             const typename F::Strides& st) { blocks(half, op, p, n, st); };
    detail::for_each_strided<N, detail::kOverwrite>(out.shape(), ops, kernel);
  }

  template <class Op>
  static void blocks(DType half, Op op, const typename F::Ptrs& p, int64_t n,
                     const typename F::Strides& st) {
    alignas(64) float in[N - 1][kBlock];
    alignas(64) R res[kBlock];
    typename F::Ptrs q;
    q[0] = reinterpret_cast<char*>(res);
    for (size_t k = 1; k < N; ++k) q[k] = reinterpret_cast<char*>(in[k - 1]);
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      for (size_t k = 1; k < N; ++k) {
        if (st[k] != 0) {
          widen_block(half, p[k] + i0 * st[k], st[k], in[k - 1], m);
        } else if (i0 == 0) {
          // A broadcast input is widened once and repeated through the
          // buffer, so the block needs only Map's contiguous loop.
          widen_block(half, p[k], 0, in[k - 1], 1);
          std::fill(in[k - 1] + 1, in[k - 1] + std::min(kBlock, n), in[k - 1][0]);
        }
      }
      F::contiguous(std::index_sequence_for<In...>{}, op, q, m);
      store_block(half, res, p[0] + i0 * st[0], st[0], m);
    }
  }

  // m values of `half` from src (byte stride `stride`) into float dst.
  static void widen_block(DType half, const char* src, int64_t stride, float* dst, int64_t m) {
    if (half == DType::BFloat16) widen_as<BFloat16>(src, stride, dst, m);
    else widen_as<Float16>(src, stride, dst, m);
  }

  template <class H>
  static void widen_as(const char* src, int64_t stride, float* dst, int64_t m) {
    if (stride == static_cast<int64_t>(sizeof(H)))
      return detail::half_to_float(reinterpret_cast<const H*>(src), dst, m);
    for (int64_t i = 0; i < m; ++i) dst[i] = static_cast<float>(load<H>(src + i * stride));
  }

  static void store_block(DType half, const R* res, char* dst, int64_t stride, int64_t m) {
    if constexpr (std::is_same_v<R, float>) {
      if (half == DType::BFloat16) store_as<BFloat16>(res, dst, stride, m);
      else store_as<Float16>(res, dst, stride, m);
    } else {
      for (int64_t i = 0; i < m; ++i) *reinterpret_cast<R*>(dst + i * stride) = res[i];
    }
  }

  template <class H>
  static void store_as(const float* res, char* dst, int64_t stride, int64_t m) {
    if (stride == static_cast<int64_t>(sizeof(H)))
      return detail::float_to_half(res, reinterpret_cast<H*>(dst), m);
    for (int64_t i = 0; i < m; ++i) *reinterpret_cast<H*>(dst + i * stride) = H(res[i]);
  }
};

// ---- dtype dispatch over the types an op supports -------------------------------------

enum class Types { All, Numeric, Floating };

template <Types kTypes, class F>
decltype(auto) dispatch(DType dtype, const char* op, F&& f) {
  if constexpr (kTypes == Types::All)
    return detail::dispatch_all(dtype, op, f);
  else if constexpr (kTypes == Types::Numeric)
    return detail::dispatch_numeric(dtype, op, f);
  else
    return detail::dispatch_floating(dtype, op, f);
}

}  // namespace
}  // namespace dtensor
