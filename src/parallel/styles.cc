// The parallel styles and parallelize_module of tensor_parallel.h. A style
// lays out its module's parameters once (new leaves assigned through the
// module's parameter slots) and registers hooks; each call then moves only
// the tp placement of the input and the output, and the ops' sharding
// propagation does the rest.
#include <algorithm>
#include <sstream>
#include <type_traits>
#include <variant>

#include "dtensor/error.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor {

namespace {

// The parameter in `slot` laid out with `on_tp` on mesh dim tp, the other
// mesh dims unchanged: a new leaf (requiring grad as the old one did); the
// old one is marked superseded for an optimizer made too early.
void relayout(DTensor& slot, int tp, Placement on_tp) {
  Placements to = slot.placements();
  to[static_cast<size_t>(tp)] = on_tp;
  if (to == slot.placements()) return;
  const bool requires_grad = slot.requires_grad();
  DTensor value = slot.detach().redistribute(to);
  if (requires_grad) value.requires_grad_();
  nn::replace_parameter(slot, std::move(value), "parallelize_module");
}

// Where a style's hooks move things: the tp mesh dim, and the dtype their
// gradients move back in (ParallelizeOptions::reduce_dtype).
struct Tp {
  int dim;
  RedistributeOptions moves;  // backward_dtype only
};

DTensor move(const DTensor& x, const Tp& tp, Placement p) {
  return with_placement(x, tp.dim, p, tp.moves);
}

// x made Replicate on mesh dim `tp` for a module that computes on the full
// input, with its gradient brought back to x's own layout on tp (Partial as
// Replicate): the partial input gradients of the ranks' slices are summed
// there - Megatron's all_reduce in backward, or its reduce_scatter when x
// arrives sequence-sharded - even when the forward had nothing to move.
DTensor replicated_with_reduced_grad(const DTensor& x, const Tp& tp) {
  if (!x.requires_grad()) return move(x, tp, Replicate());
  Placements to = x.placements();
  to[static_cast<size_t>(tp.dim)] = Replicate();
  RedistributeOptions options = tp.moves;
  options.grad_placements = x.placements();
  for (Placement& p : *options.grad_placements)
    if (p.is_partial()) p = Replicate();
  return x.redistribute(to, options);
}

void check_style_output(Placement p, const char* style, const std::string& name) {
  DT_CHECK(p.is_replicate() || p.is_shard() || p == Partial(), style, " on '", name,
           "': output_layouts must be Replicate, Shard(d) or Partial(sum), got ", to_string(p));
}

DTensor arrive(const DTensor& x, const Tp& tp, const std::optional<Placement>& input_layouts) {
  return input_layouts ? move(x, tp, *input_layouts) : x;
}

[[noreturn]] void unsupported(const char* style, const std::string& name, const char* supported) {
  DT_THROW("parallelize_module: ", style, " applies to ", supported, ", but module '", name,
           "' is none of them");
}

void apply(nn::Module& m, const std::string& name, const Tp& tp, const ColwiseParallel& s) {
  check_style_output(s.output_layouts, "ColwiseParallel", name);
  const auto input = s.input_layouts;
  if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
    relayout(lin->weight(), tp.dim, Shard(0));
    if (lin->bias()) relayout(*lin->bias(), tp.dim, Shard(0));
  } else if (auto* emb = dynamic_cast<nn::Embedding*>(&m)) {
    relayout(emb->weight(), tp.dim, Shard(1));
  } else {
    unsupported("ColwiseParallel", name, "nn::Linear and nn::Embedding");
  }
  m.register_forward_pre_hook([tp, input](nn::Module&, const DTensor& x) {
    const DTensor arrived = arrive(x, tp, input);
    // Already Replicate on tp (PrepareModuleInput gathered it once for q, k
    // and v, or the residual stream without sequence parallelism): nothing
    // moves, as in PyTorch, and the Partial input gradient flows back as
    // it is, so that the gradients of every module reading x add up as
    // Partials and are reduced once where x was made (a reduce_scatter
    // back to the sequence shards, or one all_reduce where x meets a
    // Replicate gradient) instead of once per module.
    if (arrived.placements()[static_cast<size_t>(tp.dim)].is_replicate()) return arrived;
    return replicated_with_reduced_grad(arrived, tp);
  });
  const Placement out = s.output_layouts;
  m.register_forward_hook(
      [tp, out](nn::Module&, const DTensor&, const DTensor& y) { return move(y, tp, out); });
}

