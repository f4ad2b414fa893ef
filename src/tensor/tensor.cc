// Tensor basics: metadata and the checked shape arithmetic behind it,
// creation, conversion and copy. (Storage and the memory limits:
// storage.cc; printing: print.cc.)
#include "dtensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "tensor/convert_half.h"
#include "tensor/dispatch.h"
#include "tensor/loops.h"

namespace dtensor {

// ---- shape helpers -------------------------------------------------------------

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // The stride of dim 0 is never multiplied by its size.
    if (i > 0) s = checked_mul(s, std::max<int64_t>(shape[i], 1), "contiguous strides");
  }
  return strides;
}

int64_t checked_numel(const Shape& shape, const char* op) {
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    DT_CHECK(shape[i] >= 0, op, ": negative size ", shape[i], " at dim ", i, " of shape ", shape,
             " (sizes must be >= 0)");
    empty = empty || shape[i] == 0;
  }
  if (empty) return 0;  // [2^40, 2^40, 0] holds no elements: not an overflow
  int64_t n = 1;
  for (int64_t s : shape) {
    if (__builtin_mul_overflow(n, s, &n)) [[unlikely]] {
      DT_THROW(op, ": shape ", shape, " has more elements than int64 can count (at most ",
               INT64_MAX, ")");
    }
  }
  return n;
}

namespace detail {
void throw_overflow(const std::string& what, const char* op, int64_t a, int64_t b) {
  DT_THROW(what, ": ", a, ' ', op, ' ', b, " overflows int64 (at most ", INT64_MAX, ")");
}
}  // namespace detail

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  if (a == b) return a;  // most ops: nothing to broadcast
  const size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DT_CHECK(da == db || da == 1 || db == 1, "shapes ", a, " and ", b,
             " cannot be broadcast (dim ", static_cast<int64_t>(i) - static_cast<int64_t>(n), ": ",
             da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  // A 0-d tensor accepts dim 0 / -1 as PyTorch does.
  const int64_t n = std::max<int64_t>(ndim, 1);
  DT_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " out of range for a ", ndim,
           "-d tensor (expected ", -n, " <= dim < ", n, ")");
  return dim < 0 ? dim + n : dim;
}

// ---- Tensor --------------------------------------------------------------------

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
               const Shape& strides, int64_t storage_offset)
    : storage_(std::move(storage)), shape_(shape), strides_(strides), offset_(storage_offset),
      dtype_(dtype) {
  DT_CHECK(shape.size() == strides.size(), "Tensor: shape ", shape, " and strides ", strides,
           " differ in length");
  // Every view goes through here, so the common case is one pass that only
  // gathers overflow flags; the checked helpers below rerun it to name the
  // failure when a flag is set.
  int64_t n = 1, lo = storage_offset, hi = storage_offset;
  bool suspect = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t reach = 0;
    suspect |= shape[i] <= 0;
    suspect |= __builtin_mul_overflow(n, shape[i], &n);
    suspect |= __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
    suspect |= reach < 0 ? __builtin_add_overflow(lo, reach, &lo) : __builtin_add_overflow(hi, reach, &hi);
  }
  if (suspect) {
    if (checked_numel(shape, "Tensor") == 0 || storage_ == nullptr) return;
    // The lowest and highest element the view reaches.
    lo = hi = storage_offset;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t reach = checked_mul(shape[i] - 1, strides[i], "Tensor: view extent");
      (reach < 0 ? lo : hi) = checked_add(reach < 0 ? lo : hi, reach, "Tensor: view extent");
    }
  } else if (storage_ == nullptr) {
    return;
  }
  // Checked against the storage: a view computed from wrapped sizes must
  // fail here, not read or write outside the block.
  const int64_t item = static_cast<int64_t>(dtensor::itemsize(dtype));
  const int64_t end_bytes = checked_mul(checked_add(hi, 1, "Tensor: view extent"), item,
                                        "Tensor: view extent in bytes");
  DT_CHECK(lo >= 0 && static_cast<uint64_t>(end_bytes) <= storage_->nbytes(), "Tensor: view of shape ",
           shape, ", strides ", strides, " and offset ", storage_offset, " reaches elements ", lo,
           " to ", hi, " but the storage holds ", storage_->nbytes() / static_cast<size_t>(item),
           " ", dtype_name(dtype), " elements");
}

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "size")]; }

int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void Tensor::throw_undefined_data() { DT_THROW("data access on an undefined tensor"); }

