// Checks the planner tests share: a plan against a reference plan, and a
// plan run on the simulated world against the tensor it started from.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "redistribute/plan_internal.h"

namespace dtensor::testing {

// Whether `got` costs what `ref` costs and holds as much at its peak
// (both to a relative 1e-9): a pruned search must find a plan exactly as
// cheap and as light as the search it skips work of.
inline ::testing::AssertionResult as_cheap_and_light(const RedistributePlan& got,
                                                     const RedistributePlan& ref) {
  const double cost_tol = 1e-9 * std::max(1.0, ref.cost_us);
  const double peak_tol = 1e-9 * std::max(1.0, ref.peak_bytes);
  if (!(std::abs(got.cost_us - ref.cost_us) <= cost_tol))  // NaN fails too
    return ::testing::AssertionFailure() << "cost " << got.cost_us << " us against " << ref.cost_us;
  if (!(std::abs(got.peak_bytes - ref.peak_bytes) <= peak_tol))
    return ::testing::AssertionFailure()
           << "peak " << got.peak_bytes << " bytes against " << ref.peak_bytes;
  return ::testing::AssertionSuccess();
}

// Runs `plan` (from `a` to `b`) on integer data laid out as `a` on a's
// mesh, and whether the result, read as `b`, is that data.
inline ::testing::AssertionResult plan_moves_the_data(const RedistributePlan& plan,
                                                      const DTensorSpec& a, const DTensorSpec& b,
                                                      uint64_t seed) {
  const Tensor x = int_valued(a.shape(), seed);
  const DTensor d = make_dtensor(x, a.mesh(), a.placements(), seed);
  const DTensor r(b, redistribute_detail::execute_plan(plan, d.local()));
  if (!equal(r.full_tensor(), x)) return ::testing::AssertionFailure() << "wrong data after the plan";
  return ::testing::AssertionSuccess();
}

}  // namespace dtensor::testing
