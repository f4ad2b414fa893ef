// dtensor.DeviceMesh: an n-d array of ranks over a World, with dim names,
// sub-meshes by name (mesh["tp"], mesh["dp", "tp"]) and flattened dims.
// init_device_mesh, PyTorch's entry point, is in dtensor/__init__.py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"
#include "current_rank.h"

namespace dtensor::python {

namespace {

// mesh["tp"] or mesh["dp", "tp"]: dims by name only, as in PyTorch (an
// index would be ambiguous with slicing the rank array).
std::vector<std::string> names_from(py::handle key) {
  if (PyUnicode_Check(key.ptr())) return {key.cast<std::string>()};
  return cast_arg<std::vector<std::string>>(key, "DeviceMesh[key]",
                                            "a mesh dim name (str) or a tuple of names");
}

// PyTorch's get_local_rank(mesh_dim=None): the current rank's coordinate on
// one dim; the dim may be left out on a 1-d mesh only.
int64_t local_rank(const DeviceMesh& mesh, py::object mesh_dim) {
  const int rank = current_rank_of(mesh.world(), "DeviceMesh.get_local_rank()");
  int d = 0;
  if (mesh_dim.is_none())
    DT_CHECK(mesh.ndim() == 1, "DeviceMesh.get_local_rank(): mesh_dim must be given for a ",
             mesh.ndim(), "-d mesh ", mesh.to_string());
  else if (PyUnicode_Check(mesh_dim.ptr()))
    d = mesh.dim_index(mesh_dim.cast<std::string>());
  else
    d = cast_arg<int>(mesh_dim, "DeviceMesh.get_local_rank(mesh_dim)", "a dim index (int) or name (str)");
  DT_CHECK(d >= 0 && d < mesh.ndim(), "DeviceMesh.get_local_rank(): mesh_dim ", d,
           " out of range for a ", mesh.ndim(), "-d mesh");
  auto coord = mesh.coordinate(rank);
  DT_CHECK(coord.has_value(), "DeviceMesh.get_local_rank(): rank ", rank, " is not in mesh ",
           mesh.to_string());
  return (*coord)[static_cast<size_t>(d)];
}

}  // namespace

void bind_mesh(py::module_& m) {
  py::class_<DeviceMesh>(m, "DeviceMesh", R"doc(
An n-d array of ranks over a World, with optional dim names. The group of
mesh dim d for a rank is the ranks whose coordinates equal its own on every
other dim. Sub-meshes (mesh["tp"], mesh["dp", "tp"]) and flattened dims
(mesh.flatten(["dp", "cp"])) are views onto the same root mesh.
)doc")
      .def(py::init([](const World& world, const Shape& shape,
                       std::optional<std::vector<std::string>> names,
                       std::optional<std::vector<int>> ranks) {
             std::vector<std::string> n = names.value_or(std::vector<std::string>{});
             if (ranks) return DeviceMesh(world, shape, *ranks, n);
             return DeviceMesh(world, shape, n);
           }),
           py::arg("world"), py::arg("mesh_shape"), py::arg("mesh_dim_names") = py::none(),
           py::arg("ranks") = py::none(),
           "A mesh of `mesh_shape` over the world's ranks 0..n-1 row-major (or over `ranks`).")
      .def_property_readonly("world", &DeviceMesh::world)
      .def_property_readonly("ndim", &DeviceMesh::ndim)
      .def_property_readonly("shape", &DeviceMesh::shape)
      .def("size", [](const DeviceMesh& mesh, py::object d) -> int64_t {
             if (d.is_none()) return mesh.size();
             if (PyUnicode_Check(d.ptr())) return mesh.size(d.cast<std::string>());
             return mesh.size(cast_arg<int>(d, "DeviceMesh.size(mesh_dim)", "a dim index (int) or name (str)"));
           }, py::arg("mesh_dim") = py::none(),
           "Ranks in the mesh, or the size of one dim (by index or name).")
      .def_property_readonly("mesh_dim_names", [](const DeviceMesh& mesh) -> py::object {
        std::vector<std::string> names = mesh.names();
        bool any = false;
        for (const auto& n : names) any = any || !n.empty();
        if (!any) return py::none();
        return py::tuple(py::cast(names));
      }, "The dim names (None when unnamed, as in PyTorch).")
      .def("get_dim_index", &DeviceMesh::dim_index, py::arg("name"))
      .def("__getitem__", [](const DeviceMesh& mesh, py::handle key) {
             std::vector<std::string> names = names_from(key);
             return names.size() == 1 ? mesh[names[0]] : mesh[names];
           }, "The sub-mesh of the named dims (in mesh order).")
      .def("flatten", [](const DeviceMesh& mesh, py::object dims, const std::string& name) {
             if (dims.is_none()) {
               std::vector<int> all(static_cast<size_t>(mesh.ndim()));
               for (int i = 0; i < mesh.ndim(); ++i) all[static_cast<size_t>(i)] = i;
               return mesh.flatten(all, name);
             }
             if (PyUnicode_Check(dims.ptr())) return mesh.flatten(std::vector<int>{mesh.dim_index(dims.cast<std::string>())}, name);
             const char* what = "DeviceMesh.flatten(dims)";
             if (PyLong_Check(dims.ptr()))
               return mesh.flatten(std::vector<int>{cast_arg<int>(dims, what, "a dim index (int)")}, name);
             if (!PySequence_Check(dims.ptr()))
               throw py::type_error(std::string(what) + ": expected a dim name or index or a list of "
                                    "them, got " + describe(dims));
             py::list items(dims);
             if (items.size() > 0 && PyUnicode_Check(items[0].ptr()))
               return mesh.flatten(cast_arg<std::vector<std::string>>(items, what, "dim names (str)"), name);
             return mesh.flatten(cast_arg<std::vector<int>>(items, what, "dim indices (int)"), name);
           }, py::arg("dims") = py::none(), py::arg("mesh_dim_name") = "",
           "A 1-d mesh covering the given dims (names or indices; all by default) as one.")
      .def("coordinate", &DeviceMesh::coordinate, py::arg("rank"),
           "The rank's coordinate in this mesh (None when not in it).")
      .def("get_coordinate",
           [](const DeviceMesh& mesh) {
             return mesh.coordinate(current_rank_of(mesh.world(), "DeviceMesh.get_coordinate()"));
           },
           "The current rank's coordinate (None when the mesh does not contain it): under MPI "
           "the process's, in a simulated world the rank of `with dtensor.current_rank(r):`.")
      .def("get_rank",
           [](const DeviceMesh& mesh) { return current_rank_of(mesh.world(), "DeviceMesh.get_rank()"); },
           "The current rank, global in the world (PyTorch's: the process's rank).")
      .def("get_local_rank", &local_rank, py::arg("mesh_dim") = py::none(),
           "The current rank's coordinate on mesh dim `mesh_dim` (index or name; may be "
           "omitted for a 1-d mesh), as PyTorch's: its rank in that dim's group.")
      .def_property_readonly("device_type", [](const DeviceMesh&) { return "cpu"; },
                             "\"cpu\": dtensor runs on the CPU.")
      .def("_flatten",
           [](const DeviceMesh& mesh, std::optional<std::string> name) {
             std::vector<int> all(static_cast<size_t>(mesh.ndim()));
             // PyTorch's default name joins the dims' names with "_" (none when unnamed).
             std::string joined;
             bool named = true;
             const std::vector<std::string> names = mesh.names();
             for (int i = 0; i < mesh.ndim(); ++i) {
               all[static_cast<size_t>(i)] = i;
               const std::string& n = names[static_cast<size_t>(i)];
               named = named && !n.empty();
               joined += (i ? "_" : "") + n;
             }
             return mesh.flatten(all, name.value_or(named ? joined : ""));
           },
           py::arg("mesh_dim_name") = py::none(),
           "PyTorch's: a 1-d mesh over all of this mesh's dims as one (row-major), named "
           "mesh_dim_name (default: the dims' names joined by \"_\"); mesh.flatten(dims) picks "
           "dims.")
      .def("group", &DeviceMesh::group, py::arg("rank"), py::arg("mesh_dim"))
      .def("groups", &DeviceMesh::groups, py::arg("mesh_dim"))
      .def("ranks", [](const DeviceMesh& mesh, std::optional<int> rank) {
             if (rank) return mesh.ranks(*rank);
             // Inside current_rank(r) a sub-mesh's view is r's, as get_coordinate().
             const std::optional<int> current = current_rank_override();
             return current && mesh.contains(*current) ? mesh.ranks(*current) : mesh.ranks();
           }, py::arg("rank") = py::none(),
           "The mesh's ranks row-major (the view containing `rank` for a sub-mesh: the current "
           "rank's by default, else the first held rank's).")
      .def("contains", &DeviceMesh::contains, py::arg("rank"))
      .def("root", &DeviceMesh::root)
      .def("__eq__", [](const DeviceMesh& a, const DeviceMesh& b) { return a == b; })
      .def("__hash__", &DeviceMesh::hash)
      .def("__repr__", &DeviceMesh::to_string);
}

}  // namespace dtensor::python
