// dtensor.nn: modules as torch.nn has them, over the C++ nn::Module tree
// that parallelize_module and fully_shard work on.
//
//   class MLP(dtensor.nn.Module):
//       def __init__(self, mesh):
//           super().__init__(mesh)
//           self.up = dtensor.nn.Linear(mesh, 16, 64)             # a child module
//           self.scale = dtensor.nn.Parameter(np.ones(64))        # a parameter
//       def forward(self, x):
//           return self.down(dtensor.gelu(self.up(x)) * self.scale)
//
// A Python subclass of Module is a C++ nn::Module whose forward() calls the
// Python method, so C++ sees one tree: named_parameters() gives
// "up.weight", parallelize_module replaces parameters in place and hooks
// the children, and self.weight reads the parameter's current value.
// Module.__call__ releases the GIL (forward hooks, collectives); forward
// written in Python takes it back.
//
// A module made without a mesh (Module(), Linear(16, 64)) is on
// nn::local_mesh() until parallelize_module or fully_shard adopts it (nn.h);
// its calls take dtensor.Tensors as whole inputs. __call__ takes any
// arguments: one DTensor is the fast path (nn::Module's call, GIL
// released); others go to the Python forward, inside the hooks when there
// are any (module_call).
//
// Ownership. C++ owns children (nn::Module keeps unique_ptrs), Python owns
// what it made. A module made in Python is owned by its Python object until
// it is assigned as a child; from then on the parent (C++) owns it and the
// Python object only refers to it: the holder's deleter skips modules that
// were handed over (cpp_owned()). The parent's Python object keeps the
// child's alive (it is in the parent's __dict__), and the child's keeps its
// parent's alive (child._parent), so neither C++ object can go while
// Python can reach it; the pair is an ordinary reference cycle for the
// garbage collector. Children cannot be removed or replaced (nn::Module has
// no way to), and a module has one parent.
#include "dtensor/nn.h"

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "current_rank.h"
#include "dtensor/fsdp.h"
#include "dtensor/ops.h"
#include "dtensor/optim.h"

namespace dtensor::python {

namespace {

// The holder of every module class: deletes the module unless a C++ parent
// owns it (see the ownership note above).
struct ModuleDeleter {
  void operator()(nn::Module* m) const;
};
template <class M>
using ModulePtr = std::unique_ptr<M, ModuleDeleter>;

std::unordered_set<const nn::Module*>& cpp_owned() {
  static auto* set = new std::unordered_set<const nn::Module*>();  // touched with the GIL held
  return *set;
}

void ModuleDeleter::operator()(nn::Module* m) const {
  // Handed to a C++ parent: the parent deletes it. The entry lives exactly
  // as long as the Python object, so a later module at the same address is
  // not mistaken for it.
  if (cpp_owned().erase(m) != 0) return;
  delete m;
}

using release_gil = py::call_guard<py::gil_scoped_release>;

// Whether a module's C++ object exists: a Python subclass's __init__ may set
// attributes before it calls super().__init__(mesh), when there is none.
bool constructed(py::handle self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  return inst->get_value_and_holder().holder_constructed();
}

// A Module written in Python: forward() calls the Python method; children
// and parameters are registered through the protected C++ calls.
class PyModule : public nn::Module {
 public:
  using nn::Module::Module;
  // The Python forward gets its own copy of the input (a DTensor handle
  // sharing the shards), not a reference into this call's frame that the
  // Python code might keep.
  DTensor forward(const DTensor& x) override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const nn::Module*>(this), "forward");
    DT_CHECK(
        static_cast<bool>(f), "dtensor.nn.Module subclass ",
        py::str(py::type::handle_of(py::cast(static_cast<nn::Module*>(this)))).cast<std::string>(),
        " does not define forward(self, x)");
    return cast_arg<DTensor>(
        f(py::cast(x, py::return_value_policy::copy)),
        type_name(py::cast(static_cast<nn::Module*>(this))) + ".forward's result", "a DTensor");
  }
  DTensor* add_parameter(const std::string& name, DTensor value) {
    return register_parameter(name, std::move(value));
  }
  DTensor* add_parameter(const std::string& name, const nn::Init& init) {
    return register_parameter(name, init);
  }
  void add_module(const std::string& name, nn::Module* child) {
    register_module(name, std::unique_ptr<nn::Module>(child));
  }
};

