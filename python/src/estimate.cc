// dtensor.estimate: a step function profiled (estimate.h) on any world,
// a shape-only one above all: each held rank's exact memory and
// collectives, and the step's time estimated on a cluster.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"
#include "dtensor/estimate.h"

namespace dtensor::python {

namespace {

// "phases_s": [(name, seconds)] for each phase from `first` on.
py::dict time_dict(const estimate::TimeEstimate& t, const estimate::Profile& p, size_t first) {
  py::list phases;
  for (size_t i = first; i < p.phases.size(); ++i) {
    const double end = i + 1 < t.phase_starts.size() ? t.phase_starts[i + 1] : t.step;
    phases.append(py::make_tuple(p.phases[i], end - t.phase_starts[i]));
  }
  py::dict d;
  d["step_s"] = t.step;
  d["compute_s"] = t.compute;
  d["communication_s"] = t.communication;
  d["exposed_communication_s"] = t.exposed_communication;
  d["flops"] = t.flops;
  d["phases_s"] = phases;
  return d;
}

}  // namespace

void bind_estimate(py::module_& m) {
  m.def(
      "estimate",
      [](const std::function<void()>& step, const World& world, const std::string& cluster,
         size_t from_phase, bool roles) {
        estimate::ProfileOptions options;
        options.roles = roles;
        const estimate::Profile p = estimate::profile(world, step, options);
        py::list ranks;
        for (size_t i = 0; i < p.ranks.size(); ++i) {
          const estimate::RankProfile& r = p.ranks[i];
          py::list collectives;
          for (const RankCollective& c : r.collectives) {
            py::dict e;
            e["kind"] = to_string(c.kind);
            e["dtype"] = dtype_name(c.dtype);
            e["bytes"] = c.bytes;
            e["group"] = p.groups[static_cast<size_t>(c.group)];
            collectives.append(e);
          }
          py::dict memory;
          memory["now"] = r.memory.now;
          memory["peak"] = r.memory.peak;
          memory["peak_unsharded_parameters"] = r.memory.peak_unsharded_parameters;
          memory["peak_communication_buffers"] = r.memory.peak_communication_buffers;
          py::dict rank;
          rank["rank"] = r.rank;
          rank["stands_for"] = p.ranks_of(i);
          rank["memory"] = memory;
          rank["collectives"] = collectives;
          rank["phase_starts"] = r.phase_starts;
          ranks.append(rank);
        }
        py::dict out;
        out["ranks"] = ranks;
        out["phases"] = p.phases;
        out["runs"] = p.runs;
        out["exact"] = std::vector<std::string>{"memory", "collectives"};
        out["estimated"] = std::vector<std::string>{"time"};
        out["time"] =
            time_dict(estimate::estimate_time(p, estimate::cluster_preset(cluster), from_phase), p,
                      from_phase);
        return out;
      },
      py::arg("step"), py::arg("world"), py::arg("cluster") = "h100", py::arg("from_phase") = 0,
      py::arg("roles") = true,
      R"doc(
Runs step() on `world` (World.shape_only(n) to plan a large run without its
data; a simulated or MPI world gives the same figures) and returns, per rank
the world holds, its exact memory (bytes its tensors hold: "now" at the end,
"peak", and fully_shard's two categories' peaks) and its collectives in order
(kind, dtype, bytes, group), the phases step() marked with
dtensor.estimate_phase, and the step's time estimated on `cluster` ("h100",
"a100" or "cpu") from phase `from_phase` on (docs/estimate.md).

In a shape-only world with roles=True, ranks alike in their local shapes and
collectives are computed once: "ranks" has one entry per role, whose
"stands_for" lists the world ranks with its figures (each in its own groups),
and step() may run more than once ("runs"), so it must make the tensors it
uses. roles=False computes every rank.
)doc");
  m.def("estimate_phase", &estimate::phase, py::arg("name"),
        "Inside dtensor.estimate's step: the collectives from here on belong to phase `name`.");
}

}  // namespace dtensor::python
