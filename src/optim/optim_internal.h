// Shared by the optimizers of src/optim/: the walk over a parameter's held
// shards that hands a kernel contiguous memory and accounts for the writes.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "dtensor/debug.h"
#include "dtensor/optim.h"
#include "world/shard_map.h"

namespace dtensor::optim::detail {

// A buffer of `param`'s spec filled with zeros / with `value` (each held
// rank its own).
DTensor zeros_like_param(const DTensor& param);
DTensor full_like_param(const DTensor& param, double value);

// The buffers `names` of `state` in that order, each made with zeros
// (zeros_like_param) if the parameter has not stepped with it yet.
std::vector<const DTensor*> zero_buffers(const DTensor& param, ParamState& state,
                                         const std::vector<std::string>& names);

// The gradient of the Adam family's step, PyTorch's: g = ±grad, then
// decoupled weight decay on the parameter (AdamW's p = p*(1 - lr*wd)) or L2
// on the gradient (g = g + wd*p).
template <class T>
struct DecayedGradient {
  T factor;  // 1 - lr*wd (decoupled) or wd (L2)
  bool use_decay, decoupled, maximize;

  static DecayedGradient make(double lr, double weight_decay, bool decoupled, bool maximize) {
    return {static_cast<T>(decoupled ? 1 - lr * weight_decay : weight_decay), weight_decay != 0,
            decoupled, maximize};
  }
  // g for `grad`, decaying `p` in place when decoupled.
  T operator()(T grad, T& p) const {
    T g = maximize ? -grad : grad;
    if (use_decay) {
      if (decoupled)
        p = p * factor;
      else
        g = g + factor * p;
    }
    return g;
  }
};

// The argument checks of the Adam family (PyTorch's, its messages naming
// `kind`): eps >= 0, 0 <= betas < 1, weight_decay >= 0.
void check_adam_arguments(const char* kind, std::pair<double, double> betas, double eps,
                          double weight_decay);

// For every shard this process holds: f(written, grad) where written[0] is
// the parameter's shard and written[1..] the buffers' shards of that rank,
// all contiguous, and grad the gradient's shard (contiguous, read only).
// A non-contiguous shard is updated through a contiguous copy written back
// with copy_; every written shard's storage has its version bumped once.
// The shards of a simulated world are updated in parallel (each rank's
// update touches only that rank's memory); f may split its own elementwise
// work with parallel_elements, which runs inline inside the shard loop.
template <class F>
void for_each_shard(const DTensor& param, const DTensor& grad,
                    const std::vector<const DTensor*>& buffers, F&& f) {
  const auto& shards = param.local().shards();
  const int64_t n = static_cast<int64_t>(shards.size());
  if (n > 0 && shards[0].second.is_meta()) {
    // A shape-only world updates nothing; its estimate of the step's time
    // takes the update as memory-bound: the parameter and buffers read and
    // written, the gradient read, a few FLOPs per element.
    int64_t most = 0;
    for (const auto& [rank, p] : shards) most = std::max<int64_t>(most, p.numel());
    const int64_t isz = static_cast<int64_t>(itemsize(param.dtype()));
    trace_op("optimizer step", 10.0 * static_cast<double>(most),
             most * isz * (2 * static_cast<int64_t>(buffers.size() + 1) + 1), param.dtype());
    return;
  }
  auto update = [&](int64_t begin, int64_t end) {
    std::vector<Tensor> targets, work;
    for (int64_t i = begin; i < end; ++i) {
      const auto& [rank, p] = shards[i];
      targets.clear();
      work.clear();
      targets.push_back(p);
      for (const DTensor* b : buffers) targets.push_back(b->to_local(rank));
      for (const Tensor& t : targets) work.push_back(t.is_contiguous() ? t : t.contiguous());
      const Tensor g = grad.to_local(rank).contiguous();
      f(work, g);
      for (size_t k = 0; k < targets.size(); ++k) {
        if (work[k].storage() != targets[k].storage())
          targets[k].copy_(work[k]);  // bumps the version itself
        else
          targets[k].storage()->bump_version();
      }
    }
  };
  const int64_t bytes = n == 0 ? 0 : static_cast<int64_t>(shards[0].second.nbytes());
  dtensor::detail::parallel_items(n, bytes * n * static_cast<int64_t>(buffers.size() + 2), update);
}

// kernel(begin, end) over [0, n) elements, split over the process's threads
// in fixed blocks (an elementwise update gives the same bits either way).
template <class K>
void parallel_elements(int64_t n, K&& kernel) {
  dtensor::detail::parallel_for(n, int64_t{1} << 15, kernel);
}

// The update loop of every optimizer: for each shard this process holds
// that is not empty, f(written, grad, lo, hi) over the blocks [lo, hi) of
// its elements (for_each_shard's `written` and `grad`, split by
// parallel_elements).
template <class F>
void for_each_element_block(const DTensor& param, const DTensor& grad,
                            const std::vector<const DTensor*>& buffers, F&& f) {
  for_each_shard(param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g) {
    const int64_t n = w[0].numel();
    if (n == 0) return;
    parallel_elements(n, [&](int64_t lo, int64_t hi) { f(w, g, lo, hi); });
  });
}

