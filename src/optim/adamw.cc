// Adam and AdamW: PyTorch's single-tensor rule, one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct AdamScalars {
  detail::DecayedGradient<T> gradient;
  T lerp_weight;  // 1 - beta1
  T beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps;
  bool amsgrad;
};

// PyTorch's order: g = ±grad; p = p*(1-lr*wd) (AdamW) or g = g + wd*p
// (Adam); m = lerp(m, g, 1-β1) (PyTorch's two-sided lerp); v = v*β2 +
// (1-β2)*g*g; v̂ = max(v̂, v) (amsgrad); denom = sqrt(v̂)/sqrt(bc2) + eps;
// p = p + (-lr/bc1)*m / denom.
template <class T>
void adam_kernel(T* __restrict p, T* __restrict m, T* __restrict v, T* __restrict vmax,
                 const T* __restrict grad, int64_t n, const AdamScalars<T>& s) {
  const T w = s.lerp_weight;
  const bool low = std::abs(w) < T(0.5);
  const T one_minus_w = T(1) - w;
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    const T g = s.gradient(grad[i], pi);
    const T mi = low ? m[i] + w * (g - m[i]) : g - (g - m[i]) * one_minus_w;
    m[i] = mi;
    T vi = v[i] * s.beta2;
    vi = vi + s.one_minus_beta2 * g * g;
    v[i] = vi;
    if (s.amsgrad) {
      vi = vmax[i] < vi ? vi : vmax[i];
      vmax[i] = vi;
    }
    const T denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    p[i] = pi + s.neg_step_size * mi / denom;
  }
}

}  // namespace

const std::vector<detail::OptionField<AdamOptions>>& AdamOptions::fields() {
  using O = AdamOptions;
  static const std::vector<detail::OptionField<O>> f{
      {"lr", &O::lr},           {"betas", &O::betas},
      {"eps", &O::eps},         {"weight_decay", &O::weight_decay},
      {"amsgrad", &O::amsgrad}, {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<AdamOptions>;

namespace {

// The defaults with weight_decay resolved: AdamW's 1e-2 or Adam's 0 unless given.
AdamOptions with_weight_decay(AdamOptions o, bool decoupled) {
  o.weight_decay = o.weight_decay.value_or(decoupled ? 1e-2 : 0.0);
  return o;
}

}  // namespace

AdamW::AdamW(std::vector<DTensor> params, const AdamOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options, true) {}

AdamW::AdamW(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options, true) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, const AdamOptions& defaults)
    : AdamW(groups, defaults, true) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, const AdamOptions& defaults, bool decoupled)
    : OptimizerOf(groups, with_weight_decay(defaults, decoupled)), decoupled_(decoupled) {
  resolve_options();
}

void AdamW::check_options(const AdamOptions& o) const {
  detail::check_adam_arguments(kind(), o.betas, o.eps, *o.weight_decay);
}

void AdamW::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const AdamOptions& o = options(group);
  const std::vector<const DTensor*> buffers =
      detail::zero_buffers(param, state, buffer_names(group));
  const int64_t step = ++state.step;
  const double lr = this->lr(group);
  const auto [beta1, beta2] = o.betas;
  // Python floats in PyTorch: computed in double, cast by the kernels.
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  const double step_size = lr / bias_correction1;
  const double bc2_sqrt = std::sqrt(bias_correction2);
  auto run = [&]<class T>() {
    AdamScalars<T> s{detail::DecayedGradient<T>::make(lr, *o.weight_decay, decoupled_, o.maximize),
                     static_cast<T>(1 - beta1),
                     static_cast<T>(beta2),
                     static_cast<T>(1 - beta2),
                     static_cast<T>(-step_size),
                     static_cast<T>(bc2_sqrt),
                     static_cast<T>(o.eps),
                     o.amsgrad};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          T* const amax = s.amsgrad ? w[3].data_ptr<T>() + lo : nullptr;
          adam_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo, w[2].data_ptr<T>() + lo,
                         amax, g.data_ptr<T>() + lo, hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

Adam::Adam(std::vector<DTensor> params, const AdamOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options, false) {}

Adam::Adam(std::vector<std::pair<std::string, DTensor>> named_params, const AdamOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options, false) {}

Adam::Adam(const std::vector<ParamGroup>& groups, const AdamOptions& defaults)
    : AdamW(groups, defaults, false) {}

std::vector<std::string> AdamW::buffer_names(size_t group) const {
  if (options(group).amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

}  // namespace dtensor::optim
