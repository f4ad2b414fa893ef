// Autograd for the in-place DTensor ops (see inplace.cc for the ops).
//
// Autograd: in grad mode a leaf that requires grad must not change (its
// gradient would belong to a value that no longer exists); optimizers
// update parameters under NoGradGuard. Otherwise, when self or an operand
// requires grad, the op is recorded as a node whose input 0 is self's
// history before the op, and self's Meta (shared by its copies) is rebased
// onto it. Values of self the backward needs are cloned before they are
// overwritten.
#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "ops/inplace.h"

namespace dtensor::inplace_detail {

DTensor before(const DTensor& self) {
  DTensor prev = self.detach();
  const auto& m = autograd::meta_of(self);
  if (m && m->requires_grad) {
    auto pm = std::make_shared<autograd::Meta>();
    pm->requires_grad = true;
    pm->grad_fn = m->grad_fn;
    pm->accumulator = m->accumulator;
    autograd::MetaAccess::of(prev) = std::move(pm);
  }
  return prev;
}

bool shares_memory(const DTensor& a, const DTensor& b) {
  const auto& x = a.local().shards();
  const auto& y = b.local().shards();
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    if (x[i].second.storage() && x[i].second.storage() == y[i].second.storage()) return true;
  return false;
}

DTensor old_value(const DTensor& self) {
  NoGradGuard no_grad;
  return clone(self.detach());
}

void rebase(DTensor& self, const char* op, const std::vector<const DTensor*>& inputs,
            std::vector<DTensor> saved, autograd::BackwardFn fn) {
  DTensor out = self.detach();
  autograd::record(out, op, inputs, std::move(saved), std::move(fn));
  auto& m = autograd::MetaAccess::of(self);
  if (!m) m = std::make_shared<autograd::Meta>();
  if (m->grad_fn && m->grad_fn->retained.lock() == m) m->grad_fn->retained.reset();
  m->requires_grad = true;
  m->grad_fn = autograd::meta_of(out)->grad_fn;
  if (m->retains_grad) m->grad_fn->retained = m;
}

}  // namespace dtensor::inplace_detail
