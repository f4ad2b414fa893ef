// Scans, sorting and logical reductions on plain tensors: cumsum, cumprod, sort,
// topk, logsumexp, all, any; and the internal pick/place-by-index kernels
// of tensor/scan.h.
//
// The scans and sorts work on a contiguous copy seen as (outer, len,
// inner): element (o, i, j) sits at (o * len + i) * inner + j, and a "row"
// is the len elements of one (o, j) along the dim. These kernels are plain
// loops: each is one pass over the data, and the DTensor ops call them on
// every shard in parallel already. logsumexp, all and any are composed of
// the reductions (reduce.cc), which carry the vectorised and threaded walks.
#include "tensor/scan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"
#include "tensor/half_compute.h"

namespace dtensor {
namespace {

// The (outer, len, inner) view of `shape` along dim d (d already wrapped;
// a 0-d shape is one element).
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
};

Rows rows_of(const Shape& shape, int64_t d) {
  Rows r;
  for (int64_t k = 0; k < static_cast<int64_t>(shape.size()); ++k) {
    if (k < d) r.outer *= shape[k];
    else if (k == d) r.len = shape[k];
    else r.inner *= shape[k];
  }
  return r;
}

int64_t checked_dim(const Tensor& x, int64_t dim, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  return wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
}

// The size of the (wrapped) dim d: 1 for a 0-d tensor.
int64_t dim_size(const Tensor& x, int64_t d) { return x.dim() == 0 ? 1 : x.shape()[d]; }

// The checks the reductions make on `dims`, under this op's name (the
// composed reductions below would otherwise report them as sum's or amax's).
void check_dims(const Tensor& x, const DimVector& dims, const char* op) {
  DT_CHECK(x.defined(), op, ": input tensor is undefined");
  bool seen[kMaxDims] = {};
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, std::max<int64_t>(x.dim(), 1), op);
    DT_CHECK(!seen[w], op, ": dim ", w, " appears more than once in dims ", dims,
             " (input shape ", x.shape(), ")");
    seen[w] = true;
  }
}

// The running combinations of scan: a sum from 0 (cumsum), a product from
// 1 (cumprod). Integers combine as uint64_t so that overflow wraps (as
// PyTorch's) without UB.
struct ScanSum {
  static constexpr int kIdentity = 0;
  template <class A>
  static A apply(A a, A b) {
    return a + b;
  }
};
struct ScanProduct {
  static constexpr int kIdentity = 1;
  template <class A>
  static A apply(A a, A b) {
    return a * b;
  }
};

// Inclusive running combination along d, forward or backward; float32 runs
// in double as PyTorch's CPU cumsum and cumprod do.
template <class Combine>
Tensor scan(const Tensor& x, int64_t d, bool reverse, const char* op) {
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  Tensor out = Tensor::empty(x.shape(), out_dtype);
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous();
  const Rows r = rows_of(x.shape(), d);
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    using Acc = detail::acc_type_t<T>;
    using Out = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    const T* src = xc.data_ptr<T>();
    Out* dst = out.data_ptr<Out>();
    std::vector<Acc> acc(static_cast<size_t>(r.inner));
    for (int64_t o = 0; o < r.outer; ++o) {
      std::fill(acc.begin(), acc.end(), Acc(Combine::kIdentity));
      for (int64_t step = 0; step < r.len; ++step) {
        const int64_t i = reverse ? r.len - 1 - step : step;
        const int64_t base = (o * r.len + i) * r.inner;
        for (int64_t j = 0; j < r.inner; ++j) {
          Acc& a = acc[static_cast<size_t>(j)];
          if constexpr (std::is_integral_v<Acc>)
            a = static_cast<Acc>(Combine::apply(static_cast<uint64_t>(a),
                                                static_cast<uint64_t>(src[base + j])));
          else
            a = Combine::apply(a, static_cast<Acc>(src[base + j]));
          dst[base + j] = static_cast<Out>(a);
        }
      }
    }
  });
  return out;
}

// Whether a goes before b in ascending order with NaN above every number.
// Equal values (and two NaNs) are unordered: the index breaks the tie.
template <class T>
bool below(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return false;
    if (b != b) return true;
  }
  return a < b;
}

