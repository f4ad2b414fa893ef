// Tensors and NumPy (and anything speaking DLPack) without copies.
//
// Out of dtensor: a Tensor exposes the buffer protocol, __array__ (a NumPy
// array whose base is the Tensor, so the array keeps the Tensor's memory
// alive) and __dlpack__ / __dlpack_device__ (the legacy "dltensor" capsule
// that NumPy 1.24's np.from_dlpack takes; the versioned "dltensor_versioned"
// one when the consumer passes max_version >= (1, 0)). Every view shares
// memory with the Tensor, whatever its strides.
//
// Into dtensor: from_numpy(array) and from_dlpack(obj) wrap the producer's
// memory without a copy, the Tensor's storage holding a reference to the
// array (or the DLPack deleter) until the last view dies. They take any
// non-negative strides that are whole elements (a transposed or sliced
// array stays a view, as in torch.from_numpy) and raise dtensor.Error for
// negative strides, misaligned or read-only memory, and dtypes dtensor lacks
// (it has bool, int64, float32, float64, bfloat16, float16); dtensor.tensor(data)
// copies anything NumPy can make an array of.
//
// bfloat16 has no NumPy dtype (and no buffer-protocol format): a bfloat16
// Tensor goes to NumPy through .to(dtensor.float32) (exact), and to and from
// other libraries through DLPack (kDLBfloat), as torch.Tensor.numpy() refuses
// bfloat16 too. float16 is NumPy's float16 and the buffer format "e".
//
// The DLPack structs follow the public DLPack specification (dlpack.h is not
// packaged for Debian; only libtorch-dev ships a copy).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "math_ops.h"

namespace dtensor::python {

namespace {

// ---- DLPack (https://dmlc.github.io/dlpack/latest/c_api.html) ----------------
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDAHost = 3;
constexpr int32_t kDLROCMHost = 11;
constexpr uint8_t kDLInt = 0, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6;
constexpr uint64_t kDLFlagReadOnly = 1ULL << 0;

struct DLDevice {
  int32_t device_type;  // DLDeviceType, an int-sized enum
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr DLPackVersion kDLPackVersion{1, 0};

// ---- releasing Python references from any thread -----------------------------
//
// A Tensor adopting a NumPy array's memory may die on a thread that does not
// hold the GIL: a pool thread dropping the last shard of a result while the
// main thread, which released the GIL for the op, waits for the pool.
// Taking the GIL there could deadlock, so such releases are queued and run
// by the interpreter's main thread at its next check (Py_AddPendingCall).
std::mutex g_pending_mu;
std::vector<std::function<void()>>* g_pending = new std::vector<std::function<void()>>();

int run_pending(void*) {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(g_pending_mu);
    work.swap(*g_pending);
  }
  for (auto& f : work) f();
  return 0;
}

// Runs f (which touches Python objects) now when this thread holds the GIL,
// otherwise soon on the main thread. At interpreter exit nothing runs: the
// objects die with the interpreter.
void with_gil_soon(std::function<void()> f) {
  if (!Py_IsInitialized()) return;
  if (PyGILState_Check()) {
    f();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(g_pending_mu);
    g_pending->push_back(std::move(f));
  }
  Py_AddPendingCall(run_pending, nullptr);  // a full queue (-1) leaves it for the next call
}

// An owner for Storage that holds a strong reference to a Python object.
std::shared_ptr<void> keep_alive(py::handle obj) {
  PyObject* o = obj.ptr();
  Py_INCREF(o);
  return std::shared_ptr<void>(o, [](void* p) {
    with_gil_soon([p] { Py_DECREF(static_cast<PyObject*>(p)); });
  });
}

// ---- dtypes --------------------------------------------------------------------

const char* buffer_format(DType d) {
  switch (d) {
    case DType::Bool: return "?";
    case DType::Int64: return "q";
    case DType::Float32: return "f";
    case DType::Float64: return "d";
    case DType::Float16: return "e";
    case DType::BFloat16: break;  // no format: refused by the callers
  }
  return "";
}

// Throws, naming `op`, for a dtype NumPy lacks (bfloat16).
void check_numpy_has(DType d, const char* op) {
  DT_CHECK(d != DType::BFloat16, op, ": a bfloat16 tensor has no NumPy array (NumPy and the "
           "buffer protocol have no bfloat16 type); convert first with .to(dtensor.float32) (exact), or share it with "
           "torch through DLPack (torch.from_dlpack(t))");
}

py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::Bool: return py::dtype("bool");
    case DType::Int64: return py::dtype("int64");
    case DType::Float32: return py::dtype("float32");
    case DType::Float64: return py::dtype("float64");
    case DType::Float16: return py::dtype("float16");
    case DType::BFloat16: break;
  }
  check_numpy_has(d, "numpy");
  return py::dtype("float32");
}

