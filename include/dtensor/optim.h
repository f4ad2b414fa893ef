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
// Param groups are PyTorch's: each group of parameters has its own
// hyper-parameters (ParamGroup: the optimizer's options with overrides by
// name), and schedulers set every group's lr from its own initial lr.
//
// Differences from PyTorch:
// - state is reached by index or name (state(i), state("w1")) rather than
//   keyed by the parameter object; the step count is a plain integer;
// - a learning rate is a number (PyTorch also takes a tensor, read at each
//   step); set_lr / set_group_option change it between steps;
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
#include <variant>
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

// A hyper-parameter's value in a param group: a number, a flag or a pair
// (betas).
using OptionValue = std::variant<double, bool, std::pair<double, double>>;
// Hyper-parameters by PyTorch's names ("lr", "weight_decay", "betas", ...).
using GroupOptions = std::map<std::string, OptionValue>;

// Parameters that share hyper-parameters: one of PyTorch's param groups,
// {"params": [...], "weight_decay": 0.0}. `options` override the
// optimizer's defaults (the options struct it is given) for this group;
// a name the optimizer does not have throws, listing those it has.
//
//   optim::AdamW opt({{decay, {}}, {no_decay, {{"weight_decay", 0.0}}}}, {.lr = 3e-4});
struct ParamGroup {
  std::vector<std::pair<std::string, DTensor>> params;  // names may be ""
  GroupOptions options;

  ParamGroup(std::vector<DTensor> params, GroupOptions options = {});
  ParamGroup(std::vector<std::pair<std::string, DTensor>> named_params,
             GroupOptions options = {});
};

// The usual split for training (nanoGPT's and most recipes'): parameters
// of two or more dims (weights of linear and embedding layers) in a first
// group with the optimizer's weight decay, the others (biases, norms'
// scales) in a second group with weight_decay 0. A group left empty is
// left out.
std::vector<ParamGroup> weight_decay_groups(
    const std::vector<std::pair<std::string, DTensor>>& named_params);

// An optimizer's state alone (PyTorch's optimizer.state_dict()): per
// parameter its ParamState, and per param group its hyper-parameters
// ("lr" the current one, "initial_lr" once a scheduler set it) and the
// indices of its parameters.
struct OptimizerStateDict {
  std::vector<ParamState> state;
  std::vector<GroupOptions> param_groups;
  std::vector<std::vector<size_t>> group_params;
};