// dtensor.nn.Parameter(data, requires_grad=True): marks a value assigned to
// a Module attribute as a parameter (torch.nn.Parameter). A full tensor (or
// array) becomes Replicate on the module's mesh; a DTensor keeps its layout.
struct Parameter {
  py::object data;
  bool requires_grad = true;
};

PyModule& python_module(nn::Module& m, const char* what) {
  auto* p = dynamic_cast<PyModule*>(&m);
  DT_CHECK(p != nullptr, what,
           ": only a module written in Python (a subclass of "
           "dtensor.nn.Module) takes new parameters and children");
  return *p;
}

bool has_own_parameter(nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return true;
  return false;
}

void check_name(nn::Module& m, const std::string& name) {
  DT_CHECK(!name.empty() && name.find('.') == std::string::npos,
           "a parameter or module name must be non-empty without '.', got '", name, "'");
  DT_CHECK(!has_own_parameter(m, name), "the name '", name,
           "' is already a parameter of this module");
  for (auto& [n, c] : m.named_modules())
    DT_CHECK(n != name, "the name '", name,
             "' is already a module of this module (dtensor "
             "modules cannot be replaced)");
}

void register_parameter(py::object self, const std::string& name, const Parameter& p) {
  auto& m = python_module(self.cast<nn::Module&>(), "register_parameter");
  check_name(m, name);
  DTensor* slot;
  if (py::isinstance<DTensor>(p.data)) {
    DTensor value = p.data.cast<DTensor>();
    if (p.requires_grad && !value.requires_grad()) {
      value = value.detach();
      value.requires_grad_();
    }
    slot = m.add_parameter(name, std::move(value));
  } else {
    // A recipe (dtensor.nn.Init) or values; under meta_device() the slot is
    // meta and keeps either for materialize().
    const nn::Init init = py::isinstance<nn::Init>(p.data) ? p.data.cast<nn::Init>()
                                                           : nn::Init(tensor_from_python(p.data));
    slot = m.add_parameter(name, init);
    if (!p.requires_grad && slot->requires_grad()) slot->requires_grad_(false);
  }
  (void)slot;
}

void register_child(py::object self, const std::string& name, py::object child_obj) {
  auto& m = python_module(self.cast<nn::Module&>(), "register_module");
  auto& child =
      cast_arg<nn::Module&>(child_obj, "register_module('" + name + "')", "a dtensor.nn.Module");
  check_name(m, name);
  DT_CHECK(cpp_owned().count(&child) == 0, "register_module('", name,
           "'): this module is already a child of another module (a module has one parent)");
  for (auto& [n, c] : child.named_modules())
    DT_CHECK(c != &m, "register_module('", name,
             "'): the module is this module or one of its "
             "parents (the tree would be a cycle)");
  cpp_owned().insert(&child);
  m.add_module(name, &child);
  // Keep the parent alive while Python reaches the child (its C++ object
  // lives inside the parent now), and the child's Python object alive while
  // the parent lives: a Python subclass's forward needs it (add_module does
  // not go through __setattr__).
  PyObject_GenericSetAttr(child_obj.ptr(), py::str("_parent").ptr(), self.ptr());
  if (PyObject_GenericSetAttr(self.ptr(), py::str(name).ptr(), child_obj.ptr()) != 0)
    throw py::error_already_set();
}

// Holds a call's extra arguments for the forward that nn::Module runs
// inside its hooks, possibly later (checkpointing's recomputation in
// backward) and on a thread without the GIL: the GIL is taken to touch or
// drop them.
struct ForwardArgs {
  py::object forward;
  py::tuple rest;
  py::dict kwargs;
  ~ForwardArgs() {
    // Dropped here, with the GIL; the members' own destructors then see null handles.
    py::gil_scoped_acquire gil;
    forward.release().dec_ref();
    rest.release().dec_ref();
    kwargs.release().dec_ref();
  }
};

