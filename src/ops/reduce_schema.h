// The schema arguments the reduction-like ops share (sum, mean, ...,
// logsumexp, all, any, vector_norm): args[0] is keepdim, args[dims_at..]
// the reduced dims as given (none: every dim); ops with more arguments put
// them between (vector_norm's ord at 1). One reading of them for every
// family, so that "which dims are reduced" means the same everywhere.
#pragma once

#include "dispatch/dispatch.h"

namespace dtensor::dispatch {

inline bool reduce_keepdim(const OpSchema& s) { return s.args[0] != 0; }

inline DimVector reduce_dims(const OpSchema& s, int dims_at) {
  DimVector dims;
  for (int i = dims_at; i < s.num_args; ++i) dims.push_back(s.args[i]);
  return dims;
}

// Whether input dim d is reduced (dims given negative count from the end).
inline bool reduces_dim(const OpSchema& s, int dims_at, int64_t d) {
  if (s.num_args == dims_at) return true;
  const int64_t ndim = s.input(0).ndim();
  for (int i = dims_at; i < s.num_args; ++i)
    if (s.args[i] == d || s.args[i] + ndim == d) return true;
  return false;
}

// The output shape: the kept dims, the reduced ones dropped (1 with keepdim).
inline Shape reduced_shape(const OpSchema& s, int dims_at) {
  const DTensorSpec& x = s.input(0);
  Shape out;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (!reduces_dim(s, dims_at, d)) out.push_back(x.shape()[d]);
    else if (reduce_keepdim(s)) out.push_back(1);
  }
  return out;
}

// The per-dim candidates every reduction shares: a kept dim stays sharded
// (renumbered in the output); for a reduced dim d, `partial_of(d)` appends
// the candidates a shard of it gives (none: the dim is gathered).
template <class F>
void kept_dims_stay_sharded(const OpSchema& s, int dims_at, std::vector<DimStrategy>& c,
                            F partial_of) {
  int64_t out_dim = 0;
  for (int64_t d = 0; d < s.input(0).ndim(); ++d) {
    if (!reduces_dim(s, dims_at, d)) {
      c.push_back({{Shard(d)}, Shard(out_dim++)});
      continue;
    }
    if (reduce_keepdim(s)) ++out_dim;
    partial_of(d);
  }
}

}  // namespace dtensor::dispatch
