// Autograd from Python, with PyTorch's names: the gradient side of
// dtensor.DTensor (requires_grad, requires_grad_(), grad, backward(),
// detach(), is_leaf, grad_fn, retain_grad()), the grad-mode context
// managers dtensor.no_grad(), enable_grad(), set_grad_enabled(mode) and
// is_grad_enabled(), dtensor.autograd.backward / graph_memory and
// dtensor.autograd.graph.saved_tensors_hooks.
//
// A Python DTensor object holds one C++ DTensor; every copy made after
// requires_grad_() (the one an optimizer or a module keeps) shares its
// gradient state, so `p.grad` reads what backward wrote whichever copy ran
// it. Grad mode is per thread, as in PyTorch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <any>
#include <memory>
#include <optional>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "dtensor/autograd.h"

namespace dtensor::python {

namespace {

using release_gil = py::call_guard<py::gil_scoped_release>;

// torch.no_grad(), enable_grad() and set_grad_enabled(mode) as one object:
// a with-block sets the mode in __enter__ and restores the previous one in
// __exit__; as a decorator it wraps a function in the same scope. A plain
// set_grad_enabled(mode) call takes effect at once and stays (PyTorch's
// rule): its guard is made by the constructor and, when the object goes
// without __exit__, deliberately left alive (a few bytes) so that the mode
// is not restored.
struct GradMode {
  bool mode;
  bool immediate;  // set_grad_enabled: the mode is set by the constructor
  std::unique_ptr<GradModeGuard> guard;

