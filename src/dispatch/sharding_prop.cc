// Sharding propagation: the candidate layouts of an op, expanded over the
// mesh, the cheapest one chosen by the planner's redistribute cost, and the
// result cached by OpSchema in a bounded LRU.
//
// Choosing: every combination of one per-mesh-dim candidate per mesh dim is
// a candidate layout. Its cost is the sum of the cheapest plans moving each
// input to the layout's input placements; a move the rules forbid (S->P,
// P(a)->P(b)) rules the candidate out, and so does moving an input with
// collectives to a layout that shards a dim over more ranks than it has
// elements (a local chunk to such a layout is fine). R->P is a local move,
// so a rule's linear candidates (P(sum) + P(sum) -> P(sum)) also serve a
// replicated operand: P(sum) + R stays partial, as in PyTorch.
// Pricing every layout with the planner would cost microseconds each (a
// 3-input op on a 3-d mesh has ~1000 layouts), so the layouts are first
// ranked by a cheap per-mesh-dim estimate (each transform's collective on
// the input's local bytes, keeping a placement ranked before a free local
// chunk); then the best-ranked valid layouts, at most kMaxPriced of them,
// are priced exactly, in rank order, and the least cost wins (the earlier
// on a tie). A layout needing no redistribution ranks first and ends the
// search, so it is taken whenever one exists; an op that keeps any layout
// for its arguments (a full-range slice, OpRule::keeps_layout) keeps its
// input's without a search. An op without a rule, or
// whose rule admits no candidate, runs on Replicate: slower, never wrong,
// and noted once in the debug notes.
#include <algorithm>
#include <limits>

#include "common/lru_cache.h"
#include "dispatch/dispatch.h"
#include "mesh/mesh_cache.h"

namespace dtensor::dispatch {

constinit thread_local KeptOutputs* kept_outputs = nullptr;

void OpSchema::push_arg(int64_t a) {
  DT_CHECK(num_args < kMaxArgs, "OpSchema: too many arguments");
  args[num_args++] = a;
  hash = (hash ^ static_cast<size_t>(a)) * kSchemaHashPrime;  // rehash()'s last step, once more
}

void OpSchema::push_input(const DTensorSpec* spec) {
  DT_CHECK(num_inputs < kMaxInputs, "OpSchema: too many inputs");
  inputs[num_inputs++] = spec;
  rehash();
}

void OpSchema::set_input(int i, const DTensorSpec* spec) {
  DT_CHECK(i >= 0 && i < num_inputs, "OpSchema: no input ", i);
  inputs[i] = spec;
  rehash();
}

namespace {

// The owning form of an OpSchema, for the cache.
struct Key {
  OpId op;
  int num_inputs;
  std::optional<DTensorSpec> inputs[kMaxInputs];
  int num_args;
  int64_t args[kMaxArgs];
  size_t hash;

