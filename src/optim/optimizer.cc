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
      [value](int, const Tensor& t) { return t.new_full(t.shape(), value, t.dtype()); });
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
  DT_CHECK(betas.second >= 0 && betas.second < 1, kind, ": expected 0 <= betas.second < 1, got ",
           betas.second);
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

ParamGroup::ParamGroup(std::vector<DTensor> params, GroupOptions options)
    : params(detail::unnamed(std::move(params))), options(std::move(options)) {}

ParamGroup::ParamGroup(std::vector<std::pair<std::string, DTensor>> named_params,
                       GroupOptions options)
    : params(std::move(named_params)), options(std::move(options)) {}

std::vector<ParamGroup> weight_decay_groups(
    const std::vector<std::pair<std::string, DTensor>>& named_params) {
  std::vector<std::pair<std::string, DTensor>> decay, no_decay;
  for (const auto& [name, p] : named_params)
    (p.dim() >= 2 ? decay : no_decay).emplace_back(name, p);
  std::vector<ParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(std::move(decay));
  if (!no_decay.empty())
    groups.emplace_back(std::move(no_decay), GroupOptions{{"weight_decay", 0.0}});
  return groups;
}

Optimizer::Optimizer(std::vector<DTensor> params, double lr)
    : Optimizer(std::vector<ParamGroup>{ParamGroup(std::move(params))}, lr) {}

Optimizer::Optimizer(std::vector<std::pair<std::string, DTensor>> named_params, double lr)
    : Optimizer(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, lr) {}

Optimizer::Optimizer(const std::vector<ParamGroup>& groups, double lr) {
  DT_CHECK(!groups.empty(), "optimizer: expected at least one param group, got none");
  std::set<std::string> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    double group_lr = lr;
    if (auto it = groups[g].options.find("lr"); it != groups[g].options.end()) {
      const double* v = std::get_if<double>(&it->second);
      DT_CHECK(v != nullptr, "optimizer: param group ", g, "'s 'lr' must be a number");
      group_lr = *v;
    }
    DT_CHECK(group_lr >= 0, "optimizer: expected lr >= 0, got ", group_lr,
             groups.size() > 1 ? " in param group " + std::to_string(g) : "");
    groups_.push_back(Group{{}, group_lr, std::nullopt, std::nullopt});
    for (const auto& [name, p] : groups[g].params) {
      const size_t i = params_.size();
      const std::string what = "optimizer: parameter " + std::to_string(i) +
                               (name.empty() ? "" : " '" + name + "'") + " (" +
                               p.spec().to_string() + ")";
      DT_CHECK(is_floating(p.dtype()), what, ": expected a floating dtype, got ", p.dtype());
      // The steps run in the parameter's dtype; a 16-bit one would round every
      // update away (lr * grad below half an ulp of the weight).
      DT_CHECK(!is_half(p.dtype()), what, " is ", p.dtype(),
               ": the optimizers step float32 or "
               "float64 parameters (master weights); keep the parameters float32 and compute in "
               "16 bits with fully_shard's MixedPrecisionPolicy (param_dtype)");
      DT_CHECK(p.is_leaf() && p.requires_grad(), what,
               ": expected a leaf that requires grad (call requires_grad_() on it first)");
      for (const Placement& pl : p.placements())
        DT_CHECK(!pl.is_partial(), what,
                 ": expected Shard/Replicate placements; a Partial parameter has no elementwise "
                 "update (redistribute it to Replicate first)");
      // PyTorch's "some parameters appear in more than one parameter group":
      // a parameter given twice would be stepped twice.
      for (size_t j = 0; j < i; ++j)
        DT_CHECK(!params_[j].is_same(p), what, " is parameter ", j, " again (in param group ",
                 group_of_[j], "); give each parameter once");
      DT_CHECK(name.empty() || seen.insert(name).second, "optimizer: parameter name '", name,
               "' given twice");
      detail::check_current("optimizer", i, name, p);
      params_.push_back(p);
      names_.push_back(name);
      group_of_.push_back(g);
      groups_.back().params.push_back(i);
    }
  }
  state_.resize(params_.size());
}

Optimizer::~Optimizer() = default;

void Optimizer::check_group(size_t group) const {
  DT_CHECK(group < groups_.size(), kind(), ": param group ", group, " out of range for ",
           groups_.size(), " groups");
}

double Optimizer::lr(size_t group) const {
  check_group(group);
  const Group& g = groups_[group];
  if (!g.lr_tensor) return g.lr;
  const double lr = g.lr_tensor->item<double>();
  DT_CHECK(lr >= 0, kind(), ": the lr tensor of param group ", group, " holds ", lr,
           "; expected lr >= 0");
  return lr;
}

void Optimizer::set_lr(size_t group, double lr) {
  check_group(group);
  DT_CHECK(lr >= 0, kind(), ": expected lr >= 0, got ", lr);
  groups_[group].lr = lr;
  if (groups_[group].lr_tensor) groups_[group].lr_tensor->fill_(lr);
}

double Optimizer::lr() const {
  const double first = lr(0);
  for (size_t g = 1; g < groups_.size(); ++g)
    if (lr(g) != first) {
      std::string lrs;
      for (size_t h = 0; h < groups_.size(); ++h)
        lrs += (lrs.empty() ? "" : ", ") + std::to_string(lr(h));
      DT_THROW(kind(), ": the param groups have different learning rates (", lrs,
               "); ask for one group's, lr(group)");
    }
  return first;
}

