// Sharding propagation: the candidate layouts of an op, expanded over the
// mesh, the cheapest one chosen by the planner's redistribute cost, and the
// result cached by OpSchema in a bounded LRU.
//
// Choosing: every combination of one per-mesh-dim candidate per mesh dim is
// a candidate layout. Its cost is the sum of the cheapest plans moving each
// input to the layout's input placements; a move the rules forbid (S->P, a
// new Partial) rules the candidate out, and so does moving an input to a
// layout that shards a dim over more ranks than it has elements. The first
// candidate of least cost wins, and one of cost zero ends the search, so
// a layout needing no communication is taken whenever one exists. An op
// without a rule, or whose rule admits no candidate, runs on Replicate:
// slower, never wrong, and noted once in the debug notes.
#include "common/lru_cache.h"
#include "dispatch/dispatch.h"

namespace dtensor::dispatch {

OpSchema::OpSchema(OpId id, std::initializer_list<const DTensorSpec*> specs,
                   std::initializer_list<int64_t> arguments)
    : op(id) {
  for (const DTensorSpec* s : specs) inputs[num_inputs++] = s;
  for (int64_t a : arguments) args[num_args++] = a;
  rehash();
}

void OpSchema::push_arg(int64_t a) {
  DT_CHECK(num_args < kMaxArgs, "OpSchema: too many arguments");
  args[num_args++] = a;
  rehash();
}

void OpSchema::push_input(const DTensorSpec* spec) {
  DT_CHECK(num_inputs < kMaxInputs, "OpSchema: too many inputs");
  inputs[num_inputs++] = spec;
  rehash();
}

void OpSchema::rehash() {
  size_t h = static_cast<size_t>(op) * 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < num_inputs; ++i) h = (h ^ inputs[i]->hash()) * 0x100000001B3ull;
  for (int i = 0; i < num_args; ++i) h = (h ^ static_cast<size_t>(args[i])) * 0x100000001B3ull;
  hash = h;
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

PropagationCache& cache() {
  static PropagationCache* c = new PropagationCache(8192);  // never destroyed: usable during exit
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
  std::vector<DimStrategy> per_dim;
  if (rule.strategies != nullptr) rule.strategies(schema, out_meta, per_dim);
  const int nd = mesh.ndim();
  const size_t c = per_dim.size();
  std::optional<OutputSharding> best;
  size_t pick[kMaxDims] = {};
  std::string last_reason = "the op has no sharding rule";
  // Input placements, output placements -> a candidate, or a reason it is none.
  auto consider = [&](const Placements* in_pl, const Placements& out_pl) {
    try {
      if (rule.accepts != nullptr && !rule.accepts(schema, out_meta, in_pl, out_pl))
        throw Error("the layouts do not chunk alike");
      OutputSharding cand{DTensorSpec(mesh, out_pl, out_meta), {}, false, 0};
      for (int i = 0; i < schema.num_inputs; ++i) {
        const DTensorSpec& have = schema.input(i);
        DTensorSpec want = have.with_placements(in_pl[i]);
        if (!(want == have)) {
          if (over_sharded(want)) throw Error("over-sharded");
          cand.cost_us += plan_redistribute(have, want)->cost_us;
          cand.needs_redistribute = true;
        }
        cand.input_targets[i] = std::move(want);
      }
      // Least cost; on a tie, a layout needing no redistribution, then the earlier one.
      if (!best || cand.cost_us < best->cost_us - 1e-9 ||
          (cand.cost_us < best->cost_us + 1e-9 && best->needs_redistribute &&
           !cand.needs_redistribute))
        best = std::move(cand);
    } catch (const Error& e) {
      // Not a valid layout, or a move the rules forbid: not a candidate.
      last_reason = e.what();
    }
  };
  for (bool more = c > 0; more;) {
    Placements in_pl[kMaxInputs], out_pl;
    for (int m = 0; m < nd; ++m) {
      const DimStrategy& s = per_dim[pick[m]];
      for (int i = 0; i < schema.num_inputs; ++i) in_pl[i].push_back(s.in[i]);
      out_pl.push_back(s.out);
    }
    consider(in_pl, out_pl);
    if (best && !best->needs_redistribute) break;
    // Odometer over the mesh dims.
    more = false;
    for (int m = nd - 1; m >= 0; --m) {
      if (++pick[m] < c) {
        more = true;
        break;
      }
      pick[m] = 0;
    }
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

std::shared_ptr<const OutputSharding> propagate(const OpSchema& schema, const OpRule& rule) {
  if (auto hit = cache().find(schema)) return hit;
  auto value = std::make_shared<const OutputSharding>(choose(schema, rule));
  cache().insert(Key(schema), value);
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
  return s.output.extent_of_rank(rank)->local_shape;
}

DTensor prepare_input(const DTensor& x, const OutputSharding& s, int i) {
  const DTensorSpec& want = *s.input_targets[i];
  if (want == x.spec()) return x;
  return x.redistribute(want.placements());
}

}  // namespace dtensor::dispatch

namespace dtensor {

ShardingPropCacheInfo sharding_prop_cache_info() { return dispatch::cache().info(); }
void clear_sharding_prop_cache() { dispatch::cache().clear(); }

}  // namespace dtensor