// The dtensor dtype of a NumPy dtype stored as is (native byte order).
std::optional<DType> exact_dtype(const py::dtype& d) {
  if (d.attr("byteorder").cast<std::string>() == ">") return std::nullopt;
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'b' && size == 1) return DType::Bool;
  if (kind == 'i' && size == 8) return DType::Int64;
  if (kind == 'f' && size == 4) return DType::Float32;
  if (kind == 'f' && size == 8) return DType::Float64;
  if (kind == 'f' && size == 2) return DType::Float16;
  return std::nullopt;
}

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::Bool: return {kDLBool, 8, 1};
    case DType::Int64: return {kDLInt, 64, 1};
    case DType::Float32: return {kDLFloat, 32, 1};
    case DType::Float64: return {kDLFloat, 64, 1};
    case DType::BFloat16: return {kDLBfloat, 16, 1};
    case DType::Float16: return {kDLFloat, 16, 1};
  }
  return {kDLFloat, 32, 1};
}

std::optional<DType> from_dl_dtype(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == kDLBool && t.bits == 8) return DType::Bool;
  if (t.code == kDLInt && t.bits == 64) return DType::Int64;
  if (t.code == kDLFloat && t.bits == 32) return DType::Float32;
  if (t.code == kDLFloat && t.bits == 64) return DType::Float64;
  if (t.code == kDLFloat && t.bits == 16) return DType::Float16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::BFloat16;
  return std::nullopt;
}

// ---- wrapping foreign memory ---------------------------------------------------

// A Tensor viewing `data` with shape and strides in elements; `owner` keeps
// the memory. Throws (naming `op`) for negative strides and misalignment.
Tensor wrap_memory(const char* op, void* data, DType dtype, const Shape& shape, const Shape& strides,
                   std::shared_ptr<void> owner) {
  const int64_t item = static_cast<int64_t>(itemsize(dtype));
  int64_t extent = 0;  // elements from the first to one past the last
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    DT_CHECK(strides[i] >= 0 || shape[i] <= 1, op, ": negative stride ", strides[i], " at dim ", i,
             " (shape ", shape, ", strides in elements ", strides,
             "); dtensor views need non-negative strides: copy first (dtensor.tensor(x) or "
             "numpy.ascontiguousarray)");
    empty = empty || shape[i] == 0;
  }
  Shape st = strides;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] <= 1) st[i] = std::max<int64_t>(st[i], 0);  // any stride of a size-1 dim is moot
  if (!empty) {
    extent = 1;
    for (size_t i = 0; i < shape.size(); ++i) extent += (shape[i] - 1) * st[i];
  }
  DT_CHECK(reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(item) == 0, op,
           ": the data at ", data, " is not aligned to its ", item, "-byte ", dtype_name(dtype),
           " elements; copy first (dtensor.tensor(x))");
  auto storage = std::make_shared<Storage>(empty ? nullptr : data,
                                           static_cast<size_t>(extent * item), std::move(owner));
  return Tensor(std::move(storage), dtype, shape, st, 0);
}

