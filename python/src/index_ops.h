// x[key] and x[key] = value for Tensor and DTensor, with torch's indexing:
// ints, slices (positive steps), None, Ellipsis, and advanced indices
// (lists of ints or bools; int64 or bool Tensors, DTensors or arrays).
//
// Basic indexing goes first, through the view ops; ints select there, as
// torch does (x[0, :, [1, 2]] has torch's shape (s1, 2), not NumPy's
// (2, s1)). The advanced indices left then become one flat int64 index
// into their dims, moved to the front and flattened, taken by
// index_select: every step is an op with a DTensor rule and a gradient,
// so a read of a DTensor that requires grad is differentiable. A bool mask
// stands for the positions of its true elements, read from the whole mask:
// the result's shape depends on the data, so a DTensor's is replicated.
//
// A write reads the same key out of arange(numel) (the flat positions it
// names, in torch's shape), then makes one index_put into the flattened
// tensor and copies the result back in place: a DTensor keeps its
// placements and its shards' memory.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "casters.h"
#include "dtensor/dtensor.h"

namespace dtensor::python {

// The positions of a bool mask's true elements, one int64 tensor per mask
// dim, in row-major order (torch.nonzero(mask, as_tuple=True)). A local
// helper: a `nonzero` op is being added to the library separately.
inline std::vector<Tensor> mask_positions(const Tensor& mask) {
  const std::vector<bool> v = mask.contiguous().to_vector<bool>();
  const Shape& s = mask.shape();
  const size_t nd = s.size();
  std::vector<std::vector<int64_t>> cols(nd);
  DimVector at(nd, 0);  // the multi-index of element i
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i])
      for (size_t d = 0; d < nd; ++d) cols[d].push_back(at[d]);
    for (size_t d = nd; d-- > 0;) {
      if (++at[d] < s[d]) break;
      at[d] = 0;
    }
  }
  std::vector<Tensor> out;
  for (const auto& c : cols)
    out.push_back(Tensor::from_vector(c, Shape{static_cast<int64_t>(c.size())}));
  return out;
}

// An index tensor as the layer of x: a DTensor's is replicated on x's mesh.
inline Tensor index_for(const Tensor&, const Tensor& index) { return index; }
inline DTensor index_for(const DTensor& x, const Tensor& index) {
  return distribute_tensor(index, x.mesh(), Placements(x.placements().size(), Replicate()));
}

// The whole value of an index given as a Tensor, DTensor, list or array.
inline Tensor index_tensor(py::handle item) {
  if (py::isinstance<DTensor>(item)) return item.cast<const DTensor&>().full_tensor();
  if (!py::isinstance<Tensor>(item) && !PyList_Check(item.ptr()) && !PyTuple_Check(item.ptr()) &&
      !py::hasattr(item, "__array__") && !py::hasattr(item, "__dlpack__"))
    throw py::type_error(
        "dtensor indexing takes ints, slices, None, Ellipsis, lists and int64 "
        "or bool tensors (got " +
        describe(item) + ")");
  Tensor t = tensor_from_python(item, "index");
  // An empty list is float32 for torch.tensor, but an index for x[[]].
  if (t.numel() == 0 && t.dtype() != DType::Bool) t = t.to(DType::Int64);
  DT_CHECK(t.dtype() == DType::Int64 || t.dtype() == DType::Bool,
           "index: tensors used as indices must be int64 or bool, got ", t.dtype());
  return t;
}