// The base of all optimizers: the parameters, their state, their param
// groups and each group's learning rate. Parameters are DTensor copies of
// the model's, sharing their storage and gradient (DTensor copies made
// after requires_grad_() are the same tensor), so step() changes the
// model's parameters. Make it after parallelize_module / fully_shard: they
// replace the parameters (nn::replace_parameter), and an optimizer holding
// a replaced one throws at construction, step() and zero_grad(), naming
// it, rather than skipping it at every step while the model never changes.
// Parameters are numbered across groups in order: group 0's first.
class Optimizer {
 public:
  // One group of parameters with learning rate `lr`.
  // REQUIRES: every parameter is a leaf that requires grad, of a floating
  // dtype, without Partial placements; names (when given) are distinct, and
  // no parameter is given twice (in one group or two).
  Optimizer(std::vector<DTensor> params, double lr);
  Optimizer(std::vector<std::pair<std::string, DTensor>> named_params, double lr);
  // Several groups; a group's "lr" option overrides `lr` (its other
  // options are the derived optimizer's to read).
  Optimizer(const std::vector<ParamGroup>& groups, double lr);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (the others are
  // skipped, as in PyTorch), in place, with grad mode off. Bumps the
  // version counter of every shard's storage it writes.
  void step();
  // Clears every parameter's gradient (PyTorch's set_to_none=True).
  void zero_grad();

  size_t num_groups() const { return groups_.size(); }
  // The learning rate of `group`.
  double lr(size_t group) const;
  void set_lr(size_t group, double lr);
  // The learning rate of every group when they all have one; throws,
  // naming them, when groups differ. set_lr(lr) sets every group's.
  double lr() const;
  void set_lr(double lr);
  // The learning rate the first scheduler attached to this optimizer found
  // for `group` (PyTorch's group["initial_lr"]); schedulers compute from it.
  std::optional<double> initial_lr(size_t group = 0) const;
  void set_initial_lr(size_t group, double lr);
  // PyTorch's tensor learning rate: from now on `group`'s lr is the value
  // of `lr` (a floating Tensor of one element, >= 0), read at each step
  // (so writing into it changes the lr), and set_lr (so every scheduler)
  // writes into it in place (fill_), rounded to its dtype as PyTorch's.
  void set_lr_tensor(size_t group, Tensor lr);
  // The group's lr tensor, if it has one.
  std::optional<Tensor> lr_tensor(size_t group) const;
  // Every hyper-parameter of `group` by PyTorch's name, "lr" the current
  // one (PyTorch's param_groups[group] without "params").
  virtual GroupOptions group_options(size_t group) const;
  // Sets one hyper-parameter of `group` from then on, as assigning
  // param_groups[group][name] does in PyTorch; checked as at construction.
  virtual void set_group_option(size_t group, const std::string& name, const OptionValue& value);

  // The state alone: its buffers are the optimizer's own (they alias it,
  // as PyTorch's state_dict() does), the rest copies.
  OptimizerStateDict state_dict() const;
  // Loads a state_dict() of an optimizer of the same kind with the same
  // param groups: step counts, buffers (copied into this optimizer's own
  // when it has them, else copies; redistributed to the parameter's
  // placements when saved with others) and every group's hyper-parameters.
  // Checked entirely before anything changes.
  void load_state_dict(const OptimizerStateDict& state);

  size_t size() const { return params_.size(); }
  const std::vector<DTensor>& params() const { return params_; }
  // "" when the parameters were given without names.
  const std::string& name(size_t index) const;
  // The group of parameter `index`, and the parameters of `group`.
  size_t group_of(size_t index) const;
  const std::vector<size_t>& group_params(size_t group) const;
  // The state of parameter `index`, or of the parameter named `name`.
  ParamState& state(size_t index);
  const ParamState& state(size_t index) const;
  ParamState& state(const std::string& name);
  // The buffers a step keeps per parameter of `group` ("momentum_buffer";
  // "exp_avg", "exp_avg_sq"), which a checkpoint makes before the first
  // step so that a fresh optimizer can be loaded into. An optimizer of your
  // own that returns none still has the buffers it made saved after its
  // first step.
  virtual std::vector<std::string> buffer_names(size_t group) const {
    (void)group;
    return {};
  }

 protected:
  // Updates the shards of `param` (of param group `group`) this process
  // holds. `grad` has the parameter's spec. Called with grad mode off.
  virtual void update(const DTensor& param, const DTensor& grad, ParamState& state,
                      size_t group) = 0;
  // "SGD", "AdamW": for error messages.
  virtual const char* kind() const = 0;
  void check_group(size_t group) const;

 private:
  struct Group {
    std::vector<size_t> params;
    double lr;  // when lr_tensor is set: the value last set through set_lr
    std::optional<double> initial_lr;
    std::optional<Tensor> lr_tensor;
  };
  std::vector<DTensor> params_;
  std::vector<std::string> names_;
  std::vector<ParamState> state_;
  std::vector<size_t> group_of_;
  std::vector<Group> groups_;
};

namespace detail {

// One hyper-parameter of the options struct O, by PyTorch's name.
template <class O>
struct OptionField {
  const char* name;
  std::variant<double O::*, bool O::*, std::pair<double, double> O::*, std::optional<double> O::*>
      member;
};

}  // namespace detail

// The built-in optimizers' common part: their options struct O resolved
// per param group (the optimizer's defaults with the group's overrides).
// O::fields() lists its hyper-parameters by PyTorch's names, "lr" first.
template <class O>
class OptimizerOf : public Optimizer {
 public:
  // The options of `group` as resolved at construction or set since; lr
  // is the group's initial one (lr(group) is the current).
  const O& options(size_t group = 0) const;
  GroupOptions group_options(size_t group) const override;
  void set_group_option(size_t group, const std::string& name, const OptionValue& value) override;

 protected:
  OptimizerOf(const std::vector<ParamGroup>& groups, const O& defaults);
  // Throws when `options` are out of range (each optimizer's REQUIRES).
  virtual void check_options(const O& options) const = 0;
  // Applies each group's overrides to the defaults and checks the result;
  // derived constructors call it once (kind() and check_options() are
  // theirs only once they are built).
  void resolve_options();