  explicit Key(const OpSchema& s) : op(s.op), num_inputs(s.num_inputs), num_args(s.num_args),
                                    hash(s.hash) {
    for (int i = 0; i < num_inputs; ++i) inputs[i] = *s.inputs[i];
    for (int i = 0; i < num_args; ++i) args[i] = s.args[i];
  }
  const DTensorSpec& input(int i) const { return *inputs[i]; }
};

// Equality of schemas, owning (Key) or not (OpSchema), in any mix.
template <class A, class B>
bool same_schema(const A& a, const B& b) {
  if (a.hash != b.hash || a.op != b.op || a.num_inputs != b.num_inputs ||
      a.num_args != b.num_args)
    return false;
  for (int i = 0; i < a.num_args; ++i)
    if (a.args[i] != b.args[i]) return false;
  for (int i = 0; i < a.num_inputs; ++i)
    if (!(a.input(i) == b.input(i))) return false;
  return true;
}

struct Hash {
  using is_transparent = void;
  size_t operator()(const Key& k) const { return k.hash; }
  size_t operator()(const OpSchema& s) const { return s.hash; }
};

struct Equal {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const { return same_schema(a, b); }
};

using PropagationCache = LruCache<Key, OutputSharding, Hash, Equal>;

PropagationCache& cache();

// A mesh root lost its last user: no schema on it can be asked for again.
void drop_root(const void* root) {
  cache().erase_if([root](const Key& k, const OutputSharding& s) {
    for (int i = 0; i < k.num_inputs; ++i)
      if (MeshCacheAccess::root_id(k.inputs[i]->mesh()) == root) return true;
    return MeshCacheAccess::root_id(s.output.mesh()) == root;
  });
}

PropagationCache& cache() {
  static PropagationCache* c = [] {
    on_root_released(drop_root);
    return new PropagationCache(8192);  // never destroyed: usable during exit
  }();
  return *c;
}

std::string placements_of(const OpSchema& s) {
  std::string out;
  for (int i = 0; i < s.num_inputs; ++i)
    out += (i ? " and " : "") + to_string(s.input(i).placements());
  return out;
}

// Whether some tensor dim is sharded over more ranks than it has elements.
bool over_sharded(const DTensorSpec& spec) {
  int64_t ways[kMaxDims];
  for (int64_t d = 0; d < spec.ndim(); ++d) ways[d] = 1;
  for (size_t i = 0; i < spec.placements().size(); ++i)
    if (spec.placements()[i].is_shard())
      ways[spec.placements()[i].dim()] *= spec.mesh().size(static_cast<int>(i));
  for (int64_t d = 0; d < spec.ndim(); ++d)
    if (ways[d] > 1 && ways[d] > spec.shape()[d]) return true;
  return false;
}

// How many valid layouts are priced exactly (planner calls) per choice.
constexpr int kMaxPriced = 8;
// At most this many whole-mesh layouts are ranked; beyond it each mesh dim
// keeps only its best-estimated candidates.
constexpr uint64_t kMaxLayouts = 4096;
constexpr double kForbidden = std::numeric_limits<double>::infinity();
// Free, but ranked after keeping the placement (a layout needing no
// redistribution wins a tie).
constexpr double kLocalMove = 1e-6;

// An estimate of the cost of moving input `have` to placement `want` on mesh
// dim m alone: the elementary transform's collective on the input's local
// bytes (SEMANTICS.md's cost model), ignoring what the other mesh dims do.
// Cheap, for ranking only; a move the rules forbid (S -> P, P(a) -> P(b)) is
// infinite.
double estimate_dim(const DTensorSpec& have, int m, Placement want, double base_us) {
  const Placement p = have.placements()[m];
  if (p == want) return 0;
  const DeviceMesh& mesh = have.mesh();
  const int64_t n = mesh.size(m);
  // R -> P is local (prepare_input); S -> P and P(a) -> P(b) are not moves.
  if (want.is_partial()) return p.is_replicate() ? kLocalMove : kForbidden;
  // Nothing moves on a size-1 dim, but keeping the placement it has is
  // still better: the estimate ranks (and trims) the candidates, and a free
  // change ranked alike could push the unchanged layout out of the priced
  // few, leaving a needless S(0) on a size-1 dim in the output.
  if (n == 1) return kLocalMove / 2;
  if (p.is_replicate()) return kLocalMove;  // R -> S: a local chunk
  const double bytes = static_cast<double>(have.global_bytes()) /
                       static_cast<double>(std::max<int64_t>(have.num_shards(), 1));
  const LinkCost link = mesh.link(mesh.root_dims(m));
  if (p.is_shard())
    return want.is_replicate() ? all_gather_cost(bytes * static_cast<double>(n), n, link, base_us)
                               : all_to_all_cost(bytes, n, link, base_us);
  return want.is_replicate() ? all_reduce_cost(bytes, n, link, base_us)
                             : reduce_scatter_cost(bytes, n, link, base_us);
}

// Per mesh dim: the candidate indices, best estimate first (ties keep the
// rule's order), and their estimates; trimmed so that at most kMaxLayouts
// whole-mesh layouts remain.
struct RankedOptions {
  std::vector<size_t> index[kMaxDims];
  std::vector<double> estimate[kMaxDims];
};

RankedOptions ranked_options(const OpSchema& schema, const std::vector<DimStrategy>& per_dim,
                             int nd) {
  const size_t c = per_dim.size();
  const double base_us = schema.input(0).mesh().topology().base_us;
  size_t keep = c;
  while (keep > 1) {
    uint64_t total = 1;
    for (int m = 0; m < nd && total <= kMaxLayouts; ++m) total *= keep;
    if (total <= kMaxLayouts) break;
    --keep;
  }
  RankedOptions r;
  for (int m = 0; m < nd; ++m) {
    std::vector<double> est(c, 0);
    for (size_t j = 0; j < c; ++j)
      for (int i = 0; i < schema.num_inputs; ++i)
        est[j] += estimate_dim(schema.input(i), m, per_dim[j].in[i], base_us);
    std::vector<size_t>& idx = r.index[m];
    for (size_t j = 0; j < c; ++j) idx.push_back(j);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return est[x] < est[y]; });
    idx.resize(std::min(keep, c));
    for (size_t j : idx) r.estimate[m].push_back(est[j]);
  }
  return r;
}

