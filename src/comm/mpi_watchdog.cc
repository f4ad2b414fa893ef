// CollectiveMonitor and the watchdog thread (see mpi_watchdog.h).
//
// Why shared memory and not an arrival message per collective: a message
// costs a small-message latency on every collective, and the watchdog
// thread may not call MPI (MPI_THREAD_FUNNELED), so it could not read the
// answer anyway while the main thread is blocked in the collective. Plain
// stores to a node-shared window cost a few nanoseconds and can be read by
// any thread of any rank of the node.
#include "comm/mpi_watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include "dtensor/error.h"


namespace dtensor {

namespace {

const char* const kKindNames[] = {"all_gather", "all_reduce", "reduce_scatter",
                                  "all_to_all", "broadcast",  "scatter",
                                  "box_exchange"};

// Milliseconds from seconds; throws naming `what` unless a number >= 0
// (a typo must not silently leave the default in force). Infinity, like 0,
// is no timeout (0 ms); finite values beyond ~290,000 years are refused
// rather than wrapped.
int64_t checked_ms(double seconds, const std::string& what) {
  DT_CHECK(!std::isnan(seconds) && seconds >= 0 && (std::isinf(seconds) || seconds < 9.2e15), what,
           ": expected a number of seconds >= 0 (0 or inf turns the timeout off)");
  return std::isinf(seconds) ? 0 : static_cast<int64_t>(seconds * 1000);
}

// Read from DTENSOR_COLLECTIVE_TIMEOUT on first use, which is the main
// thread's CollectiveMonitor: a malformed value is an error there, on every
// rank alike, before any collective.
std::atomic<int64_t>& timeout_ms() {
  static std::atomic<int64_t>* ms = [] {
    int64_t value = 600 * 1000;
    if (const char* env = std::getenv("DTENSOR_COLLECTIVE_TIMEOUT"); env != nullptr && *env) {
      char* end = nullptr;
      const double v = std::strtod(env, &end);
      const std::string what = "DTENSOR_COLLECTIVE_TIMEOUT='" + std::string(env).substr(0, 40) + "'";
      DT_CHECK(end != env && *end == '\0', what, ": expected a number of seconds >= 0 (0 or inf turns the timeout off)");
      value = checked_ms(v, what);
    }
    return new std::atomic<int64_t>(value);
  }();
  return *ms;
}

// The monitors of this process (one per MPI world), never destroyed: the
// watchdog thread may look at the list until the process ends.
struct Registry {
  std::mutex mu;
  std::vector<CollectiveMonitor*> monitors;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

[[noreturn]] void watchdog_loop() {
  for (;;) {
    const double timeout = collective_timeout_seconds();
    // Ten looks per timeout, at most every 100 ms: a short timeout for tests
    // fires within a tenth of itself, a long one costs ten wake-ups a second.
    const double period = timeout > 0 ? std::clamp(timeout / 10, 0.01, 0.1) : 0.1;
    std::this_thread::sleep_for(std::chrono::duration<double>(period));
    if (timeout <= 0) continue;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(registry().mu);
    for (CollectiveMonitor* m : registry().monitors) {
      const std::string text = m->overdue(now, timeout);
      if (text.empty()) continue;
      print_rank_message(m->rank(), text);
      // No MPI call from this thread (the world is MPI_THREAD_FUNNELED): a
      // rank that exits non-zero without finalising makes mpirun end the
      // job.
      _exit(1);
    }
  }
}

void start_watchdog() {
  static std::once_flag once;
  std::call_once(once, [] { std::thread(watchdog_loop).detach(); });
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

double collective_timeout_seconds() { return static_cast<double>(timeout_ms().load()) / 1000; }

void set_collective_timeout_seconds(double seconds) {
  timeout_ms().store(
      checked_ms(seconds, "set_mpi_collective_timeout(" + std::to_string(seconds) + ")"));
}

const char* collective_kind_name(int k) {
  return k >= 0 && k < 7 ? kKindNames[k] : "an unknown collective";
}

uint64_t group_hash(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(r));
    h *= 1099511628211ull;
  }
  return h ^ ranks.size();
}

void print_rank_message(int rank, const std::string& text) {
  const std::string line = "dtensor: rank " + std::to_string(rank) + ": " + text + "\n";
  std::fflush(stderr);
  size_t at = 0;
  while (at < line.size()) {
    const ssize_t n = ::write(2, line.data() + at, line.size() - at);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
}

CollectiveMonitor::CollectiveMonitor(MPI_Comm comm) {
  collective_timeout_seconds();  // reads (and checks) DTENSOR_COLLECTIVE_TIMEOUT here, not later
  MPI_Comm_rank(comm, &rank_);
  int size = 1;
  MPI_Comm_size(comm, &size);
  slots_.assign(static_cast<size_t>(size), nullptr);
  mine_ = &own_;
  slots_[rank_] = &own_;
  // The node's ranks share one window of one slot each. Any failure leaves
  // this rank with its own slot only (its peers are then "unknown").
  bool ok = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_) ==
            MPI_SUCCESS;
  void* base = nullptr;
  if (ok)
    ok = MPI_Win_allocate_shared(sizeof(RankSlot), 1, MPI_INFO_NULL, node_, &base, &win_) ==
         MPI_SUCCESS;
  int node_size = 0;
  if (ok) ok = MPI_Comm_size(node_, &node_size) == MPI_SUCCESS;
  std::vector<int> world_rank(static_cast<size_t>(std::max(node_size, 1)));
  if (ok)
    ok = MPI_Allgather(&rank_, 1, MPI_INT, world_rank.data(), 1, MPI_INT, node_) == MPI_SUCCESS;
  if (ok) {
    for (int i = 0; i < node_size; ++i) {
      MPI_Aint bytes = 0;
      int unit = 0;
      void* at = nullptr;
      if (MPI_Win_shared_query(win_, i, &bytes, &unit, &at) != MPI_SUCCESS || at == nullptr) {
        ok = false;
        break;
      }
      slots_[world_rank[i]] = static_cast<RankSlot*>(at);
    }
  }
  if (ok) {
    mine_ = slots_[rank_];
    new (mine_) RankSlot();  // the window's memory starts uninitialised
    // Every slot of the node is initialised before anyone reads one.
    MPI_Barrier(node_);
  } else {
    std::fill(slots_.begin(), slots_.end(), nullptr);
    slots_[rank_] = &own_;
    mine_ = &own_;
  }
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().monitors.push_back(this);
  }
  start_watchdog();
}

CollectiveMonitor::~CollectiveMonitor() {
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto& v = registry().monitors;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void CollectiveMonitor::publish(int64_t state, int kind, int mesh_dim,
                                const std::vector<int>* ranks, uint64_t group, int64_t seq) {
  RankSlot& s = *mine_;
  const uint64_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.state.store(state, std::memory_order_relaxed);
  if (state == kInCollective) {
    s.kind.store(kind, std::memory_order_relaxed);
    s.mesh_dim.store(mesh_dim, std::memory_order_relaxed);
    s.seq.store(seq, std::memory_order_relaxed);
    if (s.group.load(std::memory_order_relaxed) != group) {
      // The member list changes only with the group.
      const int n = static_cast<int>(ranks->size());
      s.group_size.store(n, std::memory_order_relaxed);
      for (int i = 0; i < std::min(n, RankSlot::kMaxRanks); ++i)
        s.ranks[i].store((*ranks)[i], std::memory_order_relaxed);
      s.group.store(group, std::memory_order_relaxed);
    }
  }
  s.version.store(v + 2, std::memory_order_release);
}

bool CollectiveMonitor::read_slot(int r, Snapshot& out) const {
  if (r < 0 || r >= static_cast<int>(slots_.size()) || slots_[r] == nullptr) return false;
  const RankSlot& s = *slots_[r];
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;
    out.state = s.state.load(std::memory_order_relaxed);
    out.kind = s.kind.load(std::memory_order_relaxed);
    out.mesh_dim = s.mesh_dim.load(std::memory_order_relaxed);
    out.group = s.group.load(std::memory_order_relaxed);
    out.seq = s.seq.load(std::memory_order_relaxed);
    out.group_size = s.group_size.load(std::memory_order_relaxed);
    const int n = static_cast<int>(std::clamp<int64_t>(out.group_size, 0, RankSlot::kMaxRanks));
    out.ranks.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) out.ranks[i] = s.ranks[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) == v1) return true;
  }
  return false;
}

