// Internal: an op's kernel run on every shard this process holds — the rank
// loop of the simulated world — in parallel on the thread pool when the
// shards carry enough work to pay for it.
//
// Each shard's result goes to its own slot, so the output is the same
// whatever the thread count; a kernel runs inside the region, so it is
// single-threaded there (parallel.h). Under MPI a process holds one shard
// and the kernel itself may use the process's threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "dtensor/local_tensor.h"

namespace dtensor::detail {

// Below this many input bytes over all shards an op runs its ranks one
// after another: waking a worker costs more than such a kernel.
inline constexpr int64_t kParallelShardBytes = int64_t{256} << 10;

// body(begin, end) over `items` independent tasks that move `bytes` in
// all: on the pool when the bytes pay for waking workers, in chunks of
// about kParallelShardBytes each; inline otherwise. Each task must write
// only its own outputs, so the thread count never changes a bit.
inline void parallel_items(int64_t items, int64_t bytes, ChunkFn body) {
  if (items > 1 && bytes >= kParallelShardBytes && threads_available() > 1) {
    const int64_t per_item = std::max<int64_t>(1, bytes / items);
    parallel_for(items, std::max<int64_t>(1, kParallelShardBytes / per_item), body);
  } else {
    body(0, items);
  }
}

// The shard index i of `like` -> kernel(i), kept under like's ranks.
// bytes_per_shard() gives the input bytes one shard's kernel reads (an
// estimate of its work); it is only asked when the loop could go parallel,
// so a one-shard process or a one-thread setting never pays for it.
template <class B, class F>
LocalTensor map_shards(const LocalTensor& like, B&& bytes_per_shard, F&& kernel) {
  const std::vector<std::pair<int, Tensor>>& in = like.shards();
  const int64_t n = static_cast<int64_t>(in.size());
  if (n < 2 || threads_available() < 2 || bytes_per_shard() * n < kParallelShardBytes) {
    // The common small case, at no cost over a plain loop: map runs in
    // rank order on this thread, so counting calls gives the index.
    int64_t k = 0;
    return like.map([&](int, const Tensor&) { return kernel(k++); });
  }
  std::vector<std::pair<int, Tensor>> out(in.size());
  parallel_items(n, bytes_per_shard() * n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = {in[i].first, kernel(i)};
  });
  return LocalTensor(std::move(out));
}

}  // namespace dtensor::detail
