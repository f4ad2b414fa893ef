// Conversions between Python values and the small dtensor value types, shared
// by every binding file (include it before declaring functions that take
// these types):
//
//   Shape / DimVector   <- an int or a sequence of ints;   -> a tuple of ints
//   Scalar              <- bool, int (or anything with __index__), float
//   Placements          <- a sequence of Shard/Replicate/Partial, or the text
//                          form "S(0),R,P(sum)";            -> a tuple of them
//   DType               <- dtensor.float32 ..., a NumPy dtype or type, or a
//                          name ("float32", "f32", "int64", "bool")
//
// A placement crosses as the Python classes Shard, Replicate and Partial
// (placement.cc), all three wrapping the one C++ Placement: a C++ function
// returning Placements hands back instances of the right class.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "dtensor/dtensor.h"

namespace dtensor::python {

namespace py = pybind11;

// The Python object (Shard, Replicate or Partial) of a placement.
py::object placement_to_python(const Placement& p);
// The dtype a Python value names (see above); nullopt when it names none.
std::optional<DType> dtype_from_python(py::handle h);
// dtensor.float32, ... (the module's dtype objects).
py::object dtype_to_python(DType dtype);
// gelu's approximate= ("none" or "tanh"); anything else is an error. ops.cc.
GeluApprox parse_gelu(const std::string& approximate);
// A Python object kept by C++ that may be dropped without the GIL (a graph
// node freed by backward, which runs with the GIL released): its deleter
// takes the GIL first. autograd.cc.
std::shared_ptr<py::object> keep(py::object o);
// A loss's reduction by PyTorch's name: "mean", "sum" or "none" (ops.cc).
Reduction parse_reduction(const std::string& reduction);
// A Tensor from a Python value: a Tensor itself; a NumPy array (or any
// object with __dlpack__ / the buffer protocol) wrapped without a copy when
// its layout allows; anything else (lists, numbers, other layouts) copied
// through numpy.asarray, keeping the data's dtype as torch.tensor does
// (interop.cc says how). `where` starts error messages ("from_local").
// interop.cc.
Tensor tensor_from_python(py::handle obj, const std::string& where = "as_tensor");
// The same, sharing the memory of a DLPack producer (a torch tensor) too,
// where tensor_from_python copies it (a tensor lr must see the user's
// writes). interop.cc.
Tensor shared_tensor_from_python(py::handle obj, const std::string& where);

// "int", "MyModule": the name of a Python value's type, for messages.
inline std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

// "int 5", "list [1, 2]": a Python value's type and (short) repr, for messages.
inline std::string describe(py::handle obj) {
  std::string r = py::str(py::repr(obj)).cast<std::string>();
  if (r.size() > 60) r = r.substr(0, 57) + "...";
  return type_name(obj) + " " + r;
}

// A Python value the user gave, as T; else TypeError naming where it went
// (`what`: "DeviceMesh[key]", "forward hook's result") and what was
// expected. Every conversion of a user's object inside a binding goes
// through it or checks first: pybind11's own cast error ("Unable to cast
// Python instance to C++ type") names neither.
template <class T>
T cast_arg(py::handle obj, const std::string& what, const std::string& expected) {
  pybind11::detail::make_caster<T> caster;
  if (!obj || !caster.load(obj, /*convert=*/true))
    throw py::type_error(what + ": expected " + expected + ", got " + (obj ? describe(obj) : "nothing"));
  return pybind11::detail::cast_op<T>(std::move(caster));
}

}  // namespace dtensor::python

namespace pybind11::detail {

// An int that fits int64 into `out`; false for anything else, 2**64
// included (src.cast<int64_t>() would throw pybind11's cast error from
// inside a load, which names neither the call nor the value).
inline bool load_int64(handle src, int64_t& out) {
  make_caster<int64_t> c;
  if (!c.load(src, true)) return false;
  out = cast_op<int64_t>(std::move(c));
  return true;
}

// Shape, strides, dim lists. A bare int is a one-element list, so that
// sum(x, dim=1) and sum(x, dim=(0, 1)) both work as in PyTorch.
template <>
struct type_caster<dtensor::DimVector> {
  PYBIND11_TYPE_CASTER(dtensor::DimVector, const_name("Sequence[int]"));

