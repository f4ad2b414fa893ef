// Shared by the optimizers of src/optim/: the walk over a parameter's held
// shards that hands a kernel contiguous memory and accounts for the writes.
#pragma once

#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/optim.h"

namespace dtensor::optim::detail {

// A buffer of `param`'s spec filled with zeros (each held rank its own).
DTensor zeros_like_param(const DTensor& param);

// For every shard this process holds: f(written, grad) where written[0] is
// the parameter's shard and written[1..] the buffers' shards of that rank,
// all contiguous, and grad the gradient's shard (contiguous, read only).
// A non-contiguous shard is updated through a contiguous copy written back
// with copy_; every written shard's storage has its version bumped once.
template <class F>
void for_each_shard(const DTensor& param, const DTensor& grad,
                    const std::vector<const DTensor*>& buffers, F&& f) {
  std::vector<Tensor> targets, work;
  for (const auto& [rank, p] : param.local().shards()) {
    targets.clear();
    work.clear();
    targets.push_back(p);
    for (const DTensor* b : buffers) targets.push_back(b->to_local(rank));
    for (const Tensor& t : targets) work.push_back(t.is_contiguous() ? t : t.contiguous());
    const Tensor g = grad.to_local(rank).contiguous();
    f(work, g);
    for (size_t i = 0; i < targets.size(); ++i) {
      if (work[i].storage() != targets[i].storage())
        targets[i].copy_(work[i]);  // bumps the version itself
      else
        targets[i].storage()->bump_version();
    }
  }
}

// Names to give unnamed parameters ("" each).
std::vector<std::pair<std::string, DTensor>> unnamed(std::vector<DTensor> params);

}  // namespace dtensor::optim::detail