void apply(nn::Module& m, const std::string& name, const Tp& tp, const RowwiseParallel& s) {
  check_style_output(s.output_layouts, "RowwiseParallel", name);
  const auto input = s.input_layouts;
  if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
    relayout(lin->weight(), tp.dim, Shard(1));
    if (lin->bias()) relayout(*lin->bias(), tp.dim, Replicate());
    m.register_forward_pre_hook([tp, input](nn::Module&, const DTensor& x) {
      return move(arrive(x, tp, input), tp, Shard(-1));
    });
  } else if (auto* emb = dynamic_cast<nn::Embedding*>(&m)) {
    relayout(emb->weight(), tp.dim, Shard(0));
    m.register_forward_pre_hook([tp, input, name](nn::Module&, const DTensor& ids) {
      DT_CHECK(ids.dtype() == DType::Int64, "RowwiseParallel embedding '", name,
               "': ids must be int64, got ", dtype_short_name(ids.dtype()), " of shape ",
               ids.shape());
      return move(arrive(ids, tp, input), tp, Replicate());
    });
  } else {
    unsupported("RowwiseParallel", name, "nn::Linear and nn::Embedding");
  }
  const Placement out = s.output_layouts;
  m.register_forward_hook(
      [tp, out](nn::Module&, const DTensor&, const DTensor& y) { return move(y, tp, out); });
}

void apply(nn::Module& m, const std::string& name, const Tp& tp, const SequenceParallel& s) {
  if (auto* norm = dynamic_cast<nn::LayerNorm*>(&m)) {
    relayout(norm->weight(), tp.dim, Replicate());
    relayout(norm->bias(), tp.dim, Replicate());
  } else if (auto* rms = dynamic_cast<nn::RMSNorm*>(&m)) {
    relayout(rms->weight(), tp.dim, Replicate());
  } else {
    unsupported("SequenceParallel", name, "nn::LayerNorm and nn::RMSNorm");
  }
  const int64_t seq = s.sequence_dim;
  m.register_forward_pre_hook([tp, seq, name](nn::Module&, const DTensor& x) {
    DT_CHECK(x.dim() >= 2 && seq >= -x.dim() && seq < x.dim() - 1 && seq != -1,
             "SequenceParallel on '", name, "': sequence dim ", seq,
             " must be a dim before the normalised last dim of the input of shape ", x.shape());
    return move(x, tp, Shard(seq));
  });
}

void apply(nn::Module& m, const std::string&, const Tp& tp, const PrepareModuleInput& s) {
  const auto input = s.input_layouts;
  const Placement desired = s.desired_input_layouts;
  m.register_forward_pre_hook([tp, input, desired](nn::Module&, const DTensor& x) {
    return move(arrive(x, tp, input), tp, desired);
  });
}

void apply(nn::Module& m, const std::string&, const Tp& tp, const PrepareModuleOutput& s) {
  const auto output = s.output_layouts;
  const Placement desired = s.desired_output_layouts;
  m.register_forward_hook([tp, output, desired](nn::Module&, const DTensor&, const DTensor& y) {
    return move(arrive(y, tp, output), tp, desired);
  });
}

// Throws when `style` does not apply to `m`'s type.
void check_supported(const ParallelStyle& style, nn::Module& m, const std::string& name) {
  const bool linear_or_embedding =
      dynamic_cast<nn::Linear*>(&m) != nullptr || dynamic_cast<nn::Embedding*>(&m) != nullptr;
  if (std::holds_alternative<ColwiseParallel>(style) && !linear_or_embedding)
    unsupported("ColwiseParallel", name, "nn::Linear and nn::Embedding");
  if (std::holds_alternative<RowwiseParallel>(style) && !linear_or_embedding)
    unsupported("RowwiseParallel", name, "nn::Linear and nn::Embedding");
  const bool norm =
      dynamic_cast<nn::LayerNorm*>(&m) != nullptr || dynamic_cast<nn::RMSNorm*>(&m) != nullptr;
  if (std::holds_alternative<SequenceParallel>(style) && !norm)
    unsupported("SequenceParallel", name, "nn::LayerNorm and nn::RMSNorm");
  if (const auto* c = std::get_if<ColwiseParallel>(&style)) check_style_output(c->output_layouts, "ColwiseParallel", name);
  if (const auto* r = std::get_if<RowwiseParallel>(&style)) check_style_output(r->output_layouts, "RowwiseParallel", name);
}

