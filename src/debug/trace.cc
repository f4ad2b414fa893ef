// CollectiveTrace: each held rank's collectives, in order, with their
// groups interned (a 1,024-rank step has thousands of collectives but a
// few hundred distinct groups).
#include <map>
#include <vector>

#include "debug/verify.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"

namespace dtensor {

namespace {
constinit thread_local CollectiveTrace* thread_trace = nullptr;
const std::vector<RankCollective> kNone;
}  // namespace

CollectiveTrace::CollectiveTrace() {
  DT_CHECK(thread_trace == nullptr,
           "CollectiveTrace: this thread has one already; traces do not nest");
  thread_trace = this;
}

CollectiveTrace::~CollectiveTrace() { thread_trace = nullptr; }

const std::vector<RankCollective>& CollectiveTrace::of(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= by_rank_.size()) return kNone;
  return by_rank_[static_cast<size_t>(rank)];
}

const std::vector<int>& CollectiveTrace::group(int i) const {
  DT_CHECK(i >= 0 && i < groups(), "CollectiveTrace::group: no group ", i, " (", groups(),
           " recorded)");
  return groups_[static_cast<size_t>(i)];
}

void CollectiveTrace::add(CollectiveKind kind, DType dtype, const std::vector<int>& group,
                          const World& world, const std::function<int64_t(size_t)>& bytes) {
  auto [it, added] = group_ids_.try_emplace(group, static_cast<int>(groups_.size()));
  if (added) groups_.push_back(group);
  for (size_t i = 0; i < group.size(); ++i) {
    const int rank = group[i];
    if (!world.holds(rank)) continue;
    if (static_cast<size_t>(rank) >= by_rank_.size())
      by_rank_.resize(static_cast<size_t>(rank) + 1);
    by_rank_[static_cast<size_t>(rank)].push_back({kind, dtype, bytes(i), it->second});
  }
}

CollectiveTrace* collective_trace() { return thread_trace; }

void trace_collective(CollectiveKind kind, DType dtype, const std::vector<int>& group,
                      const World& world, const std::function<int64_t(size_t)>& bytes) {
  if (thread_trace == nullptr || verify_detail::inside_check()) return;
  thread_trace->add(kind, dtype, group, world, bytes);
}

}  // namespace dtensor
