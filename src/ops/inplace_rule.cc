// The layout of an in-place DTensor op (see inplace.cc for the ops).
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
#include "dispatch/dispatch.h"
#include "ops/inplace.h"
#include "ops/pointwise_rule.h"

namespace dtensor {

using namespace dispatch;

namespace inplace_detail {

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

namespace {

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

// Whether the rule's candidate placement is self's on a mesh dim. The
// pointwise rule's candidates are in the natural shard order; a self with
// an order (S(0)[1],S(0)[0]: fully_shard inside tp's Shard(0)) is the same
// shard on each mesh dim, so it matches up to the order.
bool same_up_to_order(const Placement& candidate, const Placement& self) {
  if (candidate.is_shard() && self.is_shard()) return candidate.dim() == self.dim();
  return candidate == self;
}

// OpRule::decide of the in-place ops: self (input 0) stays where it is; on
// each mesh dim, the candidates of the out-of-place op whose input 0 and
// output are self's placement there (up to a shard order) say what the
// other operand (input 1, if any) may be, and it keeps its placement when
// that is among them (or when it is laid out exactly as self), else takes
// the first. Throws when no candidate keeps self on some mesh dim.
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
      if (!(same_up_to_order(st.in[0], sp) && same_up_to_order(st.out, sp))) continue;
      if (!other) {
        pick = sp;
        break;
      }
      const Placement& op = other->placements()[k];
      if (other->placements() == self.placements() && same_up_to_order(st.in[1], op)) {
        pick = op;  // laid out as self, order and all
        break;
      }
      // Beside an ordered self's shard, the operand's shard takes self's
      // order (a natural-order one would hold other pieces).
      if (sp.shard_order() >= 0 && st.in[1].is_shard()) {
        const Placement ordered = Shard(st.in[1].dim(), sp.shard_order());
        if (!pick) pick = ordered;
        if (ordered == op) break;
        continue;
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

}  // namespace

std::optional<Placements> operand_layout(const char* op, OpId id, const DTensor& self,
                                         const DTensor* other,
                                         std::initializer_list<int64_t> args, bool cast,
                                         bool or_null) {
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

std::optional<DTensor> move_operand(const DTensor& other, const Placements& want,
                                    std::vector<char>* zero) {
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

}  // namespace inplace_detail

}  // namespace dtensor
