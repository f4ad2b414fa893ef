// Views (view, permute, narrow, expand, chunk, ...) and joining/indexing
// (cat, stack, index_select, embedding). Views share storage and never copy.
#include <algorithm>
#include <cstring>
#include <optional>

#include "dtensor/tensor.h"
#include "tensor/dispatch.h"

namespace dtensor {
namespace {

// Replaces a single -1 in `shape` by the size that makes numel match.
Shape infer_size(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  Shape known_dims;
  int infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DT_CHECK(infer_at < 0, op, ": only one dim can be -1, got ", shape);
      infer_at = static_cast<int>(i);
    } else {
      DT_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", shape);
      known_dims.push_back(shape[i]);
    }
  }
  const int64_t known = checked_numel(known_dims, op);
  if (infer_at >= 0) {
    DT_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input ",
             from, " of ", numel, " elements");
    out[infer_at] = numel / known;
  } else {
    DT_CHECK(known == numel, op, ": shape ", shape, " is invalid for input ", from, " of ", numel,
             " elements");
  }
  return out;
}

// Strides that let (old_shape, old_strides) be read as new_shape without a
// copy, or nullopt. Dims of the old tensor group into chunks that are
// contiguous among themselves; a view is possible when each chunk is exactly
// covered by consecutive new dims.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides,
                                  const Shape& new_shape) {
  if (old_shape.empty() || old_shape.product() == 0) return contiguous_strides(new_shape);
  Shape new_strides(new_shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel = checked_mul(tensor_numel, old_shape[d], "view: element count");
    int64_t chunk_extent = 0;
    const bool boundary =
        d == 0 || (old_shape[d - 1] != 1 &&
                   (__builtin_mul_overflow(tensor_numel, chunk_base, &chunk_extent) ||
                    old_strides[d - 1] != chunk_extent));
    if (!boundary) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      new_strides[view_d] = checked_mul(view_numel, chunk_base, "view: stride");
      view_numel = checked_mul(view_numel, new_shape[view_d], "view: element count");
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const Shape s = infer_size(shape, numel(), "view", shape_);
  auto st = view_strides(shape_, strides_, s);
  DT_CHECK(st.has_value(), "view: shape ", s, " is not compatible with input ", shape_,
           " and strides ", strides_, " (use reshape, which copies)");
  return Tensor(storage_, dtype_, s, *st, offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape s = infer_size(shape, numel(), "reshape", shape_);
  if (auto st = view_strides(shape_, strides_, s)) return Tensor(storage_, dtype_, s, *st, offset_);
  return clone().view(s);
}

Tensor Tensor::permute(const DimVector& dims) const {
  DT_CHECK(dims.size() == shape_.size(), "permute: expected ", shape_.size(), " dims for shape ",
           shape_, ", got ", dims);
  Shape s, st;
  bool seen[kMaxDims] = {};
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, dim(), "permute");
    DT_CHECK(!seen[w], "permute: dim ", d, " repeated in ", dims);
    seen[w] = true;
    s.push_back(shape_[w]);
    st.push_back(strides_[w]);
  }
  return Tensor(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) {
    wrap_dim(d0, 0, "transpose");
    wrap_dim(d1, 0, "transpose");
    return *this;
  }
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape s = shape_, st = strides_;
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return Tensor(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::t() const {
  DT_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got shape ", shape_,
           " (use transpose)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  DT_CHECK(dim() > 0, "narrow: cannot narrow a 0-d tensor");
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  DT_CHECK(start >= 0 && start <= n, "narrow: start ", start, " out of range for dim ", d,
           " of size ", n);
  DT_CHECK(length >= 0 && length <= n - start, "narrow: start ", start, " + length ", length,
           " exceeds dim ", d, " of size ", n, " (shape ", shape_, ")");
  Shape s = shape_;
  s[d] = length;
  return Tensor(storage_, dtype_, s, strides_,
                checked_add(offset_, checked_mul(start, strides_[d], "narrow: offset"),
                            "narrow: offset"));
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  DT_CHECK(dim() > 0, "slice: cannot slice a 0-d tensor");
  d = wrap_dim(d, dim(), "slice");
  DT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape_, st = strides_;
  // Written so that no step, however large, overflows.
  s[d] = (end - start) / step + ((end - start) % step != 0 ? 1 : 0);
  if (s[d] > 1) st[d] = checked_mul(strides_[d], step, "slice: stride");
  return Tensor(storage_, dtype_, s, st,
                checked_add(offset_, checked_mul(start, strides_[d], "slice: offset"),
                            "slice: offset"));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  DT_CHECK(dim() > 0, "select: cannot select on a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape_[d];
  DT_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d,
           " of size ", n);
  if (index < 0) index += n;
  Shape s = shape_, st = strides_;
  s.erase(d);
  st.erase(d);
  return Tensor(storage_, dtype_, s, st, offset_ + index * strides_[d]);
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] == 1) continue;
    s.push_back(shape_[i]);
    st.push_back(strides_[i]);
  }
  return Tensor(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) {
    wrap_dim(d, 0, "squeeze");
    return *this;
  }
  d = wrap_dim(d, dim(), "squeeze");
  if (shape_[d] != 1) return *this;
  Shape s = shape_, st = strides_;
  s.erase(d);
  st.erase(d);
  return Tensor(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape_, st = strides_;
  const int64_t stride = d < dim() ? checked_mul(strides_[d], shape_[d], "unsqueeze: stride") : 1;
  s.insert(d, 1);
  st.insert(d, stride);
  return Tensor(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  DT_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " must not come after end_dim ",
           end_dim);
  Shape s;
  for (int64_t i = 0; i < start_dim; ++i) s.push_back(shape_[i]);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i)
    merged = checked_mul(merged, shape_[i], "flatten: merged size");
  s.push_back(merged);
  for (int64_t i = end_dim + 1; i < dim(); ++i) s.push_back(shape_[i]);
  return reshape(s);
}

