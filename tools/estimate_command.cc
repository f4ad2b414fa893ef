// `dtensor estimate`: the step `dtensor train` runs, profiled on a
// shape-only world of the mesh's ranks (World::shape_only): each rank's
// memory and collectives, exactly, and the step's time, estimated on a
// described cluster (estimate.h). Ranks whose figures agree are one role.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "dtensor/error.h"
#include "dtensor/estimate.h"
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

}  // namespace

int run_estimate(const EstimateArgs& a) {
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
  const World world = World::shape_only(static_cast<int>(ranks));
  const DeviceMesh mesh = make_mesh(
      t.mesh,
      t.names.empty() ? (mesh_shape.size() == 1 ? (scheme.tp ? "tp" : "dp") : "dp,tp") : t.names,
      &world);
  models::GPTConfig config;
  config.batch = t.batch;
  config.seq = t.seq;
  config.hidden = t.hidden;
  config.heads = t.heads;
  config.layers = t.layers;
  config.vocab = a.vocab;
  DT_CHECK(t.hidden % t.heads == 0, "--hidden ", t.hidden, " is not a multiple of --heads ",
           t.heads);

  // Two steps: the second, with the optimizer's state made, is the one
  // measured; the peaks cover both (and the model's construction).
  std::optional<MemoryReport> report;
  int64_t params = 0;
  const estimate::Profile profile = estimate::profile(world, [&] {
    Trainer trainer(config, mesh, scheme, t, /*meta=*/true);
    for (auto& [name, p] : trainer.model->named_parameters()) params += p->shape().product();
    const DTensorSpec batch(mesh, trainer.input, Shape{t.batch, t.seq}, DType::Int64);
    trainer.step(DTensor::meta(batch), DTensor::meta(batch));
    MemoryTracker memory(*trainer.model, trainer.optimizer.get());
    trainer.step(DTensor::meta(batch), DTensor::meta(batch), nullptr, nullptr, &memory);
    report = memory.report();
  });
  const double profiled_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t phases = 3, first = profile.phases.size() - phases;

  // Each rank's figures, then the roles.
  std::map<std::string, Role> by_key;
  std::vector<std::string> order;
  for (size_t i = 0; i < profile.ranks.size(); ++i) {
    const estimate::RankProfile& r = profile.ranks[i];
    RankFigures f;
    f.peak = r.memory;
    f.categories = report->ranks[i];
    f.categories.rank = 0;
    f.phases.resize(phases);
    for (size_t ph = 0; ph < phases; ++ph) {
      const size_t begin = r.phase_starts[first + ph];
      const size_t end = first + ph + 1 < r.phase_starts.size() ? r.phase_starts[first + ph + 1]
                                                                : r.collectives.size();
      for (size_t k = begin; k < end; ++k) {
        auto& [count, bytes] = f.phases[ph][static_cast<size_t>(r.collectives[k].kind)];
        ++count;
        bytes += r.collectives[k].bytes;
      }
    }
    const std::string key = f.key();
    auto [it, added] = by_key.try_emplace(key, Role{f, {}});
    if (added) order.push_back(key);
    it->second.ranks.push_back(r.rank);
  }
  const estimate::TimeEstimate time = estimate::estimate_time(profile, cluster, first);
  const double tokens = static_cast<double>(t.batch * t.seq);
  const double tokens_per_s = tokens / time.step;
  const double peak_flops =
      cluster.device.peak_flops[static_cast<int>(t.mixed_precision == "none"   ? DType::Float32
                                                 : t.mixed_precision == "bf16" ? DType::BFloat16
                                                                               : DType::Float16)];
  const double mfu = model_flops_per_token(static_cast<double>(params), config) * tokens /
                     (time.step * peak_flops * static_cast<double>(ranks));

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

  if (a.json) {
    nlohmann::ordered_json roles = nlohmann::ordered_json::array();
    for (const std::string& key : order) {
      const Role& role = by_key.at(key);
      const RankFigures& f = role.figures;
      nlohmann::ordered_json comm = nlohmann::ordered_json::object();
      for (size_t ph = 0; ph < phases; ++ph) {
        nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
        for (int k = 0; k < kNumCollectiveKinds; ++k) {
          const auto& [count, bytes] = f.phases[ph][static_cast<size_t>(k)];
          if (count > 0)
            kinds[to_string(static_cast<CollectiveKind>(k))] = {{"count", count}, {"bytes", bytes}};
        }
        comm[profile.phases[first + ph]] = kinds;
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
    for (size_t ph = 0; ph < phases; ++ph)
      phase_times[profile.phases[first + ph]] =
          (ph + 1 < phases ? time.phase_starts[first + ph + 1] : time.step) -
          time.phase_starts[first + ph];
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
                             {"profiled_s", profiled_s}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::ostream& os = std::cout;
  os << "dtensor estimate: GPT of " << t.layers << " layers, hidden " << t.hidden << ", " << t.heads
     << " heads, vocab " << a.vocab << ", " << std::fixed << std::setprecision(2)
     << (params >= 1000000000 ? static_cast<double>(params) / 1e9
                              : static_cast<double>(params) / 1e6)
     << (params >= 1000000000 ? "B" : "M") << " parameters;\n  " << t.batch << " sequences of "
     << t.seq << " tokens per step\n"
     << std::defaultfloat;
  os << "layout: " << scheme.describe(mesh, t.sequence_parallel) << " on " << ranks << " ranks ("
     << mesh.to_string() << ")";
  if (t.mixed_precision != "none") os << ", " << t.mixed_precision << " parameters";
  if (t.checkpoint_every > 0)
    os << ", activation checkpointing of every " << t.checkpoint_every
       << (t.checkpoint_every == 1 ? "" : "th") << " block";
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
      os << std::setw(12) << mib_text(v);
    os << std::setw(14) << mib_text(f.peak.peak);
    os << (f.peak.peak > cluster.device.memory ? "  over the device's memory" : "") << "\n";
  }
  os << "  (unsharded and comm bufs: fully_shard's gathered parameters and flat buffers at\n"
        "   their peaks; peak: all of the rank's tensors at their highest, over two steps)\n\n";

  const Role& first_role = by_key.at(order.front());
  os << "Communication per step, exact (ranks " << ranks_text(first_role.ranks)
     << "; bytes each rank hands in):\n";
  for (size_t ph = 0; ph < phases; ++ph) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      const auto& [count, bytes] = first_role.figures.phases[ph][static_cast<size_t>(k)];
      if (count == 0) continue;
      os << "  " << std::left << std::setw(10) << profile.phases[first + ph] << std::setw(16)
         << to_string(static_cast<CollectiveKind>(k)) << std::right << std::setw(6) << count
         << std::setw(14) << mib_text(bytes) << "\n";
    }
  }
  os << "\nTime per step, estimated on " << ranks << " x " << cluster.device.name << " ("
     << cluster.ranks_per_node << " per node; a roofline for ops, alpha-beta for collectives;\n"
     << "not yet checked against a measurement of this cluster):\n";
  os << "  step " << seconds_text(time.step) << " (compute " << seconds_text(time.compute)
     << ", communication " << seconds_text(time.communication) << ", of it exposed "
     << seconds_text(time.exposed_communication) << ")\n";
  os << "  ";
  for (size_t ph = 0; ph < phases; ++ph)
    os << (ph ? ", " : "") << profile.phases[first + ph] << " "
       << seconds_text((ph + 1 < phases ? time.phase_starts[first + ph + 1] : time.step) -
                       time.phase_starts[first + ph]);
  os << "\n  " << std::fixed << std::setprecision(0) << tokens_per_s << " tokens/s, MFU "
     << std::setprecision(1) << 100 * mfu << "%\n";
  os << "\nProfiled in " << std::setprecision(2) << profiled_s << " s on a shape-only world of "
     << ranks << " ranks (" << order.size() << (order.size() == 1 ? " role" : " roles") << ").\n";
  return 0;
}

}  // namespace dtensor::cli
