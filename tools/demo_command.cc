// `dtensor demo`: the GPT of models/gpt.h laid out by its tensor-parallel
// plan on a (dp, tp) mesh, verified against the same model on one rank, with
// what a user wants to see of it: the layout of each weight, the
// collectives per layer, the planned communication cost, the
// propagation-cache hit rate and the time per step.
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli.h"
#include "demo_model.h"
#include "dtensor/error.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor::cli {

namespace {

constexpr CollectiveKind kDemoKinds[] = {CollectiveKind::AllGather, CollectiveKind::AllReduce,
                                         CollectiveKind::ReduceScatter, CollectiveKind::AllToAll};

// What ran in one part of the model (or one whole step).
struct CommRecord {
  std::string name;
  int64_t counts[4] = {};
  int64_t bytes = 0;  // per rank, all kinds
  double planned_us = 0;
  int64_t total() const { return counts[0] + counts[1] + counts[2] + counts[3]; }
};

CommRecord record_of(const std::string& name, const CommDebugMode& mode) {
  CommRecord r{name};
  for (int i = 0; i < 4; ++i) {
    r.counts[i] = mode.count(kDemoKinds[i]);
    r.bytes += mode.bytes(kDemoKinds[i]);
  }
  r.planned_us = mode.planned_cost_us();
  return r;
}

// Closes the mode of the current section and opens the next one.
class SectionTracker {
 public:
  void enter(const std::string& name) {
    close();
    name_ = name;
    mode_ = std::make_unique<CommDebugMode>();
  }
  std::vector<CommRecord> finish() {
    close();
    return std::move(records_);
  }

