// gather, scatter, scatter_add, index_add and index_put (with the read
// x[indices] that index_put's gradient uses): the indexed reads and writes
// of PyTorch, on every dtype.
//
// Every kernel works on contiguous copies with explicit offsets: the index
// decides where each element goes, so there is no regular stride pattern
// to exploit. Writes happen in index order (row-major over the index or
// the result), which makes duplicate indices deterministic: the last write
// wins, and accumulations add in that order.
#include "tensor/indexing.h"

#include <algorithm>

#include "tensor/dispatch.h"
#include "tensor/half_compute.h"

namespace dtensor {
namespace {

// Calls f(pos) for every position of `shape` in row-major order.
template <class F>
void for_each_position(const Shape& shape, F f) {
  if (checked_numel(shape, "indexing") == 0) return;
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t pos[kMaxDims] = {};
  for (;;) {
    f(static_cast<const int64_t*>(pos));
    int64_t d = nd - 1;
    while (d >= 0 && ++pos[d] == shape[static_cast<size_t>(d)]) pos[d--] = 0;
    if (d < 0) return;
  }
}

int64_t offset_of(const int64_t* pos, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = 0; d < strides.size(); ++d) off += pos[d] * strides[d];
  return off;
}

// a + b as PyTorch adds in place: bool is "or", int64 wraps around.
template <class T>
T add_values(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else return a + b;
}

template <class T>
T mul_values(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a && b;
  else if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else return a * b;
}

// 0-d tensors act as 1-d of size 1 (gather/scatter/index_add accept them).
Shape at_least_1d(const Shape& s) { return s.empty() ? Shape{1} : s; }

// An index value checked against the size of the dim it indexes.
int64_t checked_index(int64_t i, int64_t size, int64_t dim, const char* op, bool negative_ok) {
  DT_CHECK(i < size && i >= (negative_ok ? -size : 0), op, ": index ", i,
           " is out of range for dim ", dim, " of size ", size, " (expected ",
           negative_ok ? "-size <= index < size" : "0 <= index < size", ")");
  return i < 0 ? i + size : i;
}

// A fresh contiguous copy of x (the output the scatters write into).
Tensor copy_of(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  out.copy_(x);
  return out;
}

enum class Write { Assign, Add };

// out[index along dim] (op)= src for every element of index (src of
// index's shape or bigger; a null src writes `value`).
Tensor scatter_impl(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                    const Tensor* src, Scalar value, Write write) {
  const int64_t d = detail::check_gather_args(op, x.shape(), dim, index.shape(), index.dtype());
  if (src != nullptr) detail::check_scatter_src(op, x.dtype(), index.shape(), src->shape(), src->dtype());
  if (is_half(x.dtype())) {
    // In float32 (scatter_add's sums there, each element rounded once).
    const Tensor wide_src = src != nullptr ? detail::widen(*src) : Tensor();
    return detail::round_to(scatter_impl(op, detail::widen(x), dim, index,
                                         src != nullptr ? &wide_src : nullptr, value, write),
                            x.dtype());
  }
  Tensor out = copy_of(x);
  const Shape xs = at_least_1d(x.shape()), is = at_least_1d(index.shape());
  const Shape x_strides = contiguous_strides(xs);
  const Tensor idx = index.contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  const Tensor s = src != nullptr ? src->contiguous() : Tensor();
  const Shape s_strides = src != nullptr ? contiguous_strides(at_least_1d(src->shape())) : Shape();
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    T* o = out.data_ptr<T>();
    const T* sp = src != nullptr ? s.data_ptr<T>() : nullptr;
    const T v = value.to<T>();
    int64_t k = 0;
    for_each_position(is, [&](const int64_t* pos) {
      const int64_t i = checked_index(ip[k++], xs[d], d, op, false);
      const int64_t off = offset_of(pos, x_strides) + (i - pos[d]) * x_strides[d];
      const T from = sp != nullptr ? sp[offset_of(pos, s_strides)] : v;
      o[off] = write == Write::Add ? add_values(o[off], from) : from;
    });
  });
  return out;
}

