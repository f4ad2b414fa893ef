// The memory report of dtensor/memory.h: exact per-rank byte counts of the
// model's tensors by category, and the allocator's measured peaks.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_set>

#include "dtensor/memory.h"
#include "dtensor/nn.h"
#include "dtensor/optim.h"
#include "tensor/allocator.h"

namespace dtensor {

MemoryStats memory_stats() {
  const detail::AllocatorStats s = detail::allocator_stats();
  MemoryStats m;
  m.allocated = static_cast<int64_t>(s.bytes_allocated);
  m.peak_allocated = static_cast<int64_t>(s.peak_bytes_allocated);
  m.reserved = static_cast<int64_t>(s.bytes_allocated + s.bytes_cached);
  m.peak_reserved = std::max(static_cast<int64_t>(s.peak_bytes_reserved), m.reserved);
  const auto of = [](MemoryCategory c) { return detail::category_bytes(static_cast<uint8_t>(c)); };
  const detail::CategoryBytes u = of(MemoryCategory::UnshardedParameters);
  const detail::CategoryBytes c = of(MemoryCategory::CommunicationBuffers);
  m.unsharded_parameters = static_cast<int64_t>(u.now);
  m.peak_unsharded_parameters = static_cast<int64_t>(u.peak);
  m.communication_buffers = static_cast<int64_t>(c.now);
  m.peak_communication_buffers = static_cast<int64_t>(c.peak);
  return m;
}

MemoryScope::MemoryScope(MemoryCategory category) : previous_(detail::memory_category()) {
  detail::set_memory_category(static_cast<uint8_t>(category));
}

MemoryScope::~MemoryScope() { detail::set_memory_category(previous_); }

void reset_peak_memory_stats() { detail::reset_peak_bytes_allocated(); }

RankMemoryTracker::RankMemoryTracker(const World& world) : world_(world) {
  detail::start_rank_counting(world.size());
}

RankMemoryTracker::~RankMemoryTracker() { detail::stop_rank_counting(); }

std::vector<RankPeak> RankMemoryTracker::ranks() const {
  std::vector<RankPeak> out;
  for (int rank : world_.held_ranks()) {
    const detail::RankBytes b = detail::rank_bytes(rank);
    out.push_back({rank, b.now[0], b.peak[0],
                   b.peak[static_cast<int>(MemoryCategory::UnshardedParameters)],
                   b.peak[static_cast<int>(MemoryCategory::CommunicationBuffers)]});
  }
  return out;
}

void RankMemoryTracker::reset_peaks() { detail::reset_rank_peaks(); }

namespace {

// A "VmRSS:   1234 kB" line of /proc/self/status, in bytes.
int64_t proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = key;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    long long kb = 0;
    if (std::sscanf(line.c_str() + prefix.size(), "%lld", &kb) == 1) return kb * 1024;
  }
  return 0;
}

// Bytes per held rank of the storages behind tensors, each storage once.
class StorageCount {
 public:
  void add(const DTensor& t) {
    if (!t.defined()) return;
    for (const auto& [rank, shard] : t.local().shards())
      if (shard.storage() && seen_.insert(shard.storage().get()).second)
        bytes_[rank] += static_cast<int64_t>(shard.storage()->nbytes());
  }
  int64_t of(int rank) const {
    auto it = bytes_.find(rank);
    return it == bytes_.end() ? 0 : it->second;
  }

 private:
  std::unordered_set<const Storage*> seen_;
  std::map<int, int64_t> bytes_;
};

std::vector<DTensor> model_parameters(nn::Module& model) {
  std::vector<DTensor> out;
  for (auto& [name, p] : model.named_parameters()) out.push_back(*p);
  return out;
}

}  // namespace

