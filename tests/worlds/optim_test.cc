// Optimizers and clip_grad_norm_ on every world (see world_util.h): SGD
// (every flag combination), Adam, AdamW, AMSGrad, Adagrad, RMSprop (plain,
// centered, with momentum), Adadelta, Adamax, NAdam and RAdam on random
// layouts of
// meshes of 1-4 dims, with uneven and empty shards, FSDP-style Shard(0)
// over every mesh dim, and Partial(sum) gradients of replicated parameters,
// against references written here on plain full tensors, element by
// element. The references apply PyTorch's operations in PyTorch's order in
// the parameter's dtype, as the kernels do, so parameters and state must
// match bit for bit; the gradients are multiples of 1/8 so that the
// Partial(sum) reductions are exact in any order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "dtensor/optim.h"
#include "layout_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using namespace dtensor::optim;

namespace {

class OptimWorldTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// ---- references on full tensors ---------------------------------------------------

template <class T>
struct Ref {
  std::vector<T> p, buf, m, v, vmax;
  int64_t step = 0;
  double mu_product = 1;  // NAdam's, as PyTorch keeps it (a float64 tensor)
};

template <class T>
void ref_sgd(Ref<T>& r, const std::vector<T>& grad, const SGDOptions& o, double lr) {
  const bool first = r.step == 0;
  ++r.step;
  if (o.momentum != 0 && first) r.buf.assign(r.p.size(), T(0));
  for (size_t i = 0; i < r.p.size(); ++i) {
    T d = grad[i];
    if (o.maximize) d = -d;
    if (o.weight_decay != 0) d = d + static_cast<T>(o.weight_decay) * r.p[i];
    if (o.momentum != 0) {
      if (first)
        r.buf[i] = d;
      else
        r.buf[i] = r.buf[i] * static_cast<T>(o.momentum) + static_cast<T>(1 - o.dampening) * d;
      if (o.nesterov)
        d = d + static_cast<T>(o.momentum) * r.buf[i];
      else
        d = r.buf[i];
    }
    r.p[i] = r.p[i] + static_cast<T>(-lr) * d;
  }
}

template <class T>
void ref_adam(Ref<T>& r, const std::vector<T>& grad, const AdamOptions& o, double wd,
              bool decoupled) {
  if (r.step == 0) {
    r.m.assign(r.p.size(), T(0));
    r.v.assign(r.p.size(), T(0));
    if (o.amsgrad) r.vmax.assign(r.p.size(), T(0));
  }
  ++r.step;
  const double lr = o.lr, b1 = o.betas.first, b2 = o.betas.second;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(r.step));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(r.step));
  const T w = static_cast<T>(1 - b1);
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (wd != 0) {
      if (decoupled)
        r.p[i] = r.p[i] * static_cast<T>(1 - lr * wd);
      else
        g = g + static_cast<T>(wd) * r.p[i];
    }
    // torch.lerp: self + w*(end - self) for |w| < 0.5, else end - (end - self)*(1 - w)
    if (std::abs(w) < T(0.5))
      r.m[i] = r.m[i] + w * (g - r.m[i]);
    else
      r.m[i] = g - (g - r.m[i]) * (T(1) - w);
    r.v[i] = r.v[i] * static_cast<T>(b2);
    r.v[i] = r.v[i] + static_cast<T>(1 - b2) * g * g;
    T vhat = r.v[i];
    if (o.amsgrad) {
      r.vmax[i] = std::max(r.vmax[i], r.v[i]);
      vhat = r.vmax[i];
    }
    const T denom = std::sqrt(vhat) / static_cast<T>(std::sqrt(bc2)) + static_cast<T>(o.eps);
    r.p[i] = r.p[i] + static_cast<T>(-(lr / bc1)) * r.m[i] / denom;
  }
}

// Adagrad: "sum" is r.v.
template <class T>
void ref_adagrad(Ref<T>& r, const std::vector<T>& grad, const AdagradOptions& o) {
  if (r.step == 0) r.v.assign(r.p.size(), static_cast<T>(o.initial_accumulator_value));
  ++r.step;
  const double clr = o.lr / (1 + static_cast<double>(r.step - 1) * o.lr_decay);
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) g = g + static_cast<T>(o.weight_decay) * r.p[i];
    r.v[i] = r.v[i] + T(1) * g * g;  // addcmul(g, g, value=1)
    const T std_dev = std::sqrt(r.v[i]) + static_cast<T>(o.eps);
    r.p[i] = r.p[i] + static_cast<T>(-clr) * g / std_dev;  // addcdiv(g, std, value=-clr)
  }
}