// The first k of each row along d in order (largest first when `largest`),
// ties to the lower index: a strict total order on (value, index), so a
// partial sort gives exactly the first k of the stable full sort.
ValuesIndices<Tensor> select_rows(const Tensor& x, int64_t d, int64_t k, bool largest,
                                  const char* op) {
  Shape out_shape = x.shape();
  if (x.dim() > 0) out_shape[d] = k;
  ValuesIndices<Tensor> out{Tensor::empty(out_shape, x.dtype()),
                            Tensor::empty(out_shape, DType::Int64)};
  if (out.values.numel() == 0) return out;
  const Tensor xc = x.contiguous();
  const Rows r = rows_of(x.shape(), d);
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    const T* src = xc.data_ptr<T>();
    T* values = out.values.data_ptr<T>();
    int64_t* indices = out.indices.data_ptr<int64_t>();
    std::vector<int64_t> order(static_cast<size_t>(r.len));
    std::vector<T> row(static_cast<size_t>(r.len));
    auto before = [&](int64_t a, int64_t b) {
      const T va = row[static_cast<size_t>(a)], vb = row[static_cast<size_t>(b)];
      if (largest ? below(vb, va) : below(va, vb)) return true;
      if (largest ? below(va, vb) : below(vb, va)) return false;
      return a < b;
    };
    for (int64_t o = 0; o < r.outer; ++o) {
      for (int64_t j = 0; j < r.inner; ++j) {
        for (int64_t i = 0; i < r.len; ++i)
          row[static_cast<size_t>(i)] = src[(o * r.len + i) * r.inner + j];
        std::iota(order.begin(), order.end(), int64_t{0});
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        for (int64_t i = 0; i < k; ++i) {
          const int64_t at = (o * k + i) * r.inner + j;
          indices[at] = order[static_cast<size_t>(i)];
          values[at] = row[static_cast<size_t>(order[static_cast<size_t>(i)])];
        }
      }
    }
  });
  return out;
}

// The out shape of a reduction over dims (already checked).
Shape reduced_shape(const Tensor& x, const DimVector& dims, bool keepdim) {
  bool reduced[kMaxDims] = {};
  for (int64_t d : dims)
    if (x.dim() > 0) reduced[d < 0 ? d + x.dim() : d] = true;
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!dims.empty() && !reduced[d]) out.push_back(x.shape()[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// all: no element is zero; any: some element is nonzero. Counting (with
// sum's walk) gives both, and the identity of an empty slice for free.
Tensor logical(const Tensor& x, const DimVector& dims, bool keepdim, bool every,
               const char* op) {
  check_dims(x, dims, op);
  const Tensor count = sum(every ? eq(x, 0) : ne(x, 0), dims, keepdim);
  return every ? eq(count, 0) : gt(count, 0);
}

void check_index(const Tensor& index, const Shape& want, const char* op) {
  DT_CHECK(index.dtype() == DType::Int64, op, ": index must be int64, got ", index.dtype());
  DT_CHECK(index.shape() == want, op, ": index of shape ", index.shape(), " where ", want,
           " was expected");
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  if (detail::is_half_tensor(x)) return detail::round_to(cumsum(detail::widen(x), dim), x.dtype());
  return scan<ScanSum>(x, checked_dim(x, dim, "cumsum"), false, "cumsum");
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  if (detail::is_half_tensor(x)) return detail::round_to(cumprod(detail::widen(x), dim), x.dtype());
  return scan<ScanProduct>(x, checked_dim(x, dim, "cumprod"), false, "cumprod");
}

ValuesIndices<Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  if (detail::is_half_tensor(x))
    return detail::round_to(sort(detail::widen(x), dim, descending, stable), x.dtype());
  const int64_t d = checked_dim(x, dim, "sort");
  return select_rows(x, d, dim_size(x, d), descending, "sort");
}

ValuesIndices<Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest,
                           bool sorted) {
  if (detail::is_half_tensor(x))
    return detail::round_to(topk(detail::widen(x), k, dim, largest, sorted), x.dtype());
  const int64_t d = checked_dim(x, dim, "topk");
  const int64_t n = dim_size(x, d);
  // A 0-d result cannot hold no element: k = 0 needs a dim to be empty along.
  const int64_t lo = x.dim() == 0 ? 1 : 0;
  DT_CHECK(k >= lo && k <= n, "topk: k = ", k, " is out of range for dim ", d, " of size ", n,
           " (input shape ", x.shape(), "; expected ", lo, " <= k <= ", n, ")");
  return select_rows(x, d, k, largest, "topk");
}