  bool load(handle src, bool convert) {
    if (!src) return false;
    if (PyLong_Check(src.ptr()) || (convert && PyIndex_Check(src.ptr()) &&
                                    !PySequence_Check(src.ptr()))) {
      int64_t v = 0;
      if (!load_int64(src, v)) return false;
      value.clear();
      value.push_back(v);
      return true;
    }
    if (!PySequence_Check(src.ptr()) || PyUnicode_Check(src.ptr()) || PyBytes_Check(src.ptr()))
      return false;
    auto seq = reinterpret_borrow<sequence>(src);
    value.clear();
    for (handle item : seq) {
      int64_t v = 0;
      if (!PyIndex_Check(item.ptr()) || !load_int64(item, v)) return false;
      value.push_back(v);  // throws dtensor::Error beyond kMaxDims
    }
    return true;
  }

  static handle cast(const dtensor::DimVector& v, return_value_policy, handle) {
    tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = int_(v[i]);
    return t.release();
  }
};

// A number next to tensors: bool, int and float keep their kind (int64
// tensor + 2 stays int64, + 2.5 is float32).
template <>
struct type_caster<dtensor::Scalar> {
  PYBIND11_TYPE_CASTER(dtensor::Scalar, const_name("bool | int | float"));
  type_caster() : value(0) {}

  bool load(handle src, bool) {
    if (!src) return false;
    PyObject* o = src.ptr();
    if (PyBool_Check(o)) {
      value = dtensor::Scalar(o == Py_True);
      return true;
    }
    // NumPy's bool_ is neither bool nor int.
    if (std::string(Py_TYPE(o)->tp_name) == "numpy.bool_") {
      value = dtensor::Scalar(static_cast<bool>(PyObject_IsTrue(o)));
      return true;
    }
    if (PyLong_Check(o) || (PyIndex_Check(o) && !PyFloat_Check(o))) {
      int64_t v = 0;
      if (!load_int64(src, v)) return false;  // beyond int64: no Scalar
      value = dtensor::Scalar(v);
      return true;
    }
    // float, and NumPy's float16/float32 scalars (float64 is a float). Not
    // anything with __float__: a one-element Tensor has one, and must stay
    // a Tensor operand.
    if (PyFloat_Check(o) || std::string(Py_TYPE(o)->tp_name).rfind("numpy.float", 0) == 0) {
      value = dtensor::Scalar(PyFloat_AsDouble(o));
      return true;
    }
    return false;
  }

  static handle cast(const dtensor::Scalar& s, return_value_policy, handle) {
    switch (s.kind()) {
      case dtensor::Scalar::Kind::Bool: return bool_(s.to<bool>()).release();
      case dtensor::Scalar::Kind::Int: return int_(s.to_int()).release();
      default: return float_(s.to_double()).release();
    }
  }
};

template <>
struct type_caster<dtensor::Placements> {
  PYBIND11_TYPE_CASTER(dtensor::Placements, const_name("Sequence[Placement] | str"));

  bool load(handle src, bool) {
    if (!src) return false;
    if (PyUnicode_Check(src.ptr())) {
      value = dtensor::parse_placements(src.cast<std::string>());
      return true;
    }
    if (!PySequence_Check(src.ptr())) return false;
    dtensor::Placements out;
    for (handle item : reinterpret_borrow<sequence>(src)) {
      make_caster<dtensor::Placement> c;
      if (!c.load(item, false)) return false;
      out.push_back(cast_op<const dtensor::Placement&>(c));
    }
    value = out;
    return true;
  }

  static handle cast(const dtensor::Placements& p, return_value_policy, handle) {
    tuple t(p.size());
    for (size_t i = 0; i < p.size(); ++i) t[i] = dtensor::python::placement_to_python(p[i]);
    return t.release();
  }
};

template <>
struct type_caster<dtensor::DType> {
  PYBIND11_TYPE_CASTER(dtensor::DType, const_name("dtype"));

  bool load(handle src, bool) {
    if (!src || src.is_none()) return false;
    std::optional<dtensor::DType> d = dtensor::python::dtype_from_python(src);
    if (!d) return false;
    value = *d;
    return true;
  }

  static handle cast(dtensor::DType d, return_value_policy, handle) {
    return dtensor::python::dtype_to_python(d).release();
  }
};

}  // namespace pybind11::detail
