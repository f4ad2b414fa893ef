// dtensor.DTensor — one logical tensor laid out over a DeviceMesh — with
// distribute_tensor and DTensor.from_local to make one, redistribute,
// full_tensor, to_local / local_shards to read it, and the arithmetic of
// math_ops.h.
//
// Local shards in Python: under MPI a process holds one rank and
// to_local() returns its shard, as in PyTorch. A simulated world holds every
// rank, so to_local() raises dtensor.Error asking for a rank:
// to_local(rank=r) returns rank r's shard, local_shards() a dict {rank:
// Tensor} of every held shard. Either way the Tensor shares the shard's
// memory (no copy): writing into it writes into the DTensor.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>

#include "bindings.h"
#include "casters.h"
#include "math_ops.h"

namespace dtensor::python {

namespace {

// The shards of from_local: a Tensor (or array) for every held rank, a
// dict {rank: tensor}, or a sequence indexed by position in the held ranks.
LocalTensor local_from_python(py::handle obj, const DeviceMesh& mesh) {
  std::vector<int> held;
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) held.push_back(r);
  std::vector<std::pair<int, Tensor>> shards;
  if (py::isinstance<py::dict>(obj)) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(obj)) {
      const int rank = cast_arg<int>(k, "from_local: a key of the dict of shards", "a rank (int)");
      shards.emplace_back(rank, tensor_from_python(v, "from_local: the shard of rank " + std::to_string(rank)));
    }
    std::sort(shards.begin(), shards.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  } else if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
    DT_CHECK(seq.size() == held.size(), "from_local: got ", seq.size(), " shards for the ",
             held.size(), " ranks of the mesh this process holds (pass a dict {rank: tensor} "
             "or one shard per held rank, in rank order)");
    for (size_t i = 0; i < held.size(); ++i)
      shards.emplace_back(held[i], tensor_from_python(seq[i], "from_local: the shard of rank " +
                                                                  std::to_string(held[i])));
  } else {
    Tensor t = tensor_from_python(obj, "from_local");
    for (int r : held) shards.emplace_back(r, t);  // copied for all but the lowest rank
  }
  return LocalTensor(std::move(shards));
}

}  // namespace

void bind_dtensor(py::module_& m) {
  py::class_<DTensor> cls(m, "DTensor", R"doc(
One logical tensor laid out over a DeviceMesh by one placement per mesh dim
(Shard(d), Replicate(), Partial(op)), holding the shards of the ranks this
process holds. Ops propagate the layout and run collectives where needed.
)doc");
  bind_math_methods<DTensor>(cls);
  cls.def_property_readonly("is_meta", &DTensor::is_meta,
                            "On the meta device: a layout without values yet (a parameter "
                            "made under dtensor.nn.meta_device(), before materialize()).");
  cls.def_property_readonly("placements", &DTensor::placements)
      .def_property_readonly("device_mesh", &DTensor::mesh)
      .def_property_readonly("spec", &DTensor::spec)
      .def("redistribute",
           [](const DTensor& d, const Placements& placements, std::optional<DeviceMesh> mesh) {
             return mesh ? d.redistribute(*mesh, placements) : d.redistribute(placements);
           },
           py::arg("placements"), py::arg("device_mesh") = py::none(), release_gil(),
           "The same tensor with other placements, moved by the cheapest plan "
           "(dtensor.plan_redistribute explains it).")
      .def("full_tensor", &DTensor::full_tensor, release_gil(),
           "The global tensor (gathered and reduced as needed), as every rank sees it.")
      .def("to_local",
           [](const DTensor& d, std::optional<int> rank) {
             return rank ? d.to_local(*rank) : d.to_local();
           },
           py::arg("rank") = py::none(),
           "The shard of `rank`, or with no rank the shard of the only rank this process "
           "holds (MPI); a simulated world holding several ranks raises dtensor.Error. "
           "Shares the shard's memory.")
      .def("local_shards",
           [](const DTensor& d) {
             py::dict out;
             d.local().for_each([&](int rank, const Tensor& t) { out[py::int_(rank)] = py::cast(t); });
             return out;
           },
           "{rank: Tensor} for every shard this process holds (sharing their memory).")
      .def_static("from_local",
                  [](py::object local, const DeviceMesh& mesh, const Placements& placements,
                     bool run_check, std::optional<Shape> shape, std::optional<Shape> stride) {
                    FromLocalOptions o;
                    o.run_check = run_check;
                    o.shape = shape;
                    o.stride = stride;
                    if (PyCallable_Check(local.ptr()) && !py::isinstance<Tensor>(local)) {
                      // The callable's result is a shard like any other: a
                      // Tensor, an array, anything tensor() takes.
                      return from_local(
                          [&](int rank) {
                            py::gil_scoped_acquire gil;
                            return tensor_from_python(local(rank), "from_local: local_tensor(" +
                                                                       std::to_string(rank) + ")");
                          },
                          mesh, placements, o);
                    }
                    LocalTensor shards = local_from_python(local, mesh);
                    py::gil_scoped_release release;
                    return from_local(shards, mesh, placements, o);
                  },
                  py::arg("local_tensor"), py::arg("device_mesh"), py::arg("placements"),
                  py::kw_only(), py::arg("run_check") = true, py::arg("shape") = py::none(),
                  py::arg("stride") = py::none(), R"doc(
A DTensor from the shards this process holds. `local_tensor` is one Tensor or
array (every held rank's shard: under MPI the process's own; in a simulated
world it is copied for all ranks but the lowest), a dict {rank: shard}, a
list of shards of the held ranks in order, or a callable rank -> shard.
A shard is not copied: the DTensor aliases it. `shape` is needed for uneven
shards.
)doc")
      .def("__repr__", [](const DTensor& d) {
        std::ostringstream os;
        os << d;
        return os.str();
      });
  // DTensor with a plain Tensor: one element, or any shape inside
  // implicit_replication (dtensor.implicit_replication()).
  cls.def("__add__", [](const DTensor& a, const Tensor& b) { return a + b; }, py::is_operator(), release_gil())
      .def("__radd__", [](const DTensor& a, const Tensor& b) { return b + a; }, py::is_operator(), release_gil())
      .def("__sub__", [](const DTensor& a, const Tensor& b) { return a - b; }, py::is_operator(), release_gil())
      .def("__rsub__", [](const DTensor& a, const Tensor& b) { return b - a; }, py::is_operator(), release_gil())
      .def("__mul__", [](const DTensor& a, const Tensor& b) { return a * b; }, py::is_operator(), release_gil())
      .def("__rmul__", [](const DTensor& a, const Tensor& b) { return b * a; }, py::is_operator(), release_gil())
      .def("__truediv__", [](const DTensor& a, const Tensor& b) { return a / b; }, py::is_operator(), release_gil())
      .def("__rtruediv__", [](const DTensor& a, const Tensor& b) { return b / a; }, py::is_operator(), release_gil());

  m.def("distribute_tensor",
        [](py::object full, const DeviceMesh& mesh, const Placements& placements,
           std::optional<int> src_rank) {
          Tensor t = tensor_from_python(full, "distribute_tensor");
          py::gil_scoped_release release;
          return distribute_tensor(t, mesh, placements, src_rank);
        },
        py::arg("tensor"), py::arg("device_mesh"), py::arg("placements"),
        py::arg("src_rank") = py::none(), R"doc(
Lays out a Tensor (or anything NumPy can make an array of) over the mesh:
each held rank keeps its own copy of its part. Without src_rank every rank
cuts its part from its own `tensor` (all ranks must pass the same); with
src_rank the tensor of that rank is scattered.
)doc");
}

}  // namespace dtensor::python
