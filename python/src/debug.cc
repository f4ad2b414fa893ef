// Debugging aids as context managers, named as in PyTorch:
//   with dtensor.CommDebugMode() as comm: ...
//   comm.get_total_counts(), comm.get_comm_counts() -> {"all_gather": 1, ...}
//   with dtensor.VerifyMode() as v: ...   (every op checked against replicated data)
// and visualize_sharding(dtensor) (prints and returns the table).
// A mode counts what the thread that entered it runs (as in PyTorch), and
// its counts stay readable after the with-block.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <iostream>
#include <memory>

#include "bindings.h"
#include "casters.h"

namespace dtensor::python {

namespace {

constexpr std::array<CollectiveKind, kNumCollectiveKinds> kKinds = {
    CollectiveKind::AllGather, CollectiveKind::AllReduce, CollectiveKind::ReduceScatter,
    CollectiveKind::AllToAll,  CollectiveKind::Broadcast, CollectiveKind::Scatter,
    CollectiveKind::BoxExchange};

CollectiveKind parse_kind(const std::string& name) {
  for (CollectiveKind k : kKinds)
    if (name == to_string(k)) return k;
  DT_THROW("CommDebugMode: unknown collective \"", name, "\" (expected all_gather, all_reduce, "
           "reduce_scatter, all_to_all, broadcast, scatter or box_exchange)");
}

// The C++ mode counts from construction to destruction, so the Python mode
// makes it in __enter__ and, in __exit__, keeps what it counted and
// destroys it.
struct PyCommDebugMode {
  std::unique_ptr<CommDebugMode> live;
  std::array<int64_t, kNumCollectiveKinds> counts{}, bytes{};
  double planned_cost_us = 0;
  int64_t plans_run = 0;
  std::string table, json;

  void snapshot() {
    for (CollectiveKind k : kKinds) {
      counts[static_cast<size_t>(k)] = live->count(k);
      bytes[static_cast<size_t>(k)] = live->bytes(k);
    }
    planned_cost_us = live->planned_cost_us();
    plans_run = live->plans_run();
    table = live->table();
    json = live->json();
  }
  int64_t count(CollectiveKind k) const {
    return live ? live->count(k) : counts[static_cast<size_t>(k)];
  }
  int64_t byte_count(CollectiveKind k) const {
    return live ? live->bytes(k) : bytes[static_cast<size_t>(k)];
  }
};

struct PyVerifyMode {
  std::unique_ptr<VerifyMode> live;
  int64_t checks = 0;
};

}  // namespace

void bind_debug(py::module_& m) {
  py::class_<PyCommDebugMode>(m, "CommDebugMode", R"doc(
Counts the collectives (and the bytes each rank sends into them) run on
this thread inside `with CommDebugMode() as comm:`; one per call, as a
single rank sees it, however many ranks the process holds.
)doc")
      .def(py::init<>())
      .def("__enter__", [](PyCommDebugMode& s) -> PyCommDebugMode& {
        DT_CHECK(s.live == nullptr, "CommDebugMode: already active (make a new one to nest)");
        s.live = std::make_unique<CommDebugMode>();
        return s;
      }, py::return_value_policy::reference)
      .def("__exit__", [](PyCommDebugMode& s, py::args) {
        if (s.live) {
          s.snapshot();
          s.live.reset();
        }
        return false;
      })
      .def("get_total_counts", [](const PyCommDebugMode& s) {
        int64_t total = 0;
        for (CollectiveKind k : kKinds) total += s.count(k);
        return total;
      })
      .def("get_comm_counts", [](const PyCommDebugMode& s) {
        py::dict d;
        for (CollectiveKind k : kKinds)
          if (s.count(k) > 0) d[to_string(k)] = s.count(k);
        return d;
      }, "{collective name: count} of the collectives that ran (names as in the C++ API: "
         "all_gather, all_reduce, reduce_scatter, all_to_all, broadcast, scatter, box_exchange).")
      .def("get_comm_bytes", [](const PyCommDebugMode& s) {
        py::dict d;
        for (CollectiveKind k : kKinds)
          if (s.count(k) > 0) d[to_string(k)] = s.byte_count(k);
        return d;
      }, "{collective name: bytes per rank}.")
      .def("count", [](const PyCommDebugMode& s, const std::string& k) { return s.count(parse_kind(k)); },
           py::arg("kind"))
      .def_property_readonly("planned_cost_us", [](const PyCommDebugMode& s) {
        return s.live ? s.live->planned_cost_us() : s.planned_cost_us;
      })
      .def_property_readonly("plans_run", [](const PyCommDebugMode& s) {
        return s.live ? s.live->plans_run() : s.plans_run;
      })
      .def("table", [](const PyCommDebugMode& s) { return s.live ? s.live->table() : s.table; })
      .def("json", [](const PyCommDebugMode& s) { return s.live ? s.live->json() : s.json; });

  py::class_<PyVerifyMode>(m, "VerifyMode", R"doc(
Inside `with VerifyMode() as v:` every DTensor op and redistribution is
checked against the same computation on replicated data; a mismatch raises
dtensor.Error. v.checks counts the checks. For tests and debugging.
)doc")
      .def(py::init<>())
      .def("__enter__", [](PyVerifyMode& s) -> PyVerifyMode& {
        DT_CHECK(s.live == nullptr, "VerifyMode: already active (make a new one to nest)");
        s.live = std::make_unique<VerifyMode>();
        return s;
      }, py::return_value_policy::reference)
      .def("__exit__", [](PyVerifyMode& s, py::args) {
        if (s.live) {
          s.checks = s.live->checks();
          s.live.reset();
        }
        return false;
      })
      .def_property_readonly("checks", [](const PyVerifyMode& s) {
        return s.live ? s.live->checks() : s.checks;
      });
  m.def("verify_enabled", &verify_enabled);

  m.def("visualize_sharding",
        [](py::handle x, bool print) {
          std::string text = py::isinstance<DTensor>(x) ? visualize_sharding(x.cast<const DTensor&>())
                                                        : visualize_sharding(cast_arg<const DTensorSpec&>(
                                                              x, "visualize_sharding", "a DTensor or a DTensorSpec"));
          if (print) py::print(text, py::arg("end") = "");
          return text;
        },
        py::arg("dtensor"), py::arg("print") = false,
        "The table of which rank holds which index range of each dim (returned; printed "
        "too with print=True).");
  m.def("debug_notes", &debug_notes, "Notes the library left (e.g. ops computed on Replicate).");
  m.def("clear_debug_notes", &clear_debug_notes);
}

}  // namespace dtensor::python
