// RAdam: PyTorch's single-tensor rule, one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct RadamScalars {
  detail::DecayedGradient<T> gradient;
  T beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction1, lr, eps, bc2_sqrt, rect;
  bool rectified;
};

// PyTorch's order (torch/optim/radam.py, _single_tensor_radam, and ATen's
// kernels): g = ±grad; p = p*(1 - lr*wd) (decoupled) or g = g + wd*p; m =
// m*β1 + (1-β1)*g; v = v*β2 + (1-β2)*g*g; m̂ = m / bc1; rectified: a =
// (1 / (sqrt(v) + eps)) * sqrt(bc2) (Python's `float / tensor` is
// reciprocal() * float), p = p + (-1)*(((m̂*lr)*a)*rect); else p = p +
// (-1)*(m̂*lr).
template <class T>
void radam_kernel(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict grad,
                  int64_t n, const RadamScalars<T>& s) {
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    const T g = s.gradient(grad[i], pi);
    const T mi = m[i] * s.beta1 + s.one_minus_beta1 * g;
    m[i] = mi;
    const T vi = v[i] * s.beta2 + s.one_minus_beta2 * g * g;
    v[i] = vi;
    T u = mi / s.bias_correction1 * s.lr;
    if (s.rectified) {
      const T adaptive = T(1) / (std::sqrt(vi) + s.eps) * s.bc2_sqrt;
      u = u * adaptive * s.rect;
    }
    p[i] = pi + T(-1) * u;
  }
}

}  // namespace

const std::vector<detail::OptionField<RAdamOptions>>& RAdamOptions::fields() {
  using O = RAdamOptions;
  static const std::vector<detail::OptionField<O>> f{
      {"lr", &O::lr},
      {"betas", &O::betas},
      {"eps", &O::eps},
      {"weight_decay", &O::weight_decay},
      {"decoupled_weight_decay", &O::decoupled_weight_decay},
      {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<RAdamOptions>;

RAdam::RAdam(std::vector<DTensor> params, const RAdamOptions& options)
    : RAdam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

RAdam::RAdam(std::vector<std::pair<std::string, DTensor>> named_params, const RAdamOptions& options)
    : RAdam(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

RAdam::RAdam(const std::vector<ParamGroup>& groups, const RAdamOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void RAdam::check_options(const RAdamOptions& o) const {
  detail::check_adam_arguments("RAdam", o.betas, o.eps, o.weight_decay);
}

void RAdam::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const RAdamOptions& o = options(group);
  const std::vector<const DTensor*> buffers =
      detail::zero_buffers(param, state, buffer_names(group));
  const int64_t step = ++state.step;
  const auto [beta1, beta2] = o.betas;
  const double lr = this->lr(group);
  const double t = static_cast<double>(step);
  // Python floats in PyTorch: computed in double, cast by the kernel.
  const double bias_correction1 = 1 - std::pow(beta1, t);
  const double bias_correction2 = 1 - std::pow(beta2, t);
  // The length of the approximated simple moving average, and its limit.
  const double rho_inf = 2 / (1 - beta2) - 1;
  const double rho_t = rho_inf - 2 * t * std::pow(beta2, t) / bias_correction2;
  const bool rectified = rho_t > 5.;
  const double rect =
      rectified
          ? std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
          : 0.0;
  auto run = [&]<class T>() {
    const RadamScalars<T> s{
        detail::DecayedGradient<T>::make(lr, o.weight_decay, o.decoupled_weight_decay, o.maximize),
        static_cast<T>(beta1),
        static_cast<T>(1 - beta1),
        static_cast<T>(beta2),
        static_cast<T>(1 - beta2),
        static_cast<T>(bias_correction1),
        static_cast<T>(lr),
        static_cast<T>(o.eps),
        static_cast<T>(std::sqrt(bias_correction2)),
        static_cast<T>(rect),
        rectified};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          radam_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo, w[2].data_ptr<T>() + lo,
                          g.data_ptr<T>() + lo, hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

}  // namespace dtensor::optim
