// In-place DTensor ops (add_, mul_, copy_, fill_, clamp_, ...): the result
// is written into self's own shards, so self keeps its placements and its
// storage, and every shard's version counter moves (autograd refuses a saved
// tensor changed since it was saved).
//
// Layout: self never moves. The candidates of the out-of-place op's rule
// (pointwise_rule(), the same table add/mul/... propagate with) whose input 0
// and output are self's placement on a mesh dim say what the other operand
// may be there; it is redistributed to that (the one it already has when it
// is among them). No candidate means the op would need self elsewhere, which
// an in-place op cannot do: dtensor::Error names the op, self's placements
// and those the out-of-place op would take. Linearity comes from the rule:
// a Partial(sum) self adds only a Partial(sum) other, so a replicated other
// becomes Partial(sum) (R->P keeps the value on one rank of each group) and
// is added once, not once per rank; a scalar added to a Partial(sum) takes
// the same path as a one-element DTensor. The decision is the in-place
// rule's OpRule::decide (keep_self), so it is cached with the out-of-place
// propagations under a schema marked kInPlace: a repeated in-place op
// costs one cache lookup, as an out-of-place one does.
//
// Autograd: in grad mode a leaf that requires grad must not change (its
// gradient would belong to a value that no longer exists); optimizers
// update parameters under NoGradGuard. Otherwise, when self or an operand
// requires grad, the op is recorded as a node whose input 0 is self's
// history before the op, and self's Meta (shared by its copies) is rebased
// onto it. Values of self the backward needs are cloned before they are
// overwritten.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/pointwise_rule.h"