// RMSprop: "square_avg" is r.v, "grad_avg" r.m, "momentum_buffer" r.buf.
template <class T>
void ref_rmsprop(Ref<T>& r, const std::vector<T>& grad, const RMSpropOptions& o) {
  if (r.step == 0) {
    r.v.assign(r.p.size(), T(0));
    if (o.centered) r.m.assign(r.p.size(), T(0));
    if (o.momentum > 0) r.buf.assign(r.p.size(), T(0));
  }
  ++r.step;
  const T alpha = static_cast<T>(o.alpha), one_minus_alpha = static_cast<T>(1 - o.alpha);
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) g = g + static_cast<T>(o.weight_decay) * r.p[i];
    r.v[i] = r.v[i] * alpha;                     // square_avg.mul_(alpha)
    r.v[i] = r.v[i] + one_minus_alpha * g * g;   // .addcmul_(g, g, value=1-alpha)
    T avg;
    if (o.centered) {
      r.m[i] = r.m[i] * alpha;                   // grad_avg.mul_(alpha)
      r.m[i] = r.m[i] + one_minus_alpha * g;     // .add_(g, alpha=1-alpha)
      avg = std::sqrt(r.v[i] + T(-1) * r.m[i] * r.m[i]);
    } else {
      avg = std::sqrt(r.v[i]);
    }
    avg = avg + static_cast<T>(o.eps);
    if (o.momentum > 0) {
      r.buf[i] = r.buf[i] * static_cast<T>(o.momentum);  // buf.mul_(momentum)
      r.buf[i] = r.buf[i] + T(1) * g / avg;              // .addcdiv_(g, avg)
      r.p[i] = r.p[i] + static_cast<T>(-o.lr) * r.buf[i];
    } else {
      r.p[i] = r.p[i] + static_cast<T>(-o.lr) * g / avg;
    }
  }
}

// Adadelta: "square_avg" is r.v, "acc_delta" r.m.
template <class T>
void ref_adadelta(Ref<T>& r, const std::vector<T>& grad, const AdadeltaOptions& o) {
  if (r.step == 0) r.v.assign(r.p.size(), T(0)), r.m.assign(r.p.size(), T(0));
  ++r.step;
  const T rho = static_cast<T>(o.rho), one_minus_rho = static_cast<T>(1 - o.rho);
  const T eps = static_cast<T>(o.eps);
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) g = g + static_cast<T>(o.weight_decay) * r.p[i];
    r.v[i] = r.v[i] * rho;                               // square_avg.mul_(rho)
    r.v[i] = r.v[i] + one_minus_rho * g * g;             // .addcmul_(g, g, value=1-rho)
    const T std_dev = std::sqrt(r.v[i] + eps);           // square_avg.add(eps).sqrt_()
    T delta = std::sqrt(r.m[i] + eps);                   // acc_delta.add(eps).sqrt_()
    delta = delta / std_dev;                             // .div_(std)
    delta = delta * g;                                   // .mul_(g)
    r.m[i] = r.m[i] * rho;                               // acc_delta.mul_(rho)
    r.m[i] = r.m[i] + one_minus_rho * delta * delta;     // .addcmul_(delta, delta, value=1-rho)
    r.p[i] = r.p[i] + static_cast<T>(-o.lr) * delta;     // p.add_(delta, alpha=-lr)
  }
}

// Adamax: "exp_avg" is r.m, "exp_inf" r.vmax.
template <class T>
void ref_adamax(Ref<T>& r, const std::vector<T>& grad, const AdamaxOptions& o) {
  if (r.step == 0) r.m.assign(r.p.size(), T(0)), r.vmax.assign(r.p.size(), T(0));
  ++r.step;
  const auto [b1, b2] = o.betas;
  const double clr = o.lr / (1 - std::pow(b1, static_cast<double>(r.step)));
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) g = g + static_cast<T>(o.weight_decay) * r.p[i];
    r.m[i] = r.m[i] * static_cast<T>(b1);                  // exp_avg.mul_(beta1)
    r.m[i] = r.m[i] + static_cast<T>(1 - b1) * g;          // .add_(g, alpha=1-beta1)
    const T a = r.vmax[i] * static_cast<T>(b2);            // exp_inf.mul_(beta2)
    const T b = std::abs(g) + static_cast<T>(o.eps);       // g.abs().add_(eps)
    r.vmax[i] = std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b);  // amax over both
    r.p[i] = r.p[i] + static_cast<T>(-clr) * r.m[i] / r.vmax[i];  // addcdiv_(m, u, value=-clr)
  }
}

