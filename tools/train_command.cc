// `dtensor train`: the GPT of models/gpt.h learning the shipped text
// (train_data.h) on a mesh with the parallelism schemes people combine,
// trained step for step next to the same model on one process. Shows the
// loss falling (a chart here and an SVG file), the collectives and bytes of
// every step and its time, and fails when the two trainings part.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "dtensor/checkpoint.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"
#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"
#include "dtensor/tensor_parallel.h"
#include "output.h"
#include "plot.h"
#include "train.h"
#include "train_data.h"
#include "trainer.h"

namespace dtensor::cli {

namespace {

// Which parallelism runs on which mesh dim.
World make_train_world(const TrainArgs& args, int64_t mesh_ranks) {
  const bool mpi = args.world == "mpi" || (args.world == "auto" && World::launched_by_mpi());
  DT_CHECK(args.world == "auto" || args.world == "sim" || args.world == "mpi", "--world ",
           quote(args.world), " is not one of auto, sim, mpi");
  if (!mpi) return World::simulated(static_cast<int>(mesh_ranks));
  DT_CHECK(World::mpi_available(), "--world ", args.world,
           " needs the MPI backend, but this dtensor was built without MPI");
  World world = World::mpi();
  DT_CHECK(world.size() == mesh_ranks, "--mesh ", args.mesh, " has ", mesh_ranks,
           " ranks, but this MPI job has ", world.size(), " processes; run mpirun -np ", mesh_ranks,
           " or pass a --mesh of ", world.size(), " ranks");
  return world;
}

struct StepRecord {
  double loss = 0, reference = NAN, ms = 0;
  double collective_ms = 0;  // inside the backend's collectives (CommDebugMode)
  double grad_norm = 0, reference_grad_norm = NAN;
  PhaseCounts phases{};
  PhaseDtypes phase_dtypes{};
  KindCounts counts{};
  int64_t bytes = 0;
};

// FNV-1a over the bits of the losses and final parameters: one number to
// compare between the simulated world and mpirun.
struct Fingerprint {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const Tensor& t) {
    const Tensor c = t.contiguous();
    add(c.raw_data(), c.nbytes());
  }
};

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

// Refuses a run that would not fit in memory before building any of it. A
// rough upper bound: the parameters with their gradients, AdamW's two
// states and a gathered copy, for the one-process reference (with --check)
// and for this process's share of the distributed model (all of it in the
// simulated world; under MPI a process's rank holds 1/shards of it, its
// parameters split over the fsdp and tp mesh dims, once built with --init
// meta); the activations kept for backward of every block (x, q, k, v, the
// MLP's three of --ffn features, the attention scores per head) and the
// logits over the vocabulary, twice.
void check_train_memory(const TrainArgs& a, int64_t vocab, const Scheme& scheme,
                        const DeviceMesh& mesh) {
  const double h = static_cast<double>(a.hidden), v = static_cast<double>(vocab);
  const double layers = static_cast<double>(a.layers), seq = static_cast<double>(a.seq);
  const double tokens = static_cast<double>(a.batch) * seq;
  // The MLP's width and matrices: GPT's two of 4 x hidden by default,
  // SwiGLU's three.
  const double ffn = a.ffn > 0 ? static_cast<double>(a.ffn) : 4 * h;
  const double mlp_matrices = a.model == "llama" ? 3 : 2;
  const double params =
      2 * v * h + seq * h + layers * (4 * h * h + mlp_matrices * ffn * h + 13 * h);
  const double activations =
      tokens * ((4 * h + 3 * ffn) * std::max(layers, 1.0) + 4 * v) +
      static_cast<double>(a.batch) * static_cast<double>(a.heads) * seq * seq * 3 * layers;
  double shards = 1;
  if (scheme.fsdp) shards *= static_cast<double>(mesh.size(scheme.dp_dim));
  if (scheme.tp) shards *= static_cast<double>(mesh.size(scheme.tp_dim));
  const bool one_rank = !mesh.world().is_simulated() && a.init == "meta";
  const double models = (a.check ? 1 : 0) + (one_rank ? 1 / shards : 1);
  check_memory_estimate(4 * (params * 5 * models + activations * 2 * 2),
                        "training this model (batch " + std::to_string(a.batch) + ", seq " +
                            std::to_string(a.seq) + ", hidden " + std::to_string(a.hidden) +
                            ", heads " + std::to_string(a.heads) + ", layers " +
                            std::to_string(a.layers) + ")",
                        "give smaller --batch, --seq, --hidden or --layers" +
                            std::string(a.check ? ", or --no-check" : ""));
}

// One rank's memory report with its process's peaks, as rank 0 prints it.
struct MemoryRow {
  RankMemory rank;
  int64_t peak_allocated = 0, peak_reserved = 0, reserved_at_start = 0;
  int64_t resident_at_start = 0, peak_resident = 0;
  int64_t peak_unsharded_parameters = 0, peak_communication_buffers = 0;
};

// Every rank's row, on every process (an all_gather over the world: under
// MPI each process measured its own peaks).
std::vector<MemoryRow> gather_memory(const MemoryReport& report, const World& world) {
  constexpr int64_t kFields = 12;
  auto row_of = [&](int rank) {
    RankMemory m;
    for (const RankMemory& r : report.ranks)
      if (r.rank == rank) m = r;
    const std::vector<int64_t> v = {rank,
                                    m.parameters,
                                    m.gradients,
                                    m.optimizer_state,
                                    m.activations,
                                    report.process.peak_allocated,
                                    report.process.peak_reserved,
                                    report.reserved_at_start,
                                    report.resident_at_start,
                                    report.peak_resident,
                                    report.process.peak_unsharded_parameters,
                                    report.process.peak_communication_buffers};
    return Tensor::from_vector(v, Shape{1, kFields});
  };
  const DeviceMesh everyone(world, {world.size()});
  const Tensor all = from_local(row_of, everyone, {Shard(0)}).full_tensor();
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  std::vector<MemoryRow> rows;
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* f = v.data() + static_cast<size_t>(r) * kFields;
    MemoryRow row;
    row.rank = {static_cast<int>(f[0]), f[1], f[2], f[3], f[4]};
    row.peak_allocated = f[5], row.peak_reserved = f[6], row.reserved_at_start = f[7];
    row.resident_at_start = f[8], row.peak_resident = f[9];
    row.peak_unsharded_parameters = f[10], row.peak_communication_buffers = f[11];
    rows.push_back(row);
  }
  return rows;
}

