// The arithmetic both Tensor and DTensor offer in Python: operators
// (+ - * / @ ** unary -, comparisons, in-place += -= *= /=) and the method
// forms of the ops (x.sum(dim), x.exp(), x.view(shape), ...). Written once as
// templates over T (Tensor or DTensor): the free functions of tensor.h and
// ops.h have the same names and signatures for both, so one table binds both
// classes. Every call releases the GIL (kernels and collectives run in it).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "casters.h"
#include "index_ops.h"
#include "scan_ops.h"
#include "structural_ops.h"
#include "torch_args.h"
#include "dtensor/dtensor.h"

namespace dtensor::python {

using release_gil = py::call_guard<py::gil_scoped_release>;

// The unary ops of both layers, named as in PyTorch.
#define DTENSOR_PY_UNARY_OPS(X) \
  X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(tanh) X(sigmoid) X(erf) X(relu) X(silu) \
  X(sin) X(cos) X(log1p) X(expm1) X(square) X(sign) X(floor) X(isnan) X(logical_not)
// Binary ops taking (T, T) and (T, Scalar).
#define DTENSOR_PY_BINARY_OPS(X) \
  X(add) X(sub) X(mul) X(div) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
// Binary ops taking (T, T) only.
#define DTENSOR_PY_TENSOR_BINARY_OPS(X) \
  X(maximum) X(minimum) X(mm) X(bmm) X(matmul) X(logical_and) X(logical_or) X(logical_xor)
// Reductions (x, dim=None, keepdim=False, *, dtype=None: x cast first, as torch).
#define DTENSOR_PY_REDUCTIONS(X) X(sum) X(mean) X(prod)
// Reductions (x, dim=None, keepdim=False), without dtype= (as torch).
#define DTENSOR_PY_EXTREMA(X) X(amax) X(amin)

// Operators and method forms for class T. Python's binary-operator protocol
// does the rest: Tensor + DTensor falls back to DTensor.__radd__.
template <class T, class Class>
void bind_math_methods(Class& c) {
  using S = Scalar;
  c.def("__add__", [](const T& a, const T& b) { return a + b; }, py::is_operator(), release_gil())
      .def("__add__", [](const T& a, S b) { return a + b; }, py::is_operator(), release_gil())
      .def("__radd__", [](const T& a, S b) { return b + a; }, py::is_operator(), release_gil())
      .def("__sub__", [](const T& a, const T& b) { return a - b; }, py::is_operator(), release_gil())
      .def("__sub__", [](const T& a, S b) { return a - b; }, py::is_operator(), release_gil())
      .def("__rsub__", [](const T& a, S b) { return b - a; }, py::is_operator(), release_gil())
      .def("__mul__", [](const T& a, const T& b) { return a * b; }, py::is_operator(), release_gil())
      .def("__mul__", [](const T& a, S b) { return a * b; }, py::is_operator(), release_gil())
      .def("__rmul__", [](const T& a, S b) { return b * a; }, py::is_operator(), release_gil())
      .def("__truediv__", [](const T& a, const T& b) { return a / b; }, py::is_operator(),
           release_gil())
      .def("__truediv__", [](const T& a, S b) { return a / b; }, py::is_operator(), release_gil())
      .def("__rtruediv__", [](const T& a, S b) { return b / a; }, py::is_operator(), release_gil())
      .def("__matmul__", [](const T& a, const T& b) { return matmul(a, b); }, py::is_operator(),
           release_gil())
      .def("__pow__", [](const T& a, S e) { return pow(a, e); }, py::is_operator(), release_gil())
      .def("__neg__", [](const T& a) { return -a; }, release_gil())
      .def("__pos__", [](const T& a) { return a; })
      .def("__abs__", [](const T& a) { return abs(a); }, release_gil())
      // Elementwise comparisons give bool tensors, as in PyTorch.
      .def("__eq__", [](const T& a, const T& b) { return eq(a, b); }, py::is_operator(), release_gil())
      .def("__eq__", [](const T& a, S b) { return eq(a, b); }, py::is_operator(), release_gil())
      .def("__ne__", [](const T& a, const T& b) { return ne(a, b); }, py::is_operator(), release_gil())
      .def("__ne__", [](const T& a, S b) { return ne(a, b); }, py::is_operator(), release_gil())
      .def("__lt__", [](const T& a, const T& b) { return lt(a, b); }, py::is_operator(), release_gil())
      .def("__lt__", [](const T& a, S b) { return lt(a, b); }, py::is_operator(), release_gil())
      .def("__le__", [](const T& a, const T& b) { return le(a, b); }, py::is_operator(), release_gil())
      .def("__le__", [](const T& a, S b) { return le(a, b); }, py::is_operator(), release_gil())
      .def("__gt__", [](const T& a, const T& b) { return gt(a, b); }, py::is_operator(), release_gil())
      .def("__gt__", [](const T& a, S b) { return gt(a, b); }, py::is_operator(), release_gil())
      .def("__ge__", [](const T& a, const T& b) { return ge(a, b); }, py::is_operator(), release_gil())
      .def("__ge__", [](const T& a, S b) { return ge(a, b); }, py::is_operator(), release_gil())
      // Tensors are compared elementwise, so they hash by identity (as torch.Tensor).
      .def("__hash__", [](py::handle self) { return py::hash(py::int_(reinterpret_cast<uintptr_t>(self.ptr()))); })
      // In place: the result is written into this tensor's memory.
      .def("__iadd__", [](T& a, const T& b) -> T& { return a += b; }, py::is_operator(), release_gil())
      .def("__iadd__", [](T& a, S b) -> T& { return a += b; }, py::is_operator(), release_gil())
      .def("__isub__", [](T& a, const T& b) -> T& { return a -= b; }, py::is_operator(), release_gil())
      .def("__isub__", [](T& a, S b) -> T& { return a -= b; }, py::is_operator(), release_gil())
      .def("__imul__", [](T& a, const T& b) -> T& { return a *= b; }, py::is_operator(), release_gil())
      .def("__imul__", [](T& a, S b) -> T& { return a *= b; }, py::is_operator(), release_gil())
      .def("__itruediv__", [](T& a, const T& b) -> T& { return a /= b; }, py::is_operator(),
           release_gil())
      .def("__itruediv__", [](T& a, S b) -> T& { return a /= b; }, py::is_operator(), release_gil());

#define X(op) c.def(#op, [](const T& x) { return op(x); }, release_gil());
  DTENSOR_PY_UNARY_OPS(X)
#undef X
#define X(op)                                                                 \
  c.def(#op, [](const T& a, const T& b) { return op(a, b); }, release_gil()); \
  c.def(#op, [](const T& a, S b) { return op(a, b); }, release_gil());
  DTENSOR_PY_BINARY_OPS(X)
#undef X
#define X(op) c.def(#op, [](const T& a, const T& b) { return op(a, b); }, release_gil());
  DTENSOR_PY_TENSOR_BINARY_OPS(X)
#undef X
#define X(op)                                                                               \
  c.def(#op,                                                                                \
        [](const T& x, std::optional<DimVector> dim, bool keepdim, std::optional<DType> d) { \
          return op(d ? x.to(*d) : x, dim.value_or(DimVector{}), keepdim);                 \
        },                                                                                  \
        py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),            \
        py::arg("dtype") = py::none(), release_gil());
  DTENSOR_PY_REDUCTIONS(X)
#undef X
#define X(op)                                                                               \
  c.def(#op,                                                                                \
        [](const T& x, std::optional<DimVector> dim, bool keepdim) {                       \
          return op(x, dim.value_or(DimVector{}), keepdim);                                 \
        },                                                                                  \
        py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil());
  DTENSOR_PY_EXTREMA(X)
#undef X
  c.def("var",
        [](const T& x, std::optional<DimVector> dim, std::optional<bool> unbiased, bool keepdim,
           std::optional<int64_t> correction) {
          return var(x, dim.value_or(DimVector{}), var_correction(unbiased, correction), keepdim);
        },
        py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false,
        py::kw_only(), py::arg("correction") = py::none(), release_gil())
      .def("argmax", [](const T& x, std::optional<int64_t> dim, bool keepdim) { return argmax(x, dim, keepdim); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil())
      .def("argmin", [](const T& x, std::optional<int64_t> dim, bool keepdim) { return argmin(x, dim, keepdim); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil())
      .def("pow", [](const T& x, S e) { return pow(x, e); }, py::arg("exponent"), release_gil())
      .def("norm", [](const T& x, py::object p, std::optional<DimVector> dim, bool keepdim) {
             const double ord = norm_order(p, dim);
             py::gil_scoped_release nogil;
             return norm(x, ord, dim.value_or(DimVector{}), keepdim);
           }, py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("gelu", [](const T& x, const std::string& approximate) {
             return gelu(x, parse_gelu(approximate));
           }, py::arg("approximate") = "none", release_gil())
      .def("softmax", [](const T& x, int64_t dim, std::optional<DType> d) {
             return softmax(d ? x.to(*d) : x, dim);
           }, py::arg("dim"), py::arg("dtype") = py::none(), release_gil())
      .def("log_softmax", [](const T& x, int64_t dim, std::optional<DType> d) {
             return log_softmax(d ? x.to(*d) : x, dim);
           }, py::arg("dim"), py::arg("dtype") = py::none(), release_gil())
      // Views (never copy a Tensor; a DTensor's shards are views when their strides allow).
      .def("view", [](const T& x, const Shape& s) { return x.view(s); }, py::arg("shape"))
      .def("view", [](const T& x, py::args s) {
             return x.view(cast_arg<Shape>(s, "view(*shape)", "ints"));
           })
      .def("reshape", [](const T& x, const Shape& s) { return x.reshape(s); }, py::arg("shape"),
           release_gil())
      .def("reshape", [](const T& x, py::args s) {
             return x.reshape(cast_arg<Shape>(s, "reshape(*shape)", "ints"));
           })
      .def("flatten", [](const T& x, int64_t s, int64_t e) { return x.flatten(s, e); },
           py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("squeeze", [](const T& x, std::optional<int64_t> d) { return d ? x.squeeze(*d) : x.squeeze(); },
           py::arg("dim") = py::none())
      .def("squeeze", [](const T& x, const DimVector& d) { return squeeze_dims(x, d); },
           py::arg("dim"))
      .def("unsqueeze", [](const T& x, int64_t d) { return x.unsqueeze(d); }, py::arg("dim"))
      .def("permute", [](const T& x, const DimVector& d) { return x.permute(d); }, py::arg("dims"))
      .def("permute", [](const T& x, py::args d) {
             return x.permute(cast_arg<DimVector>(d, "permute(*dims)", "dim indices (ints)"));
           })
      .def("transpose", [](const T& x, int64_t a, int64_t b) { return x.transpose(a, b); },
           py::arg("dim0"), py::arg("dim1"))
      .def("t", [](const T& x) { return x.t(); })
      .def_property_readonly("T", [](const T& x) {
        DimVector d;
        for (int64_t i = x.dim(); i-- > 0;) d.push_back(i);
        return x.permute(d);
      })
      .def("expand", [](const T& x, const Shape& s) { return x.expand(s); }, py::arg("shape"))
      .def("expand", [](const T& x, py::args s) {
             return x.expand(cast_arg<Shape>(s, "expand(*shape)", "ints"));
           })
      .def("narrow", [](const T& x, int64_t d, int64_t s, int64_t l) { return x.narrow(d, s, l); },
           py::arg("dim"), py::arg("start"), py::arg("length"), release_gil())
      .def("select", [](const T& x, int64_t d, int64_t i) { return x.select(d, i); },
           py::arg("dim"), py::arg("index"), release_gil())
      .def("chunk", [](const T& x, int64_t n, int64_t d) { return x.chunk(n, d); },
           py::arg("chunks"), py::arg("dim") = 0, release_gil())
      .def("split", [](const T& x, int64_t n, int64_t d) { return x.split(n, d); },
           py::arg("split_size"), py::arg("dim") = 0, release_gil())
      // Shape ops and factories (the shape family: repeat, tile, unbind, split
      // with sizes, new_*).
      .def("split", [](const T& x, const std::vector<int64_t>& sizes, int64_t d) {
             return split(x, sizes, d);
           }, py::arg("split_size"), py::arg("dim") = 0, release_gil())
      .def("repeat", [](const T& x, const DimVector& r) { return repeat(x, r); },
           py::arg("repeats"), release_gil())
      .def("repeat", [](const T& x, py::args r) {
             return repeat(x, cast_arg<DimVector>(r, "repeat(*repeats)", "repeat counts (ints)"));
           })
      .def("tile", [](const T& x, const DimVector& r) { return tile(x, r); }, py::arg("dims"),
           release_gil())
      .def("unbind", [](const T& x, int64_t d) { return unbind(x, d); }, py::arg("dim") = 0,
           release_gil())
      .def("new_zeros", [](const T& x, const Shape& s, std::optional<DType> d) {
             return new_zeros(x, s, d);
           }, py::arg("size"), py::kw_only(), py::arg("dtype") = py::none(), release_gil())
      .def("new_zeros", [](const T& x, py::args s, std::optional<DType> d) {
             return new_zeros(x, cast_arg<Shape>(s, "new_zeros(*size)", "ints"), d);
           }, py::kw_only(), py::arg("dtype") = py::none())
      .def("new_ones", [](const T& x, const Shape& s, std::optional<DType> d) {
             return new_ones(x, s, d);
           }, py::arg("size"), py::kw_only(), py::arg("dtype") = py::none(), release_gil())
      .def("new_ones", [](const T& x, py::args s, std::optional<DType> d) {
             return new_ones(x, cast_arg<Shape>(s, "new_ones(*size)", "ints"), d);
           }, py::kw_only(), py::arg("dtype") = py::none())
      .def("new_empty", [](const T& x, const Shape& s, std::optional<DType> d) {
             return new_empty(x, s, d);
           }, py::arg("size"), py::kw_only(), py::arg("dtype") = py::none(), release_gil())
      .def("new_empty", [](const T& x, py::args s, std::optional<DType> d) {
             return new_empty(x, cast_arg<Shape>(s, "new_empty(*size)", "ints"), d);
           }, py::kw_only(), py::arg("dtype") = py::none())
      .def("new_full", [](const T& x, const Shape& s, S v, std::optional<DType> d) {
             return new_full(x, s, v, d);
           }, py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
           release_gil())
      .def("contiguous", [](const T& x) { return x.contiguous(); }, release_gil())
      .def("clone", [](const T& x) { return x.clone(); }, release_gil())
      .def("to", [](const T& x, DType d) { return x.to(d); }, py::arg("dtype"), release_gil())
      .def("float", [](const T& x) { return x.to(DType::Float32); }, release_gil())
      .def("double", [](const T& x) { return x.to(DType::Float64); }, release_gil())
      .def("bfloat16", [](const T& x) { return x.to(DType::BFloat16); }, release_gil())
      .def("half", [](const T& x) { return x.to(DType::Float16); }, release_gil())
      .def("long", [](const T& x) { return x.to(DType::Int64); }, release_gil())
      .def("bool", [](const T& x) { return x.to(DType::Bool); }, release_gil())
      // In place (PyTorch's trailing underscore).
      .def("add_", [](T& a, const T& b) -> T& { return a.add_(b); }, release_gil())
      .def("add_", [](T& a, S b) -> T& { return a.add_(b); }, release_gil())
      .def("sub_", [](T& a, const T& b) -> T& { return a.sub_(b); }, release_gil())
      .def("sub_", [](T& a, S b) -> T& { return a.sub_(b); }, release_gil())
      .def("mul_", [](T& a, const T& b) -> T& { return a.mul_(b); }, release_gil())
      .def("mul_", [](T& a, S b) -> T& { return a.mul_(b); }, release_gil())
      .def("div_", [](T& a, const T& b) -> T& { return a.div_(b); }, release_gil())
      .def("div_", [](T& a, S b) -> T& { return a.div_(b); }, release_gil())
      .def("fill_", [](T& a, S v) -> T& { return a.fill_(v); }, release_gil())
      .def("zero_", [](T& a) -> T& { return a.zero_(); }, release_gil())
      .def("copy_", [](T& a, const T& b) -> T& { return a.copy_(b); }, release_gil())
      // Clamping, triangles, gather/scatter, indexed updates (as new tensors).
      .def("clamp", [](const T& x, std::optional<S> lo, std::optional<S> hi) { return clamp(x, lo, hi); },
           py::arg("min") = py::none(), py::arg("max") = py::none(), release_gil())
      .def("clamp", [](const T& x, std::optional<T> lo, std::optional<T> hi) {
             return clamp_tensors(x, lo, hi);
           }, py::arg("min") = py::none(), py::arg("max") = py::none(), release_gil())
      .def("clamp_min", [](const T& x, S lo) { return clamp_min(x, lo); }, py::arg("min"), release_gil())
      // More pointwise math (PyTorch's keywords), and its in-place forms.
      .def("round", [](const T& x, int64_t d) { return round(x, d); }, py::kw_only(),
           py::arg("decimals") = 0, release_gil())
      .def("softplus", [](const T& x, S b, S t) { return softplus(x, b, t); }, py::arg("beta") = 1,
           py::arg("threshold") = 20, release_gil())
      .def("addcmul", [](const T& x, const T& a, const T& b, S v) { return addcmul(x, a, b, v); },
           py::arg("tensor1"), py::arg("tensor2"), py::kw_only(), py::arg("value") = 1, release_gil())
      .def("addcdiv", [](const T& x, const T& a, const T& b, S v) { return addcdiv(x, a, b, v); },
           py::arg("tensor1"), py::arg("tensor2"), py::kw_only(), py::arg("value") = 1, release_gil())
      .def("lerp", [](const T& x, const T& e, S w) { return lerp(x, e, w); }, py::arg("end"),
           py::arg("weight"), release_gil())
      .def("lerp", [](const T& x, const T& e, const T& w) { return lerp(x, e, w); }, py::arg("end"),
           py::arg("weight"), release_gil())
      .def("masked_fill", [](const T& x, const T& m, S v) { return masked_fill(x, m, v); },
           py::arg("mask"), py::arg("value"), release_gil())
      .def("addcmul_", [](T& x, const T& a, const T& b, S v) -> T& { return x.addcmul_(a, b, v); },
           py::arg("tensor1"), py::arg("tensor2"), py::kw_only(), py::arg("value") = 1, release_gil())
      .def("addcdiv_", [](T& x, const T& a, const T& b, S v) -> T& { return x.addcdiv_(a, b, v); },
           py::arg("tensor1"), py::arg("tensor2"), py::kw_only(), py::arg("value") = 1, release_gil())
      .def("lerp_", [](T& x, const T& e, S w) -> T& { return x.lerp_(e, w); }, py::arg("end"),
           py::arg("weight"), release_gil())
      .def("lerp_", [](T& x, const T& e, const T& w) -> T& { return x.lerp_(e, w); },
           py::arg("end"), py::arg("weight"), release_gil())
      .def("clamp_", [](T& x, std::optional<S> lo, std::optional<S> hi) -> T& { return x.clamp_(lo, hi); },
           py::arg("min") = py::none(), py::arg("max") = py::none(), release_gil())
      .def("clamp_", [](T& x, std::optional<T> lo, std::optional<T> hi) -> T& {
             return x.clamp_(lo ? *lo : T(), hi ? *hi : T());
           }, py::arg("min") = py::none(), py::arg("max") = py::none(), release_gil())
      .def("masked_fill_", [](T& x, const T& m, S v) -> T& { return x.masked_fill_(m, v); },
           py::arg("mask"), py::arg("value"), release_gil())
      .def("clamp_max", [](const T& x, S hi) { return clamp_max(x, hi); }, py::arg("max"), release_gil())
      .def("tril", [](const T& x, int64_t d) { return tril(x, d); }, py::arg("diagonal") = 0, release_gil())
      .def("triu", [](const T& x, int64_t d) { return triu(x, d); }, py::arg("diagonal") = 0, release_gil())
      .def("gather", [](const T& x, int64_t d, const T& i) { return gather(x, d, i); },
           py::arg("dim"), py::arg("index"), release_gil())
      .def("scatter", [](const T& x, int64_t d, const T& i, const T& src) { return scatter(x, d, i, src); },
           py::arg("dim"), py::arg("index"), py::arg("src"), release_gil())
      .def("scatter", [](const T& x, int64_t d, const T& i, S v) { return scatter(x, d, i, v); },
           py::arg("dim"), py::arg("index"), py::arg("value"), release_gil())
      .def("scatter_add", [](const T& x, int64_t d, const T& i, const T& src) { return scatter_add(x, d, i, src); },
           py::arg("dim"), py::arg("index"), py::arg("src"), release_gil())
      .def("index_add", [](const T& x, int64_t d, const T& i, const T& src, S alpha) {
             return index_add(x, d, i, src, alpha);
           }, py::arg("dim"), py::arg("index"), py::arg("source"), py::kw_only(), py::arg("alpha") = 1,
           release_gil())
      .def("index_put", [](const T& x, const std::vector<std::optional<T>>& i, const T& v, bool acc) {
             return index_put(x, i, v, acc);
           }, py::arg("indices"), py::arg("values"), py::arg("accumulate") = false, release_gil())
      .def("__getitem__", [](const T& x, py::handle key) { return index_of(x, key); })
      .def("__setitem__", [](T& x, py::handle key, py::handle v) { assign_index(x, key, v); })
      .def_property_readonly("shape", [](const T& x) { return x.shape(); })
      .def("size", [](const T& x, std::optional<int64_t> d) -> py::object {
             if (d) return py::int_(x.size(*d));
             return py::cast(x.shape());
           }, py::arg("dim") = py::none())
      .def_property_readonly("dtype", [](const T& x) { return x.dtype(); })
      .def_property_readonly("ndim", [](const T& x) { return x.dim(); })
      .def("dim", [](const T& x) { return x.dim(); })
      .def("numel", [](const T& x) { return x.numel(); })
      .def("__len__", [](const T& x) {
        if (x.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return x.size(0);
      });
  bind_scan_ops<T>(c);
  bind_structural_ops<T>(c);
}

}  // namespace dtensor::python
