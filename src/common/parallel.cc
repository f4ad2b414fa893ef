// The thread pool behind parallel_for (parallel.h) and the thread setting
// (dtensor/threads.h).
//
// One region runs at a time. The caller publishes the job under the mutex,
// wakes the workers and runs chunks itself; chunks are handed out by an
// atomic counter, so a slow or descheduled worker never holds up the others
// (on a shared 2-core machine that happens all the time). Before returning,
// the caller closes the job (no worker may join it afterwards) and waits for
// the workers that did join, so nothing touches the job's stack frame once
// parallel_for has returned.
#include "common/parallel.h"

#include <cblas.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/error.h"
#include "dtensor/threads.h"

namespace dtensor {

namespace {

constinit thread_local bool in_region = false;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n > 0 && n <= 1024) ? static_cast<int>(n) : -1;
}

int default_threads() {
  const int env = env_int("DTENSOR_NUM_THREADS");
  DT_CHECK(env >= 0, "DTENSOR_NUM_THREADS=", std::getenv("DTENSOR_NUM_THREADS"),
           " is not a thread count (expected an integer from 1 to 1024)");
  if (env > 0) return env;
  int cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores <= 0) cores = 1;
  // Processes an MPI launcher put on this node share its cores.
  int local = 0;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if ((local = env_int(name)) > 0) break;
  }
  return local > 1 ? std::max(1, cores / local) : cores;
}

constinit thread_local uint8_t memory_category = 0;

struct Job {
  int64_t n = 0, grain = 1, chunks = 0;
  uint8_t memory_category = 0;  // the caller's, which its workers take
  const detail::ChunkFn* body = nullptr;
  std::atomic<int64_t> next{0};
  int joined = 0, finished = 0;  // workers; under Pool::mu_
  std::mutex err_mu;
  int64_t err_chunk = std::numeric_limits<int64_t>::max();
  std::exception_ptr err;

  void run_chunks() {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t begin = c * grain;
      const int64_t end = std::min(n, begin + grain);
      try {
        (*body)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (c < err_chunk) {
          err_chunk = c;
          err = std::current_exception();
        }
      }
    }
  }
};

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  // Runs the job on this thread and the workers; false (nothing run) when
  // another thread's region holds the pool.
  bool run(Job& job) {
    std::unique_lock<std::mutex> region(region_mu_, std::try_to_lock);
    if (!region.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    job.run_chunks();
    std::unique_lock<std::mutex> lock(mu_);
    job_ = nullptr;  // late workers no longer join
    done_.wait(lock, [&] { return job.finished == job.joined; });
    return true;
  }

 private:
  void work() {
    in_region = true;  // whatever a worker runs is inside a region
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      Job* job = job_;
      ++job->joined;
      lock.unlock();
      const uint8_t own = memory_category;
      memory_category = job->memory_category;
      job->run_chunks();
      memory_category = own;
      lock.lock();
      ++job->finished;
      if (job->finished == job->joined) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex region_mu_;  // one region at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

std::mutex setting_mu;
std::atomic<int> setting{0};     // 0: not read yet
std::shared_ptr<Pool> the_pool;  // under setting_mu

int current_setting() {
  int n = setting.load(std::memory_order_acquire);
  if (n > 0) return n;
  std::lock_guard<std::mutex> lock(setting_mu);
  if (setting.load() == 0) setting.store(default_threads(), std::memory_order_release);
  return setting.load();
}

std::shared_ptr<Pool> pool() {
  const int n = current_setting();
  std::lock_guard<std::mutex> lock(setting_mu);
  if (!the_pool || the_pool->workers() != n - 1) {
    the_pool.reset();  // joins the old workers first
    the_pool = std::make_shared<Pool>(n - 1);
  }
  return the_pool;
}

}  // namespace

int num_threads() { return current_setting(); }

void set_num_threads(int n) {
  DT_CHECK(n >= 1 && n <= 1024, "set_num_threads: ", n,
           " is not a thread count (expected 1 <= n <= 1024)");
  DT_CHECK(!in_region, "set_num_threads(", n, ") called inside a parallel region");
  current_setting();
  setting.store(n, std::memory_order_release);
}

namespace detail {

bool in_parallel_region() { return in_region; }

int threads_available() { return in_region ? 1 : current_setting(); }

// OpenBLAS's sgemm gives different bits on different thread counts (it
// picks other kernels and splits), so it always runs on one thread and
// linalg splits a big product into fixed blocks itself.
void init_blas_threads() {
  static const bool done = (openblas_set_num_threads(1), true);
  (void)done;
}

uint8_t& thread_memory_category() { return memory_category; }

void parallel_for(int64_t n, int64_t grain, ChunkFn body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || in_region || current_setting() == 1) {
    // Inline, in chunk order. One chunk leaves the region state alone, so
    // the work inside (one rank's kernel under MPI, say) may still split.
    for (int64_t b = 0; b < n; b += grain) body(b, std::min(n, b + grain));
    return;
  }
  Job job;
  job.n = n;
  job.grain = grain;
  job.chunks = chunks;
  job.body = &body;
  job.memory_category = memory_category;
  init_blas_threads();
  std::shared_ptr<Pool> p = pool();
  in_region = true;
  const bool ran = p->run(job);
  if (!ran) job.run_chunks();  // another thread's region holds the pool
  in_region = false;
  if (job.err) std::rethrow_exception(job.err);
}

}  // namespace detail

}  // namespace dtensor
