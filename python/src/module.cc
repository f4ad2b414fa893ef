// PYBIND11_MODULE for dtensor._dtensor: registers dtensor.Error, then lets
// each binding file (bindings.h) add its names. The pure-Python package
// (python/dtensor/__init__.py) re-exports them and adds init_device_mesh.
#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <typeinfo>

#include "bindings.h"
#include "dtensor/error.h"

namespace dtensor::python {

namespace {

// Overload resolution without the cost of a miss. When an argument is not
// of an overload's class (a Tensor offered to dt.mm's DTensor overload,
// which is tried first), pybind11 2.10 asks the argument's type for
// another extension's module-local loader: hasattr(type(arg),
// PYBIND11_MODULE_LOCAL_ID), which on a miss formats an AttributeError and
// clears it, about 1.5 K instructions, twice per overload (its two passes).
// That was a third of dt.mm(Tensor, Tensor) from Python and three quarters
// of dt.add(Tensor, Tensor) (docs/PERFORMANCE.md, issue 44). Giving our
// classes that attribute makes the lookup a hit: a loader record whose C++
// type is none that any binding takes (so pybind11 passes it by at once)
// and whose loader loads nothing. pybind11's own loader of a truly
// module-local class of another extension is unaffected: our classes are
// not module-local, and a class of another extension keeps its own
// attribute.
struct NoForeignType {};
void* load_nothing(PyObject*, const py::detail::type_info*) { return nullptr; }

void skip_foreign_loader_lookups(py::module_& m) {
  static py::detail::type_info none = [] {
    py::detail::type_info t{};
    t.cpptype = &typeid(NoForeignType);
    t.module_local_load = &load_nothing;
    return t;
  }();
  const auto mark = [](py::handle type) {
    if (!PyType_Check(type.ptr()) ||
        py::detail::get_type_info(reinterpret_cast<PyTypeObject*>(type.ptr())) == nullptr)
      return;  // not one of this module's classes
    if (PyObject_SetAttrString(type.ptr(), PYBIND11_MODULE_LOCAL_ID, py::capsule(&none).ptr()) != 0)
      throw py::error_already_set();
  };
  const std::function<void(py::module_)> walk = [&](py::module_ mod) {
    for (auto [name, value] : py::reinterpret_borrow<py::dict>(mod.attr("__dict__"))) {
      if (py::isinstance<py::module_>(value)) {
        const py::module_ sub = py::reinterpret_borrow<py::module_>(value);
        if (py::str(sub.attr("__name__")).cast<std::string>().rfind("dtensor.", 0) == 0 ||
            py::str(sub.attr("__name__")).cast<std::string>().rfind("_dtensor.", 0) == 0)
          walk(sub);
      } else {
        mark(value);
      }
    }
  };
  walk(m);
}

}  // namespace

// dtensor::Error becomes dtensor.Error, a RuntimeError (as PyTorch raises
// RuntimeError for the same misuses: shape mismatches, bad layouts), with
// the C++ message unchanged.
void bind_errors(py::module_& m) {
  py::register_exception<dtensor::Error>(m, "Error", PyExc_RuntimeError);
}

}  // namespace dtensor::python

PYBIND11_MODULE(_dtensor, m) {
  namespace dp = dtensor::python;
  m.doc() = "dtensor: distributed tensors (DeviceMesh + Shard/Replicate/Partial) in C++20";
  dp::bind_errors(m);
  dp::bind_tensor(m);
  dp::bind_interop(m);
  dp::bind_world(m);
  dp::bind_current_rank(m);
  dp::bind_mesh(m);
  dp::bind_placement(m);
  dp::bind_dtensor(m);
  dp::bind_ops(m);
  dp::bind_conversions(m);
  dp::bind_plan(m);
  dp::bind_debug(m);
  dp::bind_autograd(m);
  dp::bind_optim(m);
  dp::bind_nn(m);
  dp::bind_parallel(m);
  dp::bind_loss_parallel(m);
  dp::bind_checkpoint(m);
  dp::bind_memory(m);
  dp::bind_custom_op(m);
  dp::bind_estimate(m);
  dp::install_fast_ops(m);
  dp::skip_foreign_loader_lookups(m);
}