// The index tensors of index_put as int64 tensors, one entry per dim of x
// (a bool mask over k dims becomes the k coordinate tensors of its nonzero
// positions, row-major; undefined = a whole dim).
std::vector<Tensor> expand_indices(const Tensor& x, const std::vector<std::optional<Tensor>>& in,
                                   const char* op) {
  std::vector<Tensor> out;
  for (const std::optional<Tensor>& t : in) {
    if (!t || !t->defined()) {
      out.emplace_back();
      continue;
    }
    if (t->dtype() == DType::Int64) {
      out.push_back(*t);
      continue;
    }
    DT_CHECK(t->dtype() == DType::Bool, op, ": index tensors must be int64 or bool, got ",
             t->dtype(), " for index ", out.size());
    const int64_t at = static_cast<int64_t>(out.size()), k = t->dim();
    DT_CHECK(at + k <= x.dim(), op, ": too many indices for a tensor of shape ", x.shape(),
             ": a bool index of shape ", t->shape(), " at dim ", at);
    for (int64_t j = 0; j < k; ++j)
      DT_CHECK(t->shape()[j] == x.shape()[at + j], op, ": the bool index of shape ", t->shape(),
               " does not match the indexed shape ", x.shape(), " at dim ", at + j);
    const Tensor mask = t->contiguous();
    const bool* m = mask.data_ptr<bool>();
    std::vector<std::vector<int64_t>> coords(static_cast<size_t>(k));
    int64_t n = 0;
    for_each_position(mask.shape(), [&](const int64_t* pos) {
      if (m[n++])
        for (int64_t j = 0; j < k; ++j) coords[j].push_back(pos[j]);
    });
    // (PyTorch reads a 0-d mask as a new dim of size 1 or 0; not supported.)
    DT_CHECK(k > 0, op, ": 0-d bool indices are not supported (got one at dim ", at, ")");
    for (int64_t j = 0; j < k; ++j) out.push_back(Tensor::from_vector(coords[j]));
  }
  DT_CHECK(static_cast<int64_t>(out.size()) <= x.dim(), op, ": too many indices for a tensor of shape ",
           x.shape(), ": got ", out.size());
  out.resize(static_cast<size_t>(x.dim()));
  return out;
}

// Calls f(x offset, result position k) for every element of x[indices]
// (int64 index tensors, one per dim of x) in row-major order of the result.
template <class F>
void walk_advanced(const char* op, const Tensor& x, const std::vector<Tensor>& idx,
                   const detail::AdvancedIndex& plan, F f) {
  const int64_t nd = x.dim();
  const Shape strides = contiguous_strides(x.shape());
  std::vector<Tensor> expanded(static_cast<size_t>(nd));
  std::vector<const int64_t*> ptr(static_cast<size_t>(nd), nullptr);
  for (int64_t d = 0; d < nd; ++d)
    if (idx[d].defined()) {
      expanded[d] = idx[d].expand(plan.broadcast).contiguous();
      ptr[d] = expanded[d].data_ptr<int64_t>();
    }
  const Shape b_strides = contiguous_strides(plan.broadcast);
  int64_t k = 0;
  for_each_position(plan.result, [&](const int64_t* pos) {
    const int64_t b = offset_of(pos + plan.first, b_strides);
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t coord = ptr[d] != nullptr
                                ? checked_index(ptr[d][b], x.shape()[d], d, op, true)
                                : pos[plan.result_dim[d]];
      off += coord * strides[d];
    }
    f(off, k++);
  });
}

}  // namespace

namespace detail {

int64_t check_gather_args(const char* op, const Shape& x, int64_t dim, const Shape& index,
                          DType index_dtype) {
  DT_CHECK(index_dtype == DType::Int64, op, ": index must be int64, got ", index_dtype);
  DT_CHECK(index.size() == x.size(), op, ": index must have as many dims as the input (",
           x.size(), "), got index shape ", index, " for input shape ", x);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(static_cast<int64_t>(x.size()), 1), op);
  for (size_t k = 0; k < x.size(); ++k)
    DT_CHECK(static_cast<int64_t>(k) == d || index[k] <= x[k], op, ": index.size(", k, ") = ",
             index[k], " exceeds the input's size ", x[k], " (expected index.size(d) <= ",
             "input.size(d) for d != dim ", d, "; index shape ", index, ", input shape ", x, ")");
  return d;
}

