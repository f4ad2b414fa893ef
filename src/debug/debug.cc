// CommDebugMode and record_collective: counting the collectives the backends
// run. Active modes sit in one global list behind a mutex; record_collective
// adds to every active mode of the calling thread, which is what makes nesting work (an outer mode
// sees everything an inner one sees). An atomic count of active modes lets
// record_collective skip the lock entirely when no mode is alive, the normal
// case in production. VerifyMode is kept the same way, with the
// comparison its checks use (verify.h). (visualize_sharding, also declared
// in debug.h, is visualize.cc.)
#include "dtensor/debug.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "debug/verify.h"
#include "dtensor/error.h"

namespace dtensor {

namespace {

// The live modes of one kind, behind a mutex, and a count readable without
// it. Never destroyed: modes may outlive statics.
template <class Mode>
struct ModeList {
  std::mutex mu;
  std::vector<Mode*> active;
  std::atomic<int> num_active{0};

  void add(Mode* mode) {
    std::lock_guard<std::mutex> lock(mu);
    active.push_back(mode);
    num_active.store(static_cast<int>(active.size()), std::memory_order_release);
  }
  void remove(Mode* mode) {
    std::lock_guard<std::mutex> lock(mu);
    active.erase(std::remove(active.begin(), active.end(), mode), active.end());
    num_active.store(static_cast<int>(active.size()), std::memory_order_release);
  }
};

using Registry = ModeList<CommDebugMode>;

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

constexpr CollectiveKind kAllKinds[kNumCollectiveKinds] = {
    CollectiveKind::AllGather, CollectiveKind::AllReduce, CollectiveKind::ReduceScatter,
    CollectiveKind::AllToAll,  CollectiveKind::Broadcast, CollectiveKind::Scatter,
    CollectiveKind::BoxExchange};

}  // namespace

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Scatter: return "scatter";
    case CollectiveKind::BoxExchange: return "box_exchange";
  }
  return "unknown";
}

std::string to_string(const CollectiveRecord& record) {
  std::ostringstream os;
  os << to_string(record.kind);
  if (record.mesh_dim >= 0) os << " mesh dim " << record.mesh_dim;
  os << " " << dtype_name(record.dtype) << " " << record.bytes << " bytes";
  return os.str();
}

CommDebugMode::CommDebugMode() : owner_(std::this_thread::get_id()) { registry().add(this); }

CommDebugMode::~CommDebugMode() { registry().remove(this); }

void record_collective(CollectiveKind kind, int64_t bytes_per_rank, DType dtype, int mesh_dim) {
  Registry& r = registry();
  if (r.num_active.load(std::memory_order_acquire) == 0 || verify_detail::inside_check()) return;
  const auto k = static_cast<size_t>(kind);
  const std::thread::id self = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(r.mu);
  for (CommDebugMode* mode : r.active) {
    if (mode->owner_ != self) continue;
    mode->counts_[k] += 1;
    mode->bytes_[k] += bytes_per_rank;
    mode->records_.push_back(CollectiveRecord{kind, mesh_dim, bytes_per_rank, dtype});
  }
}

