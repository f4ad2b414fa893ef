// The DTensor conveniences training code reaches for: method forms of the
// ops (one-line forwards to ops.h), to(dtype), size(d), numel(), printing,
// comparison operators, and the factories zeros/ones/full/empty.
#include <ostream>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"

namespace dtensor {

namespace {

int64_t wrap(int64_t d, int64_t ndim, const char* op) {
  const int64_t n = ndim == 0 ? 1 : ndim;
  DT_CHECK(d >= -n && d < n, op, ": dimension ", d, " out of range for a ", ndim,
           "-d DTensor (expected to be in [", -n, ", ", n - 1, "])");
  return d < 0 ? d + n : d;
}

}  // namespace

// ---- sizes and dtype ---------------------------------------------------------------------

int64_t DTensor::size(int64_t d) const {
  const int64_t nd = dim();
  DT_CHECK(nd > 0, "size: a 0-d DTensor has no dimension ", d);
  return shape()[static_cast<size_t>(wrap(d, nd, "size"))];
}

int64_t DTensor::numel() const { return shape().product(); }

DTensor DTensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  // A cast commutes with Partial(max|min) (it is monotone) and, between
  // floating dtypes, with sums up to rounding; truncating pieces to
  // integers before summing them is not truncating the sum, so an integral
  // target reduces Partial(sum|avg) first.
  DTensor src = detach();
  if (!is_floating(dtype)) {
    Placements pl = placements();
    bool reduce = false;
    for (Placement& p : pl) {
      if (p.is_partial() && (p.reduce_op() == ReduceOp::Sum || p.reduce_op() == ReduceOp::Avg)) {
        p = Replicate();
        reduce = true;
      }
    }
    if (reduce) src = src.redistribute(pl);
  }
  DTensorSpec spec(mesh(), src.placements(), shape(), dtype);
  DTensor out(std::move(spec), src.local().map([dtype](int, const Tensor& t) { return t.to(dtype); }));
  // The gradient is cast back shard by shard by the engine (a cast of the
  // gradient to the input's dtype), so the backward passes it through.
  if (is_floating(dtype) && autograd::recording({this}))
    autograd::record(out, "to", {this}, {},
                     [](const autograd::Context& c) { return autograd::Grads{c.grad}; });
  return out;
}

// ---- method forms ---------------------------------------------------------------------

DTensor DTensor::sum(const DimVector& dims, bool keepdim) const {
  return dtensor::sum(*this, dims, keepdim);
}
DTensor DTensor::mean(const DimVector& dims, bool keepdim) const {
  return dtensor::mean(*this, dims, keepdim);
}
DTensor DTensor::amax(const DimVector& dims, bool keepdim) const {
  return dtensor::amax(*this, dims, keepdim);
}
DTensor DTensor::amin(const DimVector& dims, bool keepdim) const {
  return dtensor::amin(*this, dims, keepdim);
}
DTensor DTensor::prod(const DimVector& dims, bool keepdim) const {
  return dtensor::prod(*this, dims, keepdim);
}
DTensor DTensor::var(const DimVector& dims, int64_t correction, bool keepdim) const {
  return dtensor::var(*this, dims, correction, keepdim);
}
DTensor DTensor::argmax(std::optional<int64_t> d, bool keepdim) const {
  return dtensor::argmax(*this, d, keepdim);
}
DTensor DTensor::argmin(std::optional<int64_t> d, bool keepdim) const {
  return dtensor::argmin(*this, d, keepdim);
}
DTensor DTensor::matmul(const DTensor& other) const { return dtensor::matmul(*this, other); }
DTensor DTensor::mm(const DTensor& other) const { return dtensor::mm(*this, other); }
DTensor DTensor::bmm(const DTensor& other) const { return dtensor::bmm(*this, other); }
DTensor DTensor::view(const Shape& s) const { return dtensor::view(*this, s); }
DTensor DTensor::reshape(const Shape& s) const { return dtensor::reshape(*this, s); }
DTensor DTensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return dtensor::flatten(*this, start_dim, end_dim);
}
DTensor DTensor::squeeze() const { return dtensor::squeeze(*this); }
DTensor DTensor::squeeze(int64_t d) const { return dtensor::squeeze(*this, d); }
DTensor DTensor::unsqueeze(int64_t d) const { return dtensor::unsqueeze(*this, d); }
DTensor DTensor::permute(const DimVector& dims) const { return dtensor::permute(*this, dims); }
DTensor DTensor::transpose(int64_t d0, int64_t d1) const {
  return dtensor::transpose(*this, d0, d1);
}
DTensor DTensor::t() const { return dtensor::t(*this); }
DTensor DTensor::expand(const Shape& s) const { return dtensor::expand(*this, s); }
DTensor DTensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return dtensor::narrow(*this, d, start, length);
}
DTensor DTensor::select(int64_t d, int64_t index) const { return dtensor::select(*this, d, index); }
std::vector<DTensor> DTensor::chunk(int64_t n, int64_t d) const {
  return dtensor::chunk(*this, n, d);
}
std::vector<DTensor> DTensor::split(int64_t split_size, int64_t d) const {
  return dtensor::split(*this, split_size, d);
}
DTensor DTensor::contiguous() const { return dtensor::contiguous(*this); }
DTensor DTensor::clone() const { return dtensor::clone(*this); }
DTensor DTensor::neg() const { return dtensor::neg(*this); }
DTensor DTensor::abs() const { return dtensor::abs(*this); }
DTensor DTensor::exp() const { return dtensor::exp(*this); }
DTensor DTensor::log() const { return dtensor::log(*this); }
DTensor DTensor::sqrt() const { return dtensor::sqrt(*this); }
DTensor DTensor::rsqrt() const { return dtensor::rsqrt(*this); }
DTensor DTensor::tanh() const { return dtensor::tanh(*this); }
DTensor DTensor::sigmoid() const { return dtensor::sigmoid(*this); }
DTensor DTensor::relu() const { return dtensor::relu(*this); }
DTensor DTensor::pow(Scalar exponent) const { return dtensor::pow(*this, exponent); }
DTensor DTensor::softmax(int64_t d) const { return dtensor::softmax(*this, d); }
DTensor DTensor::log_softmax(int64_t d) const { return dtensor::log_softmax(*this, d); }