std::string mib_text(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

const char* RankMemory::header() {
  return "  rank   parameters    gradients  optim state  activations\n";
}

std::string RankMemory::row() const {
  char line[160];
  std::snprintf(line, sizeof line, "  %4d %12s %12s %12s %12s\n", rank,
                mib_text(parameters).c_str(), mib_text(gradients).c_str(),
                mib_text(optimizer_state).c_str(), mib_text(activations).c_str());
  return line;
}

int64_t resident_bytes() { return proc_status_bytes("VmRSS:"); }
int64_t peak_resident_bytes() { return proc_status_bytes("VmHWM:"); }

bool reset_peak_resident() {
  // Linux (4.0 and later): writing 5 to clear_refs resets VmHWM to VmRSS.
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

MemoryTracker::MemoryTracker(nn::Module& model, const optim::Optimizer* optimizer)
    : model_(model), optimizer_(optimizer) {
  reset_peak_memory_stats();
  reserved_at_start_ = memory_stats().reserved;
  resident_reset_ = reset_peak_resident();
  resident_at_start_ = resident_bytes();
}

void MemoryTracker::after_forward(const DTensor& loss) {
  activations_ = graph_memory(loss, model_parameters(model_)).saved_bytes_by_rank;
}

MemoryReport MemoryTracker::report() const {
  const std::vector<DTensor> params = model_parameters(model_);
  StorageCount p, g, s;
  for (const DTensor& t : params) {
    p.add(t);
    if (const std::optional<DTensor> grad = t.grad()) g.add(*grad);
  }
  if (optimizer_ != nullptr)
    for (size_t i = 0; i < optimizer_->params().size(); ++i)
      for (const auto& [name, buffer] : optimizer_->state(i).buffers) s.add(buffer);
  MemoryReport r;
  for (int rank : model_.mesh().held_ranks()) {
    RankMemory m;
    m.rank = rank;
    m.parameters = p.of(rank);
    m.gradients = g.of(rank);
    m.optimizer_state = s.of(rank);
    for (const auto& [r2, bytes] : activations_)
      if (r2 == rank) m.activations = bytes;
    r.ranks.push_back(m);
  }
  r.process = memory_stats();
  r.reserved_at_start = reserved_at_start_;
  r.resident_at_start = resident_at_start_;
  r.peak_resident = resident_reset_ ? peak_resident_bytes() : 0;
  return r;
}

std::string MemoryReport::table() const {
  std::ostringstream os;
  os << RankMemory::header();
  for (const RankMemory& m : ranks) os << m.row();
  os << "  this process's peak: " << mib_text(process.peak_allocated) << " allocated, "
     << mib_text(process.peak_reserved) << " reserved (" << mib_text(reserved_at_start)
     << " at the start)";
  if (peak_resident > 0)
    os << "; resident set " << mib_text(resident_at_start) << " at the start, "
       << mib_text(peak_resident) << " at most";
  os << "\n";
  if (process.peak_unsharded_parameters > 0 || process.peak_communication_buffers > 0)
    os << "  of which at their peaks: unsharded parameters "
       << mib_text(process.peak_unsharded_parameters) << ", communication buffers "
       << mib_text(process.peak_communication_buffers) << "\n";
  return os.str();
}

std::string MemoryReport::json() const {
  std::ostringstream os;
  os << "{\"ranks\":[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankMemory& m = ranks[i];
    os << (i ? "," : "") << "{\"rank\":" << m.rank << ",\"parameters\":" << m.parameters
       << ",\"gradients\":" << m.gradients << ",\"optimizer_state\":" << m.optimizer_state
       << ",\"activations\":" << m.activations << "}";
  }
  os << "],\"peak_allocated\":" << process.peak_allocated
     << ",\"peak_reserved\":" << process.peak_reserved
     << ",\"peak_unsharded_parameters\":" << process.peak_unsharded_parameters
     << ",\"peak_communication_buffers\":" << process.peak_communication_buffers
     << ",\"reserved_at_start\":" << reserved_at_start
     << ",\"resident_at_start\":" << resident_at_start << ",\"peak_resident\":" << peak_resident
     << "}";
  return os.str();
}

}  // namespace dtensor