namespace {
thread_local int collective_depth = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

CollectiveTimer::CollectiveTimer() {
  if (collective_depth++ > 0) return;
  if (registry().num_active.load(std::memory_order_acquire) == 0) return;
  start_ns_ = now_ns();
}

CollectiveTimer::~CollectiveTimer() {
  --collective_depth;
  if (start_ns_ < 0) return;
  const double seconds = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  Registry& r = registry();
  const std::thread::id self = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(r.mu);
  for (CommDebugMode* mode : r.active)
    if (mode->owner_ == self) mode->collective_seconds_ += seconds;
}

double CommDebugMode::collective_seconds() const {
  std::lock_guard<std::mutex> lock(registry().mu);
  return collective_seconds_;
}

bool collectives_observed() {
  return registry().num_active.load(std::memory_order_acquire) != 0 ||
         collective_trace() != nullptr;
}

void record_plan_run(double cost_us) {
  Registry& r = registry();
  if (r.num_active.load(std::memory_order_acquire) == 0 || verify_detail::inside_check()) return;
  const std::thread::id self = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(r.mu);
  for (CommDebugMode* mode : r.active) {
    if (mode->owner_ != self) continue;
    mode->planned_cost_us_ += cost_us;
    mode->plans_run_ += 1;
  }
}

// The readers take the registry lock too: another thread may be recording
// into this mode at the same moment.
int64_t CommDebugMode::count(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(registry().mu);
  return counts_[static_cast<size_t>(kind)];
}

int64_t CommDebugMode::count(CollectiveKind kind, DType dtype) const {
  std::lock_guard<std::mutex> lock(registry().mu);
  int64_t n = 0;
  for (const CollectiveRecord& r : records_) n += r.kind == kind && r.dtype == dtype;
  return n;
}

int64_t CommDebugMode::bytes(CollectiveKind kind, DType dtype) const {
  std::lock_guard<std::mutex> lock(registry().mu);
  int64_t n = 0;
  for (const CollectiveRecord& r : records_)
    if (r.kind == kind && r.dtype == dtype) n += r.bytes;
  return n;
}

std::vector<CollectiveRecord> CommDebugMode::collectives() const {
  std::lock_guard<std::mutex> lock(registry().mu);
  return records_;
}

int64_t CommDebugMode::total_count() const {
  std::lock_guard<std::mutex> lock(registry().mu);
  int64_t total = 0;
  for (int64_t c : counts_) total += c;
  return total;
}

int64_t CommDebugMode::bytes(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(registry().mu);
  return bytes_[static_cast<size_t>(kind)];
}

double CommDebugMode::planned_cost_us() const {
  std::lock_guard<std::mutex> lock(registry().mu);
  return planned_cost_us_;
}

int64_t CommDebugMode::plans_run() const {
  std::lock_guard<std::mutex> lock(registry().mu);
  return plans_run_;
}

std::string CommDebugMode::table() const {
  std::vector<CollectiveRecord> records;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    records = records_;
  }
  // Rows: per kind, each dtype that ran (in DType order), or one empty row.
  struct Row {
    std::string kind, dtype;
    int64_t count = 0, bytes = 0;
  };
  std::vector<Row> rows;
  Row total{"total", "", 0, 0};
  for (CollectiveKind kind : kAllKinds) {
    std::map<DType, Row> by_dtype;
    for (const CollectiveRecord& r : records) {
      if (r.kind != kind) continue;
      Row& row = by_dtype[r.dtype];
      row.count += 1;
      row.bytes += r.bytes;
    }
    if (by_dtype.empty()) rows.push_back(Row{to_string(kind), "-", 0, 0});
    for (auto& [dtype, row] : by_dtype) {
      row.kind = to_string(kind);
      row.dtype = dtype_name(dtype);
      total.count += row.count;
      total.bytes += row.bytes;
      rows.push_back(row);
    }
  }
  // Column widths fit the widest entry, so the table stays aligned however
  // large the byte counts grow.
  const int count_w = std::max<int>(5, static_cast<int>(std::to_string(total.count).size()));
  const int bytes_w = std::max<int>(5, static_cast<int>(std::to_string(total.bytes).size()));
  std::ostringstream os;
  auto line = [&](const std::string& name, const std::string& dtype, const std::string& count,
                  const std::string& b) {
    os << std::left << std::setw(14) << name << "  " << std::setw(8) << dtype << "  "
       << std::right << std::setw(count_w) << count << "  " << std::setw(bytes_w) << b << "\n";
  };
  line("collective", "dtype", "count", "bytes");
  for (const Row& r : rows)
    line(r.kind, r.dtype, std::to_string(r.count), std::to_string(r.bytes));
  line(total.kind, total.dtype, std::to_string(total.count), std::to_string(total.bytes));
  return os.str();
}

std::string CommDebugMode::json() const {
  std::array<int64_t, kNumCollectiveKinds> counts;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    counts = counts_;
  }
  // Hand-written: the keys are fixed identifiers and the values integers, so
  // nothing needs escaping, and the library does not link nlohmann-json.
  std::ostringstream os;
  os << "{";
  int64_t total = 0;
  for (CollectiveKind kind : kAllKinds) {
    const auto k = static_cast<size_t>(kind);
    os << "\"" << to_string(kind) << "\":" << counts[k] << ",";
    total += counts[k];
  }
  os << "\"total\":" << total << "}";
  return os.str();
}

}  // namespace dtensor