void Tensor::throw_meta_data() const {
  DT_THROW("data access on a meta tensor of shape ", shape_, " (", dtype_name(dtype_),
           "): it has a shape but no values yet; a module built under nn::MetaDeviceGuard needs "
           "materialize() before its parameters are used");
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, int64_t numel)
    : storage_(std::move(storage)), shape_(shape), strides_(shape), dtype_(dtype) {
  if (numel == 0) {
    strides_ = contiguous_strides(shape);  // sizes beyond a 0 may overflow: checked
    return;
  }
  // Every stride is a product of sizes, at most numel, which fits.
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides_[i] = s;
    s *= shape[i];
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  const int64_t n = checked_numel(shape, "empty");
  const int64_t bytes = checked_bytes(n, dtensor::itemsize(dtype), "empty: bytes of the tensor");
  return Tensor(Storage::make(static_cast<size_t>(bytes)), dtype, shape, n);
}

Tensor Tensor::meta(const Shape& shape, DType dtype) {
  const int64_t n = checked_numel(shape, "meta");
  const int64_t bytes = checked_bytes(n, dtensor::itemsize(dtype), "meta: bytes of the tensor");
  return Tensor(Storage::meta(static_cast<size_t>(bytes)), dtype, shape, n);
}

Tensor Tensor::new_empty(const Shape& shape, DType dtype) const {
  return is_meta() ? meta_like(shape, dtype) : empty(shape, dtype);
}

Tensor Tensor::new_zeros(const Shape& shape, DType dtype) const {
  return is_meta() ? meta_like(shape, dtype) : zeros(shape, dtype);
}

Tensor Tensor::new_full(const Shape& shape, Scalar value, DType dtype) const {
  return is_meta() ? meta_like(shape, dtype) : full(shape, value, dtype);
}

Tensor Tensor::meta_like(const Shape& shape, DType dtype) const {
  Tensor t = meta(shape, dtype);
  t.storage_->set_deferred(storage_->is_deferred());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  checked_bytes(checked_numel(shape, "zeros"), dtensor::itemsize(dtype), "zeros: bytes of the tensor");
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) {
  checked_bytes(checked_numel(shape, "ones"), dtensor::itemsize(dtype), "ones: bytes of the tensor");
  return full(shape, 1, dtype);
}