  GradMode(bool m, bool imm) : mode(m), immediate(imm) {
    if (immediate) guard = std::make_unique<GradModeGuard>(mode);
  }
  ~GradMode() {
    if (immediate) (void)guard.release();
  }
  void enter() {
    if (!immediate) guard = std::make_unique<GradModeGuard>(mode);
  }
  void exit() {
    guard.reset();
    immediate = false;
  }
};

// torch.autocast("cpu", dtype=...): AutocastGuard made in __enter__ and
// dropped in __exit__; as a decorator it wraps a function in the scope.
struct Autocast {
  DType dtype;
  bool enabled;
  std::unique_ptr<AutocastGuard> guard;
  void enter() { guard = std::make_unique<AutocastGuard>(dtype, enabled); }
  void exit() { guard.reset(); }
};


// with dtensor.autograd.graph.saved_tensors_hooks(pack, unpack): the C++
// SavedTensorHooks made in __enter__, calling the Python functions with the
// GIL taken; what pack returns is kept as a Python object.
struct SavedHooks {
  std::shared_ptr<py::object> pack, unpack;
  std::unique_ptr<SavedTensorHooks> live;
  void enter() {
    auto pk = pack, up = unpack;
    live = std::make_unique<SavedTensorHooks>(
        [pk](const DTensor& t) -> std::any {
          py::gil_scoped_acquire gil;
          return keep((*pk)(py::cast(t, py::return_value_policy::copy)));
        },
        [up](const std::any& packed) -> DTensor {
          py::gil_scoped_acquire gil;
          const auto& obj = std::any_cast<const std::shared_ptr<py::object>&>(packed);
          return cast_arg<DTensor>((*up)(*obj), "saved_tensors_hooks: unpack_hook's result",
                                   "a DTensor (the tensor pack_hook was given)");
        });
  }
};

}  // namespace

std::shared_ptr<py::object> keep(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

void bind_autograd(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<DTensor>>(m.attr("DTensor"));
  cls.def_property(
         "requires_grad", [](const DTensor& d) { return d.requires_grad(); },
         [](DTensor& d, bool b) { d.requires_grad_(b); },
         "Whether ops on this tensor record their backward. Setting it is requires_grad_(b): "
         "leaves of a floating dtype only.")
      .def("requires_grad_",
           [](py::object self, bool b) {
             self.cast<DTensor&>().requires_grad_(b);
             return self;
           },
           py::arg("requires_grad") = true,
           "Makes this leaf require (or stop requiring) gradients; returns self. Copies made "
           "afterwards (an optimizer's, a module's) share its gradient.")
      .def_property(
          "grad", [](const DTensor& d) { return d.grad(); },
          [](DTensor& d, std::optional<DTensor> g) { d.set_grad(std::move(g)); },
          "The gradient backward() accumulated (a DTensor with the placements its backward "
          "produced), or None. Assign None to clear it (PyTorch's zero_grad(set_to_none=True)).")
      .def("backward",
           [](const DTensor& d, std::optional<DTensor> gradient, bool retain_graph) {
             d.backward(gradient, retain_graph);
           },
           py::arg("gradient") = py::none(), py::arg("retain_graph") = false, release_gil(),
           "Gradients of this tensor with respect to the leaves that made it, added into their "
           ".grad. `gradient` defaults to ones for a one-element tensor. Frees the graph unless "
           "retain_graph.")
      .def("detach", &DTensor::detach, "The same data, out of the graph.")
      .def_property_readonly("is_leaf", &DTensor::is_leaf,
                             "Not made by a recorded op (True for tensors that do not require "
                             "grad).")
      .def_property_readonly(
          "grad_fn",
          [](const DTensor& d) -> std::optional<std::string> {
            const char* name = d.grad_fn_name();
            if (name == nullptr || *name == '\0') return std::nullopt;
            return std::string(name);
          },
          "The name of the op that made this tensor (\"AddBackward\"...), None for a leaf. "
          "(PyTorch gives a node object; dtensor its name.)")
      .def("retain_grad", &DTensor::retain_grad,
           "Keeps this non-leaf's gradient in .grad after backward().");

  py::class_<GradMode>(m, "_GradMode")
      .def("__enter__", [](GradMode& g) { g.enter(); })
      .def("__exit__", [](GradMode& g, py::args) {
        g.exit();
        return false;
      })
      .def("__call__", [](const GradMode& g, py::function fn) {
        const bool mode = g.mode;
        return py::cpp_function([mode, fn](py::args args, py::kwargs kwargs) {
          GradModeGuard guard(mode);
          return fn(*args, **kwargs);
        });
      }, "As a decorator: runs the function in this grad mode.");
  m.def("no_grad", []() { return std::make_unique<GradMode>(false, false); },
        "with dtensor.no_grad(): ops record nothing, their outputs do not require grad "
        "(torch.no_grad). Nests; per thread; also a decorator.");
  m.def("enable_grad", []() { return std::make_unique<GradMode>(true, false); },
        "with dtensor.enable_grad(): ops record again inside (torch.enable_grad).");
  m.def("set_grad_enabled", [](bool mode) { return std::make_unique<GradMode>(mode, true); },
        py::arg("mode"),
        "Sets grad mode on this thread: at once and for good as a plain call, until the end "
        "of the block as a with-block (torch.set_grad_enabled).");
  m.def("is_grad_enabled", &is_grad_enabled, "Whether ops record their backward on this thread.");

  py::class_<Autocast>(m, "_Autocast")
      .def("__enter__", [](Autocast& a) { a.enter(); })
      .def("__exit__", [](Autocast& a, py::args) {
        a.exit();
        return false;
      })
      .def("__call__", [](const Autocast& a, py::function fn) {
        const DType dtype = a.dtype;
        const bool enabled = a.enabled;
        return py::cpp_function([dtype, enabled, fn](py::args args, py::kwargs kwargs) {
          AutocastGuard guard(dtype, enabled);
          return fn(*args, **kwargs);
        });
      }, "As a decorator: runs the function in this autocast scope.");
  m.def("autocast",
        [](const std::string& device_type, std::optional<DType> dtype, bool enabled) {
          DT_CHECK(device_type == "cpu", "autocast: device_type must be 'cpu' (dtensor runs on "
                   "the CPU), got '", device_type, "'");
          const DType d = dtype.value_or(DType::BFloat16);
          DT_CHECK(!enabled || is_half(d), "autocast: dtype must be dtensor.bfloat16 or "
                   "dtensor.float16, got ", d);
          return std::make_unique<Autocast>(Autocast{d, enabled, nullptr});
        },
        py::arg("device_type") = "cpu", py::arg("dtype") = py::none(), py::arg("enabled") = true,
        "with dtensor.autocast('cpu', dtype=dtensor.bfloat16): torch.autocast for dtensor's "
        "ops: mm, bmm, matmul, addmm, baddbmm, linear and scaled_dot_product_attention compute "
        "in dtype, nll_loss and cross_entropy in float32, as torch's CPU lists "
        "(docs/mixed_precision.md). Nests; per thread; also a decorator.");
  m.def("get_autocast_dtype", []() { return autocast_dtype(); },
        "The dtype of this thread's autocast scope, None outside one.");

  py::module_ ag = m.def_submodule("autograd", "torch.autograd's functions for DTensors.");
  ag.def("backward",
         [](const std::vector<DTensor>& tensors, std::optional<std::vector<std::optional<DTensor>>> grads,
            bool retain_graph) {
           backward(tensors, grads.value_or(std::vector<std::optional<DTensor>>{}), retain_graph);
         },
         py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = false,
         release_gil(),
         "Backward from several outputs at once (torch.autograd.backward); a None gradient is "
         "ones for a one-element output.");
  ag.def("graph_memory",
         [](const DTensor& output) {
           GraphMemory g = graph_memory(output);
           py::dict out;
           out["saved_bytes"] = g.saved_bytes;
           out["nodes"] = g.nodes;
           return out;
         },
         py::arg("output"),
         "{'saved_bytes': ..., 'nodes': ...}: what the graph behind `output` keeps for its "
         "backward.");
  py::module_ graph = ag.def_submodule("graph", "torch.autograd.graph's saved-tensor hooks.");
  py::class_<SavedHooks>(graph, "saved_tensors_hooks", R"doc(
with saved_tensors_hooks(pack_hook, unpack_hook): each DTensor an op saves for
its backward is handed to pack_hook(t) when the op runs, and the node keeps
what it returns; backward calls unpack_hook(packed), which must return a
DTensor of the saved one's shape, dtype and mesh (torch.autograd.graph's).
)doc")
      .def(py::init([](py::function pack, py::function unpack) {
             auto h = std::make_unique<SavedHooks>();
             h->pack = keep(std::move(pack));
             h->unpack = keep(std::move(unpack));
             return h;
           }),
           py::arg("pack_hook"), py::arg("unpack_hook"))
      .def("__enter__", [](SavedHooks& h) { h.enter(); })
      .def("__exit__", [](SavedHooks& h, py::args) {
        h.live.reset();
        return false;
      });
  py::object modules = py::module_::import("sys").attr("modules");
  modules["dtensor.autograd"] = ag;
  modules["dtensor.autograd.graph"] = graph;
}

}  // namespace dtensor::python