// NAdam (PyTorch 2's momentum factor): "exp_avg" is r.m, "exp_avg_sq" r.v.
template <class T>
void ref_nadam(Ref<T>& r, const std::vector<T>& grad, const NAdamOptions& o) {
  if (r.step == 0) r.m.assign(r.p.size(), T(0)), r.v.assign(r.p.size(), T(0));
  ++r.step;
  const auto [b1, b2] = o.betas;
  const double t = static_cast<double>(r.step);
  const double bc2 = 1 - std::pow(b2, t);
  const double mu = b1 * (1. - 0.5 * std::pow(0.96, t * o.momentum_decay));
  const double mu_next = b1 * (1. - 0.5 * std::pow(0.96, (t + 1) * o.momentum_decay));
  r.mu_product *= mu;
  const double mu_product_next = r.mu_product * mu_next;
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) {
      if (o.decoupled_weight_decay)
        r.p[i] = r.p[i] * static_cast<T>(1 - o.lr * o.weight_decay);  // p.mul_(1 - lr*wd)
      else
        g = g + static_cast<T>(o.weight_decay) * r.p[i];  // g.add(p, alpha=wd)
    }
    r.m[i] = r.m[i] * static_cast<T>(b1);
    r.m[i] = r.m[i] + static_cast<T>(1 - b1) * g;
    r.v[i] = r.v[i] * static_cast<T>(b2);
    r.v[i] = r.v[i] + static_cast<T>(1 - b2) * g * g;
    T denom = r.v[i] / static_cast<T>(bc2);  // exp_avg_sq.div(bc2).sqrt().add_(eps)
    denom = std::sqrt(denom) + static_cast<T>(o.eps);
    r.p[i] = r.p[i] + static_cast<T>(-o.lr * (1. - mu) / (1. - r.mu_product)) * g / denom;
    r.p[i] = r.p[i] + static_cast<T>(-o.lr * mu_next / (1. - mu_product_next)) * r.m[i] / denom;
  }
}

// RAdam: "exp_avg" is r.m, "exp_avg_sq" r.v.
template <class T>
void ref_radam(Ref<T>& r, const std::vector<T>& grad, const RAdamOptions& o) {
  if (r.step == 0) r.m.assign(r.p.size(), T(0)), r.v.assign(r.p.size(), T(0));
  ++r.step;
  const auto [b1, b2] = o.betas;
  const double t = static_cast<double>(r.step);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  const double rho_inf = 2 / (1 - b2) - 1;
  const double rho_t = rho_inf - 2 * t * std::pow(b2, t) / bc2;
  for (size_t i = 0; i < r.p.size(); ++i) {
    T g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) {
      if (o.decoupled_weight_decay)
        r.p[i] = r.p[i] * static_cast<T>(1 - o.lr * o.weight_decay);
      else
        g = g + static_cast<T>(o.weight_decay) * r.p[i];
    }
    r.m[i] = r.m[i] * static_cast<T>(b1);
    r.m[i] = r.m[i] + static_cast<T>(1 - b1) * g;
    r.v[i] = r.v[i] * static_cast<T>(b2);
    r.v[i] = r.v[i] + static_cast<T>(1 - b2) * g * g;
    const T corrected = r.m[i] / static_cast<T>(bc1);  // exp_avg / bc1
    T update = corrected * static_cast<T>(o.lr);
    if (rho_t > 5.) {
      const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                                    ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      // sqrt(bc2) / (exp_avg_sq.sqrt() + eps): Tensor.__rtruediv__ is
      // reciprocal() * float
      T adaptive = std::sqrt(r.v[i]) + static_cast<T>(o.eps);
      adaptive = T(1) / adaptive;
      adaptive = adaptive * static_cast<T>(std::sqrt(bc2));
      update = update * adaptive;
      update = update * static_cast<T>(rect);
    }
    r.p[i] = r.p[i] + T(-1) * update;  // p.add_(update, alpha=-1)
  }
}

// The reference's vector that holds the optimizer's buffer `name`.
template <class T>
const std::vector<T>& ref_buffer(const Ref<T>& r, const std::string& name) {
  if (name == "momentum_buffer") return r.buf;
  if (name == "exp_avg" || name == "grad_avg" || name == "acc_delta") return r.m;
  if (name == "exp_avg_sq" || name == "sum" || name == "square_avg") return r.v;
  if (name == "max_exp_avg_sq" || name == "exp_inf") return r.vmax;
  throw std::logic_error("ref_buffer: no reference vector for buffer '" + name + "'");
}

template <class T>
void expect_bits(const Tensor& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  const std::vector<T> g = got.contiguous().to_vector<T>();
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&g[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", the reference "
                    << want[i] << " (difference " << (g[i] - want[i]) << ")";
      return;
    }
}

// ---- random layouts -----------------------------------------------------------------

struct Layout {
  Shape shape;
  Placements param;
  Placements grad;  // the param's, or Partial(sum) on some of its Replicate dims
};

Layout random_layout_optim(std::mt19937& rng, const DeviceMesh& mesh) {
  Layout l;
  l.shape = dtensor::testing::random_shape_for(rng, mesh.size());
  const int kind = static_cast<int>(rng() % 4);
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (kind == 0)  // FSDP: dim 0 split over every mesh dim (uneven, often empty)
      l.param.push_back(Shard(0));
    else
      l.param.push_back(dtensor::testing::random_placement(rng, l.shape.size(), false));
  }
  l.grad = l.param;
  for (int d = 0; d < mesh.ndim(); ++d)
    if (l.param[d].is_replicate() && rng() % 2 == 0) l.grad[d] = Partial();
  return l;
}

