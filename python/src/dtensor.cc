// dtensor.DTensor — one logical tensor laid out over a DeviceMesh — with
// distribute_tensor and DTensor.from_local to make one, redistribute,
// full_tensor, to_local / local_shards to read it, and the arithmetic of
// math_ops.h.
//
// Local shards in Python: under MPI a process holds one rank and
// to_local() returns its shard, as in PyTorch. A simulated world holds every
// rank, so to_local() needs one: inside `with dtensor.current_rank(r):`
// it is rank r's shard, to_local(rank=r) names r, local_shards() is a dict
// {rank: Tensor} of every held shard (and outside current_rank the Python
// package makes to_local() a RankLocal of them, _rank_local.py). Either
// way the Tensor shares the shard's memory (no copy): writing into it
// writes into the DTensor.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>

#include "bindings.h"
#include "casters.h"
#include "current_rank.h"
#include "math_ops.h"
#include "dtensor/autograd.h"

namespace dtensor::python {

// The shards of from_local: a Tensor (or array) for every held rank, a
// dict {rank: tensor} or a RankLocal of them, or a sequence indexed by
// position in the held ranks.
LocalTensor local_from_python(py::handle obj, const DeviceMesh& mesh) {
  std::vector<int> held;
  for (int r : mesh.world().held_ranks())
    if (mesh.contains(r)) held.push_back(r);
  std::vector<std::pair<int, Tensor>> shards;
  std::optional<py::dict> per_rank = rank_local_values(obj);
  if (per_rank || py::isinstance<py::dict>(obj)) {
    for (auto [k, v] : per_rank ? *per_rank : py::reinterpret_borrow<py::dict>(obj)) {
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
    const std::optional<int> current = current_rank_override();
    if (current && held.size() > 1) {
      // The tensor is the current rank's shard (it aliases it, as to_local()
      // then returns it); the other held ranks get copies, as outside.
      const int me = current_rank_of(mesh.world(), "DTensor.from_local");
      for (int r : held) shards.emplace_back(r, r == me ? t : t.clone());
    } else {
      for (int r : held) shards.emplace_back(r, t);  // copied for all but the lowest rank
    }
  }
  return LocalTensor(std::move(shards));
}

namespace {

Placements all_replicate(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// PyTorch's src_data_rank k (group rank k on every mesh dim; None: each
// rank's own data) as dtensor's global src_rank: the rank at coordinate
// (k, ..., k) of a root mesh. A view (sub-mesh) has one such rank per
// group, which dtensor's single src_rank cannot say.
std::optional<int> source_rank(const DeviceMesh& mesh, py::handle k_obj) {
  if (k_obj.is_none()) return std::nullopt;
  const int k = cast_arg<int>(k_obj, "distribute_tensor(src_data_rank)", "an int or None");
  DT_CHECK(mesh.is_root(), "distribute_tensor: src_data_rank=", k, " on the sub-mesh ",
           mesh.to_string(), " is not supported (one source per group); distribute on the "
           "root mesh, or pass src_data_rank=None or src_rank=<global rank>");
  int64_t index = 0;
  for (int d = 0; d < mesh.ndim(); ++d) {
    DT_CHECK(k >= 0 && k < mesh.size(d), "distribute_tensor: src_data_rank=", k,
             " is not a rank of mesh dim ", d, " of size ", mesh.size(d));
    index = index * mesh.size(d) + k;
  }
  return mesh.ranks()[static_cast<size_t>(index)];
}

// grad_placements of to_local / full_tensor: checked like any placements;
// a gradient cannot flow through the plain Tensor they return, so asking
// for one on a tensor that records its backward is an error, not a silent
// cut of the graph.
void check_grad_placements(const DTensor& d, const std::optional<Placements>& g,
                           const char* what) {
  if (!g) return;
  DT_CHECK(static_cast<int>(g->size()) == d.mesh().ndim(), what, ": grad_placements has ",
           g->size(), " placements for a ", d.mesh().ndim(), "-d mesh");
  DT_CHECK(!(d.requires_grad() && is_grad_enabled()), what, "(grad_placements=...): this "
           "DTensor requires grad, but the plain Tensor ", what, " returns has no autograd in "
           "dtensor, so no gradient can come back through it; compute on the DTensor, or use "
           "d.redistribute(placements, grad_placements=...)");
}

DTensor redistribute_py(const DTensor& d, py::object placements, py::object device_mesh,
                        bool async_op, std::optional<DType> forward_dtype,
                        std::optional<DType> backward_dtype,
                        std::optional<Placements> grad_placements) {
  (void)async_op;  // collectives complete before redistribute returns
  if (py::isinstance<DeviceMesh>(placements) && !py::isinstance<DeviceMesh>(device_mesh))
    std::swap(placements, device_mesh);  // PyTorch's order: (device_mesh, placements)
  DT_CHECK(!placements.is_none(), "redistribute: placements missing");
  const auto p = cast_arg<Placements>(placements, "redistribute(placements)",
                                      "a list of placements or their text (\"S(0),R\")");
  RedistributeOptions o;
  o.forward_dtype = forward_dtype;
  o.backward_dtype = backward_dtype;
  o.grad_placements = std::move(grad_placements);
  std::optional<DeviceMesh> mesh;
  if (!device_mesh.is_none())
    mesh = cast_arg<DeviceMesh>(device_mesh, "redistribute(device_mesh)", "a DeviceMesh");
  py::gil_scoped_release release;
  return mesh ? d.redistribute(*mesh, p, o) : d.redistribute(p, o);
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
      .def("redistribute", &redistribute_py, py::arg("placements") = py::none(),
           py::arg("device_mesh") = py::none(), py::kw_only(), py::arg("async_op") = false,
           py::arg("forward_dtype") = py::none(), py::arg("backward_dtype") = py::none(),
           py::arg("grad_placements") = py::none(), R"doc(
The same tensor with other placements, moved by the cheapest plan
(dtensor.plan_redistribute explains it). PyTorch's order
redistribute(device_mesh, placements) works too. async_op is accepted:
dtensor's collectives have completed when the call returns, so the result
is ready either way. forward_dtype / backward_dtype: the tensor is cast to
forward_dtype before it moves, its gradient to backward_dtype before it
moves back (PyTorch 2.6's). grad_placements (dtensor's): the placements the
gradient is moved to on its way back (default: these placements, with
Partial as Replicate).
)doc")
      .def("full_tensor",
           [](const DTensor& d, std::optional<Placements> grad_placements) {
             check_grad_placements(d, grad_placements, "full_tensor");
             return d.full_tensor();
           },
           py::kw_only(), py::arg("grad_placements") = py::none(), release_gil(),
           "The global tensor (gathered and reduced as needed), as every rank sees it. A "
           "plain Tensor: dtensor's Tensors have no autograd, so grad_placements is checked "
           "but a gradient cannot flow back through it (dtensor.Error when one would: use "
           "redistribute([Replicate()] * ndim, grad_placements=...)).")
      .def("to_local",
           [](const DTensor& d, std::optional<int> rank, std::optional<Placements> grad_placements) {
             check_grad_placements(d, grad_placements, "to_local");
             if (rank) return d.to_local(*rank);
             return d.to_local(current_rank_of(d.mesh().world(), "DTensor.to_local()"));
           },
           py::arg("rank") = py::none(), py::kw_only(), py::arg("grad_placements") = py::none(),
           R"doc(
The shard of `rank`, or with no rank the current rank's: under MPI the
process's, in a simulated world the rank of `with dtensor.current_rank(r):`
(without one dtensor.Error: use to_local(rank) or local_shards()). Shares the
shard's memory. A plain Tensor, which has no autograd: grad_placements is
checked, and dtensor.Error is raised when a gradient would have to flow back
through it (compute on the DTensor instead).
)doc")
      .def("local_shards",
           [](const DTensor& d) {
             py::dict out;
             d.local().for_each([&](int rank, const Tensor& t) { out[py::int_(rank)] = py::cast(t); });
             return out;
           },
           "{rank: Tensor} for every shard this process holds (sharing their memory).")
      .def_static("from_local",
                  [](py::object local, const DeviceMesh& mesh, std::optional<Placements> given,
                     bool run_check, std::optional<Shape> shape, std::optional<Shape> stride) {
                    const Placements placements = given ? *given : all_replicate(mesh);
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
                  py::arg("local_tensor"), py::arg("device_mesh"), py::arg("placements") = py::none(),
                  py::kw_only(), py::arg("run_check") = true, py::arg("shape") = py::none(),
                  py::arg("stride") = py::none(), R"doc(
A DTensor from the shards this process holds. `local_tensor` is one Tensor or
array (every held rank's shard: under MPI the process's own; in a simulated
world it is copied for all ranks but the lowest, or inside `with
dtensor.current_rank(r):` it is rank r's and copied for the others), a dict {rank: shard}, a
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
        [](py::object full, const DeviceMesh& mesh, std::optional<Placements> placements,
           py::object src_data_rank, std::optional<int> src_rank) {
          Tensor t = tensor_from_python(full, "distribute_tensor");
          const Placements p = placements ? *placements : all_replicate(mesh);
          std::optional<int> src = src_rank;
          if (!src_data_rank.is(py::ellipsis())) {
            DT_CHECK(!src_rank, "distribute_tensor: src_rank and src_data_rank both given");
            src = source_rank(mesh, src_data_rank);
          }
          py::gil_scoped_release release;
          return distribute_tensor(t, mesh, p, src);
        },
        py::arg("tensor"), py::arg("device_mesh"), py::arg("placements") = py::none(),
        py::kw_only(), py::arg("src_data_rank") = py::ellipsis(), py::arg("src_rank") = py::none(),
        R"doc(
Lays out a Tensor (or anything NumPy can make an array of) over the mesh:
each held rank keeps its own copy of its part. placements default to
Replicate on every mesh dim. Without src_rank every rank cuts its part from
its own `tensor` (all ranks must pass the same; dtensor's seeded random
values are the same on every process); with src_rank (a global rank) the
tensor of that rank is scattered. src_data_rank is PyTorch's: k sends the
tensor of the mesh's rank at coordinate (k, ..., k) (group rank k on every
dim), None cuts locally. Unlike PyTorch, leaving it out means None, not 0:
no communication.
)doc");
}

}  // namespace dtensor::python