OutputSharding choose(const OpSchema& schema, const OpRule& rule) {
  const DeviceMesh& mesh = schema.input(0).mesh();
  for (int i = 1; i < schema.num_inputs; ++i) {
    const DeviceMesh& other = schema.input(i).mesh();
    DT_CHECK(other == mesh, rule.name, ": inputs live on different meshes: ", mesh, " and ",
             other,
             mesh.to_string() == other.to_string()
                 ? " (two meshes built separately are different meshes even when they look "
                   "alike: build the mesh once and share it)"
                 : "");
  }
  TensorMeta out_meta;
  try {
    out_meta = rule.output_meta(schema);
  } catch (const Error& e) {
    // The plain op's message, prefixed with the op's name as the plain op does.
    const std::string msg = e.what();
    const std::string prefix = std::string(rule.name) + ": ";
    DT_THROW(msg.rfind(prefix, 0) == 0 ? "" : prefix, msg, " (DTensor placements ",
             placements_of(schema), " on ", mesh, ")");
  }
  // An op that keeps its input's layout for these arguments (a full-range
  // slice, OpRule::keeps_layout) runs there, with no search: nothing is
  // cheaper than no move, and its candidates need not include it (a cut
  // gathers the dim it cuts: for x[:] of S(0),R the cheapest move, a box
  // exchange to S(1),S(1), would win).
  if (rule.keeps_layout != nullptr && schema.num_inputs == 1 &&
      rule.keeps_layout(schema, out_meta)) {
    OutputSharding same{DTensorSpec(mesh, schema.input(0).placements(), out_meta), {}, false, 0, {}};
    same.input_targets[0] = schema.input(0);
    return same;
  }
  // Shard orders (spec.h): the rules describe one mesh dim at a time and
  // offer natural shards only (checked below), and every input is moved to
  // exactly the spec a candidate names, compared with its order; so an
  // input with an order is redistributed to a natural layout before any
  // kernel sees it, and an output never claims an order its data does not
  // have. Teaching every rule about orders instead would let one rule that
  // rebuilds Shard(d) from an input's dim drop the order silently. The one
  // exception keeps the layout where that is provably right: an elementwise
  // op whose inputs all have the output's shape and the same placements,
  // none Partial (each output shard is then the op on the input shards of
  // the same box, whatever the order).
  if (rule.elementwise && has_shard_order(schema.input(0).placements())) {
    const Placements& p = schema.input(0).placements();
    bool keep = true;
    for (const Placement& q : p) keep = keep && !q.is_partial();
    for (int i = 0; i < schema.num_inputs; ++i)
      keep = keep && schema.input(i).placements() == p && schema.input(i).shape() == out_meta.shape;
    if (keep) {
      OutputSharding same{DTensorSpec(mesh, p, out_meta), {}, false, 0, {}};
      for (int i = 0; i < schema.num_inputs; ++i) same.input_targets[i] = schema.input(i);
      return same;
    }
  }
  std::vector<DimStrategy> per_dim;
  if (rule.strategies != nullptr) rule.strategies(schema, out_meta, per_dim);
  for (const DimStrategy& st : per_dim) {
    bool natural = !(st.out.is_shard() && st.out.shard_order() >= 0);
    for (int i = 0; i < schema.num_inputs; ++i)
      natural = natural && !(st.in[i].is_shard() && st.in[i].shard_order() >= 0);
    DT_CHECK(natural, rule.name, ": internal error: a sharding rule offered a shard with an ",
             "order; rules offer natural shards only");
  }
  const int nd = mesh.ndim();
  const size_t c = per_dim.size();
  std::optional<OutputSharding> best;
  std::string last_reason = "the op has no sharding rule";
  // Input placements, output placements -> a candidate, or a reason it is none.
  auto consider = [&](const Placements* in_pl, const Placements& out_pl) -> bool {
    try {
      if (rule.accepts != nullptr && !rule.accepts(schema, out_meta, in_pl, out_pl))
        throw Error("the layouts do not chunk alike");
      OutputSharding cand{DTensorSpec(mesh, out_pl, out_meta), {}, false, 0, {}};
      for (int i = 0; i < schema.num_inputs; ++i) {
        const DTensorSpec& have = schema.input(i);
        DTensorSpec want = have.with_placements(in_pl[i]);
        if (!(want == have)) {
          const auto plan = plan_redistribute(have, want, {.allow_new_partial = true});
          // Sharding a dim over more ranks than it has elements is refused
          // when it costs communication, and allowed as a local chunk (R ->
          // S), e.g. to match an input that is already sharded that way.
          if (plan->num_collectives() > 0 && over_sharded(want)) throw Error("over-sharded");
          cand.cost_us += plan->cost_us;
          cand.needs_redistribute = true;
        }
        cand.input_targets[i] = std::move(want);
      }
      // Least cost; on a tie, a layout needing no redistribution, then the earlier one.
      if (!best || cand.cost_us < best->cost_us - 1e-9 ||
          (cand.cost_us < best->cost_us + 1e-9 && best->needs_redistribute &&
           !cand.needs_redistribute))
        best = std::move(cand);
      return true;
    } catch (const Error& e) {
      // Not a valid layout, or a move the rules forbid: not a candidate.
      last_reason = e.what();
      return false;
    }
  };
  // Rank the layouts by a per-mesh-dim estimate, then price the most
  // promising few exactly with the planner (see estimate_dim).
  const RankedOptions options = ranked_options(schema, per_dim, nd);
  std::vector<std::pair<double, uint64_t>> order;  // (estimate, odometer index)
  uint64_t total = c == 0 ? 0 : 1;
  for (int m = 0; m < nd; ++m) total *= options.index[m].size();
  order.reserve(total);
  for (uint64_t idx = 0; idx < total; ++idx) {
    double est = 0;
    uint64_t rest = idx;
    for (int m = nd - 1; m >= 0; --m) {
      const size_t k = options.index[m].size();
      est += options.estimate[m][rest % k];
      rest /= k;
    }
    order.emplace_back(est, idx);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  int priced = 0;
  for (const auto& [est, idx] : order) {
    if (priced >= kMaxPriced || (best && !best->needs_redistribute)) break;
    Placements in_pl[kMaxInputs], out_pl;
    uint64_t rest = idx;
    size_t pick[kMaxDims] = {};
    for (int m = nd - 1; m >= 0; --m) {
      const size_t k = options.index[m].size();
      pick[m] = options.index[m][rest % k];
      rest /= k;
    }
    for (int m = 0; m < nd; ++m) {
      const DimStrategy& st = per_dim[pick[m]];
      for (int i = 0; i < schema.num_inputs; ++i) in_pl[i].push_back(st.in[i]);
      out_pl.push_back(st.out);
    }
    if (consider(in_pl, out_pl)) ++priced;
  }
  if (!best) {
    const Placements all_r(static_cast<size_t>(nd), Replicate());
    Placements in_pl[kMaxInputs];
    for (int i = 0; i < schema.num_inputs; ++i) in_pl[i] = all_r;
    const std::string reason = last_reason;
    consider(in_pl, all_r);
    DT_CHECK(best.has_value(), rule.name, ": no sharding strategy for placements ",
             placements_of(schema), " on ", mesh, " (", reason, ")");
    note_once(std::string(rule.name) + ": no sharding rule for placements " +
              placements_of(schema) + " on " + mesh.to_string() + " (" + reason +
              "); computed on Replicate");
  }
  return std::move(*best);
}

}  // namespace