std::string describe_optim(const DeviceMesh& mesh, const Layout& l) {
  return "mesh " + mesh.to_string() + " shape " + to_string(l.shape) + " param " +
         to_string(l.param) + " grad " + to_string(l.grad);
}

struct OptimCase {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<DTensor>)> make;
  // steps the reference of one parameter
  std::function<void(Ref<float>&, const std::vector<float>&)> ref32;
  std::function<void(Ref<double>&, const std::vector<double>&)> ref64;
  std::vector<std::string> buffers;
  int steps = 3;
};

std::vector<OptimCase> all_cases() {
  std::vector<OptimCase> cases;
  for (double momentum : {0.0, 0.9})
    for (double dampening : {0.0, 0.25})
      for (double wd : {0.0, 0.05})
        for (bool nesterov : {false, true})
          for (bool maximize : {false, true}) {
            if (nesterov && (momentum == 0 || dampening != 0)) continue;
            if (momentum == 0 && dampening != 0) continue;  // dampening acts on the buffer only
            SGDOptions o{.lr = 0.05, .momentum = momentum, .dampening = dampening,
                         .weight_decay = wd, .nesterov = nesterov, .maximize = maximize};
            std::string name = "SGD(momentum " + std::to_string(momentum) + ", dampening " +
                               std::to_string(dampening) + ", wd " + std::to_string(wd) +
                               (nesterov ? ", nesterov" : "") + (maximize ? ", maximize" : "") + ")";
            cases.push_back(
                {name,
                 [o](std::vector<DTensor> ps) { return std::make_unique<SGD>(std::move(ps), o); },
                 [o](Ref<float>& r, const std::vector<float>& g) { ref_sgd(r, g, o, o.lr); },
                 [o](Ref<double>& r, const std::vector<double>& g) { ref_sgd(r, g, o, o.lr); },
                 momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                               : std::vector<std::string>{}});
          }
  for (int k = 0; k < 5; ++k) {
    AdamOptions o{.lr = 0.01};
    bool decoupled = true;
    std::string name = "AdamW";
    if (k == 1) o.amsgrad = true, name = "AdamW(amsgrad)";
    if (k == 2) o.maximize = true, o.weight_decay = 0.1, name = "AdamW(maximize, wd 0.1)";
    if (k == 3) decoupled = false, o.weight_decay = 0.05, name = "Adam(wd 0.05)";
    if (k == 4) decoupled = false, o.amsgrad = true, o.betas = {0.6, 0.9}, name = "Adam(amsgrad, betas 0.6, 0.9)";
    const double wd = o.weight_decay.value_or(decoupled ? 1e-2 : 0.0);
    std::vector<std::string> buffers{"exp_avg", "exp_avg_sq"};
    if (o.amsgrad) buffers.push_back("max_exp_avg_sq");
    cases.push_back(
        {name,
         [o, decoupled](std::vector<DTensor> ps) -> std::unique_ptr<Optimizer> {
           if (decoupled) return std::make_unique<AdamW>(std::move(ps), o);
           return std::make_unique<Adam>(std::move(ps), o);
         },
         [o, wd, decoupled](Ref<float>& r, const std::vector<float>& g) {
           ref_adam(r, g, o, wd, decoupled);
         },
         [o, wd, decoupled](Ref<double>& r, const std::vector<double>& g) {
           ref_adam(r, g, o, wd, decoupled);
         },
         buffers});
  }
  for (const AdagradOptions& o :
       {AdagradOptions{}, AdagradOptions{.lr = 0.05, .lr_decay = 0.1, .weight_decay = 0.02,
                                         .initial_accumulator_value = 0.25, .eps = 1e-6},
        AdagradOptions{.lr = 0.02, .maximize = true}}) {
    const std::string name = "Adagrad(lr " + std::to_string(o.lr) + ", lr_decay " +
                             std::to_string(o.lr_decay) + (o.maximize ? ", maximize" : "") + ")";
    cases.push_back(
        {name, [o](std::vector<DTensor> ps) { return std::make_unique<Adagrad>(std::move(ps), o); },
         [o](Ref<float>& r, const std::vector<float>& g) { ref_adagrad(r, g, o); },
         [o](Ref<double>& r, const std::vector<double>& g) { ref_adagrad(r, g, o); }, {"sum"}});
  }
  for (const RMSpropOptions& o :
       {RMSpropOptions{}, RMSpropOptions{.alpha = 0.9, .eps = 1e-6, .weight_decay = 0.02},
        RMSpropOptions{.momentum = 0.9, .centered = true},
        RMSpropOptions{.lr = 0.003, .momentum = 0.5, .maximize = true}}) {
    const std::string name = "RMSprop(alpha " + std::to_string(o.alpha) + ", momentum " +
                             std::to_string(o.momentum) + (o.centered ? ", centered" : "") +
                             (o.maximize ? ", maximize" : "") + ")";
    std::vector<std::string> buffers{"square_avg"};
    if (o.momentum > 0) buffers.push_back("momentum_buffer");
    if (o.centered) buffers.push_back("grad_avg");
    cases.push_back(
        {name, [o](std::vector<DTensor> ps) { return std::make_unique<RMSprop>(std::move(ps), o); },
         [o](Ref<float>& r, const std::vector<float>& g) { ref_rmsprop(r, g, o); },
         [o](Ref<double>& r, const std::vector<double>& g) { ref_rmsprop(r, g, o); }, buffers});
  }
  for (const AdadeltaOptions& o :
       {AdadeltaOptions{}, AdadeltaOptions{.lr = 0.5, .rho = 0.8, .eps = 1e-4, .weight_decay = 0.02},
        AdadeltaOptions{.maximize = true}}) {
    const std::string name = "Adadelta(lr " + std::to_string(o.lr) + ", rho " +
                             std::to_string(o.rho) + (o.maximize ? ", maximize" : "") + ")";
    cases.push_back({name,
                     [o](std::vector<DTensor> ps) {
                       return std::make_unique<Adadelta>(std::move(ps), o);
                     },
                     [o](Ref<float>& r, const std::vector<float>& g) { ref_adadelta(r, g, o); },
                     [o](Ref<double>& r, const std::vector<double>& g) { ref_adadelta(r, g, o); },
                     {"square_avg", "acc_delta"}});
  }
  for (const AdamaxOptions& o :
       {AdamaxOptions{}, AdamaxOptions{.lr = 0.01, .betas = {0.5, 0.8}, .weight_decay = 0.05},
        AdamaxOptions{.eps = 0.3, .maximize = true}}) {
    const std::string name = "Adamax(lr " + std::to_string(o.lr) + ", eps " +
                             std::to_string(o.eps) + (o.maximize ? ", maximize" : "") + ")";
    cases.push_back({name,
                     [o](std::vector<DTensor> ps) {
                       return std::make_unique<Adamax>(std::move(ps), o);
                     },
                     [o](Ref<float>& r, const std::vector<float>& g) { ref_adamax(r, g, o); },
                     [o](Ref<double>& r, const std::vector<double>& g) { ref_adamax(r, g, o); },
                     {"exp_avg", "exp_inf"}});
  }
  for (const NAdamOptions& o :
       {NAdamOptions{}, NAdamOptions{.lr = 0.01, .betas = {0.8, 0.9}, .weight_decay = 0.05},
        NAdamOptions{.weight_decay = 0.1, .momentum_decay = 0.1, .decoupled_weight_decay = true,
                     .maximize = true}}) {
    const std::string name = "NAdam(lr " + std::to_string(o.lr) + ", wd " +
                             std::to_string(o.weight_decay) +
                             (o.decoupled_weight_decay ? ", decoupled" : "") +
                             (o.maximize ? ", maximize" : "") + ")";
    cases.push_back({name,
                     [o](std::vector<DTensor> ps) {
                       return std::make_unique<NAdam>(std::move(ps), o);
                     },
                     [o](Ref<float>& r, const std::vector<float>& g) { ref_nadam(r, g, o); },
                     [o](Ref<double>& r, const std::vector<double>& g) { ref_nadam(r, g, o); },
                     {"exp_avg", "exp_avg_sq"}});
  }
  // Seven steps: the rectified update starts at step 6.
  for (const RAdamOptions& o :
       {RAdamOptions{}, RAdamOptions{.lr = 0.01, .betas = {0.8, 0.9}, .weight_decay = 0.05},
        RAdamOptions{.weight_decay = 0.1, .decoupled_weight_decay = true, .maximize = true}}) {
    const std::string name = "RAdam(lr " + std::to_string(o.lr) + ", wd " +
                             std::to_string(o.weight_decay) +
                             (o.decoupled_weight_decay ? ", decoupled" : "") +
                             (o.maximize ? ", maximize" : "") + ")";
    cases.push_back({name,
                     [o](std::vector<DTensor> ps) {
                       return std::make_unique<RAdam>(std::move(ps), o);
                     },
                     [o](Ref<float>& r, const std::vector<float>& g) { ref_radam(r, g, o); },
                     [o](Ref<double>& r, const std::vector<double>& g) { ref_radam(r, g, o); },
                     {"exp_avg", "exp_avg_sq"}, 7});
  }
  return cases;
}

