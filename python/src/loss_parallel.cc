// dtensor.parallel.loss_parallel(): PyTorch's context manager. Inside it,
// cross_entropy of logits sharded on their class dim over a mesh dim runs
// the vocab-parallel loss (vocab_parallel_cross_entropy, parallel.h) instead
// of replicating the logits; outside, and for any other input, the ordinary
// cross_entropy runs as before. The values and gradients are the same
// either way (the replicated computation's); only the communication
// differs. Done by wrapping the bound cross_entropy functions, so that the
// op's own binding (ops.cc) keeps whatever arguments it has.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "casters.h"
#include "current_rank.h"
#include "dtensor/parallel.h"

namespace dtensor::python {

namespace {

int& loss_parallel_depth() {
  thread_local int depth = 0;
  return depth;
}

struct LossParallel {};

// The arguments of F.cross_entropy past input and target, by keyword only
// (the positional order differs between torch and the op's binding).
VocabParallelLossOptions vocab_loss_options(const DeviceMesh& mesh, const py::kwargs& kw) {
  VocabParallelLossOptions o;
  for (auto [key, value] : kw) {
    const std::string k = key.cast<std::string>();
    if (k == "input" || k == "target") continue;
    if (k == "ignore_index") {
      o.ignore_index =
          cast_arg<int64_t>(value, "loss_parallel cross_entropy(ignore_index)", "an int");
    } else if (k == "reduction") {
      o.reduction = parse_reduction(
          cast_arg<std::string>(value, "loss_parallel cross_entropy(reduction)", "a str"));
    } else if (k == "weight") {
      if (value.is_none()) continue;
      if (py::isinstance<DTensor>(value)) {
        o.weight = value.cast<DTensor>();
      } else {
        const Tensor w = tensor_from_python(value, "loss_parallel cross_entropy(weight)");
        o.weight =
            distribute_tensor(w, mesh, Placements(static_cast<size_t>(mesh.ndim()), Replicate()));
      }
    } else if (k == "label_smoothing") {
      const double ls =
          cast_arg<double>(value, "loss_parallel cross_entropy(label_smoothing)", "a number");
      DT_CHECK(ls == 0.0, "cross_entropy under loss_parallel: label_smoothing=", ls,
               " is not implemented by the vocab-parallel loss (leave loss_parallel for it)");
    } else {
      DT_THROW("cross_entropy under loss_parallel: argument '", k,
               "' is not supported (input, "
               "target, weight, ignore_index, reduction, label_smoothing=0)");
    }
  }
  return o;
}

// The vocab-parallel loss when `input` is a DTensor sharded on its class
// dim; nullopt for anything the ordinary op should run.
std::optional<DTensor> try_vocab_parallel(const py::args& args, const py::kwargs& kw) {
  py::object input = args.size() > 0        ? py::object(args[0])
                     : kw.contains("input") ? py::object(kw["input"])
                                            : py::none();
  if (!py::isinstance<DTensor>(input)) return std::nullopt;
  const DTensor logits = input.cast<DTensor>();
  if (logits.dim() < 2) return std::nullopt;  // one unbatched row: nothing to shard over
  const int64_t class_dim = 1;                // F.cross_entropy's (N, C, d1, ...)
  int tp = -1;
  for (int d = 0; d < logits.mesh().ndim(); ++d) {
    const Placement& p = logits.placements()[static_cast<size_t>(d)];
    if (!p.is_shard() || (p.dim() + logits.dim()) % logits.dim() != class_dim) continue;
    DT_CHECK(tp < 0,
             "cross_entropy under loss_parallel: the class dim is sharded over mesh "
             "dims ",
             tp, " and ", d, "; one is supported");
    tp = d;
  }
  if (tp < 0) return std::nullopt;
  DT_CHECK(args.size() <= 2,
           "cross_entropy under loss_parallel: pass the arguments after input "
           "and target by keyword, got ",
           args.size(), " positional");
  py::object target = args.size() > 1         ? py::object(args[1])
                      : kw.contains("target") ? py::object(kw["target"])
                                              : py::none();
  DT_CHECK(!target.is_none(), "cross_entropy under loss_parallel: target missing");
  DTensor t;
  if (py::isinstance<DTensor>(target)) {
    t = target.cast<DTensor>();
  } else {
    // A plain target is each rank's own (PyTorch's from_local of it): its
    // rows those of the rank's logits, so laid out as the logits' rows are
    // (their Shard on a batch dim; Replicate where the classes are split).
    // A RankLocal gives every rank's in a simulated world.
    if (!is_local_value(target))
      target = py::cast(tensor_from_python(target, "loss_parallel cross_entropy(target)"));
    Placements p = logits.placements();
    for (Placement& pl : p) {
      if (!pl.is_shard()) continue;
      const int64_t dim = (pl.dim() + logits.dim()) % logits.dim();
      if (dim == class_dim)
        pl = Replicate();
      else if (dim > class_dim)
        pl = Shard(dim - 1);
    }
    t = local_value_as_dtensor(target, logits.mesh(), p);
  }
  VocabParallelLossOptions o = vocab_loss_options(logits.mesh(), kw);
  o.class_dim = logits.dim() == 2 ? -1 : 1;
  py::gil_scoped_release release;
  return vocab_parallel_cross_entropy(logits, t, tp, o);
}

// cross_entropy that takes the vocab-parallel path inside loss_parallel().
py::cpp_function routed(py::object original) {
  return py::cpp_function(
      [original](py::args args, py::kwargs kw) -> py::object {
        if (loss_parallel_depth() > 0)
          if (auto loss = try_vocab_parallel(args, kw)) return py::cast(*loss);
        return original(*args, **kw);
      },
      py::name("cross_entropy"),
      py::doc(py::str(original.attr("__doc__")).cast<std::string>().c_str()));
}

}  // namespace

void bind_loss_parallel(py::module_& m) {
  py::module_ pm = m.attr("parallel").cast<py::module_>();
  py::class_<LossParallel>(pm, "_LossParallel")
      .def("__enter__", [](LossParallel&) { ++loss_parallel_depth(); })
      .def("__exit__", [](LossParallel&, py::args) {
        --loss_parallel_depth();
        return false;
      });
  pm.def(
      "loss_parallel", [] { return LossParallel{}; }, R"doc(
with loss_parallel(): PyTorch's. cross_entropy(logits, target, ...) of
logits that are a DTensor sharded on the class dim (dim 1, the last of 2-d
logits) over one mesh dim computes the vocab-parallel loss
(vocab_parallel_cross_entropy) without gathering the logits; its backward
leaves the logits' gradient sharded like them. A plain target is each rank's
own (PyTorch's), laid out as the logits' rows: Shard(0) where they are
batch-sharded; in a simulated world a Tensor is every rank's and a
dtensor.RankLocal gives each rank's. Takes weight, ignore_index and
reduction by keyword (label_smoothing must be 0). Anything else runs the
ordinary cross_entropy. Per thread.
)doc");
  m.attr("loss_parallel") = pm.attr("loss_parallel");
  m.attr("cross_entropy") = routed(m.attr("cross_entropy"));
  // torch.nn.functional's spelling, where it is bound.
  if (py::hasattr(m.attr("nn"), "functional")) {
    py::object f = m.attr("nn").attr("functional");
    if (py::hasattr(f, "cross_entropy")) f.attr("cross_entropy") = routed(f.attr("cross_entropy"));
  }
}

}  // namespace dtensor::python
