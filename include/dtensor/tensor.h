// Tensor — the dense CPU tensor under every DTensor shard.
//
// A Tensor is a view (shape, strides, offset, dtype) onto a shared, reference-
// counted Storage: copying a Tensor or taking a view (transpose, narrow, view,
// expand, ...) never copies data, so mutations through one view are seen by
// all. Ops return new tensors; in-place ops end in '_' (add_, fill_).
// Semantics follow PyTorch: broadcasting, type promotion (bool < int64 <
// bfloat16, float16 < float32 < float64; int / int is true division),
// torch.chunk chunking, reductions with keepdim. Shapes have at most kMaxDims dims so that shapes
// and strides live inline (no heap allocation for metadata).
//
// Thread safety: a Tensor may be read from several threads; writes to shared
// storage must be synchronised by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dtensor/checked.h"
#include "dtensor/error.h"
#include "dtensor/half.h"

namespace dtensor {

// The maximum number of dims of a tensor (and of a device mesh).
inline constexpr int kMaxDims = 8;

// A small inline vector of int64 used for shapes, strides and dim lists.
// Never allocates; holds at most kMaxDims values.
class DimVector {
 public:
  DimVector() = default;
  DimVector(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  explicit DimVector(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }
  // n copies of value.
  DimVector(size_t n, int64_t value);

  template <class It>
  void assign(It first, It last) {
    size_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  void push_back(int64_t v) {
    DT_CHECK(size_ < kMaxDims, "too many dims: at most ", kMaxDims, " are supported");
    data_[size_++] = v;
  }
  void pop_back() { --size_; }
  void insert(size_t pos, int64_t v);
  void erase(size_t pos);
  void resize(size_t n, int64_t value = 0);
  void clear() { size_ = 0; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t& operator[](size_t i) { return data_[i]; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t& back() { return data_[size_ - 1]; }
  int64_t back() const { return data_[size_ - 1]; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  int64_t* begin() { return data_; }
  int64_t* end() { return data_ + size_; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }

  // Product of the values (1 when empty); throws dtensor::Error when it
  // overflows int64.
  int64_t product() const {
    // Inline: every numel() and nbytes() comes here, several times per op.
    int64_t p = 1;
    bool overflow = false;
    for (size_t i = 0; i < size_; ++i) overflow |= __builtin_mul_overflow(p, data_[i], &p);
    if (overflow) [[unlikely]] return product_overflowed();
    return p;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  friend bool operator==(const DimVector& a, const DimVector& b) {
    // A plain loop: std::equal calls memcmp, which costs more than the
    // few values a shape has.
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i)
      if (a.data_[i] != b.data_[i]) return false;
    return true;
  }
  friend bool operator!=(const DimVector& a, const DimVector& b) { return !(a == b); }

 private:
  // 0 when some value is 0 ([2^40, 2^40, 0] is empty); throws otherwise.
  int64_t product_overflowed() const;

  int64_t data_[kMaxDims] = {};
  uint8_t size_ = 0;
};

using Shape = DimVector;

// "[2, 3]"
std::string to_string(const DimVector& v);
std::ostream& operator<<(std::ostream& os, const DimVector& v);

// Element types. The common type of two tensors (promote_types) is PyTorch's:
// bool < int64 < {bfloat16, float16} < float32 < float64, and bfloat16 with
// float16 gives float32. BFloat16 and Float16 (dtensor/half.h) are storage
// types: ops on them compute in float32 and round once (docs/mixed_precision.md).
// The numbers are stable (checkpoints and the wire name dtypes, not numbers).
enum class DType : uint8_t {
  Bool = 0,
  Int64 = 1,
  Float32 = 2,
  Float64 = 3,
  BFloat16 = 4,
  Float16 = 5,
};
inline constexpr int kNumDTypes = 6;

inline size_t itemsize(DType dtype) {
  switch (dtype) {
    case DType::Bool: return 1;
    case DType::Int64: return 8;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}
// float32, float64, bfloat16, float16.
bool is_floating(DType dtype);
// bfloat16 and float16: the types that compute in float32.
inline bool is_half(DType dtype) { return dtype == DType::BFloat16 || dtype == DType::Float16; }
// The dtype an op on `dtype` computes in: float32 for the 16-bit floats,
// the dtype itself otherwise (PyTorch's opmath type).
inline DType compute_dtype(DType dtype) { return is_half(dtype) ? DType::Float32 : dtype; }
// "float32", "float64", "int64", "bool", "bfloat16", "float16".
const char* dtype_name(DType dtype);
// "f32", "f64", "i64", "bool", "bf16", "f16" (the form the CLI uses).
const char* dtype_short_name(DType dtype);
// Accepts both forms above (and "float", "double", "long", "half"); throws
// on others.
DType parse_dtype(const std::string& text);
std::ostream& operator<<(std::ostream& os, DType dtype);
DType promote_types(DType a, DType b);

// The C++ type of each dtype and back.
template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<Float16> { static constexpr DType value = DType::Float16; };

// A number passed to an op next to tensors (x + 2, full(shape, 0.5)).
// Remembers whether it was written as bool, integer or floating point, which
// matters for promotion: an int64 tensor + 2 stays int64, + 2.5 is float32.
class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  Scalar(bool v) : kind_(Kind::Bool), i_(v), d_(v) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), i_(0), d_(static_cast<double>(v)) {
    // Converting NaN, inf or out-of-range values to int64 is undefined.
    if (d_ > -9.2e18 && d_ < 9.2e18) i_ = static_cast<int64_t>(d_);
  }

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  template <class T> T to() const {
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) return static_cast<T>(d_);
    else if constexpr (std::is_same_v<T, bool>) return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0;
    else return static_cast<T>(i_);  // floats were truncated toward zero (0 if out of range)
  }
  // The dtype of `tensor_dtype op scalar` (the tensor's dtype unless the
  // scalar is of a higher kind: bool tensor + 2 -> int64, int64 + 2.5 -> float32).
  DType result_type(DType tensor_dtype) const;

 private:
  Kind kind_;
  int64_t i_;
  double d_;
};

std::ostream& operator<<(std::ostream& os, const Scalar& s);

// Reference-counted, 64-byte aligned, uninitialised memory. A freed block is
// kept in a bounded cache and reused for the next allocation of a near size
// (sizes are rounded up to classes, four per doubling), so results of the
// same shape step after step cost no malloc and no fresh page faults. The
// cache holds at most cached_memory_limit() bytes, returning the least
// recently freed blocks to the system beyond it; it is safe to allocate on
// one thread and free on another. Under AddressSanitizer nothing is cached.
// A request larger than the machine's physical memory is refused with a
// dtensor::Error naming the bytes requested and available: with Linux's
// overcommit it would otherwise "succeed" and the process be killed later,
// when the pages are touched.
class Storage {
  struct InBlock {
    explicit InBlock() = default;
  };
  struct Meta {
    explicit Meta() = default;
  };

 public:
  explicit Storage(size_t nbytes);
  // Adopts memory someone else owns (a NumPy array's buffer, a DLPack
  // tensor) without copying: `owner` keeps it alive and is released when
  // the storage dies, on whichever thread drops the last reference. Such
  // memory is never returned to dtensor's allocator. `data` must stay valid
  // for nbytes bytes while owner lives; alignment is the caller's
  // (kernels need only the element type's).
  Storage(void* data, size_t nbytes, std::shared_ptr<void> owner);
  // A new storage of nbytes, as make_shared<Storage>(nbytes) but cheaper for
  // a small one: up to kInBlockBytes of data share one block of the memory
  // cache with the Storage and the shared_ptr's counts, so a small result
  // costs one allocation instead of two (a malloc for the counts and the
  // Storage, a cached block for the data).
  static std::shared_ptr<Storage> make(size_t nbytes);
  static constexpr size_t kInBlockBytes = 4096;
  // make()'s form (InBlock is private): the data follows the control block.
  Storage(InBlock, size_t nbytes);
  // A storage on the meta device: nbytes recorded, no memory. Tensors over
  // it have shapes and views but no data (raw_data() throws saying so)
  // until materialize() allocates it in place, for every tensor sharing it:
  // deferred initialisation (nn::MetaDeviceGuard) builds and lays out a
  // model this way before any process holds a parameter.
  static std::shared_ptr<Storage> meta(size_t nbytes);
  Storage(Meta, size_t nbytes) : data_(nullptr), nbytes_(nbytes), flags_(kMeta) {}
  bool is_meta() const { return (flags_ & kMeta) != 0; }
  // A meta storage that stands for no memory yet: a parameter made under
  // nn::MetaDeviceGuard (and what is laid out or copied from it) until
  // materialize(), and every meta storage of a world with data. A
  // RankMemoryTracker does not count it. In a World::shape_only the other
  // meta storages stand for the memory a run with data holds.
  bool is_deferred() const { return (flags_ & kDeferred) != 0; }
  void set_deferred(bool deferred) {
    flags_ = static_cast<uint8_t>(deferred ? flags_ | kDeferred : flags_ & ~kDeferred);
  }
  // Allocates the memory of a meta storage (uninitialised), checked as the
  // constructor's; no-op for a storage that has memory.
  void materialize();
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  // Whether the memory is adopted (the constructor with an owner).
  bool is_external() const { return owner_ != nullptr; }
  // Counts the in-place ops (fill_, copy_, add_, ...) that wrote to this
  // storage: autograd compares it to refuse a saved tensor changed since it
  // was saved. Writes through data<T>() are not counted.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  // Internal, for LocalTensor (memory.h's RankMemoryTracker): while a
  // tracker runs, counts this storage's bytes on `rank` until it dies. A
  // storage counts on the first rank that holds it, once.
  void count_on_rank(int rank);

 private:
  void materialize_bytes();  // allocates nbytes_ into data_, checked
  void take_category();      // counts the memory under the thread's MemoryScope

  void* data_;
  size_t nbytes_;
  uint64_t version_ = 0;
  // Adopted memory only. Held through a pointer so that a Storage stays 40
  // bytes: make()'s control block (counts, allocator, Storage) must fit in
  // the 64 bytes before an in-block tensor's data.
  std::unique_ptr<std::shared_ptr<void>> owner_;
  static constexpr uint8_t kInBlock = 1;   // data_ is freed with the control block
  static constexpr uint8_t kMeta = 2;      // no memory yet (meta()); data_ is null
  static constexpr uint8_t kDeferred = 4;  // is_deferred()
  uint8_t flags_ = 0;
  uint8_t category_ = 0;   // MemoryScope's category when allocated (memory.h)
  uint8_t rank_epoch_ = 0;  // the RankMemoryTracker counting it (0: none)
  int32_t rank_ = -1;       // the rank it counts on (count_on_rank)
};

// Returns every cached block of freed storages to the system; the bytes
// released. Storages still alive are untouched.
size_t release_cached_memory();
// The most bytes the cache of freed storages may hold: DTENSOR_CACHE_BYTES
// when set (a number of bytes, or with a suffix K, M or G: 512M, 2G), a
// quarter of physical_memory_bytes() otherwise. 0 means nothing is cached.
size_t cached_memory_limit();
// Sets that limit, returning the least recently freed blocks to the system
// until the cache fits. Any thread may call it at any time.
void set_cached_memory_limit(size_t bytes);

// The machine's physical memory in bytes (the most one Storage may hold).
size_t physical_memory_bytes();
// The memory a new allocation can get now without swapping, in bytes
// (MemAvailable on Linux, bounded by a cgroup memory limit; the physical
// memory where neither is known). For estimates before big jobs.
size_t available_memory_bytes();

// The number of elements of `shape`; throws dtensor::Error naming `op` and
// the shape when a size is negative or the product overflows int64.
int64_t checked_numel(const Shape& shape, const char* op);

// A tensor about to be made, `copies` times (e.g. once per simulated rank).
struct PlannedTensor {
  std::string name;  // for the message: "weight", "the block of rank 3"
  Shape shape;
  DType dtype = DType::Float32;
  int64_t copies = 1;
};
// Checks, before the first of them is allocated, that tensors made together
// can be: each shape's element count and bytes fit int64, and all their
// bytes together fit in physical_memory_bytes(), the limit each Storage
// already has, applied to the whole set. Throws dtensor::Error naming `op`,
// the tensor and the sizes otherwise, so that a constructor or factory
// refuses at once instead of filling gigabytes it then drops (nn.Linear
// making its bias before finding the weight too big).
void check_allocation(const std::string& op, const std::vector<PlannedTensor>& tensors);

class Tensor {
 public:
  // An undefined tensor (defined() is false); used for "no bias" and the like.
  Tensor() = default;
  // A view onto existing storage. Throws dtensor::Error when a size is
  // negative, the element count or an offset overflows int64, or a non-empty
  // view reaches outside the storage.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, const Shape& strides,
         int64_t storage_offset);

  // ---- creation -----------------------------------------------------------
  // Every creation function throws dtensor::Error on a negative size, on a
  // shape whose element count or byte count overflows int64, and on a size
  // beyond physical memory (see Storage).
  // Uninitialised memory, contiguous.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32);
  // A contiguous tensor on the meta device (is_meta()): no memory.
  static Tensor meta(const Shape& shape, DType dtype = DType::Float32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32);
  static Tensor full(const Shape& shape, Scalar value, DType dtype = DType::Float32);
  // On this tensor's device, as PyTorch's x.new_empty / new_zeros / new_full:
  // a meta tensor (no memory, nothing written) when this one is meta
  // (World::shape_only), a tensor with memory otherwise.
  Tensor new_empty(const Shape& shape, DType dtype) const;
  Tensor new_zeros(const Shape& shape, DType dtype) const;
  Tensor new_full(const Shape& shape, Scalar value, DType dtype) const;
  // A meta tensor that is deferred (Storage::is_deferred) when this one is.
  // REQUIRES: is_meta().
  Tensor meta_like(const Shape& shape, DType dtype) const;
  // 0-d tensor holding value, of the scalar's natural dtype unless given.
  static Tensor scalar(Scalar value, std::optional<DType> dtype = std::nullopt);
  // [0, end) and [start, end) by step; int64 unless a dtype is given.
  static Tensor arange(int64_t end, DType dtype = DType::Int64);
  static Tensor arange(double start, double end, double step = 1, DType dtype = DType::Int64);
  // Copies values into a new contiguous tensor of the given shape (1-d when
  // no shape is given). REQUIRES: shape.product() == values.size().
  static Tensor from_vector(const std::vector<float>& values, std::optional<Shape> shape = {});
  static Tensor from_vector(const std::vector<double>& values, std::optional<Shape> shape = {});
  static Tensor from_vector(const std::vector<int64_t>& values, std::optional<Shape> shape = {});
  static Tensor from_vector(const std::vector<bool>& values, std::optional<Shape> shape = {});
  // Counter-based random numbers: element i (row-major) of a tensor made with
  // seed s and offset o is a pure function of (s, o + i, dtype), whatever the
  // shape, so any sub-range of a big random tensor can be made on its own.
  // rand: uniform in [0, 1); randn: standard normal; randint: uniform
  // integers in [low, high).
  static Tensor rand(const Shape& shape, uint64_t seed, uint64_t offset = 0,
                     DType dtype = DType::Float32);
  static Tensor randn(const Shape& shape, uint64_t seed, uint64_t offset = 0,
                      DType dtype = DType::Float32);
  static Tensor randint(int64_t low, int64_t high, const Shape& shape, uint64_t seed,
                        uint64_t offset = 0);

  // ---- metadata -----------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  // Size / stride of dim d; negative d counts from the end.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_.product(); }
  size_t itemsize() const { return dtensor::itemsize(dtype_); }
  size_t nbytes() const {
    return static_cast<size_t>(checked_bytes(numel(), itemsize(), "nbytes"));
  }
  int64_t storage_offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Pointer to the first element. REQUIRES: T matches dtype().
  template <class T> T* data_ptr() const {
    DT_CHECK(dtype_of<T>::value == dtype_, "data_ptr: tensor has dtype ", dtype_,
             ", asked for ", dtype_of<T>::value);
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const {
    if (storage_ == nullptr) [[unlikely]] throw_undefined_data();
    char* base = static_cast<char*>(storage_->data());
    if (base == nullptr && storage_->is_meta()) [[unlikely]] throw_meta_data();
    return base + offset_ * static_cast<int64_t>(itemsize());
  }
  // Whether the tensor is on the meta device (Storage::meta): a shape
  // without data. Views, clone(), contiguous() and to() of one are meta
  // too; anything that reads or writes elements throws.
  bool is_meta() const { return storage_ != nullptr && storage_->is_meta(); }

  // The elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;
  // The single element of a one-element tensor, converted to T.
  template <class T = double> T item() const;

  // ---- views (never copy) ---------------------------------------------------
  // view: same elements, new shape (one size may be -1). Throws when the
  // strides cannot express it; reshape copies in that case.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const DimVector& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  // 2-d transpose. REQUIRES: dim() <= 2.
  Tensor t() const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // Python-style slice [start:end:step] on one dim; start/end are clamped.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // Broadcast to shape (size-1 dims grow with stride 0; -1 keeps a size).
  Tensor expand(const Shape& shape) const;
  // torch.Tensor.view_as / expand_as / type_as: view(other.shape()),
  // expand(other.shape()), to(other.dtype()).
  Tensor view_as(const Tensor& other) const { return view(other.shape()); }
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor type_as(const Tensor& other) const { return to(other.dtype()); }
  // Exactly n pieces of ceil(L / n) along dim; trailing pieces may be short
  // or empty (L=2, n=4 -> 1,1,0,0). This is torch.chunk padded with empty
  // chunks to n, the way DTensor shards a dim: piece r is rank r's shard.
  std::vector<Tensor> chunk(int64_t n, int64_t dim = 0) const;
  // torch.split: pieces of split_size (the last may be shorter).
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const std::vector<int64_t>& sizes, int64_t dim = 0) const;

  // ---- copies ---------------------------------------------------------------
  // Self when already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  Tensor clone() const;
  // Converted copy (self when the dtype already matches).
  Tensor to(DType dtype) const;

  // ---- in place -------------------------------------------------------------
  Tensor& fill_(Scalar value);
  Tensor& zero_() { return fill_(0); }
  // Copies src (broadcast to this shape, converted to this dtype) into self.
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& relu_();
  Tensor& masked_fill_(const Tensor& mask, Scalar value);
  // The out-of-place op's value written into self (src/tensor/elementwise_ternary.cc):
  // the operands may not broadcast self to a larger shape, and the result's
  // dtype must cast to self's (PyTorch's checks).
  Tensor& addcmul_(const Tensor& t1, const Tensor& t2, Scalar value = 1);
  Tensor& addcdiv_(const Tensor& t1, const Tensor& t2, Scalar value = 1);
  Tensor& lerp_(const Tensor& end, Scalar weight);
  Tensor& lerp_(const Tensor& end, const Tensor& weight);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  // Tensor bounds (an undefined one is absent; at least one given).
  Tensor& clamp_(const Tensor& min, const Tensor& max);

 private:
  // A contiguous tensor over all of a new storage (empty()): its shape was
  // checked, so none of the public constructor's checks can fail.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, int64_t numel);
  [[noreturn]] static void throw_undefined_data();
  [[noreturn]] void throw_meta_data() const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::Float32;
};

// Contiguous (row-major) strides of a shape.
Shape contiguous_strides(const Shape& shape);
// The broadcast shape of a and b (numpy rules); throws naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Normalises a possibly negative dim against ndim; throws naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// ---- creation like another tensor ---------------------------------------------
Tensor empty_like(const Tensor& x);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor full_like(const Tensor& x, Scalar value);

// ---- elementwise (broadcasting, type promotion) -------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, Scalar b);
Tensor sub(Scalar a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
// True division: integer inputs give float32.
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor div(Scalar a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);

// Unary math; integer/bool inputs give float32 for the transcendental ones.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { None, Tanh };
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::None);
// grad * gelu'(x) in one pass (PyTorch's gelu_backward); floating inputs,
// broadcast; the 16-bit floats compute in float32 and round once.
Tensor gelu_backward(const Tensor& grad, const Tensor& x,
                     GeluApprox approximate = GeluApprox::None);
// x * sigmoid(x) (PyTorch's silu, the SwiGLU MLP's gate), as
// x / (1 + exp(-x)).
Tensor silu(const Tensor& x);
// ---- more pointwise math, as PyTorch 1.13 (src/tensor/elementwise_math.cc) ----
// Transcendental: integer/bool inputs give float32.
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
// x * x in x's dtype (bool gives int64, as torch's pow(x, 2)).
Tensor square(const Tensor& x);
// -1, 0 or 1 in x's dtype; NaN and -0.0 give +0 (torch 1.13); bool stays.
Tensor sign(const Tensor& x);
// An int64 x is returned as it is (a copy); bool throws.
Tensor floor(const Tensor& x);
// To nearest, ties to even. decimals != 0: nearbyint(x * 10^d) / 10^d (for
// d < 0, nearbyint(x / 10^-d) * 10^-d), floating x only.
Tensor round(const Tensor& x, int64_t decimals = 0);
// log(1 + exp(beta x)) / beta, or x where beta x > threshold (torch's
// softplus). REQUIRES: x is floating.
Tensor softplus(const Tensor& x, Scalar beta = 1, Scalar threshold = 20);
// Bool results for inputs of any dtype; non-zero (NaN included) is true.
Tensor isnan(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
// input + value * t1 * t2 and input + value * t1 / t2 (all three broadcast)
// in their promoted dtype, value converted to it (truncated for int64, as
// torch). addcdiv refuses two integral t1 and t2 (torch 1.13's error).
Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value = 1);
Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value = 1);
// input + weight * (end - input), torch's way: for |weight| >= 0.5 as
// end - (end - input) * (1 - weight), so weight 1 gives end exactly.
// REQUIRES: floating input; end (and a tensor weight) of input's dtype.
Tensor lerp(const Tensor& input, const Tensor& end, Scalar weight);
Tensor lerp(const Tensor& input, const Tensor& end, const Tensor& weight);

// Comparisons give bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);

// cond ? a : b elementwise (all three broadcast). REQUIRES: cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
// x with value wherever mask (bool, broadcast to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, Scalar b);

// ---- reductions -----------------------------------------------------------------
// `dims` lists the dims to reduce (negative allowed, no repeats); an empty
// list reduces every dim. keepdim keeps reduced dims with size 1.
// sum/prod of bool or int64 give int64; mean and var need a floating dtype.
// Floating sums accumulate in double, so float32 results are as exact as
// float32 allows whatever the reduction order.
Tensor sum(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
// amax/amin propagate NaN. REQUIRES: every reduced dim is non-empty.
Tensor amax(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
// Variance with Bessel-style correction (divides by N - correction).
Tensor var(const Tensor& x, const DimVector& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// Index (int64) of the first maximum/minimum along dim; without a dim, the
// index into the flattened tensor.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// ---- scans, sorting and logical reductions (PyTorch's semantics) ------------------
// dim may be negative; a 0-d tensor takes dim 0 or -1 and acts as one
// element. Bad dims, a repeated dim or k out of range throw dtensor::Error.
// Inclusive cumulative sum along dim: bool and int64 give int64 (wrapping
// on overflow), floating dtypes keep theirs (float32 accumulates in double).
Tensor cumsum(const Tensor& x, int64_t dim);
// The result of sort and topk, as PyTorch's (values, indices) named tuple:
// `auto [values, indices] = sort(x);`.
template <class T>
struct ValuesIndices {
  T values;
  T indices;  // int64 positions along dim in the input
};
// Sorted along dim; indices (int64) say where each value came from. NaN
// sorts above every number (last ascending, first descending). The order
// is always stable (ties keep the lower index first): stable=false lets
// ties come in any order, and this is one of them.
ValuesIndices<Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false,
                           bool stable = false);
// The k largest (or smallest) elements along dim, in sorted order (also
// when sorted is false: any order is allowed then, and this one is the
// cheapest to keep consistent); ties go to the lower index; NaN counts as
// the largest value. REQUIRES: 0 <= k <= the size of dim.
ValuesIndices<Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                           bool sorted = true);
// log(sum(exp(x))) over dims (every dim when empty), stable: the maximum
// is subtracted first. A slice of all -inf (or an empty one) gives -inf,
// any +inf gives +inf, any NaN gives NaN. bool and int64 give float32.
Tensor logsumexp(const Tensor& x, const DimVector& dims, bool keepdim = false);
// Whether every / some element over dims (every dim when empty) is
// nonzero (NaN counts as nonzero), as bool. An empty slice gives true for
// all and false for any.
Tensor all(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const DimVector& dims = {}, bool keepdim = false);
// ---- structural ops (PyTorch's semantics and checks) -------------------------------
// flip: reversed along each of dims (no repeats). roll: element i along
// dims[k] moves to (i + shifts[k]) mod size; without dims, over the
// flattened tensor (then one shift). Both copy.
Tensor flip(const Tensor& x, const DimVector& dims);
Tensor roll(const Tensor& x, const DimVector& shifts, const DimVector& dims = {});
// Inclusive cumulative product along dim, dtypes as cumsum (bool, int64 ->
// int64 wrapping on overflow; float32 multiplies in double).
Tensor cumprod(const Tensor& x, int64_t dim);
// sort(x, dim, descending, stable).indices.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// torch.outer: a (n) and b (m), 1-d -> (n, m), a[i] * b[j] (promoted).
Tensor outer(const Tensor& a, const Tensor& b);
// torch.dot: 1-d a and b of one size and one dtype (not bool) -> 0-d sum of a * b.
Tensor dot(const Tensor& a, const Tensor& b);
// torch.linspace: steps values from start to end, evenly spaced (PyTorch's
// formula: the first half counted from start, the second from end, so both
// ends are exact); integral dtypes truncate. REQUIRES: steps >= 0.
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::Float32);
// torch.eye: n x m (m = n when not given), ones on the diagonal.
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = DType::Float32);
// torch.diagonal: a view of the elements (i, i + offset) of dims dim1 and
// dim2, which are removed; the diagonal becomes the last dim.
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// torch.nonzero: the int64 (count, x.dim()) coordinates of the nonzero
// elements (NaN counts) in row-major order.
Tensor nonzero(const Tensor& x);
// sqrt(var(x, dims, correction, keepdim)) (torch.std).
Tensor std(const Tensor& x, const DimVector& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// torch.max / torch.min: of the whole tensor (amax over every dim; NaN
// propagates; REQUIRES: x is not empty), along dim with the (values,
// indices) of the first extreme (a NaN counts as the extreme), and of two
// tensors (maximum / minimum).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
ValuesIndices<Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices<Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a, const Tensor& b);
Tensor min(const Tensor& a, const Tensor& b);
// ---- norms --------------------------------------------------------------------------
// torch.linalg.vector_norm: the ord-norm of x over `dims` (every dim when
// empty; negative allowed, no repeats), as if those dims were flattened.
//   ord = inf: max |x|;  ord = -inf: min |x|;  ord = 0: the number of
//   nonzero elements (NaN counts);  any other real ord (negative too):
//   (sum |x|^ord)^(1/ord) (sqrt of the sum of squares for 2, sum |x| for 1).
// NaN propagates. The result has x's dtype.
// REQUIRES: x is floating (16-bit: in float32); ord is not NaN; for ord < 0 or inf,
// no reduced dim is empty (such norms have no identity; PyTorch's check).
Tensor vector_norm(const Tensor& x, double ord = 2, const DimVector& dims = {},
                   bool keepdim = false);
// torch.norm with a numeric p: the same as vector_norm(x, p, dims, keepdim).
Tensor norm(const Tensor& x, double p = 2, const DimVector& dims = {}, bool keepdim = false);

// ---- linear algebra (OpenBLAS for float32/float64, exact loops for int64) -------
// (n,k) @ (k,m) -> (n,m)
Tensor mm(const Tensor& a, const Tensor& b);
// (B,n,k) @ (B,k,m) -> (B,n,m)
Tensor bmm(const Tensor& a, const Tensor& b);
// torch.matmul: 1-d/2-d/batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// beta * bias + alpha * (a @ b), bias broadcast to (n,m).
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta = 1,
             Scalar alpha = 1);
