// Internals shared by the planner, its cache and the executor.
#pragma once

#include "dtensor/local_tensor.h"
#include "dtensor/redistribute.h"

namespace dtensor::redistribute_detail {

// Plans from scratch (no cache), and checks the plan. See plan.cc.
RedistributePlan build_plan(const DTensorSpec& from, const DTensorSpec& to,
                            const RedistributeOptions& options);

// Replays the plan's steps on the shard boxes of every mesh coordinate and
// throws dtensor::Error (an internal error, naming the step) unless each
// step produces exactly the layout of the next state and the last state is
// plan.to. See plan_check.cc.
void check_plan(const RedistributePlan& plan);

// Runs the plan's steps on shards laid out by plan.from and returns the
// shards of plan.to. The only place plan steps become Backend calls.
LocalTensor execute_plan(const RedistributePlan& plan, const LocalTensor& in);

}  // namespace dtensor::redistribute_detail
