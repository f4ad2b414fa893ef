// `dtensor estimate`: the step `dtensor train` runs, profiled on a
// shape-only world of the mesh's ranks (World::shape_only): each rank's
// memory and collectives, exactly, and the step's time, estimated on a
// described cluster (estimate.h). Ranks whose figures agree are one role.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "cli.h"
#include "dtensor/error.h"
#include "dtensor/estimate.h"
#include "estimate_svg.h"
#include "output.h"
#include "train.h"
#include "trainer.h"

namespace dtensor::cli {

namespace {

// What a rank holds and sends: ranks alike in all of it are one role.
struct RankFigures {
  RankPeak peak;
  RankMemory categories;
  // Per phase of the measured step, per kind: count and bytes.
  std::vector<std::array<std::pair<int64_t, int64_t>, kNumCollectiveKinds>> phases;
  // The role's identity: everything above but the rank.
  std::string key() const {
    std::ostringstream os;
    os << peak.now << ' ' << peak.peak << ' ' << peak.peak_unsharded_parameters << ' '
       << peak.peak_communication_buffers << ' ' << categories.parameters << ' '
       << categories.gradients << ' ' << categories.optimizer_state << ' '
       << categories.activations;
    for (const auto& ph : phases)
      for (const auto& [count, bytes] : ph) os << ' ' << count << ':' << bytes;
    return os.str();
  }
};

struct Role {
  RankFigures figures;
  std::vector<int> ranks;
};

std::string seconds_text(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 0.01 ? 3 : 2);
  if (s < 1)
    os << s * 1e3 << " ms";
  else
    os << s << " s";
  return os.str();
}

// "0-1023", "0, 2, 4-7" (at most a few runs, then "...").
std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream os;
  size_t i = 0, runs = 0;
  while (i < ranks.size()) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (runs++ == 4) {
      os << ", ...";
      break;
    }
    os << (i ? ", " : "") << ranks[i];
    if (j > i) os << "-" << ranks[j];
    i = j + 1;
  }
  return os.str();
}

// The model's FLOPs per token (PaLM's MFU accounting): 6 per parameter
// (forward and backward of every product) and the attention's scores and
// weighted sums, 12 * layers * hidden * seq.
double model_flops_per_token(double params, const models::GPTConfig& c) {
  return 6 * params + 12.0 * static_cast<double>(c.layers * c.hidden * c.seq);
}

// The slot (Phase) of a phase the trainer marked by name.
size_t slot_of(const std::string& name) {
  for (size_t ph = 0; ph < kNumPhases; ++ph)
    if (name == kPhaseNames[ph]) return ph;
  DT_THROW("dtensor estimate: the step marked a phase ", quote(name),
           " that is not forward, backward or optimizer");
}

// "GPT of 32 layers, hidden 4096, 32 heads", and what differs from GPT-2's
// defaults: "Llama of 32 layers, hidden 4096, 32 heads (8 kv), ffn 14336".
std::string model_text(const models::GPTConfig& c) {
  std::ostringstream os;
  os << (c.style == models::ModelStyle::Llama ? "Llama" : "GPT") << " of " << c.layers
     << " layers, hidden " << c.hidden << ", " << c.heads << " heads";
  if (c.num_kv_heads() != c.heads) os << " (" << c.num_kv_heads() << " kv)";
  if (c.ffn != 0) os << ", ffn " << c.ffn;
  return os.str();
}

// Everything an estimate reports, for one layout.
struct Figures {
  int64_t ranks = 0;
  Scheme scheme;
  std::optional<DeviceMesh> mesh;
  estimate::Cluster cluster;
  estimate::Profile profile;
  estimate::TimeEstimate time;
  std::map<std::string, Role> by_key;
  std::vector<std::string> order;  // the roles' keys, by first rank
  // The measured step's phases in the profile (forward and backward once
  // per micro-batch, then the optimizer), each summed into its kind's slot
  // (kForward, kBackward, kOptimizer) with its time.
  size_t phases = 3, first = 0;
  std::array<double, kNumPhases> phase_seconds{};
  int64_t params = 0;
  double tokens_per_s = 0, mfu = 0, profiled_s = 0;
  int64_t peak() const {  // the largest of every rank's peak
    int64_t most = 0;
    for (const auto& [key, role] : by_key) most = std::max(most, role.figures.peak.peak);
    return most;
  }
};

