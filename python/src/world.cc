// dtensor.World: the ranks a program runs on and which this process holds.
// World.simulated(n) holds all n ranks in this process; World.mpi() holds
// this process's rank of an `mpirun -np N python3 script.py` job (MPI is
// initialised on the first call and finalised at exit by the library;
// dtensor/__init__.py loads libmpi with RTLD_GLOBAL first so that Open MPI's
// plugins find its symbols).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"

namespace dtensor::python {

void bind_world(py::module_& m) {
  py::class_<World>(m, "World", R"doc(
The set of ranks a program runs on, and which of them this process holds.
A cheap handle: copies refer to the same world.
)doc")
      .def_static("simulated", &World::simulated, py::arg("size"),
                  "All `size` ranks held by this process (collectives computed in memory).")
      .def_static("shape_only", &World::shape_only, py::arg("size"),
                  "All `size` ranks held by this process as shapes only: tensors have shapes "
                  "but no values, ops run no kernels, collectives record themselves "
                  "(dtensor.estimate; docs/estimate.md).")
      .def_static("mpi", []() { return World::mpi(); }, py::call_guard<py::gil_scoped_release>(),
                  "This process's rank of the MPI job (MPI_COMM_WORLD), initialising MPI on "
                  "the first call; the same world on later calls. MPI is finalised at exit. "
                  "Call MPI-using functions from the main thread only (MPI_THREAD_FUNNELED).")
      .def_static("mpi_available", &World::mpi_available, "Whether this build has MPI.")
      .def_static("launched_by_mpi", &World::launched_by_mpi,
                  "Whether mpirun (or srun) started this process.")
      .def_static("from_launcher", [](int n) { return World::from_launcher(n); },
                  py::arg("simulated_size"), py::call_guard<py::gil_scoped_release>(),
                  "World.mpi() under mpirun, otherwise World.simulated(simulated_size).")
      .def_property_readonly("size", &World::size)
      .def_property_readonly("rank", &World::rank, "This process's rank (0 when simulated).")
      .def_property_readonly("held_ranks", &World::held_ranks,
                             "The ranks this process holds (all of them when simulated).")
      .def("holds", &World::holds, py::arg("rank"))
      .def_property_readonly("is_simulated", &World::is_simulated)
      .def_property_readonly("is_shape_only", &World::is_shape_only)
      .def("__eq__", [](const World& a, const World& b) { return a == b; })
      .def("__hash__", [](const World& w) { return reinterpret_cast<uintptr_t>(&w.backend()); })
      .def("__repr__", [](const World& w) {
        if (w.is_shape_only()) return "World.shape_only(" + std::to_string(w.size()) + ")";
        return w.is_simulated() ? "World.simulated(" + std::to_string(w.size()) + ")"
                                : "World.mpi(size=" + std::to_string(w.size()) +
                                      ", rank=" + std::to_string(w.rank()) + ")";
      });
}

}  // namespace dtensor::python
