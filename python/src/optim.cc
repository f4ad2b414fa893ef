// dtensor.optim: SGD, Adam, AdamW, Adagrad, RMSprop, Adadelta, Adamax, NAdam
// and RAdam on DTensor parameters with
// torch.optim's keyword arguments, the schedules of
// dtensor.optim.lr_scheduler (LambdaLR, LinearLR, CosineAnnealingLR,
// SequentialLR) and clip_grad_norm_ (also dtensor.nn.utils.clip_grad_norm_
// in nn.cc).
//
//   opt = dtensor.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
//   sched = dtensor.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
//   opt.zero_grad(); loss.backward(); opt.step(); sched.step()
//
// Parameters are a list (or any iterable) of DTensors, or of (name, DTensor)
// pairs such as module.named_parameters() gives, or PyTorch's param groups
// (dicts {"params": ..., "weight_decay": 0.0, ...}); the optimizer keeps
// copies that share their storage and gradient. opt.param_groups reads and
// writes each group's hyper-parameters; opt.lr is every group's lr when
// they share one. An empty parameter list is PyTorch's ValueError. step() and clip_grad_norm_
// release the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "dtensor/autograd.h"
#include "dtensor/optim.h"

namespace dtensor::python {
// lr= as PyTorch takes it: a number, or a one-element floating tensor (a
// tensor lr: read at each step, written in place by the schedulers).
// Converts to the number, so an options struct takes it as it is.
struct PyLr {
  double value = 0;
  std::optional<Tensor> tensor;
  operator double() const { return value; }  // NOLINT(google-explicit-constructor)
};
}  // namespace dtensor::python

namespace pybind11::detail {
template <>
struct type_caster<dtensor::python::PyLr> {
  PYBIND11_TYPE_CASTER(dtensor::python::PyLr, const_name("float | Tensor"));
  bool load(handle src, bool) {
    if (PyBool_Check(src.ptr())) return false;
    if (PyFloat_Check(src.ptr()) || PyLong_Check(src.ptr())) {
      value = {src.cast<double>(), std::nullopt};
      return true;
    }
    dtensor::Tensor t;
    try {
      t = dtensor::python::shared_tensor_from_python(src, "lr");
    } catch (const std::exception&) {
      return false;
    }
    if (t.numel() != 1 || !dtensor::is_floating(t.dtype())) return false;
    value = {t.item<double>(), t};
    return true;
  }
  static handle cast(const dtensor::python::PyLr& lr, return_value_policy, handle) {
    return PyFloat_FromDouble(lr.value);
  }
};
}  // namespace pybind11::detail

namespace dtensor::python {

namespace {

using release_gil = py::call_guard<py::gil_scoped_release>;
using NamedParams = std::vector<std::pair<std::string, DTensor>>;

// One group's parameters: DTensors, or (name, DTensor) pairs
// (named_parameters()). Unnamed ones get no names, as in C++.
NamedParams group_params_from_python(py::handle params, const std::string& what) {
  if (py::isinstance<DTensor>(params))
    return {{std::string(), params.cast<DTensor>()}};  // PyTorch takes one tensor too
  if (!py::isinstance<py::iterable>(params) || PyUnicode_Check(params.ptr()))
    throw py::type_error(what + " must be an iterable of DTensors or (name, DTensor) pairs, got " +
                         describe(params));
  NamedParams out;
  bool first = true, named = false;
  for (py::handle item : py::iter(params)) {
    const bool pair = py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item);
    if (first) named = pair;
    DT_CHECK(pair == named, what, " mix DTensors and (name, DTensor) pairs");
    first = false;
    if (pair) {
      auto seq = py::reinterpret_borrow<py::sequence>(item);
      DT_CHECK(seq.size() == 2, what, ": a named parameter is a (name, DTensor) pair, got ",
               seq.size(), " items");
      out.emplace_back(cast_arg<std::string>(seq[0], what + ": a (name, DTensor) pair", "a name (str) first"),
                       cast_arg<DTensor>(seq[1], what + ": a (name, DTensor) pair", "a DTensor second"));
    } else {
      out.emplace_back(std::string(), cast_arg<DTensor>(item, what, "DTensors (or (name, DTensor) pairs)"));
    }
  }
  return out;
}

// A hyper-parameter from Python: a bool, a number, or a pair of numbers (betas).
optim::OptionValue option_from_python(py::handle v, const std::string& what) {
  if (PyBool_Check(v.ptr())) return v.cast<bool>();
  if (PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr())) return v.cast<double>();
  if ((py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) && py::len(v) == 2) {
    auto seq = py::reinterpret_borrow<py::sequence>(v);
    return std::pair<double, double>(cast_arg<double>(seq[0], what, "a pair of numbers"),
                                     cast_arg<double>(seq[1], what, "a pair of numbers"));
  }
  throw py::type_error(what + ": expected a number, a bool or a pair of numbers, got " +
                       describe(v));
}

