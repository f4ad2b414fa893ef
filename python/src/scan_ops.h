// The scan family in Python, for Tensor and DTensor alike (as math_ops.h):
// cumsum, sort, topk, logsumexp, all, any as module functions
// (dtensor.sort(x, dim=-1, descending=False, stable=False)) and as methods
// (x.sort(), x.topk(2)), with PyTorch's keyword names. sort and topk return
// PyTorch's named tuple (values, indices). Kernels run without the GIL.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <type_traits>

#include "casters.h"
#include "dtensor/dtensor.h"

namespace dtensor::python {

// torch.return_types-like (values, indices): a collections.namedtuple, made
// once and kept for the life of the process (never released at exit, when
// Python may already be gone).
template <class T>
py::object values_indices(ValuesIndices<T> r) {
  static const py::handle type =
      py::module_::import("collections")
          .attr("namedtuple")("ValuesIndices", py::make_tuple("values", "indices"))
          .release();
  return type(std::move(r.values), std::move(r.indices));
}

template <class T>
ValuesIndices<T> sort_nogil(const T& x, int64_t dim, bool descending, bool stable) {
  py::gil_scoped_release nogil;
  return sort(x, dim, descending, stable);
}

template <class T>
ValuesIndices<T> topk_nogil(const T& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  py::gil_scoped_release nogil;
  return topk(x, k, dim, largest, sorted);
}

// Binds the family on `target`: the module (the tensor is "input") or a
// class (the tensor is self).
template <class T, class Target>
void bind_scan_ops(Target& target) {
  auto def = [&](const char* name, auto&& f, auto&&... args) {
    if constexpr (std::is_same_v<Target, py::module_>) target.def(name, f, py::arg("input"), args...);
    else target.def(name, f, args...);
  };
  // dtype=: the input is cast first, as torch does.
  def("cumsum", [](const T& x, int64_t dim, std::optional<DType> dtype) {
        py::gil_scoped_release nogil;
        return cumsum(dtype ? x.to(*dtype) : x, dim);
      }, py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  def("sort", [](const T& x, int64_t dim, bool descending, bool stable) {
        return values_indices(sort_nogil(x, dim, descending, stable));
      }, py::arg("dim") = -1, py::arg("descending") = false, py::kw_only(),
      py::arg("stable") = false);
  def("topk", [](const T& x, int64_t k, int64_t dim, bool largest, bool sorted) {
        return values_indices(topk_nogil(x, k, dim, largest, sorted));
      }, py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, py::arg("sorted") = true);
  def("logsumexp", [](const T& x, const DimVector& dim, bool keepdim) {
        py::gil_scoped_release nogil;
        return logsumexp(x, dim, keepdim);
      }, py::arg("dim"), py::arg("keepdim") = false);
  def("all", [](const T& x, std::optional<DimVector> dim, bool keepdim) {
        py::gil_scoped_release nogil;
        return all(x, dim.value_or(DimVector{}), keepdim);
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def("any", [](const T& x, std::optional<DimVector> dim, bool keepdim) {
        py::gil_scoped_release nogil;
        return any(x, dim.value_or(DimVector{}), keepdim);
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false);
}

}  // namespace dtensor::python
