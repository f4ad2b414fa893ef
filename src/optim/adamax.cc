// Adamax: PyTorch's single-tensor rule, one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct AdamaxScalars {
  T weight_decay, beta1, one_minus_beta1, beta2, eps, neg_clr;
  bool use_decay, maximize;
};

// PyTorch's order (torch/optim/adamax.py, _single_tensor_adamax, and ATen's
// add/addcdiv/amax kernels): g = ±grad; g = g + wd*p; m = m*β1 + (1-β1)*g;
// u = max(u*β2, |g| + eps), NaN if either is (torch.amax propagates NaN);
// p = p + (-clr)*m / u.
template <class T>
void adamax_kernel(T* __restrict p, T* __restrict m, T* __restrict u, const T* __restrict grad,
                   int64_t n, const AdamaxScalars<T>& s) {
  for (int64_t i = 0; i < n; ++i) {
    T g = s.maximize ? -grad[i] : grad[i];
    if (s.use_decay) g = g + s.weight_decay * p[i];
    const T mi = m[i] * s.beta1 + s.one_minus_beta1 * g;
    m[i] = mi;
    const T decayed = u[i] * s.beta2;
    const T bound = std::abs(g) + s.eps;
    const T ui = std::isnan(decayed) || decayed > bound ? decayed : bound;
    u[i] = ui;
    p[i] = p[i] + s.neg_clr * mi / ui;
  }
}

}  // namespace

const std::vector<detail::OptionField<AdamaxOptions>>& AdamaxOptions::fields() {
  using O = AdamaxOptions;
  static const std::vector<detail::OptionField<O>> f{{"lr", &O::lr},
                                                     {"betas", &O::betas},
                                                     {"eps", &O::eps},
                                                     {"weight_decay", &O::weight_decay},
                                                     {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<AdamaxOptions>;

Adamax::Adamax(std::vector<DTensor> params, const AdamaxOptions& options)
    : Adamax(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

Adamax::Adamax(std::vector<std::pair<std::string, DTensor>> named_params,
               const AdamaxOptions& options)
    : Adamax(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

Adamax::Adamax(const std::vector<ParamGroup>& groups, const AdamaxOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void Adamax::check_options(const AdamaxOptions& o) const {
  detail::check_adam_arguments("Adamax", o.betas, o.eps, o.weight_decay);
}

void Adamax::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const AdamaxOptions& o = options(group);
  const std::vector<const DTensor*> buffers =
      detail::zero_buffers(param, state, buffer_names(group));
  const int64_t step = ++state.step;
  const auto [beta1, beta2] = o.betas;
  // A Python float in PyTorch: computed in double, cast by the kernel.
  const double clr = lr(group) / (1 - std::pow(beta1, static_cast<double>(step)));
  auto run = [&]<class T>() {
    const AdamaxScalars<T> s{static_cast<T>(o.weight_decay),
                             static_cast<T>(beta1),
                             static_cast<T>(1 - beta1),
                             static_cast<T>(beta2),
                             static_cast<T>(o.eps),
                             static_cast<T>(-clr),
                             o.weight_decay != 0,
                             o.maximize};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          adamax_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo,
                           w[2].data_ptr<T>() + lo, g.data_ptr<T>() + lo, hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

}  // namespace dtensor::optim