Tensor from_numpy(py::handle obj) {
  if (!py::isinstance<py::array>(obj))
    DT_THROW("from_numpy: expected a numpy.ndarray, got ", py::str(py::type::of(obj)).cast<std::string>());
  auto arr = py::reinterpret_borrow<py::array>(obj);
  std::optional<DType> dtype = exact_dtype(arr.dtype());
  DT_CHECK(dtype.has_value(), "from_numpy: NumPy dtype ", py::str(py::handle(arr.dtype())).cast<std::string>(),
           " has no dtensor counterpart (dtensor has bool, int64, float32, float64, float16 in "
           "native byte order); convert first, e.g. arr.astype(numpy.float32), or copy with "
           "dtensor.tensor(arr)");
  DT_CHECK(arr.writeable(), "from_numpy: the array is read-only and a Tensor can be written to; "
           "copy it with dtensor.tensor(arr)");
  DT_CHECK(arr.ndim() <= kMaxDims, "from_numpy: ", arr.ndim(), "-d array; dtensor supports at most ",
           kMaxDims, " dims");
  const int64_t item = static_cast<int64_t>(arr.itemsize());
  Shape shape, strides;
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    shape.push_back(arr.shape(i));
    DT_CHECK(arr.strides(i) % item == 0, "from_numpy: stride ", arr.strides(i), " bytes at dim ", i,
             " is not a whole number of ", item, "-byte elements; copy with dtensor.tensor(arr)");
    strides.push_back(arr.strides(i) / item);
  }
  return wrap_memory("from_numpy", const_cast<void*>(arr.data()), *dtype, shape, strides,
                     keep_alive(obj));
}

// ---- DLPack import ---------------------------------------------------------------

template <class Managed>
Tensor import_dl(Managed* managed, const DLTensor& t, bool read_only) {
  // Until the Tensor exists the capsule's owner is us: on a throw, release it.
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<Managed*>(p);
    if (m->deleter != nullptr) with_gil_soon([m] { m->deleter(m); });
  });
  DT_CHECK(t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost ||
               t.device.device_type == kDLROCMHost,
           "from_dlpack: the tensor lives on device type ", t.device.device_type,
           "; dtensor reads CPU memory only");
  std::optional<DType> dtype = from_dl_dtype(t.dtype);
  DT_CHECK(dtype.has_value(), "from_dlpack: DLPack dtype (code ", int(t.dtype.code), ", bits ",
           int(t.dtype.bits), ", lanes ", t.dtype.lanes,
           ") has no dtensor counterpart (bool, int64, float32, float64, bfloat16, float16)");
  DT_CHECK(!read_only, "from_dlpack: the producer marked the tensor read-only; copy it with "
           "dtensor.tensor(x)");
  DT_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, "from_dlpack: ", t.ndim,
           "-d tensor; dtensor supports at most ", kMaxDims, " dims");
  Shape shape, strides;
  for (int32_t i = 0; i < t.ndim; ++i) shape.push_back(t.shape[i]);
  if (t.strides != nullptr) {
    for (int32_t i = 0; i < t.ndim; ++i) strides.push_back(t.strides[i]);
  } else {
    strides = contiguous_strides(shape);
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return wrap_memory("from_dlpack", data, *dtype, shape, strides, std::move(owner));
}

