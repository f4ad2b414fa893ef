// dtensor.dtype (bool, int64, float32, float64, bfloat16, float16) and dtensor.Tensor, the dense
// CPU tensor: metadata, views, arithmetic (math_ops.h). The NumPy side of
// Tensor (buffer protocol, __array__, DLPack, from_numpy) is in interop.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <string>

#include "bindings.h"
#include "casters.h"
#include "math_ops.h"

namespace dtensor::python {

namespace {

// The Python object of a dtype: compares equal to itself, to its name and to
// the NumPy dtype of the same kind.
struct DTypeObject {
  DType value;
};

// dtensor.float32, ... created once and never destroyed (they outlive every
// Tensor, and the interpreter's shutdown order is not ours to worry about).
std::array<py::object*, kNumDTypes> g_dtypes{};

constexpr std::array<DType, kNumDTypes> kDTypes = {DType::Bool,    DType::Int64,    DType::Float32,
                                                   DType::Float64, DType::BFloat16, DType::Float16};

}  // namespace

py::object dtype_to_python(DType dtype) { return *g_dtypes[static_cast<size_t>(dtype)]; }

std::optional<DType> dtype_from_python(py::handle h) {
  if (py::isinstance<DTypeObject>(h)) return h.cast<const DTypeObject&>().value;
  if (PyUnicode_Check(h.ptr())) return parse_dtype(h.cast<std::string>());  // throws naming it
  // NumPy dtypes and the types np.dtype accepts (np.float32, float, bool, ...).
  if (!PyType_Check(h.ptr()) && std::string(Py_TYPE(h.ptr())->tp_name).rfind("numpy.dtype", 0) != 0)
    return std::nullopt;
  py::object np = py::module_::import("numpy");
  py::object d = np.attr("dtype")(h);
  const std::string kind = d.attr("kind").cast<std::string>();
  const int64_t size = d.attr("itemsize").cast<int64_t>();
  if (kind == "b" && size == 1) return DType::Bool;
  if (kind == "i" && size == 8) return DType::Int64;
  if (kind == "f" && size == 4) return DType::Float32;
  if (kind == "f" && size == 8) return DType::Float64;
  if (kind == "f" && size == 2) return DType::Float16;
  DT_THROW("dtype: NumPy dtype ", py::str(py::handle(d)).cast<std::string>(),
           " has no dtensor counterpart (dtensor has bool, int64, float32, float64, float16; "
           "bfloat16 has no NumPy dtype)");
}

void bind_tensor(py::module_& m) {
  py::class_<DTypeObject>(m, "dtype",
                          "An element type: dtensor.bool, int64, float32, float64, bfloat16, "
                          "float16. Compares equal to its name (\"bfloat16\", \"bf16\", ...) "
                          "and to the NumPy dtype (bfloat16 has none).")
      .def_property_readonly("name", [](const DTypeObject& d) { return dtype_name(d.value); })
      .def_property_readonly("itemsize", [](const DTypeObject& d) { return itemsize(d.value); })
      .def_property_readonly("is_floating_point",
                             [](const DTypeObject& d) { return is_floating(d.value); })
      .def("__repr__", [](const DTypeObject& d) { return std::string("dtensor.") + dtype_name(d.value); })
      .def("__str__", [](const DTypeObject& d) { return std::string("dtensor.") + dtype_name(d.value); })
      .def("__hash__", [](const DTypeObject& d) { return static_cast<int>(d.value); })
      .def("__eq__", [](const DTypeObject& d, py::handle other) {
        try {
          std::optional<DType> o = dtype_from_python(other);
          return o && *o == d.value;
        } catch (const std::exception&) {
          return false;
        }
      });
  for (DType d : kDTypes) {
    g_dtypes[static_cast<size_t>(d)] = new py::object(py::cast(DTypeObject{d}));
    m.attr(dtype_name(d)) = *g_dtypes[static_cast<size_t>(d)];
  }

  py::class_<Tensor> tensor(m, "Tensor", py::buffer_protocol(), R"doc(
A dense CPU tensor: a strided view onto reference-counted memory. Views
(transpose, view, narrow, ...) share memory; ops return new tensors; in-place
ops end in '_'. Semantics follow PyTorch (broadcasting, type promotion
bool < int64 < {bfloat16, float16} < float32 < float64, true division; the
16-bit floats compute in float32 and round once). NumPy sees its memory
without a copy (buffer protocol, __array__, __dlpack__; bfloat16, which
NumPy lacks, through DLPack only).
)doc");
  bind_math_methods<Tensor>(tensor);
  tensor
      .def("stride", [](const Tensor& t, std::optional<int64_t> d) -> py::object {
             if (d) return py::int_(t.stride(*d));
             return py::cast(t.strides());
           }, py::arg("dim") = py::none(), "Strides in elements (a tuple, or one dim's).")
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("itemsize", &Tensor::itemsize)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); },
           "The address of the first element.")
      .def("relu_", &Tensor::relu_, release_gil())
      .def("__repr__", [](const Tensor& t) { return to_string(t); });
}

}  // namespace dtensor::python