Tensor Tensor::full(const Shape& shape, Scalar value, DType dtype) {
  checked_bytes(checked_numel(shape, "full"), dtensor::itemsize(dtype), "full: bytes of the tensor");
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(Scalar value, std::optional<DType> dtype) {
  DType d = dtype ? *dtype
                  : value.kind() == Scalar::Kind::Bool ? DType::Bool
                  : value.kind() == Scalar::Kind::Int  ? DType::Int64
                                                       : DType::Float32;
  return full({}, value, d);
}

Tensor Tensor::arange(int64_t end, DType dtype) { return arange(0, static_cast<double>(end), 1, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  DT_CHECK(step != 0, "arange: step must be nonzero");
  DT_CHECK(std::isfinite(start) && std::isfinite(end), "arange: start and end must be finite, got ",
           start, " and ", end);
  DT_CHECK(dtype != DType::Bool, "arange: bool dtype is not supported");
  const double span = (end - start) / step;
  // Converting a double beyond int64 is undefined: refuse it by name.
  DT_CHECK(span < 9.2e18, "arange: [", start, ", ", end, ") by step ", step,
           " has more elements than int64 can count");
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = empty({n}, dtype);
  if (is_half(dtype)) {
    // As PyTorch's CPU kernel: start + step * i in the float32 accumulate
    // type, rounded once.
    const float s0 = static_cast<float>(start), st = static_cast<float>(step);
    Tensor f = empty({n}, DType::Float32);
    float* p = f.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = s0 + st * static_cast<float>(i);
    return t.copy_(f);
  }
  detail::dispatch_numeric(dtype, "arange", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

namespace {
template <class T, class V>
Tensor from_values(const V& values, const std::optional<Shape>& shape) {
  Shape s = shape ? *shape : Shape{static_cast<int64_t>(values.size())};
  DT_CHECK(s.product() == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
           " values do not fill shape ", s, " (", s.product(), " elements)");
  Tensor t = Tensor::empty(s, dtype_of<T>::value);
  T* p = t.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  return t;
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v, std::optional<Shape> s) {
  return from_values<float>(v, s);
}
Tensor Tensor::from_vector(const std::vector<double>& v, std::optional<Shape> s) {
  return from_values<double>(v, s);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& v, std::optional<Shape> s) {
  return from_values<int64_t>(v, s);
}
Tensor Tensor::from_vector(const std::vector<bool>& v, std::optional<Shape> s) {
  return from_values<bool>(v, s);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(dtype_of<T>::value).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;

template <class T>
T Tensor::item() const {
  DT_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_);
  return detail::dispatch_storage(dtype_, "item", [&]<class U>() {
    return static_cast<T>(*static_cast<const U*>(raw_data()));
  });
}
template bool Tensor::item<bool>() const;
template int64_t Tensor::item<int64_t>() const;
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  if (is_meta()) return meta_like(shape_, dtype_);
  Tensor out = empty(shape_, dtype_);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (is_meta()) return meta_like(shape_, dtype);
  Tensor out = empty(shape_, dtype);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::fill_(Scalar value) {
  if (storage_) storage_->bump_version();
  if (is_meta()) return *this;  // as in PyTorch: a meta tensor has no values to set
  detail::dispatch_storage(dtype_, "fill_", [&]<class T>() {
    const T v = value.to<T>();
    detail::StridedOperands<1> ops;
    detail::set_operand(ops, 0, *this, shape_);
    // Not kOverwrite: streaming a 64 MiB fill through the piece buffer took
    // 1.25x the time of plain stores (docs/PERFORMANCE.md).
    detail::for_each_strided(shape_, ops, [v](std::array<char*, 1>& p, int64_t n,
                                               const std::array<int64_t, 1>& st) {
      char* q = p[0];
      for (int64_t i = 0; i < n; ++i, q += st[0]) *reinterpret_cast<T*>(q) = v;
    });
  });
  return *this;
}

namespace {
template <class D, class S>
void copy_kernel(std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& st) {
  if (st[0] == sizeof(D) && st[1] == sizeof(S)) {
    // float32 <-> 16-bit runs in the CPU's vectors (convert_half.h).
    if constexpr (is_half_v<D> && std::is_same_v<S, float>) {
      return detail::float_to_half(reinterpret_cast<const float*>(p[1]),
                                   reinterpret_cast<D*>(p[0]), n);
    } else if constexpr (std::is_same_v<D, float> && is_half_v<S>) {
      return detail::half_to_float(reinterpret_cast<const S*>(p[1]),
                                   reinterpret_cast<float*>(p[0]), n);
    }
    D* __restrict d = reinterpret_cast<D*>(p[0]);
    const S* __restrict s = reinterpret_cast<const S*>(p[1]);
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<D, bool>) d[i] = s[i] != S(0);
      else d[i] = static_cast<D>(s[i]);
    }
    return;
  }
  char* d = p[0];
  const char* s = p[1];
  for (int64_t i = 0; i < n; ++i, d += st[0], s += st[1]) {
    const S v = *reinterpret_cast<const S*>(s);
    if constexpr (std::is_same_v<D, bool>) *reinterpret_cast<D*>(d) = v != S(0);
    else *reinterpret_cast<D*>(d) = static_cast<D>(v);
  }
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  DT_CHECK(defined() && src.defined(), "copy_: undefined tensor");
  Shape b;
  try {
    b = broadcast_shapes(src.shape_, shape_);
  } catch (const Error& e) {
    DT_THROW("copy_: source ", src.shape_, " cannot be broadcast to destination ", shape_);
  }
  DT_CHECK(b == shape_, "copy_: source ", src.shape_, " cannot be broadcast to destination ",
           shape_);
  if (numel() == 0) return *this;
  storage_->bump_version();
  // Between meta tensors (World::shape_only), as in PyTorch: checked, nothing moves.
  if (is_meta() && src.is_meta()) return *this;
  if (dtype_ == src.dtype_ && shape_ == src.shape_ && is_contiguous() && src.is_contiguous()) {
    std::memmove(raw_data(), src.raw_data(), nbytes());
    return *this;
  }
  detail::StridedOperands<2> ops;
  detail::set_operand(ops, 0, *this, shape_);
  detail::set_operand(ops, 1, src, shape_);
  detail::dispatch_storage(dtype_, "copy_", [&]<class D>() {
    detail::dispatch_storage(src.dtype_, "copy_", [&]<class S>() {
      if constexpr (std::is_same_v<D, S>) {
        detail::for_each_strided<2, detail::kMove | detail::kOverwrite>(shape_, ops,
                                                                         copy_kernel<D, S>);
      } else {
        detail::for_each_strided<2, detail::kOverwrite>(shape_, ops, copy_kernel<D, S>);
      }
    });
  });
  return *this;
}

Tensor empty_like(const Tensor& x) { return Tensor::empty(x.shape(), x.dtype()); }
Tensor zeros_like(const Tensor& x) { return Tensor::zeros(x.shape(), x.dtype()); }
Tensor ones_like(const Tensor& x) { return Tensor::ones(x.shape(), x.dtype()); }
Tensor full_like(const Tensor& x, Scalar value) { return Tensor::full(x.shape(), value, x.dtype()); }

}  // namespace dtensor