Tensor from_dlpack(py::object obj) {
  py::object capsule = obj;
  if (!PyCapsule_CheckExact(obj.ptr())) {
    DT_CHECK(py::hasattr(obj, "__dlpack__"), "from_dlpack: ",
             py::str(py::type::of(obj)).cast<std::string>(),
             " has no __dlpack__ method (and is not a DLPack capsule)");
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      DT_CHECK(dev.first == kDLCPU || dev.first == kDLCUDAHost || dev.first == kDLROCMHost,
               "from_dlpack: the tensor lives on device type ", dev.first,
               "; dtensor reads CPU memory only");
    }
    try {
      capsule = obj.attr("__dlpack__")(py::arg("max_version") = py::make_tuple(1, 0));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      capsule = obj.attr("__dlpack__")();  // a producer from before versioned capsules
    }
  }
  PyObject* c = capsule.ptr();
  if (PyCapsule_IsValid(c, "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, "dltensor_versioned"));
    PyCapsule_SetName(c, "used_dltensor_versioned");
    DT_CHECK(m->version.major == 1, "from_dlpack: DLPack major version ", m->version.major,
             " (dtensor reads 1)");
    return import_dl(m, m->dl_tensor, (m->flags & kDLFlagReadOnly) != 0);
  }
  if (PyCapsule_IsValid(c, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    PyCapsule_SetName(c, "used_dltensor");
    return import_dl(m, m->dl_tensor, false);
  }
  DT_THROW("from_dlpack: expected a \"dltensor\" or \"dltensor_versioned\" capsule (a capsule "
           "can be consumed only once)");
}

// ---- DLPack export ---------------------------------------------------------------

template <class Managed>
struct ExportContext {
  Tensor tensor;  // holds the storage while the consumer uses it
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  Managed managed;
};

template <class Managed>
void fill_dl_tensor(ExportContext<Managed>* ctx, DLTensor& t) {
  const Tensor& x = ctx->tensor;
  for (int64_t i = 0; i < x.dim(); ++i) {
    ctx->shape[i] = x.shape()[static_cast<size_t>(i)];
    ctx->strides[i] = x.strides()[static_cast<size_t>(i)];
  }
  t.data = x.numel() == 0 ? x.storage()->data() : x.raw_data();
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(x.dim());
  t.dtype = dl_dtype(x.dtype());
  t.shape = ctx->shape;
  t.strides = ctx->strides;
  t.byte_offset = 0;
}

py::capsule to_dlpack(const Tensor& x, bool versioned) {
  if (versioned) {
    using M = DLManagedTensorVersioned;
    auto* ctx = new ExportContext<M>{x, {}, {}, {}};
    ctx->managed.version = kDLPackVersion;
    ctx->managed.manager_ctx = ctx;
    ctx->managed.deleter = [](M* m) { delete static_cast<ExportContext<M>*>(m->manager_ctx); };
    ctx->managed.flags = 0;
    fill_dl_tensor(ctx, ctx->managed.dl_tensor);
    // A capsule nobody consumed still owns the tensor.
    return py::capsule(&ctx->managed, "dltensor_versioned", [](PyObject* cap) {
      if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        auto* m = static_cast<M*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
        m->deleter(m);
      }
    });
  }
  using M = DLManagedTensor;
  auto* ctx = new ExportContext<M>{x, {}, {}, {}};
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](M* m) { delete static_cast<ExportContext<M>*>(m->manager_ctx); };
  fill_dl_tensor(ctx, ctx->managed.dl_tensor);
  return py::capsule(&ctx->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<M*>(PyCapsule_GetPointer(cap, "dltensor"));
      m->deleter(m);
    }
  });
}

// ---- copies ------------------------------------------------------------------------
//
// What dtype dtensor.tensor(data) gives, as torch.tensor does: data that has
// a dtype keeps it (a Tensor; a NumPy array or scalar; anything exposing
// __array__, __dlpack__ or the buffer protocol), a Python float is the
// default float dtype float32, an int int64, a bool bool, and a list or
// tuple promotes its items' dtypes (an empty one is float32). Other integer
// widths become int64 (dtensor's only integer type).

bool is_python_sequence(py::handle h) { return PyList_Check(h.ptr()) || PyTuple_Check(h.ptr()); }

py::module_& numpy_module() {
  static auto* np = new py::module_(py::module_::import("numpy"));  // lives as long as the interpreter
  return *np;
}

