// The ops of tensor.h and ops.h as module functions: dtensor.mm(a, b),
// dtensor.sum(x, dim=1), dtensor.softmax(x, -1), ... Each name takes
// DTensors (layout propagated, collectives as needed) or Tensors (the plain
// kernel): both overloads come from one table, as the C++ functions have
// the same names and signatures on both layers. Factories (zeros, ones,
// full, empty, rand, randn) make a Tensor, or a DTensor when given
// device_mesh and placements. Every op releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"
#include "math_ops.h"
#include "scan_ops.h"
#include "structural_ops.h"
#include "torch_args.h"
#include "dtensor/loss_options.h"

namespace dtensor::python {

GeluApprox parse_gelu(const std::string& a) {
  if (a == "none") return GeluApprox::None;
  if (a == "tanh") return GeluApprox::Tanh;
  DT_THROW("gelu: unknown approximate=\"", a, "\" (expected none or tanh)");
}

Reduction parse_reduction(const std::string& r) {
  if (r == "mean") return Reduction::Mean;
  if (r == "sum") return Reduction::Sum;
  if (r == "none") return Reduction::None;
  DT_THROW("reduction: unknown \"", r, "\" (expected mean, sum or none)");
}

namespace {

// reduction=, refusing torch's deprecated size_average and reduce.
Reduction loss_reduction(py::handle size_average, py::handle reduce, const std::string& r) {
  DT_CHECK(size_average.is_none() && reduce.is_none(),
           "size_average and reduce are deprecated (also in torch) and not supported: use "
           "reduction=\"mean\", \"sum\" or \"none\"");
  return parse_reduction(r);
}

}  // namespace

namespace {

// The overloads of one layer T (Tensor or DTensor), for the names both share.
template <class T>
void bind_ops_of(py::module_& m) {
  using S = Scalar;
#define X(op) m.def(#op, [](const T& x) { return op(x); }, py::arg("input"), release_gil());
  DTENSOR_PY_UNARY_OPS(X)
#undef X
#define X(op)                                                                                    \
  m.def(#op, [](const T& a, const T& b) { return op(a, b); }, py::arg("input"), py::arg("other"), \
        release_gil());                                                                          \
  m.def(#op, [](const T& a, S b) { return op(a, b); }, py::arg("input"), py::arg("other"),        \
        release_gil());
  DTENSOR_PY_BINARY_OPS(X)
#undef X
#define X(op) \
  m.def(#op, [](const T& a, const T& b) { return op(a, b); }, py::arg("input"), py::arg("other"), release_gil());
  DTENSOR_PY_TENSOR_BINARY_OPS(X)
#undef X
#define X(op)                                                                                    \
  m.def(#op,                                                                                     \
        [](const T& x, std::optional<DimVector> dim, bool keepdim, std::optional<DType> d) {      \
          return op(d ? x.to(*d) : x, dim.value_or(DimVector{}), keepdim);                       \
        },                                                                                       \
        py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false,               \
        py::kw_only(), py::arg("dtype") = py::none(), release_gil());
  DTENSOR_PY_REDUCTIONS(X)
#undef X
#define X(op)                                                                                    \
  m.def(#op,                                                                                     \
        [](const T& x, std::optional<DimVector> dim, bool keepdim) {                            \
          return op(x, dim.value_or(DimVector{}), keepdim);                                      \
        },                                                                                       \
        py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil());
  DTENSOR_PY_EXTREMA(X)
#undef X
  m.def("sub", [](S a, const T& b) { return sub(a, b); }, py::arg("input"), py::arg("other"), release_gil());
  m.def("div", [](S a, const T& b) { return div(a, b); }, py::arg("input"), py::arg("other"), release_gil());
  m.def("var",
        [](const T& x, std::optional<DimVector> dim, std::optional<bool> unbiased, bool keepdim,
           std::optional<int64_t> correction) {
          return var(x, dim.value_or(DimVector{}), var_correction(unbiased, correction), keepdim);
        },
        py::arg("input"), py::arg("dim") = py::none(), py::arg("unbiased") = py::none(),
        py::arg("keepdim") = false, py::kw_only(), py::arg("correction") = py::none(),
        release_gil());
  m.def("argmax", [](const T& x, std::optional<int64_t> d, bool k) { return argmax(x, d, k); },
        py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil());
  m.def("argmin", [](const T& x, std::optional<int64_t> d, bool k) { return argmin(x, d, k); },
        py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil());
  m.def("pow", [](const T& x, S e) { return pow(x, e); }, py::arg("input"), py::arg("exponent"),
        release_gil());
  // Norms: torch.norm (a numeric p) and torch.linalg.vector_norm, also as
  // dtensor.linalg.vector_norm.
  m.def("norm",
        [](const T& x, py::object p, std::optional<DimVector> dim, bool keepdim) {
          const double ord = norm_order(p, dim);
          py::gil_scoped_release nogil;
          return norm(x, ord, dim.value_or(DimVector{}), keepdim);
        },
        py::arg("input"), py::arg("p") = "fro", py::arg("dim") = py::none(),
        py::arg("keepdim") = false);
  auto vector_norm_of = [](const T& x, double ord, std::optional<DimVector> dim, bool keepdim) {
    return vector_norm(x, ord, dim.value_or(DimVector{}), keepdim);
  };
  m.def("vector_norm", vector_norm_of, py::arg("x"), py::arg("ord") = 2.0,
        py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil());
  m.def_submodule("linalg", "torch.linalg's functions for Tensors and DTensors.")
      .def("vector_norm", vector_norm_of, py::arg("x"), py::arg("ord") = 2.0,
           py::arg("dim") = py::none(), py::arg("keepdim") = false, release_gil());
  m.def("gelu", [](const T& x, const std::string& a) { return gelu(x, parse_gelu(a)); },
        py::arg("input"), py::arg("approximate") = "none", release_gil());
  // ATen's gelu_backward(grad_output, self, *, approximate): what gelu's
  // autograd runs, in one pass.
  m.def("gelu_backward",
        [](const T& g, const T& x, const std::string& a) {
          return gelu_backward(g, x, parse_gelu(a));
        },
        py::arg("grad_output"), py::arg("self"), py::kw_only(), py::arg("approximate") = "none",
        release_gil());
  // dtype=: the input is cast first, as torch does.
  m.def("softmax", [](const T& x, int64_t d, std::optional<DType> dt) {
          return softmax(dt ? x.to(*dt) : x, d);
        }, py::arg("input"), py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none(),
        release_gil());
  m.def("log_softmax", [](const T& x, int64_t d, std::optional<DType> dt) {
          return log_softmax(dt ? x.to(*dt) : x, d);
        }, py::arg("input"), py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none(),
        release_gil());
  m.def("addmm", [](const T& bias, const T& a, const T& b, S beta, S alpha) {
          return addmm(bias, a, b, beta, alpha);
        }, py::arg("input"), py::arg("mat1"), py::arg("mat2"), py::kw_only(), py::arg("beta") = 1,
        py::arg("alpha") = 1, release_gil());
  m.def("baddbmm", [](const T& bias, const T& a, const T& b, S beta, S alpha) {
          return baddbmm(bias, a, b, beta, alpha);
        }, py::arg("input"), py::arg("batch1"), py::arg("batch2"), py::kw_only(), py::arg("beta") = 1,
        py::arg("alpha") = 1, release_gil());
  m.def("where", [](const T& c, const T& a, const T& b) { return where(c, a, b); },
        py::arg("condition"), py::arg("input"), py::arg("other"), release_gil());
  m.def("where", [](const T& c, const T& a, S b) { return where(c, a, b); },
        py::arg("condition"), py::arg("input"), py::arg("other"), release_gil());
  m.def("where", [](const T& c) { return where_positions(c); }, py::arg("condition"),
        "where(condition): nonzero(condition, as_tuple=True).");
  m.def("masked_fill", [](const T& x, const T& mask, S v) { return masked_fill(x, mask, v); },
        py::arg("input"), py::arg("mask"), py::arg("value"), release_gil());
  // More pointwise math (the unary ones are in DTENSOR_PY_UNARY_OPS).
  m.def("round", [](const T& x, int64_t d) { return round(x, d); }, py::arg("input"),
        py::kw_only(), py::arg("decimals") = 0, release_gil());
  // torch.nn.functional.softplus(input, beta=1, threshold=20).
  m.def("softplus", [](const T& x, S b, S t) { return softplus(x, b, t); }, py::arg("input"),
        py::arg("beta") = 1, py::arg("threshold") = 20, release_gil());
  m.def("addcmul", [](const T& x, const T& a, const T& b, S v) { return addcmul(x, a, b, v); },
        py::arg("input"), py::arg("tensor1"), py::arg("tensor2"), py::kw_only(),
        py::arg("value") = 1, release_gil());
  m.def("addcdiv", [](const T& x, const T& a, const T& b, S v) { return addcdiv(x, a, b, v); },
        py::arg("input"), py::arg("tensor1"), py::arg("tensor2"), py::kw_only(),
        py::arg("value") = 1, release_gil());
  m.def("lerp", [](const T& x, const T& e, S w) { return lerp(x, e, w); }, py::arg("input"),
        py::arg("end"), py::arg("weight"), release_gil());
  m.def("lerp", [](const T& x, const T& e, const T& w) { return lerp(x, e, w); },
        py::arg("input"), py::arg("end"), py::arg("weight"), release_gil());
  m.def("cat", [](const std::vector<T>& ts, int64_t d) { return cat(ts, d); }, py::arg("tensors"),
        py::arg("dim") = 0, release_gil());
  m.def("stack", [](const std::vector<T>& ts, int64_t d) { return stack(ts, d); },
        py::arg("tensors"), py::arg("dim") = 0, release_gil());
  m.def("index_select", [](const T& x, int64_t d, const T& i) { return index_select(x, d, i); },
        py::arg("input"), py::arg("dim"), py::arg("index"), release_gil());
  // F.embedding(input, weight, padding_idx) and torch.embedding(weight,
  // input): told apart by dtype (the indices are int64, the table floating).
  m.def("embedding", [](const T& a, const T& b, std::optional<int64_t> padding_idx) {
          const bool indices_first = a.dtype() == DType::Int64 && b.dtype() != DType::Int64;
          return embedding(indices_first ? b : a, indices_first ? a : b, padding_idx);
        }, py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(),
        release_gil());
  // Clamping, triangles, gather/scatter, indexed updates (PyTorch's names and keywords).
  m.def("clamp", [](const T& x, std::optional<S> lo, std::optional<S> hi) { return clamp(x, lo, hi); },
        py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none(), release_gil());
  m.def("clamp", [](const T& x, std::optional<T> lo, std::optional<T> hi) {
          return clamp_tensors(x, lo, hi);
        }, py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none(),
        release_gil());
  m.def("clamp_min", [](const T& x, S lo) { return clamp_min(x, lo); }, py::arg("input"),
        py::arg("min"), release_gil());
  m.def("clamp_max", [](const T& x, S hi) { return clamp_max(x, hi); }, py::arg("input"),
        py::arg("max"), release_gil());
  m.def("tril", [](const T& x, int64_t d) { return tril(x, d); }, py::arg("input"),
        py::arg("diagonal") = 0, release_gil());
  m.def("triu", [](const T& x, int64_t d) { return triu(x, d); }, py::arg("input"),
        py::arg("diagonal") = 0, release_gil());
  m.def("gather", [](const T& x, int64_t d, const T& i) { return gather(x, d, i); },
        py::arg("input"), py::arg("dim"), py::arg("index"), release_gil());
  m.def("scatter", [](const T& x, int64_t d, const T& i, const T& src) { return scatter(x, d, i, src); },
        py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"), release_gil());
  m.def("scatter", [](const T& x, int64_t d, const T& i, S v) { return scatter(x, d, i, v); },
        py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("value"), release_gil());
  m.def("scatter_add", [](const T& x, int64_t d, const T& i, const T& src) {
          return scatter_add(x, d, i, src);
        }, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"), release_gil());
  m.def("index_add", [](const T& x, int64_t d, const T& i, const T& src, S alpha) {
          return index_add(x, d, i, src, alpha);
        }, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("source"), py::kw_only(),
        py::arg("alpha") = 1, release_gil());
  m.def("index_put", [](const T& x, const std::vector<std::optional<T>>& i, const T& v, bool acc) {
          return index_put(x, i, v, acc);
        }, py::arg("input"), py::arg("indices"), py::arg("values"), py::arg("accumulate") = false,
        release_gil());
  // F.nll_loss and F.cross_entropy's signatures; size_average and reduce
  // (deprecated in torch) hold their positions but must stay None.
  m.def("nll_loss", [](const T& lp, const T& t, std::optional<T> w, py::object size_average,
                       int64_t ii, py::object reduce, const std::string& r) {
          const LossOptions<T> o{loss_reduction(size_average, reduce, r), ii, w, 0.0};
          py::gil_scoped_release nogil;
          return nll_loss(lp, t, o);
        }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
        py::arg("size_average") = py::none(), py::arg("ignore_index") = -100,
        py::arg("reduce") = py::none(), py::arg("reduction") = "mean");
  m.def("cross_entropy", [](const T& x, const T& t, std::optional<T> w, py::object size_average,
                            int64_t ii, py::object reduce, const std::string& r, double ls) {
          const LossOptions<T> o{loss_reduction(size_average, reduce, r), ii, w, ls};
          py::gil_scoped_release nogil;
          return cross_entropy(x, t, o);
        }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
        py::arg("size_average") = py::none(), py::arg("ignore_index") = -100,
        py::arg("reduce") = py::none(), py::arg("reduction") = "mean",
        py::arg("label_smoothing") = 0.0);
  m.def("zeros_like", [](const T& x) { return zeros_like(x); }, py::arg("input"), release_gil());
  m.def("ones_like", [](const T& x) { return ones_like(x); }, py::arg("input"), release_gil());
  m.def("full_like", [](const T& x, S v) { return full_like(x, v); }, py::arg("input"),
        py::arg("fill_value"), release_gil());
  // The method forms as functions (torch.transpose(x, 0, 1), ...).
  m.def("clone", [](const T& x) { return x.clone(); }, py::arg("input"), release_gil());
  m.def("contiguous", [](const T& x) { return x.contiguous(); }, py::arg("input"), release_gil());
  m.def("reshape", [](const T& x, const Shape& s) { return x.reshape(s); }, py::arg("input"),
        py::arg("shape"), release_gil());
  m.def("flatten", [](const T& x, int64_t s, int64_t e) { return x.flatten(s, e); },
        py::arg("input"), py::arg("start_dim") = 0, py::arg("end_dim") = -1, release_gil());
  m.def("permute", [](const T& x, const DimVector& d) { return x.permute(d); }, py::arg("input"),
        py::arg("dims"), release_gil());
  m.def("transpose", [](const T& x, int64_t a, int64_t b) { return x.transpose(a, b); },
        py::arg("input"), py::arg("dim0"), py::arg("dim1"), release_gil());
  m.def("t", [](const T& x) { return x.t(); }, py::arg("input"), release_gil());
  m.def("squeeze", [](const T& x, std::optional<int64_t> d) { return d ? x.squeeze(*d) : x.squeeze(); },
        py::arg("input"), py::arg("dim") = py::none(), release_gil());
  m.def("squeeze", [](const T& x, const DimVector& d) { return squeeze_dims(x, d); },
        py::arg("input"), py::arg("dim"), release_gil());
  m.def("unsqueeze", [](const T& x, int64_t d) { return x.unsqueeze(d); }, py::arg("input"),
        py::arg("dim"), release_gil());
  m.def("narrow", [](const T& x, int64_t d, int64_t s, int64_t l) { return x.narrow(d, s, l); },
        py::arg("input"), py::arg("dim"), py::arg("start"), py::arg("length"), release_gil());
  m.def("select", [](const T& x, int64_t d, int64_t i) { return x.select(d, i); },
        py::arg("input"), py::arg("dim"), py::arg("index"), release_gil());
  m.def("chunk", [](const T& x, int64_t n, int64_t d) { return x.chunk(n, d); }, py::arg("input"),
        py::arg("chunks"), py::arg("dim") = 0, release_gil());
  m.def("split", [](const T& x, int64_t n, int64_t d) { return x.split(n, d); }, py::arg("input"),
        py::arg("split_size"), py::arg("dim") = 0, release_gil());
  bind_scan_ops<T>(m);
  bind_structural_ops<T>(m);
  // The shape family: repeat, tile, unbind, split with sizes, pad, empty_like.
  m.def("split", [](const T& x, const std::vector<int64_t>& s, int64_t d) { return split(x, s, d); },
        py::arg("input"), py::arg("split_size_or_sections"), py::arg("dim") = 0, release_gil());
  m.def("repeat", [](const T& x, const DimVector& r) { return repeat(x, r); }, py::arg("input"),
        py::arg("repeats"), release_gil());
  m.def("tile", [](const T& x, const DimVector& r) { return tile(x, r); }, py::arg("input"),
        py::arg("dims"), release_gil());
  m.def("unbind", [](const T& x, int64_t d) { return unbind(x, d); }, py::arg("input"),
        py::arg("dim") = 0, release_gil());
  m.def("pad", [](const T& x, const std::vector<int64_t>& p, const std::string& mode,
                  std::optional<double> value) {
          return pad(x, p, mode, value ? std::optional<Scalar>(*value) : std::nullopt);
        }, py::arg("input"), py::arg("pad"), py::arg("mode") = "constant",
        py::arg("value") = py::none(), release_gil());
  m.def("empty_like", [](const T& x) { return empty_like(x); }, py::arg("input"), release_gil());
}

// torch.einsum(equation, *operands), or with one list of operands: all
// DTensors (layouts propagated) or all Tensors.
py::object einsum_of(const std::string& equation, py::args args) {
  py::sequence ops = args;
  if (args.size() == 1 && (py::isinstance<py::list>(args[0]) || py::isinstance<py::tuple>(args[0])))
    ops = args[0].cast<py::sequence>();
  bool all_dtensors = py::len(ops) > 0;
  for (py::handle o : ops) all_dtensors = all_dtensors && py::isinstance<DTensor>(o);
  if (all_dtensors) {
    auto operands = ops.cast<std::vector<DTensor>>();
    DTensor out;
    {
      py::gil_scoped_release release;
      out = einsum(equation, operands);
    }
    return py::cast(std::move(out));
  }
  auto operands = cast_arg<std::vector<Tensor>>(ops, "einsum('" + equation + "') operands",
                                               "all DTensors or all Tensors");
  Tensor out;
  {
    py::gil_scoped_release release;
    out = einsum(equation, operands);
  }
  return py::cast(std::move(out));
}

// A Tensor's dropout: the mask Tensor::rand(shape, seed) >= p, the one a
// DTensor of that shape gets (dropout's definition in ops.h).
Tensor tensor_dropout(const Tensor& x, double p, std::optional<uint64_t> seed) {
  DT_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  const uint64_t s = seed ? *seed : next_seed();
  if (p == 0) return x.clone();
  return div(mul(x, ge(Tensor::rand(x.shape(), s), p)), 1 - p);
}

// Tensor ops whose DTensor form takes optional DTensors (weight, bias) or
// differs in shape: bound one by one.
void bind_layer_ops(py::module_& m) {
  m.def("linear", [](const DTensor& x, const DTensor& w, std::optional<DTensor> b) {
          return b ? linear(x, w, *b) : linear(x, w);
        }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), release_gil());
  m.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
          return linear(x, w, b.value_or(Tensor()));
        }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), release_gil());
  m.def("layer_norm", [](const DTensor& x, const Shape& s, std::optional<DTensor> w,
                         std::optional<DTensor> b, double eps) { return layer_norm(x, s, w, b, eps); },
        py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("bias") = py::none(), py::arg("eps") = 1e-5, release_gil());
  m.def("layer_norm", [](const Tensor& x, const Shape& s, std::optional<Tensor> w,
                         std::optional<Tensor> b, double eps) {
          return layer_norm(x, s, w.value_or(Tensor()), b.value_or(Tensor()), eps);
        }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("bias") = py::none(), py::arg("eps") = 1e-5, release_gil());
  m.def("rms_norm", [](const DTensor& x, const Shape& s, std::optional<DTensor> w,
                       std::optional<double> eps) { return rms_norm(x, s, w, eps); },
        py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("eps") = py::none(), release_gil());
  m.def("rms_norm", [](const Tensor& x, const Shape& s, std::optional<Tensor> w,
                       std::optional<double> eps) { return rms_norm(x, s, w.value_or(Tensor()), eps); },
        py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("eps") = py::none(), release_gil());
  m.def("slice", [](const DTensor& x, int64_t d, int64_t s, int64_t e, int64_t st) {
          return slice(x, d, s, e, st);
        }, py::arg("input"), py::arg("dim"), py::arg("start"), py::arg("end"), py::arg("step") = 1,
        release_gil());
  m.def("slice", [](const Tensor& x, int64_t d, int64_t s, int64_t e, int64_t st) {
          return x.slice(d, s, e, st);
        }, py::arg("input"), py::arg("dim"), py::arg("start"), py::arg("end"), py::arg("step") = 1,
        release_gil());
  // F.dropout(input, p=0.5, training=True, inplace=False), plus seed=:
  // without one, the mask's seed comes from the global generator
  // (manual_seed). Not training: the input itself, as torch.
  m.def("dropout",
        [](py::object input, double p, bool training, bool inplace,
           std::optional<uint64_t> seed) -> py::object {
          if (!training) return input;
          if (py::isinstance<DTensor>(input)) {
            DTensor& x = input.cast<DTensor&>();
            DTensor out;
            {
              py::gil_scoped_release nogil;
              out = dropout(x, p, seed);
              if (inplace) x.copy_(out);
            }
            return inplace ? input : py::cast(std::move(out));
          }
          if (!py::isinstance<Tensor>(input))
            throw py::type_error("dropout: expected a Tensor or DTensor, got " + describe(input));
          Tensor& x = input.cast<Tensor&>();
          Tensor out;
          {
            py::gil_scoped_release nogil;
            out = tensor_dropout(x, p, seed);
            if (inplace) x.copy_(out);
          }
          return inplace ? input : py::cast(std::move(out));
        },
        py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true,
        py::arg("inplace") = false, py::kw_only(), py::arg("seed") = py::none());
  // torch.nn.functional.scaled_dot_product_attention's signature (no enable_gqa).
  m.def("scaled_dot_product_attention",
        [](const DTensor& q, const DTensor& k, const DTensor& v, std::optional<DTensor> mask,
           double dropout_p, bool is_causal, std::optional<double> scale) {
          return scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale);
        }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
        py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
        release_gil());
  m.def("scaled_dot_product_attention",
        [](const Tensor& q, const Tensor& k, const Tensor& v, std::optional<Tensor> mask,
           double dropout_p, bool is_causal, std::optional<double> scale) {
          return scaled_dot_product_attention(q, k, v, mask.value_or(Tensor()), dropout_p,
                                              is_causal, scale);
        }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
        py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
        release_gil());
  // Comparisons of whole tensors (bools, not tensors).
  m.def("equal", [](const Tensor& a, const Tensor& b) { return equal(a, b); }, py::arg("input"),
        py::arg("other"), release_gil(), "Same shape and every element equal.");
  m.def("allclose", [](const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
          return allclose(a, b, rtol, atol, equal_nan);
        }, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
        py::arg("equal_nan") = false, release_gil());
}

