// Internal: the process's thread pool and the one loop that uses it.
//
// parallel_for(n, grain, body) covers [0, n) with consecutive chunks of
// `grain` items (the last one shorter) and runs body(begin, end) once per
// chunk, on the calling thread and the pool's workers. The chunks depend
// only on n and grain, never on the thread count, so a caller that keeps one
// partial result per chunk and combines them in chunk order gets the same
// bits whatever num_threads() is. Each chunk should carry enough work to pay
// for waking a worker (tens of microseconds); n <= grain runs inline.
//
// Inside a region (on the caller or a worker) a nested parallel_for runs
// inline, so kernels called from a parallel rank loop stay single-threaded.
// A second thread of the program that calls parallel_for while the pool is
// busy also runs inline rather than waiting.
//
// When a chunk throws, the other chunks still run; the exception of the
// lowest chunk is rethrown on the caller, so which error a user sees does
// not depend on scheduling.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace dtensor::detail {

// A non-owning reference to a callable void(int64_t, int64_t): no
// allocation, unlike std::function.
class ChunkFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ChunkFn>>>
  ChunkFn(F&& f)  // NOLINT: implicit, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

void parallel_for(int64_t n, int64_t grain, ChunkFn body);

// Whether this thread is running inside a parallel region.
bool in_parallel_region();

// The memory category (memory.h's MemoryScope) this thread's allocations
// take; kept here, below the allocator, so that a parallel_for's workers
// run its chunks with their caller's (tensor/allocator.h reads it).
uint8_t& thread_memory_category();

// The threads a parallel_for started here would use: 1 inside a region,
// num_threads() outside.
int threads_available();

// Puts OpenBLAS on one thread, once (its results depend on its thread
// count; linalg threads big products itself). Cheap after the first call;
// linalg calls it before BLAS.
void init_blas_threads();

}  // namespace dtensor::detail
