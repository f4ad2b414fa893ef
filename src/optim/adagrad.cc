// Adagrad: PyTorch's single-tensor rule, one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct AdagradScalars {
  T weight_decay, neg_clr, eps;
  bool use_decay, maximize;
};

// PyTorch's order (torch/optim/adagrad.py, _single_tensor_adagrad, and
// ATen's addcmul/addcdiv kernels): g = ±grad; g = g + wd*p; sum = sum +
// 1*g*g; std = sqrt(sum) + eps; p = p + (-clr)*g / std.
template <class T>
void adagrad_kernel(T* __restrict p, T* __restrict sum, const T* __restrict grad, int64_t n,
                    const AdagradScalars<T>& s) {
  for (int64_t i = 0; i < n; ++i) {
    T g = s.maximize ? -grad[i] : grad[i];
    if (s.use_decay) g = g + s.weight_decay * p[i];
    const T acc = sum[i] + g * g;
    sum[i] = acc;
    const T std_dev = std::sqrt(acc) + s.eps;
    p[i] = p[i] + s.neg_clr * g / std_dev;
  }
}

}  // namespace

const std::vector<detail::OptionField<AdagradOptions>>& AdagradOptions::fields() {
  using O = AdagradOptions;
  static const std::vector<detail::OptionField<O>> f{
      {"lr", &O::lr},
      {"lr_decay", &O::lr_decay},
      {"weight_decay", &O::weight_decay},
      {"initial_accumulator_value", &O::initial_accumulator_value},
      {"eps", &O::eps},
      {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<AdagradOptions>;

Adagrad::Adagrad(std::vector<DTensor> params, const AdagradOptions& options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

Adagrad::Adagrad(std::vector<std::pair<std::string, DTensor>> named_params,
                 const AdagradOptions& options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

Adagrad::Adagrad(const std::vector<ParamGroup>& groups, const AdagradOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void Adagrad::check_options(const AdagradOptions& o) const {
  DT_CHECK(o.lr_decay >= 0, "Adagrad: expected lr_decay >= 0, got ", o.lr_decay);
  DT_CHECK(o.weight_decay >= 0, "Adagrad: expected weight_decay >= 0, got ", o.weight_decay);
  DT_CHECK(o.initial_accumulator_value >= 0,
           "Adagrad: expected initial_accumulator_value >= 0, got ", o.initial_accumulator_value);
  DT_CHECK(o.eps >= 0, "Adagrad: expected eps >= 0, got ", o.eps);
}

void Adagrad::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const AdagradOptions& o = options(group);
  if (!state.has("sum"))
    state.buffers.emplace("sum", detail::full_like_param(param, o.initial_accumulator_value));
  const int64_t step = ++state.step;
  // A Python float in PyTorch: computed in double, cast by the kernel.
  const double clr = lr(group) / (1 + static_cast<double>(step - 1) * o.lr_decay);
  const std::vector<const DTensor*> buffers{&state.buffers.at("sum")};
  auto run = [&]<class T>() {
    const AdagradScalars<T> s{static_cast<T>(o.weight_decay), static_cast<T>(-clr),
                              static_cast<T>(o.eps), o.weight_decay != 0, o.maximize};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          adagrad_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo, g.data_ptr<T>() + lo,
                            hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

}  // namespace dtensor::optim
