// Matrix products through oneDNN (onednn_gemm.h). float32 runs dnnl_sgemm,
// which needs no set-up per shape; bfloat16 runs a matmul primitive (bf16
// in and out, float32 inside), made once per shape and calling thread and
// kept in a small per-thread cache (making one costs ~2 us, a 64^3 product
// ~1 us).
#include "tensor/onednn_gemm.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#define XXH_INLINE_ALL  // header-only, as in checkpoint/chunk_io.cc
#include <xxhash.h>

#include <cstring>
#include <functional>
#include <memory>

#include "common/lru_cache.h"
#include "tensor/allocator.h"

namespace dtensor::detail {
namespace {

void check(dnnl_status_t status, const char* what) {
  DT_CHECK(status == dnnl_success, "oneDNN: ", what, " failed with status ",
           static_cast<int>(status), " (a bug in dtensor's use of oneDNN, or out of memory)");
}

// Debian's oneDNN runs its kernels on OpenMP threads, as many as
// omp_get_max_threads() says. A product here must run on the calling
// thread alone (its bits would otherwise depend on the thread count), so
// the calling thread's OpenMP setting is 1 for the call and restored after
// (it is per thread, so a program's own OpenMP use is left as it was).
class OneThread {
 public:
  OneThread() : prev_(omp_get_max_threads()) {
    if (prev_ != 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (prev_ != 1) omp_set_num_threads(prev_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int prev_;
};

dnnl_engine_t engine() {
  static const dnnl_engine_t e = [] {
    dnnl_engine_t made = nullptr;
    check(dnnl_engine_create(&made, dnnl_cpu, 0), "creating the CPU engine");
    return made;  // lives as long as the process
  }();
  return e;
}

// A row-major rows x cols matrix with leading dimension ld, or its
// transpose read in place (ld then steps along cols).
dnnl_memory_desc_t matrix_desc(int rows, int cols, bool trans, int ld, dnnl_data_type_t type) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols};
  const dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
  check(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides), "describing a matrix");
  return md;
}

// One shape's matmul primitive with its memory objects (their data handles
// are set per call). The scratchpad (where the kernel packs its operands)
// is the calling thread's: left to oneDNN, each call malloc'ed and freed
// it, and glibc handed large ones back to the system, so every product
// faulted its pages in afresh.
struct Matmul {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, scratch = nullptr;
  size_t scratch_bytes = 0;
  Matmul() = default;
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  ~Matmul() {
    for (dnnl_memory_t m : {a, b, c, scratch})
      if (m) dnnl_memory_destroy(m);
    if (prim) dnnl_primitive_destroy(prim);
  }
};

// One shape of product: ten 4-byte fields, no padding, so its bytes are
// its value (scales compare by their bits).
struct Key {
  int ta, tb, n, m, k, lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};
static_assert(sizeof(Key) == 40, "Key must have no padding: it hashes and compares as bytes");

struct KeyHash {
  size_t operator()(const Key& key) const {
    return static_cast<size_t>(XXH3_64bits(&key, sizeof key));
  }
};

// Fills mm (fresh) with the primitive of key's shape.
void make_matmul(const Key& key, dnnl_data_type_t type, Matmul& mm) {
  // Around the primitive's creation too: it fixes its thread count then.
  OneThread one;
  const dnnl_memory_desc_t a = matrix_desc(key.n, key.k, key.ta, key.lda, type);
  const dnnl_memory_desc_t b = matrix_desc(key.k, key.m, key.tb, key.ldb, type);
  const dnnl_memory_desc_t c = matrix_desc(key.n, key.m, false, key.ldc, type);
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &a, &b, nullptr, &c), "describing a matmul");

