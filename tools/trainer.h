// The model `dtensor train` trains and `dtensor estimate` profiles: the
// GPT of models/gpt.h laid out by a parallelism scheme, with its AdamW and
// learning-rate schedule, and one training step of it. One program for
// both, so that an estimate is of the very step the training runs.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "dtensor/debug.h"
#include "dtensor/fsdp.h"
#include "dtensor/memory.h"
#include "dtensor/models/gpt.h"
#include "dtensor/optim.h"
#include "train.h"
#include "train_data.h"

namespace dtensor::cli {

// Which parallelism runs on which mesh dim.
struct Scheme {
  bool fsdp = false, ddp = false, tp = false;
  int dp_dim = -1, tp_dim = -1;
  int replicate_dim = -1;  // HSDP: FSDP over dp_dim, replicated over this one
  std::string describe(const DeviceMesh& mesh, bool sp) const {
    std::string out;
    const auto name = [&](int d) { return mesh.names()[static_cast<size_t>(d)]; };
    if (fsdp && replicate_dim >= 0)
      out += "hybrid sharded data parallel (HSDP): replicated over " + name(replicate_dim) +
             ", sharded over " + name(dp_dim);
    else if (fsdp)
      out += "fully sharded data parallel (FSDP) over " + name(dp_dim);
    if (ddp) out += "data parallel (replicated parameters) over " + name(dp_dim);
    if (tp) {
      out += out.empty() ? "" : ", ";
      out += std::string(sp ? "tensor + sequence parallel" : "tensor parallel") + " over " +
             name(tp_dim);
    }
    return out;
  }
};

// --scheme on a mesh of mesh_ndim dims (mesh_text, for the message).
Scheme parse_scheme(const std::string& text, int mesh_ndim, const std::string& mesh_text);

// The collectives of each phase of a step, by kind (CollectiveKind's order:
// every kind CommDebugMode counts, so that none a step runs is hidden).
enum Phase { kForward, kBackward, kOptimizer, kNumPhases };
constexpr const char* kPhaseNames[] = {"forward", "backward", "optimizer"};
using KindCounts = std::array<int64_t, kNumCollectiveKinds>;
using PhaseCounts = std::array<KindCounts, kNumPhases>;

inline CollectiveKind kind_at(size_t i) { return static_cast<CollectiveKind>(i); }

// Per kind, the count in each dtype (a mixed-precision step gathers in
// 16 bits and reduces gradients in float32).
using KindDtypes = std::array<std::array<int64_t, kNumDTypes>, kNumCollectiveKinds>;
using PhaseDtypes = std::array<KindDtypes, kNumPhases>;

void count_into(const CommDebugMode& mode, KindCounts& out, KindDtypes& dtypes);

// The learning-rate schedule of a run of `total` steps: linear warm-up,
// then cosine decay to 10% of the peak at step `total`.
std::unique_ptr<optim::SequentialLR> make_schedule(optim::AdamW& optimizer, const TrainArgs& args,
                                                   int64_t total);
// --model: gpt or llama; throws naming any other.
models::ModelStyle model_style(const std::string& model);
// The model of a run's arguments, with a vocabulary of `vocab`.
inline models::GPTConfig gpt_config(const TrainArgs& args, int64_t vocab) {
  models::GPTConfig c;
  c.batch = args.batch;
  c.seq = args.seq;
  c.hidden = args.hidden;
  c.heads = args.heads;
  c.layers = args.layers;
  c.vocab = vocab;
  c.kv_heads = args.kv_heads;
  c.ffn = args.ffn;
  c.style = model_style(args.model);
  return c;
}
// --activation-checkpointing-save as a policy (none when not given).
nn::CheckpointPolicy checkpoint_policy_of(const TrainArgs& args);
// --mixed-precision: the 16-bit param_dtype, float32 reduce_dtype.
MixedPrecisionPolicy policy_of(const TrainArgs& args);

// One model with its optimizer and schedule, on a mesh.
struct Trainer {
  std::unique_ptr<models::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::SequentialLR> schedule;
  Placements input;  // ids and targets: batch split over dp, Replicate elsewhere
  double clip = 0;
  int micro_batches = 1;  // TrainArgs::micro_batches

  // `meta`: the model is made on the meta device, laid out, then
  // materialized (TrainArgs::init).
  Trainer(const models::GPTConfig& config, const DeviceMesh& mesh, const Scheme& scheme,
          const TrainArgs& args, bool meta);

  // From `step` on, the schedule of a run of `total` steps (a resumed run
  // that trains longer or shorter than the saved one; see check_resume).
  void reschedule(const TrainArgs& args, int64_t total, int64_t step);

  // forward, backward, clip, step; returns the loss (every rank the same).
  // The loss and the gradients' total norm before clipping (AdamW is
  // blind to the gradients' scale; the norm is not, so comparing it catches
  // a gradient summed where it should be averaged). In a shape-only world
  // both are NaN.
  struct Result {
    double loss, grad_norm;
  };
  // `phases` (may be null) gets the collectives of forward (with the
  // loss), backward, and the optimizer (clipping and step).
  // `memory` (may be null) counts the activations forward saved. Marks
  // the phases for estimate::profile.
  Result step(const DTensor& ids, const DTensor& targets, PhaseCounts* phases = nullptr,
              PhaseDtypes* dtypes = nullptr, MemoryTracker* memory = nullptr);
  // The step on a batch of the text, laid out as `input`.
  Result step(const TextData::Batch& batch, PhaseCounts* phases = nullptr,
              PhaseDtypes* dtypes = nullptr, MemoryTracker* memory = nullptr) {
    const DeviceMesh& mesh = model->mesh();
    return step(distribute_tensor(batch.ids, mesh, input),
                distribute_tensor(batch.targets, mesh, input), phases, dtypes, memory);
  }
};

}  // namespace dtensor::cli
