// A one-element Tensor or DTensor as a Python number: item(), float(x),
// int(x), bool(x), as torch. A DTensor's is its full value's (a collective:
// every rank of an SPMD program gets the same number). More than one
// element is an error, as in torch; bool(x) says why (torch's "ambiguous").
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "casters.h"

namespace dtensor::python {

namespace {

// The one element of t, checked (op names the call in the message).
Tensor one_element(const Tensor& t, const char* op) {
  DT_CHECK(t.numel() == 1, op,
           ": only a tensor with one element converts to a Python number, "
           "got ",
           t.numel(), " elements (shape ", t.shape(), ")");
  return t;
}

py::object item_of(const Tensor& t) {
  one_element(t, "item()");
  switch (t.dtype()) {
    case DType::Bool:
      return py::bool_(t.item<bool>());
    case DType::Int64:
      return py::int_(t.item<int64_t>());
    default:
      return py::float_(t.item<double>());
  }
}

bool bool_of(const Tensor& t) {
  DT_CHECK(t.numel() == 1, "bool(): the truth value of a tensor of ", t.numel(),
           " elements (shape ", t.shape(), ") is ambiguous; use any() or all()");
  return t.item<bool>();
}

// Checked before the collective, so that a wrong call moves no data.
Tensor full_value(const DTensor& d, const char* op) {
  if (std::string(op) == "bool()")
    DT_CHECK(d.numel() == 1, "bool(): the truth value of a tensor of ", d.numel(),
             " elements (shape ", d.shape(), ") is ambiguous; use any() or all()");
  DT_CHECK(d.numel() == 1, op,
           ": only a tensor with one element converts to a Python number, "
           "got ",
           d.numel(), " elements (shape ", d.shape(), ")");
  py::gil_scoped_release nogil;
  return d.full_tensor();
}

}  // namespace

void bind_conversions(py::module_& m) {
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  tensor.def("item", &item_of, "The single element of a one-element tensor, as a Python number.")
      .def("__bool__", &bool_of)
      .def("__float__", [](const Tensor& t) { return one_element(t, "float()").item<double>(); })
      .def("__int__", [](const Tensor& t) { return one_element(t, "int()").item<int64_t>(); });
  auto dtensor = py::reinterpret_borrow<py::class_<DTensor>>(m.attr("DTensor"));
  dtensor
      .def(
          "item", [](const DTensor& d) { return item_of(full_value(d, "item()")); },
          "The single element of a one-element DTensor (its full value), as a Python number.")
      .def("__bool__", [](const DTensor& d) { return bool_of(full_value(d, "bool()")); })
      .def("__float__", [](const DTensor& d) { return full_value(d, "float()").item<double>(); })
      .def("__int__", [](const DTensor& d) { return full_value(d, "int()").item<int64_t>(); });
}

}  // namespace dtensor::python
