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
// pairs such as module.named_parameters() gives; the optimizer keeps copies
// that share their storage and gradient. One learning rate per optimizer
// (no param_groups: a list of dicts raises TypeError saying so): opt.lr
// reads and sets it. An empty parameter list is PyTorch's ValueError. step() and clip_grad_norm_
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
#include "dtensor/optim.h"

namespace dtensor::python {

namespace {

using release_gil = py::call_guard<py::gil_scoped_release>;
using NamedParams = std::vector<std::pair<std::string, DTensor>>;

// The parameters an optimizer was given: DTensors, or (name, DTensor) pairs
// (named_parameters()). Unnamed ones get no names, as in C++.
struct ParamList {
  std::vector<DTensor> plain;
  NamedParams named;
  bool is_named = false;
};

ParamList params_from_python(py::handle params) {
  ParamList out;
  if (py::isinstance<DTensor>(params))
    DT_THROW("optimizer: params must be an iterable of DTensors or (name, DTensor) pairs, got "
             "one DTensor (wrap it in a list)");
  if (!py::isinstance<py::iterable>(params))
    throw py::type_error("optimizer: params must be an iterable of DTensors or (name, DTensor) "
                         "pairs, got " + describe(params));
  bool first = true;
  for (py::handle item : py::iter(params)) {
    if (py::isinstance<py::dict>(item))
      throw py::type_error(
          "optimizer: params holds a dict, a param group; dtensor optimizers have no param "
          "groups (one learning rate and one set of options per optimizer): pass an iterable of "
          "DTensors or of (name, DTensor) pairs such as module.parameters() or "
          "module.named_parameters(), and make one optimizer per group if groups need other "
          "options");
    const bool pair = py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item);
    if (first) out.is_named = pair;
    DT_CHECK(pair == out.is_named, "optimizer: params mix DTensors and (name, DTensor) pairs");
    first = false;
    if (pair) {
      auto seq = py::reinterpret_borrow<py::sequence>(item);
      DT_CHECK(seq.size() == 2, "optimizer: a named parameter is a (name, DTensor) pair, got ",
               seq.size(), " items");
      out.named.emplace_back(cast_arg<std::string>(seq[0], "optimizer: a (name, DTensor) pair", "a name (str) first"),
                             cast_arg<DTensor>(seq[1], "optimizer: a (name, DTensor) pair", "a DTensor second"));
    } else {
      out.plain.push_back(cast_arg<DTensor>(item, "optimizer: params", "DTensors (or (name, DTensor) pairs)"));
    }
  }
  return out;
}

template <class Opt, class Options>
std::unique_ptr<Opt> make_optimizer(py::handle params, const Options& o) {
  ParamList p = params_from_python(params);
  // PyTorch's ValueError, word for word.
  if (p.plain.empty() && p.named.empty()) throw py::value_error("optimizer got an empty parameter list");
  if (p.is_named) return std::make_unique<Opt>(std::move(p.named), o);
  return std::make_unique<Opt>(std::move(p.plain), o);
}

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

}  // namespace