// out[adv...]: the advanced indices (dims of `out`, index tensors), as
// described at the top of this file.
template <class T>
T take_advanced(const T& out, const std::vector<int64_t>& dims, std::vector<Tensor> idx) {
  const int64_t k = static_cast<int64_t>(dims.size());
  Tensor flat;
  int64_t rows = 1;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = out.size(dims[j]);
    Tensor& t = idx[static_cast<size_t>(j)];
    if (t.numel() > 0) {
      const int64_t lo = amin(t).item<int64_t>(), hi = amax(t).item<int64_t>();
      const int64_t bad = lo < -n ? lo : hi;
      DT_CHECK(lo >= -n && hi < n, "index ", bad, " is out of bounds for dimension ", dims[j],
               " with size ", n);
    }
    t = where(lt(t, 0), add(t, n), t);
    flat = j == 0 ? t : add(mul(flat, n), t);  // broadcasts the indices together
    rows *= n;
  }
  const Shape bshape = flat.shape();
  DimVector perm;
  for (int64_t d : dims) perm.push_back(d);
  Shape rest_shape{rows};
  for (int64_t d = 0; d < out.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      perm.push_back(d);
      rest_shape.push_back(out.size(d));
    }
  T z = index_select(out.permute(perm).reshape(rest_shape), 0,
                     index_for(out, flat.reshape(Shape{-1}).contiguous()));
  Shape zs = bshape;
  for (size_t i = 1; i < rest_shape.size(); ++i) zs.push_back(rest_shape[i]);
  z = z.reshape(zs);
  // Adjacent advanced dims leave the result's dims where they were (the
  // ones before them first); scattered ones put them first (NumPy's rule).
  bool adjacent = true;
  for (int64_t j = 1; j < k; ++j) adjacent = adjacent && dims[j] == dims[j - 1] + 1;
  if (!adjacent || dims[0] == 0) return z;
  const int64_t nb = static_cast<int64_t>(bshape.size());
  DimVector order;
  for (int64_t i = 0; i < dims[0]; ++i) order.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) order.push_back(i);
  for (int64_t i = nb + dims[0]; i < z.dim(); ++i) order.push_back(i);
  return z.permute(order);
}

inline Tensor slice_of(const Tensor& x, int64_t d, int64_t s, int64_t e, int64_t st) {
  return x.slice(d, s, e, st);
}
inline DTensor slice_of(const DTensor& x, int64_t d, int64_t s, int64_t e, int64_t st) {
  return slice(x, d, s, e, st);
}
inline DTensor replicated_result(const DTensor& x) {
  return x.redistribute(Placements(x.placements().size(), Replicate()));
}
inline Tensor replicated_result(const Tensor& x) { return x; }

// An int (or NumPy integer scalar); arrays have __index__ too, but index
// as tensors.
inline bool is_int_index(py::handle item) {
  return PyIndex_Check(item.ptr()) && !PyBool_Check(item.ptr()) &&
         std::string(Py_TYPE(item.ptr())->tp_name) != "numpy.ndarray";
}

// x[key] as torch reads it (see the top of this file).
template <class T>
T index_of(const T& x, py::handle key) {
  py::tuple items =
      PyTuple_Check(key.ptr()) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  // Advanced items as tensors, and the dims all items take (for Ellipsis).
  std::vector<std::optional<Tensor>> tensors;
  int64_t taken = 0, ellipses = 0;
  for (py::handle item : items) {
    std::optional<Tensor> t;
    if (item.is(py::ellipsis())) {
      ++ellipses;
    } else if (PyBool_Check(item.ptr())) {
      throw Error("index: a bool (" + describe(item) +
                  ") as an index is not supported; use a bool tensor");
    } else if (PySlice_Check(item.ptr()) || is_int_index(item)) {
      ++taken;
    } else if (!item.is_none()) {
      t = index_tensor(item);
      DT_CHECK(t->dtype() != DType::Bool || t->dim() > 0,
               "index: a 0-d bool tensor as an index is not supported");
      taken += t->dtype() == DType::Bool ? t->dim() : 1;
    }
    tensors.push_back(std::move(t));
  }
  DT_CHECK(ellipses <= 1, "index: an index can only have a single ellipsis ('...')");
  DT_CHECK(taken <= x.dim(), "index: too many indices for a ", x.dim(), "-d tensor: ", taken);
  T out = x;
  int64_t dim = 0;
  bool masked = false;
  std::vector<int64_t> adv_dims;
  std::vector<Tensor> adv;
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle item = items[i];
    if (tensors[i]) {
      const Tensor& t = *tensors[i];
      if (t.dtype() == DType::Int64) {
        adv_dims.push_back(dim++);
        adv.push_back(t);
        continue;
      }
      for (int64_t j = 0; j < t.dim(); ++j)
        DT_CHECK(t.size(j) == out.size(dim + j), "index: the shape of the mask ", t.shape(),
                 " at index ", j, " does not match the shape of the indexed tensor ", out.shape(),
                 " at index ", dim + j);
      for (Tensor& p : mask_positions(t)) {
        adv_dims.push_back(dim++);
        adv.push_back(std::move(p));
      }
      masked = true;
    } else if (item.is_none()) {
      out = out.unsqueeze(dim++);
    } else if (item.is(py::ellipsis())) {
      dim += x.dim() - taken;
    } else if (PySlice_Check(item.ptr())) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(item.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      DT_CHECK(step > 0, "index: slice step must be positive, got ", step);
      PySlice_AdjustIndices(static_cast<Py_ssize_t>(out.size(dim)), &start, &stop, step);
      out = slice_of(out, dim, start, std::max(start, stop), step);
      ++dim;
    } else {
      const int64_t i = cast_arg<int64_t>(item, "index", "an int that fits int64");
      const int64_t n = out.size(dim);
      DT_CHECK(i >= -n && i < n, "index ", i, " is out of bounds for dimension ", dim,
               " with size ", n);
      out = out.select(dim, i < 0 ? i + n : i);
    }
  }
  if (adv.empty()) return out;
  T r = take_advanced(out, adv_dims, std::move(adv));
  return masked ? replicated_result(r) : r;
}