namespace {
thread_local ForcedLayout* t_forced = nullptr;

// The forced layout's sharding for `schema` (see ForcedLayout).
std::shared_ptr<const OutputSharding> forced_sharding(const OpSchema& schema, const OpRule& rule,
                                                      const Placements* inputs,
                                                      const Placements& output) {
  const DeviceMesh& mesh = schema.input(0).mesh();
  OutputSharding s{DTensorSpec(mesh, output, rule.output_meta(schema)), {}, false, 0, {}};
  for (int i = 0; i < schema.num_inputs; ++i) {
    DTensorSpec want = schema.input(i).with_placements(inputs[i]);
    s.needs_redistribute = s.needs_redistribute || !(want == schema.input(i));
    s.input_targets[i] = std::move(want);
  }
  return std::make_shared<const OutputSharding>(std::move(s));
}
}  // namespace

ForcedLayout::ForcedLayout(OpId op, std::vector<Placements> inputs, Placements output)
    : op_(op), inputs_(std::move(inputs)), output_(std::move(output)), outer_(t_forced) {
  t_forced = this;
}

ForcedLayout::~ForcedLayout() { t_forced = outer_; }

namespace {

// The output's local shape when it is the same on every rank: each tensor
// dim's size divides by the product of the mesh dims sharding it (chunks
// are ceil(n / k) long, so only then are they all equal, nested or not).
std::optional<Shape> uniform_local_shape(const DTensorSpec& spec) {
  Shape local = spec.shape();
  int64_t ways[kMaxDims];
  for (int64_t d = 0; d < spec.ndim(); ++d) ways[d] = 1;
  for (size_t i = 0; i < spec.placements().size(); ++i)
    if (spec.placements()[i].is_shard())
      ways[spec.placements()[i].dim()] *= spec.mesh().size(static_cast<int>(i));
  for (int64_t d = 0; d < spec.ndim(); ++d) {
    if (local[d] % ways[d] != 0) return std::nullopt;
    local[d] /= ways[d];
  }
  return local;
}

std::shared_ptr<const OutputSharding> finished(OutputSharding s) {
  s.uniform_local_shape = uniform_local_shape(s.output);
  s.shape_only = s.output.mesh().world().is_shape_only();
  return std::make_shared<const OutputSharding>(std::move(s));
}

}  // namespace