std::string opt(const std::optional<Placement>& p) { return p ? to_string(*p) : "as given"; }

// Where the bracket expression starting at pattern[at] == '[' ends (the
// index of its ']'), or npos when it has none, as Python's fnmatch reads
// it: a '!' first negates, and a ']' first (after any '!') is a member.
size_t set_end(const std::string& pattern, size_t at) {
  size_t i = at + 1;
  if (i < pattern.size() && pattern[i] == '!') ++i;
  if (i < pattern.size() && pattern[i] == ']') ++i;
  return pattern.find(']', i);
}

// Whether c is in the set pattern[at..close] ('[' ... ']'): single
// characters and ranges a-z; a '-' first or last is itself; a range whose
// ends are reversed holds nothing (as in Python).
bool in_set(const std::string& pattern, size_t at, size_t close, char c) {
  size_t i = at + 1;
  const bool negate = pattern[i] == '!';
  if (negate) ++i;
  bool found = false;
  while (i < close) {
    if (i + 2 < close && pattern[i + 1] == '-') {  // a range lo-hi
      if (pattern[i] <= c && c <= pattern[i + 2]) found = true;
      i += 3;
    } else {
      if (pattern[i] == c) found = true;
      ++i;
    }
  }
  return found != negate;
}

// Python's fnmatch.fnmatchcase on one name part (PyTorch's
// parallelize_module matches each dotted part with fnmatch): '*' any run of
// characters, '?' any one, '[seq]' one of seq, '[!seq]' one not in seq; a
// '[' without its ']' is itself.
bool glob(const std::string& pattern, size_t pi, const std::string& s, size_t si) {
  while (pi < pattern.size()) {
    const char p = pattern[pi];
    if (p == '*') {
      for (size_t k = si; k <= s.size(); ++k)
        if (glob(pattern, pi + 1, s, k)) return true;
      return false;
    }
    if (si >= s.size()) return false;
    if (p == '?') {
      ++pi, ++si;
      continue;
    }
    if (p == '[') {
      const size_t close = set_end(pattern, pi);
      if (close != std::string::npos) {
        if (!in_set(pattern, pi, close, s[si])) return false;
        pi = close + 1, ++si;
        continue;
      }
    }
    if (p != s[si]) return false;
    ++pi, ++si;
  }
  return si == s.size();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  if (s.empty()) return parts;
  size_t start = 0;
  for (size_t dot; (dot = s.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(s.substr(start, dot - start));
  parts.push_back(s.substr(start));
  return parts;
}

}  // namespace

std::string to_string(const ParallelStyle& style) {
  std::ostringstream os;
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, ColwiseParallel> || std::is_same_v<S, RowwiseParallel>) {
          os << (std::is_same_v<S, ColwiseParallel> ? "ColwiseParallel" : "RowwiseParallel")
             << "(input_layouts=" << opt(s.input_layouts)
             << ", output_layouts=" << to_string(s.output_layouts) << ")";
        } else if constexpr (std::is_same_v<S, SequenceParallel>) {
          os << "SequenceParallel(sequence_dim=" << s.sequence_dim << ")";
        } else if constexpr (std::is_same_v<S, PrepareModuleInput>) {
          os << "PrepareModuleInput(input_layouts=" << opt(s.input_layouts)
             << ", desired_input_layouts=" << to_string(s.desired_input_layouts) << ")";
        } else {
          os << "PrepareModuleOutput(output_layouts=" << opt(s.output_layouts)
             << ", desired_output_layouts=" << to_string(s.desired_output_layouts) << ")";
        }
      },
      style);
  return os.str();
}