// The value of x[key] = value in x's dtype: a number (0-d), a Tensor, or
// a list or array; a DTensor's is replicated on x's mesh unless a DTensor.
inline Tensor value_tensor(DType dtype, py::handle value, const char* what) {
  pybind11::detail::make_caster<Scalar> s;
  if (s.load(value, true))
    return Tensor::full({}, pybind11::detail::cast_op<Scalar>(std::move(s)), dtype);
  // A Python number the Scalar refused (an int beyond int64): named as such.
  if (PyLong_Check(value.ptr()) || PyFloat_Check(value.ptr()))
    cast_arg<Scalar>(value, what, "a number that fits int64 or float64");
  if (py::isinstance<DTensor>(value))
    throw py::type_error("index assignment: a DTensor value into a Tensor; use full_tensor()");
  return tensor_from_python(value, "index assignment").to(dtype);
}
inline Tensor value_like(const Tensor& x, py::handle value) {
  return value_tensor(x.dtype(), value, "Tensor[key] = value");
}
inline DTensor value_like(const DTensor& x, py::handle value) {
  if (py::isinstance<DTensor>(value)) return value.cast<DTensor>().to(x.dtype());
  return index_for(x, value_tensor(x.dtype(), value, "DTensor[key] = value"));
}

// Whether a key has advanced items (anything but ints, slices, None, ...).
inline bool has_advanced(py::handle key) {
  py::tuple items =
      PyTuple_Check(key.ptr()) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  for (py::handle item : items)
    if (!item.is_none() && !item.is(py::ellipsis()) && !PySlice_Check(item.ptr()) &&
        !is_int_index(item))
      return true;
  return false;
}

// `v` broadcast to `shape` (torch's rule for x[key] = v).
template <class T>
T broadcast_value(T v, const Shape& shape) {
  // Leading size-1 dims beyond the target's are dropped, as torch does.
  while (v.dim() > static_cast<int64_t>(shape.size()) && v.size(0) == 1) v = v.squeeze(0);
  bool fits = v.dim() <= static_cast<int64_t>(shape.size());
  for (int64_t i = 1; fits && i <= v.dim(); ++i) {
    const int64_t a = v.size(-i), b = shape[shape.size() - static_cast<size_t>(i)];
    fits = a == b || a == 1;
  }
  DT_CHECK(fits, "shape mismatch: value tensor of shape ", v.shape(),
           " cannot be broadcast to indexing result of shape ", shape);
  return v.expand(shape);
}

// x[key] = value, in place (see the top of this file). A Tensor's basic
// key is a view, written directly.
template <class T>
void assign_index(T& x, py::handle key, py::handle value) {
  if constexpr (std::is_same_v<T, Tensor>) {
    if (!has_advanced(key)) {
      Tensor view = index_of(x, key);
      view.copy_(broadcast_value(value_like(x, value), view.shape()));
      return;
    }
  }
  const Tensor where_to = index_of(Tensor::arange(x.numel()).view(x.shape()), key);
  const T values = broadcast_value(value_like(x, value), where_to.shape()).reshape(Shape{-1});
  const T flat = x.reshape(Shape{-1});
  const T updated =
      index_put(flat, {index_for(x, where_to.reshape(Shape{-1}).contiguous())}, values);
  x.copy_(updated.reshape(x.shape()));
}

}  // namespace dtensor::python
