// The Optimizer base: parameters, state, learning rate, and the gradient
// preparation every step shares (skip missing gradients, bring a gradient
// to its parameter's placements).
#include <set>

#include "dtensor/nn.h"
#include "optim/optim_internal.h"

namespace dtensor::optim {

const DTensor& ParamState::buffer(const std::string& name) const {
  auto it = buffers.find(name);
  if (it == buffers.end()) {
    std::string have;
    for (const auto& [n, b] : buffers) have += (have.empty() ? "" : ", ") + n;
    DT_THROW("optimizer state: no buffer '", name, "' (it has: ", have.empty() ? "none" : have,
             "; buffers appear at a parameter's first step)");
  }
  return it->second;
}

namespace detail {

DTensor zeros_like_param(const DTensor& param) { return full_like_param(param, 0.0); }

DTensor full_like_param(const DTensor& param, double value) {
  LocalTensor local = param.local().map(
      [value](int, const Tensor& t) { return Tensor::full(t.shape(), value, t.dtype()); });
  return DTensor(param.spec(), std::move(local));
}

std::vector<const DTensor*> zero_buffers(const DTensor& param, ParamState& state,
                                         const std::vector<std::string>& names) {
  std::vector<const DTensor*> out;
  out.reserve(names.size());
  for (const std::string& name : names) {
    auto it = state.buffers.find(name);
    if (it == state.buffers.end()) it = state.buffers.emplace(name, zeros_like_param(param)).first;
    out.push_back(&it->second);
  }
  return out;
}

void check_adam_arguments(const char* kind, std::pair<double, double> betas, double eps,
                          double weight_decay) {
  DT_CHECK(eps >= 0, kind, ": expected eps >= 0, got ", eps);
  DT_CHECK(betas.first >= 0 && betas.first < 1, kind, ": expected 0 <= betas.first < 1, got ",
           betas.first);
  DT_CHECK(betas.second >= 0 && betas.second < 1, kind,
           ": expected 0 <= betas.second < 1, got ", betas.second);
  DT_CHECK(weight_decay >= 0, kind, ": expected weight_decay >= 0, got ", weight_decay);
}

// A parameter that parallelize_module or fully_shard replaced in its module
// would otherwise be skipped at every step (it never gets a gradient again):
// training would go on with the model never changing.
void check_current(const char* who, size_t index, const std::string& name, const DTensor& p) {
  const std::optional<std::string> by = nn::superseded_by(p);
  DT_CHECK(!by, who, ": parameter ", index, name.empty() ? "" : " '" + name + "'", " (",
           p.spec().to_string(), ") was replaced in its module by ", *by,
           ", so the optimizer holds a tensor the model no longer reads and would update nothing; "
           "build the optimizer after parallelize_module/fully_shard, from the model's parameters "
           "as they are then");
}

void check_all_current(const char* who, const std::vector<DTensor>& params,
                       const std::vector<std::string>& names) {
  for (size_t i = 0; i < params.size(); ++i) check_current(who, i, names[i], params[i]);
}

std::vector<std::pair<std::string, DTensor>> unnamed(std::vector<DTensor> params) {
  std::vector<std::pair<std::string, DTensor>> out;
  out.reserve(params.size());
  for (DTensor& p : params) out.emplace_back(std::string(), std::move(p));
  return out;
}

}  // namespace detail

Optimizer::Optimizer(std::vector<DTensor> params, double lr)
    : Optimizer(detail::unnamed(std::move(params)), lr) {}

Optimizer::Optimizer(std::vector<std::pair<std::string, DTensor>> named_params, double lr)
    : lr_(lr) {
  DT_CHECK(lr >= 0, "optimizer: expected lr >= 0, got ", lr);
  std::set<std::string> seen;
  for (size_t i = 0; i < named_params.size(); ++i) {
    auto& [name, p] = named_params[i];
    const std::string what = "optimizer: parameter " + std::to_string(i) +
                             (name.empty() ? "" : " '" + name + "'") + " (" +
                             p.spec().to_string() + ")";
    DT_CHECK(is_floating(p.dtype()), what, ": expected a floating dtype, got ", p.dtype());
    // The steps run in the parameter's dtype; a 16-bit one would round every
    // update away (lr * grad below half an ulp of the weight).
    DT_CHECK(!is_half(p.dtype()), what, " is ", p.dtype(), ": the optimizers step float32 or "
             "float64 parameters (master weights); keep the parameters float32 and compute in "
             "16 bits with fully_shard's MixedPrecisionPolicy (param_dtype)");
    DT_CHECK(p.is_leaf() && p.requires_grad(), what,
             ": expected a leaf that requires grad (call requires_grad_() on it first)");
    for (const Placement& pl : p.placements())
      DT_CHECK(!pl.is_partial(), what,
               ": expected Shard/Replicate placements; a Partial parameter has no elementwise "
               "update (redistribute it to Replicate first)");
    DT_CHECK(name.empty() || seen.insert(name).second, "optimizer: parameter name '", name,
             "' given twice");
    detail::check_current("optimizer", i, name, p);
    params_.push_back(std::move(p));
    names_.push_back(std::move(name));
  }
  state_.resize(params_.size());
}

Optimizer::~Optimizer() = default;

void Optimizer::set_lr(double lr) {
  DT_CHECK(lr >= 0, kind(), ": expected lr >= 0, got ", lr);
  lr_ = lr;
}

const std::string& Optimizer::name(size_t index) const {
  DT_CHECK(index < params_.size(), "optimizer: parameter index ", index, " out of range for ",
           params_.size(), " parameters");
  return names_[index];
}

ParamState& Optimizer::state(size_t index) {
  DT_CHECK(index < state_.size(), "optimizer: parameter index ", index, " out of range for ",
           state_.size(), " parameters");
  return state_[index];
}

const ParamState& Optimizer::state(size_t index) const {
  return const_cast<Optimizer*>(this)->state(index);
}

ParamState& Optimizer::state(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (!name.empty() && names_[i] == name) return state_[i];
  DT_THROW("optimizer: no parameter named '", name, "' among ", names_.size(), " parameters");
}

void Optimizer::step() {
  NoGradGuard no_grad;
  // All checked before any is updated.
  detail::check_all_current(kind(), params_, names_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const DTensor& p = params_[i];
    std::optional<DTensor> grad = p.grad();
    if (!grad) continue;  // PyTorch skips parameters without a gradient
    DT_CHECK(grad->dtype() == p.dtype(), kind(), ": parameter ", i, " is ", p.dtype(),
             " but its gradient is ", grad->dtype());
    if (grad->placements() != p.placements()) {
      // The reduction data parallelism needs (Partial(sum) -> Replicate),
      // or any other move to the parameter's layout; kept as the gradient
      // so that a second reader (clip, another step) does not redo it.
      grad = grad->redistribute(p.placements());
      params_[i].set_grad(*grad);
    }
    update(p, *grad, state_[i]);
  }
}

void Optimizer::zero_grad() {
  detail::check_all_current(kind(), params_, names_);
  for (DTensor& p : params_) p.zero_grad();
}

}  // namespace dtensor::optim