// beta * bias + alpha * bmm(a, b), bias broadcast to (B,n,m).
Tensor baddbmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta = 1,
               Scalar alpha = 1);
// x @ weight^T + bias; weight is (out, in); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- neural-network math ----------------------------------------------------------
// Numerically stable (max-subtracted) softmax / log-softmax along dim.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalises over the trailing dims given by normalized_shape (biased
// variance); weight and bias (of normalized_shape) may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x / sqrt(mean(x^2) + eps) * weight over the trailing dims; eps defaults to the
// compute dtype's machine epsilon as in PyTorch (float32's for 16-bit x).
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
enum class Reduction { None, Mean, Sum };
// input (N,C) or (C) or (N,C,d1,...) of log-probabilities; target int64 class
// indices of shape (N) / () / (N,d1,...). Targets equal to ignore_index
// contribute nothing (and are not counted by Mean).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
// nll_loss(log_softmax(logits, class dim), target).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);

// ---- attention ------------------------------------------------------------------------
// torch.nn.functional.scaled_dot_product_attention (its math backend):
// softmax(query key^T * scale + mask) value for query [..., L, E], key
// [..., S, E], value [..., S, Ev] -> [..., L, Ev], the batch dims (...)
// broadcast. Floating dtypes; query, key and value of one dtype.
// scale defaults to 1/sqrt(E). is_causal masks key j for query i when
// j > i (top-left aligned, as PyTorch's is_causal also for L != S).
// attn_mask (undefined: none) broadcasts to [..., L, S]: bool (true =
// attend) or of the query's dtype (added to the scores); not with
// is_causal. A row with every key masked gives zeros, as PyTorch's
// _safe_softmax does, not NaN. Max-subtracted softmax, row sums in double.
// REQUIRES: dropout_p == 0 (dropout is not supported; others throw).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// ---- joining and indexing -----------------------------------------------------------
// REQUIRES: same dtype-promotable tensors whose shapes agree except on dim.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Rows of x along dim picked by a 1-d int64 index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// weight[indices]: (V, D) table and int64 indices of any shape -> indices.shape + (D).
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- shape ops: repeat, tile, unbind, split, pad, new_*, einsum -------------------------
// PyTorch's semantics and argument names. Every dtype unless said otherwise.
// torch.Tensor.repeat: repeats.size() >= x.dim() (extra leading repeats add
// dims), each >= 0; the result is a new tensor of size x.size(d) * repeats[d].
Tensor repeat(const Tensor& x, const DimVector& repeats);
// torch.tile: reps padded with leading 1s when shorter than x.dim(), then repeat.
Tensor tile(const Tensor& x, const DimVector& reps);
// torch.unbind: the x.size(dim) slices along dim (views).
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
// torch.split with a list of sizes (they must sum to x.size(dim)); views.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// torch.nn.functional.pad: `pad` lists (before, after) pairs from the last dim
// backwards; negative pads crop. mode "constant" (fills with value, 0 when
// not given; any number of dims), "reflect" (mirrors, pads < the dim's size)
// or "replicate" (repeats the edge): these two take non-negative pads of 1-3
// trailing dims of a (k+1)-d or (k+2)-d (batched) numeric input whose dims
// other than the batch dim are non-empty, and no value.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant",
           std::optional<Scalar> value = std::nullopt);