// ---- comparisons ------------------------------------------------------------------------

DTensor operator==(const DTensor& a, const DTensor& b) { return eq(a, b); }
DTensor operator!=(const DTensor& a, const DTensor& b) { return ne(a, b); }
DTensor operator<(const DTensor& a, const DTensor& b) { return lt(a, b); }
DTensor operator<=(const DTensor& a, const DTensor& b) { return le(a, b); }
DTensor operator>(const DTensor& a, const DTensor& b) { return gt(a, b); }
DTensor operator>=(const DTensor& a, const DTensor& b) { return ge(a, b); }
DTensor operator==(const DTensor& a, Scalar b) { return eq(a, b); }
DTensor operator!=(const DTensor& a, Scalar b) { return ne(a, b); }
DTensor operator<(const DTensor& a, Scalar b) { return lt(a, b); }
DTensor operator<=(const DTensor& a, Scalar b) { return le(a, b); }
DTensor operator>(const DTensor& a, Scalar b) { return gt(a, b); }
DTensor operator>=(const DTensor& a, Scalar b) { return ge(a, b); }

// ---- printing ---------------------------------------------------------------------------

std::ostream& operator<<(std::ostream& os, const DTensor& d) {
  if (!d.defined()) return os << "DTensor(<empty>)";
  const DeviceMesh& mesh = d.mesh();
  const std::vector<int> held = mesh.held_ranks();
  const bool holds_all = static_cast<int64_t>(held.size()) == mesh.size();
  os << "DTensor(";
  if (holds_all) {
    // Every rank is here (the simulated world): the value, gathered and
    // reduced in-process.
    os << "full_tensor=" << d.full_tensor();
  } else if (held.empty()) {
    os << "local_tensor=<this process holds no rank of the mesh>";
  } else {
    // Under MPI a full_tensor would be a collective every rank must join;
    // printing is often done on one rank, so only this rank's shard is shown.
    os << "local_tensor=" << d.to_local(held.front()) << " (rank " << held.front() << ")";
  }
  os << ", device_mesh=" << mesh << ", placements=" << to_string(d.placements())
     << ", shape=" << d.shape() << ", dtype=" << d.dtype();
  if (d.requires_grad()) {
    if (d.is_leaf()) os << ", requires_grad=True";
    else os << ", grad_fn=" << d.grad_fn_name();
  }
  return os << ")";
}

}  // namespace dtensor