py::object option_to_python(const optim::OptionValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

// The param groups an optimizer was given: an iterable of DTensors or of
// (name, DTensor) pairs (one group), or of dicts {"params": ..., option:
// value} (PyTorch's param groups).
std::vector<optim::ParamGroup> groups_from_python(py::handle params,
                                                  std::vector<std::optional<PyLr>>* group_lrs) {
  if (py::isinstance<DTensor>(params))
    DT_THROW("optimizer: params must be an iterable of DTensors or (name, DTensor) pairs, got "
             "one DTensor (wrap it in a list)");
  if (!py::isinstance<py::iterable>(params))
    throw py::type_error("optimizer: params must be an iterable of DTensors, (name, DTensor) "
                         "pairs or param-group dicts, got " + describe(params));
  py::list items;
  for (py::handle item : py::iter(params)) items.append(item);
  // PyTorch's ValueError, word for word.
  if (items.empty()) throw py::value_error("optimizer got an empty parameter list");
  if (!py::isinstance<py::dict>(items[0]))
    return {optim::ParamGroup(group_params_from_python(items, "optimizer: params"))};
  std::vector<optim::ParamGroup> groups;
  for (size_t g = 0; g < items.size(); ++g) {
    const std::string what = "optimizer: param group " + std::to_string(g);
    if (!py::isinstance<py::dict>(items[g]))
      throw py::type_error(what + ": expected a dict like the others, got " + describe(items[g]));
    auto d = py::reinterpret_borrow<py::dict>(items[g]);
    if (!d.contains("params")) throw py::key_error(what + " has no 'params'");
    optim::GroupOptions options;
    group_lrs->resize(g + 1);
    for (auto [key, value] : d) {
      const std::string name = cast_arg<std::string>(key, what, "str keys");
      if (name == "lr") {
        const PyLr lr = cast_arg<PyLr>(value, what + "['lr']", "a number or a one-element tensor");
        options[name] = lr.value;
        (*group_lrs)[g] = lr;
      } else if (name != "params") {
        options[name] = option_from_python(value, what + "['" + name + "']");
      }
    }
    groups.emplace_back(group_params_from_python(d["params"], what + "'s params"),
                        std::move(options));
  }
  return groups;
}

// An optimizer of the groups `params`; a tensor lr (the default's, or a
// group's own) becomes the group's lr tensor.
template <class Opt, class Options>
std::unique_ptr<Opt> make_optimizer(py::handle params, const Options& o, const PyLr& lr) {
  std::vector<std::optional<PyLr>> group_lrs;
  auto opt = std::make_unique<Opt>(groups_from_python(params, &group_lrs), o);
  for (size_t g = 0; g < opt->num_groups(); ++g) {
    const std::optional<PyLr>& own = g < group_lrs.size() ? group_lrs[g] : std::nullopt;
    const std::optional<Tensor>& t = own ? own->tensor : lr.tensor;
    if (t) opt->set_lr_tensor(g, *t);
  }
  return opt;
}

// One of optimizer.param_groups: a view that reads and writes the
// optimizer's group, so that `group["lr"] = x` acts as in PyTorch.
struct GroupView {
  py::object owner;  // keeps the optimizer alive
  optim::Optimizer* opt;
  size_t group;

  py::dict to_dict() const {
    py::dict d;
    py::list params;
    for (size_t i : opt->group_params(group)) params.append(opt->params()[i]);
    d["params"] = params;
    for (const auto& [name, v] : opt->group_options(group)) d[py::str(name)] = option_to_python(v);
    if (auto t = opt->lr_tensor(group)) d["lr"] = *t;  // PyTorch's tensor lr, itself
    if (auto initial = opt->initial_lr(group)) d["initial_lr"] = *initial;
    return d;
  }
};

// {"step": n, "momentum_buffer": DTensor, ...}: PyTorch's per-parameter state dict.
py::dict param_state_to_python(const optim::ParamState& s) {
  py::dict d;
  d["step"] = s.step;
  for (const auto& [name, buffer] : s.buffers) d[py::str(name)] = buffer;
  return d;
}

optim::AdamOptions adam_options(double lr, std::pair<double, double> betas, double eps,
                         std::optional<double> weight_decay, bool amsgrad, bool maximize) {
  optim::AdamOptions o;
  o.lr = lr;
  o.betas = betas;
  o.eps = eps;
  o.weight_decay = weight_decay;
  o.amsgrad = amsgrad;
  o.maximize = maximize;
  return o;
}

// zero_grad(set_to_none=False): zeros written into each gradient's shards.
void zero_grads_in_place(const std::vector<DTensor>& params) {
  NoGradGuard no_grad;
  for (const DTensor& p : params)
    if (auto g = p.grad()) g->zero_();
}

// clip_grad_value_: clamp_ in place, except that a gradient Partial(sum|avg)
// on some mesh dim is reduced (P -> R there) first: clamping each rank's
// piece is not clamping their sum.
void clip_grad_value(const std::vector<DTensor>& params, double clip_value) {
  DT_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (DTensor p : params) {
    std::optional<DTensor> g = p.grad();
    if (!g) continue;
    Placements reduced = g->placements();
    bool partial = false;
    for (Placement& pl : reduced)
      if (pl.is_partial()) {
        pl = Replicate();
        partial = true;
      }
    if (partial) {
      DTensor r = g->redistribute(reduced);
      r.clamp_(-clip_value, clip_value);
      p.set_grad(std::move(r));
    } else {
      g->clamp_(-clip_value, clip_value);
    }
  }
}

}  // namespace