// torch.Tensor.new_*: a new tensor of `shape`, x's dtype unless given.
Tensor new_empty(const Tensor& x, const Shape& shape, std::optional<DType> dtype = std::nullopt);
Tensor new_zeros(const Tensor& x, const Shape& shape, std::optional<DType> dtype = std::nullopt);
Tensor new_ones(const Tensor& x, const Shape& shape, std::optional<DType> dtype = std::nullopt);
Tensor new_full(const Tensor& x, const Shape& shape, Scalar value,
                std::optional<DType> dtype = std::nullopt);
// torch.einsum: "ij,jk->ik" (explicit output) or "ij,jk" (implicit: the
// labels seen once, alphabetical with upper case first, after the
// ellipsis dims). Labels a-z, A-Z; "..." stands for broadcast dims; size-1
// dims broadcast. A label repeated within one operand (a diagonal) is
// refused. Operands (of one dtype) are contracted left to right, each pair
// with one bmm/mm after summing the labels no later operand or the output
// needs.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
// ---- clamping, triangles, gather/scatter and indexed updates ------------------------
// As torch.clamp: min(max(x, min), max) with the bounds given (at least one;
// min > max gives max everywhere); NaN in x or in a bound gives NaN. The
// result's dtype is x's promoted with the bounds (int64 x with 0.5 gives
// float32). REQUIRES: x is not bool.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp_min(const Tensor& x, Scalar min);
Tensor clamp_max(const Tensor& x, Scalar max);
// The lower / upper triangle of the last two dims (earlier dims are a
// batch): elements (i, j) with j - i <= diagonal (tril) or >= diagonal
// (triu) are kept, the others zeroed. REQUIRES: x has at least 2 dims.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// torch.gather: out[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (likewise
// for other dims). index is int64 with x's number of dims and
// index.size(d) <= x.size(d) for d != dim; the result has index's shape.
// Indices must lie in [0, x.size(dim)) (no negative ones, as in PyTorch).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// torch.scatter: a copy of x with out[index[i][j][k]][j][k] = src[i][j][k]
// (dim 0) for every element of index; src has x's dtype and
// index.size(d) <= src.size(d) for every d. Duplicate indices (undefined in
// PyTorch) take the last write in index order (row-major), deterministically.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, Scalar value);
// As scatter, but adds: duplicate indices accumulate, in index order.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// torch.index_add: a copy of x with alpha * source's slice k along dim added
// to x's slice index[k]; index is 0-d or 1-d int64 in [0, x.size(dim)),
// source has x's dtype and shape except source.size(dim) == index.numel().
// A floating alpha needs a floating x.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha = 1);
// torch.index_put (x[indices] = values as a new tensor): indices lists one
// optional index tensor per leading dim of x (nullopt = the whole dim, as
// ':'); int64 tensors are broadcast together and may be negative (counted
// from the end); a bool tensor stands for the int64 tensors of its nonzero
// positions over as many dims as it has. As in NumPy, the broadcast index
// dims replace the indexed dims in place when those are adjacent, else go
// first. values (x's dtype) broadcast to that shape. accumulate adds
// (duplicates add up); otherwise duplicates take the last write in index
// order, deterministically.
Tensor index_put(const Tensor& x, const std::vector<std::optional<Tensor>>& indices,
                 const Tensor& values, bool accumulate = false);

// ---- comparison helpers ---------------------------------------------------------------
// Same shape and every element equal (after promotion).
bool equal(const Tensor& a, const Tensor& b);
// Same shape (after broadcasting) and |a - b| <= atol + rtol * |b| everywhere.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
// max |a - b| over broadcast elements (0 for empty tensors), as double.
double max_abs_diff(const Tensor& a, const Tensor& b);

// "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=int64)"; big tensors show
// their first and last three entries per dim with "..." between.
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

}  // namespace dtensor