// --nccl-tests: each file's measured times join the cluster's, in place of
// what it had (a calibration's) for the same collective, group size and
// span; two files measuring one of them are refused.
void add_nccl_tests(estimate::Cluster& cluster, const std::vector<std::string>& files) {
  std::map<std::tuple<int, int, int>, std::string> from;  // (kind, ranks, nodes) -> file
  std::vector<estimate::MeasuredCollective> added;
  for (const std::string& file : files) {
    std::ifstream in(file);
    DT_CHECK(in, "--nccl-tests: cannot read ", quote(file));
    std::stringstream text;
    text << in.rdbuf();
    const std::vector<estimate::MeasuredCollective> m =
        estimate::parse_nccl_tests(text.str(), file);
    const auto key = std::make_tuple(static_cast<int>(m[0].kind), m[0].ranks, m[0].nodes);
    const auto [it, fresh] = from.emplace(key, file);
    DT_CHECK(fresh, "--nccl-tests: ", quote(it->second), " and ", quote(file), " both measure ",
             to_string(m[0].kind), " over ", m[0].ranks, " ranks on ", m[0].nodes,
             m[0].nodes == 1 ? " node" : " nodes", "; expected one file each");
    added.insert(added.end(), m.begin(), m.end());
  }
  std::erase_if(cluster.measured, [&](const estimate::MeasuredCollective& m) {
    return from.count(std::make_tuple(static_cast<int>(m.kind), m.ranks, m.nodes)) > 0;
  });
  cluster.measured.insert(cluster.measured.end(), added.begin(), added.end());
}

Figures evaluate(const EstimateArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const TrainArgs& t = a.train;
  const Shape mesh_shape = parse_mesh_arg(t.mesh);
  const int64_t ranks = mesh_rank_count(mesh_shape, t.mesh);
  const Scheme scheme = parse_scheme(t.scheme, static_cast<int>(mesh_shape.size()), t.mesh);
  estimate::Cluster cluster = estimate::cluster_preset(a.cluster);
  if (!a.calibration.empty()) {
    std::ifstream in(a.calibration);
    DT_CHECK(in, "--calibration: cannot read ", quote(a.calibration));
    std::stringstream text;
    text << in.rdbuf();
    cluster = estimate::cluster_from_json(text.str());
  }
  if (a.ranks_per_node > 0) cluster.ranks_per_node = a.ranks_per_node;
  if (a.intra_node_gbps > 0) cluster.within_node.bandwidth = a.intra_node_gbps * 1e9;
  if (a.inter_node_gbps > 0) cluster.across_nodes.bandwidth = a.inter_node_gbps * 1e9;
  if (a.intra_node_latency_us > 0) cluster.within_node.latency = a.intra_node_latency_us * 1e-6;
  if (a.inter_node_latency_us > 0) cluster.across_nodes.latency = a.inter_node_latency_us * 1e-6;
  add_nccl_tests(cluster, a.nccl_tests);
  const World world = World::shape_only(static_cast<int>(ranks));
  const DeviceMesh mesh = make_mesh(
      t.mesh,
      t.names.empty() ? (mesh_shape.size() == 1 ? (scheme.tp ? "tp" : "dp") : "dp,tp") : t.names,
      &world);
  const models::GPTConfig config = gpt_config(t, a.vocab);
  DT_CHECK(t.hidden % t.heads == 0, "--hidden ", t.hidden, " is not a multiple of --heads ",
           t.heads);

  // Two steps: the second, with the optimizer's state made, is the one
  // measured; the peaks cover both (and the model's construction).
  std::optional<MemoryReport> report;
  int64_t params = 0;
  const auto step = [&] {
    Trainer trainer(config, mesh, scheme, t, /*meta=*/true);
    for (auto& [name, p] : trainer.model->named_parameters()) params += p->shape().product();
    const DTensorSpec batch(mesh, trainer.input, Shape{t.batch, t.seq}, DType::Int64);
    trainer.step(DTensor::meta(batch), DTensor::meta(batch));
    MemoryTracker memory(*trainer.model, trainer.optimizer.get());
    trainer.step(DTensor::meta(batch), DTensor::meta(batch), nullptr, nullptr, &memory);
    report = memory.report();
  };
  // The memory timeline only for the picture: it reads every rank's bytes
  // at every event.
  estimate::ProfileOptions options;
  options.memory_timeline = !a.svg.empty();
  estimate::Profile profile = estimate::profile(world, step, options);
  const double profiled_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t phases = 2 * static_cast<size_t>(t.micro_batches) + 1,
               first = profile.phases.size() - phases;

  // Each rank's figures, then the roles.
  std::map<std::string, Role> by_key;
  std::vector<std::string> order;
  for (size_t i = 0; i < profile.ranks.size(); ++i) {
    const estimate::RankProfile& r = profile.ranks[i];
    RankFigures f;
    f.peak = r.memory;
    f.categories = report->ranks[i];
    f.categories.rank = 0;
    f.phases.resize(kNumPhases);
    for (size_t ph = 0; ph < phases; ++ph) {
      const size_t begin = r.phase_starts[first + ph];
      const size_t end = first + ph + 1 < r.phase_starts.size() ? r.phase_starts[first + ph + 1]
                                                                : r.collectives.size();
      for (size_t k = begin; k < end; ++k) {
        auto& [count, bytes] = f.phases[slot_of(profile.phases[first + ph])]
                                       [static_cast<size_t>(r.collectives[k].kind)];
        ++count;
        bytes += r.collectives[k].bytes;
      }
    }
    const std::string key = f.key();
    auto [it, added] = by_key.try_emplace(key, Role{f, {}});
    if (added) order.push_back(key);
    // By roles (estimate::ProfileOptions), r stands in for these ranks.
    for (int rank : profile.ranks_of(i)) it->second.ranks.push_back(rank);
  }
  for (auto& [key, role] : by_key) std::sort(role.ranks.begin(), role.ranks.end());
  estimate::TimeEstimate time = estimate::estimate_time(profile, cluster, first);
  const double tokens = static_cast<double>(t.batch * t.seq);
  const double tokens_per_s = tokens / time.step;
  const double peak_flops =
      cluster.device.peak_flops[static_cast<int>(t.mixed_precision == "none"   ? DType::Float32
                                                 : t.mixed_precision == "bf16" ? DType::BFloat16
                                                                               : DType::Float16)];
  const double mfu = model_flops_per_token(static_cast<double>(params), config) * tokens /
                     (time.step * peak_flops * static_cast<double>(ranks));

  Figures out;
  out.ranks = ranks;
  out.scheme = scheme;
  out.mesh = mesh;
  out.cluster = cluster;
  out.profile = std::move(profile);  // each rank's collectives: large on many ranks
  out.time = std::move(time);
  out.by_key = std::move(by_key);
  out.order = std::move(order);
  out.phases = phases;
  out.first = first;
  for (size_t ph = 0; ph < phases; ++ph)
    out.phase_seconds[slot_of(out.profile.phases[first + ph])] +=
        (ph + 1 < phases ? out.time.phase_starts[first + ph + 1] : out.time.step) -
        out.time.phase_starts[first + ph];
  out.params = params;
  out.tokens_per_s = tokens_per_s;
  out.mfu = mfu;
  out.profiled_s = profiled_s;
  return out;
}