  dnnl_primitive_attr_t attr = nullptr;
  check(dnnl_primitive_attr_create(&attr), "creating attributes");
  dnnl_post_ops_t ops = nullptr;
  check(dnnl_post_ops_create(&ops), "creating post-ops");
  dnnl_status_t status = dnnl_success;
  if (key.alpha != 1.0f) status = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key.alpha);
  if (status == dnnl_success && key.beta != 0.0f) status = dnnl_post_ops_append_sum(ops, key.beta);
  if (status == dnnl_success) status = dnnl_primitive_attr_set_post_ops(attr, ops);
  if (status == dnnl_success)
    status = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_primitive_desc_t pd = nullptr;
  if (status == dnnl_success)
    status = dnnl_primitive_desc_create(&pd, &desc, attr, engine(), nullptr);
  dnnl_post_ops_destroy(ops);
  dnnl_primitive_attr_destroy(attr);
  check(status, "creating a bfloat16 matmul");

  const dnnl_memory_desc_t* scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  mm.scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
  if (mm.scratch_bytes > 0)
    status = dnnl_memory_create(&mm.scratch, scratch, engine(), DNNL_MEMORY_NONE);
  if (status == dnnl_success) status = dnnl_primitive_create(&mm.prim, pd);
  dnnl_primitive_desc_destroy(pd);
  check(status, "creating a bfloat16 matmul");
  check(dnnl_memory_create(&mm.a, &a, engine(), DNNL_MEMORY_NONE), "creating a memory");
  check(dnnl_memory_create(&mm.b, &b, engine(), DNNL_MEMORY_NONE), "creating a memory");
  check(dnnl_memory_create(&mm.c, &c, engine(), DNNL_MEMORY_NONE), "creating a memory");
}

// The calling thread's stream and primitives (a model uses a few dozen
// shapes; the least recently used go beyond 256).
struct ThreadState {
  dnnl_stream_t stream = nullptr;
  LruCache<Key, Matmul, KeyHash, std::equal_to<Key>> cache{256};
  void* scratch = nullptr;  // the largest scratchpad asked for so far (allocator.h)
  size_t scratch_bytes = 0;
  ThreadState() {
    check(dnnl_stream_create(&stream, engine(), dnnl_stream_default_flags), "creating a stream");
  }
  ~ThreadState() {
    if (scratch) deallocate(scratch, scratch_bytes);
    dnnl_stream_destroy(stream);
  }
  void* scratch_of(size_t bytes) {
    if (bytes > scratch_bytes) {
      if (scratch) deallocate(scratch, scratch_bytes);
      scratch = allocate(bytes);
      DT_CHECK(scratch, "oneDNN: out of memory for a ", bytes, "-byte scratchpad");
      scratch_bytes = bytes;
    }
    return scratch;
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

void onednn_gemm(bool ta, bool tb, int n, int m, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  OneThread one;
  check(dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', n, m, k, alpha, a, lda, b, ldb, beta, c, ldc),
        "dnnl_sgemm");
}

void onednn_gemm(bool ta, bool tb, int n, int m, int k, float alpha, const BFloat16* a, int lda,
                 const BFloat16* b, int ldb, float beta, BFloat16* c, int ldc) {
  const Key key{ta, tb, n, m, k, lda, ldb, ldc, alpha, beta};
  ThreadState& state = thread_state();
  std::shared_ptr<const Matmul> cached = state.cache.find(key);
  if (!cached) {
    auto made = std::make_shared<Matmul>();
    make_matmul(key, dnnl_bf16, *made);
    state.cache.insert(key, made);
    cached = std::move(made);
  }
  const Matmul& mm = *cached;
  check(dnnl_memory_set_data_handle(mm.a, const_cast<BFloat16*>(a)), "setting a's data");
  check(dnnl_memory_set_data_handle(mm.b, const_cast<BFloat16*>(b)), "setting b's data");
  check(dnnl_memory_set_data_handle(mm.c, c), "setting c's data");
  if (mm.scratch)
    check(dnnl_memory_set_data_handle(mm.scratch, state.scratch_of(mm.scratch_bytes)),
          "setting the scratchpad");
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm.a},
                                  {DNNL_ARG_WEIGHTS, mm.b},
                                  {DNNL_ARG_DST, mm.c},
                                  {DNNL_ARG_SCRATCHPAD, mm.scratch}};
  OneThread one;
  check(dnnl_primitive_execute(mm.prim, state.stream, mm.scratch ? 4 : 3, args),
        "running a bfloat16 matmul");
  check(dnnl_stream_wait(state.stream), "waiting for a bfloat16 matmul");
}

bool native_half_gemm(DType half) {
  if (half != DType::BFloat16) return false;
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
}

}  // namespace dtensor::detail