// A factory's result, made with the GIL released: make_dtensor(mesh,
// placements) when given both, make_tensor() when given neither.
template <class MakeTensor, class MakeDTensor>
py::object tensor_or_dtensor(const char* name, const std::optional<DeviceMesh>& mesh,
                             const std::optional<Placements>& placements,
                             MakeTensor make_tensor, MakeDTensor make_dtensor) {
  DT_CHECK(mesh.has_value() == placements.has_value(), name,
           ": give both device_mesh and placements (a DTensor) or neither (a Tensor)");
  if (mesh) {
    DTensor d;
    {
      py::gil_scoped_release release;
      d = make_dtensor(*mesh, *placements);
    }
    return py::cast(std::move(d));
  }
  Tensor t;
  {
    py::gil_scoped_release release;
    t = make_tensor();
  }
  return py::cast(std::move(t));
}

// zeros(shape, dtype=float32, device_mesh=None, placements=None): a Tensor,
// or a DTensor each of whose ranks allocates only its shard.
template <class MakeTensor, class MakeDTensor>
void bind_factory(py::module_& m, const char* name, MakeTensor make_tensor,
                  MakeDTensor make_dtensor, const char* doc) {
  m.def(name,
        [=](py::args args, std::optional<Shape> size, DType dtype, std::optional<DeviceMesh> mesh,
            std::optional<Placements> placements) -> py::object {
          const Shape shape = shape_of(args, size, name);
          return tensor_or_dtensor(
              name, mesh, placements, [&] { return make_tensor(shape, dtype); },
              [&](const DeviceMesh& m, const Placements& p) {
                return make_dtensor(shape, m, p, dtype);
              });
        },
        py::kw_only(), py::arg("size") = py::none(), py::arg("dtype") = DType::Float32,
        py::arg("device_mesh") = py::none(), py::arg("placements") = py::none(), doc);
}

}  // namespace

