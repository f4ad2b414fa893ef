// Optimizers, learning-rate schedules and gradient clipping for DTensor
// parameters (PyTorch's torch.optim, torch.optim.lr_scheduler and
// torch.nn.utils.clip_grad_norm_, with their names and defaults).
//
//   optim::AdamW opt(model_params, {.lr = 3e-4});
//   optim::SequentialLR sched(opt, {optim::LinearLR::make(opt, 0.01, 1.0, 100),
//                                   optim::CosineAnnealingLR::make(opt, 900)}, {100});
//   for (...) { opt.zero_grad(); loss(...).backward();
//               optim::clip_grad_norm_(model_params, 1.0); opt.step(); sched.step(); }
//
// A step is local: each process updates the shards it holds, element by
// element, in place (one fused loop per shard, no temporaries), with no
// communication, so a parameter's optimizer state (momentum buffers,
// Adam's moments) is laid out exactly like the parameter: DTensors of its
// spec. The one exception is a gradient whose placements differ from its
// parameter's, e.g. the Partial(sum) gradient of a replicated weight under
// data parallelism (docs/autograd.md): step() and clip_grad_norm_ first
// redistribute it to the parameter's placements (the all_reduce data
// parallelism needs) and write it back as the gradient. Data-parallel and
// FSDP wrappers that reduce gradients themselves make that a no-op.
//
// Differences from PyTorch:
// - one learning rate per optimizer (no param_groups);
// - state is reached by index or name (state(i), state("w1")) rather than
//   keyed by the parameter object; the step count is a plain integer;
// - updates run in the parameter's dtype with the hyper-parameters cast to
//   it, in PyTorch's operation order (its single-tensor, non-foreach path);
// - clip_grad_norm_ sums |g|^p of all gradients in float64 before one root
//   (PyTorch takes the norm of the per-parameter norms, in the grads'
//   dtype), and replaces each gradient by a scaled copy instead of scaling
//   it in place (autograd may hand one storage to several gradients).
//
// Thread safety: an optimizer is not thread-safe; one thread drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/distributed_tensor.h"

namespace dtensor::optim {

// The state an optimizer keeps for one parameter: the number of steps it
// took and its buffers ("momentum_buffer"; "exp_avg", "exp_avg_sq",
// "max_exp_avg_sq"), each a DTensor with the parameter's spec. Buffers
// appear at the parameter's first step, as in PyTorch.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, DTensor> buffers;

  // The buffer `name`; throws naming the buffers there are when missing.
  const DTensor& buffer(const std::string& name) const;
  bool has(const std::string& name) const { return buffers.count(name) != 0; }
};

// The base of all optimizers: the parameters, their state and the
// learning rate. Parameters are DTensor copies of the model's, sharing
// their storage and gradient (DTensor copies made after requires_grad_()
// are the same tensor), so step() changes the model's parameters. Make it
// after parallelize_module / fully_shard: they replace the parameters
// (nn::replace_parameter), and an optimizer holding a replaced one throws
// at construction, step() and zero_grad(), naming it, rather than
// skipping it at every step while the model never changes.
class Optimizer {
 public:
  // REQUIRES: every parameter is a leaf that requires grad, of a floating
  // dtype, without Partial placements; names (when given) are distinct.
  Optimizer(std::vector<DTensor> params, double lr);
  Optimizer(std::vector<std::pair<std::string, DTensor>> named_params, double lr);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (the others are
  // skipped, as in PyTorch), in place, with grad mode off. Bumps the
  // version counter of every shard's storage it writes.
  void step();
  // Clears every parameter's gradient (PyTorch's set_to_none=True).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  // The learning rate the first scheduler attached to this optimizer found
  // (PyTorch's group["initial_lr"]); schedulers compute from it.
  std::optional<double> initial_lr() const { return initial_lr_; }
  void set_initial_lr(double lr) { initial_lr_ = lr; }

  size_t size() const { return params_.size(); }
  const std::vector<DTensor>& params() const { return params_; }
  // "" when the parameters were given without names.
  const std::string& name(size_t index) const;
  // The state of parameter `index`, or of the parameter named `name`.
  ParamState& state(size_t index);
  const ParamState& state(size_t index) const;
  ParamState& state(const std::string& name);
  // The buffers a step keeps per parameter ("momentum_buffer"; "exp_avg",
  // "exp_avg_sq"), which a checkpoint makes before the first step so that
  // a fresh optimizer can be loaded into. An optimizer of your own that
  // returns none still has the buffers it made saved after its first step.
  virtual std::vector<std::string> buffer_names() const { return {}; }

 protected:
  // Updates the shards of `param` this process holds. `grad` has the
  // parameter's spec. Called with grad mode off.
  virtual void update(const DTensor& param, const DTensor& grad, ParamState& state) = 0;
  // "SGD", "AdamW": for error messages.
  virtual const char* kind() const = 0;

 private:
  std::vector<DTensor> params_;
  std::vector<std::string> names_;
  std::vector<ParamState> state_;
  double lr_;
  std::optional<double> initial_lr_;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

// Stochastic gradient descent, PyTorch's rule: g = ±grad + wd·p; with
// momentum, buf = g on the first step and buf = momentum·buf +
// (1 - dampening)·g after; g = g + momentum·buf (nesterov) or buf; p -= lr·g.
// REQUIRES: lr, momentum, weight_decay >= 0; nesterov needs momentum > 0
// and dampening 0.
class SGD : public Optimizer {
 public:
  SGD(std::vector<DTensor> params, const SGDOptions& options);
  SGD(std::vector<std::pair<std::string, DTensor>> named_params, const SGDOptions& options);
  const SGDOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override;

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "SGD"; }

 private:
  SGDOptions options_;
};

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  // AdamW's default; Adam's is 0 (Adam sets it unless given).
  std::optional<double> weight_decay = std::nullopt;
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW, PyTorch's rule: p *= 1 - lr·wd (decoupled decay); m = lerp(m, g,
// 1 - β1); v = β2·v + (1 - β2)·g·g; with bias corrections bc1 = 1 - β1^t,
// bc2 = 1 - β2^t: p -= (lr / bc1) · m / (sqrt(v̂) / sqrt(bc2) + eps), v̂ = v
// or (amsgrad) the running max of v. Weight decay defaults to 1e-2.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<DTensor> params, const AdamOptions& options);
  AdamW(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options);
  const AdamOptions& options() const { return options_; }
  double weight_decay() const { return weight_decay_; }
  std::vector<std::string> buffer_names() const override;

