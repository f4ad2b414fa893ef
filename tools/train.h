// `dtensor train`, the project's main job: a small GPT-style model learning
// the shipped text on a mesh, every step checked against the same training
// on one process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtensor::cli {

struct TrainArgs {
  std::string mesh = "2x2";
  std::string names;               // empty: dp,tp (one name for a 1-d mesh)
  std::string scheme = "fsdp+tp";  // fsdp+tp | ddp+tp | fsdp | ddp | tp | hsdp
  bool sequence_parallel = true;
  int64_t batch = 8, seq = 32, hidden = 64, heads = 4, layers = 2;
  // The architecture (models::GPTConfig): gpt (GPT-2: LayerNorm, GELU,
  // learnt positions, biases) or llama (RMSNorm, SwiGLU, RoPE, no biases);
  // key/value heads of grouped-query attention (0: heads) and the MLP's
  // width (0: 4 x hidden).
  std::string model = "gpt";
  int64_t kv_heads = 0, ffn = 0;
  int steps = 150;
  double lr = 3e-3;
  int64_t warmup = 10;
  double clip = 1.0;
  uint64_t seed = 1234;
  std::string world = "auto";  // auto | sim | mpi
  bool check = true;           // train the one-process reference alongside
  double tolerance = 1e-3;
  std::string svg = "train_loss.svg";  // "" writes none
  int print_every = 10;
  bool json = false;
  // Only the bits: each step's loss as a hex float and the fingerprint,
  // for comparing the simulated world with mpirun line by line.
  bool bits = false;
  // Checkpoints (checkpoint.h): every save_every steps (0: never) the
  // model, optimizer and schedule are saved to checkpoint_dir/step-N;
  // resume names such a directory to continue from, on any mesh/scheme.
  std::string checkpoint_dir = "checkpoints";
  int save_every = 0;
  std::string resume;
  // none | bf16 | fp16: FSDP2's MixedPrecisionPolicy with that param_dtype
  // and float32 reduce_dtype (docs/mixed_precision.md).
  std::string mixed_precision = "none";
  // meta | eager: build the distributed model under nn::MetaDeviceGuard
  // and materialize each process's shards after laying it out (no process
  // holds a whole parameter it does not own), or build it whole first.
  // The values are the same either way, bit for bit.
  std::string init = "meta";
  // Activation checkpointing of the blocks (nn::checkpoint_wrapper):
  // 0 none, 1 every block, k every k-th block (blocks 0, k, 2k, ...).
  int checkpoint_every = 0;
  // Selective checkpointing of those blocks: the ops whose outputs they
  // keep (nn::CheckpointPolicy::save_ops), comma-separated.
  std::string checkpoint_save_ops;
  // FullyShardOptions::prefetch: each block's all_gather started a block
  // early (overlapping under MPI).
  bool prefetch = false;
  // FullyShardOptions::async_reduce_scatter: each block's gradient
  // reduce_scatter overlaps the next block's backward (under MPI non-blocking).
  bool async_reduce_scatter = false;
  // FullyShardOptions::reshard_after_forward: false keeps each block's
  // gathered parameters from forward to backward.
  bool reshard_after_forward = true;
  // Gradient accumulation: each step's batch in this many micro-batches,
  // forward and backward in turn (each dp rank's part of the batch split
  // evenly), the gradients summed, then one optimizer step.
  int micro_batches = 1;
  // Whether --tolerance was given; else a mixed-precision run takes
  // kMixedPrecisionTolerance.
  bool tolerance_given = false;
};
// The default --tolerance of a --mixed-precision run (derived in
// docs/mixed_precision.md, "dtensor train --mixed-precision").
inline constexpr double kMixedPrecisionTolerance = 0.05;
int run_train(const TrainArgs& args);

// `dtensor estimate`: the step of `dtensor train` with these arguments
// (batch: the global batch), profiled on a shape-only world.
struct EstimateArgs {
  TrainArgs train;
  int64_t vocab = 32000;
  std::string cluster = "h100";  // estimate::cluster_preset
  int ranks_per_node = 0;        // 0: the preset's
  // The links, in place of the cluster's (0: its own): each rank's
  // bandwidth in GB/s (1e9 bytes/s, one direction) and a message's
  // latency in microseconds, within a node and across nodes.
  double intra_node_gbps = 0, inter_node_gbps = 0;
  double intra_node_latency_us = 0, inter_node_latency_us = 0;
  bool json = false;
  std::string chrome_trace;      // a file for Perfetto / chrome://tracing ("" none)
  std::string calibration;       // a `dtensor calibrate` file, in place of --cluster
  // nccl-tests outputs: their measured times in place of the model for their
  // collective, group size and span (estimate::parse_nccl_tests).
  std::vector<std::string> nccl_tests;
  std::string svg;               // a picture of the estimated step, per role ("" none)
  bool search = false;           // every layout of the mesh's ranks, fastest first
  double memory_budget = 0;      // --search: bytes per rank (0: the device's memory)
  std::string preset;            // llama3-8b | llama3-70b ("" none)
};
int run_estimate(const EstimateArgs& args);
// --preset: the model of a published configuration (--model, --layers,
// --hidden, --heads, --kv-heads, --ffn, --vocab), each option but those
// `given` on the command line (an explicit option overrides the preset).
// Throws dtensor::Error naming an unknown preset and the known ones.
void apply_preset(EstimateArgs& args, const std::function<bool(const std::string&)>& given);

// `dtensor calibrate`: this machine's rates and links, under mpirun.
struct CalibrateArgs {
  std::string out = "calibration.json";  // "" prints the JSON
  int64_t matmul_size = 512;
  int64_t stream_elements = int64_t{1} << 23;
  int64_t max_bytes = int64_t{1} << 24;  // the largest collective measured, per rank
  int reps = 5;
};
int run_calibrate(const CalibrateArgs& args);

}  // namespace dtensor::cli