// The report's memory section: the rows of every rank, then each
// process's measured peaks (one process in the simulated world).
void print_memory(std::ostream& os, const std::vector<MemoryRow>& rows, const World& world,
                  bool reference) {
  os << "Memory per rank after the last step (activations: kept for backward at the end of "
        "its forward)\n"
     << RankMemory::header();
  for (const MemoryRow& m : rows) os << m.rank.row();
  // Measured for the whole process, so the reference counts when it
  // trains in the same process.
  const std::string also = reference ? " and the one-process reference" : "";
  for (const MemoryRow& m : rows) {
    if (world.is_simulated() && m.rank.rank != 0) break;
    os << (world.is_simulated()
               ? "  this process (all " + std::to_string(world.size()) + " ranks" + also + ")"
               : "  process of rank " + std::to_string(m.rank.rank) +
                     (also.empty() ? "" : " (with" + also.substr(4) + ")"))
       << ": peak " << mib_text(m.peak_allocated) << " allocated, " << mib_text(m.peak_reserved)
       << " reserved; resident set " << mib_text(m.resident_at_start) << " at the first step, "
       << mib_text(m.peak_resident) << " at most\n";
    if (m.peak_unsharded_parameters > 0 || m.peak_communication_buffers > 0)
      os << "    of which at their peaks: fully_shard's unsharded parameters "
         << mib_text(m.peak_unsharded_parameters) << ", communication buffers "
         << mib_text(m.peak_communication_buffers) << "\n";
  }
}

// What a checkpoint of `dtensor train` holds besides the model, optimizer
// and schedule: the step reached and the settings a resumed run must share
// (the model's shapes, the warm-up, the batches). --steps is kept for
// older checkpoints but may differ: "train.schedule" lists the schedules
// the run trained under, as (first step, total steps) pairs.
struct SavedConfig {
  static constexpr const char* kNames[] = {"--batch", "--seq",   "--hidden", "--heads", "--layers",
                                           "vocab",   "--steps", "--warmup", "--seed"};
  static constexpr size_t kSteps = 6;  // not compared: a resumed run may train longer
  static std::vector<int64_t> of(const TrainArgs& a, int64_t vocab) {
    return {a.batch, a.seq,   a.hidden, a.heads, a.layers,
            vocab,   a.steps, a.warmup, static_cast<int64_t>(a.seed)};
  }
};

checkpoint::StateDict train_state(Trainer& t, const TrainArgs& args, int64_t vocab, int64_t step,
                                  const std::vector<int64_t>& schedules) {
  checkpoint::StateDict state =
      checkpoint::get_state_dict(*t.model, t.optimizer.get(), t.schedule.get());
  state["train.step"] = checkpoint::Value(step);
  state["train.config"] = checkpoint::Value(SavedConfig::of(args, vocab));
  state["train.lr"] = checkpoint::Value(args.lr);
  state["train.scheme"] = checkpoint::Value(args.scheme + " on " + args.mesh);
  state["train.schedule"] = checkpoint::Value(schedules);
  return state;
}

// What --resume continues from, read from the checkpoint's metadata alone
// (before any model is built).
struct ResumePoint {
  int64_t step = 0;
  // The schedules the saved run trained under: (first step, total) pairs.
  std::vector<int64_t> schedules;
};