void CollectiveMonitor::enter(int kind, int mesh_dim, const std::vector<int>* ranks,
                              uint64_t group, int64_t seq) {
  active_.store(false, std::memory_order_relaxed);
  kind_.store(kind, std::memory_order_relaxed);
  mesh_dim_.store(mesh_dim, std::memory_order_relaxed);
  ranks_.store(ranks, std::memory_order_relaxed);
  group_.store(group, std::memory_order_relaxed);
  seq_.store(seq, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_release);
  active_.store(true, std::memory_order_release);
  publish(kInCollective, kind, mesh_dim, ranks, group, seq);
}

void CollectiveMonitor::leave() {
  active_.store(false, std::memory_order_release);
  publish(kIdle, 0, 0, nullptr, 0, 0);
}

void CollectiveMonitor::mark_exited() {
  active_.store(false, std::memory_order_release);
  publish(kExited, 0, 0, nullptr, 0, 0);
}

std::string CollectiveMonitor::member_state(int r, int kind_here, uint64_t group, int64_t seq,
                                            bool* arrived) const {
  *arrived = false;
  Snapshot s;
  if (r == rank_) {
    *arrived = true;
    return "arrived";
  }
  if (slots_[r] == nullptr) return "unknown (another node)";
  if (!read_slot(r, s)) return "unknown (its state is being rewritten)";
  const std::string kind = collective_kind_name(static_cast<int>(s.kind));
  if (s.state == kExited) return "exited";
  if (s.group == group && s.seq == seq && s.kind != kind_here) {
    return "in " + kind + " instead, at the same call (a desync: DTENSOR_MPI_CHECK=1 names both "
           "sides)";
  }
  if (s.group == group && s.seq == seq) {
    if (s.state == kInCollective) {
      *arrived = true;
      return "arrived";
    }
    *arrived = true;
    return "arrived and left";
  }
  if (s.group == group && s.seq > seq) {
    *arrived = true;
    return "passed it (now at call #" + std::to_string(s.seq) + ")";
  }
  std::string last = s.seq == 0 ? "no collective yet"
                                : kind + " over mesh dim " + std::to_string(s.mesh_dim) +
                                      " (ranks " + ranks_text(s.ranks) + ", call #" +
                                      std::to_string(s.seq) + " on that group)";
  if (s.state == kInCollective) return "waiting in " + last;
  return "not in a collective (last: " + last + ")";
}