 protected:
  // Adam: the same rule with L2 weight decay added to the gradient
  // (g += wd·p) instead of decoupled, default 0.
  AdamW(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options,
        bool decoupled);
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return decoupled_ ? "AdamW" : "Adam"; }

 private:
  AdamOptions options_;
  double weight_decay_;
  bool decoupled_;
};

// Adam (torch.optim.Adam): AdamW's rule with L2 weight decay (default 0)
// added to the gradient instead of decoupled.
class Adam : public AdamW {
 public:
  Adam(std::vector<DTensor> params, const AdamOptions& options);
  Adam(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options);
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};

// Adagrad (torch.optim.Adagrad), PyTorch's rule: g = ±grad + wd·p;
// clr = lr / (1 + (t - 1)·lr_decay); sum = sum + g·g; p = p + (-clr)·g /
// (sqrt(sum) + eps). Its buffer "sum" starts at initial_accumulator_value
// (PyTorch makes it at construction; here at the first step, like the
// other optimizers' buffers). REQUIRES: every option >= 0.
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<DTensor> params, const AdagradOptions& options);
  Adagrad(std::vector<std::pair<std::string, DTensor>> named_params,
          const AdagradOptions& options);
  const AdagradOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override { return {"sum"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "Adagrad"; }

 private:
  AdagradOptions options_;
};

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

// RMSprop (torch.optim.RMSprop), PyTorch's rule: g = ±grad + wd·p;
// square_avg = α·square_avg + (1-α)·g·g; centered: grad_avg = α·grad_avg +
// (1-α)·g and avg = sqrt(square_avg - grad_avg²) + eps, else avg =
// sqrt(square_avg) + eps; with momentum, buf = momentum·buf + g / avg and
// p = p + (-lr)·buf, else p = p + (-lr)·g / avg. Buffers "square_avg",
// "momentum_buffer" (momentum > 0), "grad_avg" (centered).
// REQUIRES: lr, alpha, eps, weight_decay, momentum >= 0.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<DTensor> params, const RMSpropOptions& options);
  RMSprop(std::vector<std::pair<std::string, DTensor>> named_params,
          const RMSpropOptions& options);
  const RMSpropOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override;

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "RMSprop"; }

 private:
  RMSpropOptions options_;
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0;
  bool maximize = false;
};

// Adadelta (torch.optim.Adadelta), PyTorch's rule: g = ±grad + wd·p;
// square_avg = ρ·square_avg + (1-ρ)·g·g; delta = sqrt(acc_delta + eps) /
// sqrt(square_avg + eps) · g; acc_delta = ρ·acc_delta + (1-ρ)·delta²;
// p = p + (-lr)·delta. Buffers "square_avg", "acc_delta".
// REQUIRES: lr, eps, weight_decay >= 0; 0 <= rho <= 1.
class Adadelta : public Optimizer {
 public:
  Adadelta(std::vector<DTensor> params, const AdadeltaOptions& options);
  Adadelta(std::vector<std::pair<std::string, DTensor>> named_params,
           const AdadeltaOptions& options);
  const AdadeltaOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override { return {"square_avg", "acc_delta"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "Adadelta"; }

 private:
  AdadeltaOptions options_;
};

struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool maximize = false;
};