 private:
  std::vector<O> group_options_;
  std::vector<GroupOptions> overrides_;  // until resolve_options()
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<SGDOptions>>& fields();
};

// Stochastic gradient descent, PyTorch's rule: g = ±grad + wd·p; with
// momentum, buf = g on the first step and buf = momentum·buf +
// (1 - dampening)·g after; g = g + momentum·buf (nesterov) or buf; p -= lr·g.
// REQUIRES: lr, momentum, weight_decay >= 0; nesterov needs momentum > 0
// and dampening 0.
class SGD : public OptimizerOf<SGDOptions> {
 public:
  SGD(std::vector<DTensor> params, const SGDOptions& options);
  SGD(std::vector<std::pair<std::string, DTensor>> named_params, const SGDOptions& options);
  SGD(const std::vector<ParamGroup>& groups, const SGDOptions& defaults);
  std::vector<std::string> buffer_names(size_t group) const override;

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const SGDOptions& options) const override;
  const char* kind() const override { return "SGD"; }
};

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  // AdamW's default; Adam's is 0 (Adam sets it unless given).
  std::optional<double> weight_decay = std::nullopt;
  bool amsgrad = false;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<AdamOptions>>& fields();
};

// AdamW, PyTorch's rule: p *= 1 - lr·wd (decoupled decay); m = lerp(m, g,
// 1 - β1); v = β2·v + (1 - β2)·g·g; with bias corrections bc1 = 1 - β1^t,
// bc2 = 1 - β2^t: p -= (lr / bc1) · m / (sqrt(v̂) / sqrt(bc2) + eps), v̂ = v
// or (amsgrad) the running max of v. Weight decay defaults to 1e-2.
class AdamW : public OptimizerOf<AdamOptions> {
 public:
  AdamW(std::vector<DTensor> params, const AdamOptions& options);
  AdamW(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options);
  AdamW(const std::vector<ParamGroup>& groups, const AdamOptions& defaults);
  // The weight decay of `group` (its default resolved).
  double weight_decay(size_t group = 0) const { return *options(group).weight_decay; }
  std::vector<std::string> buffer_names(size_t group) const override;

 protected:
  // Adam: the same rule with L2 weight decay added to the gradient
  // (g += wd·p) instead of decoupled, default 0.
  AdamW(const std::vector<ParamGroup>& groups, const AdamOptions& defaults, bool decoupled);
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const AdamOptions& options) const override;
  const char* kind() const override { return decoupled_ ? "AdamW" : "Adam"; }

 private:
  bool decoupled_;
};

// Adam (torch.optim.Adam): AdamW's rule with L2 weight decay (default 0)
// added to the gradient instead of decoupled.
class Adam : public AdamW {
 public:
  Adam(std::vector<DTensor> params, const AdamOptions& options);
  Adam(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options);
  Adam(const std::vector<ParamGroup>& groups, const AdamOptions& defaults);
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<AdagradOptions>>& fields();
};

// Adagrad (torch.optim.Adagrad), PyTorch's rule: g = ±grad + wd·p;
// clr = lr / (1 + (t - 1)·lr_decay); sum = sum + g·g; p = p + (-clr)·g /
// (sqrt(sum) + eps). Its buffer "sum" starts at initial_accumulator_value
// (PyTorch makes it at construction; here at the first step, like the
// other optimizers' buffers). REQUIRES: every option >= 0.
class Adagrad : public OptimizerOf<AdagradOptions> {
 public:
  Adagrad(std::vector<DTensor> params, const AdagradOptions& options);
  Adagrad(std::vector<std::pair<std::string, DTensor>> named_params,
          const AdagradOptions& options);
  Adagrad(const std::vector<ParamGroup>& groups, const AdagradOptions& defaults);
  std::vector<std::string> buffer_names(size_t) const override { return {"sum"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const AdagradOptions& options) const override;
  const char* kind() const override { return "Adagrad"; }
};

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<RMSpropOptions>>& fields();
};

