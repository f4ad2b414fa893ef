// Adadelta: PyTorch's single-tensor rule, one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct AdadeltaScalars {
  T weight_decay, rho, one_minus_rho, eps, neg_lr;
  bool use_decay, maximize;
};

// PyTorch's order (torch/optim/adadelta.py, _single_tensor_adadelta, and
// ATen's add/addcmul kernels): g = ±grad; g = g + wd*p; sq = sq*ρ +
// (1-ρ)*g*g; std = sqrt(sq + eps); delta = sqrt(acc + eps) / std * g;
// acc = acc*ρ + (1-ρ)*delta*delta; p = p + (-lr)*delta.
template <class T>
void adadelta_kernel(T* __restrict p, T* __restrict sq, T* __restrict acc, const T* __restrict grad,
                     int64_t n, const AdadeltaScalars<T>& s) {
  for (int64_t i = 0; i < n; ++i) {
    T g = s.maximize ? -grad[i] : grad[i];
    if (s.use_decay) g = g + s.weight_decay * p[i];
    const T sqi = sq[i] * s.rho + s.one_minus_rho * g * g;
    sq[i] = sqi;
    const T std_dev = std::sqrt(sqi + s.eps);
    const T delta = std::sqrt(acc[i] + s.eps) / std_dev * g;
    acc[i] = acc[i] * s.rho + s.one_minus_rho * delta * delta;
    p[i] = p[i] + s.neg_lr * delta;
  }
}

}  // namespace

const std::vector<detail::OptionField<AdadeltaOptions>>& AdadeltaOptions::fields() {
  using O = AdadeltaOptions;
  static const std::vector<detail::OptionField<O>> f{{"lr", &O::lr},
                                                     {"rho", &O::rho},
                                                     {"eps", &O::eps},
                                                     {"weight_decay", &O::weight_decay},
                                                     {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<AdadeltaOptions>;

Adadelta::Adadelta(std::vector<DTensor> params, const AdadeltaOptions& options)
    : Adadelta(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

Adadelta::Adadelta(std::vector<std::pair<std::string, DTensor>> named_params,
                   const AdadeltaOptions& options)
    : Adadelta(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

Adadelta::Adadelta(const std::vector<ParamGroup>& groups, const AdadeltaOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void Adadelta::check_options(const AdadeltaOptions& o) const {
  DT_CHECK(o.rho >= 0 && o.rho <= 1, "Adadelta: expected 0 <= rho <= 1, got ", o.rho);
  DT_CHECK(o.eps >= 0, "Adadelta: expected eps >= 0, got ", o.eps);
  DT_CHECK(o.weight_decay >= 0, "Adadelta: expected weight_decay >= 0, got ", o.weight_decay);
}

void Adadelta::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const AdadeltaOptions& o = options(group);
  const std::vector<const DTensor*> buffers =
      detail::zero_buffers(param, state, buffer_names(group));
  ++state.step;
  auto run = [&]<class T>() {
    const AdadeltaScalars<T> s{static_cast<T>(o.weight_decay),
                               static_cast<T>(o.rho),
                               static_cast<T>(1 - o.rho),
                               static_cast<T>(o.eps),
                               static_cast<T>(-lr(group)),
                               o.weight_decay != 0,
                               o.maximize};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          adadelta_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo,
                             w[2].data_ptr<T>() + lo, g.data_ptr<T>() + lo, hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

}  // namespace dtensor::optim