void check_scatter_src(const char* op, DType x_dtype, const Shape& index, const Shape& src,
                       DType src_dtype) {
  DT_CHECK(src_dtype == x_dtype, op, ": src must have the input's dtype ", x_dtype, ", got ",
           src_dtype);
  DT_CHECK(src.size() == index.size(), op, ": src must have as many dims as index (",
           index.size(), "), got src shape ", src, " for index shape ", index);
  for (size_t k = 0; k < index.size(); ++k)
    DT_CHECK(index[k] <= src[k], op, ": index.size(", k, ") = ", index[k],
             " exceeds src's size ", src[k], " (expected index.size(d) <= src.size(d); index ",
             "shape ", index, ", src shape ", src, ")");
}

int64_t check_index_add_args(const Shape& x, DType x_dtype, int64_t dim, const Shape& index,
                             DType index_dtype, const Shape& source, DType source_dtype,
                             Scalar alpha) {
  const char* op = "index_add";
  DT_CHECK(index_dtype == DType::Int64, op, ": index must be int64, got ", index_dtype);
  DT_CHECK(index.size() <= 1, op, ": index must be 0-d or 1-d, got shape ", index);
  DT_CHECK(source_dtype == x_dtype, op, ": source must have the input's dtype ", x_dtype,
           ", got ", source_dtype);
  DT_CHECK(!alpha.is_floating() || is_floating(x_dtype), op,
           ": a floating alpha (", alpha, ") needs a floating input, got ", x_dtype);
  const Shape xs = at_least_1d(x), ss = at_least_1d(source);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(xs.size()), op);
  const int64_t n = index.product();
  Shape want = xs;
  want[d] = n;
  DT_CHECK(ss == want, op, ": source must have shape ", want, " (the input's ", x,
           " with dim ", d, " of the index's ", n, " elements), got ", source);
  return d;
}

void check_index_put_values(DType x_dtype, const AdvancedIndex& plan, const Shape& values,
                            DType values_dtype) {
  DT_CHECK(values_dtype == x_dtype, "index_put: values must have the input's dtype ", x_dtype,
           ", got ", values_dtype);
  bool fits = values.size() <= plan.result.size();
  for (size_t k = 0; fits && k < values.size(); ++k) {
    const int64_t v = values[values.size() - 1 - k];
    const int64_t r = plan.result[plan.result.size() - 1 - k];
    fits = v == r || v == 1;
  }
  DT_CHECK(fits, "index_put: values of shape ", values, " do not broadcast to the indexed shape ",
           plan.result);
}

AdvancedIndex advanced_index(const Shape& x, const std::vector<std::optional<Shape>>& indices,
                             const char* op) {
  const int64_t nd = static_cast<int64_t>(x.size());
  DT_CHECK(static_cast<int64_t>(indices.size()) <= nd, op,
           ": too many indices for a tensor of shape ", x, ": got ", indices.size());
  AdvancedIndex plan;
  int64_t first = -1, last = -1, count = 0;
  bool any = false;
  for (int64_t d = 0; d < static_cast<int64_t>(indices.size()); ++d) {
    if (!indices[d]) continue;
    plan.broadcast = any ? broadcast_shapes(plan.broadcast, *indices[d]) : *indices[d];
    any = true;
    if (first < 0) first = d;
    last = d;
    ++count;
  }
  DT_CHECK(any, op, ": expected at least one index tensor, got none");
  const bool adjacent = last - first + 1 == count;
  auto indexed = [&](int64_t d) { return d < static_cast<int64_t>(indices.size()) && indices[d]; };
  // NumPy's rule: adjacent indexed dims are replaced in place by the
  // broadcast dims; separated ones put the broadcast dims first.
  plan.first = adjacent ? first : 0;
  if (!adjacent)
    for (int64_t b : plan.broadcast) plan.result.push_back(b);
  for (int64_t d = 0; d < nd; ++d) {
    plan.result_dim[d] = -1;
    if (adjacent && d == first)
      for (int64_t b : plan.broadcast) plan.result.push_back(b);
    if (indexed(d)) continue;
    plan.result_dim[d] = static_cast<int64_t>(plan.result.size());
    plan.result.push_back(x[d]);
  }
  checked_numel(plan.result, op);
  return plan;
}