ResumePoint check_resume(const TrainArgs& args, int64_t vocab) {
  const std::string& dir = args.resume;
  // The settings first, so that a different model is named as such rather
  // than as a shape mismatch of a weight.
  const checkpoint::Metadata md = checkpoint::read_metadata(dir);
  const auto find = [&](const char* key) -> const checkpoint::Value* {
    const auto it = md.values.find(key);
    return it == md.values.end() ? nullptr : &it->second;
  };
  const auto value = [&](const char* key) -> const checkpoint::Value& {
    const checkpoint::Value* v = find(key);
    DT_CHECK(v != nullptr, "--resume ", quote(dir),
             " is not a checkpoint of dtensor train (it has no value '", key, "')");
    return *v;
  };
  const auto* saved = std::get_if<std::vector<int64_t>>(&value("train.config"));
  const std::vector<int64_t> mine = SavedConfig::of(args, vocab);
  DT_CHECK(saved != nullptr && saved->size() == mine.size(), "--resume ", quote(dir),
           ": 'train.config' is not the list this dtensor writes");
  for (size_t i = 0; i < mine.size(); ++i)
    DT_CHECK(i == SavedConfig::kSteps || (*saved)[i] == mine[i], "--resume ", quote(dir),
             " was saved by a run with ", SavedConfig::kNames[i], " ", (*saved)[i],
             "; this run has ", mine[i],
             " (the model, its warm-up and the batches must match; the mesh, scheme and --steps "
             "may differ)");
  const auto* lr = std::get_if<double>(&value("train.lr"));
  DT_CHECK(lr != nullptr && *lr == args.lr, "--resume ", quote(dir),
           " was saved by a run with another --lr; this run has ", args.lr);
  ResumePoint point;
  const auto* step = std::get_if<int64_t>(&value("train.step"));
  DT_CHECK(step != nullptr && *step >= 0, "--resume ", quote(dir),
           ": 'train.step' is not a step number");
  point.step = *step;
  DT_CHECK(point.step < args.steps, "--resume ", quote(dir), " is at step ", point.step,
           "; --steps ", args.steps, " leaves nothing to train (give a larger --steps to train on)");
  // Checkpoints written before "train.schedule" trained under one schedule.
  const checkpoint::Value* schedules = find("train.schedule");
  if (schedules == nullptr) {
    point.schedules = {0, (*saved)[SavedConfig::kSteps]};
  } else {
    const auto* list = std::get_if<std::vector<int64_t>>(schedules);
    bool ok = list != nullptr && !list->empty() && list->size() % 2 == 0 && (*list)[0] == 0;
    for (size_t k = 0; ok && k < list->size(); k += 2)
      ok = (*list)[k + 1] >= 1 && (*list)[k] <= point.step && (k == 0 || (*list)[k] > (*list)[k - 2]);
    DT_CHECK(ok, "--resume ", quote(dir), ": 'train.schedule' is not the list this dtensor writes");
    point.schedules = *list;
  }
  return point;
}

// Loads --resume into the trainer, whose schedule is then this run's: its
// lr from the checkpoint's step on is this run's schedule's
// (docs/training.md). The state is loaded under the schedule the saved run
// ended with, so that set_state_dict checks the saved lr against the
// schedule it came from; the switch to this run's is explicit, after.
void load_resume(Trainer& t, const TrainArgs& args, int64_t vocab, const ResumePoint& point) {
  t.reschedule(args, point.schedules.back(), 0);
  checkpoint::StateDict state = train_state(t, args, vocab, 0, point.schedules);
  state.erase("train.schedule");  // read by check_resume; older checkpoints lack it
  checkpoint::load(state, args.resume);
  checkpoint::set_state_dict(state, *t.model, t.optimizer.get(), t.schedule.get());
  const int64_t step = std::get<int64_t>(std::get<checkpoint::Value>(state.at("train.step")));
  DT_CHECK(step == point.step, "--resume ", quote(args.resume), ": 'train.step' read ", step,
           " where the metadata says ", point.step);
  // Each training step steps the optimizer and the schedule once: a
  // checkpoint whose counts disagree would resume another state.
  DT_CHECK(t.schedule->last_epoch() == step, "--resume ", quote(args.resume), " is at step ", step,
           " but its schedule at epoch ", t.schedule->last_epoch(), " (they advance together)");
  for (size_t i = 0; i < t.optimizer->size(); ++i)
    DT_CHECK(t.optimizer->state(i).step == step, "--resume ", quote(args.resume), " is at step ",
             step, " but its optimizer's parameter ", i, " at step ", t.optimizer->state(i).step,
             " (they advance together)");
  if (point.schedules.back() != args.steps) t.reschedule(args, args.steps, step);
}

