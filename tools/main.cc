// The `dtensor` command-line program: argument parsing and dispatch. The
// subcommands live in tools/*_command.cc:
//   train      the main job: a GPT learning a text with FSDP x TP, checked
//              step by step against one process
//   demo       a tensor-parallel transformer forward pass, verified
//   visualize  which rank holds which part of a tensor
//   plan       the cheapest redistribution plan between two layouts
//   checkpoint inspect: what a checkpoint directory holds, checksums verified
//   rules      the sharding-rule validator's table
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "number_option.h"
#include "output.h"
#include "train.h"
#include "dtensor/error.h"

namespace {

using dtensor::cli::quote;

// No argument a user types is this long; longer ones are refused before
// parsing so that no message can echo megabytes back.
constexpr size_t kMaxArgBytes = 4096;

// The commands, as messages list them.
constexpr const char* kCommands =
    "train, estimate, calibrate, demo, visualize, plan, checkpoint or rules";

bool is_command(const std::string& word) {
  return word == "train" || word == "estimate" || word == "calibrate" || word == "demo" ||
         word == "visualize" ||
         word == "plan" ||
         word == "checkpoint" || word == "rules";
}

// One of the listed words.
CLI::Validator one_of(std::vector<std::string> words) {
  std::string list;
  for (const std::string& w : words) list += (list.empty() ? "" : ", ") + w;
  return CLI::Validator(
      [words, list](std::string& text) -> std::string {
        for (const std::string& w : words)
          if (text == w) return {};
        return "expected one of " + list + ", got " + quote(text);
      },
      "one of " + list);
}

// The option a CLI11 message starts with ("--from: ..." or "--from is ..."), if any.
std::string leading_option(const std::string& message) {
  if (message.rfind("--", 0) != 0) return {};
  const size_t end = message.find_first_of(": ");
  return message.substr(0, end);
}

// CLI11's messages in the project's style: the option, what was given, what
// is expected.
std::string rewrite_parse_error(const CLI::ParseError& e) {
  const std::string m = e.what();
  const std::string option = leading_option(m);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    // "--from: At Most 1 required but received 2": the option was repeated.
    if (m.find("At Most") != std::string::npos && !option.empty()) {
      const size_t at = m.rfind(' ');
      return option + " was given " + m.substr(at + 1) + " values; expected it once with one value";
    }
    // "--mesh: 1 required TEXT missing" / "Expected exactly 1 arguments to --mesh, got 0".
    const size_t to = m.find(" to --");
    const std::string name =
        !option.empty() ? option
                        : to != std::string::npos ? m.substr(to + 4, m.find(',', to) - to - 4) : "";
    if (!name.empty()) return name + ": expected a value after it, got none";
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    if (!option.empty()) return "missing required option " + option;
    if (m.rfind("A subcommand", 0) == 0) return "a command is required: " + std::string(kCommands);
    // A positional argument: "DIR is required".
    const size_t is = m.find(" is required");
    if (is != std::string::npos && is > 0 && m.find(' ') == is)
      return "missing required argument " + m.substr(0, is);
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const size_t colon = m.find(": ");
    const std::string extras = colon == std::string::npos ? m : m.substr(colon + 2);
    return "unexpected argument " + quote(extras) + " (expected options of the form --name value)";
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
    // Values are validated before conversion, so this is a flag given a
    // value: "Could not convert: --json = foo" or "--json: too many inputs".
    const size_t eq = m.find(" = ");
    if (m.rfind("Could not convert: ", 0) == 0 && eq != std::string::npos) {
      return m.substr(19, eq - 19) + " is a flag: expected no value (or true/false), got " +
             quote(m.substr(eq + 3));
    }
    if (!option.empty()) return option + " is a flag: expected no value (or true/false)";
  }
  return m;
}

// "dtensor demo" when argv[1] is a command ("dtensor checkpoint inspect"
// for a command of checkpoint), else "dtensor".
std::string program_name(int argc, char** argv) {
  if (argc > 1) {
    const std::string first = argv[1];
    if (first == "checkpoint" && argc > 2 && std::string(argv[2]) == "inspect")
      return "dtensor checkpoint inspect";
    if (is_command(first)) return "dtensor " + first;
  }
  return "dtensor";
}

int run(int argc, char** argv);

}  // namespace

// Every failure ends here as exit 2 and one line "dtensor <command>: ..."
// (exit 1 is kept for a verification mismatch, reported by the command).
int main(int argc, char** argv) {
  const std::string program = program_name(argc, argv);
  dtensor::cli::install_checked_stdout();
  std::string message;
  try {
    const int status = run(argc, argv);
    // What was printed must have reached stdout: a full disk or a closed
    // pipe is a failure, whatever the command found (unless it failed
    // already, with its own line).
    if (status != 2) dtensor::cli::flush_stdout();
    return status;
  } catch (const std::bad_alloc&) {
    message = "out of memory: an allocation failed (try smaller sizes)";
  } catch (const dtensor::Error& e) {
    message = e.what();  // bad input found outside a command's own checks
  } catch (const std::exception& e) {
    message = std::string("internal error: ") + e.what();
  } catch (...) {
    message = "internal error: an unknown exception";
  }
  std::cerr << program << ": " << dtensor::cli::one_line(message) << "\n";
  return 2;
}