// The dtensor dtype data of NumPy dtype d becomes (the nearest one).
DType dtype_of_numpy(const py::dtype& d, const char* op) {
  const char kind = d.kind();
  if (kind == 'b') return DType::Bool;
  if (kind == 'i' || kind == 'u') return DType::Int64;
  if (kind == 'f' && d.itemsize() == 2) return DType::Float16;
  if (kind == 'f' && d.itemsize() == 4) return DType::Float32;
  if (kind == 'f' && d.itemsize() == 8) return DType::Float64;
  DT_THROW(op, ": NumPy dtype ", py::str(py::handle(d)).cast<std::string>(),
           " has no dtensor counterpart (bool, int64, float16, float32, float64; other integer "
           "widths become int64)");
}

// A NumPy array of an object that carries its own dtype, unlike a Python
// number or list: a NumPy array or scalar, or an object with __array__,
// the buffer protocol or __dlpack__. nullopt for anything else.
std::optional<py::array> typed_array(py::handle h) {
  py::module_& np = numpy_module();
  if (py::isinstance<py::array>(h)) return py::reinterpret_borrow<py::array>(h);
  if (py::isinstance(h, np.attr("generic")) || py::hasattr(h, "__array__") ||
      PyObject_CheckBuffer(h.ptr()))
    return py::array(np.attr("asarray")(h));
  if (py::hasattr(h, "__dlpack__")) return py::array(np.attr("from_dlpack")(h));
  return std::nullopt;
}

// The dtype of `data` (see above); nullopt for an empty list or tuple.
std::optional<DType> infer_dtype(py::handle h, const char* op) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) return DType::Bool;
  if (PyFloat_CheckExact(o)) return DType::Float32;
  if (PyLong_CheckExact(o)) return DType::Int64;
  if (is_python_sequence(h)) {
    std::optional<DType> out;
    for (py::handle item : h) {
      std::optional<DType> d = infer_dtype(item, op);
      if (d) out = out ? promote_types(*out, *d) : *d;
    }
    return out;
  }
  if (py::isinstance<Tensor>(h)) return h.cast<const Tensor&>().dtype();
  // NumPy scalars before float and int subclasses: numpy.float64 is a
  // float, and keeps its precision.
  if (py::isinstance<py::array>(h) || py::isinstance(h, numpy_module().attr("generic")))
    return dtype_of_numpy(py::dtype::from_args(h.attr("dtype")), op);
  if (PyFloat_Check(o)) return DType::Float32;
  if (PyLong_Check(o)) return DType::Int64;
  if (std::optional<py::array> a = typed_array(h)) return dtype_of_numpy(a->dtype(), op);
  DT_THROW(op, ": cannot make a tensor of a ", type_name(h), " (expected a number, a list or "
           "tuple of them (nested), a Tensor, a NumPy array or scalar, or an object with "
           "__array__, __dlpack__ or the buffer protocol)");
}