std::string CollectiveMonitor::overdue(std::chrono::steady_clock::time_point now,
                                       double timeout_s) {
  if (!active_.load(std::memory_order_acquire)) {
    seen_gen_ = 0;
    return "";
  }
  const uint64_t gen = gen_.load(std::memory_order_acquire);
  if (gen != seen_gen_) {  // a collective not seen before: time it from now
    seen_gen_ = gen;
    seen_since_ = now;
    return "";
  }
  const double waited = std::chrono::duration<double>(now - seen_since_).count();
  if (waited < timeout_s) return "";
  const int kind = kind_.load(std::memory_order_relaxed);
  const int mesh_dim = mesh_dim_.load(std::memory_order_relaxed);
  const std::vector<int>* ranks = ranks_.load(std::memory_order_relaxed);
  const uint64_t group = group_.load(std::memory_order_relaxed);
  const int64_t seq = seq_.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (gen_.load(std::memory_order_relaxed) != gen || ranks == nullptr) return "";  // it moved on
  std::ostringstream os;
  os << "collective timeout: " << collective_kind_name(kind) << " over mesh dim " << mesh_dim
     << " (group of ranks " << ranks_text(*ranks) << ", call #" << seq
     << " on it) has not completed after " << seconds_text(waited)
     << " s (DTENSOR_COLLECTIVE_TIMEOUT=" << seconds_text(timeout_s) << ")";
  std::vector<std::string> missing;
  bool all_known = true;
  for (int r : *ranks) {
    bool arrived = false;
    const std::string what = member_state(r, kind, group, seq, &arrived);
    if (!arrived) missing.push_back("rank " + std::to_string(r) + ": " + what);
    if (slots_[r] == nullptr) all_known = false;
  }
  if (!missing.empty()) {
    os << "; not arrived:";
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? "; " : " ") << missing[i];
  } else if (all_known) {
    os << "; every member arrived (a rank is stopped inside it, or they called different "
          "collectives: DTENSOR_MPI_CHECK=1 compares them)";
  }
  os << ". Ending the job.";
  return os.str();
}

}  // namespace dtensor
