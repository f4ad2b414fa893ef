// The pointwise ops' sharding rule, shared with the in-place ops
// (src/ops/inplace_rule.cc): an in-place op keeps the candidates of its
// out-of-place op whose input 0 and output are self's placement, so the two
// never disagree about which layouts are valid.
#pragma once

#include "dispatch/dispatch.h"

namespace dtensor::dispatch {

// The rule of the pointwise ops (add, mul, relu, ...; their rules differ
// only in the name their errors carry). Its strategies switch on the
// schema's OpId.
const OpRule& pointwise_rule();

// The candidates every pointwise op has, one per output dim d: the output
// S(d), each input that has the dim (right-aligned) S of it, an input that
// broadcasts it or lacks it Replicate. (src/ops/pointwise_math.cc adds its
// own Partial candidates to these.)
void pointwise_shard_strategies(const OpSchema& s, const TensorMeta& out,
                                std::vector<DimStrategy>& c);

// A plain Tensor operand of `op` next to `like`, as a replicated DTensor:
// one element always, any shape inside implicit_replication; else throws.
DTensor replicated(const char* op, const Tensor& t, const DTensor& like);

}  // namespace dtensor::dispatch
