// In-place DTensor ops with a tensor operand that selects or bounds:
// masked_fill_ and clamp_ with tensor bounds. As the others (inplace.cc),
// self keeps its placements and storage; the operand takes a layout the
// out-of-place op's rule allows next to self's (masked_fill's; maximum's
// for the lower bound, minimum's for the upper one), else the op throws.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/inplace.h"

namespace dtensor {

using namespace dispatch;
using namespace inplace_detail;
using autograd::Context;
using autograd::Grads;
using autograd::sum_to;

DTensor& DTensor::masked_fill_(const DTensor& mask, Scalar value) {
  check_self("masked_fill_", *this);
  check_operand("masked_fill_", *this, mask);
  // A value filled into every piece of a Partial(sum) would count n times:
  // masked_fill's rule keeps only Partial(avg|max|min), which that value is
  // the reduction of.
  const Placements want = *operand_layout("masked_fill_", OpId::MaskedFill, *this, &mask,
                                          {static_cast<int64_t>(value.kind())});
  InplaceCheck verify(*this, {&mask});
  const std::optional<DTensor> moved = move_operand(mask, want);
  const DTensor& m = moved ? *moved : mask;
  const bool recording = autograd::recording({this});
  std::optional<DTensor> prev;
  if (recording) prev = before(*this);
  each_shard(*this, m, [&](Tensor& s, const Tensor& k) { s.masked_fill_(k, value); });
  verify.check(*this, "masked_fill_",
               [&](Tensor& r, const std::vector<Tensor>& in) { r.masked_fill_(in[0], value); });
  if (!recording) return *this;
  rebase(*this, "masked_fill_", {&*prev}, {mask.detach()},
         [](const Context& c) { return Grads{masked_fill(c.grad, c.saved(0), 0)}; });
  return *this;
}

namespace {

// The plain clamp_ of self by the bounds given (undefined: absent).
void clamp_by_tensors(Tensor& s, const Tensor* lo, const Tensor* hi) {
  s.clamp_(lo ? *lo : Tensor(), hi ? *hi : Tensor());
}

}  // namespace

DTensor& DTensor::clamp_(const DTensor& min, const DTensor& max) {
  check_self("clamp_", *this);
  DT_CHECK(min.defined() || max.defined(),
           "clamp_: at least one of min and max must be given, got neither");
  const bool lo = min.defined(), hi = max.defined();
  if (lo) check_operand("clamp_", *this, min);
  if (hi) check_operand("clamp_", *this, max);
  // Both layouts before self changes, so that a bound that cannot be
  // applied leaves self as it was. Self's placements stay, so the second
  // is decided against the same self as the first.
  std::optional<Placements> want_lo, want_hi;
  if (lo) want_lo = *operand_layout("clamp_", OpId::Maximum, *this, &min);
  if (hi) want_hi = *operand_layout("clamp_", OpId::Minimum, *this, &max);
  InplaceCheck verify = lo && hi ? InplaceCheck(*this, {&min, &max})
                        : lo     ? InplaceCheck(*this, {&min})
                                 : InplaceCheck(*this, {&max});
  const bool recording = autograd::recording({this, &min, &max});
  std::optional<DTensor> prev, old;
  if (recording) {
    prev = before(*this);
    old = old_value(*this);
  }
  if (lo) {
    const std::optional<DTensor> moved = move_operand(min, *want_lo);
    each_shard(*this, moved ? *moved : min,
               [&](Tensor& s, const Tensor& b) { clamp_by_tensors(s, &b, nullptr); });
  }
  if (hi) {
    const std::optional<DTensor> moved = move_operand(max, *want_hi);
    each_shard(*this, moved ? *moved : max,
               [&](Tensor& s, const Tensor& b) { clamp_by_tensors(s, nullptr, &b); });
  }
  verify.check(*this, "clamp_", [&](Tensor& r, const std::vector<Tensor>& in) {
    clamp_by_tensors(r, lo ? &in[0] : nullptr, hi ? &in[lo ? 1 : 0] : nullptr);
  });
  if (!recording) return *this;
  // PyTorch's clamp_backward_min_max: self gets the gradient where
  // min <= x <= max; min where x < min (and min < max); max where x > max
  // (or max < min, where max wins).
  std::vector<const DTensor*> inputs{&*prev};
  std::vector<DTensor> saved{*old};
  if (lo) inputs.push_back(&min), saved.push_back(min.detach());
  if (hi) inputs.push_back(&max), saved.push_back(max.detach());
  rebase(
      *this, "clamp_", inputs, std::move(saved),
      [lo, hi, sl = lo ? min.shape() : Shape{}, sh = hi ? max.shape() : Shape{}](const Context& c) {
        const DTensor& x = c.saved(0);
        const DTensor* l = lo ? &c.saved(1) : nullptr;
        const DTensor* h = hi ? &c.saved(lo ? 2 : 1) : nullptr;
        Grads g(1 + lo + hi);
        if (c.needs(0)) {
          DTensor keep = l ? ge(x, *l) : le(x, *h);
          if (l && h) keep = logical_and(keep, le(x, *h));
          g[0] = where(keep, c.grad, 0);
        }
        if (l && c.needs(1)) {
          DTensor pick = lt(x, *l);
          if (h) pick = logical_and(pick, lt(*l, *h));
          g[1] = sum_to(where(pick, c.grad, 0), sl);
        }
        if (h && c.needs(lo ? 2 : 1)) {
          DTensor pick = gt(x, *h);
          if (l) pick = logical_or(pick, lt(*h, *l));
          g[lo ? 2 : 1] = sum_to(where(pick, c.grad, 0), sh);
        }
        return g;
      });
  return *this;
}

}  // namespace dtensor