template <class T>
void check_case(const World& world, const OptimCase& c, std::mt19937& rng, uint64_t seed) {
  const DType dtype = dtype_of<T>::value;
  const DeviceMesh mesh(world, dtensor::testing::random_mesh(rng, world.size()));
  std::vector<Layout> layouts;
  for (int i = 0; i < 3; ++i) layouts.push_back(random_layout_optim(rng, mesh));
  if (!dtensor::testing::takes_part(mesh)) return;  // after drawing what every rank draws
  std::vector<DTensor> params;
  std::vector<Ref<T>> refs(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Tensor full = Tensor::randn(layouts[i].shape, seed + i, 0, dtype);
    params.push_back(distribute_tensor(full, mesh, layouts[i].param));
    params.back().requires_grad_();
    refs[i].p = full.to_vector<T>();
  }
  std::unique_ptr<Optimizer> opt = c.make(params);
  for (int step = 0; step < c.steps; ++step) {
    opt->zero_grad();
    for (size_t i = 0; i < layouts.size(); ++i) {
      if (step == 1 && i == 2) continue;  // no gradient: skipped
      const Tensor g = dtensor::testing::small_valued(layouts[i].shape, seed + 100 * step + i).to(dtype);
      params[i].set_grad(dtensor::testing::make_dtensor(g, mesh, layouts[i].grad, seed + step));
      if constexpr (std::is_same_v<T, float>)
        c.ref32(refs[i], g.to_vector<float>());
      else
        c.ref64(refs[i], g.to_vector<double>());
    }
    opt->step();
    for (size_t i = 0; i < layouts.size(); ++i) {
      const std::string what = c.name + " " + dtype_name(dtype) + " step " +
                               std::to_string(step) + " param " + std::to_string(i) + " " +
                               describe_optim(mesh, layouts[i]);
      if (params[i].grad()) {
        EXPECT_EQ(params[i].grad()->placements(), layouts[i].param) << what << ": grad written back";
      }
      expect_bits<T>(params[i].full_tensor(), refs[i].p, what);
      const ParamState& st = opt->state(i);
      EXPECT_EQ(st.step, refs[i].step) << what;
      for (const std::string& b : c.buffers) {
        ASSERT_TRUE(st.has(b)) << what << " " << b;
        EXPECT_EQ(st.buffer(b).spec(), params[i].spec()) << what << " " << b;
        expect_bits<T>(st.buffer(b).full_tensor(), ref_buffer(refs[i], b), what + " " + b);
      }
    }
  }
}

}  // namespace