void bind_optim(py::module_& m) {
  py::module_ om = m.def_submodule("optim", "Optimizers for DTensor parameters (torch.optim).");

  py::class_<GroupView>(om, "ParamGroup", R"doc(
One of optimizer.param_groups: reads and writes the optimizer's group as
PyTorch's dict does (group["lr"] = x sets that group's lr; other
hyper-parameters are checked as at construction). "params" is read only.
)doc")
      .def("__getitem__",
           [](const GroupView& v, const std::string& key) -> py::object {
             py::dict d = v.to_dict();
             if (!d.contains(key)) throw py::key_error(key);
             return d[py::str(key)];
           })
      .def("__setitem__",
           [](GroupView& v, const std::string& key, py::handle value) {
             if (key == "params")
               throw py::type_error("param_groups[...]['params'] is read only in dtensor");
             if (key == "lr" && !PyFloat_Check(value.ptr()) && !PyLong_Check(value.ptr())) {
               const PyLr lr = cast_arg<PyLr>(value, "param_groups[...]['lr']",
                                              "a number or a one-element tensor");
               v.opt->set_lr_tensor(v.group, *lr.tensor);
               return;
             }
             if (key == "initial_lr") {
               v.opt->set_initial_lr(v.group, cast_arg<double>(value, "param_groups[...]['initial_lr']", "a number"));
               return;
             }
             v.opt->set_group_option(v.group, key, option_from_python(value, "param_groups[" +
                                                   std::to_string(v.group) + "]['" + key + "']"));
           })
      .def("__contains__", [](const GroupView& v, const std::string& key) { return v.to_dict().contains(key); })
      .def("__len__", [](const GroupView& v) { return py::len(v.to_dict()); })
      .def("__iter__", [](const GroupView& v) { return v.to_dict().attr("__iter__")(); })
      .def("keys", [](const GroupView& v) { return v.to_dict().attr("keys")(); })
      .def("items", [](const GroupView& v) { return v.to_dict().attr("items")(); })
      .def("get",
           [](const GroupView& v, const std::string& key, py::object fallback) -> py::object {
             py::dict d = v.to_dict();
             return d.contains(key) ? py::object(d[py::str(key)]) : fallback;
           },
           py::arg("key"), py::arg("default") = py::none())
      .def("setdefault",
           [](GroupView& v, const std::string& key, py::object value) -> py::object {
             py::dict d = v.to_dict();
             if (d.contains(key)) return d[py::str(key)];
             if (key != "initial_lr")
               throw py::key_error("param group has no '" + key + "' to set a default for");
             v.opt->set_initial_lr(v.group, cast_arg<double>(value, "param_groups[...]['initial_lr']", "a number"));
             return value;
           })
      .def("__repr__", [](const GroupView& v) { return py::repr(v.to_dict()).cast<std::string>(); });

  py::class_<optim::Optimizer>(om, "Optimizer", R"doc(
The base of the optimizers: the parameters in param groups, their state,
and each group's hyper-parameters.
)doc")
      .def("step", &optim::Optimizer::step, release_gil(),
           "One update of every parameter that has a gradient, in place, with grad mode off. "
           "A gradient laid out otherwise than its parameter (the Partial(sum) gradient of a "
           "replicated weight) is redistributed to it first: the data-parallel all_reduce.")
      .def("zero_grad",
           [](optim::Optimizer& o, bool set_to_none) {
             if (set_to_none) return o.zero_grad();
             zero_grads_in_place(o.params());
           },
           py::arg("set_to_none") = true, release_gil(),
           "Sets every parameter's .grad to None; with set_to_none=False writes zeros into "
           "the gradients instead, keeping them (and their placements).")
      .def_property("lr", py::overload_cast<>(&optim::Optimizer::lr, py::const_),
                    py::overload_cast<double>(&optim::Optimizer::set_lr),
                    "The learning rate of every param group when they share one (an error "
                    "otherwise: read param_groups[i]['lr']); setting it sets every group's.")
      .def_property_readonly("initial_lr",
                             [](const optim::Optimizer& o) { return o.initial_lr(0); },
                             "The initial lr of param group 0 (set by the first scheduler).")
      .def_property_readonly(
          "param_groups",
          [](py::object self) {
             auto& o = self.cast<optim::Optimizer&>();
             py::list groups;
             for (size_t g = 0; g < o.num_groups(); ++g) groups.append(GroupView{self, &o, g});
             return groups;
           },
          "PyTorch's param_groups: one mapping per group ('params' and every "
          "hyper-parameter by name), writable.")
      .def("state_dict",
           [](const optim::Optimizer& o) {
             const optim::OptimizerStateDict sd = o.state_dict();
             py::dict state;
             for (size_t i = 0; i < sd.state.size(); ++i)
               if (sd.state[i].step > 0 || !sd.state[i].buffers.empty())
                 state[py::int_(i)] = param_state_to_python(sd.state[i]);
             py::list groups;
             for (size_t g = 0; g < sd.param_groups.size(); ++g) {
               py::dict d;
               for (const auto& [name, v] : sd.param_groups[g]) d[py::str(name)] = option_to_python(v);
               d["params"] = py::cast(sd.group_params[g]);
               groups.append(d);
             }
             py::dict out;
             out["state"] = state;
             out["param_groups"] = groups;
             return out;
           },
           "PyTorch's optimizer.state_dict(): {'state': {index: {'step': n, buffer: DTensor}}, "
           "'param_groups': [{hyper-parameters, 'params': [indices]}]}; the buffers alias the "
           "optimizer's.")
      .def("load_state_dict",
           [](optim::Optimizer& o, py::dict d) {
             optim::OptimizerStateDict sd;
             sd.state.resize(o.size());
             if (!d.contains("state") || !d.contains("param_groups"))
               throw py::key_error("load_state_dict: expected a dict with 'state' and 'param_groups'");
             const char* what = "load_state_dict";
             const auto state = cast_arg<py::dict>(d["state"], "load_state_dict: 'state'",
                                                   "a dict {parameter index: {'step': n, ...}}");
             for (auto [key, value] : state) {
               const size_t i = cast_arg<size_t>(key, "load_state_dict: state", "parameter indices");
               DT_CHECK(i < o.size(), "load_state_dict: state of parameter ", i, " for ", o.size(),
                        " parameters");
               const auto entry = cast_arg<py::dict>(value, "load_state_dict: state of a parameter",
                                                     "a dict {'step': n, buffer name: DTensor}");
               for (auto [name, v] : entry) {
                 const auto n = cast_arg<std::string>(name, what, "str keys in a parameter's state");
                 if (n == "step")
                   sd.state[i].step = cast_arg<int64_t>(v, "load_state_dict: 'step'", "an int");
                 else
                   sd.state[i].buffers.emplace(n, cast_arg<DTensor>(v, "load_state_dict: buffer '" + n + "'", "a DTensor"));
               }
             }
             const auto groups = cast_arg<py::list>(d["param_groups"], "load_state_dict: 'param_groups'",
                                                    "a list of dicts");
             for (py::handle g : groups) {
               optim::GroupOptions options;
               std::vector<size_t> params;
               const auto group = cast_arg<py::dict>(g, "load_state_dict: a param group", "a dict");
               for (auto [name, v] : group) {
                 const auto n = cast_arg<std::string>(name, what, "str keys in a param group");
                 if (n == "params")
                   params = cast_arg<std::vector<size_t>>(v, "load_state_dict: a param group's 'params'",
                                                          "a list of parameter indices");
                 else
                   options[n] = option_from_python(v, "load_state_dict: param group '" + n + "'");
               }
               sd.param_groups.push_back(std::move(options));
               sd.group_params.push_back(std::move(params));
             }
             o.load_state_dict(sd);
           },
           py::arg("state_dict"),
           "Loads a state_dict() of an optimizer of the same kind and param groups.")
      .def_property_readonly("params", &optim::Optimizer::params,
                             "The parameters (DTensors sharing the model's storage and grad).")
      .def("__len__", &optim::Optimizer::size)
      .def("name", &optim::Optimizer::name, py::arg("index"),
           "The name a parameter was given (\"\" without names).")
      .def("state",
           [](optim::Optimizer& o, py::handle key) {
             if (PyUnicode_Check(key.ptr()))
               return param_state_to_python(o.state(key.cast<std::string>()));
             return param_state_to_python(
                 o.state(cast_arg<size_t>(key, "Optimizer.state(key)", "a parameter index (int >= 0) or name (str)")));
           },
           py::arg("key"),
           "{'step': n, buffer name: DTensor} of the parameter at an index or of a name "
           "(buffers appear at the parameter's first step; they alias the optimizer's).")
      .def_property_readonly(
          "buffer_names", [](const optim::Optimizer& o) { return o.buffer_names(0); },
          "The buffers a step keeps for the parameters of param group 0.");

  py::class_<optim::SGD, optim::Optimizer>(om, "SGD", R"doc(
Stochastic gradient descent with PyTorch's rule and arguments (momentum,
dampening, weight_decay, nesterov, maximize).
)doc")
      .def(py::init([](py::object params, PyLr lr, double momentum, double dampening,
                       double weight_decay, bool nesterov, bool maximize) {
             optim::SGDOptions o;
             o.lr = lr;
             o.momentum = momentum;
             o.dampening = dampening;
             o.weight_decay = weight_decay;
             o.nesterov = nesterov;
             o.maximize = maximize;
             return make_optimizer<optim::SGD>(params, o, lr);
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0,
           py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::kw_only(),
           py::arg("nesterov") = false, py::arg("maximize") = false);

  py::class_<optim::AdamW, optim::Optimizer>(om, "AdamW", R"doc(
AdamW (decoupled weight decay, default 1e-2) with PyTorch's rule and arguments.
)doc")
      .def(py::init([](py::object params, PyLr lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize) {
             return make_optimizer<optim::AdamW>(
                 params, adam_options(lr, betas, eps, weight_decay, amsgrad, maximize), lr);
           }),
           py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false, py::kw_only(),
           py::arg("maximize") = false)
      .def_property_readonly("weight_decay", &optim::AdamW::weight_decay);

  py::class_<optim::Adam, optim::AdamW>(om, "Adam", R"doc(
Adam (L2 weight decay added to the gradient, default 0) with PyTorch's rule.
)doc")
      .def(py::init([](py::object params, PyLr lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize) {
             return make_optimizer<optim::Adam>(
                 params, adam_options(lr, betas, eps, weight_decay, amsgrad, maximize), lr);
           }),
           py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("amsgrad") = false, py::kw_only(),
           py::arg("maximize") = false);

  py::class_<optim::Adagrad, optim::Optimizer>(om, "Adagrad", R"doc(
Adagrad with PyTorch's rule and arguments (lr_decay, weight_decay,
initial_accumulator_value, eps, maximize); its buffer "sum" appears at a
parameter's first step.
)doc")
      .def(py::init([](py::object params, PyLr lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps, bool maximize) {
             optim::AdagradOptions o;
             o.lr = lr;
             o.lr_decay = lr_decay;
             o.weight_decay = weight_decay;
             o.initial_accumulator_value = initial_accumulator_value;
             o.eps = eps;
             o.maximize = maximize;
             return make_optimizer<optim::Adagrad>(params, o, lr);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("initial_accumulator_value") = 0.0,
           py::arg("eps") = 1e-10, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::RMSprop, optim::Optimizer>(om, "RMSprop", R"doc(
RMSprop with PyTorch's rule and arguments (alpha, eps, weight_decay,
momentum, centered, maximize).
)doc")
      .def(py::init([](py::object params, PyLr lr, double alpha, double eps, double weight_decay,
                       double momentum, bool centered, bool maximize) {
             optim::RMSpropOptions o;
             o.lr = lr;
             o.alpha = alpha;
             o.eps = eps;
             o.weight_decay = weight_decay;
             o.momentum = momentum;
             o.centered = centered;
             o.maximize = maximize;
             return make_optimizer<optim::RMSprop>(params, o, lr);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0,
           py::arg("centered") = false, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::Adadelta, optim::Optimizer>(om, "Adadelta", R"doc(
Adadelta with PyTorch's rule and arguments (lr, rho, eps, weight_decay,
maximize); buffers "square_avg" and "acc_delta".
)doc")
      .def(py::init([](py::object params, PyLr lr, double rho, double eps, double weight_decay,
                       bool maximize) {
             return make_optimizer<optim::Adadelta>(
                 params, optim::AdadeltaOptions{.lr = lr,
                                                .rho = rho,
                                                .eps = eps,
                                                .weight_decay = weight_decay,
                                                .maximize = maximize}, lr);
           }),
           py::arg("params"), py::arg("lr") = 1.0, py::arg("rho") = 0.9, py::arg("eps") = 1e-6,
           py::arg("weight_decay") = 0.0, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::Adamax, optim::Optimizer>(om, "Adamax", R"doc(
Adamax with PyTorch's rule and arguments (lr, betas, eps, weight_decay,
maximize); buffers "exp_avg" and "exp_inf".
)doc")
      .def(py::init([](py::object params, PyLr lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool maximize) {
             return make_optimizer<optim::Adamax>(
                 params, optim::AdamaxOptions{.lr = lr,
                                              .betas = betas,
                                              .eps = eps,
                                              .weight_decay = weight_decay,
                                              .maximize = maximize}, lr);
           }),
           py::arg("params"), py::arg("lr") = 2e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::NAdam, optim::Optimizer>(om, "NAdam", R"doc(
NAdam with PyTorch's rule and arguments (lr, betas, eps, weight_decay,
momentum_decay; PyTorch 2's decoupled_weight_decay and maximize). The
momentum product is PyTorch 2's (1.13's single-tensor path multiplied one
factor twice); it is recomputed from the step count, so it is not a buffer.
)doc")
      .def(py::init([](py::object params, PyLr lr, std::pair<double, double> betas, double eps,
                       double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                       bool maximize) {
             return make_optimizer<optim::NAdam>(
                 params, optim::NAdamOptions{.lr = lr,
                                             .betas = betas,
                                             .eps = eps,
                                             .weight_decay = weight_decay,
                                             .momentum_decay = momentum_decay,
                                             .decoupled_weight_decay = decoupled_weight_decay,
                                             .maximize = maximize}, lr);
           }),
           py::arg("params"), py::arg("lr") = 2e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum_decay") = 4e-3,
           py::arg("decoupled_weight_decay") = false, py::kw_only(), py::arg("maximize") = false)
      .def("mu_product", &optim::NAdam::mu_product, py::arg("step"), py::arg("group") = 0,
           "The momentum product mu_1 * ... * mu_step a step of that count uses in a group.");

  py::class_<optim::RAdam, optim::Optimizer>(om, "RAdam", R"doc(
RAdam with PyTorch's rule and arguments (lr, betas, eps, weight_decay;
PyTorch 2's decoupled_weight_decay and maximize); buffers "exp_avg" and
"exp_avg_sq". With the default betas the rectified update starts at step 6.
)doc")
      .def(py::init([](py::object params, PyLr lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool decoupled_weight_decay, bool maximize) {
             return make_optimizer<optim::RAdam>(
                 params, optim::RAdamOptions{.lr = lr,
                                             .betas = betas,
                                             .eps = eps,
                                             .weight_decay = weight_decay,
                                             .decoupled_weight_decay = decoupled_weight_decay,
                                             .maximize = maximize}, lr);
           }),
           py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("decoupled_weight_decay") = false, py::kw_only(),
           py::arg("maximize") = false);

  // ---- lr_scheduler -------------------------------------------------------------
  // Schedulers hold their optimizer by reference: keep_alive keeps it alive as
  // long as the scheduler is.
  py::module_ sm = om.def_submodule("lr_scheduler", "Learning-rate schedules (torch.optim.lr_scheduler).");
  py::class_<optim::LRScheduler, std::shared_ptr<optim::LRScheduler>>(sm, "LRScheduler")
      .def("step", &optim::LRScheduler::step, "Advances one epoch and sets the optimizer's lr.")
      .def("get_last_lr", &optim::LRScheduler::get_last_lrs,
           "The lrs set last, one per param group, as in PyTorch.")
      .def_property("last_epoch", &optim::LRScheduler::last_epoch,
                    &optim::LRScheduler::set_last_epoch,
                    "The epoch reached; setting it resumes there (sets the optimizer's lr).")
      .def("lr_at", &optim::LRScheduler::lr_at, py::arg("epoch"), py::arg("group") = 0,
           "The lr of an epoch for a param group, in closed form from its initial lr.")
      .def_property_readonly("base_lrs", &optim::LRScheduler::base_lrs,
                             "The initial lr of every param group.");

  py::class_<optim::LambdaLR, optim::LRScheduler, std::shared_ptr<optim::LambdaLR>>(sm, "LambdaLR")
      .def(py::init([](optim::Optimizer& opt, std::function<double(int64_t)> f) {
             return std::make_shared<optim::LambdaLR>(opt, std::move(f));
           }),
           py::arg("optimizer"), py::arg("lr_lambda"), py::keep_alive<1, 2>(),
           "lr = initial lr * lr_lambda(epoch).");
  py::class_<optim::LinearLR, optim::LRScheduler, std::shared_ptr<optim::LinearLR>>(sm, "LinearLR")
      .def(py::init([](optim::Optimizer& opt, double start, double end, int64_t total) {
             return std::make_shared<optim::LinearLR>(opt, start, end, total);
           }),
           py::arg("optimizer"), py::arg("start_factor") = 1.0 / 3, py::arg("end_factor") = 1.0,
           py::arg("total_iters") = 5, py::keep_alive<1, 2>(), "Linear warm-up of the factor.");
  py::class_<optim::CosineAnnealingLR, optim::LRScheduler,
             std::shared_ptr<optim::CosineAnnealingLR>>(sm, "CosineAnnealingLR")
      .def(py::init([](optim::Optimizer& opt, int64_t t_max, double eta_min) {
             return std::make_shared<optim::CosineAnnealingLR>(opt, t_max, eta_min);
           }),
           py::arg("optimizer"), py::arg("T_max"), py::arg("eta_min") = 0.0,
           py::keep_alive<1, 2>(), "Cosine from the initial lr down to eta_min over T_max epochs.");
  py::class_<optim::SequentialLR, optim::LRScheduler, std::shared_ptr<optim::SequentialLR>>(
      sm, "SequentialLR")
      .def(py::init([](optim::Optimizer& opt, std::vector<std::shared_ptr<optim::LRScheduler>> s,
                       std::vector<int64_t> milestones) {
             return std::make_shared<optim::SequentialLR>(opt, std::move(s), std::move(milestones));
           }),
           py::arg("optimizer"), py::arg("schedulers"), py::arg("milestones"),
           py::keep_alive<1, 2>(), "schedulers[i] from milestone i-1 on.");

  // ---- gradient clipping --------------------------------------------------------
  auto params_vector = [](py::handle params) {
    std::vector<DTensor> out;
    for (auto& [name, t] : group_params_from_python(params, "clip_grad_norm_: parameters"))
      out.push_back(t);
    return out;
  };
  om.def("clip_grad_norm_",
         [params_vector](py::object params, double max_norm, double norm_type,
                         bool error_if_nonfinite, std::optional<bool> foreach) {
           (void)foreach;  // PyTorch's kernel choice; the values are the same either way
           std::vector<DTensor> p = params_vector(params);
           py::gil_scoped_release release;
           // PyTorch returns the norm as a 0-d tensor; float64 keeps every bit
           // of the norm dtensor computes (float(norm), norm.item() work).
           return Tensor::scalar(optim::clip_grad_norm_(p, max_norm, norm_type, error_if_nonfinite),
                                 DType::Float64);
         },
         py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
         py::arg("error_if_nonfinite") = false, py::arg("foreach") = py::none(), R"doc(
The norm of all the gradients together (float('inf') for the max norm); when it
exceeds max_norm every gradient is scaled by max_norm / (norm + 1e-6). Returns
the norm before clipping as a 0-d float64 Tensor (the same on every process;
float(norm) gives the number). foreach is accepted and changes nothing.
World-collective: under MPI every process calls it, those outside some
parameter's mesh too.
)doc");
  om.def("clip_grad_value_",
         [params_vector](py::object params, double clip_value, std::optional<bool> foreach) {
           (void)foreach;
           std::vector<DTensor> p = params_vector(params);
           py::gil_scoped_release release;
           clip_grad_value(p, clip_value);
         },
         py::arg("parameters"), py::arg("clip_value"), py::arg("foreach") = py::none(), R"doc(
Clamps every gradient into [-clip_value, clip_value] in place (PyTorch's
torch.nn.utils.clip_grad_value_). A Partial(sum) gradient is reduced first
(its pieces' clamps would not sum to the clamp) and replaces .grad.
)doc");
  om.def("total_grad_norm",
         [params_vector](py::object params, double norm_type) {
           std::vector<DTensor> p = params_vector(params);
           py::gil_scoped_release release;
           return optim::total_grad_norm(p, norm_type);
         },
         py::arg("parameters"), py::arg("norm_type") = 2.0,
         "The norm clip_grad_norm_ would compute, without clipping (world-collective too).");

  py::object modules = py::module_::import("sys").attr("modules");
  modules["dtensor.optim"] = om;
  modules["dtensor.optim.lr_scheduler"] = sm;
}

}  // namespace dtensor::python