void bind_ops(py::module_& m) {
  bind_ops_of<DTensor>(m);
  bind_ops_of<Tensor>(m);
  bind_layer_ops(m);
  m.def("einsum", &einsum_of, py::arg("equation"),
        "torch.einsum: einsum('ij,jk->ik', a, b) or einsum('ij,jk', [a, b]).");

  bind_factory(m, "zeros", [](const Shape& s, DType d) { return Tensor::zeros(s, d); },
               [](const Shape& s, const DeviceMesh& m, const Placements& p, DType d) { return zeros(s, m, p, d); },
               "Zeros: a Tensor, or a DTensor with device_mesh and placements.");
  bind_factory(m, "ones", [](const Shape& s, DType d) { return Tensor::ones(s, d); },
               [](const Shape& s, const DeviceMesh& m, const Placements& p, DType d) { return ones(s, m, p, d); },
               "Ones: a Tensor, or a DTensor with device_mesh and placements.");
  bind_factory(m, "empty", [](const Shape& s, DType d) { return Tensor::empty(s, d); },
               [](const Shape& s, const DeviceMesh& m, const Placements& p, DType d) { return empty(s, m, p, d); },
               "Uninitialised: a Tensor, or a DTensor with device_mesh and placements.");
  m.def("full",
        [](const Shape& shape, Scalar value, std::optional<DType> dtype, std::optional<DeviceMesh> mesh,
           std::optional<Placements> placements) -> py::object {
          const DType d = dtype.value_or(value.result_type(DType::Bool));
          return tensor_or_dtensor(
              "full", mesh, placements, [&] { return Tensor::full(shape, value, d); },
              [&](const DeviceMesh& m, const Placements& p) { return full(shape, value, m, p, d); });
        },
        py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device_mesh") = py::none(), py::arg("placements") = py::none(),
        "fill_value everywhere (dtype from the value unless given).");
  // Counter-based random numbers: element i of the global tensor is the
  // same whatever the layout (each rank makes only its own shard). Without
  // a seed, one from the global generator (manual_seed).
  m.def("rand",
        [](py::args args, std::optional<Shape> size, std::optional<uint64_t> seed, DType dtype,
           std::optional<DeviceMesh> mesh, std::optional<Placements> placements) -> py::object {
          const Shape shape = shape_of(args, size, "rand");
          if (mesh) return py::cast(rand(shape, *mesh, placements.value_or(Placements()), seed, dtype));
          return py::cast(Tensor::rand(shape, seed ? *seed : next_seed(), 0, dtype));
        },
        py::kw_only(), py::arg("size") = py::none(), py::arg("seed") = py::none(),
        py::arg("dtype") = DType::Float32,
        py::arg("device_mesh") = py::none(), py::arg("placements") = py::none(),
        "Uniform in [0, 1), the same global values whatever the layout.");
  m.def("randn",
        [](py::args args, std::optional<Shape> size, std::optional<uint64_t> seed, DType dtype,
           std::optional<DeviceMesh> mesh, std::optional<Placements> placements) -> py::object {
          const Shape shape = shape_of(args, size, "randn");
          if (mesh) return py::cast(randn(shape, *mesh, placements.value_or(Placements()), seed, dtype));
          return py::cast(Tensor::randn(shape, seed ? *seed : next_seed(), 0, dtype));
        },
        py::kw_only(), py::arg("size") = py::none(), py::arg("seed") = py::none(),
        py::arg("dtype") = DType::Float32,
        py::arg("device_mesh") = py::none(), py::arg("placements") = py::none(),
        "Standard normal, the same global values whatever the layout.");
  // torch.randint(high, size) / randint(low, high, size): int64 uniform in
  // [low, high), counter-based like rand (a plain Tensor; distribute_tensor
  // lays it out).
  m.def("randint",
        [](py::args args, std::optional<Shape> size, std::optional<uint64_t> seed,
           std::optional<DType> dtype) {
          DT_CHECK(args.size() >= 2 || (args.size() == 1 && size),
                   "randint: expected randint(high, size) or randint(low, high, size), got ",
                   args.size(), " positional arguments");
          const size_t n = args.size() - (size ? 0 : 1);  // the bounds among args
          DT_CHECK(n == 1 || n == 2, "randint: expected randint(high, size) or "
                   "randint(low, high, size), got ", args.size(), " positional arguments");
          const int64_t low = n == 2 ? cast_arg<int64_t>(args[0], "randint", "an int low") : 0;
          const int64_t high = cast_arg<int64_t>(args[n - 1], "randint", "an int high");
          const Shape shape = size ? *size : cast_arg<Shape>(args[n], "randint", "a size");
          DT_CHECK(low < high, "randint: low ", low, " must be below high ", high);
          Tensor out = Tensor::randint(low, high, shape, seed ? *seed : next_seed());
          return dtype && *dtype != DType::Int64 ? out.to(*dtype) : out;
        },
        py::kw_only(), py::arg("size") = py::none(), py::arg("seed") = py::none(),
        py::arg("dtype") = py::none(),
        "Integers uniform in [low, high) (low 0 when left out), int64 unless dtype is given.");
  m.def("arange",
        [](Scalar start, std::optional<Scalar> end, Scalar step, std::optional<DType> dtype) {
          // As torch.arange: int64 unless an argument is a float (then float32).
          const DType d = dtype.value_or(
              step.result_type(start.result_type(end ? end->result_type(DType::Int64) : DType::Int64)));
          if (!end) return Tensor::arange(0, start.to_double(), step.to_double(), d);
          return Tensor::arange(start.to_double(), end->to_double(), step.to_double(), d);
        },
        py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1,
        py::arg("dtype") = py::none(), release_gil(),
        "arange(end) or arange(start, end, step): int64, or float32 when an argument is a "
        "float (torch.arange), unless dtype is given.");

  // linspace and eye: a Tensor, or a DTensor given device_mesh and placements.
  m.def("linspace",
        [](double start, double end, int64_t steps, std::optional<DType> dtype,
           std::optional<DeviceMesh> mesh, std::optional<Placements> placements) -> py::object {
          const DType d = dtype.value_or(DType::Float32);
          return tensor_or_dtensor(
              "linspace", mesh, placements, [&] { return linspace(start, end, steps, d); },
              [&](const DeviceMesh& m, const Placements& p) { return linspace(start, end, steps, m, p, d); });
        },
        py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(),
        py::arg("dtype") = py::none(), py::arg("device_mesh") = py::none(),
        py::arg("placements") = py::none(),
        "steps values from start to end (torch.linspace; float32 unless dtype is given).");
  m.def("eye",
        [](int64_t n, std::optional<int64_t> cols, std::optional<DType> dtype,
           std::optional<DeviceMesh> mesh, std::optional<Placements> placements) -> py::object {
          const DType d = dtype.value_or(DType::Float32);
          return tensor_or_dtensor(
              "eye", mesh, placements, [&] { return eye(n, cols, d); },
              [&](const DeviceMesh& m, const Placements& p) { return eye(n, cols, m, p, d); });
        },
        py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device_mesh") = py::none(), py::arg("placements") = py::none(),
        "Ones on the diagonal of an n x m (m = n) matrix (torch.eye; float32 unless dtype is given).");

  // `with dtensor.implicit_replication():` plain Tensors of any shape mix
  // with DTensors as Replicate (every rank must pass the same tensor).
  struct ImplicitReplicationScope {
    std::unique_ptr<ImplicitReplication> active;
  };
  py::class_<ImplicitReplicationScope>(m, "implicit_replication",
                                       "Context manager: plain Tensors mix with DTensors as "
                                       "replicated values (PyTorch's implicit_replication).")
      .def(py::init<>())
      .def("__enter__", [](ImplicitReplicationScope& s) -> ImplicitReplicationScope& {
        s.active = std::make_unique<ImplicitReplication>();
        return s;
      }, py::return_value_policy::reference)
      .def("__exit__", [](ImplicitReplicationScope& s, py::args) {
        s.active.reset();
        return false;
      });
  m.def("implicit_replication_enabled", &implicit_replication_enabled);
}

}  // namespace dtensor::python
