// The structural ops in Python, for Tensor and DTensor alike (as
// scan_ops.h): flip, roll, cumprod, argsort, outer, dot, diagonal, nonzero,
// std, max and min as module functions and methods, with PyTorch's
// argument names; max / min along a dim return the named tuple (values,
// indices); view_as, expand_as, type_as as methods. Kernels run without
// the GIL.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <type_traits>

#include "casters.h"
#include "dtensor/dtensor.h"
#include "scan_ops.h"

namespace dtensor::python {

// torch.std's dim: None (every dim), an int, a sequence of ints; a bool in
// its place is the std(input, unbiased) overload.
struct StdArgs {
  DimVector dims;
  int64_t correction = 1;
};

inline StdArgs std_args(py::handle dim, std::optional<bool> unbiased,
                        std::optional<int64_t> correction) {
  StdArgs a;
  if (py::isinstance<py::bool_>(dim)) {
    DT_CHECK(!unbiased, "std: unbiased given twice (positionally in place of dim, and by name)");
    unbiased = dim.cast<bool>();
  } else if (!dim.is_none()) {
    a.dims = cast_arg<DimVector>(dim, "std(dim)", "None, an int or a sequence of ints");
  }
  DT_CHECK(!(unbiased && correction),
           "std: cannot pass both correction and unbiased arguments (PyTorch's rule)");
  a.correction = correction ? *correction : (unbiased.value_or(true) ? 1 : 0);
  return a;
}

// nonzero(as_tuple=True): one 1-d index tensor per dim (a 0-d input counts
// as 1-d, as PyTorch's).
template <class T>
py::object nonzero_of(const T& x, bool as_tuple) {
  T n;
  std::vector<T> parts;
  {
    py::gil_scoped_release nogil;
    if (as_tuple)
      parts = unbind(nonzero(x.dim() == 0 ? x.reshape(Shape{1}) : x), 1);
    else
      n = nonzero(x);
  }
  if (!as_tuple) return py::cast(std::move(n));
  py::tuple t(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) t[i] = py::cast(std::move(parts[i]));
  return std::move(t);
}

template <class T, class Target>
void bind_structural_ops(Target& target) {
  constexpr bool kModule = std::is_same_v<Target, py::module_>;
  auto def = [&](const char* name, auto&& f, auto&&... args) {
    if constexpr (kModule)
      target.def(name, f, py::arg("input"), args...);
    else
      target.def(name, f, args...);
  };
  using G = py::call_guard<py::gil_scoped_release>;
  def(
      "flip", [](const T& x, const DimVector& dims) { return flip(x, dims); }, py::arg("dims"),
      G());
  if constexpr (!kModule)
    target.def("flip", [](const T& x, py::args dims) {
      return flip(x, cast_arg<DimVector>(dims, "flip(*dims)", "dim indices (ints)"));
    });
  def(
      "roll",
      [](const T& x, const DimVector& shifts, std::optional<DimVector> dims) {
        return roll(x, shifts, dims.value_or(DimVector{}));
      },
      py::arg("shifts"), py::arg("dims") = py::none(), G());
  def(
      "cumprod", [](const T& x, int64_t dim) { return cumprod(x, dim); }, py::arg("dim"), G());
  def(
      "argsort",
      [](const T& x, int64_t dim, bool descending, bool stable) {
        return argsort(x, dim, descending, stable);
      },
      py::arg("dim") = -1, py::arg("descending") = false, py::arg("stable") = false, G());
  def(
      "outer", [](const T& a, const T& b) { return outer(a, b); }, py::arg("vec2"), G());
  def(
      "dot", [](const T& a, const T& b) { return dot(a, b); }, py::arg("other"), G());
  def(
      "diagonal",
      [](const T& x, int64_t offset, int64_t dim1, int64_t dim2) {
        return diagonal(x, offset, dim1, dim2);
      },
      py::arg("offset") = 0, py::arg("dim1") = 0, py::arg("dim2") = 1, G());
  def(
      "nonzero", [](const T& x, bool as_tuple) { return nonzero_of(x, as_tuple); }, py::kw_only(),
      py::arg("as_tuple") = false);
  def(
      "std",
      [](const T& x, py::object dim, std::optional<bool> unbiased, bool keepdim,
         std::optional<int64_t> correction) {
        const StdArgs a = std_args(dim, unbiased, correction);
        py::gil_scoped_release nogil;
        return std(x, a.dims, a.correction, keepdim);
      },
      py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false,
      py::kw_only(), py::arg("correction") = py::none());
  // max / min: of everything, along a dim (named tuple), of two tensors.
  // The int overload goes before the tensor one, so that a dim is a dim.
  def(
      "max", [](const T& x) { return max(x); }, G());
  def(
      "max",
      [](const T& x, int64_t dim, bool keepdim) {
        return values_indices([&] {
          py::gil_scoped_release nogil;
          return max(x, dim, keepdim);
        }());
      },
      py::arg("dim"), py::arg("keepdim") = false);
  def(
      "max", [](const T& a, const T& b) { return max(a, b); }, py::arg("other"), G());
  def(
      "min", [](const T& x) { return min(x); }, G());
  def(
      "min",
      [](const T& x, int64_t dim, bool keepdim) {
        return values_indices([&] {
          py::gil_scoped_release nogil;
          return min(x, dim, keepdim);
        }());
      },
      py::arg("dim"), py::arg("keepdim") = false);
  def(
      "min", [](const T& a, const T& b) { return min(a, b); }, py::arg("other"), G());
  if constexpr (!kModule) {
    target.def(
        "view_as", [](const T& x, const T& o) { return x.view_as(o); }, py::arg("other"));
    target.def(
        "expand_as", [](const T& x, const T& o) { return x.expand_as(o); }, py::arg("other"));
    target.def(
        "type_as", [](const T& x, const T& o) { return x.type_as(o); }, py::arg("other"), G());
  }
}

}  // namespace dtensor::python
