// dtensor.register_sharding and dtensor.check_rules (custom_op.h, rules.h):
// ops of your own with a sharding rule, written in Python.
//
//   scale_cols = dt.register_sharding(
//       "scale_cols", lambda x, s: x * s,
//       [([dt.Shard(0), dt.Replicate()], dt.Shard(0)),
//        ([dt.Partial(), dt.Replicate()], dt.Partial()),
//        ([dt.Replicate(), dt.Replicate()], dt.Replicate())])
//   y = scale_cols(x, scale)                 # DTensors or Tensors
//   print(dt.check_rules(scale_cols, [x_full, s_full]))
//
// The kernel runs once per rank on worker threads: each call takes the GIL,
// and the op releases it while it runs, so the workers can have it.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"
#include "dtensor/custom_op.h"
#include "dtensor/rules.h"

namespace dtensor::python {

namespace {

// A Python object kept by C++ callbacks that may be copied and dropped on
// threads without the GIL: the last owner takes the GIL to release it.
std::shared_ptr<py::object> held(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// Calls a Python callback; a Python exception becomes a dtensor::Error
// carrying its message (the C++ side, e.g. the validator trying layouts,
// handles dtensor::Error). KeyboardInterrupt and SystemExit (a
// BaseException that is no Exception) stay themselves: they stop the
// program, not the op, and reach Python unchanged.
template <class F>
auto calling(const std::string& op, const char* what, F&& f) {
  try {
    return f();
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) throw;
    DT_THROW(op, ": the ", what, " raised ", e.what());
  }
}

std::vector<OpStrategy> to_strategies(const py::object& list) {
  std::vector<OpStrategy> out;
  for (const py::handle item : list) {
    const char* what = "register_sharding: a strategy";
    const auto pair = cast_arg<py::tuple>(item, what, "a tuple ([input placements], output placement)");
    DT_CHECK(pair.size() == 2, "register_sharding: a strategy is (input placements, output "
             "placement), got a tuple of ", pair.size());
    OpStrategy s;
    for (const py::handle p : pair[0])
      s.inputs.push_back(cast_arg<Placement>(p, what, "Shard, Replicate or Partial as input placements"));
    s.output = cast_arg<Placement>(pair[1], what, "Shard, Replicate or Partial as output placement");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

void bind_custom_op(py::module_& m) {
  py::class_<CustomOp>(m, "CustomOp", "An op registered with register_sharding.")
      .def_property_readonly("name", &CustomOp::name)
      .def(
          "__call__",
          [](const CustomOp& op, py::args args) -> py::object {
            DT_CHECK(args.size() > 0, op.name(), ": needs at least one input");
            if (py::isinstance<DTensor>(args[0])) {
              std::vector<DTensor> in;
              for (const py::handle a : args)
                in.push_back(cast_arg<DTensor>(a, op.name(), "DTensors (all inputs, as the first)"));
              DTensor out;
              {
                py::gil_scoped_release release;  // the kernels take it on the workers
                out = op(in);
              }
              return py::cast(std::move(out));
            }
            std::vector<Tensor> in;
            for (const py::handle a : args)
              in.push_back(cast_arg<Tensor>(a, op.name(), "Tensors (all inputs, as the first)"));
            return py::cast(op(in));
          })
      .def("__repr__", [](const CustomOp& op) { return "CustomOp(" + op.name() + ")"; });

  m.def(
      "register_sharding",
      [](const std::string& name, py::object kernel, py::object strategies, py::object backward) {
        CustomOpDef def;
        def.name = name;
        auto k = held(std::move(kernel));
        def.kernel = [k, name](const std::vector<Tensor>& t) {
          py::gil_scoped_acquire gil;
          return calling(name, "kernel", [&] {
            py::tuple args(t.size());
            for (size_t i = 0; i < t.size(); ++i) args[i] = py::cast(t[i]);
            return tensor_from_python((*k)(*args), name + ": the kernel's result");
          });
        };
        auto s = held(std::move(strategies));
        def.strategies = [s, name](const std::vector<TensorMeta>& metas) {
          py::gil_scoped_acquire gil;
          return calling(name, "strategies", [&] {
            if (!PyCallable_Check(s->ptr())) return to_strategies(*s);
            py::list shapes;
            for (const TensorMeta& meta : metas) shapes.append(py::cast(meta.shape));
            return to_strategies((*s)(shapes));
          });
        };
        if (!backward.is_none()) {
          auto b = held(std::move(backward));
          def.backward = [b, name](const DTensor& grad, const std::vector<DTensor>& in) {
            py::gil_scoped_acquire gil;
            return calling(name, "backward", [&] {
              py::tuple args(in.size() + 1);
              args[0] = py::cast(grad);
              for (size_t i = 0; i < in.size(); ++i) args[i + 1] = py::cast(in[i]);
              std::vector<DTensor> g;
              for (const py::handle x : (*b)(*args))
                g.push_back(cast_arg<DTensor>(x, name + ": backward's result", "a list of DTensors"));
              return g;
            });
          };
        }
        return register_sharding(std::move(def));
      },
      py::arg("name"), py::arg("kernel"), py::arg("strategies"), py::arg("backward") = py::none(),
      "Registers an op of your own with a sharding rule (PyTorch's register_sharding).\n"
      "kernel(*tensors) -> Tensor runs on each rank's shards (and on full tensors);\n"
      "strategies: a list of ([input placements], output placement), one per candidate\n"
      "for one mesh dim, or a callable taking the input shapes and returning it;\n"
      "backward(grad, *inputs) -> [input grads] with DTensor ops, optional.");

  m.def(
      "check_rules",
      [](const CustomOp& op, const std::vector<Tensor>& examples, std::vector<Shape> meshes,
         std::vector<Shape> sampled) {
        RuleCheckOptions o;
        o.meshes = std::move(meshes);
        o.sampled_meshes = std::move(sampled);
        RuleCheckReport r;
        {
          py::gil_scoped_release release;
          r = check_rules(op, examples, o);
        }
        py::dict d;
        d["incorrect"] = r.incorrect();
        d["missing"] = r.missing();
        d["layouts"] = r.layouts();
        d["table"] = r.table();
        return d;
      },
      py::arg("op"), py::arg("examples"), py::arg("meshes") = std::vector<Shape>{{3}, {2, 3}},
      py::arg("sampled_meshes") = std::vector<Shape>{},
      "The sharding-rule validator on your op (docs/rules.md): a dict with the counts of\n"
      "incorrect and missing layouts, the layouts tried, and the markdown table.");
}

}  // namespace dtensor::python
