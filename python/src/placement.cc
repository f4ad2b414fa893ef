// Shard(dim), Replicate(), Partial(reduce_op) — PyTorch's placement classes,
// all three wrapping the one C++ Placement (subclasses of dtensor.Placement),
// with PyTorch's repr (Shard(dim=0), Replicate(), Partial(sum)) and str
// (S(0), R, P(sum)); and DTensorSpec, the metadata of a DTensor.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"

namespace dtensor::python {

namespace {

// The Python classes are distinct C++ types deriving from Placement, so
// that pybind11 can tell them apart and a function taking a Placement
// accepts all three.
struct ShardP : Placement {
  explicit ShardP(const Placement& p) : Placement(p) {}
};
struct ReplicateP : Placement {
  explicit ReplicateP(const Placement& p) : Placement(p) {}
};
struct PartialP : Placement {
  explicit PartialP(const Placement& p) : Placement(p) {}
};

ReduceOp parse_reduce_op(const std::string& op) {
  for (ReduceOp r : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    if (op == to_string(r)) return r;
  DT_THROW("Partial: unknown reduce_op \"", op, "\" (expected sum, avg, max or min)");
}

std::string placement_repr(const Placement& p) {
  if (p.is_replicate()) return "Replicate()";
  if (p.is_partial()) return std::string("Partial(") + to_string(p.reduce_op()) + ")";
  std::string s = "Shard(dim=" + std::to_string(p.dim());
  if (p.shard_order() >= 0) s += ", order=" + std::to_string(p.shard_order());
  return s + ")";
}

}  // namespace

py::object placement_to_python(const Placement& p) {
  if (p.is_shard()) return py::cast(ShardP(p));
  if (p.is_partial()) return py::cast(PartialP(p));
  return py::cast(ReplicateP(p));
}

void bind_placement(py::module_& m) {
  py::class_<Placement>(m, "Placement", "How a tensor is laid out along one mesh dim.")
      .def("is_shard", [](const Placement& p, std::optional<int64_t> dim) {
             return dim ? p.is_shard(*dim) : p.is_shard();
           }, py::arg("dim") = py::none())
      .def("is_replicate", &Placement::is_replicate)
      .def("is_partial", &Placement::is_partial)
      .def("__eq__", [](const Placement& a, const Placement& b) { return a == b; })
      .def("__eq__", [](const Placement&, py::handle) { return false; })
      .def("__hash__", &Placement::hash)
      .def("__repr__", &placement_repr)
      .def("__str__", [](const Placement& p) { return to_string(p); })
      .def(py::pickle([](const Placement& p) { return to_string(p); },
                      [](const std::string& s) { return parse_placement(s); }));
  py::class_<ShardP, Placement>(m, "Shard", "Tensor dim `dim` split over the mesh dim.")
      .def(py::init([](int64_t dim, std::optional<int64_t> order) {
             return ShardP(order ? Placement::shard(dim, *order) : Placement::shard(dim));
           }),
           py::arg("dim"), py::arg("order") = py::none(),
           "Shard(dim); Shard(dim, order=k): the k-th mesh dim to split `dim` (shard order).")
      .def_property_readonly("dim", &Placement::dim)
      .def_property_readonly("order", [](const Placement& p) -> std::optional<int> {
        if (p.shard_order() < 0) return std::nullopt;
        return p.shard_order();
      });
  py::class_<ReplicateP, Placement>(m, "Replicate", "Every rank of the mesh dim holds the whole.")
      .def(py::init([]() { return ReplicateP(Placement::replicate()); }));
  py::class_<PartialP, Placement>(m, "Partial",
                                  "Each rank holds a piece; the value is their reduction.")
      .def(py::init([](const std::string& op) { return PartialP(Placement::partial(parse_reduce_op(op))); }),
           py::arg("reduce_op") = "sum")
      .def_property_readonly("reduce_op", [](const Placement& p) { return to_string(p.reduce_op()); });
  m.def("parse_placements", &parse_placements, py::arg("text"),
        "Placements from their text form: \"S(0),R,P(avg)\".");

  py::class_<DTensorSpec>(m, "DTensorSpec", "A DTensor's metadata: mesh, placements, shape, dtype.")
      .def(py::init([](const DeviceMesh& mesh, const Placements& p, const Shape& shape, DType dtype) {
             return DTensorSpec(mesh, p, shape, dtype);
           }),
           py::arg("mesh"), py::arg("placements"), py::arg("shape"), py::arg("dtype") = DType::Float32)
      .def_property_readonly("mesh", &DTensorSpec::mesh)
      .def_property_readonly("placements", &DTensorSpec::placements)
      .def_property_readonly("shape", &DTensorSpec::shape)
      .def_property_readonly("dtype", &DTensorSpec::dtype)
      .def("with_placements", &DTensorSpec::with_placements, py::arg("placements"))
      .def("local_shape", [](const DTensorSpec& s, int rank) -> std::optional<Shape> {
             auto e = s.extent_of_rank(rank);
             if (!e) return std::nullopt;
             return e->local_shape;
           }, py::arg("rank"), "The shape of `rank`'s shard (None when the rank is not in the mesh).")
      .def("global_offset", [](const DTensorSpec& s, int rank) -> std::optional<Shape> {
             auto e = s.extent_of_rank(rank);
             if (!e) return std::nullopt;
             return e->global_offset;
           }, py::arg("rank"))
      .def("__eq__", [](const DTensorSpec& a, const DTensorSpec& b) { return a == b; })
      .def("__hash__", &DTensorSpec::hash)
      .def("__repr__", &DTensorSpec::to_string);
}

}  // namespace dtensor::python