namespace dtensor {

using namespace dispatch;
using autograd::Context;
using autograd::Grads;
using autograd::sum_to;

namespace {

void check_self(const char* op, const DTensor& self) {
  DT_CHECK(self.defined(), op, ": self is an empty DTensor (default-constructed); assign it ",
           "a DTensor first");
  DT_CHECK(!(is_grad_enabled() && self.is_leaf() && self.requires_grad()), op,
           ": a leaf DTensor that requires grad (", self.spec().to_string(),
           ") is used in an in-place operation; change parameters under NoGradGuard, or "
           "clone() the tensor first");
}

void check_operand(const char* op, const DTensor& self, const DTensor& other) {
  DT_CHECK(other.defined(), op, ": an operand is an empty DTensor (default-constructed)");
  DT_CHECK(other.mesh() == self.mesh(), op, ": self lives on ", self.mesh(),
           " but an operand lives on ", other.mesh(), "; redistribute it to self's mesh first");
}

// The result of the out-of-place op must have self's shape (self never
// grows; checked while deciding the layout, keep_self) and a dtype self
// can hold (checked on every call: copy_ casts, the others may not).
void check_shape(const char* op, const DTensorSpec& self, const TensorMeta& out) {
  DT_CHECK(out.shape == self.shape(), op, ": output with shape ", self.shape(),
           " doesn't match the broadcast shape ", out.shape,
           " (an in-place op cannot broadcast self)");
}

void check_dtype(const char* op, const DTensor& self, const TensorMeta& out, bool cast) {
  if (!cast) return;
  DT_CHECK(!(is_floating(out.dtype) && !is_floating(self.dtype())) &&
               !(out.dtype != DType::Bool && self.dtype() == DType::Bool),
           op, ": result type ", out.dtype, " can't be cast to the desired output type ",
           self.dtype(), " of self (", self.spec().to_string(), ")");
}

// Schemas of in-place ops end with this argument, so that the propagation
// cache keeps their layouts apart from the out-of-place op's (the base
// rule reads its arguments from the front and never sees it).
constexpr int64_t kInPlace = INT64_MIN + 0x1f;

// The schema without kInPlace: the out-of-place op's.
OpSchema out_of_place(const OpSchema& keyed) {
  OpSchema s(keyed.op, {});
  for (int i = 0; i < keyed.num_inputs; ++i) s.push_input(keyed.inputs[i]);
  for (int i = 0; i + 1 < keyed.num_args; ++i) s.push_arg(keyed.args[i]);
  return s;
}

[[noreturn]] void self_would_move(const OpSchema& keyed, const OpRule& rule, size_t mesh_dim) {
  const DTensorSpec& self = keyed.input(0);
  std::string need = "other placements";
  try {
    const OpRule& base = pointwise_rule();
    const auto s = propagate(out_of_place(keyed), base);
    need = to_string(s->input_targets[0]->placements());
  } catch (const Error&) {
  }
  DT_THROW(rule.name, ": self ", self.to_string(), " would have to be redistributed: no layout ",
           "of ", rule.name, " keeps ", to_string(self.placements()[mesh_dim]), " on mesh dim ",
           mesh_dim, " (the out-of-place op takes self as ", need,
           "); an in-place op writes into self's shards and never moves them, so redistribute ",
           "self first");
}

// OpRule::decide of the in-place ops: self (input 0) stays where it is; on
// each mesh dim, the candidates of the out-of-place op whose input 0 and
// output are self's placement there say what the other operand (input 1,
// if any) may be, and it keeps its placement when that is among them, else
// takes the first. Throws when no candidate keeps self on some mesh dim.
OutputSharding keep_self(const OpSchema& keyed, const OpRule& rule) {
  const OpRule& base = pointwise_rule();
  const TensorMeta out = base.output_meta(keyed);
  check_shape(rule.name, keyed.input(0), out);
  std::vector<DimStrategy> candidates;
  base.strategies(keyed, out, candidates);
  const DTensorSpec& self = keyed.input(0);
  const DTensorSpec* other = keyed.num_inputs > 1 ? &keyed.input(1) : nullptr;
  Placements want;
  for (size_t k = 0; k < self.placements().size(); ++k) {
    const Placement& sp = self.placements()[k];
    std::optional<Placement> pick;
    for (const DimStrategy& st : candidates) {
      if (!(st.in[0] == sp && st.out == sp)) continue;
      if (!other) {
        pick = sp;
        break;
      }
      if (!pick) pick = st.in[1];
      if (st.in[1] == other->placements()[k]) {
        pick = st.in[1];
        break;
      }
    }
    if (!pick) self_would_move(keyed, rule, k);
    want.push_back(*pick);
  }
  OutputSharding s{DTensorSpec(self.mesh(), self.placements(), out), {}, false, 0, {}};
  s.input_targets[0] = self;
  if (other) {
    s.input_targets[1] = other->with_placements(want);
    s.needs_redistribute = !(*s.input_targets[1] == *other);
  }
  return s;
}

// The in-place form of the op `id` on self (and `other`, if given; args:
// the schema's arguments): the layout `other` must have (self's own
// placements when there is none), cached like any propagation. Throws when
// self would have to move; returns nullopt instead when `or_null` (the
// caller has another way).
std::optional<Placements> operand_layout(const char* op, OpId id, const DTensor& self,
                                         const DTensor* other,
                                         std::initializer_list<int64_t> args = {},
                                         bool cast = true, bool or_null = false) {
  OpSchema keyed(id, {&self.spec()}, args);
  if (other) keyed.push_input(&other->spec());
  keyed.push_arg(kInPlace);
  const OpRule& base = pointwise_rule();
  const OpRule rule{op, base.output_meta, base.strategies, base.accepts, false, keep_self};
  std::shared_ptr<const OutputSharding> s;
  if (!or_null) {
    s = propagate(keyed, rule);
  } else {
    try {
      s = propagate(keyed, rule);
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  check_dtype(op, self, s->output.meta(), cast);
  return s->input_targets[other ? 1 : 0]->placements();
}

// `other` moved to `want` (detached: the op records its own node), or
// nullopt when it has that layout already (the caller reads its shards
// as they are; no copy of the DTensor on the common path). The
// planner refuses S->P and P(a)->P(b): a Partial target the operand lacks
// is reached through Replicate, and then taken locally and exactly: a
// Partial(sum) keeps the value on the first rank of each group and zeros
// on the others (R->P's x/n split would round), the other kinds keep it on
// every rank (their reduction of equal pieces is the value). With `zero`,
// those zeros are not made: zero[i] says shard i stands for zeros (its
// data is the value, to be ignored), which add_ skips and copy_ fills;
// `zero` stays empty when no shard does.
std::optional<DTensor> move_operand(const DTensor& other, const Placements& want,
                                    std::vector<char>* zero = nullptr) {
  if (other.placements() == want) return std::nullopt;
  DTensor x = other.detach();
  Placements step = want;
  std::vector<int> zero_dims;
  bool new_partial = false;
  for (size_t k = 0; k < want.size(); ++k) {
    if (want[k].is_partial() && !(x.placements()[k] == want[k])) {
      step[k] = Replicate();
      new_partial = true;
      if (want[k].reduce_op() == ReduceOp::Sum) zero_dims.push_back(static_cast<int>(k));
    }
  }
  if (!(x.placements() == step)) x = x.redistribute(step);
  if (!new_partial) return x;
  const DeviceMesh& mesh = x.mesh();
  auto zeroed = [&](int rank) {
    for (int k : zero_dims)
      if (mesh.group_index(rank, k) != 0) return true;
    return false;
  };
  if (zero) {
    zero->assign(x.local().size(), 0);
    const auto& shards = x.local().shards();
    for (size_t i = 0; i < shards.size(); ++i) (*zero)[i] = zeroed(shards[i].first);
    return DTensor(x.spec().with_placements(want), x.local());
  }
  LocalTensor local = x.local().map(
      [&](int rank, const Tensor& t) { return zeroed(rank) ? zeros_like(t) : t; });
  return DTensor(x.spec().with_placements(want), std::move(local));
}

// An in-place op that leaves a shard as it is still counts as a change of
// it, on every rank alike (under MPI a rank that skipped the bump would
// disagree with the others about a saved tensor).
void touch(Tensor& s) {
  if (s.storage()) s.storage()->bump_version();
}

// f(self's shard, other's shard) for every held rank; other holds the
// same ranks (same mesh).
template <class F>
void each_shard(const DTensor& self, const DTensor& other, F&& f) {
  const auto& mine = self.local().shards();
  const auto& theirs = other.local().shards();
  DT_CHECK(mine.size() == theirs.size(), "internal error: in-place operand holds ",
           theirs.size(), " shards, self ", mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    Tensor t = mine[i].second;  // shares the shard's storage
    f(t, theirs[i].second);
  }
}

template <class F>
void each_shard(const DTensor& self, F&& f) {
  for (const auto& [rank, shard] : self.local().shards()) {
    Tensor t = shard;
    f(t);
  }
}

// VerifyMode: self after the op against the plain in-place op applied to
// the full tensors of self and the operands as they were before it (taken
// before the op, since an operand may share self's memory).
class InplaceCheck {
 public:
  InplaceCheck(const DTensor& self, std::initializer_list<const DTensor*> operands) {
    if (!verify_detail::should_verify() || self.local().empty()) return;
    on_ = true;
    verify_detail::CheckScope scope;
    before_ = self.full_tensor().clone();
    for (const DTensor* o : operands) operands_.push_back(o->full_tensor().clone());
  }
  // f(want, operands) applies the plain op to `want`, a copy of self before.
  template <class F>
  void check(const DTensor& self, const char* op, F&& f) {
    if (!on_) return;
    verify_detail::CheckScope scope;
    Tensor want = before_.clone();
    f(want, operands_);
    verify_detail::expect_match(self.full_tensor(), want,
                                std::string(op) + " of " + self.spec().to_string(),
                                "the plain in-place op on the full tensors");
    record_verification();
  }

 private:
  bool on_ = false;
  Tensor before_;
  std::vector<Tensor> operands_;
};

// ---- autograd --------------------------------------------------------------------------

// Self as an input of the op's node: a DTensor whose gradient edge is
// self's history before the op (self's own Meta is about to be rebased).
DTensor before(const DTensor& self) {
  DTensor prev = self.detach();
  const auto& m = autograd::meta_of(self);
  if (m && m->requires_grad) {
    auto pm = std::make_shared<autograd::Meta>();
    pm->requires_grad = true;
    pm->grad_fn = m->grad_fn;
    pm->accumulator = m->accumulator;
    autograd::MetaAccess::of(prev) = std::move(pm);
  }
  return prev;
}

// Whether some held shard of b uses the storage of a's shard of that rank.
bool shares_memory(const DTensor& a, const DTensor& b) {
  const auto& x = a.local().shards();
  const auto& y = b.local().shards();
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    if (x[i].second.storage() && x[i].second.storage() == y[i].second.storage()) return true;
  return false;
}

// The value of self before the op, for a backward that reads it.
DTensor old_value(const DTensor& self) {
  NoGradGuard no_grad;
  return clone(self.detach());
}

// Makes self (and every copy sharing its Meta) the output of a node `op`
// over `inputs` (inputs[0]: before(self)).
void rebase(DTensor& self, const char* op, const std::vector<const DTensor*>& inputs,
            std::vector<DTensor> saved, autograd::BackwardFn fn) {
  DTensor out = self.detach();
  autograd::record(out, op, inputs, std::move(saved), std::move(fn));
  auto& m = autograd::MetaAccess::of(self);
  if (!m) m = std::make_shared<autograd::Meta>();
  if (m->grad_fn && m->grad_fn->retained.lock() == m) m->grad_fn->retained.reset();
  m->requires_grad = true;
  m->grad_fn = autograd::meta_of(out)->grad_fn;
  if (m->retains_grad) m->grad_fn->retained = m;
}

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