// Module.__call__(*args, **kwargs). One DTensor (the common case) goes
// straight to nn::Module's call (hooks, forward) with the GIL released. A
// module on the local mesh takes dtensor.Tensor arguments as whole values
// (made DTensors on that mesh, as a one-process model's inputs). Other
// calls: without hooks, the Python forward with the arguments as given
// (PyTorch's); with hooks (parallelize_module, fully_shard,
// checkpoint_wrapper, register_forward_*hook), the hooks see the first
// argument, which must be a DTensor or each rank's local part of one (a
// Tensor or RankLocal, made Shard(0) over the data-parallel dims), and the
// result, which must be a DTensor.
py::object module_call(py::object self, py::args args, py::kwargs kwargs) {
  auto& mod = self.cast<nn::Module&>();
  if (args.size() == 1 && kwargs.empty() && py::isinstance<DTensor>(args[0])) {
    DTensor x = args[0].cast<DTensor>();
    DTensor y;
    {
      py::gil_scoped_release release;
      y = mod(x);
    }
    return py::cast(std::move(y));
  }
  py::list pos(args);
  if (mod.is_local()) {
    const Placements replicate{Replicate()};
    auto local = [&](py::handle v) -> py::object {
      if (!py::isinstance<Tensor>(v)) return py::reinterpret_borrow<py::object>(v);
      return py::cast(distribute_tensor(v.cast<Tensor>(), nn::local_mesh(), replicate));
    };
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = local(pos[i]);
    for (auto [k, v] : kwargs) kwargs[k] = local(v);
  }
  if (mod.has_hooks() && !pos.empty() && is_local_value(pos[0])) {
    // PyTorch's SPMD input: each rank's own part of the batch (a plain
    // tensor under MPI, a RankLocal in a simulated world). In the global
    // view that is Shard(0) over the data-parallel dims (each rank feeds
    // its own rows) and the same rows on every other dim, as tensor
    // parallelism's input_layouts=Replicate() says.
    const std::vector<int> dp = data_parallel_mesh_dims(mod);
    Placements p(static_cast<size_t>(mod.mesh().ndim()), Replicate());
    for (int d : dp) p[static_cast<size_t>(d)] = Shard(0);
    pos[0] = py::cast(local_value_as_dtensor(pos[0], mod.mesh(), p));
  }
  py::object forward = self.attr("forward");
  if (!mod.has_hooks()) return forward(*pos, **kwargs);
  DT_CHECK(!pos.empty() && py::isinstance<DTensor>(pos[0]), type_name(self),
           ": a module with forward hooks (parallelize_module, fully_shard, checkpoint_wrapper, "
           "register_forward_hook) takes a DTensor as its first argument (or each rank's part of "
           "one: a Tensor, or a dtensor.RankLocal of them), got ",
           pos.empty() ? std::string("none") : type_name(pos[0]));
  auto extra = std::make_shared<ForwardArgs>();
  extra->forward = forward;
  extra->rest = py::tuple(pos[py::slice(1, static_cast<py::ssize_t>(pos.size()), 1)]);
  extra->kwargs = kwargs;
  const std::string what = type_name(self) + ".forward's result";
  std::function<DTensor(const DTensor&)> fn = [extra, what](const DTensor& in) {
    py::gil_scoped_acquire gil;
    py::object r =
        extra->forward(py::cast(in, py::return_value_policy::copy), *extra->rest, **extra->kwargs);
    return cast_arg<DTensor>(r, what, "a DTensor (forward hooks see one output)");
  };
  DTensor x = pos[0].cast<DTensor>();
  DTensor y;
  {
    py::gil_scoped_release release;
    y = mod(x, fn);
  }
  return py::cast(std::move(y));
}

// The mesh of a module made without one.
DeviceMesh no_mesh() { return nn::local_mesh(); }

// PyTorch's normalized_shape: an int or a sequence of one int (the last dim).
int64_t last_dim(py::handle shape, const char* module) {
  if (PyLong_Check(shape.ptr())) return shape.cast<int64_t>();
  auto dims = cast_arg<std::vector<int64_t>>(shape, std::string(module) + "'s normalized_shape",
                                             "an int or a sequence of ints");
  DT_CHECK(dims.size() == 1, module, ": normalized_shape over ", dims.size(),
           " dims is not implemented (the last dim only)");
  return dims[0];
}

py::list named_modules(py::object self) {
  py::list out;
  for (auto& [name, mod] : self.cast<nn::Module&>().named_modules())
    out.append(
        py::make_tuple(name, py::cast(mod, py::return_value_policy::reference_internal, self)));
  return out;
}

