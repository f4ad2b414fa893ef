// Internal: a contiguous shape seen around one dim as [outer, len, inner],
// the view both backends take of a shard when they cut it into pieces or
// join pieces along that dim (each piece is `outer` runs of len_i * inner
// elements).
#pragma once

#include <cstdint>

#include "dtensor/tensor.h"

namespace dtensor {

struct Around {
  int64_t outer = 1, len = 1, inner = 1;
};

inline Around around(const Shape& shape, int64_t dim) {
  Around a;
  a.len = shape[dim];
  for (int64_t d = 0; d < dim; ++d) a.outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) a.inner *= shape[d];
  return a;
}

}  // namespace dtensor
