// dtensor.current_rank(r) (a context manager), dtensor.get_current_rank();
// current_rank.h says what the current rank is for. The blocks nest: each
// pushes its rank on a per-thread stack and pops it on exit.
#include "current_rank.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "casters.h"

namespace dtensor::python {

namespace {

std::vector<int>& rank_stack() {
  thread_local std::vector<int> stack;
  return stack;
}

struct CurrentRank {
  int rank;
};

}  // namespace

std::optional<int> current_rank_override() {
  const auto& s = rank_stack();
  if (s.empty()) return std::nullopt;
  return s.back();
}

int current_rank_of(const World& world, const char* what) {
  if (auto r = current_rank_override()) {
    const std::string mpi_note = world.is_simulated()
                                     ? std::string()
                                     : " (under MPI the current rank is the process's own, " +
                                           std::to_string(world.rank()) + ")";
    DT_CHECK(world.holds(*r), what, ": the current rank ", *r,
             " (dtensor.current_rank) is not "
             "held by this process in a world of ",
             world.size(), " ranks", mpi_note);
    return *r;
  }
  const auto& held = world.held_ranks();
  DT_CHECK(held.size() == 1, what, ": this process holds ", held.size(),
           " ranks (a simulated "
           "world of ",
           world.size(),
           "), so there is no single current rank; run it inside "
           "`with dtensor.current_rank(r):` (or loop `for r in dtensor.each_rank(world):`)");
  return held.front();
}

std::optional<py::dict> rank_local_values(py::handle obj) {
  // Looked up once the package has made it (it imports the extension first).
  // Kept for good (a leaked reference: the type outlives every call).
  static PyObject* type = nullptr;
  if (type == nullptr) {
    PyObject* mod = PyImport_GetModule(py::str("dtensor._rank_local").ptr());  // new ref or null
    if (mod == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return std::nullopt;
    }
    type = py::object(py::reinterpret_steal<py::object>(mod).attr("RankLocal")).release().ptr();
  }
  if (!PyObject_TypeCheck(obj.ptr(), reinterpret_cast<PyTypeObject*>(type))) return std::nullopt;
  return py::dict(obj.attr("by_rank"));
}

bool is_local_value(py::handle obj) {
  return py::isinstance<Tensor>(obj) || rank_local_values(obj).has_value();
}

DTensor local_value_as_dtensor(py::handle local, const DeviceMesh& mesh,
                               const Placements& placements) {
  LocalTensor shards = local_from_python(local, mesh);
  py::gil_scoped_release release;
  return from_local(shards, mesh, placements);
}

void bind_current_rank(py::module_& m) {
  py::class_<CurrentRank>(m, "_CurrentRank")
      .def("__enter__",
           [](CurrentRank& c) {
             rank_stack().push_back(c.rank);
             return c.rank;
           })
      .def("__exit__", [](CurrentRank&, py::args) {
        if (!rank_stack().empty()) rank_stack().pop_back();
        return false;
      });
  m.def(
      "current_rank",
      [](int rank) {
        DT_CHECK(rank >= 0, "current_rank: expected a rank >= 0, got ", rank);
        return CurrentRank{rank};
      },
      py::arg("rank"), R"doc(
with dtensor.current_rank(r): the calls PyTorch answers for "this process"
act for rank r: DTensor.to_local(), DTensor.from_local(one tensor) (it is
rank r's shard), DeviceMesh.get_rank(), get_local_rank(), get_coordinate().
In a simulated world (which holds every rank) those calls need it; under MPI
the current rank is the process's own and r must be it. Ops, collectives and
local_shards() act for every held rank as always. Nests; per thread.
)doc");
  m.def("get_current_rank", &current_rank_override,
        "The rank of the innermost `with dtensor.current_rank(r):` block of this thread, or "
        "None outside one.");
}

}  // namespace dtensor::python