Tensor Tensor::expand(const Shape& shape) const {
  DT_CHECK(shape.size() >= shape_.size(), "expand: target ", shape, " has fewer dims than input ",
           shape_);
  const size_t lead = shape.size() - shape_.size();
  Shape s(shape.size(), 0), st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      DT_CHECK(shape[i] >= 0, "expand: size ", shape[i], " is not allowed for the new leading dim ",
               i, " of ", shape, " (sizes must be >= 0)");
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    const int64_t have = shape_[i - lead];
    DT_CHECK(shape[i] >= -1, "expand: invalid size ", shape[i], " at dim ", i, " of ", shape,
             " (sizes must be >= 0, or -1 to keep one)");
    const int64_t want = shape[i] == -1 ? have : shape[i];
    if (have == want) {
      s[i] = have;
      st[i] = strides_[i - lead];
    } else {
      DT_CHECK(have == 1, "expand: cannot expand input ", shape_, " to ", shape, " (dim ", i,
               ": size ", have, " is not 1)");
      s[i] = want;
      st[i] = 0;
    }
  }
  return Tensor(storage_, dtype_, s, st, offset_);
}

std::vector<Tensor> Tensor::chunk(int64_t n, int64_t d) const {
  DT_CHECK(n > 0, "chunk: number of chunks must be positive, got ", n);
  DT_CHECK(dim() > 0, "chunk: cannot chunk a 0-d tensor");
  d = wrap_dim(d, dim(), "chunk");
  const int64_t len = shape_[d];
  // ceil(len / n) and c * r, written so that neither can overflow.
  const int64_t c = len / n + (len % n != 0 ? 1 : 0);
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(std::min<int64_t>(n, 1024)));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t start = r != 0 && c > len / r ? len : std::min(c * r, len);
    out.push_back(narrow(d, start, std::min(c, len - start)));
  }
  return out;
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  DT_CHECK(dim() > 0, "split: cannot split a 0-d tensor");
  d = wrap_dim(d, dim(), "split");
  const int64_t len = shape_[d];
  DT_CHECK(split_size > 0 || (split_size == 0 && len == 0), "split: split_size must be positive, got ",
           split_size);
  std::vector<Tensor> out;
  if (len == 0) {
    out.push_back(*this);
    return out;
  }
  for (int64_t start = 0; start < len;) {
    const int64_t piece = std::min(split_size, len - start);
    out.push_back(narrow(d, start, piece));
    start += piece;
  }
  return out;
}

std::vector<Tensor> Tensor::split_with_sizes(const std::vector<int64_t>& sizes, int64_t d) const {
  DT_CHECK(dim() > 0, "split_with_sizes: cannot split a 0-d tensor");
  d = wrap_dim(d, dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    DT_CHECK(s >= 0, "split_with_sizes: negative size ", s);
    total = checked_add(total, s, "split_with_sizes: total size");
  }
  DT_CHECK(total == shape_[d], "split_with_sizes: sizes sum to ", total, " but dim ", d,
           " has size ", shape_[d]);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(d, start, s));
    start += s;
  }
  return out;
}