namespace dtensor {

namespace {

struct Notes {
  std::mutex mu;
  std::vector<std::string> notes;
};

Notes& notes() {
  static Notes* n = new Notes();  // never destroyed: notes may come during exit
  return *n;
}

}  // namespace

// ---- VerifyMode ----

namespace {

using VerifyRegistry = ModeList<VerifyMode>;

bool verify_env() {
  const char* v = std::getenv("DTENSOR_VERIFY");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

VerifyRegistry& verify_registry() {
  static VerifyRegistry* r = new VerifyRegistry();
  return *r;
}

thread_local bool in_check = false;

}  // namespace

// verify_detail::active counts the modes too (plus the environment's), so
// that an op tests one atomic.
VerifyMode::VerifyMode() {
  verify_registry().add(this);
  verify_detail::active.fetch_add(1);
}

VerifyMode::~VerifyMode() {
  verify_registry().remove(this);
  verify_detail::active.fetch_sub(1);
}

int64_t VerifyMode::checks() const {
  std::lock_guard<std::mutex> lock(verify_registry().mu);
  return checks_;
}

bool verify_enabled() { return verify_detail::active.load() != 0; }

void record_verification() {
  VerifyRegistry& r = verify_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (VerifyMode* mode : r.active) mode->checks_ += 1;
}

namespace verify_detail {

// Read before main; an op run during static initialisation elsewhere sees 0
// (off), which is harmless.
std::atomic<int> active{verify_env() ? 1 : 0};

bool inside_check() { return in_check; }

CheckScope::CheckScope() : outer_(in_check) { in_check = true; }
CheckScope::~CheckScope() { in_check = outer_; }

std::optional<DType> least_precise(const std::vector<DType>& dtypes) {
  std::optional<DType> out;
  for (DType d : dtypes)
    if (d == DType::BFloat16 || (d == DType::Float16 && !out)) out = d;
  return out;
}

void expect_match(const Tensor& got, const Tensor& want, const std::string& what,
                  const char* reference, std::optional<DType> precision) {
  DT_CHECK(got.shape() == want.shape() && got.dtype() == want.dtype(), "verify: ", what,
           ": the result is a ", got.dtype(), " tensor of shape ", got.shape(),
           " but ", reference, " is a ", want.dtype(), " tensor of shape ", want.shape());
  if (got.numel() == 0) return;
  const bool floating = is_floating(got.dtype());
  // The 16-bit floats: each rank's piece and each collective's result is
  // rounded once to the type, at the magnitude of the pieces, where the
  // replicated op rounds once: 2 eps of the type relative to the element
  // and to the largest |reference| (eps 2^-7 for bfloat16, 2^-10 for
  // float16).
  double rtol = 1e-4, atol = 1e-5;
  const DType p = precision ? least_precise({*precision, got.dtype()}).value_or(got.dtype())
                            : got.dtype();
  const bool half = floating && is_half(p);
  if (half) {
    const double eps = p == DType::BFloat16 ? 0x1p-7 : 0x1p-10;
    rtol = 2 * eps;
    atol = 2 * eps * std::max(1.0, amax(abs(want.to(DType::Float64))).item<double>());
  }
  // NaN where the reference has NaN is a match (a 0/0 both ways).
  const bool same = floating ? allclose(got, want, rtol, atol, /*equal_nan=*/true)
                             : equal(got, want);
  if (same) return;
  DT_THROW("verify: ", what, ": the result differs from ", reference, " (largest |difference| ",
           max_abs_diff(got.to(DType::Float64), want.to(DType::Float64)),
           !floating ? std::string(", expected an exact match)")
           : half
               ? ", tolerance " + std::to_string(atol) + " + " + std::to_string(rtol) +
                     "·|reference|)"
               : std::string(", tolerance 1e-5 + 1e-4·|reference|)"));
}

}  // namespace verify_detail

std::vector<std::string> debug_notes() {
  std::lock_guard<std::mutex> lock(notes().mu);
  return notes().notes;
}

void clear_debug_notes() {
  std::lock_guard<std::mutex> lock(notes().mu);
  notes().notes.clear();
}

void note_once(const std::string& note) {
  // A check's rerun on replicated inputs is not the user's op: no notes.
  if (verify_detail::inside_check()) return;
  std::lock_guard<std::mutex> lock(notes().mu);
  auto& all = notes().notes;
  if (std::find(all.begin(), all.end(), note) != all.end()) return;
  all.push_back(note);
  if (std::getenv("DTENSOR_DEBUG") != nullptr) std::cerr << "dtensor: " << note << "\n";
}

}  // namespace dtensor