std::shared_ptr<const OutputSharding> propagate(const OpSchema& schema, const OpRule& rule) {
  if (ForcedLayout* f = t_forced; f != nullptr && !f->used_ && f->op_ == schema.op) [[unlikely]] {
    f->used_ = true;
    DT_CHECK(static_cast<int>(f->inputs_.size()) == schema.num_inputs, rule.name, ": forced ",
             "layout names ", f->inputs_.size(), " inputs, the op has ", schema.num_inputs);
    return forced_sharding(schema, rule, f->inputs_.data(), f->output_);
  }
  if (auto hit = cache().find(schema)) return hit;
  auto value = finished(rule.decide ? rule.decide(schema, rule) : choose(schema, rule));
  // The cache's handles must not keep the meshes (and their World) alive.
  MeshCacheAccess::hold(value->output.mesh());
  for (const std::optional<DTensorSpec>& t : value->input_targets)
    if (t) MeshCacheAccess::hold(t->mesh());
  cache().insert(Key(schema), value, [](const Key& k) {
    for (int i = 0; i < k.num_inputs; ++i) MeshCacheAccess::hold(k.inputs[i]->mesh());
  });
  return value;
}

DTensor wrap(const OutputSharding& s, LocalTensor local) {
  if (!local.empty()) {
    const DType got = local.shards().front().second.dtype();
    DT_CHECK(got == s.output.dtype(), "internal error: the kernel made ", got,
             " but the sharding rule promised ", s.output.dtype(), " for ", s.output);
  }
  return DTensor(s.output, std::move(local));
}

Shape output_local_shape(const OutputSharding& s, int rank) {
  if (s.uniform_local_shape) return *s.uniform_local_shape;
  return s.output.extent_of_rank(rank)->local_shape;
}

