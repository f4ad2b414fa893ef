// Internal to src/ops/: a dim argument as the ops' rules read it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dtensor {

// dim wrapped against a tensor of ndim dims (a 0-d one counts as 1) when it
// is valid, else as given: the op's output_meta then reports it, naming the
// op, rather than the rule failing first with another message.
inline int64_t wrap_dim_if_valid(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  return dim >= -n && dim < n ? (dim < 0 ? dim + n : dim) : dim;
}

}  // namespace dtensor
