// Shape ops on plain tensors: repeat, tile, unbind, split with sizes, pad,
// and the new_* factories (einsum is in einsum.cc).
//
// Every op here moves elements without arithmetic, so it is written with
// views and copy_ (or index_select) and works for every dtype alike. Output
// sizes are computed with checked arithmetic: a repeat or pad that would
// overflow int64 is an Error, not a wrapped allocation.
#include <algorithm>
#include <string>
#include <vector>

#include "tensor/shape.h"

namespace dtensor {

namespace {

// x's shape with leading 1s up to `nd` dims.
Shape padded_shape(const Shape& s, size_t nd) {
  Shape out(nd - s.size(), 1);
  for (int64_t v : s) out.push_back(v);
  return out;
}

// The index along one padded dim of size n: output position k reads input
// position index[k] (reflect mirrors without repeating the edge, replicate
// repeats the edge).
Tensor pad_index(int64_t n, int64_t lo, int64_t hi, bool reflect) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(n + lo + hi));
  for (int64_t i = -lo; i < n + hi; ++i) {
    if (reflect) idx.push_back(i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i);
    else idx.push_back(std::clamp<int64_t>(i, 0, n - 1));
  }
  return Tensor::from_vector(idx);
}

}  // namespace

Shape repeat_shape(const Shape& shape, const DimVector& repeats) {
  DT_CHECK(repeats.size() >= shape.size(),
           "repeat: number of dimensions of repeat dims can not be smaller than the number of "
           "dimensions of the tensor: got repeats ", repeats, " for a tensor of shape ", shape);
  const Shape in = padded_shape(shape, repeats.size());
  Shape out;
  for (size_t d = 0; d < repeats.size(); ++d) {
    DT_CHECK(repeats[d] >= 0, "repeat: repeats must be non-negative, got ", repeats);
    out.push_back(checked_mul(in[d], repeats[d], "repeat: output size"));
  }
  checked_numel(out, "repeat");
  return out;
}

Tensor repeat(const Tensor& x, const DimVector& repeats) {
  const Shape out_shape = repeat_shape(x.shape(), repeats);
  const Shape in = padded_shape(x.shape(), repeats.size());
  Tensor out = Tensor::empty(out_shape, x.dtype());
  if (out.numel() == 0) return out;
  // The input goes to the first block; then, dim by dim, the filled part is
  // copied onto the rest by doubling (log2(r) copies per dim, not r).
  Tensor block = out;
  for (size_t d = 0; d < in.size(); ++d) block = block.narrow(static_cast<int64_t>(d), 0, in[d]);
  block.copy_(x.reshape(in));
  for (size_t d = 0; d < in.size(); ++d) {
    Tensor region = out;  // dims < d done; dims > d still the input's extent
    for (size_t k = d + 1; k < in.size(); ++k)
      region = region.narrow(static_cast<int64_t>(k), 0, in[k]);
    const int64_t dim = static_cast<int64_t>(d), total = out_shape[d];
    for (int64_t filled = in[d]; filled < total;) {
      const int64_t len = std::min(filled, total - filled);
      region.narrow(dim, filled, len).copy_(region.narrow(dim, 0, len));
      filled += len;
    }
  }
  return out;
}

DimVector tile_repeats(int64_t ndim, const DimVector& reps) {
  DimVector r;
  for (int64_t k = static_cast<int64_t>(reps.size()); k < ndim; ++k) r.push_back(1);
  for (int64_t v : reps) r.push_back(v);
  return r;
}

Tensor tile(const Tensor& x, const DimVector& reps) {
  return repeat(x, tile_repeats(x.dim(), reps));
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  DT_CHECK(x.dim() > 0, "unbind: dimension specified as ", dim, " but tensor has no dimensions");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(x.shape()[d]));
  for (int64_t i = 0; i < x.shape()[d]; ++i) out.push_back(x.select(d, i));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return x.split_with_sizes(sizes, dim);
}