// RMSprop (torch.optim.RMSprop), PyTorch's rule: g = ±grad + wd·p;
// square_avg = α·square_avg + (1-α)·g·g; centered: grad_avg = α·grad_avg +
// (1-α)·g and avg = sqrt(square_avg - grad_avg²) + eps, else avg =
// sqrt(square_avg) + eps; with momentum, buf = momentum·buf + g / avg and
// p = p + (-lr)·buf, else p = p + (-lr)·g / avg. Buffers "square_avg",
// "momentum_buffer" (momentum > 0), "grad_avg" (centered).
// REQUIRES: lr, alpha, eps, weight_decay, momentum >= 0.
class RMSprop : public OptimizerOf<RMSpropOptions> {
 public:
  RMSprop(std::vector<DTensor> params, const RMSpropOptions& options);
  RMSprop(std::vector<std::pair<std::string, DTensor>> named_params,
          const RMSpropOptions& options);
  RMSprop(const std::vector<ParamGroup>& groups, const RMSpropOptions& defaults);
  std::vector<std::string> buffer_names(size_t group) const override;

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const RMSpropOptions& options) const override;
  const char* kind() const override { return "RMSprop"; }
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<AdadeltaOptions>>& fields();
};

// Adadelta (torch.optim.Adadelta), PyTorch's rule: g = ±grad + wd·p;
// square_avg = ρ·square_avg + (1-ρ)·g·g; delta = sqrt(acc_delta + eps) /
// sqrt(square_avg + eps) · g; acc_delta = ρ·acc_delta + (1-ρ)·delta²;
// p = p + (-lr)·delta. Buffers "square_avg", "acc_delta".
// REQUIRES: lr, eps, weight_decay >= 0; 0 <= rho <= 1.
class Adadelta : public OptimizerOf<AdadeltaOptions> {
 public:
  Adadelta(std::vector<DTensor> params, const AdadeltaOptions& options);
  Adadelta(std::vector<std::pair<std::string, DTensor>> named_params,
           const AdadeltaOptions& options);
  Adadelta(const std::vector<ParamGroup>& groups, const AdadeltaOptions& defaults);
  std::vector<std::string> buffer_names(size_t) const override {
    return {"square_avg", "acc_delta"};
  }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const AdadeltaOptions& options) const override;
  const char* kind() const override { return "Adadelta"; }
};

struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<AdamaxOptions>>& fields();
};

// Adamax (torch.optim.Adamax), PyTorch's rule: g = ±grad + wd·p; exp_avg =
// β1·exp_avg + (1-β1)·g; exp_inf = max(β2·exp_inf, |g| + eps) (NaN wins, as
// torch.amax); p = p + (-lr / (1 - β1^t))·exp_avg / exp_inf. Buffers
// "exp_avg", "exp_inf". REQUIRES: lr, eps, weight_decay >= 0; 0 <= β < 1.
class Adamax : public OptimizerOf<AdamaxOptions> {
 public:
  Adamax(std::vector<DTensor> params, const AdamaxOptions& options);
  Adamax(std::vector<std::pair<std::string, DTensor>> named_params, const AdamaxOptions& options);
  Adamax(const std::vector<ParamGroup>& groups, const AdamaxOptions& defaults);
  std::vector<std::string> buffer_names(size_t) const override { return {"exp_avg", "exp_inf"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const AdamaxOptions& options) const override;
  const char* kind() const override { return "Adamax"; }
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

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<NAdamOptions>>& fields();
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
class NAdam : public OptimizerOf<NAdamOptions> {
 public:
  NAdam(std::vector<DTensor> params, const NAdamOptions& options);
  NAdam(std::vector<std::pair<std::string, DTensor>> named_params, const NAdamOptions& options);
  NAdam(const std::vector<ParamGroup>& groups, const NAdamOptions& defaults);
  std::vector<std::string> buffer_names(size_t) const override { return {"exp_avg", "exp_avg_sq"}; }
  // Π_t = μ_1···μ_t of `group`'s options (1 for t = 0), multiplied in
  // order from μ_1, as a step computes it.
  double mu_product(int64_t step, size_t group = 0) const;

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const NAdamOptions& options) const override;
  const char* kind() const override { return "NAdam"; }

 private:
  // Per parameter (keyed by its state): the step count, Π and the (β1,
  // momentum_decay) of its last step, so that the next step multiplies in
  // one μ; a step count set otherwise (a checkpoint load) or changed
  // options multiply from μ_1 again, to the same bits.
  struct MuProduct {
    int64_t step;
    double product, beta1, momentum_decay;
  };
  std::map<const ParamState*, MuProduct> mu_products_;
};

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  // PyTorch 2's options (not in 1.13), as NAdam's.
  bool decoupled_weight_decay = false;
  bool maximize = false;

