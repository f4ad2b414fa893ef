// RMSprop: PyTorch's single-tensor rule, one fused loop per shard.
#include <cmath>

#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

template <class T>
struct RmspropScalars {
  T weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
  bool use_decay, centered, use_momentum, maximize;
};

// PyTorch's order (torch/optim/rmsprop.py, _single_tensor_rmsprop, and
// ATen's add/addcmul/addcdiv kernels): g = ±grad; g = g + wd*p; sq = sq*α +
// (1-α)*g*g; centered: ga = ga*α + (1-α)*g, avg = sqrt(sq + (-1)*ga*ga),
// else avg = sqrt(sq); avg = avg + eps; momentum: buf = buf*momentum +
// 1*g / avg, p = p + (-lr)*buf; else p = p + (-lr)*g / avg.
template <class T>
void rmsprop_kernel(T* __restrict p, T* __restrict sq, T* __restrict ga, T* __restrict buf,
                    const T* __restrict grad, int64_t n, const RmspropScalars<T>& s) {
  for (int64_t i = 0; i < n; ++i) {
    T g = s.maximize ? -grad[i] : grad[i];
    if (s.use_decay) g = g + s.weight_decay * p[i];
    const T sqi = sq[i] * s.alpha + s.one_minus_alpha * g * g;
    sq[i] = sqi;
    T avg;
    if (s.centered) {
      const T gai = ga[i] * s.alpha + s.one_minus_alpha * g;
      ga[i] = gai;
      avg = std::sqrt(sqi + T(-1) * gai * gai);
    } else {
      avg = std::sqrt(sqi);
    }
    avg = avg + s.eps;
    if (s.use_momentum) {
      const T b = buf[i] * s.momentum + T(1) * g / avg;
      buf[i] = b;
      p[i] = p[i] + s.neg_lr * b;
    } else {
      p[i] = p[i] + s.neg_lr * g / avg;
    }
  }
}

}  // namespace

const std::vector<detail::OptionField<RMSpropOptions>>& RMSpropOptions::fields() {
  using O = RMSpropOptions;
  static const std::vector<detail::OptionField<O>> f{{"lr", &O::lr},
                                                     {"alpha", &O::alpha},
                                                     {"eps", &O::eps},
                                                     {"weight_decay", &O::weight_decay},
                                                     {"momentum", &O::momentum},
                                                     {"centered", &O::centered},
                                                     {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<RMSpropOptions>;

RMSprop::RMSprop(std::vector<DTensor> params, const RMSpropOptions& options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

RMSprop::RMSprop(std::vector<std::pair<std::string, DTensor>> named_params,
                 const RMSpropOptions& options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

RMSprop::RMSprop(const std::vector<ParamGroup>& groups, const RMSpropOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void RMSprop::check_options(const RMSpropOptions& o) const {
  DT_CHECK(o.alpha >= 0, "RMSprop: expected alpha >= 0, got ", o.alpha);
  DT_CHECK(o.eps >= 0, "RMSprop: expected eps >= 0, got ", o.eps);
  DT_CHECK(o.weight_decay >= 0, "RMSprop: expected weight_decay >= 0, got ", o.weight_decay);
  DT_CHECK(o.momentum >= 0, "RMSprop: expected momentum >= 0, got ", o.momentum);
}

std::vector<std::string> RMSprop::buffer_names(size_t group) const {
  const RMSpropOptions& o = options(group);
  std::vector<std::string> names{"square_avg"};
  if (o.momentum > 0) names.push_back("momentum_buffer");
  if (o.centered) names.push_back("grad_avg");
  return names;
}

void RMSprop::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const RMSpropOptions& o = options(group);
  const bool use_momentum = o.momentum > 0;
  // The buffers in kernel order: square_avg, then grad_avg and
  // momentum_buffer when used.
  std::vector<std::string> names{"square_avg"};
  if (o.centered) names.push_back("grad_avg");
  if (use_momentum) names.push_back("momentum_buffer");
  const std::vector<const DTensor*> buffers = detail::zero_buffers(param, state, names);
  ++state.step;
  auto run = [&]<class T>() {
    const RmspropScalars<T> s{static_cast<T>(o.weight_decay),
                              static_cast<T>(o.alpha),
                              static_cast<T>(1 - o.alpha),
                              static_cast<T>(o.eps),
                              static_cast<T>(o.momentum),
                              static_cast<T>(-lr(group)),
                              o.weight_decay != 0,
                              o.centered,
                              use_momentum,
                              o.maximize};
    detail::for_each_element_block(
        param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
          T* const ga = s.centered ? w[2].template data_ptr<T>() + lo : nullptr;
          T* const buf =
              s.use_momentum ? w[s.centered ? 3 : 2].template data_ptr<T>() + lo : nullptr;
          rmsprop_kernel<T>(w[0].data_ptr<T>() + lo, w[1].data_ptr<T>() + lo, ga, buf,
                            g.data_ptr<T>() + lo, hi - lo, s);
        });
  };
  detail::with_param_type(param, run);
}

}  // namespace dtensor::optim