PadPlan pad_plan(const Shape& shape, const std::vector<int64_t>& pad, const std::string& mode,
                 bool has_value) {
  PadPlan p;
  if (mode == "constant") p.mode = PadMode::Constant;
  else if (mode == "reflect") p.mode = PadMode::Reflect;
  else if (mode == "replicate") p.mode = PadMode::Replicate;
  else DT_THROW("pad: unsupported padding mode '", mode, "': expected constant, reflect or replicate");
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t npad = static_cast<int64_t>(pad.size());
  DT_CHECK(npad % 2 == 0, "pad: padding length must be divisible by 2, got ", npad);
  DT_CHECK(npad / 2 <= nd, "pad: padding length should be less than or equal to two times the "
           "input dimension but got padding length ", npad, " and input of dimension ", nd);
  DT_CHECK(p.mode == PadMode::Constant || !has_value, "pad: padding mode \"", mode,
           "\" doesn't take in value argument");
  p.lo.assign(static_cast<size_t>(nd), 0);
  p.hi.assign(static_cast<size_t>(nd), 0);
  // pad lists (left, right) pairs from the last dim backwards.
  for (int64_t k = 0; k < npad / 2; ++k) {
    p.lo[static_cast<size_t>(nd - 1 - k)] = pad[static_cast<size_t>(2 * k)];
    p.hi[static_cast<size_t>(nd - 1 - k)] = pad[static_cast<size_t>(2 * k + 1)];
  }
  if (p.mode != PadMode::Constant) {
    const int64_t k = npad / 2;
    DT_CHECK(k >= 1 && k <= 3, "pad: only 2D, 3D, 4D, 5D padding with non-constant padding are "
             "supported: got a padding length of ", npad, " for mode ", mode);
    DT_CHECK(nd == k + 1 || nd == k + 2, "pad: mode ", mode, " with padding length ", npad,
             " expects a ", k + 1, "-d or ", k + 2, "-d (batch mode) input, got shape ", shape);
    for (int64_t d = nd == k + 2 ? 1 : 0; d < nd; ++d)
      DT_CHECK(shape[d] > 0, "pad: mode ", mode, " expects non-zero dimensions (a batch dim may "
               "be 0), got shape ", shape);
    for (int64_t d = nd - k; d < nd; ++d) {
      DT_CHECK(p.lo[d] >= 0 && p.hi[d] >= 0, "pad: mode ", mode,
               " takes non-negative padding, got (", p.lo[d], ", ", p.hi[d], ") at dimension ", d);
      DT_CHECK(p.mode != PadMode::Reflect || (p.lo[d] < shape[d] && p.hi[d] < shape[d]),
               "pad: padding size should be less than the corresponding input dimension, but "
               "got: padding (", p.lo[d], ", ", p.hi[d], ") at dimension ", d, " of input ", shape);
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t n = checked_add(checked_add(shape[d], p.lo[d], "pad: output size"), p.hi[d],
                                  "pad: output size");
    DT_CHECK(n >= 0, "pad: the input size ", shape[d], ", plus negative padding ", p.lo[d],
             " and ", p.hi[d], " resulted in a negative output size, which is invalid. Check "
             "dimension ", d, " of your input.");
    p.out.push_back(n);
  }
  checked_numel(p.out, "pad");
  return p;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode,
           std::optional<Scalar> value) {
  const PadPlan p = pad_plan(x.shape(), pad, mode, value.has_value());
  const int64_t nd = x.dim();
  if (p.mode == PadMode::Constant) {
    Tensor out = Tensor::full(p.out, value.value_or(0), x.dtype());
    // The part of x that survives (negative pads crop) and where it lands.
    // A crop deeper than the dim leaves nothing of x: all value.
    Tensor src = x, dst = out;
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t from = std::max<int64_t>(0, -p.lo[d]);
      const int64_t to = std::max<int64_t>(0, p.lo[d]);
      const int64_t len = x.shape()[d] - from - std::max<int64_t>(0, -p.hi[d]);
      if (len <= 0) return out;
      src = src.narrow(d, from, len);
      dst = dst.narrow(d, to, len);
    }
    if (src.numel() > 0) dst.copy_(src);
    return out;
  }
  DT_CHECK(x.dtype() != DType::Bool, "pad: mode ", mode, " expects a numeric dtype, got bool");
  Tensor out = x;
  for (int64_t d = 0; d < nd; ++d)
    if (p.lo[d] != 0 || p.hi[d] != 0)
      out = index_select(out, d, pad_index(x.shape()[d], p.lo[d], p.hi[d],
                                           p.mode == PadMode::Reflect));
  return out.storage() == x.storage() ? x.clone() : out;  // nothing padded: still a copy
}

Tensor pad_index_for(int64_t n, int64_t lo, int64_t hi, PadMode mode) {
  return pad_index(n, lo, hi, mode == PadMode::Reflect);
}

Tensor new_empty(const Tensor& x, const Shape& shape, std::optional<DType> dtype) {
  return Tensor::empty(shape, dtype.value_or(x.dtype()));
}
Tensor new_zeros(const Tensor& x, const Shape& shape, std::optional<DType> dtype) {
  return Tensor::zeros(shape, dtype.value_or(x.dtype()));
}
Tensor new_ones(const Tensor& x, const Shape& shape, std::optional<DType> dtype) {
  return Tensor::ones(shape, dtype.value_or(x.dtype()));
}
Tensor new_full(const Tensor& x, const Shape& shape, Scalar value, std::optional<DType> dtype) {
  return Tensor::full(shape, value, dtype.value_or(x.dtype()));
}

}  // namespace dtensor