// dtensor.tensor(data, dtype): a copy, of `dtype` if given, else of the
// dtype above.
Tensor copy_from_python(py::handle data, std::optional<DType> dtype, const std::string& where) {
  const char* op = where.c_str();
  auto copy_of = [&](const Tensor& t) { return dtype && *dtype != t.dtype() ? t.to(*dtype) : t.clone(); };
  if (py::isinstance<Tensor>(data)) return copy_of(data.cast<const Tensor&>());
  std::optional<py::array> typed;
  if (!is_python_sequence(data)) {
    try {
      typed = typed_array(data);
    } catch (py::error_already_set&) {
      // What NumPy cannot read may still speak DLPack: a torch bfloat16
      // tensor (its __array__ raises).
      if (!py::hasattr(data, "__dlpack__")) throw;
      return copy_of(from_dlpack(py::reinterpret_borrow<py::object>(data)));
    }
  }
  DType target;
  if (dtype) target = *dtype;
  else if (typed) target = dtype_of_numpy(typed->dtype(), op);
  else target = infer_dtype(data, op).value_or(DType::Float32);
  py::module_& np = numpy_module();
  py::array arr = typed ? *typed : py::array(np.attr("asarray")(data));
  DT_CHECK(std::string("biuf").find(arr.dtype().kind()) != std::string::npos, op,
           ": cannot make a tensor of ", py::str(py::repr(data)).cast<std::string>().substr(0, 80),
           " (NumPy reads it as dtype ", py::str(py::handle(arr.dtype())).cast<std::string>(),
           "; expected numbers, nested in lists of equal lengths)");
  // The 16-bit floats are made from float32, as c10 converts a double or
  // int64 to them through float (NumPy's float64 -> float16 rounds once,
  // and can differ); from a float16 array that detour is exact.
  const DType staged = is_half(target) ? DType::Float32 : target;
  // asarray, not ascontiguousarray: that one makes a 0-d array 1-d.
  py::array c = np.attr("asarray")(arr, numpy_dtype(staged), py::arg("order") = "C");
  Tensor out = Tensor::empty(Shape(std::vector<int64_t>(c.shape(), c.shape() + c.ndim())), staged);
  if (out.nbytes() > 0) std::memcpy(out.raw_data(), c.data(), out.nbytes());
  return staged == target ? out : out.to(target);
}

py::array to_numpy(py::handle self, const char* op) {
  const Tensor& t = self.cast<const Tensor&>();
  check_numpy_has(t.dtype(), op);
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * static_cast<int64_t>(t.itemsize())));
  void* data = t.numel() == 0 ? t.storage()->data() : t.raw_data();
  return py::array(numpy_dtype(t.dtype()), shape, strides, data, self);  // base: the Tensor
}

// pybind11's bf_getbuffer lets no exception out (std::terminate), so the
// dtype NumPy lacks is refused here first, with the BufferError the buffer
// protocol expects.
getbufferproc g_base_getbuffer = nullptr;

int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  try {
    check_numpy_has(py::handle(obj).cast<const Tensor&>().dtype(), "buffer protocol");
  } catch (const std::exception& e) {
    if (view != nullptr) view->obj = nullptr;
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
  return g_base_getbuffer(obj, view, flags);
}

}  // namespace

Tensor tensor_from_python(py::handle obj, const std::string& where) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::isinstance<py::array>(obj)) {
    try {
      return from_numpy(obj);
    } catch (const Error&) {
      return copy_from_python(obj, std::nullopt, where);  // a layout or dtype that needs a copy
    }
  }
  return copy_from_python(obj, std::nullopt, where);
}

Tensor shared_tensor_from_python(py::handle obj, const std::string& where) {
  if (!py::isinstance<Tensor>(obj) && !py::isinstance<py::array>(obj) &&
      py::hasattr(obj, "__dlpack__"))
    return from_dlpack(py::reinterpret_borrow<py::object>(obj));
  return tensor_from_python(obj, where);
}