// One line on stderr when the batch does not divide over dp. The ranks
// then hold uneven chunks of it (8 over 3: 3, 3, 2 sequences), and every
// step flattens the batch dim with the sequence dim (the loss's logits, and
// each linear's weight gradient, g^T x over the flattened leading dims:
// src/ops/matmul.cc): the chunks of the flattened dim (ceil(64/3) = 22
// tokens of 8 x 8) are not those of the batch (24, 24, 16), so each flatten
// redistributes, with all_gathers and all_to_alls (3.7x the bytes of a
// step of batch 9 on 3 ranks). A layout of uneven chunks that survives the
// flatten is a change to the library's view rules, not to this command.
void warn_uneven_batch(const TrainArgs& args, const Scheme& scheme, const DeviceMesh& mesh) {
  if (scheme.dp_dim < 0) return;
  // HSDP splits the batch over both its dims.
  const int64_t dp = mesh.size(scheme.dp_dim) *
                     (scheme.replicate_dim >= 0 ? mesh.size(scheme.replicate_dim) : 1);
  if (args.batch % dp == 0) return;
  const int64_t chunk = (args.batch + dp - 1) / dp;
  std::string sizes;
  for (int64_t r = 0, left = args.batch; r < dp; ++r, left -= std::min(left, chunk))
    sizes += (r ? ", " : "") + std::to_string(std::min(left, chunk));
  std::cerr << "dtensor train: warning: --batch " << args.batch << " does not divide over the "
            << dp << " ranks of " << mesh.names()[static_cast<size_t>(scheme.dp_dim)]
            << ": they hold uneven chunks (" << sizes
            << " sequences), which the loss and every linear's weight gradient redistribute when "
               "they flatten the batch with the sequence (extra all_gather and all_to_all every "
               "step); a multiple of "
            << dp << " trains without them\n";
}

// The step table: one column per collective kind that has run (a kind that
// first runs later brings the header back with its column).
struct StepTable {
  bool reference = false;
  std::vector<size_t> kinds;  // shown, in CollectiveKind order

  static int width(size_t kind) { return static_cast<int>(std::strlen(to_string(kind_at(kind)))) + 2; }

  // Whether `seen` has a kind the header lacks; then the header is redone.
  bool needs_header(const KindCounts& seen) const {
    size_t n = 0;
    for (int64_t c : seen) n += c != 0;
    return kinds.empty() || n != kinds.size();
  }
  void header(std::ostream& os, const KindCounts& seen) {
    kinds.clear();
    for (size_t i = 0; i < seen.size(); ++i)
      if (seen[i] != 0) kinds.push_back(i);
    os << "\n  " << std::left << std::setw(6) << "step" << std::right << std::setw(10) << "loss";
    if (reference) os << std::setw(12) << "one proc." << std::setw(10) << "|diff|";
    os << std::setw(9) << "ms" << std::setw(10) << "comm ms";
    for (size_t k : kinds) os << std::setw(width(k)) << to_string(kind_at(k));
    os << std::setw(13) << "bytes/rank" << "\n";
  }
  void line(std::ostream& os, int64_t step, const StepRecord& r) const {
    os << "  " << std::left << std::setw(6) << step << std::right << std::fixed
       << std::setprecision(4) << std::setw(10) << r.loss;
    if (reference)
      os << std::setw(12) << r.reference << std::scientific << std::setprecision(1) << std::setw(10)
         << std::abs(r.loss - r.reference);
    os << std::fixed << std::setprecision(1) << std::setw(9) << r.ms << std::setw(10)
       << r.collective_ms;
    for (size_t k : kinds) os << std::setw(width(k)) << r.counts[k];
    os << std::setw(13) << r.bytes << "\n";
  }
};

}  // namespace

