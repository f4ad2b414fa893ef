// Tensor ops on DTensors. Each op propagates the layout: it picks, among the
// op's candidate input/output placements, the one whose input
// redistributions cost least under the planner's cost model (a candidate
// needing no redistribution wins when there is one), redistributes the
// inputs that need it, runs the plain Tensor op on every held shard, and
// wraps the result with the output placements. The choice is cached by the
// op's schema (op, input specs, layout-relevant arguments).
//
//   DTensor y = mm(x, w);            // (S(0),R) x R -> S(0), no communication
//   DTensor s = sum(y, {1});         // S(1) summed over dim 1 -> P(sum)
//
// Inputs must live on the same mesh. Shape errors carry the plain op's
// message plus the placements. Ops not listed here are not supported on
// DTensors yet.
#pragma once

#include <cstdint>

#include "dtensor/dtensor.h"

namespace dtensor {

// Pointwise, with broadcasting. add/sub keep Partial(sum|avg) when both
// inputs have it; mul/div keep Partial(sum|avg) against a Replicate factor
// (div: numerator only); other ops reduce Partials first.
DTensor add(const DTensor& a, const DTensor& b);
DTensor sub(const DTensor& a, const DTensor& b);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
// With a scalar: mul/div keep Partial(sum|avg); add/sub do not (adding c to
// every piece of a sum adds n*c).
DTensor add(const DTensor& a, Scalar b);
DTensor sub(const DTensor& a, Scalar b);
DTensor mul(const DTensor& a, Scalar b);
DTensor div(const DTensor& a, Scalar b);
DTensor operator+(const DTensor& a, const DTensor& b);
DTensor operator-(const DTensor& a, const DTensor& b);
DTensor operator*(const DTensor& a, const DTensor& b);
DTensor operator/(const DTensor& a, const DTensor& b);
DTensor operator+(const DTensor& a, Scalar b);
DTensor operator-(const DTensor& a, Scalar b);
DTensor operator*(const DTensor& a, Scalar b);
DTensor operator/(const DTensor& a, Scalar b);
// neg keeps Partial(sum|avg); relu and exp need the value, so they reduce first.
DTensor neg(const DTensor& x);
DTensor relu(const DTensor& x);
DTensor exp(const DTensor& x);

// Matrix product of 2-d DTensors: (S(0),R)·R -> S(0); R·S(1) -> S(1);
// S(1)·S(0) -> Partial(sum); Partial(sum)·R -> Partial(sum).
DTensor mm(const DTensor& a, const DTensor& b);

// Sum over dims (all when empty): a sharded summed dim gives Partial(sum).
DTensor sum(const DTensor& x, const DimVector& dims = {}, bool keepdim = false);

using ShardingPropCacheInfo = CacheInfo;
// Counters of the sharding-propagation cache.
ShardingPropCacheInfo sharding_prop_cache_info();
void clear_sharding_prop_cache();

}  // namespace dtensor