// Activation checkpointing as --search tries it: none, selective (every
// block, keeping the products' and attention's outputs, so backward
// recomputes the cheap ops only) or every block whole.
enum class Checkpointing { kNone, kSelective, kEvery };
constexpr const char* kSelectiveOps = "linear,matmul,scaled_dot_product_attention";

const char* checkpointing_name(Checkpointing c) {
  return c == Checkpointing::kNone ? "no" : c == Checkpointing::kSelective ? "selective" : "every";
}

// One layout --search tries, and what the estimate gave it.
struct SearchRow {
  std::string mesh, scheme;
  Checkpointing checkpoint = Checkpointing::kNone;
  bool prefetch = false, reshard = true;
  int64_t peak = 0;
  double step = 0, tokens_per_s = 0, mfu = 0;
};

// items as a C++ braced list or a Python list or tuple: open, the items
// (quoted when `quote`) separated by ", ", close; a Python 1-tuple "(4,)".
std::string code_list(const std::vector<std::string>& items, const char* open, const char* close,
                      bool quote) {
  std::string out = open;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + (quote ? "\"" + items[i] + "\"" : items[i]);
  if (items.size() == 1 && std::string(open) == "(") out += ",";
  return out + close;
}

// The winner's plan as code: the calls dtensor train makes for it
// (tools/trainer.cc), in C++ on models::GPT and in Python on a model of
// the same module names.
void print_snippets(std::ostream& os, const SearchRow& w, const TrainArgs& t) {
  const size_t x = w.mesh.find('x');
  const bool two_d = x != std::string::npos;
  const Scheme s = parse_scheme(w.scheme, two_d ? 2 : 1, w.mesh);
  const std::vector<std::string> dims =
      two_d ? std::vector<std::string>{w.mesh.substr(0, x), w.mesh.substr(x + 1)}
            : std::vector<std::string>{w.mesh};
  const std::vector<std::string> names = !two_d ? std::vector<std::string>{s.tp ? "tp" : "dp"}
                                         : s.replicate_dim >= 0
                                             ? std::vector<std::string>{"replicate", "shard"}
                                             : std::vector<std::string>{"dp", "tp"};
  const std::vector<std::string> save_ops = split_list(kSelectiveOps);
  const bool fsdp = s.fsdp;
  const bool bf16 = t.mixed_precision != "none";
  os << "\nIn C++ (the calls dtensor train makes; tools/trainer.cc):\n";
  os << "  DeviceMesh mesh(world, " << code_list(dims, "{", "}", false) << ", "
     << code_list(names, "{", "}", true) << ");\n";
  os << "  // model: models::GPT(mesh, config) under nn::MetaDeviceGuard\n";
  if (s.tp)
    os << "  parallelize_module(model, " << s.tp_dim
       << ", models::gpt_tensor_parallel_plan(config, " << (t.sequence_parallel ? "true" : "false")
       << "));\n";
  if (fsdp) {
    os << "  FullyShardOptions fsdp;\n  fsdp.mesh_dims = {" << s.dp_dim << "};\n";
    if (s.replicate_dim >= 0) os << "  fsdp.replicate_mesh_dims = {" << s.replicate_dim << "};\n";
    if (!w.reshard) os << "  fsdp.reshard_after_forward = false;\n";
    if (w.prefetch) os << "  fsdp.prefetch = true;\n";
    if (bf16)
      os << "  fsdp.mp_policy.param_dtype = DType::"
         << (t.mixed_precision == "bf16" ? "BFloat16" : "Float16")
         << ";\n  fsdp.mp_policy.reduce_dtype = DType::Float32;\n";
  }
  if (fsdp || w.checkpoint != Checkpointing::kNone) {
    os << "  for (nn::Module* block : blocks) {  // blocks.0, blocks.1, ...\n";
    if (w.checkpoint == Checkpointing::kSelective)
      os << "    nn::checkpoint_wrapper(*block, nn::CheckpointPolicy{"
         << code_list(save_ops, "{", "}", true) << "});\n";
    if (w.checkpoint == Checkpointing::kEvery) os << "    nn::checkpoint_wrapper(*block);\n";
    if (fsdp) os << "    fully_shard(*block, fsdp);\n";
    os << "  }\n";
  }
  if (fsdp) os << "  fully_shard(model, fsdp);\n";
  if (s.ddp)
    os << "  ReplicateOptions ddp;\n  ddp.mesh_dims = {" << s.dp_dim
       << "};\n  replicate(model, ddp);\n";
  os << "  model.materialize();\n";

  os << "\nIn Python (dtensor.parallel, on a model with the same module names):\n";
  os << "  mesh = dt.DeviceMesh(world, " << code_list(dims, "(", ")", false) << ", "
     << code_list(names, "[", "]", true) << ")\n";
  if (s.tp)
    os << "  parallelize_module(model, mesh[\"tp\"], plan)  # column-parallel wq, wk, wv, w1"
       << (t.model == "llama" ? ", w3" : "") << "; row-parallel wo, w2\n";
  // fully_shard's and replicate's data-parallel mesh: HSDP's whole 2-d mesh.
  const std::string dp_mesh = two_d && s.replicate_dim < 0 ? "mesh[\"dp\"]" : "mesh";
  if (fsdp || w.checkpoint != Checkpointing::kNone) {
    os << "  for block in blocks:\n";
    if (w.checkpoint == Checkpointing::kSelective)
      os << "      nn.checkpoint_wrapper(block, save_ops=" << code_list(save_ops, "[", "]", true)
         << ")\n";
    if (w.checkpoint == Checkpointing::kEvery) os << "      nn.checkpoint_wrapper(block)\n";
    std::string kw = "mesh=" + dp_mesh;
    if (!w.reshard) kw += ", reshard_after_forward=False";
    if (w.prefetch) kw += ", prefetch=True";
    if (fsdp) os << "      fully_shard(block, " << kw << ")\n";
    if (fsdp) os << "  fully_shard(model, " << kw << ")\n";
  }
  if (s.ddp) os << "  replicate(model, mesh=" << dp_mesh << ")\n";
  if (bf16 && fsdp)
    os << "  # (" << t.mixed_precision
       << " parameters: FullyShardOptions::mp_policy, which the Python fully_shard does not take "
          "yet)\n";
  os << "  model.materialize()\n";
}

