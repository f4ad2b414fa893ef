// PyTorch's arguments that dtensor's ops spell differently, turned into
// what the ops take: var's unbiased= (and correction=), norm's p="fro",
// squeeze's tuple of dims (torch 2.0), clamp's tensor bounds, where(cond)
// with one argument, and sizes given as varargs (zeros(2, 3)).
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "casters.h"
#include "dtensor/dtensor.h"
#include "index_ops.h"

namespace dtensor::python {

// var(x, dim, unbiased) (torch 1.13's positional form) or correction=.
inline int64_t var_correction(std::optional<bool> unbiased, std::optional<int64_t> correction) {
  DT_CHECK(!(unbiased && correction), "var: give unbiased or correction, not both");
  if (correction) return *correction;
  return unbiased.value_or(true) ? 1 : 0;
}

// torch.norm's p: a number, or "fro" (the 2-norm of the elements over
// dim, every dim when None, as torch.norm computes it). "nuc" needs
// singular values, which dtensor does not compute.
inline double norm_order(py::handle p, const std::optional<DimVector>& dim) {
  if (!py::isinstance<py::str>(p)) return cast_arg<double>(p, "norm(p=)", "a number, or \"fro\"");
  const std::string s = p.cast<std::string>();
  DT_CHECK(s != "nuc",
           "norm: p=\"nuc\" (the nuclear norm) is not implemented: it needs "
           "singular values, which dtensor does not compute");
  DT_CHECK(s == "fro", "norm: unknown p=\"", s, "\" (expected a number, \"fro\" or \"nuc\")");
  DT_CHECK(!dim || dim->size() <= 2, "norm: p=\"fro\" takes at most 2 dims, got ", *dim);
  return 2.0;
}

// torch 2.0's squeeze(x, dims): each listed dim of size 1 removed, the
// others kept; a dim listed twice is an error.
template <class T>
T squeeze_dims(const T& x, const DimVector& dims) {
  const int64_t n = std::max<int64_t>(x.dim(), 1);
  std::vector<int64_t> ds;
  for (int64_t d : dims) {
    DT_CHECK(d >= -n && d < n, "squeeze: dim ", d, " is out of range for a ", x.dim(),
             "-d tensor (expected in [", -n, ", ", n - 1, "])");
    const int64_t k = d < 0 ? d + n : d;
    DT_CHECK(std::find(ds.begin(), ds.end(), k) == ds.end(), "squeeze: dim ", k,
             " appears multiple times in the list of dims ", dims);
    ds.push_back(k);
  }
  std::sort(ds.rbegin(), ds.rend());  // from the last, so earlier dims keep their index
  T out = x;
  for (int64_t k : ds)
    if (x.dim() > 0 && x.size(k) == 1) out = out.squeeze(k);
  return out;
}

// torch.clamp(x, min=tensor, max=tensor): bounds broadcast against x; a
// NaN in x or in a bound gives NaN. Two selects (not maximum/minimum) so
// that the gradient goes whole to what was picked, as torch's clamp
// backward: to x where min <= x <= max, to a bound where it was taken.
template <class T>
T clamp_tensors(const T& x, const std::optional<T>& lo, const std::optional<T>& hi) {
  DT_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  T out = x;
  if (lo) out = where(ne(*lo, *lo), *lo, where(lt(out, *lo), *lo, out));
  if (hi) out = where(ne(*hi, *hi), *hi, where(gt(out, *hi), *hi, out));
  return out;
}

// torch.where(cond): the positions of cond's nonzero elements, one int64
// tensor per dim (nonzero(as_tuple=True)). A DTensor's are replicated (the
// count depends on the data).
inline py::tuple where_positions(const Tensor& cond) {
  const std::vector<Tensor> pos = mask_positions(cond.dtype() == DType::Bool ? cond : ne(cond, 0));
  py::tuple out(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) out[i] = py::cast(pos[i]);
  return out;
}
inline py::tuple where_positions(const DTensor& cond) {
  const std::vector<Tensor> pos =
      mask_positions(cond.dtype() == DType::Bool ? cond.full_tensor() : ne(cond.full_tensor(), 0));
  py::tuple out(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) out[i] = py::cast(index_for(cond, pos[i]));
  return out;
}

// A size given as varargs (zeros(2, 3)), one sequence (zeros((2, 3))) or
// size= (zeros(size=(2, 3))).
inline Shape shape_of(py::args args, const std::optional<Shape>& size, const std::string& op) {
  if (size) {
    if (args.size() > 0) throw py::type_error(op + ": size given twice (positionally and size=)");
    return *size;
  }
  if (args.size() == 1 && !is_int_index(args[0]))
    return cast_arg<Shape>(args[0], op + "(size)", "a sequence of ints");
  return cast_arg<Shape>(args, op + "(*size)", "ints");
}

}  // namespace dtensor::python