namespace {

// The FLOPs of one rank's shard of an op, for estimates of its time: a
// product's 2 M N K (and its bias's adds), attention's two products, one
// per output element for every other op (all of them memory-bound, whose
// time the bytes decide).
double op_flops(OpId op, const Tensor* const* in, const Tensor& out) {
  const auto inner = [](const Tensor& t) { return t.dim() == 0 ? 1.0 : double(t.size(-1)); };
  const double n = static_cast<double>(out.numel());
  switch (op) {
    case OpId::Mm:
    case OpId::Bmm:
    case OpId::Matmul:
    case OpId::Linear:
      return 2 * n * inner(*in[0]);
    case OpId::Addmm:
    case OpId::Baddbmm:
      return 2 * n * inner(*in[1]) + n;
    case OpId::ScaledDotProductAttention:  // q (.., s_q, d), k (.., s_k, d)
      return 4 * static_cast<double>(in[0]->numel()) *
             static_cast<double>(in[1]->dim() >= 2 ? in[1]->size(-2) : 1);
    default:
      return n;
  }
}

}  // namespace

LocalTensor meta_outputs(const OpSchema& schema, const OpRule& rule, const OutputSharding& s,
                         const LocalTensor* const* inputs) {
  LocalTensor out = inputs[0]->map([&](int rank, const Tensor&) {
    return Tensor::meta(output_local_shape(s, rank), s.output.dtype());
  });
  if (collective_trace() == nullptr) return out;
  double flops = 0;
  int64_t bytes = 0;
  for (size_t k = 0; k < out.size(); ++k) {
    const Tensor* in[kMaxInputs];
    int64_t b = static_cast<int64_t>(out.shards()[k].second.nbytes());
    for (int i = 0; i < schema.num_inputs; ++i) {
      in[i] = &inputs[i]->shards()[k].second;
      b += static_cast<int64_t>(in[i]->nbytes());
    }
    bytes = std::max(bytes, b);
    flops = std::max(flops, op_flops(schema.op, in, out.shards()[k].second));
  }
  trace_op(rule.name, flops, bytes, s.output.dtype());
  return out;
}

DTensor prepare_input(const DTensor& x, const OutputSharding& s, int i) {
  const DTensorSpec& want = *s.input_targets[i];
  if (want == x.spec()) return x;
  // A rule may ask for a replicated input as a Partial: a local move (R ->
  // P keeps the value on one rank of the group, zeros elsewhere, for sum;
  // the value everywhere for avg, max, min), how P(sum) + R stays partial.
  return x.redistribute(want.placements(), {.allow_new_partial = true});
}

}  // namespace dtensor::dispatch

namespace dtensor {

ShardingPropCacheInfo sharding_prop_cache_info() { return dispatch::cache().info<CacheInfo>(); }
void clear_sharding_prop_cache() { dispatch::cache().clear(); }

}  // namespace dtensor

namespace dtensor::dispatch {

void verify_op(const OpSchema& schema, const OpRule& rule, const DTensor* const* inputs,
               const DTensor& got,
               const std::function<DTensor(const OpSchema&, const DTensor* const*)>& rerun) {
  // A process holding no rank of the mesh has nothing to compare, nor a
  // shape-only world (no values).
  if (got.local().empty() || got.mesh().world().is_shape_only()) return;
  verify_detail::CheckScope scope;
  const Placements all_r(static_cast<size_t>(got.mesh().ndim()), Replicate());
  std::optional<DTensor> replicated[kMaxInputs];
  const DTensor* ptrs[kMaxInputs];
  OpSchema reference = schema;
  std::string layouts;
  for (int i = 0; i < schema.num_inputs; ++i) {
    replicated[i] = inputs[i]->redistribute(all_r);
    ptrs[i] = &*replicated[i];
    reference.set_input(i, &replicated[i]->spec());
    layouts += (i ? "; " : "") + to_string(inputs[i]->placements());
  }
  const DTensor want = rerun(reference, ptrs);
  std::vector<DType> dtypes;
  for (int i = 0; i < schema.num_inputs; ++i) dtypes.push_back(inputs[i]->dtype());
  const std::optional<DType> precision = verify_detail::least_precise(dtypes);
  verify_detail::expect_match(got.full_tensor(), want.full_tensor(),
                              std::string(rule.name) + " on inputs " + layouts + " -> " +
                                  to_string(got.placements()),
                              "the same op on replicated inputs", precision);
  record_verification();
}

}  // namespace dtensor::dispatch