// --search: every layout of the mesh's ranks dtensor train can run (1-d:
// fsdp, ddp, tp; 2-d dp x tp: fsdp+tp, ddp+tp, hsdp), each with no,
// selective and whole activation checkpointing of every block, and
// fully_shard's with and without prefetch and resharding after forward,
// profiled and timed; those whose every rank's peak fits the budget,
// fastest first, and the winner as a command line and as code.
int run_search(const EstimateArgs& a) {
  const Shape given = parse_mesh_arg(a.train.mesh);
  const int64_t n = mesh_rank_count(given, a.train.mesh);
  std::vector<std::pair<std::string, std::string>> layouts;  // (mesh, scheme)
  for (const char* s : {"fsdp", "ddp", "tp"}) layouts.emplace_back(std::to_string(n), s);
  for (int64_t tp = 2; tp < n; ++tp) {
    if (n % tp != 0) continue;
    const std::string m = std::to_string(n / tp) + "x" + std::to_string(tp);
    for (const char* s : {"fsdp+tp", "ddp+tp", "hsdp"}) layouts.emplace_back(m, s);
  }
  std::vector<SearchRow> fit, over;
  std::vector<std::string> refused;
  double budget = a.memory_budget > 0 ? a.memory_budget : 0;
  for (const auto& [m, scheme] : layouts) {
    const bool fsdp = scheme.find("fsdp") != std::string::npos || scheme == "hsdp";
    for (Checkpointing ac :
         {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kEvery}) {
      for (bool prefetch : {false, true}) {
        for (bool reshard : {true, false}) {
          if ((prefetch || !reshard) && !fsdp) continue;
          EstimateArgs c = a;
          c.search = false;
          c.json = true;
          c.chrome_trace.clear();
          c.svg.clear();
          c.train.mesh = m;
          c.train.names.clear();
          c.train.scheme = scheme;
          c.train.checkpoint_every = ac == Checkpointing::kNone ? 0 : 1;
          c.train.checkpoint_save_ops = ac == Checkpointing::kSelective ? kSelectiveOps : "";
          c.train.prefetch = prefetch;
          c.train.reshard_after_forward = reshard;
          try {
            const Figures f = evaluate(c);
            if (budget == 0) budget = f.cluster.device.memory;
            SearchRow r{m,           scheme,         ac,   prefetch, reshard, f.peak(),
                        f.time.step, f.tokens_per_s, f.mfu};
            (r.peak <= budget ? fit : over).push_back(r);
          } catch (const Error& e) {
            refused.push_back(m + " " + scheme + " " + checkpointing_name(ac) + " checkpointing" +
                              (prefetch ? ", prefetched" : "") +
                              (reshard ? "" : ", not resharded") + ": " + one_line(e.what()));
          }
        }
      }
    }
  }
  std::stable_sort(fit.begin(), fit.end(),
                   [](const SearchRow& x, const SearchRow& y) { return x.step < y.step; });
  if (a.json) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const SearchRow& r : fit)
      rows.push_back({{"mesh", r.mesh},
                      {"scheme", r.scheme},
                      {"activation_checkpointing", checkpointing_name(r.checkpoint)},
                      {"prefetch", r.prefetch},
                      {"reshard_after_forward", r.reshard},
                      {"peak", r.peak},
                      {"step_s", r.step},
                      {"tokens_per_s", r.tokens_per_s},
                      {"mfu", r.mfu}});
    std::cout << nlohmann::ordered_json{{"budget", budget},
                                        {"profiled", fit.size() + over.size()},
                                        {"over_budget", over.size()},
                                        {"refused", refused},
                                        {"fit", rows}}
                     .dump(2)
              << "\n";
    return fit.empty() ? 1 : 0;
  }
  std::ostream& os = std::cout;
  os << "dtensor estimate --search: " << fit.size() + over.size() << " layouts of " << n
     << " ranks profiled; " << fit.size() << " fit " << mib_text(static_cast<int64_t>(budget))
     << " per rank (exact peaks), fastest first (estimated):\n";
  os << "  " << std::left << std::setw(8) << "mesh" << std::setw(9) << "scheme" << std::setw(11)
     << "checkpoint" << std::setw(10) << "prefetch" << std::setw(9) << "reshard" << std::right
     << std::setw(14) << "peak" << std::setw(12) << "step" << std::setw(14) << "tokens/s"
     << std::setw(8) << "MFU"
     << "\n";
  const auto fsdp_text = [](const SearchRow& r, bool v) {
    return r.scheme.find("fsdp") == std::string::npos && r.scheme != "hsdp" ? "-"
           : v                                                              ? "yes"
                                                                            : "no";
  };
  for (const SearchRow& r : fit)
    os << "  " << std::left << std::setw(8) << r.mesh << std::setw(9) << r.scheme << std::setw(11)
       << checkpointing_name(r.checkpoint) << std::setw(10) << fsdp_text(r, r.prefetch)
       << std::setw(9) << fsdp_text(r, r.reshard) << std::right << std::setw(14) << mib_text(r.peak)
       << std::setw(12) << seconds_text(r.step) << std::setw(14) << std::fixed
       << std::setprecision(0) << r.tokens_per_s << std::setw(7) << std::setprecision(1)
       << 100 * r.mfu << "%\n"
       << std::defaultfloat;
  if (!over.empty()) os << "  (" << over.size() << " more over the budget)\n";
  for (const std::string& why : refused) os << "  not possible: " << why << "\n";
  if (fit.empty()) {
    os << "No layout fits; more ranks, activation checkpointing, --micro-batches or a smaller "
          "batch may.\n";
    return 1;
  }
  const SearchRow& w = fit.front();
  const TrainArgs& t = a.train;
  os << "\nFastest: dtensor train --mesh " << w.mesh << " --scheme " << w.scheme << " --batch "
     << t.batch << " --seq " << t.seq << " --hidden " << t.hidden << " --heads " << t.heads
     << " --layers " << t.layers;
  if (t.model != "gpt") os << " --model " << t.model;
  if (t.kv_heads > 0) os << " --kv-heads " << t.kv_heads;
  if (t.ffn > 0) os << " --ffn " << t.ffn;
  if (t.mixed_precision != "none") os << " --mixed-precision " << t.mixed_precision;
  if (t.micro_batches > 1) os << " --micro-batches " << t.micro_batches;
  if (w.checkpoint != Checkpointing::kNone) os << " --activation-checkpointing 1";
  if (w.checkpoint == Checkpointing::kSelective)
    os << " --activation-checkpointing-save " << kSelectiveOps;
  if (w.prefetch) os << " --prefetch";
  if (!w.reshard) os << " --no-reshard-after-forward";
  os << "\n";
  print_snippets(os, w, t);
  return 0;
}

}  // namespace