// ---- joining and indexing ---------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  DT_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  // Like PyTorch, 1-d empty tensors are skipped (a common "start" value).
  const Tensor* ref = nullptr;
  DType dtype = tensors[0].dtype();
  for (const Tensor& t : tensors) {
    DT_CHECK(t.defined(), "cat: undefined tensor in the list");
    dtype = promote_types(dtype, t.dtype());
    if (ref == nullptr && !(t.dim() == 1 && t.numel() == 0)) ref = &t;
  }
  if (ref == nullptr) return Tensor::empty({0}, dtype);
  DT_CHECK(ref->dim() > 0, "cat: zero-dimensional tensors cannot be concatenated");
  dim = wrap_dim(dim, ref->dim(), "cat");
  Shape out_shape = ref->shape();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dim() == 1 && t.numel() == 0) continue;
    DT_CHECK(t.dim() == ref->dim(), "cat: tensor ", i, " has shape ", t.shape(),
             ", expected ", ref->dim(), " dims like ", ref->shape());
    for (int64_t d = 0; d < t.dim(); ++d) {
      DT_CHECK(d == dim || t.shape()[d] == out_shape[d], "cat: sizes must match except in dim ",
               dim, ": tensor ", i, " has shape ", t.shape(), ", expected ", ref->shape());
    }
    total = checked_add(total, t.shape()[dim], "cat: size of the joined dim");
  }
  out_shape[dim] = total;
  Tensor out = ref->new_empty(out_shape, dtype);  // meta when the inputs are
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) continue;
    out.narrow(dim, at, t.shape()[dim]).copy_(t);
    at += t.shape()[dim];
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  DT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    DT_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
             tensors[i].shape(), ", expected ", tensors[0].shape(), " like tensor 0");
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return cat(parts, dim);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  DT_CHECK(index.dtype() == DType::Int64, "index_select: index must be int64, got ", index.dtype());
  DT_CHECK(index.dim() <= 1, "index_select: index must be 0-d or 1-d, got shape ", index.shape());
  DT_CHECK(x.dim() > 0, "index_select: input must have at least 1 dim, got a 0-d tensor");
  dim = wrap_dim(dim, x.dim(), "index_select");
  const std::vector<int64_t> idx = index.to_vector<int64_t>();
  const int64_t n = x.shape()[dim];
  for (int64_t i : idx) {
    DT_CHECK(i >= -n && i < n, "index_select: index ", i, " out of range for dim ", dim,
             " of size ", n, " (shape ", x.shape(), ")");
  }
  Shape out_shape = x.shape();
  out_shape[dim] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(out_shape, x.dtype());
  if (dim == 0 && x.is_contiguous()) {
    // Row gather from a contiguous table (the embedding lookup): one memcpy a row.
    const size_t row_bytes = x.nbytes() / static_cast<size_t>(std::max<int64_t>(n, 1));
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (size_t r = 0; r < idx.size(); ++r) {
      const int64_t i = idx[r] < 0 ? idx[r] + n : idx[r];
      std::memcpy(dst + r * row_bytes, src + static_cast<size_t>(i) * row_bytes, row_bytes);
    }
    return out;
  }
  for (size_t r = 0; r < idx.size(); ++r) {
    const int64_t i = idx[r] < 0 ? idx[r] + n : idx[r];
    out.select(dim, static_cast<int64_t>(r)).copy_(x.select(dim, i));
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  DT_CHECK(weight.dim() == 2, "embedding: weight must be 2-d (num_embeddings, dim), got shape ",
           weight.shape());
  DT_CHECK(indices.dtype() == DType::Int64, "embedding: indices must be int64, got ",
           indices.dtype());
  // Unlike index_select, embedding takes no negative ids (as in PyTorch): an
  // id of -1 is a bug in the caller's vocabulary, not "the last row".
  const int64_t rows = weight.shape()[0];
  for (int64_t id : indices.contiguous().to_vector<int64_t>())
    DT_CHECK(id >= 0 && id < rows, "embedding: index ", id, " is out of range: expected an id in [0, ",
             rows, ") for a table of shape ", weight.shape());
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  return index_select(weight, 0, indices.reshape({-1})).view(out_shape);
}

}  // namespace dtensor