// Adamax (torch.optim.Adamax), PyTorch's rule: g = ±grad + wd·p; exp_avg =
// β1·exp_avg + (1-β1)·g; exp_inf = max(β2·exp_inf, |g| + eps) (NaN wins, as
// torch.amax); p = p + (-lr / (1 - β1^t))·exp_avg / exp_inf. Buffers
// "exp_avg", "exp_inf". REQUIRES: lr, eps, weight_decay >= 0; 0 <= β < 1.
class Adamax : public Optimizer {
 public:
  Adamax(std::vector<DTensor> params, const AdamaxOptions& options);
  Adamax(std::vector<std::pair<std::string, DTensor>> named_params, const AdamaxOptions& options);
  const AdamaxOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_inf"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "Adamax"; }

 private:
  AdamaxOptions options_;
};

struct NAdamOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum_decay = 4e-3;
  // PyTorch 2's options (not in 1.13): AdamW-style decay p *= 1 - lr·wd
  // instead of g += wd·p, and ascent.
  bool decoupled_weight_decay = false;
  bool maximize = false;
};

// NAdam (torch.optim.NAdam), PyTorch's rule: g = ±grad (+ wd·p, or p *= 1 -
// lr·wd when decoupled); μ_t = β1·(1 - ½·0.96^(t·momentum_decay)); Π_t =
// μ_1···μ_t; exp_avg = β1·exp_avg + (1-β1)·g; exp_avg_sq = β2·exp_avg_sq +
// (1-β2)·g·g; denom = sqrt(exp_avg_sq / (1 - β2^t)) + eps;
// p = p + (-lr·(1-μ_t)/(1-Π_t))·g / denom; p = p + (-lr·μ_{t+1}/(1 -
// Π_t·μ_{t+1}))·exp_avg / denom. That last factor is PyTorch 2's (and 1.13's
// foreach path's); 1.13's single-tensor path multiplied μ_t in twice, a bug
// fixed in 2.0. Π_t is recomputed from the step count (in double, in
// PyTorch's order), so it is not part of the state a checkpoint saves;
// PyTorch keeps it as the state tensor "mu_product" (float32 unless the
// default dtype is float64). Buffers "exp_avg", "exp_avg_sq".
// REQUIRES: lr, eps, weight_decay, momentum_decay >= 0; 0 <= β < 1.
class NAdam : public Optimizer {
 public:
  NAdam(std::vector<DTensor> params, const NAdamOptions& options);
  NAdam(std::vector<std::pair<std::string, DTensor>> named_params, const NAdamOptions& options);
  const NAdamOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  // Π_t = μ_1···μ_t of these options (1 for t = 0), multiplied in order
  // from μ_1, as a step computes it.
  double mu_product(int64_t step) const;

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "NAdam"; }

 private:
  NAdamOptions options_;
  // Per parameter (keyed by its state): the step count and Π of its last
  // step, so that the next step multiplies in one μ; a step count set
  // otherwise (a checkpoint load) multiplies from μ_1 again, to the same bits.
  std::map<const ParamState*, std::pair<int64_t, double>> mu_products_;
};

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  // PyTorch 2's options (not in 1.13), as NAdam's.
  bool decoupled_weight_decay = false;
  bool maximize = false;
};

// RAdam (torch.optim.RAdam), PyTorch's rule: g = ±grad (+ wd·p, or p *= 1 -
// lr·wd when decoupled); exp_avg = β1·exp_avg + (1-β1)·g; exp_avg_sq =
// β2·exp_avg_sq + (1-β2)·g·g; m̂ = exp_avg / (1 - β1^t); ρ∞ = 2/(1-β2) - 1,
// ρ_t = ρ∞ - 2t·β2^t / (1 - β2^t); when ρ_t > 5, p = p - m̂·lr·(1 /
// (sqrt(exp_avg_sq) + eps))·sqrt(1 - β2^t)·r_t with the rectification r_t =
// sqrt((ρ_t-4)(ρ_t-2)ρ∞ / ((ρ∞-4)(ρ∞-2)ρ_t)); else p = p - m̂·lr. With the
// default β2 the rectified branch starts at step 6. Buffers "exp_avg",
// "exp_avg_sq". REQUIRES: lr, eps, weight_decay >= 0; 0 <= β < 1.
class RAdam : public Optimizer {
 public:
  RAdam(std::vector<DTensor> params, const RAdamOptions& options);
  RAdam(std::vector<std::pair<std::string, DTensor>> named_params, const RAdamOptions& options);
  const RAdamOptions& options() const { return options_; }
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state) override;
  const char* kind() const override { return "RAdam"; }

 private:
  RAdamOptions options_;
};

