// The arithmetic operators' fast path: `a + b`, `a - b`, `a * b`, `a / b`
// with both operands exactly a DTensor, or both exactly a Tensor.
//
// Why: through pybind11 such a call goes slot_nb_add -> the type's __add__
// attribute -> pybind11's dispatcher, which tries the overloads in turn and
// looks the C++ types up by std::type_index (hashing the mangled names) for
// every argument and for the result: about 7,000 instructions, as much as
// the DTensor add itself (bench/python_overhead.py; docs/PERFORMANCE.md).
// Here the type's number slot (nb_add, ...) is the C function itself: one
// pointer comparison per operand, the C++ operator with the GIL released,
// and the result wrapped with the type record looked up once.
//
// Every other operand mix (a number, a Tensor with a DTensor, a subclass)
// takes Python's binary-operator protocol to the bound __add__ / __radd__
// methods (generic() below), as before; the in-place forms (+=) keep
// pybind11's slots. The values are those of the C++ operators, which the
// bound methods call too: the fast path changes no bit.
//
// install_fast_ops() runs last in PYBIND11_MODULE, after every binding file
// has defined its __add__ (assigning a type's __add__ later, from Python,
// would reset its slot to the generic one: correct, only slower).
#include <Python.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <utility>

#include "bindings.h"
#include "dtensor/dtensor.h"

namespace dtensor::python {

namespace {

// One class's fast path: its type and pybind11's record of it.
struct FastType {
  PyTypeObject* type = nullptr;
  const py::detail::type_info* info = nullptr;
};

FastType g_tensor, g_dtensor;  // written once at import, with the GIL held

// What CPython's generic slot (slot_nb_add, ...) does, for every operand
// mix the fast path does not take: a.__add__(b) when a's type has this slot
// (the slot is inherited by subclasses), else or then b.__radd__(a), and
// NotImplemented when neither answers. The generic slot itself cannot be
// called once replaced: it tests that the type's slot is itself.
PyObject* call_dunder(PyObject* self, const char* name, PyObject* other) {
  PyObject* method = PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(self)), name);
  if (method == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return nullptr;
    PyErr_Clear();
    Py_RETURN_NOTIMPLEMENTED;
  }
  PyObject* out = PyObject_CallFunctionObjArgs(method, self, other, nullptr);
  Py_DECREF(method);
  return out;
}

PyObject* generic(PyObject* a, PyObject* b, binaryfunc PyNumberMethods::*field, binaryfunc slot,
                  const char* name, const char* rname) {
  auto has_slot = [field, slot](PyObject* o) {
    PyNumberMethods* nb = Py_TYPE(o)->tp_as_number;
    return nb != nullptr && nb->*field == slot;
  };
  const bool left = has_slot(a);
  const bool right = Py_TYPE(b) != Py_TYPE(a) && has_slot(b);
  // b's reflected method first when b's type is a subclass of a's (Python's rule).
  if (left && right && PyType_IsSubtype(Py_TYPE(b), Py_TYPE(a))) {
    PyObject* r = call_dunder(b, rname, a);
    if (r != Py_NotImplemented) return r;
    Py_DECREF(r);
    return call_dunder(a, name, b);
  }
  if (left) {
    PyObject* r = call_dunder(a, name, b);
    if (r != Py_NotImplemented || !right) return r;
    Py_DECREF(r);
  }
  if (right) return call_dunder(b, rname, a);
  Py_RETURN_NOTIMPLEMENTED;
}

template <class T>
const T& value_of(PyObject* o, const FastType& ft) {
  auto* inst = reinterpret_cast<py::detail::instance*>(o);
  return *static_cast<const T*>(inst->get_value_and_holder(ft.info, false).value_ptr());
}

