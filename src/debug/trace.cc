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
constinit thread_local int started_depth = 0;
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

int CollectiveTrace::partition(const DeviceMesh& mesh, int mesh_dim) {
  for (size_t i = 0; i < partition_keys_.size(); ++i)
    if (partition_keys_[i].second == mesh_dim && partition_keys_[i].first == mesh)
      return static_cast<int>(i);
  {
    GroupPartition p;
    p.groups = mesh.groups(mesh_dim);
    p.of_rank.assign(static_cast<size_t>(mesh.world().size()), -1);
    for (size_t g = 0; g < p.groups.size(); ++g)
      for (int r : p.groups[g]) p.of_rank[static_cast<size_t>(r)] = static_cast<int>(g);
    partitions_.push_back(std::move(p));
    partition_keys_.emplace_back(mesh, mesh_dim);
  }
  return static_cast<int>(partitions_.size()) - 1;
}

int CollectiveTrace::add(CollectiveKind kind, DType dtype, const std::vector<int>& group,
                         const DeviceMesh& mesh, int mesh_dim,
                         const std::function<int64_t(size_t)>& bytes) {
  const int part = partition(mesh, mesh_dim);
  auto [it, added] = group_ids_.try_emplace({part, group}, static_cast<int>(groups_.size()));
  if (added) {
    groups_.push_back(group);
    group_partition_.push_back(part);
  }
  const World& world = mesh.world();
  for (size_t i = 0; bytes && i < group.size(); ++i) {
    const int rank = group[i];
    if (!world.holds(rank)) continue;
    if (static_cast<size_t>(rank) >= by_rank_.size())
      by_rank_.resize(static_cast<size_t>(rank) + 1);
    by_rank_[static_cast<size_t>(rank)].push_back({kind, dtype, bytes(i), it->second});
  }
  return it->second;
}

CollectiveTrace* collective_trace() { return thread_trace; }

void trace_collective(CollectiveKind kind, DType dtype, const std::vector<int>& group,
                      const DeviceMesh& mesh, int mesh_dim,
                      const std::function<int64_t(size_t)>& bytes) {
  if (thread_trace == nullptr || verify_detail::inside_check()) return;
  thread_trace->add(kind, dtype, group, mesh, mesh_dim, bytes);
}

int64_t trace_call(CollectiveKind kind, DType dtype, int64_t bytes, const std::vector<int>& group,
                   const DeviceMesh& mesh, int mesh_dim) {
  if (thread_trace == nullptr || verify_detail::inside_check()) return -1;
  StepEvent e;
  e.type = StepEvent::Type::Collective;
  e.kind = kind;
  e.dtype = dtype;
  e.bytes = bytes;
  e.started = started_depth > 0;
  // Interned without adding records: the members' records came with trace_collective.
  e.group = thread_trace->add(kind, dtype, group, mesh, mesh_dim, nullptr);
  thread_trace->add_event(e);
  return static_cast<int64_t>(thread_trace->events().size()) - 1;
}

TraceStarted::TraceStarted() { ++started_depth; }
TraceStarted::~TraceStarted() { --started_depth; }

void trace_wait(int64_t event) {
  if (thread_trace == nullptr || event < 0) return;
  StepEvent e;
  e.type = StepEvent::Type::Wait;
  e.waits = event;
  thread_trace->add_event(e);
}

void trace_op(const char* name, double flops, int64_t bytes, DType dtype) {
  if (thread_trace == nullptr) return;
  StepEvent e;
  e.type = StepEvent::Type::Op;
  e.op = name;
  e.dtype = dtype;
  e.flops = flops;
  e.bytes = bytes;
  thread_trace->add_event(e);
}

}  // namespace dtensor