void bind_optim(py::module_& m) {
  py::module_ om = m.def_submodule("optim", "Optimizers for DTensor parameters (torch.optim).");

  py::class_<optim::Optimizer>(om, "Optimizer", R"doc(
The base of the optimizers: the parameters, their state and one learning rate.
)doc")
      .def("step", &optim::Optimizer::step, release_gil(),
           "One update of every parameter that has a gradient, in place, with grad mode off. "
           "A gradient laid out otherwise than its parameter (the Partial(sum) gradient of a "
           "replicated weight) is redistributed to it first: the data-parallel all_reduce.")
      .def("zero_grad",
           [](optim::Optimizer& o, bool set_to_none) {
             DT_CHECK(set_to_none, "zero_grad(set_to_none=False): dtensor clears gradients to "
                                   "None only (PyTorch's default)");
             o.zero_grad();
           },
           py::arg("set_to_none") = true, "Sets every parameter's .grad to None.")
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr,
                    "The learning rate (one per optimizer; PyTorch's param_groups[0]['lr']).")
      .def_property_readonly("initial_lr", &optim::Optimizer::initial_lr)
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
      .def_property_readonly("buffer_names", &optim::Optimizer::buffer_names);

  py::class_<optim::SGD, optim::Optimizer>(om, "SGD", R"doc(
Stochastic gradient descent with PyTorch's rule and arguments (momentum,
dampening, weight_decay, nesterov, maximize).
)doc")
      .def(py::init([](py::object params, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov, bool maximize) {
             optim::SGDOptions o;
             o.lr = lr;
             o.momentum = momentum;
             o.dampening = dampening;
             o.weight_decay = weight_decay;
             o.nesterov = nesterov;
             o.maximize = maximize;
             return make_optimizer<optim::SGD>(params, o);
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0,
           py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::kw_only(),
           py::arg("nesterov") = false, py::arg("maximize") = false);

  py::class_<optim::AdamW, optim::Optimizer>(om, "AdamW", R"doc(
AdamW (decoupled weight decay, default 1e-2) with PyTorch's rule and arguments.
)doc")
      .def(py::init([](py::object params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize) {
             return make_optimizer<optim::AdamW>(
                 params, adam_options(lr, betas, eps, weight_decay, amsgrad, maximize));
           }),
           py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false, py::kw_only(),
           py::arg("maximize") = false)
      .def_property_readonly("weight_decay", &optim::AdamW::weight_decay);

  py::class_<optim::Adam, optim::AdamW>(om, "Adam", R"doc(
Adam (L2 weight decay added to the gradient, default 0) with PyTorch's rule.
)doc")
      .def(py::init([](py::object params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize) {
             return make_optimizer<optim::Adam>(
                 params, adam_options(lr, betas, eps, weight_decay, amsgrad, maximize));
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
      .def(py::init([](py::object params, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps, bool maximize) {
             optim::AdagradOptions o;
             o.lr = lr;
             o.lr_decay = lr_decay;
             o.weight_decay = weight_decay;
             o.initial_accumulator_value = initial_accumulator_value;
             o.eps = eps;
             o.maximize = maximize;
             return make_optimizer<optim::Adagrad>(params, o);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("initial_accumulator_value") = 0.0,
           py::arg("eps") = 1e-10, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::RMSprop, optim::Optimizer>(om, "RMSprop", R"doc(
RMSprop with PyTorch's rule and arguments (alpha, eps, weight_decay,
momentum, centered, maximize).
)doc")
      .def(py::init([](py::object params, double lr, double alpha, double eps, double weight_decay,
                       double momentum, bool centered, bool maximize) {
             optim::RMSpropOptions o;
             o.lr = lr;
             o.alpha = alpha;
             o.eps = eps;
             o.weight_decay = weight_decay;
             o.momentum = momentum;
             o.centered = centered;
             o.maximize = maximize;
             return make_optimizer<optim::RMSprop>(params, o);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0,
           py::arg("centered") = false, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::Adadelta, optim::Optimizer>(om, "Adadelta", R"doc(
Adadelta with PyTorch's rule and arguments (lr, rho, eps, weight_decay,
maximize); buffers "square_avg" and "acc_delta".
)doc")
      .def(py::init([](py::object params, double lr, double rho, double eps, double weight_decay,
                       bool maximize) {
             return make_optimizer<optim::Adadelta>(
                 params, optim::AdadeltaOptions{.lr = lr,
                                                .rho = rho,
                                                .eps = eps,
                                                .weight_decay = weight_decay,
                                                .maximize = maximize});
           }),
           py::arg("params"), py::arg("lr") = 1.0, py::arg("rho") = 0.9, py::arg("eps") = 1e-6,
           py::arg("weight_decay") = 0.0, py::kw_only(), py::arg("maximize") = false);

  py::class_<optim::Adamax, optim::Optimizer>(om, "Adamax", R"doc(
Adamax with PyTorch's rule and arguments (lr, betas, eps, weight_decay,
maximize); buffers "exp_avg" and "exp_inf".
)doc")
      .def(py::init([](py::object params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool maximize) {
             return make_optimizer<optim::Adamax>(
                 params, optim::AdamaxOptions{.lr = lr,
                                              .betas = betas,
                                              .eps = eps,
                                              .weight_decay = weight_decay,
                                              .maximize = maximize});
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
      .def(py::init([](py::object params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                       bool maximize) {
             return make_optimizer<optim::NAdam>(
                 params, optim::NAdamOptions{.lr = lr,
                                             .betas = betas,
                                             .eps = eps,
                                             .weight_decay = weight_decay,
                                             .momentum_decay = momentum_decay,
                                             .decoupled_weight_decay = decoupled_weight_decay,
                                             .maximize = maximize});
           }),
           py::arg("params"), py::arg("lr") = 2e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum_decay") = 4e-3,
           py::arg("decoupled_weight_decay") = false, py::kw_only(), py::arg("maximize") = false)
      .def("mu_product", &optim::NAdam::mu_product, py::arg("step"),
           "The momentum product mu_1 * ... * mu_step a step of that count uses.");

  py::class_<optim::RAdam, optim::Optimizer>(om, "RAdam", R"doc(
RAdam with PyTorch's rule and arguments (lr, betas, eps, weight_decay;
PyTorch 2's decoupled_weight_decay and maximize); buffers "exp_avg" and
"exp_avg_sq". With the default betas the rectified update starts at step 6.
)doc")
      .def(py::init([](py::object params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool decoupled_weight_decay, bool maximize) {
             return make_optimizer<optim::RAdam>(
                 params, optim::RAdamOptions{.lr = lr,
                                             .betas = betas,
                                             .eps = eps,
                                             .weight_decay = weight_decay,
                                             .decoupled_weight_decay = decoupled_weight_decay,
                                             .maximize = maximize});
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
      .def("get_last_lr", [](const optim::LRScheduler& s) { return std::vector<double>{s.get_last_lr()}; },
           "[the lr set last] (one per param group, as in PyTorch; there is one).")
      .def_property("last_epoch", &optim::LRScheduler::last_epoch,
                    &optim::LRScheduler::set_last_epoch,
                    "The epoch reached; setting it resumes there (sets the optimizer's lr).")
      .def("lr_at", &optim::LRScheduler::lr_at, py::arg("epoch"),
           "The lr of an epoch, in closed form from the initial lr.")
      .def_property_readonly("base_lrs", [](const optim::LRScheduler& s) { return std::vector<double>{s.base_lr()}; });

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
    ParamList p = params_from_python(params);
    if (!p.is_named) return p.plain;
    std::vector<DTensor> out;
    for (auto& [name, t] : p.named) out.push_back(t);
    return out;
  };
  om.def("clip_grad_norm_",
         [params_vector](py::object params, double max_norm, double norm_type, bool error_if_nonfinite) {
           std::vector<DTensor> p = params_vector(params);
           py::gil_scoped_release release;
           return optim::clip_grad_norm_(p, max_norm, norm_type, error_if_nonfinite);
         },
         py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
         py::arg("error_if_nonfinite") = false, R"doc(
The norm of all the gradients together (float('inf') for the max norm); when it
exceeds max_norm every gradient is scaled by max_norm / (norm + 1e-6). Returns
the norm before clipping (a float, the same on every process). World-collective:
under MPI every process calls it, those outside some parameter's mesh too.
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