// ---- learning-rate schedules ------------------------------------------------------
//
// A scheduler sets its optimizer's lr from the epoch count: the
// constructor sets lr for epoch 0, each step() advances one epoch. Values
// are PyTorch's closed forms (_get_closed_form_lr) of the optimizer's
// initial lr (the lr when the first scheduler was attached), so a chain
// of steps gives exactly lr_at(epoch); PyTorch's own recursive updates
// agree with them up to rounding.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  // Advances one epoch and sets the optimizer's lr.
  void step();
  // The lr set last (PyTorch returns one per param group; there is one).
  double get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  // Resumes at `epoch` (>= 0), as loading PyTorch's state_dict does: sets
  // the optimizer's lr to lr_at(epoch), so the next step() continues the
  // schedule where a checkpoint left it.
  void set_last_epoch(int64_t epoch);
  // The lr of `epoch` (>= 0), from the initial lr.
  virtual double lr_at(int64_t epoch) const = 0;
  double base_lr() const { return base_lr_; }

 protected:
  // Derived constructors call this once their parameters are set.
  void start();

 private:
  Optimizer& optimizer_;
  double base_lr_;
  double last_lr_ = 0;
  int64_t last_epoch_ = 0;
};

// lr = base · lambda(epoch).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  static std::shared_ptr<LambdaLR> make(Optimizer& optimizer,
                                        std::function<double(int64_t)> lr_lambda) {
    return std::make_shared<LambdaLR>(optimizer, std::move(lr_lambda));
  }
  double lr_at(int64_t epoch) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

// lr = base · (start + (end - start) · min(epoch, total_iters) / total_iters):
// the linear warm-up. REQUIRES: 0 < start_factor <= 1, 0 <= end_factor <= 1,
// total_iters >= 1 (PyTorch's checks; defaults are PyTorch's).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);
  static std::shared_ptr<LinearLR> make(Optimizer& optimizer, double start_factor = 1.0 / 3,
                                        double end_factor = 1.0, int64_t total_iters = 5) {
    return std::make_shared<LinearLR>(optimizer, start_factor, end_factor, total_iters);
  }
  double lr_at(int64_t epoch) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// lr = eta_min + (base - eta_min) · (1 + cos(π · epoch / T_max)) / 2.
// REQUIRES: T_max >= 1.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  static std::shared_ptr<CosineAnnealingLR> make(Optimizer& optimizer, int64_t T_max,
                                                 double eta_min = 0) {
    return std::make_shared<CosineAnnealingLR>(optimizer, T_max, eta_min);
  }
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Runs schedulers[i] from milestone i-1 on (epoch counted from there):
// "linear warm-up for 100 epochs, then cosine" is
// SequentialLR(opt, {LinearLR::make(opt, 0.01, 1, 100), CosineAnnealingLR::make(opt, 900)}, {100}).
// REQUIRES: milestones.size() == schedulers.size() - 1, ascending; every
// scheduler drives `optimizer`.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(int64_t epoch) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// ---- gradient clipping ------------------------------------------------------------

// The p-norm (norm_type; INFINITY for the max norm) of all the parameters'
// gradients taken together, and, when it exceeds max_norm, every gradient
// scaled by max_norm / (norm + 1e-6) (PyTorch's clip_coef, clamped to 1).
// Returns the norm before clipping, the same bits on every process of the
// world and in both worlds, whichever meshes the parameters live on.
//
// World-collective: every process of the world calls it with the same
// parameters (gradients on the same ones), those holding no rank of some
// parameter's mesh (or of any) too; it returns one value for them all,
// and they scale their shards by the same coefficient. Costs one
// all_reduce over every rank of the world of a vector of one float64 per
// group of gradients (same mesh, same sharded mesh dims), none when every
// gradient is replicated on a mesh of the whole world.
//
// A gradient on a sub-mesh (mesh["tp"]) counts once: its views must hold
// replicas (data parallelism keeps them so), or it throws, naming the
// views' norms. Parameters without a gradient are skipped. A gradient
// whose placements differ from its parameter's is first redistributed to
// them and written back (as step() would).
// Throws when error_if_nonfinite and the norm is nan or inf.
// REQUIRES: norm_type > 0; every gradient on meshes of one World.
double clip_grad_norm_(const std::vector<DTensor>& params, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// The same norm without clipping (and without writing gradients back).
// World-collective, as clip_grad_norm_.
double total_grad_norm(const std::vector<DTensor>& params, double norm_type = 2.0);

}  // namespace dtensor::optim