// A new Python object owning *value: what pybind11's cast of a returned T
// does (class_<T>::init_instance: the instance registered, a unique_ptr
// holder made), with the type record given rather than looked up by
// std::type_index, a third of the cast's instructions. install() checks
// that T's class has the default holder this assumes.
template <class T>
PyObject* wrap(std::unique_ptr<T> value, const FastType& ft) {
  PyObject* obj = py::detail::make_new_instance(ft.type);
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  py::detail::value_and_holder v_h = inst->get_value_and_holder(ft.info, false);
  v_h.value_ptr() = value.release();
  inst->owned = true;
  py::detail::register_instance(inst, v_h.value_ptr(), ft.info);
  v_h.set_instance_registered();
  new (std::addressof(v_h.holder<std::unique_ptr<T>>())) std::unique_ptr<T>(v_h.value_ptr<T>());
  v_h.set_holder_constructed();
  return obj;
}

// Runs op with the GIL released. A C++ exception becomes the Python one
// pybind11's dispatcher would raise for it, through the same translators
// (dtensor.Error for dtensor::Error, a Python hook's own exception, ...).
template <class T, class Op>
PyObject* run(PyObject* a, PyObject* b, const FastType& ft, Op op) {
  const T& x = value_of<T>(a, ft);
  const T& y = value_of<T>(b, ft);
  std::unique_ptr<T> out;  // made in place on the heap: no ~300-byte DTensor move
  PyThreadState* saved = PyEval_SaveThread();
  try {
    out.reset(new T(op(x, y)));
  } catch (...) {
    PyEval_RestoreThread(saved);
    if (!py::detail::apply_exception_translators(
            py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(
            py::detail::get_internals().registered_exception_translators))
      PyErr_SetString(PyExc_SystemError, "dtensor: an exception no translator took");
    return nullptr;
  }
  PyEval_RestoreThread(saved);
  return wrap(std::move(out), ft);
}

// The slot for one operator: exact types take the fast path, anything else
// the generic protocol.
#define DTENSOR_PY_FAST_SLOT(name, field, dunder, rdunder, expr)                                   \
  PyObject* name(PyObject* a, PyObject* b) {                                                       \
    if (Py_TYPE(a) == Py_TYPE(b)) {                                                                \
      if (Py_TYPE(a) == g_dtensor.type)                                                            \
        return run<DTensor>(a, b, g_dtensor,                                                       \
                            [](const DTensor& x, const DTensor& y) { return expr; });              \
      if (Py_TYPE(a) == g_tensor.type)                                                             \
        return run<Tensor>(a, b, g_tensor, [](const Tensor& x, const Tensor& y) { return expr; }); \
    }                                                                                              \
    return generic(a, b, &PyNumberMethods::field, name, dunder, rdunder);                          \
  }

DTENSOR_PY_FAST_SLOT(fast_add, nb_add, "__add__", "__radd__", x + y)
DTENSOR_PY_FAST_SLOT(fast_sub, nb_subtract, "__sub__", "__rsub__", x - y)
DTENSOR_PY_FAST_SLOT(fast_mul, nb_multiply, "__mul__", "__rmul__", x* y)
DTENSOR_PY_FAST_SLOT(fast_div, nb_true_divide, "__truediv__", "__rtruediv__", x / y)

#undef DTENSOR_PY_FAST_SLOT

void install(py::module_& m, const char* name, FastType& ft) {
  py::object cls = m.attr(name);
  ft.type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  ft.info = py::detail::get_type_info(ft.type);
  PyNumberMethods* nb = ft.type->tp_as_number;
  DT_CHECK(ft.info != nullptr && ft.info->simple_type && ft.info->default_holder && nb != nullptr &&
               nb->nb_add && nb->nb_subtract && nb->nb_multiply && nb->nb_true_divide,
           "dtensor._dtensor: ", name,
           " is not the plain pybind11 class with arithmetic slots that the fast path assumes");
  nb->nb_add = fast_add;
  nb->nb_subtract = fast_sub;
  nb->nb_multiply = fast_mul;
  nb->nb_true_divide = fast_div;
}

}  // namespace

void install_fast_ops(py::module_& m) {
  install(m, "Tensor", g_tensor);
  install(m, "DTensor", g_dtensor);
}

}  // namespace dtensor::python