Tensor index_get(const Tensor& x, const std::vector<std::optional<Tensor>>& indices) {
  const char* op = "index";
  const std::vector<Tensor> idx = expand_indices(x, indices, op);
  std::vector<std::optional<Shape>> shapes;
  for (const Tensor& t : idx) shapes.push_back(t.defined() ? std::optional<Shape>(t.shape()) : std::nullopt);
  const AdvancedIndex plan = advanced_index(x.shape(), shapes, op);
  const Tensor in = x.contiguous();
  Tensor out = Tensor::empty(plan.result, x.dtype());
  dispatch_storage(x.dtype(), op, [&]<class T>() {  // moves elements only: every dtype
    const T* p = in.data_ptr<T>();
    T* o = out.data_ptr<T>();
    walk_advanced(op, x, idx, plan, [&](int64_t off, int64_t k) { o[k] = p[off]; });
  });
  return out;
}

}  // namespace detail

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "gather";
  const int64_t d = detail::check_gather_args(op, x.shape(), dim, index.shape(), index.dtype());
  const Shape xs = at_least_1d(x.shape()), is = at_least_1d(index.shape());
  const Shape x_strides = contiguous_strides(xs);
  const Tensor in = x.contiguous(), idx = index.contiguous();
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  const int64_t* ip = idx.data_ptr<int64_t>();
  detail::dispatch_storage(x.dtype(), op, [&]<class T>() {  // moves elements only: every dtype
    const T* p = in.data_ptr<T>();
    T* o = out.data_ptr<T>();
    int64_t k = 0;
    for_each_position(is, [&](const int64_t* pos) {
      const int64_t i = checked_index(ip[k], xs[d], d, op, false);
      o[k++] = p[offset_of(pos, x_strides) + (i - pos[d]) * x_strides[d]];
    });
  });
  return out;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("scatter", x, dim, index, &src, 0, Write::Assign);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, Scalar value) {
  return scatter_impl("scatter", x, dim, index, nullptr, value, Write::Assign);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("scatter_add", x, dim, index, &src, 0, Write::Add);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha) {
  const char* op = "index_add";
  const int64_t d = detail::check_index_add_args(x.shape(), x.dtype(), dim, index.shape(),
                                                 index.dtype(), source.shape(), source.dtype(),
                                                 alpha);
  if (is_half(x.dtype())) {
    return detail::round_to(index_add(detail::widen(x), dim, index, detail::widen(source), alpha),
                            x.dtype());
  }
  Tensor out = copy_of(x);
  const Shape xs = at_least_1d(x.shape());
  const int64_t n = xs[d];
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= xs[k];
  for (size_t k = static_cast<size_t>(d) + 1; k < xs.size(); ++k) inner *= xs[k];
  const std::vector<int64_t> idx = index.to_vector<int64_t>();
  const int64_t m = static_cast<int64_t>(idx.size());
  const Tensor s = source.contiguous();
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    T* o = out.data_ptr<T>();
    const T* sp = s.data_ptr<T>();
    const T a = alpha.to<T>();
    for (int64_t k = 0; k < m; ++k) {
      const int64_t i = checked_index(idx[k], n, d, op, false);
      for (int64_t b = 0; b < outer; ++b)
        for (int64_t j = 0; j < inner; ++j) {
          T& dst = o[(b * n + i) * inner + j];
          dst = add_values(dst, mul_values(a, sp[(b * m + k) * inner + j]));
        }
    }
  });
  return out;
}

Tensor index_put(const Tensor& x, const std::vector<std::optional<Tensor>>& indices,
                 const Tensor& values, bool accumulate) {
  const char* op = "index_put";
  const std::vector<Tensor> idx = expand_indices(x, indices, op);
  std::vector<std::optional<Shape>> shapes;
  for (const Tensor& t : idx) shapes.push_back(t.defined() ? std::optional<Shape>(t.shape()) : std::nullopt);
  const detail::AdvancedIndex plan = detail::advanced_index(x.shape(), shapes, op);
  detail::check_index_put_values(x.dtype(), plan, values.shape(), values.dtype());
  if (is_half(x.dtype())) {
    return detail::round_to(index_put(detail::widen(x), indices, detail::widen(values), accumulate),
                            x.dtype());
  }
  Tensor out = copy_of(x);
  const Tensor v = values.expand(plan.result).contiguous();
  detail::dispatch_all(x.dtype(), op, [&]<class T>() {
    T* o = out.data_ptr<T>();
    const T* vp = v.data_ptr<T>();
    walk_advanced(op, x, idx, plan, [&](int64_t off, int64_t k) {
      o[off] = accumulate ? add_values(o[off], vp[k]) : vp[k];
    });
  });
  return out;
}

}  // namespace dtensor