void apply_preset(EstimateArgs& a, const std::function<bool(const std::string&)>& given) {
  struct Preset {
    const char* name;
    int64_t layers, hidden, heads, kv_heads, ffn, vocab;
  };
  // Meta's published configurations (the models' params.json), as
  // torchtitan's llama3 model registry has them.
  static constexpr Preset kPresets[] = {
      {"llama3-8b", 32, 4096, 32, 8, 14336, 128256},
      {"llama3-70b", 80, 8192, 64, 8, 28672, 128256},
  };
  const Preset* p = nullptr;
  for (const Preset& candidate : kPresets)
    if (a.preset == candidate.name) p = &candidate;
  DT_CHECK(p != nullptr, "--preset ", quote(a.preset), " is not one of llama3-8b, llama3-70b");
  TrainArgs& t = a.train;
  if (!given("--model")) t.model = "llama";
  if (!given("--layers")) t.layers = p->layers;
  if (!given("--hidden")) t.hidden = p->hidden;
  if (!given("--heads")) t.heads = p->heads;
  if (!given("--kv-heads")) t.kv_heads = p->kv_heads;
  if (!given("--ffn")) t.ffn = p->ffn;
  if (!given("--vocab")) a.vocab = p->vocab;
}

int run_estimate(const EstimateArgs& a) {
  DT_CHECK(!a.search || a.svg.empty(),
           "--svg draws the step of one layout; it does not go with --search");
  if (!a.svg.empty()) check_output_file(a.svg, "--svg");
  if (a.search) return run_search(a);
  const TrainArgs& t = a.train;
  const Figures F = evaluate(a);
  const int64_t ranks = F.ranks;
  const Scheme& scheme = F.scheme;
  const DeviceMesh& mesh = *F.mesh;
  const estimate::Cluster& cluster = F.cluster;
  const estimate::Profile& profile = F.profile;
  const estimate::TimeEstimate& time = F.time;
  const std::map<std::string, Role>& by_key = F.by_key;
  const std::vector<std::string>& order = F.order;
  const int64_t params = F.params;
  const double tokens_per_s = F.tokens_per_s, mfu = F.mfu, profiled_s = F.profiled_s;
  const size_t first = F.first;  // the measured step's first phase in the profile

  if (!a.chrome_trace.empty()) {
    nlohmann::ordered_json events = nlohmann::ordered_json::array();
    for (const estimate::Span& s : time.timeline)
      events.push_back({{"name", s.name},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", s.lane},
                        {"ts", s.start * 1e6},
                        {"dur", (s.end - s.start) * 1e6}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", 0},
                      {"args", {{"name", "compute"}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", 1},
                      {"args", {{"name", "communication"}}}});
    std::ofstream out(a.chrome_trace);
    DT_CHECK(out, "--chrome-trace: cannot write ", quote(a.chrome_trace));
    out << nlohmann::ordered_json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  }

  if (!a.svg.empty()) {
    std::vector<SvgRole> roles;
    for (const std::string& key : order) {
      const Role& role = by_key.at(key);
      const estimate::RankProfile& first = profile.ranks[profile.index_of(role.ranks.front())];
      roles.push_back({ranks_text(role.ranks), role.figures.peak.peak,
                       &profile.memory_histories[static_cast<size_t>(first.memory_history)]});
    }
    std::ostringstream title;
    title << "dtensor estimate: " << t.scheme << " on " << ranks << " ranks (" << t.mesh
          << "), GPT of " << t.layers << " layers, hidden " << t.hidden << "; one step on "
          << cluster.device.name << ", " << seconds_text(time.step);
    write_file(a.svg, estimate_svg(title.str(), profile, time, first, roles), "--svg");
  }

  if (a.json) {
    nlohmann::ordered_json roles = nlohmann::ordered_json::array();
    for (const std::string& key : order) {
      const Role& role = by_key.at(key);
      const RankFigures& f = role.figures;
      nlohmann::ordered_json comm = nlohmann::ordered_json::object();
      for (size_t ph = 0; ph < kNumPhases; ++ph) {
        nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
        for (int k = 0; k < kNumCollectiveKinds; ++k) {
          const auto& [count, bytes] = f.phases[ph][static_cast<size_t>(k)];
          if (count > 0)
            kinds[to_string(static_cast<CollectiveKind>(k))] = {{"count", count}, {"bytes", bytes}};
        }
        comm[kPhaseNames[ph]] = kinds;
      }
      roles.push_back({{"ranks", role.ranks},
                       {"memory",
                        {{"parameters", f.categories.parameters},
                         {"gradients", f.categories.gradients},
                         {"optimizer_state", f.categories.optimizer_state},
                         {"activations", f.categories.activations},
                         {"peak_unsharded_parameters", f.peak.peak_unsharded_parameters},
                         {"peak_communication_buffers", f.peak.peak_communication_buffers},
                         {"peak", f.peak.peak}}},
                       {"communication", comm}});
    }
    nlohmann::ordered_json phase_times = nlohmann::ordered_json::object();
    for (size_t ph = 0; ph < kNumPhases; ++ph) phase_times[kPhaseNames[ph]] = F.phase_seconds[ph];
    nlohmann::ordered_json j{{"ranks", ranks},
                             {"mesh", t.mesh},
                             {"scheme", t.scheme},
                             {"parameters", params},
                             {"cluster", cluster.device.name},
                             {"ranks_per_node", cluster.ranks_per_node},
                             {"exact", {"memory", "communication"}},
                             {"estimated", {"time"}},
                             {"roles", roles},
                             {"time",
                              {{"step_s", time.step},
                               {"compute_s", time.compute},
                               {"communication_s", time.communication},
                               {"exposed_communication_s", time.exposed_communication},
                               {"phases_s", phase_times},
                               {"tokens_per_s", tokens_per_s},
                               {"mfu", mfu}}},
                             {"profiled_s", profiled_s},
                             {"computed_ranks", profile.ranks.size()},
                             {"runs", profile.runs}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::ostream& os = std::cout;
  os << "dtensor estimate: " << model_text(gpt_config(t, a.vocab)) << ", vocab " << a.vocab << ", "
     << std::fixed << std::setprecision(2)
     << (params >= 1000000000 ? static_cast<double>(params) / 1e9
                              : static_cast<double>(params) / 1e6)
     << (params >= 1000000000 ? "B" : "M") << " parameters;\n  " << t.batch << " sequences of "
     << t.seq << " tokens per step\n"
     << std::defaultfloat;
  os << "layout: " << scheme.describe(mesh, t.sequence_parallel) << " on " << ranks << " ranks ("
     << mesh.to_string() << ")";
  if (t.mixed_precision != "none") os << ", " << t.mixed_precision << " parameters";
  if (t.checkpoint_every > 0)
    os << ", activation checkpointing of every "
       << (t.checkpoint_every == 1 ? "" : std::to_string(t.checkpoint_every) + "th ") << "block";
  if (!t.checkpoint_save_ops.empty()) os << " (keeping " << t.checkpoint_save_ops << ")";
  if (!t.reshard_after_forward) os << ", no resharding after forward";
  if (t.prefetch) os << ", prefetch";
  if (t.micro_batches > 1) os << ", " << t.micro_batches << " micro-batches";
  os << "\n\n";

  os << "Memory per rank, exact (the bytes of the rank's tensors), by role:\n";
  os << "  " << std::left << std::setw(14) << "ranks" << std::right << std::setw(12) << "parameters"
     << std::setw(12) << "gradients" << std::setw(12) << "optimizer" << std::setw(13)
     << "activations" << std::setw(12) << "unsharded" << std::setw(12) << "comm bufs"
     << std::setw(14) << "peak"
     << "\n";
  for (const std::string& key : order) {
    const Role& role = by_key.at(key);
    const RankFigures& f = role.figures;
    os << "  " << std::left << std::setw(14) << ranks_text(role.ranks) << std::right;
    for (int64_t v : {f.categories.parameters, f.categories.gradients, f.categories.optimizer_state,
                      f.categories.activations, f.peak.peak_unsharded_parameters,
                      f.peak.peak_communication_buffers})
      // At least one space between columns: a 5-digit MiB figure is wider than 11.
      os << ' ' << std::setw(11) << mib_text(v);
    os << ' ' << std::setw(13) << mib_text(f.peak.peak);
    os << (f.peak.peak > cluster.device.memory ? "  over the device's memory" : "") << "\n";
  }
  os << "  (unsharded and comm bufs: fully_shard's gathered parameters and flat buffers at\n"
        "   their peaks; peak: all of the rank's tensors at their highest, over two steps)\n\n";

  const Role& first_role = by_key.at(order.front());
  os << "Communication per step, exact (ranks " << ranks_text(first_role.ranks)
     << "; bytes each rank hands in):\n";
  for (size_t ph = 0; ph < kNumPhases; ++ph) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      const auto& [count, bytes] = first_role.figures.phases[ph][static_cast<size_t>(k)];
      if (count == 0) continue;
      os << "  " << std::left << std::setw(10) << kPhaseNames[ph] << std::setw(16)
         << to_string(static_cast<CollectiveKind>(k)) << std::right << std::setw(6) << count << ' '
         << std::setw(13) << mib_text(bytes) << "\n";
    }
  }
  // Which collectives measurements timed, so that tables that cover none of
  // the step's (other group sizes, sizes beyond theirs) show.
  int64_t measured = 0, collectives = 0;
  for (size_t i = profile.phase_events[first]; i < profile.events.size(); ++i) {
    const StepEvent& e = profile.events[i];
    if (e.type != StepEvent::Type::Collective) continue;
    const std::vector<int>& group = profile.groups[static_cast<size_t>(e.group)];
    if (group.size() < 2) continue;
    ++collectives;
    measured += estimate::measured_seconds(cluster, e.kind, e.bytes, group).has_value();
  }
  os << "\nTime per step, estimated on " << ranks << " x " << cluster.device.name << " ("
     << cluster.ranks_per_node << " per node; a roofline for ops, ";
  if (cluster.measured.empty())
    os << "alpha-beta for collectives;\nnot yet checked against a measurement of this cluster):\n";
  else
    os << "for collectives measured\ntimes (" << measured << " of the step's " << collectives
       << ") and alpha-beta for the rest; not checked against a measured step):\n";
  os << "  step " << seconds_text(time.step) << " (compute " << seconds_text(time.compute)
     << ", communication " << seconds_text(time.communication) << ", of it exposed "
     << seconds_text(time.exposed_communication) << ")\n";
  os << "  ";
  for (size_t ph = 0; ph < kNumPhases; ++ph)
    os << (ph ? ", " : "") << kPhaseNames[ph] << " " << seconds_text(F.phase_seconds[ph]);
  os << "\n  " << std::fixed << std::setprecision(0) << tokens_per_s << " tokens/s, MFU "
     << std::setprecision(1) << 100 * mfu << "%\n";
  // The error band the tool has measured (docs/estimate.md: "Calibrating,
  // and how good the estimate is here" and "Against torchtitan's
  // published Llama 3 figures").
  if (!a.calibration.empty())
    os << "  error band: on the machine it calibrated, 15 of 16 estimates were within 25% of\n"
          "  the measured step (0.64 to 1.25 x)\n";
  else
    os << "  error band: untuned; against torchtitan's published Llama 3 runs on H100s, its\n"
          "  tokens/s were 0.77 to 1.60 x theirs\n";
  os << "\nProfiled in " << std::setprecision(2) << profiled_s << " s on a shape-only world of "
     << ranks << " ranks (" << order.size() << (order.size() == 1 ? " role" : " roles") << "; "
     << profile.ranks.size() << (profile.ranks.size() == 1 ? " rank" : " ranks")
     << " computed, the step run "
     << (profile.runs == 1   ? "once"
         : profile.runs == 2 ? "twice"
                             : std::to_string(profile.runs) + " times")
     << ").\n";
  return 0;
}

}  // namespace dtensor::cli