// Every optimizer and flag combination, float32 and float64, three steps
// (RAdam seven) on random layouts (one parameter misses its gradient at step 1): parameters
// and state equal the reference bit for bit.
TEST_F(OptimWorldTest, OptimizersMatchReferenceOnRandomLayouts) {
  std::mt19937 rng(2026);
  uint64_t seed = 1;
  for (const OptimCase& c : all_cases()) {
    for (int trial = 0; trial < 3; ++trial) {
      check_case<float>(world, c, rng, seed += 10);
      check_case<double>(world, c, rng, seed += 10);
    }
  }
}

namespace {

// Sum over all full gradients of |g|^p (or max |g|), then the root: in
// double, element by element.
double reference_norm(const std::vector<Tensor>& grads, double p) {
  double acc = 0;
  for (const Tensor& g : grads)
    for (double x : g.to_vector<double>()) {
      if (std::isinf(p))
        acc = std::max(acc, std::abs(x));
      else
        acc += std::pow(std::abs(x), p);
    }
  return std::isinf(p) ? acc : std::pow(acc, 1 / p);
}

}  // namespace

// clip_grad_norm_ on every layout mix: the norm of the full gradients, the
// same bits on every rank; clipped gradients are the full ones times the clip
// coefficient; one all_reduce (none when every gradient is replicated on a
// mesh of the whole world) when the gradients are in their parameters'
// layouts, and Partial gradients are reduced and written back first. Every
// process calls it, those outside the mesh too (it is world-collective).
TEST_F(OptimWorldTest, ClipGradNormMatchesFullGradients) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const DeviceMesh mesh(world, dtensor::testing::random_mesh(rng, world.size()));
    const int n = 1 + static_cast<int>(rng() % 5);
    std::vector<Layout> layouts;
    for (int i = 0; i < n; ++i) layouts.push_back(random_layout_optim(rng, mesh));
    const double norm_types[] = {2.0, 1.0, 3.0, INFINITY};
    const double p = norm_types[trial % 4];
    const bool partial_grads = trial % 3 == 0;
    const DType dtype = trial % 2 ? DType::Float64 : DType::Float32;
    const double max_norm = trial % 5 == 0 ? 1e9 : 0.5;
    std::vector<DTensor> params;
    std::vector<Tensor> full_grads;
    std::set<uint32_t> masks;
    for (int i = 0; i < n; ++i) {
      const Tensor g = dtensor::testing::small_valued(layouts[i].shape, 500 + trial * 10 + i).to(dtype);
      DTensor param = distribute_tensor(Tensor::zeros(layouts[i].shape, dtype), mesh, layouts[i].param);
      param.requires_grad_();
      if (i == 1 && trial % 4 == 1) {
        params.push_back(param);  // no gradient: skipped
        continue;
      }
      param.set_grad(dtensor::testing::make_dtensor(
          g, mesh, partial_grads ? layouts[i].grad : layouts[i].param, 900 + trial));
      params.push_back(param);
      full_grads.push_back(g);
      uint32_t mask = 0;
      for (int d = 0; d < mesh.ndim(); ++d)
        if (layouts[i].param[d].is_shard() && mesh.size(d) > 1) mask |= 1u << d;
      if (mask) masks.insert(mask);
    }
    const std::string what = "trial " + std::to_string(trial) + " norm " + std::to_string(p) +
                             " mesh " + mesh.to_string() + (partial_grads ? " partial grads" : "");
    const double want = reference_norm(full_grads, p);
    std::optional<CommDebugMode> comm(std::in_place);
    const double got = clip_grad_norm_(params, max_norm, p);
    const int64_t all_reduces = comm->count(CollectiveKind::AllReduce);
    const int64_t total = comm->total_count();
    comm.reset();
    EXPECT_NEAR(got, want, 1e-12 * (1 + want)) << what;
    // Every process got the same bits: max and min over the world agree.
    const DeviceMesh everyone(world, Shape{world.size()});
    auto over_ranks = [&](ReduceOp op) {
      LocalTensor local;
      for (int r : world.held_ranks()) local.set(r, Tensor::full({1}, got, DType::Float64));
      const DTensor d(DTensorSpec(everyone, {Partial(op)}, Shape{1}, DType::Float64), local);
      return d.full_tensor().item<double>();
    };
    EXPECT_EQ(over_ranks(ReduceOp::Max), over_ranks(ReduceOp::Min)) << what;
    if (!partial_grads) {
      const bool local_only = masks.empty() && mesh.size() == world.size();
      EXPECT_EQ(all_reduces, full_grads.empty() || local_only ? 0 : 1) << what;
      EXPECT_EQ(total, all_reduces) << what;
    }
    if (!dtensor::testing::takes_part(mesh)) continue;
    const double coef = std::min(1.0, max_norm / (got + 1e-6));
    size_t k = 0;
    for (int i = 0; i < n; ++i) {
      if (!params[i].grad()) continue;
      EXPECT_EQ(params[i].grad()->placements(), layouts[i].param) << what;
      const Tensor& g = full_grads[k++];
      const Tensor want_g = coef == 1.0 ? g : g * Tensor::scalar(coef, dtype);
      EXPECT_LE(max_abs_diff(params[i].grad()->full_tensor(), want_g), 1e-6) << what << " param " << i;
    }
  }
}