int run_train(const TrainArgs& given) {
  TrainArgs args = given;
  const bool mixed = policy_of(args).param_dtype.has_value();
  if (mixed && !args.tolerance_given) args.tolerance = kMixedPrecisionTolerance;
  const Shape mesh_shape = parse_mesh_arg(args.mesh);
  const int64_t ranks = mesh_rank_count(mesh_shape, args.mesh);
  const Scheme scheme = parse_scheme(args.scheme, static_cast<int>(mesh_shape.size()), args.mesh);
  DT_CHECK(!mixed || scheme.fsdp || scheme.ddp, "--mixed-precision ", args.mixed_precision,
           " needs fsdp or ddp in --scheme (the policy is applied by fully_shard and "
           "replicate), got --scheme ", args.scheme);
  DT_CHECK(args.steps >= 1, "--steps ", args.steps, " must be at least 1");
  DT_CHECK(args.checkpoint_save_ops.empty() || args.checkpoint_every > 0,
           "--activation-checkpointing-save ", args.checkpoint_save_ops,
           " needs --activation-checkpointing k (the blocks it applies to)");
  nn::check_checkpoint_policy(checkpoint_policy_of(args));
  DT_CHECK(!args.prefetch || scheme.fsdp, "--prefetch needs fsdp or hsdp in --scheme (it is "
           "fully_shard's), got --scheme ", args.scheme);
  DT_CHECK(!args.async_reduce_scatter || scheme.fsdp, "--async-reduce-scatter needs fsdp or "
           "hsdp in --scheme (it is fully_shard's), got --scheme ", args.scheme);
  // Every path the run writes is checked before any work, so that a long
  // run does not fail at its end on a path it could have refused at once.
  if (!args.svg.empty()) check_output_file(args.svg, "--svg");
  if (args.save_every > 0) check_output_dir(args.checkpoint_dir, "--checkpoint-dir");
  World world = make_train_world(args, ranks);
  std::string names = args.names;
  if (names.empty())
    names = scheme.replicate_dim >= 0 ? "replicate,shard"
            : mesh_shape.size() == 2  ? "dp,tp"
            : scheme.tp               ? "tp"
                                      : "dp";
  const DeviceMesh mesh = make_mesh(args.mesh, names, &world);
  const bool rank0 = world.rank() == 0;

  const TextData data;
  check_train_memory(args, data.vocab_size(), scheme, mesh);
  const models::GPTConfig config = gpt_config(args, data.vocab_size());
  std::optional<ResumePoint> resume;
  if (!args.resume.empty()) resume = check_resume(args, config.vocab);
  Trainer trainer(config, mesh, scheme, args, args.init == "meta");

  // The one-process reference: the same model, optimizer and batches on a
  // world of one rank. Under MPI every process trains it (it is cheap next
  // to the distributed model and keeps the ranks in step).
  std::optional<World> one_world;
  std::optional<DeviceMesh> one_mesh;
  std::unique_ptr<Trainer> reference;
  if (args.check) {
    one_world.emplace(World::simulated(1));
    one_mesh.emplace(*one_world, Shape{1}, std::vector<std::string>{"one"});
    // Under a mixed-precision policy the reference applies it too, by
    // fully_shard on its one rank (which gathers nothing).
    Scheme one;
    if (mixed) one.fsdp = true, one.dp_dim = 0;
    reference = std::make_unique<Trainer>(config, *one_mesh, one, args, false);
  }

  // A resumed run continues the distributed training from its checkpoint;
  // the reference trains from step 0 under the schedules the saved run had,
  // so that the comparison is with a training that was never interrupted.
  // The schedules this run trains under: (first step, total) pairs.
  std::vector<int64_t> schedules{0, args.steps};
  int first_step = 0;
  if (resume) {
    load_resume(trainer, args, config.vocab, *resume);
    first_step = static_cast<int>(resume->step);
    schedules = resume->schedules;
    if (schedules.back() != args.steps) {
      schedules.push_back(first_step);
      schedules.push_back(args.steps);
    }
    if (reference) {
      for (int step = 0; step < first_step; ++step) {
        for (size_t k = 0; k < resume->schedules.size(); k += 2)
          if (resume->schedules[k] == step) reference->reschedule(args, resume->schedules[k + 1], step);
        reference->step(data.batch(args.batch, args.seq, args.seed, step));
      }
      reference->reschedule(args, args.steps, first_step);
    }
  }
  // After every check that can fail, so that a failure stays one line.
  if (rank0) warn_uneven_batch(args, scheme, mesh);
  const bool rescheduled = resume && resume->schedules.back() != args.steps;
  std::vector<std::string> saved;
  double save_ms = 0;
  int64_t numel = 0;
  for (const DTensor& p : trainer.optimizer->params()) numel += p.shape().product();

  // The report's head and the parameters' layouts before the first step,
  // each step's line as soon as it is done.
  std::ostream& os = std::cout;
  const bool report = rank0 && !args.json && !args.bits;
  const std::string world_text =
      world.is_simulated() ? "simulated: " + std::to_string(world.size()) + " ranks in this process"
                           : "MPI: " + std::to_string(world.size()) + " processes, one rank each";
  if (report) {
    os << "dtensor train: a GPT-style model learning a text, checked against one process\n"
       << "  world   " << world_text << "\n"
       << "  mesh    " << args.mesh << " (" << names
       << "): " << scheme.describe(mesh, args.sequence_parallel) << "\n"
       << "  model   "
       << (config.style == models::ModelStyle::Llama ? "Llama-style (RMSNorm, SwiGLU, RoPE), " : "")
       << config.layers << " blocks, hidden " << config.hidden << ", " << config.heads << " heads"
       << (config.num_kv_heads() != config.heads
               ? " (" + std::to_string(config.num_kv_heads()) + " kv)"
               : "")
       << (config.ffn != 0 ? ", ffn " + std::to_string(config.ffn) : "") << ", vocabulary "
       << config.vocab << " characters: " << numel << " parameters\n"
       << "  data    the shipped text (" << data.length() << " characters), batch " << args.batch
       << " x " << args.seq << " characters, next-character prediction\n"
       << "  optim   AdamW lr " << args.lr << " (linear warm-up " << args.warmup
       << " steps, then cosine to 10%), weight decay 0.01 (none on biases and norms)"
       << (args.clip > 0 ? ", gradient norm clipped to " + std::to_string(args.clip).substr(0, 4)
                         : "")
       << "\n";
    if (args.checkpoint_every > 0)
      os << "  activations of "
         << (args.checkpoint_every == 1
                 ? std::string("every block")
                 : "blocks 0, " + std::to_string(args.checkpoint_every) + ", " +
                       std::to_string(2 * args.checkpoint_every) + ", ...")
         << " recomputed in backward (activation checkpointing"
         << (args.checkpoint_save_ops.empty()
                 ? std::string(")")
                 : "; the outputs of " + args.checkpoint_save_ops + " kept, not run again)")
         << "\n";
    if (args.prefetch && scheme.fsdp)
      os << "  prefetch: each block's all_gather starts one block early"
         << (world.is_simulated() ? " (the simulated world runs it at once)" : " (MPI_Iallgather)")
         << "\n";
    if (args.async_reduce_scatter && scheme.fsdp)
      os << "  each block's gradient reduce_scatter runs while the next block's backward computes"
         << (world.is_simulated() ? " (the simulated world runs it at once)" : " (MPI_Ialltoall)")
         << "\n";
    if (mixed)
      os << "  precision " << (args.mixed_precision == "bf16" ? "bfloat16" : "float16")
         << " parameters and activations, float32 master weights, optimizer and gradient\n"
         << "          reductions (the reference: the same policy on one process)\n";
    if (resume)
      os << "  resumed from " << args.resume << " at step " << first_step
         << (rescheduled ? ", the learning-rate schedule rebuilt for " +
                               std::to_string(args.steps) + " steps (saved for " +
                               std::to_string(resume->schedules.back()) + ")"
                         : "")
         << (reference ? " (the one-process reference trained from step 0)" : "") << "\n";
    os << "\n";
    os << "Parameters (blocks after 0 are laid out like block 0): placements per mesh dim\n";
    // In the model's order (the optimizer's groups order them otherwise).
    for (const auto& [name, param] : trainer.model->named_parameters()) {
      if (name.rfind("blocks.", 0) == 0 && name.rfind("blocks.0.", 0) != 0) continue;
      std::ostringstream shape, local;
      shape << param->shape();
      local << param->spec().local_shape(*mesh.coordinate(world.rank()));
      os << "  " << std::left << std::setw(32) << name << std::setw(11) << shape.str()
         << std::setw(17) << to_string(param->placements()) << "rank " << world.rank()
         << " holds " << local.str() << "\n";
    }
    flush_stdout();
  }

  std::vector<StepRecord> steps;
  double max_loss_diff = 0;
  double max_norm_diff = 0;  // relative
  StepTable table;
  table.reference = reference != nullptr;
  KindCounts seen{};  // every kind run so far
  ProgressLine progress;
  // From here: the training's peaks (the reference's too, in this process).
  MemoryTracker memory(*trainer.model, trainer.optimizer.get());
  for (int step = first_step; step < args.steps; ++step) {
    const TextData::Batch batch = data.batch(args.batch, args.seq, args.seed, step);
    StepRecord r;
    {
      CommDebugMode comm;
      const auto t0 = std::chrono::steady_clock::now();
      const Trainer::Result got = trainer.step(batch, &r.phases, &r.phase_dtypes, &memory);
      r.loss = got.loss;
      r.grad_norm = got.grad_norm;
      r.ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r.collective_ms = comm.collective_seconds() * 1e3;
      for (size_t i = 0; i < r.counts.size(); ++i) {
        r.counts[i] = comm.count(kind_at(i));
        r.bytes += comm.bytes(kind_at(i));
        seen[i] += r.counts[i];
      }
    }
    if (reference) {
      const Trainer::Result want = reference->step(batch);
      r.reference = want.loss;
      r.reference_grad_norm = want.grad_norm;
      max_loss_diff = std::max(max_loss_diff, std::abs(r.loss - r.reference));
      max_norm_diff = std::max(
          max_norm_diff, std::abs(r.grad_norm - want.grad_norm) / std::max(want.grad_norm, 1e-30));
    }
    steps.push_back(r);
    const int64_t number = step + 1;
    bool printed = true;
    if (rank0 && args.bits) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%a", r.loss);
      os << "step " << number << " loss " << buf << "\n";
      flush_stdout();
    } else if (report && (step == first_step || number == args.steps ||
                          number % args.print_every == 0)) {
      progress.clear();
      if (table.needs_header(seen)) table.header(os, seen);
      table.line(os, number, r);
      flush_stdout();
    } else {
      printed = false;
    }
    // Between printed steps (and all along with --json), on a terminal.
    if (rank0 && !printed) {
      std::ostringstream line;
      line << "step " << number << "/" << args.steps << "  loss " << std::fixed
           << std::setprecision(4) << r.loss << "  " << std::setprecision(1) << r.ms << " ms";
      progress.show(line.str());
    }
    if (args.save_every > 0 && number % args.save_every == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string dir = args.checkpoint_dir + "/step-" + std::to_string(number);
      checkpoint::save(train_state(trainer, args, config.vocab, number, schedules), dir);
      save_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      saved.push_back(dir);
    }
  }
  progress.clear();
  // Before the fingerprint gathers whole parameters.
  const std::vector<MemoryRow> memory_rows = gather_memory(memory.report(), world);

  // The final parameters against the reference's, by name.
  Fingerprint fingerprint, param_bits;
  for (const StepRecord& r : steps) fingerprint.add(&r.loss, sizeof r.loss);
  double max_param_diff = 0;
  std::string worst_param;
  const auto& params = trainer.optimizer->params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor full = params[i].full_tensor();
    fingerprint.add(full);
    param_bits.add(full);
    if (!reference) continue;
    const Tensor want = reference->optimizer->params()[i].full_tensor();
    const double diff = max_abs_diff(full, want);
    if (diff > max_param_diff) max_param_diff = diff, worst_param = trainer.optimizer->name(i);
  }
  const bool verified =
      !reference || (max_loss_diff <= args.tolerance && max_param_diff <= args.tolerance &&
                     max_norm_diff <= args.tolerance);
  if (!rank0) return verified ? 0 : 1;

  std::vector<double> losses, ref_losses;
  for (const StepRecord& r : steps) losses.push_back(r.loss), ref_losses.push_back(r.reference);
  if (!args.svg.empty()) {
    std::vector<Series> series{
        {"dtensor (" + args.scheme + ", mesh " + args.mesh + ")", losses, '*', "#1f77b4", false}};
    if (reference) series.push_back({"one process", ref_losses, 'o', "#ff7f0e", true});
    write_file(args.svg,
               svg_chart(series, "dtensor train: next-character loss", "step", "cross-entropy",
                         first_step + 1),
               "--svg");
  }

  if (args.bits) {
    os << "parameters " << hex(param_bits.h) << "\n";
    os << "fingerprint " << hex(fingerprint.h) << "\n";
    return verified ? 0 : 1;
  }

  if (args.json) {
    nlohmann::ordered_json j;
    j["world"] = world.is_simulated() ? "simulated" : "mpi";
    j["ranks"] = world.size();
    j["mesh"] = dims_json(mesh.shape());
    j["names"] = mesh.names();
    j["scheme"] = args.scheme;
    j["mixed_precision"] = args.mixed_precision;
    j["sequence_parallel"] = args.sequence_parallel;
    j["init"] = args.init;
    j["activation_checkpointing"] = args.checkpoint_every;
    j["activation_checkpointing_save"] = checkpoint_policy_of(args).save_ops;
    j["prefetch"] = args.prefetch;
    j["async_reduce_scatter"] = args.async_reduce_scatter;
    j["parameters"] = numel;
    j["first_step"] = first_step;
    if (resume) j["resumed_from"] = args.resume;
    j["schedules"] = schedules;
    j["checkpoints"] = saved;
    nlohmann::ordered_json js = nlohmann::ordered_json::array();
    for (const StepRecord& r : steps) {
      nlohmann::ordered_json s;
      s["step"] = first_step + static_cast<int64_t>(js.size()) + 1;
      s["loss"] = r.loss;
      if (reference) s["reference_loss"] = r.reference;
      s["grad_norm"] = r.grad_norm;
      if (reference) s["reference_grad_norm"] = r.reference_grad_norm;
      s["wall_ms"] = r.ms;
      s["collective_ms"] = r.collective_ms;
      for (size_t i = 0; i < r.counts.size(); ++i) s[to_string(kind_at(i))] = r.counts[i];
      s["bytes_per_rank"] = r.bytes;
      for (int ph = 0; ph < kNumPhases; ++ph) {
        nlohmann::ordered_json c;
        const KindCounts& counts = r.phases[static_cast<size_t>(ph)];
        for (size_t i = 0; i < counts.size(); ++i) c[to_string(kind_at(i))] = counts[i];
        s[kPhaseNames[ph]] = c;
      }
      js.push_back(s);
    }
    j["steps"] = js;
    nlohmann::ordered_json jm = nlohmann::ordered_json::array();
    for (const MemoryRow& m : memory_rows) {
      nlohmann::ordered_json e;
      e["rank"] = m.rank.rank;
      e["parameters"] = m.rank.parameters;
      e["gradients"] = m.rank.gradients;
      e["optimizer_state"] = m.rank.optimizer_state;
      e["activations"] = m.rank.activations;
      e["process_peak_allocated"] = m.peak_allocated;
      e["process_peak_reserved"] = m.peak_reserved;
      e["process_reserved_at_start"] = m.reserved_at_start;
      e["process_resident_at_start"] = m.resident_at_start;
      e["process_peak_resident"] = m.peak_resident;
      e["process_peak_unsharded_parameters"] = m.peak_unsharded_parameters;
      e["process_peak_communication_buffers"] = m.peak_communication_buffers;
      jm.push_back(e);
    }
    j["memory"] = jm;
    j["max_loss_diff"] = max_loss_diff;
    j["max_grad_norm_rel_diff"] = max_norm_diff;
    j["max_param_diff"] = max_param_diff;
    j["tolerance"] = args.tolerance;
    j["verified"] = verified;
    j["fingerprint"] = hex(fingerprint.h);
    os << j.dump(2) << "\n";
    return verified ? 0 : 1;
  }

  double mean_ms = 0, mean_comm_ms = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    mean_ms += steps[i].ms;
    mean_comm_ms += steps[i].collective_ms;
  }
  if (steps.size() > 1) {
    mean_ms /= static_cast<double>(steps.size() - 1);
    mean_comm_ms /= static_cast<double>(steps.size() - 1);
  }
  bool same = true;
  for (const StepRecord& r : steps) same = same && r.counts == steps.front().counts;
  os << (same ? "  every step runs the same collectives"
              : "  the steps run different collectives")
     << "; mean step time after the first " << std::setprecision(1) << mean_ms << " ms, "
     << mean_comm_ms << " ms of it in collectives"
     << (world.is_simulated() ? " (the simulated world computes every rank in this process)"
                              : " (this process, waiting in MPI calls included)")
     << "\n";
  bool half_step = false;
  for (const KindDtypes& phase : steps.back().phase_dtypes)
    for (const auto& by_dtype : phase)
      half_step = half_step || by_dtype[static_cast<size_t>(DType::BFloat16)] > 0 ||
                  by_dtype[static_cast<size_t>(DType::Float16)] > 0;
  os << "  collectives of the last step by phase:";
  for (int ph = 0; ph < kNumPhases; ++ph) {
    os << (ph ? ";" : "") << " " << kPhaseNames[ph];
    bool any = false;
    const KindCounts& counts = steps.back().phases[static_cast<size_t>(ph)];
    const KindDtypes& dtypes = steps.back().phase_dtypes[static_cast<size_t>(ph)];
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] == 0) continue;
      os << (any ? ", " : " ") << counts[i] << " " << to_string(kind_at(i));
      // The dtypes they ran in, in a step with 16-bit collectives (a
      // mixed-precision step: which moves carry bf16, which reduce in f32).
      if (half_step) {
        std::string split;
        for (int d = 0; d < kNumDTypes; ++d)
          if (const int64_t c = dtypes[i][static_cast<size_t>(d)])
            split += (split.empty() ? "" : " + ") + std::to_string(c) + " " +
                     dtype_short_name(static_cast<DType>(d));
        os << " (" << split << ")";
      }
      any = true;
    }
    if (!any) os << " none";
  }
  os << "\n";
  if (!saved.empty())
    os << "  checkpoints: " << saved.size() << " saved (" << saved.front()
       << (saved.size() > 1 ? " ... " + saved.back() : "") << "), " << std::setprecision(1)
       << save_ms / static_cast<double>(saved.size()) << " ms each\n";
  os << "\n";
  print_memory(os, memory_rows, world, reference != nullptr);
  os << "\n";

  // The reference first so that the distributed run's marks show on top
  // (where the two agree to the chart's resolution, only '*' is seen).
  std::vector<Series> series;
  if (reference) series.push_back({"one process", ref_losses, 'o'});
  series.push_back({"dtensor", losses, '*'});
  os << "Loss (cross-entropy per character):\n" << terminal_chart(series, 60, 12, first_step + 1);
  if (!args.svg.empty()) os << "  chart written to " << args.svg << "\n";
  os << "\n";

  os << std::defaultfloat << std::setprecision(3);
  if (reference) {
    os << "Against the same training on one process, over " << steps.size()
       << " steps: max |loss difference| " << max_loss_diff
       << ", max relative difference of the gradient norm " << max_norm_diff
       << ",\nmax |parameter difference| " << max_param_diff
       << (worst_param.empty() ? "" : " (" + worst_param + ")") << "; tolerance " << args.tolerance
       << "\n";
  }
  os << "fingerprint " << hex(fingerprint.h)
     << " (losses and final parameters; the same under mpirun -np " << ranks << ")\n";
  if (!verified) {
    os << "MISMATCH: the distributed training parted from the one-process training\n";
    return 1;
  }
  if (reference) os << "verified\n";
  return 0;
}

}  // namespace dtensor::cli