void bind_interop(py::module_& m) {
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  tensor.def_buffer([](const Tensor& t) {
    std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
    for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * static_cast<int64_t>(t.itemsize())));
    void* data = t.numel() == 0 ? t.storage()->data() : t.raw_data();
    return py::buffer_info(data, static_cast<py::ssize_t>(t.itemsize()), buffer_format(t.dtype()),
                           static_cast<py::ssize_t>(t.dim()), shape, strides, /*readonly=*/false);
  });
  auto* heap_type = reinterpret_cast<PyHeapTypeObject*>(tensor.ptr());
  g_base_getbuffer = heap_type->as_buffer.bf_getbuffer;
  heap_type->as_buffer.bf_getbuffer = tensor_getbuffer;
  tensor
      .def(py::init([](py::object data, std::optional<DType> dtype) {
             return copy_from_python(data, dtype, "Tensor");
           }),
           py::arg("data"), py::arg("dtype") = py::none(),
           "A copy of `data` (see dtensor.tensor).")
      .def("__array__",
           [](py::handle self, py::object dtype, py::object copy) -> py::object {
             py::array a = to_numpy(self, "__array__");
             if (!dtype.is_none()) return a.attr("astype")(dtype, py::arg("copy") = false);
             if (!copy.is_none() && copy.cast<bool>()) return a.attr("copy")();
             return a;
           },
           py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
           "A NumPy array sharing this tensor's memory (its base keeps the tensor alive).")
      .def("numpy", [](py::handle self) { return to_numpy(self, "numpy"); },
           "A NumPy array sharing this tensor's memory (not for bfloat16, which NumPy lacks).")
      .def("tolist",
           [](py::handle self) {
             const Tensor& t = self.cast<const Tensor&>();
             // Every bfloat16 is a float32: the list holds the exact values.
             if (t.dtype() == DType::BFloat16)
               return to_numpy(py::cast(t.to(DType::Float32)), "tolist").attr("tolist")();
             return to_numpy(self, "tolist").attr("tolist")();
           })
      .def("__dlpack__",
           [](const Tensor& t, py::object stream, py::object max_version, py::object dl_device,
              py::object copy) {
             DT_CHECK(stream.is_none() || stream.cast<int64_t>() == -1, "__dlpack__: dtensor tensors "
                      "live on the CPU; stream must be None");
             if (!dl_device.is_none()) {
               auto dev = dl_device.cast<std::pair<int, int>>();
               DT_CHECK(dev.first == kDLCPU, "__dlpack__: dtensor tensors live on the CPU (device "
                        "type 1), asked for device type ", dev.first);
             }
             bool versioned = false;
             if (!max_version.is_none()) {
               auto v = max_version.cast<std::pair<int, int>>();
               versioned = v.first >= 1;
             }
             if (!copy.is_none() && copy.cast<bool>()) return to_dlpack(t.clone(), versioned);
             return to_dlpack(t, versioned);
           },
           py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
           "A DLPack capsule sharing this tensor's memory: \"dltensor\" by default (what NumPy "
           "1.24 reads), \"dltensor_versioned\" (DLPack 1.0) when max_version >= (1, 0).")
      .def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(kDLCPU, 0); });

  m.def("from_numpy", &from_numpy, py::arg("array"), R"doc(
A Tensor sharing the NumPy array's memory (no copy; the Tensor keeps the
array alive). Any non-negative strides that are whole elements stay a view;
negative strides, read-only or misaligned arrays and dtypes other than bool,
int64, float16, float32, float64 raise dtensor.Error (copy with dtensor.tensor).
)doc");
  m.def("from_dlpack", &from_dlpack, py::arg("obj"), R"doc(
A Tensor sharing the memory of a DLPack producer (an object with __dlpack__,
e.g. a NumPy array or torch tensor, or a DLPack capsule), without a copy.
Asks for a versioned capsule first and falls back to the legacy one. Reads
bfloat16 (kDLBfloat, 16 bits) and float16 (kDLFloat, 16 bits) as well.
)doc");
  m.def("tensor", [](py::handle data, std::optional<DType> dtype) { return copy_from_python(data, dtype, "tensor"); },
        py::arg("data"), py::arg("dtype") = py::none(), R"doc(
A new Tensor holding a copy of `data` (a Tensor, array, nested lists or a
number), as torch.tensor: Python floats give float32, an array keeps its
precision (float16 included), other integer widths become int64. A torch
bfloat16 tensor (which NumPy cannot read) is read through DLPack. To
bfloat16 or float16 values convert through float32, as PyTorch's do.
)doc");
  m.def("as_tensor", [](py::handle data) { return tensor_from_python(data, "as_tensor"); }, py::arg("data"),
        "A Tensor sharing `data`'s memory when from_numpy can wrap it, else a copy.");
}

}  // namespace dtensor::python
