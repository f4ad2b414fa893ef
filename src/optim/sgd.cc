// SGD: PyTorch's single-tensor rule, one fused loop per shard.
#include "optim/optim_internal.h"

namespace dtensor::optim {

namespace {

// The hyper-parameters in the parameter's dtype, as PyTorch's kernels see
// its Python floats.
template <class T>
struct SgdScalars {
  T lr, momentum, one_minus_dampening, weight_decay;
  bool use_momentum, nesterov, maximize, first;
};

// PyTorch's order: g = ±grad; g = g + wd*p; buf = g (first) or
// buf*momentum + (1-dampening)*g; g = g + momentum*buf or buf; p = p + (-lr)*g.
// The flags are template parameters: a loop without branches vectorizes
// (with them inside, the step ran 2.5-8x slower than a plain loop).
template <class T, bool kMaximize, bool kDecay, int kMomentum /*0 none, 1 first, 2 later*/,
          bool kNesterov>
void sgd_loop(T* __restrict p, T* __restrict buf, const T* __restrict grad, int64_t n,
              const SgdScalars<T>& s) {
  const T neg_lr = -s.lr, wd = s.weight_decay, mom = s.momentum, omd = s.one_minus_dampening;
  for (int64_t i = 0; i < n; ++i) {
    T g = kMaximize ? -grad[i] : grad[i];
    if constexpr (kDecay) g = g + wd * p[i];
    if constexpr (kMomentum != 0) {
      const T b = kMomentum == 1 ? g : buf[i] * mom + omd * g;
      buf[i] = b;
      g = kNesterov ? g + mom * b : b;
    }
    p[i] = p[i] + neg_lr * g;
  }
}

template <class T>
void sgd_kernel(T* p, T* buf, const T* grad, int64_t n, const SgdScalars<T>& s) {
  auto with_momentum = [&]<bool kMax, bool kDecay>() {
    if (!s.use_momentum) return sgd_loop<T, kMax, kDecay, 0, false>(p, buf, grad, n, s);
    if (s.nesterov)
      return s.first ? sgd_loop<T, kMax, kDecay, 1, true>(p, buf, grad, n, s)
                     : sgd_loop<T, kMax, kDecay, 2, true>(p, buf, grad, n, s);
    return s.first ? sgd_loop<T, kMax, kDecay, 1, false>(p, buf, grad, n, s)
                   : sgd_loop<T, kMax, kDecay, 2, false>(p, buf, grad, n, s);
  };
  const bool decay = s.weight_decay != T(0);
  if (s.maximize)
    decay ? with_momentum.template operator()<true, true>()
          : with_momentum.template operator()<true, false>();
  else
    decay ? with_momentum.template operator()<false, true>()
          : with_momentum.template operator()<false, false>();
}

template <class T>
void sgd_shards(const DTensor& param, const DTensor& grad, const DTensor* buf,
                const SgdScalars<T>& s) {
  std::vector<const DTensor*> buffers;
  if (buf) buffers.push_back(buf);
  detail::for_each_element_block(
      param, grad, buffers, [&](std::vector<Tensor>& w, const Tensor& g, int64_t lo, int64_t hi) {
        T* const b = buf ? w[1].data_ptr<T>() + lo : nullptr;
        sgd_kernel<T>(w[0].data_ptr<T>() + lo, b, g.data_ptr<T>() + lo, hi - lo, s);
      });
}

}  // namespace

const std::vector<detail::OptionField<SGDOptions>>& SGDOptions::fields() {
  using O = SGDOptions;
  static const std::vector<detail::OptionField<O>> f{{"lr", &O::lr},
                                                     {"momentum", &O::momentum},
                                                     {"dampening", &O::dampening},
                                                     {"weight_decay", &O::weight_decay},
                                                     {"nesterov", &O::nesterov},
                                                     {"maximize", &O::maximize}};
  return f;
}

template class OptimizerOf<SGDOptions>;

SGD::SGD(std::vector<DTensor> params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

SGD::SGD(std::vector<std::pair<std::string, DTensor>> named_params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(named_params))}, options) {}

SGD::SGD(const std::vector<ParamGroup>& groups, const SGDOptions& defaults)
    : OptimizerOf(groups, defaults) {
  resolve_options();
}

void SGD::check_options(const SGDOptions& o) const {
  DT_CHECK(o.momentum >= 0, "SGD: expected momentum >= 0, got ", o.momentum);
  DT_CHECK(o.weight_decay >= 0, "SGD: expected weight_decay >= 0, got ", o.weight_decay);
  DT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: nesterov needs momentum > 0 and dampening 0, got momentum ", o.momentum,
           " and dampening ", o.dampening);
}

void SGD::update(const DTensor& param, const DTensor& grad, ParamState& state, size_t group) {
  const SGDOptions& o = options(group);
  const bool use_momentum = o.momentum != 0;
  const bool first = use_momentum && !state.has("momentum_buffer");
  if (first) state.buffers.emplace("momentum_buffer", detail::zeros_like_param(param));
  const DTensor* buf = use_momentum ? &state.buffers.at("momentum_buffer") : nullptr;
  ++state.step;
  auto run = [&]<class T>() {
    SgdScalars<T> s{static_cast<T>(lr(group)),
                    static_cast<T>(o.momentum),
                    static_cast<T>(1 - o.dampening),
                    static_cast<T>(o.weight_decay),
                    use_momentum,
                    o.nesterov,
                    o.maximize,
                    first};
    sgd_shards<T>(param, grad, buf, s);
  };
  detail::with_param_type(param, run);
}

std::vector<std::string> SGD::buffer_names(size_t group) const {
  if (options(group).momentum == 0) return {};
  return {"momentum_buffer"};
}

}  // namespace dtensor::optim