// f.template operator()<T>() with T the parameter's element type: double or
// float (the Optimizer base refuses other dtypes).
template <class F>
void with_param_type(const DTensor& param, F&& f) {
  if (param.dtype() == DType::Float64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

// Throws, naming `who`, the parameter and what replaced it, when `p` was
// replaced in its module (nn::replace_parameter) after it was taken.
void check_current(const char* who, size_t index, const std::string& name, const DTensor& p);
// check_current for every parameter (names[i] is params[i]'s, "" if none).
void check_all_current(const char* who, const std::vector<DTensor>& params,
                       const std::vector<std::string>& names);

// Names to give unnamed parameters ("" each).
std::vector<std::pair<std::string, DTensor>> unnamed(std::vector<DTensor> params);

// The names of O's fields, for messages: "lr, momentum, ...".
template <class O>
std::string field_names() {
  std::string names;
  for (const OptionField<O>& f : O::fields())
    names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

// Sets field `name` of `o` to `value`; throws naming `kind` when O has no
// such field or `value` is of another type.
template <class O>
void set_field(const char* kind, O& o, const std::string& name, const OptionValue& value) {
  for (const OptionField<O>& f : O::fields()) {
    if (name != f.name) continue;
    const bool ok = std::visit(
        [&](auto member) {
          using M = std::remove_reference_t<decltype(o.*member)>;
          if constexpr (std::is_same_v<M, std::optional<double>>) {
            if (const double* v = std::get_if<double>(&value)) return o.*member = *v, true;
          } else if (const M* v = std::get_if<M>(&value)) {
            return o.*member = *v, true;
          }
          return false;
        },
        f.member);
    DT_CHECK(ok, kind, ": hyper-parameter '", name, "' must be ",
             std::holds_alternative<bool O::*>(f.member) ? "a flag"
             : std::holds_alternative<std::pair<double, double> O::*>(f.member)
                 ? "a pair of numbers"
                 : "a number");
    return;
  }
  DT_THROW(kind, ": no hyper-parameter '", name, "' (it has: ", field_names<O>(), ")");
}

}  // namespace dtensor::optim::detail

namespace dtensor::optim {

// OptimizerOf's members, instantiated in each optimizer's file
// (`template class OptimizerOf<SGDOptions>;`).
template <class O>
OptimizerOf<O>::OptimizerOf(const std::vector<ParamGroup>& groups, const O& defaults)
    : Optimizer(groups, defaults.lr) {
  for (const ParamGroup& g : groups) overrides_.push_back(g.options);
  group_options_.assign(groups.size(), defaults);
}

template <class O>
void OptimizerOf<O>::resolve_options() {
  for (size_t g = 0; g < group_options_.size(); ++g) {
    O& o = group_options_[g];
    for (const auto& [name, value] : overrides_[g]) detail::set_field(kind(), o, name, value);
    o.lr = lr(g);
    check_options(o);
  }
  overrides_.clear();
}

template <class O>
const O& OptimizerOf<O>::options(size_t group) const {
  check_group(group);
  return group_options_[group];
}

template <class O>
GroupOptions OptimizerOf<O>::group_options(size_t group) const {
  const O& o = options(group);
  GroupOptions out;
  for (const detail::OptionField<O>& f : O::fields())
    std::visit(
        [&](auto member) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.*member)>,
                                       std::optional<double>>)
            out[f.name] = *(o.*member);
          else
            out[f.name] = o.*member;
        },
        f.member);
  out["lr"] = lr(group);
  return out;
}

template <class O>
void OptimizerOf<O>::set_group_option(size_t group, const std::string& name,
                                      const OptionValue& value) {
  check_group(group);
  O o = group_options_[group];
  detail::set_field(kind(), o, name, value);
  if (name == "lr") {
    Optimizer::set_group_option(group, name, value);
    return;  // the options keep the group's initial lr
  }
  check_options(o);
  group_options_[group] = o;
}

}  // namespace dtensor::optim