std::string module_repr(py::handle self) {
  auto& m = self.cast<nn::Module&>();
  std::ostringstream os;
  os << type_name(self) << "(";
  bool first = true;
  for (auto& [name, p] : m.named_parameters()) {
    if (name.find('.') != std::string::npos) continue;
    os << (first ? "" : ", ") << name << "=" << p->shape() << " " << to_string(p->placements());
    first = false;
  }
  for (auto& [name, c] : m.named_modules()) {
    if (name.empty() || name.find('.') != std::string::npos) continue;
    os << (first ? "" : ", ") << name << "="
       << py::str(py::cast(c, py::return_value_policy::reference)).cast<std::string>();
    first = false;
  }
  os << ")";
  return os.str();
}

template <class M>
using ModuleClass = py::class_<M, nn::Module, ModulePtr<M>>;

struct MetaDevice {
  std::unique_ptr<nn::MetaDeviceGuard> guard;
};

}  // namespace

void bind_nn(py::module_& m) {
  // The global generator the unseeded modules and random ops draw from.
  m.def("manual_seed", &manual_seed, py::arg("seed"), R"doc(
Seeds the global generator (torch.manual_seed) that random ops and modules
made without a seed draw from: dtensor.rand/randn/dropout, nn.Linear,
nn.Embedding. Each such call takes the next seed of a sequence fixed by this
seed, the same on every process (they make the same calls in the same order),
so the MPI world and the simulated world give the same values.
)doc");
  m.def("initial_seed", &initial_seed, "The seed of the last manual_seed (or the default).");
  m.def(
      "get_rng_state",
      [] {
        const RngState s = get_rng_state();
        return py::make_tuple(s.seed, s.draws);
      },
      "The global generator's state, (seed, draws) (torch.get_rng_state).");
  m.def(
      "set_rng_state",
      [](const py::tuple& state) {
        DT_CHECK(state.size() == 2,
                 "set_rng_state: expected (seed, draws) from get_rng_state(), "
                 "got a tuple of ",
                 state.size());
        set_rng_state({cast_arg<uint64_t>(state[0], "set_rng_state's seed", "an int"),
                       cast_arg<uint64_t>(state[1], "set_rng_state's draws", "an int")});
      },
      py::arg("state"), "Restores a state from get_rng_state (torch.set_rng_state).");

  py::module_ nm = m.def_submodule("nn", "Modules (torch.nn) for DTensor models.");

  py::class_<Parameter>(nm, "Parameter", R"doc(
Marks a value assigned to a Module attribute as a parameter (torch.nn.Parameter):
a full tensor or array becomes Replicate on the module's mesh (every process
passes the same values); a DTensor keeps its layout. Floating parameters
require grad unless requires_grad=False.
)doc")
      .def(py::init([](py::object data, bool requires_grad) {
             return Parameter{std::move(data), requires_grad};
           }),
           py::arg("data"), py::arg("requires_grad") = true)
      .def_readonly("data", &Parameter::data)
      .def_readonly("requires_grad", &Parameter::requires_grad);

  py::class_<nn::Module, PyModule, ModulePtr<nn::Module>>(nm, "Module", py::dynamic_attr(), R"doc(
A module (torch.nn.Module): named parameters (DTensors that are autograd
leaves), named children, forward hooks. Subclass it and write
forward(self, ...) in Python. super().__init__() puts it on the process's
local mesh (whole parameters) until parallelize_module or fully_shard lays
it out; super().__init__(mesh) on a mesh. Assigning a Module to an attribute
makes it a child, assigning dtensor.nn.Parameter(...) a parameter (read back
through the attribute, with its current layout).
)doc")
      .def(py::init<DeviceMesh>(), py::arg("device_mesh"))
      .def(py::init<>(),
           "On the process's local mesh (the whole parameters on every process) "
           "until parallelize_module or fully_shard lays it out.")
      .def("forward", &nn::Module::forward, py::arg("input"))
      .def("__call__", &module_call,
           "Pre-hooks, forward(*args, **kwargs), hooks; returns the output.")
      .def_property_readonly("device_mesh", &nn::Module::mesh)
      .def_property("training", &nn::Module::training,
                    [](nn::Module& mod, bool mode) {
                      // This module only, as assigning torch's attribute.
                      if (mode == mod.training()) return;
                      std::vector<std::pair<nn::Module*, bool>> kids;
                      for (auto& [n, c] : mod.named_modules())
                        if (c != &mod) kids.emplace_back(c, c->training());
                      mod.train(mode);
                      for (auto& [c, t] : kids) c->train(t);
                    })
      .def(
          "train",
          [](py::object self, bool mode) {
            self.cast<nn::Module&>().train(mode);
            return self;
          },
          py::arg("mode") = true, "Sets training on this module and every descendant; returns it.")
      .def(
          "eval",
          [](py::object self) {
            self.cast<nn::Module&>().train(false);
            return self;
          },
          "train(False).")
      .def_property_readonly("_is_local", &nn::Module::is_local)
      .def("_adopt", &nn::Module::adopt, py::arg("device_mesh"), py::arg("by"), release_gil(),
           "Moves the modules still on the local mesh onto device_mesh (nn::Module::adopt).")
      .def(
          "named_parameters",
          [](nn::Module& mod) {
            std::vector<std::pair<std::string, DTensor>> out;
            for (auto& [name, p] : mod.named_parameters()) out.emplace_back(name, *p);
            return out;
          },
          "[(dotted name, parameter)]: own parameters first, then each child's. The DTensors "
          "share the parameters' storage and gradient.")
      .def("parameters", &nn::Module::parameters)
      .def("named_modules", &named_modules, "[(dotted name, module)], this module first (\"\").")
      .def("modules",
           [](py::object self) {
             py::list out;
             for (py::handle t : named_modules(self)) out.append(t.cast<py::tuple>()[1]);
             return out;
           })
      .def("named_children",
           [](py::object self) {
             py::list out;
             for (py::handle t : named_modules(self)) {
               std::string name = t.cast<py::tuple>()[0].cast<std::string>();
               if (!name.empty() && name.find('.') == std::string::npos) out.append(t);
             }
             return out;
           })
      .def(
          "get_submodule",
          [](py::object self, const std::string& name) {
            return py::cast(&self.cast<nn::Module&>().submodule(name),
                            py::return_value_policy::reference_internal, self);
          },
          py::arg("target"))
      .def(
          "get_parameter",
          [](nn::Module& mod, const std::string& name) { return mod.parameter(name); },
          py::arg("target"))
      .def(
          "state_dict",
          [](nn::Module& mod) {
            py::dict out;
            for (auto& [name, p] : mod.named_parameters()) out[py::str(name)] = *p;
            return out;
          },
          "{dotted name: parameter}; the DTensors alias the parameters, so "
          "dtensor.checkpoint.load into it restores them in place.")
      .def("materialize", &nn::Module::materialize, release_gil(), R"doc(
Makes every parameter still on the meta device (built under
dtensor.nn.meta_device()): allocates this process's shards, in the layout
they have now, and fills them with the values the model made whole would
have (bit for bit). All the shards' bytes are checked before any is
allocated. Returns how many parameters it made. (PyTorch: to_empty()
followed by reset_parameters().)
)doc")
      .def(
          "zero_grad",
          [](nn::Module& mod) {
            for (auto& [name, p] : mod.named_parameters()) p->zero_grad();
          },
          "Sets every parameter's .grad to None.")
      .def(
          "register_forward_pre_hook",
          [](nn::Module& mod, py::function hook) {
            mod.register_forward_pre_hook([hook](nn::Module& self, const DTensor& x) {
              py::gil_scoped_acquire gil;
              py::object r = hook(py::cast(&self, py::return_value_policy::reference),
                                  py::cast(x, py::return_value_policy::copy));
              return r.is_none()
                         ? x
                         : cast_arg<DTensor>(r, "forward pre-hook's result", "a DTensor or None");
            });
          },
          py::arg("hook"),
          "hook(module, input) -> a new input or None, before forward(). (No handle: hooks "
          "cannot be removed.)")
      .def(
          "register_forward_hook",
          [](nn::Module& mod, py::function hook) {
            mod.register_forward_hook([hook](nn::Module& self, const DTensor& x, const DTensor& y) {
              py::gil_scoped_acquire gil;
              py::object r = hook(py::cast(&self, py::return_value_policy::reference),
                                  py::cast(x, py::return_value_policy::copy),
                                  py::cast(y, py::return_value_policy::copy));
              return r.is_none()
                         ? y
                         : cast_arg<DTensor>(r, "forward hook's result", "a DTensor or None");
            });
          },
          py::arg("hook"), "hook(module, input, output) -> a new output or None, after forward().")
      .def(
          "register_parameter",
          [](py::object self, const std::string& name, py::object value) {
            Parameter p =
                py::isinstance<Parameter>(value) ? value.cast<Parameter>() : Parameter{value, true};
            register_parameter(self, name, p);
          },
          py::arg("name"), py::arg("param"))
      .def("register_module", &register_child, py::arg("name"), py::arg("module"))
      .def("add_module", &register_child, py::arg("name"), py::arg("module"))
      .def(
          "__setattr__",
          [](py::object self, py::str name, py::object value) {
            const std::string n = name;
            if (!constructed(self)) {
              // Before super().__init__(mesh): plain attributes only, as in PyTorch.
              if (py::isinstance<Parameter>(value))
                throw py::attribute_error("cannot assign parameters before Module.__init__() call");
              if (py::isinstance<nn::Module>(value))
                throw py::attribute_error("cannot assign module before Module.__init__() call");
              if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0)
                throw py::error_already_set();
              return;
            }
            auto& mod = self.cast<nn::Module&>();
            if (py::isinstance<Parameter>(value)) {
              register_parameter(self, n, value.cast<Parameter>());
              return;
            }
            if (py::isinstance<nn::Module>(value))
              register_child(self, n, value);
            else if (n.rfind('_', 0) != 0 && has_own_parameter(mod, n)) {
              // Assigning a DTensor to a parameter's name replaces the parameter.
              DT_CHECK(py::isinstance<DTensor>(value), "cannot assign a ", type_name(value),
                       " to parameter '", n, "' (a DTensor or dtensor.nn.Parameter expected)");
              // The old one is marked so that an optimizer holding it refuses to step.
              nn::replace_parameter(mod.parameter(n), value.cast<DTensor>(),
                                    "an assignment to the module's attribute '" + n + "'");
              return;
            }
            if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0)
              throw py::error_already_set();
          })
      .def("__getattr__",
           [](py::object self, const std::string& name) -> DTensor {
             // Only reached when normal lookup fails: parameters live in C++.
             if (constructed(self)) {
               auto& mod = self.cast<nn::Module&>();
               if (has_own_parameter(mod, name)) return mod.parameter(name);
             }
             throw py::attribute_error("'" + std::string("Module") + "' object has no attribute '" +
                                       name + "'");
           })
      .def("__repr__", [](py::handle self) { return module_repr(self); });

  ModuleClass<nn::Linear>(nm, "Linear",
                          "y = x W^T + b with W (out, in), b (out) (torch.nn.Linear).")
      .def(py::init([](const DeviceMesh& mesh, int64_t in, int64_t out, bool bias,
                       std::optional<uint64_t> seed) {
             return ModulePtr<nn::Linear>(new nn::Linear(mesh, in, out, bias, seed));
           }),
           py::arg("device_mesh"), py::arg("in_features"), py::arg("out_features"),
           py::arg("bias") = true, py::kw_only(), py::arg("seed") = py::none(),
           "Weights uniform in +-1/sqrt(in_features) (nn.Linear's initialisation; every process "
           "draws the same), Replicate on the mesh: W from `seed` and b from seed + 1, or from "
           "the global generator (dtensor.manual_seed) without a seed.")
      .def(py::init([](const DeviceMesh& mesh, py::object weight, py::object bias) {
             std::optional<Tensor> b;
             if (!bias.is_none()) b = tensor_from_python(bias);
             return ModulePtr<nn::Linear>(new nn::Linear(mesh, tensor_from_python(weight), b));
           }),
           py::arg("device_mesh"), py::arg("weight"), py::arg("bias") = py::none(),
           "From full weights (every process passes the same), Replicate on the mesh.")
      .def(py::init([](int64_t in, int64_t out, bool bias, std::optional<uint64_t> seed) {
             return ModulePtr<nn::Linear>(new nn::Linear(no_mesh(), in, out, bias, seed));
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::kw_only(),
           py::arg("seed") = py::none(),
           "torch.nn.Linear(in_features, out_features, bias=True): on the local mesh, every "
           "process holding the whole weights (the same draws) until parallelize_module or "
           "fully_shard lays them out.")
      .def_property_readonly("weight", [](nn::Linear& l) { return l.weight(); })
      .def_property_readonly("bias",
                             [](nn::Linear& l) -> std::optional<DTensor> {
                               if (l.bias() == nullptr) return std::nullopt;
                               return *l.bias();
                             })
      .def_property_readonly("in_features", [](nn::Linear& l) { return l.weight().shape()[1]; })
      .def_property_readonly("out_features", [](nn::Linear& l) { return l.weight().shape()[0]; });

  ModuleClass<nn::Embedding>(nm, "Embedding", "Rows of a (num, dim) table looked up by int64 ids.")
      .def(py::init(
               [](const DeviceMesh& mesh, int64_t num, int64_t dim, std::optional<uint64_t> seed) {
                 return ModulePtr<nn::Embedding>(new nn::Embedding(mesh, num, dim, seed));
               }),
           py::arg("device_mesh"), py::arg("num_embeddings"), py::arg("embedding_dim"),
           py::kw_only(), py::arg("seed") = py::none(),
           "A standard-normal table (nn.Embedding's) from `seed`, or from the global generator "
           "(dtensor.manual_seed) without one.")
      .def(py::init([](const DeviceMesh& mesh, py::object weight) {
             return ModulePtr<nn::Embedding>(new nn::Embedding(mesh, tensor_from_python(weight)));
           }),
           py::arg("device_mesh"), py::arg("weight"))
      .def(py::init([](int64_t num, int64_t dim, std::optional<uint64_t> seed) {
             return ModulePtr<nn::Embedding>(new nn::Embedding(no_mesh(), num, dim, seed));
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::kw_only(),
           py::arg("seed") = py::none(),
           "torch.nn.Embedding(num_embeddings, embedding_dim) on the "
           "local mesh (padding_idx: see dtensor/_nn_modules.py).")
      .def_property_readonly("weight", [](nn::Embedding& e) { return e.weight(); })
      .def_property_readonly("num_embeddings",
                             [](nn::Embedding& e) { return e.weight().shape()[0]; })
      .def_property_readonly("embedding_dim",
                             [](nn::Embedding& e) { return e.weight().shape()[1]; });

  ModuleClass<nn::LayerNorm>(nm, "LayerNorm", "LayerNorm over the last dim, with weight and bias.")
      .def(py::init([](const DeviceMesh& mesh, int64_t dim, double eps) {
             return ModulePtr<nn::LayerNorm>(new nn::LayerNorm(mesh, dim, eps));
           }),
           py::arg("device_mesh"), py::arg("normalized_shape"), py::arg("eps") = 1e-5,
           "Weight ones, bias zeros (nn.LayerNorm's).")
      .def(py::init([](const DeviceMesh& mesh, py::object weight, py::object bias, double eps) {
             return ModulePtr<nn::LayerNorm>(new nn::LayerNorm(mesh, tensor_from_python(weight),
                                                               tensor_from_python(bias), eps));
           }),
           py::arg("device_mesh"), py::arg("weight"), py::arg("bias"), py::arg("eps") = 1e-5)
      .def(py::init([](py::object shape, double eps, bool elementwise_affine) {
             DT_CHECK(elementwise_affine,
                      "LayerNorm(elementwise_affine=False) is not implemented "
                      "(use dtensor.nn.functional.layer_norm without weight and bias)");
             const int64_t dim = last_dim(shape, "LayerNorm");
             return ModulePtr<nn::LayerNorm>(new nn::LayerNorm(no_mesh(), dim, eps));
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
           "torch.nn.LayerNorm(normalized_shape, eps=1e-5) on the local mesh.")
      .def_property_readonly("weight", [](nn::LayerNorm& l) { return l.weight(); })
      .def_property_readonly("bias", [](nn::LayerNorm& l) { return l.bias(); });

  ModuleClass<nn::RMSNorm>(nm, "RMSNorm", "RMSNorm over the last dim, with a weight and no bias.")
      .def(py::init([](const DeviceMesh& mesh, int64_t dim, std::optional<double> eps) {
             return ModulePtr<nn::RMSNorm>(new nn::RMSNorm(mesh, dim, eps));
           }),
           py::arg("device_mesh"), py::arg("normalized_shape"), py::arg("eps") = py::none(),
           "Weight ones (nn.RMSNorm's); eps None: the machine epsilon of the input's dtype.")
      .def(py::init([](const DeviceMesh& mesh, py::object weight, std::optional<double> eps) {
             return ModulePtr<nn::RMSNorm>(new nn::RMSNorm(mesh, tensor_from_python(weight), eps));
           }),
           py::arg("device_mesh"), py::arg("weight"), py::arg("eps") = py::none())
      .def(py::init([](py::object shape, std::optional<double> eps, bool elementwise_affine) {
             DT_CHECK(elementwise_affine,
                      "RMSNorm(elementwise_affine=False) is not implemented "
                      "(use dtensor.nn.functional.rms_norm without a weight)");
             const int64_t dim = last_dim(shape, "RMSNorm");
             return ModulePtr<nn::RMSNorm>(new nn::RMSNorm(no_mesh(), dim, eps));
           }),
           py::arg("normalized_shape"), py::arg("eps") = py::none(),
           py::arg("elementwise_affine") = true,
           "torch.nn.RMSNorm(normalized_shape, eps=None) on the local mesh.")
      .def_property_readonly("weight", [](nn::RMSNorm& l) { return l.weight(); });

  py::class_<nn::Init>(nm, "Init", R"doc(
A parameter's values as a recipe by global index, for
dtensor.nn.Parameter(Init.normal((4096, 4096), seed=1, std=0.02)): under
dtensor.nn.meta_device() nothing is made until model.materialize(), and then
each rank makes only its own shard, with the values of the whole tensor.
)doc")
      .def_static("normal", &nn::Init::normal, py::arg("shape"), py::arg("seed"),
                  py::arg("std") = 1.0, py::arg("mean") = 0.0,
                  "std * randn(shape, seed) + mean (as dtensor.randn with that seed).")
      .def_static("uniform", &nn::Init::uniform, py::arg("shape"), py::arg("seed"), py::arg("low"),
                  py::arg("high"), "(high - low) * rand(shape, seed) + low.")
      .def_static("constant", &nn::Init::constant, py::arg("shape"), py::arg("value"))
      .def_property_readonly("shape", &nn::Init::shape)
      .def_property_readonly("dtype", &nn::Init::dtype)
      .def("full", &nn::Init::full, "The whole tensor.");

  // with dtensor.nn.meta_device(): as torch.device("meta") for building.
  py::class_<MetaDevice>(nm, "_MetaDevice")
      .def("__enter__", [](MetaDevice& d) { d.guard = std::make_unique<nn::MetaDeviceGuard>(); })
      .def("__exit__", [](MetaDevice& d, py::args) {
        d.guard.reset();
        return false;
      });
  nm.def(
      "meta_device", [] { return std::make_unique<MetaDevice>(); }, R"doc(
with dtensor.nn.meta_device(): modules made inside get their parameters on
the meta device (a layout, no memory) with the recipe of their values, as
PyTorch's `with torch.device("meta")`. Lay the model out (parallelize_module,
fully_shard), then model.materialize() makes each process's shards with the
values the model made whole would have. Per thread.
)doc");
  nm.def(
      "checkpoint_wrapper",
      [](nn::Module& module, std::optional<std::vector<std::string>> save_ops) -> nn::Module& {
        return nn::checkpoint_wrapper(module, {save_ops.value_or(std::vector<std::string>{})});
      },
      py::arg("module"), py::kw_only(), py::arg("save_ops") = py::none(),
      py::return_value_policy::reference, R"doc(
Every call of `module` (its hooks and forward) keeps nothing for backward
and runs again in backward to remake what it needs (PyTorch's
checkpoint_wrapper, without a wrapper module: names are unchanged).
save_ops: names of ops whose outputs are kept instead ("mm", "addmm", "bmm",
"baddbmm", "matmul", "linear", "scaled_dot_product_attention"), which the
recomputation then does not run again (selective checkpointing). The
gradients are the same, bit for bit. Returns the module.
)doc");

  // torch.nn.utils.clip_grad_norm_ (the same function as dtensor.optim's).
  py::module_ utils = nm.def_submodule("utils", "torch.nn.utils's gradient clipping.");
  py::object om = m.attr("optim");
  utils.attr("clip_grad_norm_") = om.attr("clip_grad_norm_");
  utils.attr("clip_grad_value_") = om.attr("clip_grad_value_");

  py::object modules = py::module_::import("sys").attr("modules");
  modules["dtensor.nn"] = nm;
  modules["dtensor.nn.utils"] = utils;
}

}  // namespace dtensor::python
