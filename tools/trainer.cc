// The model and step of `dtensor train` and `dtensor estimate` (trainer.h).
#include "trainer.h"

#include <cmath>
#include <optional>

#include "cli.h"
#include "dtensor/error.h"
#include "dtensor/estimate.h"
#include "dtensor/fsdp.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor::cli {

Scheme parse_scheme(const std::string& text, int mesh_ndim, const std::string& mesh_text) {
  Scheme s;
  if (text == "fsdp+tp" || text == "tp+fsdp")
    s = {true, false, true, 0, 1};
  else if (text == "ddp+tp" || text == "tp+ddp")
    s = {false, true, true, 0, 1};
  else if (text == "fsdp")
    s = {true, false, false, 0, -1};
  else if (text == "ddp")
    s = {false, true, false, 0, -1};
  else if (text == "tp")
    s = {false, false, true, -1, 0};
  else if (text == "hsdp")
    s = {true, false, false, 1, -1, 0};
  else
    DT_THROW("--scheme ", quote(text), " is not one of fsdp+tp, ddp+tp, fsdp, ddp, tp, hsdp");
  const int want = ((s.fsdp || s.ddp) && s.tp) || s.replicate_dim >= 0 ? 2 : 1;
  DT_CHECK(mesh_ndim == want, "--scheme ", text, " needs a mesh of ", want,
           want == 2 ? (s.tp ? " dims (dp x tp, e.g. 2x2)" : " dims (replicate x shard, e.g. 2x2)")
                     : " dim (e.g. 4)",
           ", got --mesh ", mesh_text);
  return s;
}

void count_into(const CommDebugMode& mode, KindCounts& out, KindDtypes& dtypes) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = mode.count(kind_at(i));
    for (int d = 0; d < kNumDTypes; ++d)
      dtypes[i][static_cast<size_t>(d)] = mode.count(kind_at(i), static_cast<DType>(d));
  }
}

// The learning-rate schedule of a run of `total` steps: linear warm-up,
// then cosine decay to 10% of the peak at step `total`.
std::unique_ptr<optim::SequentialLR> make_schedule(optim::AdamW& optimizer, const TrainArgs& args,
                                                   int64_t total) {
  const int64_t warmup = std::max<int64_t>(1, std::min<int64_t>(args.warmup, total));
  return std::make_unique<optim::SequentialLR>(
      optimizer,
      std::vector<std::shared_ptr<optim::LRScheduler>>{
          optim::LinearLR::make(optimizer, 0.1, 1.0, warmup),
          optim::CosineAnnealingLR::make(optimizer, std::max<int64_t>(1, total - warmup),
                                         0.1 * args.lr)},
      std::vector<int64_t>{warmup});
}

// --activation-checkpointing-save as a policy (none when not given).
nn::CheckpointPolicy checkpoint_policy_of(const TrainArgs& args) {
  if (args.checkpoint_save_ops.empty()) return {};
  return {split_list(args.checkpoint_save_ops)};
}

models::ModelStyle model_style(const std::string& model) {
  if (model == "gpt") return models::ModelStyle::GPT;
  DT_CHECK(model == "llama", "--model ", quote(model), " is not one of gpt, llama");
  return models::ModelStyle::Llama;
}

// --mixed-precision: the 16-bit param_dtype, float32 reduce_dtype.
MixedPrecisionPolicy policy_of(const TrainArgs& args) {
  MixedPrecisionPolicy mp;
  if (args.mixed_precision == "none") return mp;
  DT_CHECK(args.mixed_precision == "bf16" || args.mixed_precision == "fp16", "--mixed-precision ",
           quote(args.mixed_precision), " is not one of none, bf16, fp16");
  mp.param_dtype = args.mixed_precision == "bf16" ? DType::BFloat16 : DType::Float16;
  mp.reduce_dtype = DType::Float32;
  return mp;
}

Trainer::Trainer(const models::GPTConfig& config, const DeviceMesh& mesh, const Scheme& scheme,
                 const TrainArgs& args, bool meta)
    : clip(args.clip), micro_batches(args.micro_batches) {
  DT_CHECK(micro_batches >= 1, "--micro-batches must be at least 1, got ", micro_batches);
  // Whole key/value heads per tp rank (the model checks it too, but only
  // at the first forward, after the model is built and laid out).
  if (scheme.tp && config.num_kv_heads() != config.heads) {
    const int64_t tp = mesh.size(scheme.tp_dim);
    DT_CHECK(config.num_kv_heads() % tp == 0, "--kv-heads ", config.num_kv_heads(),
             " must be a multiple of the tensor-parallel size ", tp);
  }
  {
    std::optional<nn::MetaDeviceGuard> guard;
    if (meta) guard.emplace();
    model = std::make_unique<models::GPT>(mesh, config, args.seed);
  }
  const MixedPrecisionPolicy mp = policy_of(args);
  if (scheme.tp) {
    ParallelizeOptions tp_options;
    tp_options.reduce_dtype = mp.reduce_dtype;
    parallelize_module(*model, scheme.tp_dim,
                       models::gpt_tensor_parallel_plan(config, args.sequence_parallel),
                       tp_options);
  }
  // Before fully_shard, as torchtitan applies it: the region covers a
  // block's hooks, so fully_shard gathers again for the recomputation.
  if (args.checkpoint_every > 0)
    for (auto& [name, module] : model->named_modules())
      if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos &&
          std::stoll(name.substr(7)) % args.checkpoint_every == 0)
        nn::checkpoint_wrapper(*module, checkpoint_policy_of(args));
  if (scheme.fsdp) {
    FullyShardOptions options;
    options.mesh_dims = {scheme.dp_dim};
    if (scheme.replicate_dim >= 0) options.replicate_mesh_dims = {scheme.replicate_dim};
    options.mp_policy = mp;
    options.prefetch = args.prefetch;
    options.async_reduce_scatter = args.async_reduce_scatter;
    options.reshard_after_forward = args.reshard_after_forward;
    for (auto& [name, module] : model->named_modules())
      if (name.rfind("blocks.", 0) == 0 && name.find('.', 7) == std::string::npos)
        fully_shard(*module, options);
    fully_shard(*model, options);
  }
  if (scheme.ddp) {
    ReplicateOptions options;
    options.mesh_dims = {scheme.dp_dim};
    options.mp_policy = mp;
    replicate(*model, options);
  }
  model->materialize();
  std::vector<std::pair<std::string, DTensor>> params;
  for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, *p);
  optim::AdamOptions options;
  options.lr = args.lr;
  options.weight_decay = 0.01;
  // The usual recipe: no weight decay on biases and norms' scales.
  optimizer = std::make_unique<optim::AdamW>(optim::weight_decay_groups(params), options);
  schedule = make_schedule(*optimizer, args, args.steps);
  input = Placements(static_cast<size_t>(mesh.ndim()), Replicate());
  if (scheme.dp_dim >= 0) input[static_cast<size_t>(scheme.dp_dim)] = Shard(0);
  if (scheme.replicate_dim >= 0) input[static_cast<size_t>(scheme.replicate_dim)] = Shard(0);
}