  // The hyper-parameters by PyTorch's names, for param groups.
  static const std::vector<detail::OptionField<RAdamOptions>>& fields();
};

// RAdam (torch.optim.RAdam), PyTorch's rule: g = ±grad (+ wd·p, or p *= 1 -
// lr·wd when decoupled); exp_avg = β1·exp_avg + (1-β1)·g; exp_avg_sq =
// β2·exp_avg_sq + (1-β2)·g·g; m̂ = exp_avg / (1 - β1^t); ρ∞ = 2/(1-β2) - 1,
// ρ_t = ρ∞ - 2t·β2^t / (1 - β2^t); when ρ_t > 5, p = p - m̂·lr·(1 /
// (sqrt(exp_avg_sq) + eps))·sqrt(1 - β2^t)·r_t with the rectification r_t =
// sqrt((ρ_t-4)(ρ_t-2)ρ∞ / ((ρ∞-4)(ρ∞-2)ρ_t)); else p = p - m̂·lr. With the
// default β2 the rectified branch starts at step 6. Buffers "exp_avg",
// "exp_avg_sq". REQUIRES: lr, eps, weight_decay >= 0; 0 <= β < 1.
class RAdam : public OptimizerOf<RAdamOptions> {
 public:
  RAdam(std::vector<DTensor> params, const RAdamOptions& options);
  RAdam(std::vector<std::pair<std::string, DTensor>> named_params, const RAdamOptions& options);
  RAdam(const std::vector<ParamGroup>& groups, const RAdamOptions& defaults);
  std::vector<std::string> buffer_names(size_t) const override { return {"exp_avg", "exp_avg_sq"}; }

 protected:
  void update(const DTensor& param, const DTensor& grad, ParamState& state,
              size_t group) override;
  void check_options(const RAdamOptions& options) const override;
  const char* kind() const override { return "RAdam"; }
};

// ---- learning-rate schedules ------------------------------------------------------
//
// A scheduler sets its optimizer's lr from the epoch count: the
// constructor sets lr for epoch 0, each step() advances one epoch. Every
// param group gets the schedule of its own initial lr (the group's lr when
// the first scheduler was attached). Values are PyTorch's closed forms
// (_get_closed_form_lr), so a chain of steps gives exactly lr_at(epoch);
// PyTorch's own recursive updates agree with them up to rounding.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  // Advances one epoch and sets the optimizer's lrs.
  void step();
  // The lr set last for group 0, and for every group (PyTorch's list).
  double get_last_lr() const { return last_lrs_.at(0); }
  const std::vector<double>& get_last_lrs() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  // Resumes at `epoch` (>= 0), as loading PyTorch's state_dict does: sets
  // the optimizer's lrs to lr_at(epoch, g), so the next step() continues
  // the schedule where a checkpoint left it.
  void set_last_epoch(int64_t epoch);
  // The lr of `epoch` (>= 0) for group `group`, from its initial lr.
  double lr_at(int64_t epoch, size_t group = 0) const;
  // The schedule itself: the lr at `epoch` of a group whose initial lr is
  // `base_lr`.
  virtual double lr_for(double base_lr, int64_t epoch) const = 0;
  // The initial lr of group 0, and of every group (PyTorch's base_lrs).
  double base_lr() const { return base_lrs_.at(0); }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 protected:
  // Derived constructors call this once their parameters are set.
  void start();

 private:
  void apply(int64_t epoch);
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
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
  double lr_for(double base_lr, int64_t epoch) const override;

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
  double lr_for(double base_lr, int64_t epoch) const override;

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
  double lr_for(double base_lr, int64_t epoch) const override;

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
  double lr_for(double base_lr, int64_t epoch) const override;

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
// Throws when error_if_nonfinite and the norm is nan or inf. In a
// World::shape_only, which has no values, the norm is NaN and the
// gradients are scaled (made anew, as when the norm exceeds max_norm).
// REQUIRES: norm_type > 0; every gradient on meshes of one World.
double clip_grad_norm_(const std::vector<DTensor>& params, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// The same norm without clipping (and without writing gradients back).
// World-collective, as clip_grad_norm_.
double total_grad_norm(const std::vector<DTensor>& params, double norm_type = 2.0);

}  // namespace dtensor::optim