bool module_name_matches(const std::string& pattern, const std::string& name) {
  const std::vector<std::string> p = split(pattern), n = split(name);
  if (p.size() != n.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (!glob(p[i], 0, n[i], 0)) return false;
  return true;
}

void apply_style(nn::Module& module, const std::string& name, int tp_mesh_dim,
                 const ParallelStyle& style, const ParallelizeOptions& options) {
  const DeviceMesh& mesh = module.mesh();
  DT_CHECK(tp_mesh_dim >= 0 && tp_mesh_dim < mesh.ndim(), "parallelize_module: tensor-parallel mesh dim ",
           tp_mesh_dim, " is out of range for module '", name, "' on a mesh of ", mesh.ndim(),
           " dims (", mesh.to_string(), ")");
  check_supported(style, module, name);
  DT_CHECK(!options.reduce_dtype || is_floating(*options.reduce_dtype),
           "parallelize_module: reduce_dtype must be a floating dtype, got ",
           *options.reduce_dtype);
  Tp tp{tp_mesh_dim, {}};
  tp.moves.backward_dtype = options.reduce_dtype;
  std::visit([&](const auto& s) { apply(module, name, tp, s); }, style);
}

namespace {

// The slots of one tied parameter (nn::same_parameter), by name.
using TiedSlots = std::vector<std::pair<std::string, DTensor*>>;

std::vector<TiedSlots> tied_slots(nn::Module& root) {
  std::vector<TiedSlots> groups;
  for (const auto& [name, slot] : root.named_parameters(/*remove_duplicate=*/false)) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const TiedSlots& g) {
      return nn::same_parameter(*g.front().second, *slot);
    });
    if (it == groups.end())
      groups.push_back({{name, slot}});
    else
      it->emplace_back(name, slot);
  }
  std::erase_if(groups, [](const TiedSlots& g) { return g.size() < 2; });
  return groups;
}

// A style lays out its own module's slot: the other slots of a tied
// parameter get the same new leaf, so the modules still share one
// parameter (one gradient, one optimizer entry). Two styles that laid a
// tied parameter out differently (embedding Shard(1), head Shard(0)) throw.
void retie(const std::vector<TiedSlots>& tied) {
  for (const TiedSlots& g : tied) {
    // The new layout: the first slot a style replaced (still superseded
    // slots hold the old tensor).
    const auto fresh = std::find_if(g.begin(), g.end(), [](const auto& s) {
      return !nn::superseded_by(*s.second);
    });
    if (fresh == g.end()) continue;
    for (const auto& [name, slot] : g) {
      if (nn::same_parameter(*slot, *fresh->second)) continue;
      DT_CHECK(nn::superseded_by(*slot) || slot->spec() == fresh->second->spec(),
               "parallelize_module: '", fresh->first, "' and '", name,
               "' are one (tied) parameter, but the plan lays them out differently (",
               to_string(fresh->second->placements()), " and ", to_string(slot->placements()),
               "); give both modules styles that agree on it");
      nn::replace_parameter(*slot, *fresh->second, "parallelize_module");
    }
  }
}

}  // namespace

void parallelize_module(nn::Module& root, int tp_mesh_dim, const ParallelizePlan& plan,
                        const ParallelizeOptions& options) {
  DT_CHECK(tp_mesh_dim >= 0 && tp_mesh_dim < root.mesh().ndim(),
           "parallelize_module: tensor-parallel mesh dim ", tp_mesh_dim,
           " is out of range for a mesh of ", root.mesh().ndim(), " dims (",
           root.mesh().to_string(), ")");
  const auto modules = root.named_modules();
  // Every entry is checked before anything changes, so a typo in a plan
  // leaves the model as it was.
  std::vector<std::vector<std::pair<std::string, nn::Module*>>> targets;
  for (const auto& [pattern, style] : plan) {
    std::vector<std::pair<std::string, nn::Module*>> hit;
    for (const auto& [name, module] : modules)
      if (module_name_matches(pattern, name)) hit.emplace_back(name, module);
    if (hit.empty()) {
      std::ostringstream names;
      size_t shown = 0;
      for (const auto& [name, module] : modules) {
        if (name.empty()) continue;
        if (shown == 12) {
          names << ", ...";
          break;
        }
        names << (shown++ ? ", " : "") << name;
      }
      DT_THROW("parallelize_module: the plan entry '", pattern, "' (", to_string(style),
               ") names no module; the modules are [", names.str(), "]");
    }
    for (const auto& [name, module] : hit) check_supported(style, *module, name);
    targets.push_back(std::move(hit));
  }
  const std::vector<TiedSlots> tied = tied_slots(root);
  for (size_t i = 0; i < plan.size(); ++i)
    for (const auto& [name, module] : targets[i])
      apply_style(*module, name, tp_mesh_dim, plan[i].second, options);
  retie(tied);
}

std::optional<ParallelStyle> style_for(const ParallelizePlan& plan, const std::string& module_name) {
  std::optional<ParallelStyle> out;
  for (const auto& [pattern, style] : plan)
    if (module_name_matches(pattern, module_name)) out = style;
  return out;
}

}  // namespace dtensor