// PyTorch's formula: m = amax with infinite maxima replaced by 0, then
// log(sum(exp(x - m))) + m. An all -inf slice gives log(0) + 0 = -inf, a
// +inf gives log(inf) = inf, a NaN spreads through amax.
Tensor logsumexp(const Tensor& x, const DimVector& dims, bool keepdim) {
  if (detail::is_half_tensor(x))
    return detail::round_to(logsumexp(detail::widen(x), dims, keepdim), x.dtype());
  check_dims(x, dims, "logsumexp");
  const Tensor xf = is_floating(x.dtype()) ? x : x.to(DType::Float32);
  const Shape out_shape = reduced_shape(x, dims, keepdim);
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool reduced =
        dims.empty() || std::find_if(dims.begin(), dims.end(), [&](int64_t e) {
                          return e == d || e + x.dim() == d;
                        }) != dims.end();
    // sum(exp(nothing)) = 0: amax has no identity, so answer before it runs.
    if (reduced && x.shape()[d] == 0)
      return Tensor::full(out_shape, -std::numeric_limits<double>::infinity(), xf.dtype());
  }
  Tensor m = amax(xf, dims, true);
  m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0);
  const Tensor s = log(sum(exp(sub(xf, m)), dims, keepdim));
  return add(s, m.reshape(out_shape));
}

Tensor all(const Tensor& x, const DimVector& dims, bool keepdim) {
  return logical(x, dims, keepdim, true, "all");
}

Tensor any(const Tensor& x, const DimVector& dims, bool keepdim) {
  return logical(x, dims, keepdim, false, "any");
}

namespace detail {

Tensor reverse_cumsum(const Tensor& x, int64_t dim) {
  if (is_half_tensor(x)) return round_to(reverse_cumsum(widen(x), dim), x.dtype());
  return scan<ScanSum>(x, checked_dim(x, dim, "cumsum"), true, "cumsum");
}

Tensor take_along_dim(const Tensor& x, const Tensor& index, int64_t dim) {
  const int64_t d = checked_dim(x, dim, "take_along_dim");
  DT_CHECK(index.dim() == x.dim(), "take_along_dim: index has ", index.dim(),
           " dims, the input ", x.dim());
  Shape want = x.shape();
  if (x.dim() > 0) want[d] = index.shape()[d];
  check_index(index, want, "take_along_dim");
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  const Rows r = rows_of(x.shape(), d);
  const int64_t k = dim_size(index, d);
  dispatch_storage(x.dtype(), "take_along_dim", [&]<class T>() {
    const T* src = xc.data_ptr<T>();
    const int64_t* idx = ic.data_ptr<int64_t>();
    T* dst = out.data_ptr<T>();
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < r.inner; ++j) {
          const int64_t at = (o * k + i) * r.inner + j;
          const int64_t from = idx[at];
          DT_CHECK(from >= 0 && from < r.len, "take_along_dim: index ", from,
                   " is out of range for dim ", d, " of size ", r.len);
          dst[at] = src[(o * r.len + from) * r.inner + j];
        }
  });
  return out;
}

Tensor scatter_add_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                             const Shape& shape) {
  DT_CHECK(src.defined(), "scatter_add: source tensor is undefined");
  if (is_half_tensor(src))
    return round_to(scatter_add_along_dim(widen(src), index, dim, shape), src.dtype());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(static_cast<int64_t>(shape.size()), 1),
                             "scatter_add");
  check_index(index, src.shape(), "scatter_add");
  Tensor out = Tensor::zeros(shape, src.dtype());
  if (src.numel() == 0 || out.numel() == 0) return out;
  const Tensor sc = src.contiguous(), ic = index.contiguous();
  const Rows r = rows_of(shape, d);
  const int64_t k = dim_size(src, d);
  dispatch_all(src.dtype(), "scatter_add", [&]<class T>() {
    const T* from = sc.data_ptr<T>();
    const int64_t* idx = ic.data_ptr<int64_t>();
    T* dst = out.data_ptr<T>();
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < r.inner; ++j) {
          const int64_t at = (o * k + i) * r.inner + j;
          const int64_t to = idx[at];
          DT_CHECK(to >= 0 && to < r.len, "scatter_add: index ", to, " is out of range for dim ",
                   d, " of size ", r.len);
          T& slot = dst[(o * r.len + to) * r.inner + j];
          if constexpr (std::is_same_v<T, bool>) slot = slot || from[at];
          else slot = static_cast<T>(slot + from[at]);
        }
  });
  return out;
}

}  // namespace detail
}  // namespace dtensor