// The collective count pinned on a 2x2x2 mesh: gradients sharded over
// {0}, {0, 2}, {} and {0, 2} need one all_reduce (over the world: every
// group's share in one vector), and replicated gradients alone none when
// the mesh holds every rank of the world (else one, for the processes
// outside it).
TEST_F(OptimWorldTest, ClipGradNormRunsOneAllReduce) {
  if (world.size() < 8) GTEST_SKIP() << "needs 8 ranks";
  const DeviceMesh mesh(world, {2, 2, 2});
  const std::vector<Placements> layouts = {{Shard(0), Replicate(), Replicate()},
                                           {Shard(0), Replicate(), Shard(1)},
                                           {Replicate(), Replicate(), Replicate()},
                                           {Shard(1), Replicate(), Shard(0)}};
  std::vector<DTensor> params;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Tensor g = dtensor::testing::small_valued({5, 3}, 40 + i).to(DType::Float64);
    DTensor p = distribute_tensor(Tensor::zeros({5, 3}, DType::Float64), mesh, layouts[i]);
    p.requires_grad_();
    p.set_grad(distribute_tensor(g, mesh, layouts[i]));
    params.push_back(p);
    grads.push_back(g);
  }
  {
    CommDebugMode comm;
    const double got = clip_grad_norm_(params, 1e9);
    EXPECT_EQ(comm.count(CollectiveKind::AllReduce), 1);
    EXPECT_EQ(comm.total_count(), 1);
    EXPECT_NEAR(got, reference_norm(grads, 2), 1e-12 * got);
  }
  {
    CommDebugMode comm;
    clip_grad_norm_({params[2]}, 1e9);
    EXPECT_EQ(comm.total_count(), world.size() == 8 ? 0 : 1);
  }
}