 private:
  void close() {
    if (mode_) records_.push_back(record_of(name_, *mode_));
    mode_.reset();
  }
  std::string name_;
  std::unique_ptr<CommDebugMode> mode_;
  std::vector<CommRecord> records_;
};

World make_world(const DemoArgs& args, int64_t mesh_ranks) {
  const bool mpi = args.world == "mpi" || (args.world == "auto" && World::launched_by_mpi());
  if (!mpi) return World::simulated(static_cast<int>(mesh_ranks));
  DT_CHECK(World::mpi_available(), "--world ", args.world,
           " needs the MPI backend, but this dtensor was built without MPI (configure with "
           "-DDTENSOR_MPI=ON and install libopenmpi-dev)");
  World world = World::mpi();
  const bool one = world.size() == 1;
  DT_CHECK(world.size() == mesh_ranks, "--mesh ", args.mesh, " has ", mesh_ranks,
           " ranks, but this MPI job has ", world.size(), one ? " process" : " processes",
           "; run mpirun -np ", mesh_ranks, " or pass a --mesh of ", world.size(),
           one ? " rank" : " ranks");
  return world;
}

Shape local_shape_of(const DTensor& d, int rank) {
  return d.spec().local_shape(*d.mesh().coordinate(rank));
}

std::string shape_text(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// The mesh dim roles: (dp, tp) for a 2-d mesh, tp alone for a 1-d one.
struct Roles {
  int dp = -1;
  int tp = 0;
};

std::string dim_name(const DeviceMesh& mesh, int d) {
  const std::vector<std::string> names = mesh.names();
  return d < static_cast<int>(names.size()) && !names[d].empty() ? names[d]
                                                                  : "dim " + std::to_string(d);
}

// "2x4 (dp=2, tp=4)"
std::string mesh_text(const DeviceMesh& mesh) {
  std::string sizes, named;
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (d) {
      sizes += "x";
      named += ", ";
    }
    sizes += std::to_string(mesh.size(d));
    named += dim_name(mesh, d) + "=" + std::to_string(mesh.size(d));
  }
  return sizes + " (" + named + ")";
}

void print_comm_table(std::ostream& os, const std::vector<CommRecord>& rows, const char* first) {
  os << "  " << std::left << std::setw(18) << first << std::right << std::setw(11) << "all_gather"
     << std::setw(11) << "all_reduce" << std::setw(15) << "reduce_scatter" << std::setw(11)
     << "all_to_all" << std::setw(13) << "bytes/rank" << std::setw(13) << "planned us" << "\n";
  for (const CommRecord& r : rows) {
    os << "  " << std::left << std::setw(18) << r.name << std::right;
    os << std::setw(11) << r.counts[0] << std::setw(11) << r.counts[1] << std::setw(15)
       << r.counts[2] << std::setw(11) << r.counts[3] << std::setw(13) << r.bytes << std::setw(13)
       << std::fixed << std::setprecision(1) << r.planned_us << "\n";
  }
}

nlohmann::ordered_json comm_json(const CommRecord& r) {
  nlohmann::ordered_json j;
  j["name"] = r.name;
  for (int i = 0; i < 4; ++i) j[to_string(kDemoKinds[i])] = r.counts[i];
  j["bytes_per_rank"] = r.bytes;
  j["planned_us"] = r.planned_us;
  return j;
}

// Refuses a model that would not fit in memory before building any of it.
// A rough upper bound: the weights exist once as full tensors (the
// reference) and once laid out, replicated over dp; the activations of one
// block (x, q, k, v, MLP input of 4 * hidden, logits over the vocabulary,
// attention scores per head) a few times over for the reference, the
// distributed run and their gradients-free temporaries.
void check_demo_memory(const ModelConfig& c, const Shape& mesh_shape) {
  const double h = static_cast<double>(c.hidden), v = static_cast<double>(c.vocab);
  const double tokens = static_cast<double>(c.batch) * static_cast<double>(c.seq);
  const double dp = mesh_shape.size() == 2 ? static_cast<double>(mesh_shape[0]) : 1;
  const double weights = 2 * v * h + static_cast<double>(c.seq) * h +
                         static_cast<double>(c.layers) * (12 * h * h + 13 * h);
  const double activations = tokens * (12 * h + 2 * v) +
                             static_cast<double>(c.batch) * static_cast<double>(c.heads) *
                                 static_cast<double>(c.seq) * static_cast<double>(c.seq) * 2;
  const double bytes = 4 * (weights * (1 + dp) + 4 * activations);
  check_memory_estimate(bytes, "the demo model (batch " + std::to_string(c.batch) + ", seq " +
                                   std::to_string(c.seq) + ", hidden " + std::to_string(c.hidden) +
                                   ", heads " + std::to_string(c.heads) + ", layers " +
                                   std::to_string(c.layers) + ", vocab " + std::to_string(c.vocab) + ")",
                        "give smaller --batch, --seq, --hidden, --layers or --vocab");
}

// A parameter as the weights table shows it: its style is the one the plan
// gave its module.
struct ParamRow {
  std::string name;
  std::string style;
  const DTensor* value;
};

std::string short_style(const std::optional<ParallelStyle>& style, nn::Module& module,
                        const std::string& leaf) {
  if (!style) return "replicated";
  const bool embedding = dynamic_cast<nn::Embedding*>(&module) != nullptr;
  if (std::holds_alternative<ColwiseParallel>(*style)) return "column-parallel";
  if (std::holds_alternative<RowwiseParallel>(*style))
    return embedding ? "vocab-parallel" : leaf == "bias" ? "row-parallel (added once)" : "row-parallel";
  if (std::holds_alternative<SequenceParallel>(*style)) return "sequence-parallel";
  return "replicated";
}

// Block 0's and the others' (blocks after 0 are laid out like block 0).
std::vector<ParamRow> param_rows(models::GPT& model, const ParallelizePlan& plan, bool all_blocks) {
  std::vector<ParamRow> out;
  for (const auto& [name, value] : model.named_parameters()) {
    if (!all_blocks && name.rfind("blocks.", 0) == 0 && name.rfind("blocks.0.", 0) != 0) continue;
    const size_t dot = name.rfind('.');
    const std::string module = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    std::optional<ParallelStyle> style;
    for (const auto& [pattern, s] : plan)  // PrepareModuleInput moves no parameter
      if (!std::holds_alternative<PrepareModuleInput>(s) && module_name_matches(pattern, module))
        style = s;
    out.push_back({name, short_style(style, model.submodule(module), leaf), value});
  }
  return out;
}

}  // namespace

