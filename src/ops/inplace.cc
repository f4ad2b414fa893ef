// In-place DTensor ops (add_, mul_, copy_, fill_, clamp_, ...): the result
// is written into self's own shards, so self keeps its placements and its
// storage, and every shard's version counter moves (autograd refuses a saved
// tensor changed since it was saved).
//
// What the ops share (inplace.h): the layout, where self never moves and
// the operand takes a layout the out-of-place op's rule allows next to it
// (inplace_rule.cc); applying the op shard by shard; recording it for
// autograd by rebasing self (inplace_autograd.cc).
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/inplace.h"
#include "ops/pointwise_rule.h"

namespace dtensor {

using namespace dispatch;
using namespace inplace_detail;
using autograd::Context;
using autograd::Grads;
using autograd::sum_to;

namespace {

// A scalar as a replicated 0-d DTensor of self's dtype where it fits (so
// that it promotes as the scalar would).
DTensor scalar_operand(Scalar s, const DTensor& self) {
  DType dtype = self.dtype();
  if (s.is_floating() && !is_floating(dtype)) dtype = DType::Float32;
  return distribute_tensor(Tensor::full({}, s, dtype), self.mesh(),
                           Placements(static_cast<size_t>(self.mesh().ndim()), Replicate()));
}

bool is_one(Scalar s) { return s.to_double() == 1.0; }

enum class Arith { Add, Sub, Mul, Div };

OpId binary_id(Arith a) {
  switch (a) {
    case Arith::Add: return OpId::Add;
    case Arith::Sub: return OpId::Sub;
    case Arith::Mul: return OpId::Mul;
    case Arith::Div: break;
  }
  return OpId::Div;
}

OpId scalar_id(Arith a) {
  switch (a) {
    case Arith::Add: return OpId::AddScalar;
    case Arith::Sub: return OpId::SubScalar;
    case Arith::Mul: return OpId::MulScalar;
    case Arith::Div: break;
  }
  return OpId::DivScalar;
}

void apply_local(Arith a, Tensor& s, const Tensor& x) {
  switch (a) {
    case Arith::Add: s.add_(x); return;
    case Arith::Sub: s.sub_(x); return;
    case Arith::Mul: s.mul_(x); return;
    case Arith::Div: s.div_(x); return;
  }
}

void apply_local(Arith a, Tensor& s, Scalar x) {
  switch (a) {
    case Arith::Add: s.add_(x); return;
    case Arith::Sub: s.sub_(x); return;
    case Arith::Mul: s.mul_(x); return;
    case Arith::Div: s.div_(x); return;
  }
}

// self op= alpha * other (alpha only for add/sub).
DTensor& arith_(DTensor& self, Arith a, const char* op, const DTensor& other, Scalar alpha) {
  check_self(op, self);
  check_operand(op, self, other);
  const Placements want = *operand_layout(op, binary_id(a), self, &other);
  InplaceCheck verify(self, {&other});
  std::vector<char> zero;
  const std::optional<DTensor> moved = move_operand(other, want, &zero);
  const DTensor& o = moved ? *moved : other;
  const bool scaled = (a == Arith::Add || a == Arith::Sub) && !is_one(alpha);
  if (scaled) {
    // Scaling commutes with every Partial the rule lets an add/sub operand
    // have (sum, avg; max/min only for a positive alpha, else they swap).
    const bool flips = alpha.to_double() < 0;
    for (const Placement& p : o.placements()) {
      const bool extremum = p.is_partial() && (p.reduce_op() == ReduceOp::Max ||
                                               p.reduce_op() == ReduceOp::Min);
      DT_CHECK(!(extremum && flips), op, ": alpha ", alpha, " < 0 with an operand ",
               to_string(o.placements()), " (a negative scale swaps Partial(max) and ",
               "Partial(min)); redistribute the operand to Replicate first");
    }
  }
  const bool recording = autograd::recording({&self, &other});
  std::optional<DTensor> prev, old, other_before;
  if (recording) {
    prev = before(self);
    if ((a == Arith::Mul || a == Arith::Div) && other.requires_grad()) old = old_value(self);
    // x.mul_(x): the saved operand must be x as it was.
    if ((a == Arith::Mul || a == Arith::Div) && shares_memory(self, other))
      other_before = old_value(other);
  }
  size_t i = 0;
  each_shard(self, o, [&](Tensor& s, const Tensor& x) {
    if (!zero.empty() && zero[i++]) touch(s);  // adding zeros (mul/div never get a new Partial(sum))
    else if (scaled) apply_local(a, s, mul(x, alpha));
    else apply_local(a, s, x);  // (a ?: would copy x)
  });
  verify.check(self, op, [&](Tensor& r, const std::vector<Tensor>& in) {
    apply_local(a, r, scaled ? mul(in[0], alpha) : in[0]);
  });
  if (!recording) return self;
  const Shape so = other.shape();
  const double v = alpha.to_double();
  std::vector<DTensor> saved;
  if (a == Arith::Mul || a == Arith::Div) {
    saved.push_back(other_before ? *other_before : other.detach());
    if (old) saved.push_back(*old);
  }
  rebase(self, op, {&*prev, &other}, std::move(saved), [a, so, v](const Context& c) {
    Grads g(2);
    switch (a) {
      case Arith::Add:
      case Arith::Sub:
        if (c.needs(0)) g[0] = c.grad;
        if (c.needs(1)) {
          const double k = a == Arith::Sub ? -v : v;
          g[1] = sum_to(k == 1.0 ? c.grad : mul(c.grad, k), so);
        }
        break;
      case Arith::Mul:
        if (c.needs(0)) g[0] = mul(c.grad, c.saved(0));
        if (c.needs(1)) g[1] = sum_to(mul(c.grad, c.saved(1)), so);
        break;
      case Arith::Div:
        // d(s/o)/do = -s/o^2, as -(s/o)/o like the out-of-place div.
        if (c.needs(0)) g[0] = div(c.grad, c.saved(0));
        if (c.needs(1))
          g[1] = sum_to(mul(neg(c.grad), div(div(c.saved(1), c.saved(0)), c.saved(0))), so);
        break;
    }
    return g;
  });
  return self;
}

DTensor& arith_(DTensor& self, Arith a, const char* op, Scalar other) {
  check_self(op, self);
  if (!operand_layout(op, scalar_id(a), self, nullptr, {static_cast<int64_t>(other.kind())}, true,
                      /*or_null=*/true)) {
    // No layout of the scalar form keeps self (a scalar added to a
    // Partial(sum)): the one-element DTensor form may (it adds the value on
    // one rank of each group); if it cannot either, its error says why.
    return arith_(self, a, op, scalar_operand(other, self), Scalar(1));
  }
  const bool recording = autograd::recording({&self});
  std::optional<DTensor> prev;
  if (recording) prev = before(self);
  InplaceCheck verify(self, {});
  each_shard(self, [&](Tensor& s) { apply_local(a, s, other); });
  verify.check(self, op, [&](Tensor& r, const std::vector<Tensor>&) { apply_local(a, r, other); });
  if (!recording) return self;
  const double v = other.to_double();
  rebase(self, op, {&*prev}, {}, [a, v](const Context& c) {
    switch (a) {
      case Arith::Mul: return Grads{mul(c.grad, v)};
      case Arith::Div: return Grads{div(c.grad, v)};
      default: return Grads{c.grad};
    }
  });
  return self;
}

}  // namespace

DTensor& DTensor::add_(const DTensor& other, Scalar alpha) {
  return arith_(*this, Arith::Add, "add_", other, alpha);
}
DTensor& DTensor::sub_(const DTensor& other, Scalar alpha) {
  return arith_(*this, Arith::Sub, "sub_", other, alpha);
}
DTensor& DTensor::mul_(const DTensor& other) {
  return arith_(*this, Arith::Mul, "mul_", other, Scalar(1));
}
DTensor& DTensor::div_(const DTensor& other) {
  return arith_(*this, Arith::Div, "div_", other, Scalar(1));
}
DTensor& DTensor::add_(Scalar other) { return arith_(*this, Arith::Add, "add_", other); }
DTensor& DTensor::sub_(Scalar other) { return arith_(*this, Arith::Sub, "sub_", other); }
DTensor& DTensor::mul_(Scalar other) { return arith_(*this, Arith::Mul, "mul_", other); }
DTensor& DTensor::div_(Scalar other) { return arith_(*this, Arith::Div, "div_", other); }

DTensor& DTensor::add_(const Tensor& other, Scalar alpha) {
  check_self("add_", *this);
  return add_(replicated("add_", other, *this), alpha);
}
DTensor& DTensor::sub_(const Tensor& other, Scalar alpha) {
  check_self("sub_", *this);
  return sub_(replicated("sub_", other, *this), alpha);
}
DTensor& DTensor::mul_(const Tensor& other) {
  check_self("mul_", *this);
  return mul_(replicated("mul_", other, *this));
}
DTensor& DTensor::div_(const Tensor& other) {
  check_self("div_", *this);
  return div_(replicated("div_", other, *this));
}
DTensor& DTensor::copy_(const Tensor& src) {
  check_self("copy_", *this);
  return copy_(replicated("copy_", src, *this));
}

DTensor& DTensor::copy_(const DTensor& src) {
  check_self("copy_", *this);
  check_operand("copy_", *this, src);
  // Self's old value is dropped, so copy_ is `0 * self + src`: add's rule
  // says what src may be (a Partial(sum) self takes a Partial(sum) src; a
  // Partial(avg|max|min) self a replicated one, every piece then holding
  // the value).
  const Placements want = *operand_layout("copy_", OpId::Add, *this, &src, {}, /*cast=*/false);
  InplaceCheck verify(*this, {&src});
  std::vector<char> zero;
  const std::optional<DTensor> moved = move_operand(src, want, &zero);
  const DTensor& o = moved ? *moved : src;
  const bool recording = autograd::recording({this, &src});
  std::optional<DTensor> prev;
  if (recording) prev = before(*this);
  size_t i = 0;
  each_shard(*this, o, [&](Tensor& s, const Tensor& x) {
    if (!zero.empty() && zero[i++]) s.fill_(0);
    else s.copy_(x);
  });
  verify.check(*this, "copy_", [](Tensor& r, const std::vector<Tensor>& in) { r.copy_(in[0]); });
  if (!recording) return *this;
  rebase(*this, "copy_", {&*prev, &src}, {}, [so = src.shape()](const Context& c) {
    Grads g(2);
    if (c.needs(0)) g[0] = zeros_like(c.grad);
    if (c.needs(1)) g[1] = sum_to(c.grad, so);
    return g;
  });
  return *this;
}

DTensor& DTensor::fill_(Scalar value) {
  check_self("fill_", *this);
  // Every piece of a Partial(avg|max|min) holding the value gives the
  // value; a Partial(sum) holds it on one rank (copy_ of a replicated 0-d
  // DTensor does that), unless it is zero.
  bool local_fill = true;
  for (const Placement& p : placements())
    if (p.is_partial() && p.reduce_op() == ReduceOp::Sum && value.to_double() != 0)
      local_fill = false;
  const bool recording = autograd::recording({this});
  std::optional<DTensor> prev;
  if (recording) prev = before(*this);
  if (local_fill) {
    InplaceCheck verify(*this, {});
    each_shard(*this, [&](Tensor& s) { s.fill_(value); });
    verify.check(*this, "fill_", [&](Tensor& r, const std::vector<Tensor>&) { r.fill_(value); });
  } else {
    const DTensor v = scalar_operand(value, *this);
    NoGradGuard no_grad;  // the node recorded below is the op's
    copy_(v);
  }
  if (recording)
    rebase(*this, "fill_", {&*prev}, {},
           [](const Context& c) { return Grads{zeros_like(c.grad)}; });
  return *this;
}
DTensor& DTensor::zero_() { return fill_(0); }

DTensor& DTensor::addcmul_(const DTensor& t1, const DTensor& t2, Scalar value) {
  check_self("addcmul_", *this);
  check_operand("addcmul_", *this, t1);
  check_operand("addcmul_", *this, t2);
  const bool recording = autograd::recording({this, &t1, &t2});
  std::optional<DTensor> prev;
  if (recording) prev = before(*this);
  {
    // The product takes the layout mul's rule picks; adding it is add_'s.
    NoGradGuard no_grad;
    DTensor p = mul(t1.detach(), t2.detach());
    add_(p, value);
  }
  if (!recording) return *this;
  const double v = value.to_double();
  rebase(*this, "addcmul_", {&*prev, &t1, &t2}, {t1.detach(), t2.detach()},
         [v, s1 = t1.shape(), s2 = t2.shape()](const Context& c) {
           Grads g(3);
           if (c.needs(0)) g[0] = c.grad;
           const DTensor gv = v == 1.0 ? c.grad : mul(c.grad, v);
           if (c.needs(1)) g[1] = sum_to(mul(gv, c.saved(1)), s1);
           if (c.needs(2)) g[2] = sum_to(mul(gv, c.saved(0)), s2);
           return g;
         });
  return *this;
}

DTensor& DTensor::addcdiv_(const DTensor& t1, const DTensor& t2, Scalar value) {
  check_self("addcdiv_", *this);
  check_operand("addcdiv_", *this, t1);
  check_operand("addcdiv_", *this, t2);
  const bool recording = autograd::recording({this, &t1, &t2});
  std::optional<DTensor> prev;
  if (recording) prev = before(*this);
  {
    NoGradGuard no_grad;
    DTensor q = div(t1.detach(), t2.detach());
    add_(q, value);
  }
  if (!recording) return *this;
  const double v = value.to_double();
  rebase(*this, "addcdiv_", {&*prev, &t1, &t2}, {t1.detach(), t2.detach()},
         [v, s1 = t1.shape(), s2 = t2.shape()](const Context& c) {
           Grads g(3);
           if (c.needs(0)) g[0] = c.grad;
           const DTensor gv = v == 1.0 ? c.grad : mul(c.grad, v);
           const DTensor& a = c.saved(0);
           const DTensor& b = c.saved(1);
           if (c.needs(1)) g[1] = sum_to(div(gv, b), s1);
           if (c.needs(2)) g[2] = sum_to(mul(dtensor::neg(gv), div(div(a, b), b)), s2);
           return g;
         });
  return *this;
}

DTensor& DTensor::lerp_(const DTensor& end, Scalar weight) {
  check_self("lerp_", *this);
  check_operand("lerp_", *this, end);
  const bool recording = autograd::recording({this, &end});
  std::optional<DTensor> prev;
  if (recording) prev = before(*this);
  {
    // self += w * (end - self): linear in self's pieces, so add_'s rule
    // (the difference is computed on whatever layout sub picks) is right
    // for every Partial self may keep.
    NoGradGuard no_grad;
    DTensor step = mul(sub(end.detach(), detach()), weight);
    add_(step);
  }
  if (!recording) return *this;
  const double w = weight.to_double();
  rebase(*this, "lerp_", {&*prev, &end}, {}, [w, se = end.shape()](const Context& c) {
    Grads g(2);
    if (c.needs(0)) g[0] = mul(c.grad, 1.0 - w);
    if (c.needs(1)) g[1] = sum_to(mul(c.grad, w), se);
    return g;
  });
  return *this;
}

DTensor& DTensor::lerp_(const DTensor& end, const DTensor& weight) {
  check_self("lerp_", *this);
  check_operand("lerp_", *this, end);
  check_operand("lerp_", *this, weight);
  const bool recording = autograd::recording({this, &end, &weight});
  std::optional<DTensor> prev, old;
  if (recording) {
    prev = before(*this);
    if (weight.requires_grad()) old = old_value(*this);
  }
  {
    NoGradGuard no_grad;
    DTensor step = mul(sub(end.detach(), detach()), weight.detach());
    add_(step);
  }
  if (!recording) return *this;
  std::vector<DTensor> saved{weight.detach(), end.detach()};
  if (old) saved.push_back(*old);
  rebase(*this, "lerp_", {&*prev, &end, &weight}, std::move(saved),
         [se = end.shape(), sw = weight.shape()](const Context& c) {
           Grads g(3);
           const DTensor& w = c.saved(0);
           if (c.needs(0)) g[0] = mul(c.grad, sub(1, w));
           if (c.needs(1)) g[1] = sum_to(mul(c.grad, w), se);
           if (c.needs(2)) g[2] = sum_to(mul(c.grad, sub(c.saved(1), c.saved(2))), sw);
           return g;
         });
  return *this;
}

DTensor& DTensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  check_self("clamp_", *this);
  DT_CHECK(min || max, "clamp_: at least one of min and max must be given");
  // clamp is nondecreasing: it commutes with Partial(max|min) and shards
  // pass, as relu's do; a sum or average of clamped pieces is not the
  // clamped sum. relu's candidates say exactly that.
  operand_layout("clamp_", OpId::Relu, *this, nullptr);
  const bool recording = autograd::recording({this});
  std::optional<DTensor> prev, old;
  if (recording) {
    prev = before(*this);
    old = old_value(*this);
  }
  InplaceCheck verify(*this, {});
  auto clamp = [&](Tensor& s) {
    // max first, then min, as PyTorch (min > max gives max everywhere).
    if (min) s.masked_fill_(lt(s, *min), *min);
    if (max) s.masked_fill_(gt(s, *max), *max);
  };
  each_shard(*this, clamp);
  verify.check(*this, "clamp_", [&](Tensor& r, const std::vector<Tensor>&) { clamp(r); });
  if (!recording) return *this;
  rebase(*this, "clamp_", {&*prev}, {*old}, [min, max](const Context& c) {
    // Gradient passes where min <= x <= max (PyTorch's clamp_backward).
    DTensor g = c.grad;
    if (min) g = masked_fill(g, lt(c.saved(0), *min), 0);
    if (max) g = masked_fill(g, gt(c.saved(0), *max), 0);
    return Grads{g};
  });
  return *this;
}

}  // namespace dtensor
