// dtensor.plan_redistribute(src, placements): the plan redistribute would
// run, without running it. A plan's str is the explanation `dtensor plan`
// prints; its steps are RedistributeStep objects (kind, mesh dims, tensor
// dims, reduction, group size, bytes, cost, peak memory).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>

#include "bindings.h"
#include "casters.h"

namespace dtensor::python {

namespace {

// The planner shares immutable plans from its cache; pybind11 cannot hold a
// shared_ptr<const T>, so the Python object holds a non-const pointer to
// the same plan and binds only readers.
using PlanPtr = std::shared_ptr<RedistributePlan>;

std::string step_repr(const RedistributeStep& s) {
  std::ostringstream os;
  os << "RedistributeStep(" << to_string(s.kind) << ", mesh_dims=" << to_string(s.mesh_dims)
     << ", " << to_string(s.from) << " -> " << to_string(s.to);
  if (s.tensor_dim >= 0) os << ", tensor_dim=" << s.tensor_dim;
  if (s.to_tensor_dim >= 0) os << ", to_tensor_dim=" << s.to_tensor_dim;
  os << ", cost_us=" << s.cost_us << ")";
  return os.str();
}

}  // namespace

void bind_plan(py::module_& m) {
  py::class_<RedistributeStep>(m, "RedistributeStep",
                               "One collective (or local op) of a redistribution plan.")
      .def_property_readonly("kind", [](const RedistributeStep& s) { return to_string(s.kind); },
                             "\"all_gather\", \"all_reduce\", \"reduce_scatter\", \"all_to_all\" or \"local\".")
      .def_property_readonly("mesh_dims", [](const RedistributeStep& s) { return s.mesh_dims; },
                             "The mesh dims the step changes (several: a merged collective).")
      .def_property_readonly("from_placements", [](const RedistributeStep& s) { return s.from; })
      .def_property_readonly("to_placements", [](const RedistributeStep& s) { return s.to; })
      .def_property_readonly("tensor_dim", [](const RedistributeStep& s) -> std::optional<int64_t> {
        if (s.tensor_dim < 0) return std::nullopt;
        return s.tensor_dim;
      })
      .def_property_readonly("to_tensor_dim", [](const RedistributeStep& s) -> std::optional<int64_t> {
        if (s.to_tensor_dim < 0) return std::nullopt;
        return s.to_tensor_dim;
      })
      .def_property_readonly("reduce_op", [](const RedistributeStep& s) -> std::optional<std::string> {
        if (s.kind != StepKind::AllReduce && s.kind != StepKind::ReduceScatter) return std::nullopt;
        return std::string(to_string(s.op));
      })
      .def_readonly("divisor", &RedistributeStep::divisor)
      .def_readonly("group_size", &RedistributeStep::group_size)
      .def_readonly("bytes", &RedistributeStep::bytes, "Bytes per rank the cost model charges.")
      .def_readonly("cost_us", &RedistributeStep::cost_us)
      .def_readonly("peak_bytes", &RedistributeStep::peak_bytes)
      .def_readonly("group", &RedistributeStep::group, "The flattened group's name (\"\" for one dim).")
      .def_readonly("created_group", &RedistributeStep::created_group)
      .def("__repr__", &step_repr);

  py::class_<RedistributePlan, PlanPtr>(m, "RedistributePlan",
                                        "The min-cost plan between two layouts; str() explains it.")
      .def_property_readonly("src", [](const RedistributePlan& p) { return p.from; })
      .def_property_readonly("dst", [](const RedistributePlan& p) { return p.to; })
      .def_property_readonly("steps", [](const RedistributePlan& p) { return p.steps; })
      .def_readonly("cost_us", &RedistributePlan::cost_us)
      .def_readonly("groups", &RedistributePlan::groups)
      .def_readonly("output_bytes", &RedistributePlan::output_bytes)
      .def_readonly("peak_bytes", &RedistributePlan::peak_bytes)
      .def_property_readonly("num_collectives", &RedistributePlan::num_collectives)
      .def_property_readonly("counts", [](const RedistributePlan& p) {
        py::dict d;
        for (int k = 0; k < kNumStepKinds; ++k)
          if (p.counts[static_cast<size_t>(k)] > 0)
            d[to_string(static_cast<StepKind>(k))] = p.counts[static_cast<size_t>(k)];
        return d;
      }, "Collectives by kind.")
      .def("explain", &RedistributePlan::explain)
      .def("__str__", &RedistributePlan::explain)
      .def("__len__", [](const RedistributePlan& p) { return p.steps.size(); })
      .def("__repr__", [](const RedistributePlan& p) {
        std::ostringstream os;
        os << "RedistributePlan(" << to_string(p.from.placements()) << " -> "
           << to_string(p.to.placements()) << ", steps=" << p.steps.size()
           << ", cost_us=" << p.cost_us << ")";
        return os.str();
      });

  auto plan = [](const DTensorSpec& src, const Placements& placements, std::optional<bool> merge,
                 std::optional<bool> auto_flatten, bool search, bool box_exchange) {
    RedistributeOptions o;
    o.merge = merge.value_or(true);
    o.auto_flatten = auto_flatten;
    o.search = search;
    o.box_exchange = box_exchange;
    return std::const_pointer_cast<RedistributePlan>(
        plan_redistribute(src, src.with_placements(placements), o));
  };
  m.def("plan_redistribute",
        [plan](const DTensor& d, const Placements& p, std::optional<bool> merge,
               std::optional<bool> af, bool search, bool box) {
          return plan(d.spec(), p, merge, af, search, box);
        },
        py::arg("src"), py::arg("placements"), py::kw_only(), py::arg("merge") = py::none(),
        py::arg("auto_flatten") = py::none(), py::arg("search") = true,
        py::arg("box_exchange") = true, py::call_guard<py::gil_scoped_release>());
  m.def("plan_redistribute", plan, py::arg("src"), py::arg("placements"), py::kw_only(),
        py::arg("merge") = py::none(), py::arg("auto_flatten") = py::none(),
        py::arg("search") = true, py::arg("box_exchange") = true,
        py::call_guard<py::gil_scoped_release>(), R"doc(
The plan that would move `src` (a DTensor or a DTensorSpec) to `placements`
on the same mesh: its steps, cost and peak memory; str(plan) is the text
`dtensor plan` prints. Raises dtensor.Error for S->P, P(a)->P(b) or a new
Partial. box_exchange=False keeps the plan to one-mesh-dim collectives
(the planner otherwise moves S/R layouts by one exchange of boxes when
that is cheaper, or as cheap and lighter in memory).
)doc");
  m.def("redistribute_cost", [](const DTensorSpec& src, const Placements& p) {
          return redistribute_cost(src, src.with_placements(p));
        }, py::arg("src"), py::arg("placements"), "The estimated cost (µs) of the cheapest plan.");
}

}  // namespace dtensor::python
