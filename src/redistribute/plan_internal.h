// Internals shared by the planner, its cache and the executor.
#pragma once

#include "dtensor/local_tensor.h"
#include "dtensor/redistribute.h"

namespace dtensor::redistribute_detail {

// How the planner searches: A* with an admissible lower bound (Pruned, what
// plan_redistribute uses); plain Dijkstra over every state it reaches
// (Exhaustive), kept so that tests can check the pruned search finds plans
// as cheap (and as light in memory) as the exhaustive one; A* with the
// coarser bound of issue 18 (CoarsePruned), kept so that the bench can show
// both bounds side by side on the same pairs.
enum class SearchMode { Pruned, Exhaustive, CoarsePruned };

// Beyond this many states the search gives up and the plan is the per-dim
// one (only reachable with many large mesh dims; realistic meshes need far
// fewer).
inline constexpr size_t kMaxPlanStates = 50000;

// Plans from scratch (no cache), and checks the plan. See plan.cc.
// max_states: the search's budget; tests lower it to reach the fallback.
RedistributePlan build_plan(const DTensorSpec& from, const DTensorSpec& to,
                            const RedistributeOptions& options,
                            SearchMode mode = SearchMode::Pruned,
                            size_t max_states = kMaxPlanStates);

// Test hook: when set, execute_plan calls it after each step with the
// step's index, its input and its output, just before it lets go of the
// input (the caller's tensor for the first step). Not thread-safe to set
// while plans run.
using StepObserver = void (*)(void* context, size_t step, const LocalTensor& in,
                              const LocalTensor& out);
void set_step_observer(StepObserver observer, void* context);

// Replays the plan's steps on the shard boxes of every mesh coordinate and
// throws dtensor::Error (an internal error, naming the step) unless each
// step produces exactly the layout of the next state and the last state is
// plan.to. See plan_check.cc.
void check_plan(const RedistributePlan& plan);

// Runs the plan's steps on shards laid out by plan.from and returns the
// shards of plan.to. The only place plan steps become Backend calls.
LocalTensor execute_plan(const RedistributePlan& plan, const LocalTensor& in);

}  // namespace dtensor::redistribute_detail