namespace {

int run(int argc, char** argv) {
  using namespace dtensor::cli;
  for (int i = 1; i < argc; ++i) {
    const size_t n = std::strlen(argv[i]);
    if (n > kMaxArgBytes) {
      std::cerr << program_name(argc, argv) << ": argument " << i << " " << quote(argv[i])
                << " is too long (at most " << kMaxArgBytes << " bytes)\n";
      return 2;
    }
  }
  CLI::App app{"dtensor: distributed tensors over a device mesh (Shard / Replicate / Partial)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dtensor " DTENSOR_VERSION);
  app.footer(
      "Run 'dtensor <command> --help' for a command's options and examples. Placements are\n"
      "written S(d) (shard tensor dim d), S(d)[k] (the k-th mesh dim to split d),\n"
      "R (replicate), P(sum|avg|max|min) (partial).\n"
      "\n"
      "Examples:\n"
      "  dtensor train\n"
      "  dtensor demo\n"
      "  dtensor visualize --mesh 4x2 --names dp,tp --shape 13,2 --placements 'S(0),S(0)'\n"
      "  dtensor plan --mesh 4 --shape 10,10 --from 'S(0)' --to R\n"
      "  dtensor checkpoint inspect ckpt/step-100\n"
      "  dtensor rules --op mm\n"
      "\n"
      "Guides: docs/README.md in the source tree.");
  TrainArgs train_args;
  bool train_no_sp = false, train_no_check = false;
  auto* train = app.add_subcommand(
      "train", "Train a small GPT on a text with FSDP x tensor parallel, checked against one process");
  train->footer(
      "The project's main job. A small GPT-style transformer (the demo's model) learns the\n"
      "text shipped in the program, one character at a time, on a mesh laid out by --scheme:\n"
      "  fsdp+tp  FSDP over dp (parameters Shard(0), gathered per block) x tensor + sequence\n"
      "           parallel over tp (Megatron plan); a --mesh DPxTP, e.g. 2x2 (the default)\n"
      "  ddp+tp   replicated parameters with all-reduced gradients over dp x TP over tp\n"
      "  fsdp, ddp, tp   one scheme on a 1-d --mesh N\n"
      "  hsdp     FSDP2's hybrid sharding: parameters replicated over the first dim of a\n"
      "           --mesh RxS and sharded over the second, the batch split over both\n"
      "AdamW with linear warm-up then cosine decay and gradient-norm clipping. The same\n"
      "model, optimizer and batches train alongside on one rank (--no-check skips it);\n"
      "every step's loss and the final parameters must agree within --tolerance.\n"
      "Prints the parameters' layouts, per step the loss, the one-process loss, the wall\n"
      "time, the collectives and bytes per rank, then a chart of the loss; writes the chart\n"
      "as an SVG file (--svg) and a fingerprint of the losses and final parameters' bits,\n"
      "the same in the simulated world and under mpirun. --save-every writes checkpoints\n"
      "(docs/checkpoint.md) that --resume continues from on another mesh or scheme; the\n"
      "one-process reference then trains from step 0, so the resumed run is checked\n"
      "against a training that was never interrupted.\n"
      "\n"
      "Examples:\n"
      "  dtensor train\n"
      "  dtensor train --scheme ddp+tp --mesh 2x4 --steps 50\n"
      "  dtensor train --save-every 50          (checkpoints/step-50, step-100, step-150)\n"
      "  dtensor train --resume checkpoints/step-100 --scheme fsdp --mesh 4\n"
      "  mpirun -np 4 dtensor train           (as root add --allow-run-as-root;\n"
      "                                        on 2 cores add --oversubscribe)\n"
      "\n"
      "Exit status: 0 when verified, 1 when the two trainings part beyond --tolerance, 2 on\n"
      "a bad argument (one line on stderr says which).");
  train->add_option("--mesh", train_args.mesh,
                    "mesh shape: DPxTP (e.g. 2x2) for fsdp+tp and ddp+tp, RxS for hsdp, N for one scheme")
      ->capture_default_str();
  train->add_option("--names", train_args.names,
                    "mesh dim names, comma-separated (default dp,tp; dp or tp for a 1-d mesh)");
  train->add_option("--scheme", train_args.scheme, "fsdp+tp, ddp+tp, fsdp, ddp, tp or hsdp")
      ->capture_default_str()
      ->check(one_of({"fsdp+tp", "ddp+tp", "fsdp", "ddp", "tp", "hsdp"}));
  train->add_flag("--no-sequence-parallel", train_no_sp,
                  "keep activations replicated over tp between blocks");
  add_number(train, "--steps", train_args.steps, "optimizer steps", 1, 100000);
  add_number<int64_t>(train, "--batch", train_args.batch, "sequences per step (sharded over dp)", 1,
                      int64_t{1} << 16);
  add_number<int64_t>(train, "--seq", train_args.seq, "characters per sequence", 1, 512);
  add_number<int64_t>(train, "--hidden", train_args.hidden, "model width (a multiple of --heads)", 1,
                      int64_t{1} << 16);
  add_number<int64_t>(train, "--heads", train_args.heads,
                      "attention heads (a multiple of the tp size)", 1, int64_t{1} << 16);
  add_number<int64_t>(train, "--layers", train_args.layers, "transformer blocks", 0, 256);
  train->add_option("--model", train_args.model,
                    "gpt (LayerNorm, GELU MLP, learnt positions, biases) or llama (RMSNorm,\n"
                    "SwiGLU MLP, rotary positions, no biases)")
      ->capture_default_str()->check(one_of({"gpt", "llama"}));
  add_number<int64_t>(train, "--kv-heads", train_args.kv_heads,
                      "key/value heads (grouped-query attention; --heads a multiple of it, it a\n"
                      "multiple of the tp size; 0: --heads)", 0, int64_t{1} << 16);
  add_number<int64_t>(train, "--ffn", train_args.ffn, "the MLP's width (0: 4 x --hidden)", 0,
                      int64_t{1} << 20);
  add_number(train, "--lr", train_args.lr, "peak learning rate", 0, true);
  add_number<int64_t>(train, "--warmup", train_args.warmup, "steps of linear warm-up", 0, 100000);
  add_number(train, "--clip", train_args.clip, "gradient-norm clipping (0 = none)", 0, false);
  add_number<uint64_t>(train, "--seed", train_args.seed, "weights and batches", 0, UINT64_MAX);
  train->add_option("--world", train_args.world, "auto (MPI when launched by mpirun), sim or mpi")
      ->capture_default_str()->check(one_of({"auto", "sim", "mpi"}));
  add_number(train, "--save-every", train_args.save_every,
             "save a checkpoint every n steps into --checkpoint-dir/step-<n> (0: never)", 0,
             1000000000);
  train->add_option("--checkpoint-dir", train_args.checkpoint_dir,
                    "where --save-every writes its checkpoints")
      ->capture_default_str();
  train->add_option("--resume", train_args.resume,
                    "continue from a checkpoint written by --save-every (any --mesh and\n"
                    "--scheme; the model, --lr, --warmup and --seed must match; another --steps\n"
                    "rebuilds the learning-rate schedule for the new total)");
  train->add_flag("--no-check", train_no_check, "do not train the one-process reference");
  add_number(train, "--tolerance", train_args.tolerance,
             "largest accepted |difference| of a loss or a parameter from one process\n"
             "(default 0.001; 0.05 with --mixed-precision)", 0, true);
  train->add_option("--mixed-precision", train_args.mixed_precision,
                    "none, bf16 or fp16: parameters gathered and computed in that dtype,\n"
                    "float32 master weights, optimizer and gradient reductions (FSDP2's\n"
                    "MixedPrecisionPolicy; needs fsdp or ddp in --scheme)")
      ->capture_default_str()->check(one_of({"none", "bf16", "fp16"}));
  train->add_option("--init", train_args.init,
                    "meta: build the model on the meta device, lay it out, then make each\n"
                    "process's shards only (no process holds a whole parameter); eager: build\n"
                    "it whole first. The values are the same, bit for bit")
      ->capture_default_str()->check(one_of({"meta", "eager"}));
  add_number(train, "--activation-checkpointing", train_args.checkpoint_every,
             "recompute every k-th block's activations in backward instead of keeping\n"
             "them (1: every block; 0: none)", 0, 256);
  train->add_option("--activation-checkpointing-save", train_args.checkpoint_save_ops,
                    "keep the outputs of these ops in the checkpointed blocks instead of\n"
                    "running them again (selective checkpointing; comma-separated: mm, addmm,\n"
                    "bmm, baddbmm, matmul, linear, scaled_dot_product_attention)");
  train->add_flag("--prefetch", train_args.prefetch,
                  "start each block's all_gather one block early (fully_shard's prefetch;\n"
                  "under MPI non-blocking, so it overlaps the computation)");
  train->add_flag("--async-reduce-scatter", train_args.async_reduce_scatter,
                  "let each block's gradient reduce_scatter run while the next block's backward\n"
                  "computes (fully_shard's async_reduce_scatter; under MPI non-blocking)");
  bool train_no_reshard = false;
  train->add_flag("--no-reshard-after-forward", train_no_reshard,
                  "keep each block's gathered parameters from forward to backward\n"
                  "(fully_shard's reshard_after_forward=False: one all_gather less per block,\n"
                  "the unsharded parameters held through the step)");
  add_number(train, "--micro-batches", train_args.micro_batches,
             "gradient accumulation: forward and backward each step's batch in this many\n"
             "micro-batches (each dp rank's part of --batch a multiple of it), then one\n"
             "optimizer step",
             1, 1 << 16);
  train->add_option("--svg", train_args.svg, "write the loss chart to this SVG file")
      ->capture_default_str();
  bool train_no_svg = false;
  train->add_flag("--no-svg", train_no_svg, "write no SVG file");
  add_number(train, "--print-every", train_args.print_every, "print every n-th step", 1, 100000);
  train->add_flag("--bits", train_args.bits,
                  "print only each step's loss as a hex float and the fingerprint (to compare\n"
                  "the simulated world with mpirun)");
  train->add_flag("--json", train_args.json,
                  "print JSON: world, ranks, mesh, names, scheme, init, activation_checkpointing,\n"
                  "activation_checkpointing_save, "
                  "prefetch, async_reduce_scatter, parameters, schedules, steps\n"
                  "(loss, reference_loss, grad_norm, reference_grad_norm, wall_ms,\n"
                  "collective_ms, the count of every collective kind, bytes_per_rank, and the\n"
                  "counts of forward, backward and optimizer), memory (per rank), max_loss_diff,\n"
                  "max_param_diff, tolerance, verified, fingerprint");

  EstimateArgs est;
  TrainArgs& et = est.train;
  et.batch = 8;
  et.seq = 2048;
  et.hidden = 4096;
  et.heads = 32;
  et.layers = 32;
  et.mixed_precision = "bf16";
  bool est_no_sp = false;
  auto* estimate = app.add_subcommand(
      "estimate", "Per-rank memory and communication of a training step, exactly, and its time");
  estimate->footer(
      "Runs the step of 'dtensor train' (the same model, layout and optimizer, two steps)\n"
      "on a shape-only world of the mesh's ranks: tensors with shapes but no values, so\n"
      "a 1,024-rank mesh fits on a laptop. Prints, for each role (ranks whose figures\n"
      "agree), the memory of its tensors by category and at its peak, and the collectives\n"
      "of each phase with their bytes, all exact: the same program under mpirun holds and\n"
      "sends exactly these (tests/worlds/estimate_test.cc). The step's time is estimated\n"
      "on --cluster: each op by its FLOPs and bytes (a roofline), each collective by\n"
      "NCCL's algorithms over the links it spans (alpha-beta), on a compute and a\n"
      "communication stream, so fully_shard's prefetch and async reduce_scatter overlap.\n"
      "\n"
      "Examples:\n"
      "  dtensor estimate --mesh 8x8 --scheme fsdp+tp\n"
      "  dtensor estimate --mesh 128x8 --layers 32 --hidden 4096 --seq 4096 --batch 512\n"
      "  dtensor estimate --preset llama3-8b --mesh 64 --scheme fsdp --seq 8192 --batch 64\n"
      "  dtensor estimate --mesh 4 --scheme fsdp --cluster cpu --hidden 256 --seq 128 --json\n"
      "  dtensor estimate --mesh 16x8 --nccl-tests all_gather.txt,reduce_scatter.txt --svg step.svg\n"
      "\n"
      "Exit status: 0, or 2 on a bad argument (one line on stderr says which).");
  estimate->add_option("--mesh", et.mesh, "mesh shape: DPxTP (e.g. 128x8) or one dim")
      ->capture_default_str();
  estimate->add_option("--names", et.names, "mesh dim names, comma-separated (default dp,tp)");
  estimate->add_option("--scheme", et.scheme, "fsdp+tp, ddp+tp, fsdp, ddp, tp or hsdp")
      ->capture_default_str();
  estimate->add_flag("--no-sequence-parallel", est_no_sp,
                     "tensor parallel without sequence parallelism");
  add_number<int64_t>(estimate, "--batch", et.batch, "global batch: sequences per step", 1,
                      int64_t{1} << 24);
  add_number<int64_t>(estimate, "--seq", et.seq, "tokens per sequence", 1, int64_t{1} << 24);
  add_number<int64_t>(estimate, "--hidden", et.hidden, "model width (a multiple of --heads)", 1,
                      int64_t{1} << 20);
  add_number<int64_t>(estimate, "--heads", et.heads, "attention heads", 1, int64_t{1} << 16);
  add_number<int64_t>(estimate, "--layers", et.layers, "transformer blocks", 0, 4096);
  add_number<int64_t>(estimate, "--vocab", est.vocab, "vocabulary size", 1, int64_t{1} << 24);
  estimate->add_option("--model", et.model, "gpt or llama (RMSNorm, SwiGLU, RoPE, no biases)")
      ->capture_default_str()->check(one_of({"gpt", "llama"}));
  add_number<int64_t>(estimate, "--kv-heads", et.kv_heads,
                      "key/value heads (grouped-query attention; 0: --heads)", 0, int64_t{1} << 16);
  add_number<int64_t>(estimate, "--ffn", et.ffn, "the MLP's width (0: 4 x --hidden)", 0,
                      int64_t{1} << 24);
  estimate->add_option("--preset", est.preset,
                       "a published model: llama3-8b (32 layers, hidden 4096, 32 heads, 8 kv\n"
                       "heads, ffn 14336, vocab 128256) or llama3-70b (80 layers, hidden 8192,\n"
                       "64 heads, 8 kv heads, ffn 28672, vocab 128256), --model llama; the\n"
                       "options given override it")
      ->check(one_of({"llama3-8b", "llama3-70b"}));
  estimate->add_option("--mixed-precision", et.mixed_precision, "none, bf16 or fp16")
      ->capture_default_str()->check(one_of({"none", "bf16", "fp16"}));
  add_number(estimate, "--activation-checkpointing", et.checkpoint_every,
             "recompute every k-th block's activations (1: every block; 0: none)", 0, 4096);
  estimate->add_option("--activation-checkpointing-save", et.checkpoint_save_ops,
                       "ops whose outputs the checkpointed blocks keep (comma-separated)");
  estimate->add_flag("--prefetch", et.prefetch, "fully_shard's prefetch of the next all_gather");
  estimate->add_flag("--async-reduce-scatter", et.async_reduce_scatter,
                     "fully_shard's reduce_scatter overlapping the next block's backward");
  bool est_no_reshard = false;
  estimate->add_flag("--no-reshard-after-forward", est_no_reshard,
                     "fully_shard keeps each block's gathered parameters from forward to backward");
  add_number(estimate, "--micro-batches", et.micro_batches,
             "forward and backward each step's batch in this many micro-batches", 1, 1 << 16);
  add_number(estimate, "--clip", et.clip, "gradient-norm clipping (0 = none)", 0, false);
  estimate->add_option("--cluster", est.cluster, "the devices and network: h100, a100 or cpu")
      ->capture_default_str()->check(one_of({"h100", "a100", "cpu"}));
  add_number(estimate, "--ranks-per-node", est.ranks_per_node,
             "devices per node (0: the cluster's, 8 for h100 and a100)", 0, 1 << 20);
  add_number(estimate, "--intra-node-bandwidth", est.intra_node_gbps,
             "each rank's link bandwidth within a node, GB/s one way (default: the cluster's)",
             0, true);
  add_number(estimate, "--inter-node-bandwidth", est.inter_node_gbps,
             "each rank's link bandwidth across nodes, GB/s one way (default: the cluster's)", 0,
             true);
  add_number(estimate, "--intra-node-latency", est.intra_node_latency_us,
             "a message's latency within a node, microseconds (default: the cluster's)", 0, true);
  add_number(estimate, "--inter-node-latency", est.inter_node_latency_us,
             "a message's latency across nodes, microseconds (default: the cluster's)", 0, true);
  estimate->add_option("--chrome-trace", est.chrome_trace,
                       "write the estimated step's timeline as a Chrome trace (JSON) that\n"
                       "Perfetto and chrome://tracing open");
  estimate->add_option("--calibration", est.calibration,
                       "a file written by 'dtensor calibrate' (this machine's measured rates\n"
                       "and collectives), in place of --cluster");
  estimate
      ->add_option("--nccl-tests", est.nccl_tests,
                   "outputs of nccl-tests (all_reduce_perf, all_gather_perf,\n"
                   "reduce_scatter_perf, alltoall_perf, broadcast_perf), comma-separated:\n"
                   "their measured times in place of the alpha-beta model for their\n"
                   "collective, group size and nodes")
      ->delimiter(',');
  estimate->add_option("--svg", est.svg,
                       "write a picture of the estimated step (SVG): for each role, its compute\n"
                       "and communication lanes and its memory over the step, peak marked");
  estimate->add_flag("--search", est.search,
                     "profile every layout of the mesh's ranks (fsdp, ddp, tp; and for each\n"
                     "factoring dp x tp: fsdp+tp, ddp+tp, hsdp), with no, selective and whole\n"
                     "activation checkpointing, and fully_shard's with and without prefetch and\n"
                     "resharding after forward; print those whose peak fits --memory-budget,\n"
                     "fastest first, and the fastest as a command line and as C++ and Python");
  double budget_gib = 0;
  add_number(estimate, "--memory-budget", budget_gib,
             "--search: GiB per rank (default: the device's memory)", 0, true);
  estimate->add_flag("--json", est.json,
                     "print JSON: ranks, mesh, scheme, parameters, cluster, ranks_per_node,\n"
                     "exact, estimated, roles (ranks, memory, communication by phase),\n"
                     "time (step_s, compute_s, communication_s, exposed_communication_s,\n"
                     "phases_s, tokens_per_s, mfu), profiled_s, computed_ranks, runs;\n"
                     "with --search: budget, profiled, over_budget, refused, fit (the ranked\n"
                     "layouts)");

  CalibrateArgs cal;
  auto* calibrate = app.add_subcommand(
      "calibrate", "Measure this machine's rates and collectives for 'dtensor estimate'");
  calibrate->footer(
      "Run under mpirun with the process count of the runs to estimate: every rank\n"
      "computes at once, as in training (ranks sharing cores share them here too).\n"
      "Measures a square matmul in float32 and bfloat16 (the products' rate), an add far\n"
      "larger than the caches (memory bandwidth), an add of 8 elements (the cost of one\n"
      "op through the dispatcher), and all_gather, all_reduce and reduce_scatter over all\n"
      "ranks at sizes from 1 KiB to --max-bytes; fits a link latency and bandwidth to the\n"
      "all_gathers. Writes the cluster JSON that 'dtensor estimate --calibration' reads\n"
      "(docs/estimate.md).\n"
      "\n"
      "Examples:\n"
      "  mpirun -np 4 dtensor calibrate --out calibration.json\n"
      "  dtensor estimate --mesh 2x2 --calibration calibration.json\n"
      "\n"
      "Exit status: 0, or 2 on a bad argument (one line on stderr says which).");
  calibrate->add_option("--out", cal.out, "the file to write ('' prints the JSON)")
      ->capture_default_str();
  add_number<int64_t>(calibrate, "--matmul-size", cal.matmul_size, "n of the n x n matmul", 16,
                      8192);
  add_number<int64_t>(calibrate, "--stream-elements", cal.stream_elements,
                      "elements of the bandwidth add", 1024, int64_t{1} << 30);
  add_number<int64_t>(calibrate, "--max-bytes", cal.max_bytes,
                      "the largest collective measured, bytes per rank", 1024, int64_t{1} << 30);
  add_number(calibrate, "--reps", cal.reps, "runs of each measurement (the fastest counts)", 1,
             1000);

  DemoArgs demo_args;
  ModelConfig& model = demo_args.model;
  auto* demo = app.add_subcommand(
      "demo", "Run a tensor-parallel transformer forward pass on a (dp, tp) mesh, verified");
  demo->footer(
      "Builds a small GPT-style transformer (token + position embedding, --layers blocks of\n"
      "causal self-attention and a GELU MLP behind LayerNorms with residuals, a final\n"
      "LayerNorm, the output projection, cross-entropy) from one seed, lays it out with\n"
      "parallelize_module and its Megatron plan (data parallel over the first mesh dim, tensor\n"
      "parallel over the last: column/row-parallel linears, attention heads split over\n"
      "tp, a vocab-parallel embedding and loss), runs --steps forward passes, and checks\n"
      "the loss and logits against the same model on one rank in this process.\n"
      "Prints the layout of each weight, the collectives per layer, the planner's\n"
      "estimated communication cost, the sharding-propagation cache hits and the wall\n"
      "time per step.\n"
      "\n"
      "Worlds: by default the ranks are simulated in this process; under mpirun (or with\n"
      "--world mpi) each process is one rank and the mesh must have as many ranks:\n"
      "  dtensor demo\n"
      "  dtensor demo --mesh 4 --layers 1 --no-sequence-parallel\n"
      "  mpirun -np 8 dtensor demo            (as root add --allow-run-as-root;\n"
      "                                        on 2 cores add --oversubscribe)\n"
      "\n"
      "With DTENSOR_VERIFY=1 in the environment every op and redistribution is also\n"
      "checked against the same computation on replicated inputs (slower; an error\n"
      "names the first op that disagrees).\n"
      "\n"
      "Exit status: 0 when verified, 1 when the model differs from the reference beyond\n"
      "--tolerance, 2 on a bad argument (one line on stderr says which).");
  demo->add_option("--mesh", demo_args.mesh,
                   "mesh shape: DPxTP (e.g. 2x4) or TP alone (e.g. 4); ranks 0..n-1, row-major")
      ->capture_default_str();
  demo->add_option("--names", demo_args.names,
                   "mesh dim names, comma-separated (default dp,tp; tp for a 1-d mesh)");
  constexpr int64_t kSizeMax = int64_t{1} << 16;
  add_number<int64_t>(demo, "--batch", model.batch, "sequences per step (sharded over dp)", 1, kSizeMax);
  add_number<int64_t>(demo, "--seq", model.seq, "tokens per sequence", 1, kSizeMax);
  add_number<int64_t>(demo, "--hidden", model.hidden, "model width (a multiple of --heads)", 1,
                      kSizeMax);
  add_number<int64_t>(demo, "--heads", model.heads, "attention heads (a multiple of the tp size)", 1,
                      kSizeMax);
  add_number<int64_t>(demo, "--layers", model.layers, "transformer blocks", 0, 256);
  add_number<int64_t>(demo, "--vocab", model.vocab, "vocabulary size (embedding rows, logits)", 1,
                      kSizeMax);
  bool no_sequence_parallel = false, no_loss_parallel = false;
  demo->add_flag("--no-sequence-parallel", no_sequence_parallel,
                 "keep activations replicated over tp between blocks (all_reduce after each\n"
                 "row-parallel linear) instead of sharding them on the sequence dim\n"
                 "(all_gather + reduce_scatter; norms on sequence slices)");
  demo->add_flag("--no-loss-parallel", no_loss_parallel,
                 "compute cross_entropy on the logits (the planner moves them) instead of\n"
                 "vocab_parallel_cross_entropy on the vocabulary-sharded logits");
  add_number(demo, "--steps", demo_args.steps, "forward passes to run and time", 1, 1000);
  demo->add_option("--world", demo_args.world,
                   "auto (MPI when launched by mpirun, else simulated), sim or mpi;\n"
                   "sim under mpirun runs the whole simulation in every process")
      ->capture_default_str()->check(one_of({"auto", "sim", "mpi"}));
  add_number(demo, "--tolerance", demo_args.tolerance,
             "largest accepted |difference| of loss and logits from the reference", 0, true);
  demo->add_flag("--json", demo_args.json,
                 "print JSON: world, ranks, mesh, names, dp, tp, model, weights,\n"
                 "collectives_per_layer, steps, propagation_cache, loss, reference_loss,\n"
                 "loss_diff, logits_max_diff, tolerance, verified");

  VisualizeArgs vis;
  auto* visualize = app.add_subcommand(
      "visualize",
      "Show which rank holds which part of a tensor (like PyTorch's visualize_sharding)");
  visualize->footer(
      "Prints one row per rank of the mesh: its mesh coordinate, the global index range\n"
      "[a, b) it holds of every tensor dim, and its local shape. Partial mesh dims get a\n"
      "note under the table. The ranks are simulated in this process; nothing is launched.\n"
      "\n"
      "Examples:\n"
      "  dtensor visualize --mesh 4 --shape 8,16 --placements 'S(0)'\n"
      "  dtensor visualize --mesh 4x2 --names dp,tp --shape 18,2 --placements 'S(0),S(0)'\n"
      "  dtensor visualize --mesh 2x2 --shape 4,6 --placements 'S(1),P(sum)' --json\n"
      "\n"
      "Exit status: 0 on success, 2 on a bad argument (one line on stderr says which).");
  visualize->add_option("--mesh", vis.mesh,
                        "mesh shape: sizes joined by 'x', e.g. 8 or 4x2 (ranks 0..n-1, row-major)")
      ->required();
  visualize->add_option("--names", vis.names,
                        "mesh dim names, comma-separated, one per mesh dim, e.g. dp,tp");
  visualize->add_option("--shape", vis.shape,
                        "global tensor shape, comma-separated, e.g. 18,2")
      ->required();
  visualize->add_option(
               "--placements", vis.placements,
               "one placement per mesh dim, comma-separated (quote it for the shell):\n"
               "S(d)     Shard(d): tensor dim d is split over the mesh dim in chunks of\n"
               "         ceil(L/n); trailing chunks may be short or empty. S(-1) = last dim\n"
               "S(d)[k]  Shard(d) as the k-th (from 0) of the mesh dims sharding d to split it\n"
               "         (shard order; plain S(d): left to right)\n"
               "R        Replicate(): every rank of the mesh dim holds the whole\n"
               "P(op)    Partial(op): every rank holds a piece and the value is the\n"
               "         reduction over the mesh dim; op is sum (default, 'P'), avg, max, min\n"
               "e.g. 'S(0),R' or 'S(0),P(sum)'")
      ->required();
  visualize->add_option("--dtype", vis.dtype, "element type: f32, f64, bf16, f16, i64 or bool")
      ->capture_default_str();
  visualize->add_flag("--json", vis.json,
                      "print JSON instead of the table: mesh, names, shape, dtype, placements\n"
                      "and shards, one {rank, coordinate, local_shape, global_offset} per rank");

  PlanArgs pl;
  auto* plan = app.add_subcommand(
      "plan", "Show the cheapest redistribution plan between two layouts, and its cost");
  plan->footer(
      "Plans the move of a tensor from one layout (--from) to another (--to) on a mesh:\n"
      "a shortest-path search over placements under the topology cost model, then\n"
      "merging of consecutive same-kind collectives over flattened mesh dims. Prints\n"
      "one line per step (collective, mesh dims, placements, bytes per rank, estimated\n"
      "microseconds) and the total. The ranks are simulated in this process.\n"
      "\n"
      "Examples:\n"
      "  dtensor plan --mesh 4 --shape 10,10 --from 'S(0)' --to R\n"
      "  dtensor plan --mesh 2x2x2 --names A,B,C --shape 16,16,16 --from 'P,P,S(0)' \\\n"
      "      --to 'S(0),S(0),S(0)' --flatten A,B --no-auto-flatten --json\n"
      "  dtensor plan --mesh 4x2 --shape 5 --from 'S(0),S(0)' --to R,R --verify\n"
      "\n"
      "Exit status: 0 on success, 1 if --verify finds a mismatch, 2 on a bad argument\n"
      "or a move that is not allowed (e.g. S->P; one line on stderr says which).");
  plan->add_option("--mesh", pl.mesh, "mesh shape: sizes joined by 'x', e.g. 8 or 2x2x2")
      ->required();
  plan->add_option("--names", pl.names, "mesh dim names, comma-separated, e.g. A,B,C");
  plan->add_option("--shape", pl.shape, "global tensor shape, comma-separated, e.g. 16,16,16")
      ->required();
  plan->add_option("--dtype", pl.dtype, "element type: f32, f64, bf16, f16, i64 or bool")
      ->capture_default_str();
  plan->add_option("--from", pl.from,
                   "source placements, one per mesh dim: S(d), R, P(sum|avg|max|min) ('P' = sum)")
      ->required();
  plan->add_option("--to", pl.to,
                   "target placements (a Partial only on a mesh dim where the source has the\n"
                   "same Partial)")
      ->required();
  plan->add_option("--flatten", pl.flatten,
                   "declare one flattened group of mesh dims, by names (A,B) or dims (0,1);\n"
                   "repeat --flatten for more groups")
      ->take_all()
      ->allow_extra_args(false)
      ->type_name("DIMS");
  plan->add_flag("--no-auto-flatten", pl.no_auto_flatten,
                 "merge collectives only over groups declared with --flatten");
  plan->add_flag("--no-box-exchange", pl.no_box_exchange,
                 "plan one-mesh-dim steps only, never one box exchange (for comparisons)");
  add_number<int64_t>(plan, "--devices-per-host", pl.devices_per_host,
                      "ranks per host for the cost model: mesh dims spanning more cross hosts", 1,
                      int64_t{1} << 30);
  plan->add_flag("--json", pl.json,
                 "print JSON: mesh, names, shape, dtype, from, to, steps, counts, groups, cost_us");
  plan->add_flag("--verify", pl.verify,
                 "also run the plan on random data in a simulated world and check the result\n"
                 "(adds \"verified\" to the JSON; exit 1 on a mismatch)");

  CheckpointInspectArgs ck;
  auto* checkpoint = app.add_subcommand(
      "checkpoint", "Look into a distributed checkpoint directory (checkpoint::save)");
  checkpoint->require_subcommand(1);
  checkpoint->footer(
      "A checkpoint is a directory written by checkpoint::save: metadata.json and one\n"
      "data file per writing rank (docs/checkpoint.md). 'dtensor checkpoint inspect DIR'\n"
      "shows what it holds and verifies every checksum; run\n"
      "'dtensor checkpoint inspect --help' for its options.\n"
      "\n"
      "Examples:\n"
      "  dtensor checkpoint inspect ckpt/step-100\n"
      "  dtensor checkpoint inspect ckpt/step-100 --chunks --json\n"
      "\n"
      "Exit status: 0 on success, 1 when the checkpoint cannot be read or is\n"
      "corrupted, 2 on a bad argument (one line on stderr says which).");
  auto* inspect = checkpoint->add_subcommand(
      "inspect", "Show what a checkpoint directory holds and verify every checksum");
  inspect->footer(
      "Reads DIR/metadata.json and prints the format version, the number of ranks\n"
      "that saved the checkpoint and the checksum block size; one line per tensor\n"
      "(name, dtype, global shape, chunks, bytes, the layout it was saved from);\n"
      "with --chunks every chunk (offsets, sizes, data file, byte range, blocks); the\n"
      "data files and their sizes; the plain values; the total bytes. Then it reads\n"
      "every data file and checks every block against its XXH3-64 checksum\n"
      "(\"checksums: N blocks verified\"), unless --no-verify.\n"
      "\n"
      "Examples:\n"
      "  dtensor checkpoint inspect ckpt/step-100\n"
      "  dtensor checkpoint inspect ckpt/step-100 --chunks\n"
      "  dtensor checkpoint inspect ckpt/step-100 --no-verify --json\n"
      "\n"
      "Exit status: 0 when the checkpoint is readable and every checksum matches; 1\n"
      "when DIR is not a checkpoint, metadata.json is not valid, or a data file is\n"
      "missing, truncated or corrupted (one line on stderr names the file and the\n"
      "tensor); 2 on a bad argument.");
  inspect->add_option("DIR", ck.dir, "the checkpoint directory (the DIR given to checkpoint::save)")
      ->required();
  inspect->add_flag("--chunks", ck.chunks,
                    "also list every chunk: tensor, offsets, sizes, data file, byte range\n"
                    "[begin, end) in it and checksum blocks");
  inspect->add_flag("--no-verify", ck.no_verify,
                    "read metadata.json only: do not read the data files nor check checksums");
  inspect->add_flag("--json", ck.json,
                    "print JSON: dir, version, world_size, block_bytes, tensors (dtype, shape,\n"
                    "num_chunks, bytes, saved_layout, and chunks with --chunks), files, values,\n"
                    "total_chunks, total_bytes, file_bytes, blocks, verified (and error)");

  RulesArgs ru;
  auto* rules = app.add_subcommand(
      "rules", "Check every op's sharding rule against the plain op and print the table");
  rules->footer(
      "For every op case (docs/rules.md lists them) and every combination of input\n"
      "placements on the --mesh meshes (a seeded sample beyond --max-layouts; a sample of\n"
      "--samples on the --sampled meshes), builds adversarial inputs (uneven Partial\n"
      "pieces with alternating signs, distinct Partial(max/min) pieces, uneven and empty\n"
      "shards), runs the op, and compares full_tensor() with the plain op. A layout is\n"
      "'local' (right, no collective), 'communicated' (right, and no layout without\n"
      "communication is), 'missing' (right, but the validator ran the op's kernel under a\n"
      "layout without communication the rule does not offer, and it was right too) or\n"
      "'incorrect' (wrong: a bug). Prints a markdown table, the totals and examples.\n"
      "The ranks are simulated in this process.\n"
      "\n"
      "Examples:\n"
      "  dtensor rules\n"
      "  dtensor rules --op mm --mesh 4,2x2 --no-sampled\n"
      "  dtensor rules --list\n"
      "\n"
      "Exit status: 0 when no layout is incorrect, 1 when one is, 2 on a bad argument.");
  rules->add_option("--op", ru.op, "only the op cases whose name contains this, e.g. mm or sum");
  rules->add_option("--mesh", ru.meshes,
                    "meshes checked exhaustively, comma-separated, e.g. 3,4,2x3 ('': none)")
      ->capture_default_str();
  rules->add_option("--sampled", ru.sampled, "meshes checked on a sample, e.g. 2x2x2")
      ->capture_default_str();
  rules->add_flag("--no-sampled", ru.no_sampled, "skip the sampled meshes");
  add_number<int64_t>(rules, "--max-layouts", ru.max_layouts,
                      "at most this many layouts per op and mesh; more are sampled", 1,
                      int64_t{1} << 24);
  add_number<int64_t>(rules, "--samples", ru.samples, "layouts per op on a sampled mesh", 1,
                      int64_t{1} << 24);
  rules->add_flag("--no-search", ru.no_search,
                  "do not search for missing layouts (faster; 'missing' stays 0)");
  add_number<uint64_t>(rules, "--seed", ru.seed, "seed of the inputs and samples", 0, UINT64_MAX);
  rules->add_flag("--list", ru.list, "list the op cases and exit");

  check_number_options(app);

  // An unknown command gets a message naming the commands (CLI11 would only
  // say that one is required).
  if (argc > 1 && argv[1][0] != '-') {
    const std::string first = argv[1];
    if (!is_command(first)) {
      std::cerr << "dtensor: unknown command " << quote(first) << "; expected " << kCommands
                << " (see dtensor --help)\n";
      return 2;
    }
    if (first == "checkpoint" && argc > 2 && argv[2][0] != '-' &&
        std::string(argv[2]) != "inspect") {
      std::cerr << "dtensor checkpoint: unknown command " << quote(argv[2])
                << "; expected inspect (see dtensor checkpoint --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = rewrite_parse_error(e);
    if (inspect->parsed()) {
      // inspect takes one positional argument, not only options.
      if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
        const size_t at = message.rfind(" (expected options");
        if (at != std::string::npos)
          message = message.substr(0, at) + " (expected one DIR and the options)";
      }
      std::cerr << "dtensor checkpoint inspect: " << one_line(message)
                << " (see dtensor checkpoint inspect --help)\n";
    } else if (checkpoint->parsed()) {
      if (message.rfind("a command is required", 0) == 0)
        std::cerr << "dtensor checkpoint: a command is required: inspect (see dtensor checkpoint "
                     "--help)\n";
      else
        std::cerr << "dtensor checkpoint: " << one_line(message)
                  << " (see dtensor checkpoint --help)\n";
    } else if (message.rfind("a command is required", 0) == 0) {
      std::cerr << "dtensor: " << message << " (see dtensor --help)\n";
    } else if (CLI::App* cmd = visualize->parsed() ? visualize
                        : train->parsed()   ? train
                        : estimate->parsed() ? estimate
                        : calibrate->parsed() ? calibrate
                        : plan->parsed()    ? plan
                        : demo->parsed()    ? demo
                        : rules->parsed()   ? rules
                                            : nullptr) {
      std::cerr << "dtensor " << cmd->get_name() << ": " << one_line(message) << " (see dtensor "
                << cmd->get_name() << " --help)\n";
    } else if (argc == 1) {
      std::cerr << "dtensor: a command is required: " << kCommands << " (see dtensor --help)\n";
    } else {
      std::cerr << "dtensor: " << one_line(message) << " (see dtensor --help)\n";
    }
    return 2;
  }
  // Bad input (unparsable mesh or placements, a forbidden move) is a usage
  // error: exit 2 with one line naming the subcommand.
  if (inspect->parsed()) {
    try {
      return run_checkpoint_inspect(ck);
    } catch (const dtensor::Error& e) {
      std::cerr << "dtensor checkpoint inspect: " << one_line(e.what()) << "\n";
      return 2;
    }
  }
  for (CLI::App* cmd : {train, estimate, calibrate, demo, visualize, plan, rules}) {
    if (!cmd->parsed()) continue;
    try {
      if (cmd == rules) return run_rules(ru);
      if (cmd == calibrate) return run_calibrate(cal);
      if (cmd == estimate) {
        et.sequence_parallel = !est_no_sp;
        et.reshard_after_forward = !est_no_reshard;
        est.memory_budget = budget_gib * 1073741824.0;
        if (!est.preset.empty())
          apply_preset(est, [&](const std::string& name) {
            return estimate->get_option(name)->count() > 0;
          });
        return run_estimate(est);
      }
      if (cmd == train) {
        train_args.sequence_parallel = !train_no_sp;
        train_args.check = !train_no_check;
        train_args.reshard_after_forward = !train_no_reshard;
        train_args.tolerance_given = train->get_option("--tolerance")->count() > 0;
        if (train_no_svg) train_args.svg.clear();
        return run_train(train_args);
      }
      if (cmd == demo) {
        model.sequence_parallel = !no_sequence_parallel;
        model.loss_parallel = !no_loss_parallel;
        return run_demo(demo_args);
      }
      return cmd == visualize ? run_visualize(vis) : run_plan(pl);
    } catch (const dtensor::Error& e) {
      std::cerr << "dtensor " << cmd->get_name() << ": " << one_line(e.what()) << "\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace
