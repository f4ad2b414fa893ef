// NAdam: PyTorch's single-tensor rule (with PyTorch 2's μ_{t+1} factor),
// one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct NadamScalars {
  detail::DecayedGradient<T> gradient;
  T beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2, eps, grad_step, avg_step;
};

// PyTorch's order (torch/optim/nadam.py, _single_tensor_nadam, and ATen's
// mul/add/addcmul/div/addcdiv kernels): g = ±grad; p = p*(1 - lr*wd)
// (decoupled) or g = g + wd*p; m = m*β1 + (1-β1)*g; v = v*β2 + (1-β2)*g*g;
// denom = sqrt(v / bc2) + eps; p = p + grad_step*g / denom; p = p +
// avg_step*m / denom.
template <class T>
void nadam_kernel(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict grad,
                  int64_t n, const NadamScalars<T>& s) {
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    const T g = s.gradient(grad[i], pi);
    const T mi = m[i] * s.beta1 + s.one_minus_beta1 * g;
    m[i] = mi;
    const T vi = v[i] * s.beta2 + s.one_minus_beta2 * g * g;
    v[i] = vi;
    const T denom = std::sqrt(vi / s.bias_correction2) + s.eps;
    pi = pi + s.grad_step * g / denom;
    p[i] = pi + s.avg_step * mi / denom;
  }
}

}  // namespace

const std::vector<detail::OptionField<NAdamOptions>>& NAdamOptions::fields() {
  using O = NAdamOptions;
  static const std::vector<detail::OptionField<O>> f{
      {"lr", &O::lr},
      {"betas", &O::betas},
      {"eps", &O::eps},
      {"weight_decay", &O::weight_decay},
      {"momentum_decay", &O::momentum_decay},
      {"decoupled_weight_decay", &O::decoupled_weight_decay},
      {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<NAdamOptions>;

NAdam::NAdam(std::vector<DTensor> params, const NAdamOptions& options)
    : NAdam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

NAdam::NAdam(std::vector<std::pair<std::string, DTensor>> named_params, const NAdamOptions& options)
    : NAdam(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

NAdam::NAdam(const std::vector<ParamGroup>& groups, const NAdamOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void NAdam::check_options(const NAdamOptions& o) const {
  detail::check_adam_arguments("NAdam", o.betas, o.eps, o.weight_decay);
  DT_CHECK(o.momentum_decay >= 0, "NAdam: expected momentum_decay >= 0, got ", o.momentum_decay);
}

namespace {

// μ_t of PyTorch's NAdam: β1·(1 - ½·0.96^(t·momentum_decay)), t a float.
double nadam_mu(const NAdamOptions& o, int64_t step) {
  return o.betas.first * (1. - 0.5 * std::pow(0.96, static_cast<double>(step) * o.momentum_decay));
}

}  // namespace

double NAdam::mu_product(int64_t step, size_t group) const {
  DT_CHECK(step >= 0, "NAdam::mu_product: expected a step count >= 0, got ", step);
  const NAdamOptions& o = options(group);
  double product = 1.0;
  for (int64_t t = 1; t <= step; ++t) product *= nadam_mu(o, t);
  return product;
}

void NAdam::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const NAdamOptions& o = options(group);
  const std::vector<const DTensor*> buffers =
      detail::zero_buffers(param, state, buffer_names(group));
  const int64_t step = ++state.step;
  const auto [beta1, beta2] = o.betas;
  const double lr = this->lr(group);
  // Python floats in PyTorch: computed in double, cast by the kernel.
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  const double mu = nadam_mu(o, step);
  const double mu_next = nadam_mu(o, step + 1);
  const auto cached = mu_products_.find(&state);
  const bool next = cached != mu_products_.end() && cached->second.step == step - 1 &&
                    cached->second.beta1 == beta1 &&
                    cached->second.momentum_decay == o.momentum_decay;
  const double product = next ? cached->second.product * mu : mu_product(step, group);
  mu_products_[&state] = {step, product, beta1, o.momentum_decay};
  const double grad_step = -lr * (1. - mu) / (1. - product);
  const double avg_step = -lr * mu_next / (1. - product * mu_next);
  auto run = [&]<class T>() {
    const NadamScalars<T> s{
        detail::DecayedGradient<T>::make(lr, o.weight_decay, o.decoupled_weight_decay, o.maximize),
        static_cast<T>(beta1),
        static_cast<T>(1 - beta1),
        static_cast<T>(beta2),
        static_cast<T>(1 - beta2),
        static_cast<T>(bias_correction2),
        static_cast<T>(o.eps),
        static_cast<T>(grad_step),
        static_cast<T>(avg_step)};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          nadam_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo, w[2].data_ptr<T>() + lo,
                          g.data_ptr<T>() + lo, hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

}  // namespace dtensor::optim