void Trainer::reschedule(const TrainArgs& args, int64_t total, int64_t step) {
  schedule = make_schedule(*optimizer, args, total);
  schedule->set_last_epoch(step);
}

namespace {

// Micro-batch i of k of a batch laid out as the trainer's input: on each
// rank, the i-th k-th of its own rows (as each data-parallel rank draws
// its micro-batches from its part of the batch), no data moved.
DTensor micro_batch(const DTensor& batch, int i, int k) {
  const DTensorSpec& spec = batch.spec();
  int64_t ways = 1;  // how many parts the batch dim is split into
  for (size_t d = 0; d < spec.placements().size(); ++d)
    if (spec.placements()[d].is_shard(0)) ways *= spec.mesh().size(static_cast<int>(d));
  const int64_t rows = spec.shape()[0];
  DT_CHECK(rows % (ways * k) == 0, "--micro-batches ", k, ": the batch of ", rows,
           " sequences over ", ways, " data-parallel ranks does not split into ", k,
           " equal micro-batches (--batch must be a multiple of ", ways * k, ")");
  Shape shape = spec.shape();
  shape[0] = rows / k;
  const int64_t local = rows / ways / k;
  return DTensor(
      DTensorSpec(spec.mesh(), spec.placements(), shape, spec.dtype()),
      batch.local().map([&](int, const Tensor& t) { return t.narrow(0, i * local, local); }));
}

void add_counts(const CommDebugMode& mode, KindCounts& out, KindDtypes& dtypes) {
  KindCounts counts;
  KindDtypes by_dtype;
  count_into(mode, counts, by_dtype);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] += counts[i];
    for (size_t d = 0; d < dtypes[i].size(); ++d) dtypes[i][d] += by_dtype[i][d];
  }
}

}  // namespace

Trainer::Result Trainer::step(const DTensor& ids, const DTensor& targets, PhaseCounts* phases,
                              PhaseDtypes* dtypes, MemoryTracker* memory) {
  PhaseDtypes unused;
  if (!dtypes) dtypes = &unused;
  if (phases) *phases = {};
  *dtypes = {};
  optimizer->zero_grad();
  std::vector<DTensor> losses;  // read after the step, as a training loop logs them
  double grad_norm = 0;
  // Each micro-batch's loss is its mean over 1/k of the batch: divided by
  // k, the gradients summed over the k backwards are the batch mean's.
  for (int i = 0; i < micro_batches; ++i) {
    const bool whole = micro_batches == 1;
    std::optional<DTensor> loss;
    {
      estimate::phase("forward");
      CommDebugMode mode;
      loss = models::gpt_loss((*model)(whole ? ids : micro_batch(ids, i, micro_batches)),
                              whole ? targets : micro_batch(targets, i, micro_batches));
      if (!whole) loss = *loss / static_cast<double>(micro_batches);
      if (phases) add_counts(mode, (*phases)[kForward], (*dtypes)[kForward]);
      if (memory && i == 0) memory->after_forward(*loss);
    }
    {
      estimate::phase("backward");
      CommDebugMode mode;
      loss->backward();
      if (phases) add_counts(mode, (*phases)[kBackward], (*dtypes)[kBackward]);
    }
    losses.push_back(*loss);
  }
  {
    estimate::phase("optimizer");
    CommDebugMode mode;
    grad_norm = clip > 0 ? optim::clip_grad_norm_(optimizer->params(), clip)
                         : optim::total_grad_norm(optimizer->params());
    optimizer->step();
    if (phases) add_counts(mode, (*phases)[kOptimizer], (*dtypes)[kOptimizer]);
  }
  schedule->step();
  double loss_sum = 0;
  for (const DTensor& loss : losses) {
    const Tensor value = loss.full_tensor();
    loss_sum += value.is_meta() ? NAN : value.item();
  }
  return {loss_sum, grad_norm};
}

}  // namespace dtensor::cli