int run_demo(const DemoArgs& args) {
  ModelConfig config = args.model;
  const Shape mesh_shape = parse_mesh_arg(args.mesh);
  DT_CHECK(mesh_shape.size() == 1 || mesh_shape.size() == 2, "--mesh ", args.mesh, " has ",
           mesh_shape.size(), " dims; expected 1 (tp) or 2 (dp x tp), e.g. 2x4");
  const int64_t ranks = mesh_rank_count(mesh_shape, args.mesh);
  check_demo_memory(config, mesh_shape);
  World world = make_world(args, ranks);
  const std::string names =
      !args.names.empty() ? args.names : mesh_shape.size() == 1 ? "tp" : "dp,tp";
  const DeviceMesh mesh = make_mesh(args.mesh, names, &world);
  const Roles roles = mesh.ndim() == 2 ? Roles{0, 1} : Roles{-1, 0};
  const bool rank0 = world.rank() == 0;

  DT_CHECK(config.hidden % config.heads == 0, "--hidden ", config.hidden,
           " must be a multiple of --heads ", config.heads);
  DT_CHECK(config.heads % mesh.size(roles.tp) == 0, "--heads ", config.heads,
           " must be a multiple of the tensor-parallel size ", mesh.size(roles.tp),
           " (each rank computes whole attention heads)");
  const Tensor ids = Tensor::randint(0, config.vocab, {config.batch, config.seq}, 7);
  const Tensor targets = Tensor::randint(0, config.vocab, {config.batch, config.seq}, 8);
  models::GPT model(mesh, config, /*seed=*/1234);
  // The sections of the per-layer table, entered by hooks on the modules
  // that begin them (registered before the plan's, so they run first).
  std::function<void(const std::string&)> enter;
  auto section_hook = [&](nn::Module& m, const std::string& section) {
    m.register_forward_pre_hook([&enter, section](nn::Module&, const DTensor& x) {
      if (enter) enter(section);
      return x;
    });
  };
  section_hook(model.submodule("tok"), "embedding");
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l);
    section_hook(model.submodule(b + ".ln1"), "block" + std::to_string(l) + ".attention");
    section_hook(model.submodule(b + ".ln2"), "block" + std::to_string(l) + ".mlp");
  }
  section_hook(model.submodule("lnf"), "head");
  const ParallelizePlan plan =
      models::gpt_tensor_parallel_plan(config.sequence_parallel, config.loss_parallel);
  parallelize_module(model, roles.tp, plan);
  Placements input_placements(static_cast<size_t>(mesh.ndim()), Replicate());
  if (roles.dp >= 0) input_placements[static_cast<size_t>(roles.dp)] = Shard(0);
  const DTensor d_ids = distribute_tensor(ids, mesh, input_placements);
  const DTensor d_targets = distribute_tensor(targets, mesh, input_placements);

  // The steps: step 1 fills the propagation cache; the sections of the last
  // step give the per-layer table (every step runs the same collectives).
  const CacheInfo cache_before = sharding_prop_cache_info();
  std::vector<CommRecord> step_records, sections;
  std::vector<double> step_ms;
  std::vector<CacheInfo> step_cache;
  std::optional<DTensor> logits, loss;
  // A forward pass only: record no graph for backward (torch.no_grad()).
  NoGradGuard inference;
  for (int step = 0; step < args.steps; ++step) {
    SectionTracker tracker;
    enter = [&](const std::string& name) { tracker.enter(name); };
    const CacheInfo c0 = sharding_prop_cache_info();
    CommDebugMode comm;
    const auto t0 = std::chrono::steady_clock::now();
    logits.emplace(model(d_ids));
    tracker.enter("loss");
    loss.emplace(models::gpt_loss(*logits, d_targets));
    const auto t1 = std::chrono::steady_clock::now();
    sections = tracker.finish();
    enter = nullptr;
    step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    step_records.push_back(record_of("step " + std::to_string(step + 1), comm));
    const CacheInfo c1 = sharding_prop_cache_info();
    step_cache.push_back({c1.hits - c0.hits, c1.misses - c0.misses, c1.size, c1.capacity});
  }
  const CacheInfo cache_after = sharding_prop_cache_info();
  const int64_t hits = cache_after.hits - cache_before.hits;
  const int64_t misses = cache_after.misses - cache_before.misses;
  const double hit_rate = hits + misses == 0 ? 0 : static_cast<double>(hits) / (hits + misses);

  // Verification (outside the measured steps: full_tensor gathers).
  // The reference: the same model on a 1-rank mesh of this process.
  World one = World::simulated(1);
  const DeviceMesh one_mesh(one, {1});
  models::GPT reference(one_mesh, config, /*seed=*/1234);
  const DTensor ref_logits_d = reference(distribute_tensor(ids, one_mesh, {Replicate()}));
  const Tensor ref_logits = ref_logits_d.full_tensor();
  const Tensor ref_loss =
      models::gpt_loss(ref_logits_d, distribute_tensor(targets, one_mesh, {Replicate()})).full_tensor();
  const Tensor full_logits = logits->full_tensor();
  const double loss_value = loss->full_tensor().item();
  const double ref_loss_value = ref_loss.item();
  const double loss_diff = std::abs(loss_value - ref_loss_value);
  const double logits_diff = max_abs_diff(full_logits, ref_logits);
  const bool verified = loss_diff <= args.tolerance && logits_diff <= args.tolerance;

  const std::string world_text =
      world.is_simulated()
          ? "simulated: " + std::to_string(world.size()) + " ranks in this process"
          : "MPI: " + std::to_string(world.size()) + " processes, one rank each";
  const std::string tp_name = dim_name(mesh, roles.tp);
  if (!rank0) return verified ? 0 : 1;

  if (args.json) {
    nlohmann::ordered_json j;
    j["world"] = world.is_simulated() ? "simulated" : "mpi";
    j["ranks"] = world.size();
    j["mesh"] = dims_json(mesh.shape());
    j["names"] = mesh.names();
    j["dp"] = roles.dp >= 0 ? nlohmann::ordered_json(dim_name(mesh, roles.dp)) : nullptr;
    j["tp"] = tp_name;
    j["model"] = {{"batch", config.batch},   {"seq", config.seq},
                  {"hidden", config.hidden}, {"heads", config.heads},
                  {"layers", config.layers}, {"vocab", config.vocab},
                  {"sequence_parallel", config.sequence_parallel},
                  {"loss_parallel", config.loss_parallel}};
    nlohmann::ordered_json params = nlohmann::ordered_json::array();
    for (const auto& p : param_rows(model, plan, /*all_blocks=*/true)) {
      params.push_back({{"name", p.name},
                        {"shape", dims_json(p.value->shape())},
                        {"placements", to_string(p.value->placements())},
                        {"local_shape", dims_json(local_shape_of(*p.value, world.rank()))},
                        {"style", p.style}});
    }
    j["weights"] = params;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const CommRecord& r : sections) layers.push_back(comm_json(r));
    j["collectives_per_layer"] = layers;
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (size_t i = 0; i < step_records.size(); ++i) {
      nlohmann::ordered_json s = comm_json(step_records[i]);
      s["wall_ms"] = step_ms[i];
      s["cache_hits"] = step_cache[i].hits;
      s["cache_misses"] = step_cache[i].misses;
      steps.push_back(s);
    }
    j["steps"] = steps;
    j["propagation_cache"] = {{"hits", hits}, {"misses", misses}, {"hit_rate", hit_rate}};
    j["loss"] = loss_value;
    j["reference_loss"] = ref_loss_value;
    j["loss_diff"] = loss_diff;
    j["logits_max_diff"] = logits_diff;
    j["tolerance"] = args.tolerance;
    j["verified"] = verified;
    std::cout << j.dump(2) << "\n";
    return verified ? 0 : 1;
  }

  std::ostream& os = std::cout;
  os << "dtensor demo: a tensor-parallel transformer forward pass, checked against one process\n"
     << "  world  " << world_text << "\n"
     << "  mesh   " << mesh_text(mesh) << ": ";
  if (roles.dp >= 0)
    os << "data parallel over " << dim_name(mesh, roles.dp) << ", ";
  os << "tensor parallel over " << tp_name << "\n"
     << "  model  batch " << config.batch << ", seq " << config.seq << ", hidden " << config.hidden
     << ", heads " << config.heads << ", layers " << config.layers << ", vocab " << config.vocab
     << "; sequence parallel " << (config.sequence_parallel ? "on" : "off") << ", loss parallel "
     << (config.loss_parallel ? "on" : "off") << "\n\n";

  os << "Weights: placements per mesh dim, and the shard rank " << world.rank()
     << " holds (blocks after 0 are laid out like block 0)\n";
  os << "  " << std::left << std::setw(30) << "name" << std::setw(13) << "shape" << std::setw(12)
     << "placements" << std::setw(13) << "local shape" << "style\n";
  for (const auto& p : param_rows(model, plan, /*all_blocks=*/false)) {
    os << "  " << std::left << std::setw(30) << p.name << std::setw(13)
       << shape_text(p.value->shape()) << std::setw(12) << to_string(p.value->placements())
       << std::setw(13) << shape_text(local_shape_of(*p.value, world.rank()))
       << p.style << "\n";
  }
  const auto params = param_rows(model, plan, false);
  for (const auto& p : params) {
    if (p.name != "blocks.0.mlp.w1.weight" && p.name != "blocks.0.mlp.w2.weight") continue;
    os << "\n" << p.name << " (" << p.style << ") over the mesh:\n" << visualize_sharding(*p.value);
  }

  os << "\nCollectives per layer in one step (CommDebugMode), bytes per rank, and the\n"
     << "planner's cost-model estimate of the redistributions that ran:\n";
  print_comm_table(os, sections, "layer");

  os << "\nSteps (forward pass; the first one fills the sharding-propagation cache";
  if (world.is_simulated()) os << ";\nthe simulated world computes every rank's shards in this one process";
  os << "):\n";
  os << "  " << std::left << std::setw(6) << "step" << std::right << std::setw(10) << "wall ms"
     << std::setw(13) << "collectives" << std::setw(13) << "planned us" << std::setw(12)
     << "cache hits" << std::setw(14) << "cache misses" << "\n";
  for (size_t i = 0; i < step_records.size(); ++i) {
    os << "  " << std::left << std::setw(6) << i + 1 << std::right << std::fixed
       << std::setprecision(2) << std::setw(10) << step_ms[i] << std::setw(13)
       << step_records[i].total() << std::setprecision(1) << std::setw(13)
       << step_records[i].planned_us << std::setw(12) << step_cache[i].hits << std::setw(14)
       << step_cache[i].misses << "\n";
  }
  os << "  sharding-propagation cache over " << args.steps << " steps: " << hits << " hits, "
     << misses << " misses, hit rate " << std::setprecision(1) << 100.0 * hit_rate << "%";
  bool warm = args.steps > 1;
  for (size_t i = 1; i < step_cache.size(); ++i) warm = warm && step_cache[i].misses == 0;
  if (warm) os << " (every lookup after the first step hits)";
  os << "\n\n";

  os << std::defaultfloat << std::setprecision(7);
  os << "Loss " << loss_value << ", reference (the model on one rank) " << ref_loss_value
     << "\n";
  os << std::setprecision(3) << "max |difference|: loss " << loss_diff << ", logits "
     << logits_diff << " (tolerance " << args.tolerance << ")\n";
  if (!verified) {
    os << "MISMATCH: the DTensor model differs from the reference beyond the tolerance\n";
    return 1;
  }
  os << "verified (max difference " << std::max(loss_diff, logits_diff) << ")\n";
  return 0;
}

}  // namespace dtensor::cli