void Optimizer::set_lr(double lr) {
  DT_CHECK(lr >= 0, kind(), ": expected lr >= 0, got ", lr);
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

void Optimizer::set_lr_tensor(size_t group, Tensor lr) {
  check_group(group);
  DT_CHECK(lr.defined() && lr.numel() == 1 && is_floating(lr.dtype()), kind(),
           ": an lr tensor must be floating with one element, got ",
           lr.defined() ? dtype_short_name(lr.dtype()) : "an undefined tensor", " of shape ",
           lr.defined() ? lr.shape() : Shape{});
  const double value = lr.item<double>();
  DT_CHECK(value >= 0, kind(), ": expected lr >= 0, got an lr tensor holding ", value);
  groups_[group].lr = value;
  groups_[group].lr_tensor = std::move(lr);
}

std::optional<Tensor> Optimizer::lr_tensor(size_t group) const {
  check_group(group);
  return groups_[group].lr_tensor;
}

std::optional<double> Optimizer::initial_lr(size_t group) const {
  check_group(group);
  return groups_[group].initial_lr;
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  check_group(group);
  groups_[group].initial_lr = lr;
}

GroupOptions Optimizer::group_options(size_t group) const { return {{"lr", lr(group)}}; }

void Optimizer::set_group_option(size_t group, const std::string& name, const OptionValue& value) {
  const double* v = std::get_if<double>(&value);
  DT_CHECK(name == "lr", kind(), ": no hyper-parameter '", name, "' (it has: lr)");
  DT_CHECK(v != nullptr, kind(), ": 'lr' must be a number");
  set_lr(group, *v);
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict out;
  out.state = state_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupOptions options = group_options(g);
    if (groups_[g].initial_lr) options["initial_lr"] = *groups_[g].initial_lr;
    out.param_groups.push_back(std::move(options));
    out.group_params.push_back(groups_[g].params);
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd) {
  DT_CHECK(sd.state.size() == params_.size(), kind(), "::load_state_dict: the state has ",
           sd.state.size(), " parameters, the optimizer ", params_.size());
  DT_CHECK(sd.param_groups.size() == groups_.size() && sd.group_params.size() == groups_.size(),
           kind(), "::load_state_dict: the state has ", sd.param_groups.size(),
           " param groups, the optimizer ", groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g)
    DT_CHECK(sd.group_params[g] == groups_[g].params, kind(), "::load_state_dict: param group ",
             g, " holds other parameters in the state than in the optimizer (",
             sd.group_params[g].size(), " against ", groups_[g].params.size(), ")");
  for (size_t i = 0; i < params_.size(); ++i) {
    const DTensor& p = params_[i];
    DT_CHECK(sd.state[i].step >= 0, kind(), "::load_state_dict: parameter ", i,
             "'s step is negative: ", sd.state[i].step);
    for (const auto& [name, b] : sd.state[i].buffers)
      DT_CHECK(b.shape() == p.shape() && b.dtype() == p.dtype() && b.mesh() == p.mesh(), kind(),
               "::load_state_dict: parameter ", i, "'s buffer '", name, "' is ", b.spec(),
               ", expected the parameter's shape, dtype and mesh (", p.spec(), ")");
  }
  // Hyper-parameters: each is checked as it is set; on a refusal the
  // groups go back to what they were.
  std::vector<GroupOptions> before;
  std::vector<std::optional<double>> before_initial;
  for (size_t g = 0; g < groups_.size(); ++g) {
    before.push_back(group_options(g));
    before_initial.push_back(groups_[g].initial_lr);
  }
  try {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (const auto& [name, value] : sd.param_groups[g]) {
        if (name == "initial_lr") {
          const double* v = std::get_if<double>(&value);
          DT_CHECK(v != nullptr, kind(), "::load_state_dict: 'initial_lr' must be a number");
          groups_[g].initial_lr = *v;
        } else {
          set_group_option(g, name, value);
        }
      }
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (const auto& [name, value] : before[g]) set_group_option(g, name, value);
      groups_[g].initial_lr = before_initial[g];
    }
    throw;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& mine = state_[i];
    const ParamState& theirs = sd.state[i];
    mine.step = theirs.step;
    std::map<std::string, DTensor> buffers;
    for (const auto& [name, b] : theirs.buffers) {
      const DTensor laid =
          b.placements() == params_[i].placements() ? b : b.redistribute(params_[i].placements());
      auto it = mine.buffers.find(name);
      if (it != mine.buffers.end() && it->second.spec() == params_[i].spec()) {
        if (!it->second.same_shards(laid)) it->second.copy_(laid);
        buffers.emplace(name, it->second);
      } else {
        buffers.emplace(name, laid.clone());
      }
    }
    mine.buffers = std::move(buffers);
  }
}

size_t Optimizer::group_of(size_t index) const {
  DT_CHECK(index < params_.size(), "optimizer: parameter index ", index, " out of range for ",
           params_.size(), " parameters");
  return group_of_[index];
}

const std::vector<size_t>& Optimizer::group_params(size_t group) const {
  check_group(group);
  return groups_[group].params;
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
    update(p, *grad, state_[i], group_of_[i]);
  }
}

void Optimizer::zero_grad() {
  detail::check_all_current(kind(), params_, names_);
  for (DTensor& p : params_) p.zero_grad();
}

}  // namespace dtensor::optim