// A replicated parameter's Partial(sum) gradient (data parallelism) is
// all-reduced once, by whichever of clip_grad_norm_ and step() reads it
// first, and kept as the gradient.
TEST_F(OptimWorldTest, PartialGradientIsReducedOnceAndWrittenBack) {
  const DeviceMesh mesh(world, {4});
  DTensor w = distribute_tensor(Tensor::randn({6, 3}, 1), mesh, {Replicate()});
  w.requires_grad_();
  const Tensor g = dtensor::testing::small_valued({6, 3}, 2);
  w.set_grad(dtensor::testing::make_dtensor(g, mesh, {Partial()}, 3));
  SGD opt({w}, {.lr = 0.1});
  CommDebugMode comm;
  clip_grad_norm_({w}, 1e9);
  // The reduction (counted by the processes of the mesh, which run it);
  // the norm of a replicated gradient needs none on a mesh of the whole
  // world, else one for the processes outside it.
  const int64_t reduction = dtensor::testing::takes_part(mesh) ? 1 : 0;
  const int64_t norm = world.size() == 4 ? 0 : 1;
  EXPECT_EQ(comm.count(CollectiveKind::AllReduce), reduction + norm);
  EXPECT_EQ(w.grad()->placements(), Placements{Replicate()});
  opt.step();
  EXPECT_EQ(comm.total_count(), reduction + norm);
}

// A real training step: backward of a tensor-parallel linear layer with a
// data-parallel batch, then AdamW, equals the same on replicated tensors.
TEST_F(OptimWorldTest, AdamWAfterBackwardMatchesReplicatedTraining) {
  if (world.size() < 4) GTEST_SKIP();
  const DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  // Every process trains (clip_grad_norm_ is world-collective); those
  // outside the mesh hold nothing to compare.
  const bool part = dtensor::testing::takes_part(mesh);
  const Tensor w0 = Tensor::randn({6, 5}, 11, 0, DType::Float64) * 0.3;
  const Tensor b0 = Tensor::randn({6}, 12, 0, DType::Float64) * 0.1;
  const Tensor x = Tensor::randn({8, 5}, 13, 0, DType::Float64);
  auto train = [&](const Placements& wp, const Placements& bp, const Placements& xp) {
    DTensor w = distribute_tensor(w0, mesh, wp), b = distribute_tensor(b0, mesh, bp);
    w.requires_grad_();
    b.requires_grad_();
    AdamW opt({w, b}, {.lr = 0.05});
    const DTensor xd = distribute_tensor(x, mesh, xp);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      const DTensor y = linear(xd, w, b);
      mean(mul(y, y)).backward();
      clip_grad_norm_({w, b}, 0.5);
      opt.step();
    }
    return part ? std::make_pair(w.full_tensor(), b.full_tensor())
                : std::make_pair(w0, b0);
  };
  const auto [w1, b1] = train({Replicate(), Shard(0)}, {Replicate(), Shard(0)}, {Shard(0), Replicate()});
  const auto [w2, b2] = train({Replicate(), Replicate()}, {Replicate(), Replicate()},
                              {Replicate(), Replicate()});
  if (!part) return;
  EXPECT_LE(max_abs_diff(w1, w2), 1e-9);
  EXPECT_LE(max_abs_diff(b1, b2), 1e-9);
  EXPECT_GT(max_abs_diff(w1, w0), 1e-3);  // it moved
}

// NAdam's momentum product is not state: it is recomputed from the step
// count. An optimizer given another's state after one step (what a
// checkpoint load does) continues to the same bits as one that never
// stopped.
TEST_F(OptimWorldTest, NAdamResumesFromTheStepCount) {
  const DeviceMesh mesh(world, Shape{world.size()});
  const Shape shape{7, 3};
  const Tensor p0 = Tensor::randn(shape, 21, 0, DType::Float64);
  const NAdamOptions o{.lr = 0.01, .weight_decay = 0.05, .momentum_decay = 0.1};
  auto make_param = [&] {
    DTensor p = distribute_tensor(p0, mesh, {Shard(0)});
    p.requires_grad_();
    return p;
  };
  auto step = [&](Optimizer& opt, DTensor& p, int k) {
    opt.zero_grad();
    const Tensor g = dtensor::testing::small_valued(shape, 40 + k).to(DType::Float64);
    p.set_grad(distribute_tensor(g, mesh, {Shard(0)}));
    opt.step();
  };
  DTensor straight = make_param();
  NAdam whole({straight}, o);
  for (int k = 0; k < 4; ++k) step(whole, straight, k);

  DTensor resumed = make_param();
  auto first = std::make_unique<NAdam>(std::vector<DTensor>{resumed}, o);
  step(*first, resumed, 0);
  NAdam second({resumed}, o);
  second.state(0) = first->state(0);
  first.reset();
  for (int k = 1; k < 4; ++k) step(second, resumed, k);
  if (!dtensor::testing::takes_part(mesh)) return;
  expect_bits<double>(resumed.full_tensor(), straight.full_tensor().to_vector<double>(),
                      "NAdam resumed after one step");
  EXPECT_EQ(second.mu_product(4), whole.mu_product(4));
}
