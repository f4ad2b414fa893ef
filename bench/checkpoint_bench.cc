// Distributed checkpoints of a 1 GiB model (8 float32 tensors of 8192 x
// 4096, 128 MiB each) against plain I/O of the same bytes to the same disk.
// Runs in the simulated world of 4 ranks, or one rank per process under
// `mpirun -np 4 checkpoint_bench` (every benchmark has a fixed iteration
// count, so the processes' collectives line up; rank 0 reports). The plain
// runs are one stream on rank 0's process.
//
//   BM_PlainWrite   one file, sequential write() of a 1 GiB buffer + fsync
//   BM_PlainRead    the same file read back with read() into a 1 GiB buffer
//                   (as a load fills a model's memory, not one hot buffer)
//   BM_Save         checkpoint::save of the model laid out Shard(0) on a mesh {4}
//   BM_LoadSame     checkpoint::load into the layout it was saved from
//   BM_LoadReshard  load into (Shard(1), Replicate) on a 2 x 2 mesh: every rank
//                   reads a column block of every saved chunk
//   BM_SaveVsPlainWrite, BM_LoadSameVsPlainRead
//                   the save and the same-layout load each paired with its
//                   plain yardstick (bench::paired: the two alternate, so they
//                   see the same load of the machine and the same disk);
//                   counters in ms and `ratio`, checkpoint / plain
//   BM_Checksum/B   the block checksum over B bytes (4 MiB: in the cache, as
//                   save and load hash a block just written or read; 256 MiB:
//                   from memory), the widest copy the CPU has paired with
//                   the baseline (SSE2) one; `ratio`, widest / baseline
//
// Counters: bytes_per_second (the model's bytes over the wall time) and
// peak_extra_MiB, the growth of this process's peak resident memory
// during the operation beyond what it held before (Linux: VmHWM, reset
// through /proc/self/clear_refs), against largest_shard_MiB.
// The page cache is not dropped (that needs root and a quiet machine):
// reads of freshly written files are served from memory in both the plain
// and the checkpoint runs alike.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "checkpoint/checksum.h"
#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"
#include "tensor/simd.h"

namespace {

using namespace dtensor;

constexpr int kTensors = 8;
constexpr int64_t kRows = 8192, kCols = 4096;
constexpr int64_t kModelBytes = kTensors * kRows * kCols * 4;

World& world() {
  static World w = World::from_launcher(4);
  return w;
}

std::string dir() {
  static const std::string d = [] {
    const char* base = std::getenv("DTENSOR_BENCH_DIR");
    return std::string(base != nullptr ? base : "/tmp") + "/dtensor_checkpoint_bench";
  }();
  return d;
}

// Peak resident memory of this process (kB), and its reset to the current.
int64_t peak_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return 0;
}
int64_t resident_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

checkpoint::StateDict model(const DeviceMesh& mesh, const Placements& p, bool random) {
  checkpoint::StateDict state;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = "layers." + std::to_string(i) + ".weight";
    state[name] = from_local(
        [&](int rank) {
          const Shape local = DTensorSpec(mesh, p, Shape{kRows, kCols}, DType::Float32)
                                  .extent_of_rank(rank)
                                  ->local_shape;
          return random ? Tensor::rand(local, static_cast<uint64_t>(rank * 100 + i))
                        : Tensor::zeros(local);
        },
        mesh, p, {.shape = Shape{kRows, kCols}});
  }
  return state;
}

const DeviceMesh& mesh1() {
  static const DeviceMesh m(world(), Shape{world().size()});
  return m;
}

void report(benchmark::State& state, int64_t peak_before_kb, int64_t largest_shard_bytes) {
  state.SetBytesProcessed(state.iterations() * kModelBytes);
  state.counters["peak_extra_MiB"] =
      static_cast<double>(std::max<int64_t>(0, peak_kb() - peak_before_kb)) / 1024;
  state.counters["largest_shard_MiB"] = static_cast<double>(largest_shard_bytes) / (1 << 20);
}

// The plain runs' memory: 1 GiB, touched.
std::vector<char>& plain_buffer() {
  static std::vector<char> buf(static_cast<size_t>(kModelBytes), 1);
  return buf;
}
constexpr size_t kPlainChunk = size_t{64} << 20;  // bytes per write()/read() call

void BM_PlainWrite(benchmark::State& state) {
  std::vector<char>& buf = plain_buffer();
  const std::string path = dir() + "-plain.bin";
  for (auto _ : state) {
    if (world().holds(0)) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      for (size_t at = 0; at < buf.size(); at += kPlainChunk)
        if (::write(fd, buf.data() + at, kPlainChunk) < 0) state.SkipWithError("write failed");
      ::fsync(fd);
      ::close(fd);
    }
  }
  state.SetBytesProcessed(state.iterations() * kModelBytes);
}
BENCHMARK(BM_PlainWrite)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PlainRead(benchmark::State& state) {
  std::vector<char>& buf = plain_buffer();
  const std::string path = dir() + "-plain.bin";
  for (auto _ : state) {
    if (world().holds(0)) {
      const int fd = ::open(path.c_str(), O_RDONLY);
      for (size_t at = 0; at < buf.size(); at += kPlainChunk)
        if (::read(fd, buf.data() + at, kPlainChunk) <= 0) state.SkipWithError("read failed");
      ::close(fd);
    }
  }
  state.SetBytesProcessed(state.iterations() * kModelBytes);
  if (world().holds(0)) std::filesystem::remove(path);
  std::vector<char>().swap(buf);
}
BENCHMARK(BM_PlainRead)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Save(benchmark::State& state) {
  const checkpoint::StateDict m = model(mesh1(), {Shard(0)}, true);
  reset_peak();
  const int64_t before = resident_kb();
  for (auto _ : state) checkpoint::save(m, dir());
  report(state, before, kRows / mesh1().size() * kCols * 4);
}
BENCHMARK(BM_Save)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoadSame(benchmark::State& state) {
  checkpoint::StateDict m = model(mesh1(), {Shard(0)}, true);
  reset_peak();
  const int64_t before = resident_kb();
  for (auto _ : state) checkpoint::load(m, dir());
  report(state, before, kRows / mesh1().size() * kCols * 4);
}
BENCHMARK(BM_LoadSame)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoadReshard(benchmark::State& state) {
  if (world().size() % 2 != 0) {
    state.SkipWithError("needs an even number of ranks");
    return;
  }
  const DeviceMesh mesh(world(), Shape{2, world().size() / 2});
  checkpoint::StateDict m = model(mesh, {Shard(1), Replicate()}, true);
  reset_peak();
  const int64_t before = resident_kb();
  for (auto _ : state) checkpoint::load(m, dir());
  report(state, before, kRows * kCols / 2 * 4);
  if (world().holds(0)) std::filesystem::remove_all(dir());
}
BENCHMARK(BM_LoadReshard)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// The paired runs write the plain file beside the checkpoint, as BM_PlainWrite.
void plain_write(std::vector<char>& buf, const std::string& path) {
  if (!world().holds(0)) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (size_t at = 0; at < buf.size(); at += kPlainChunk)
    if (::write(fd, buf.data() + at, kPlainChunk) < 0) std::abort();
  ::fsync(fd);
  ::close(fd);
}

void plain_read(std::vector<char>& buf, const std::string& path) {
  if (!world().holds(0)) return;
  const int fd = ::open(path.c_str(), O_RDONLY);
  for (size_t at = 0; at < buf.size(); at += kPlainChunk)
    if (::read(fd, buf.data() + at, kPlainChunk) <= 0) std::abort();
  ::close(fd);
}

void BM_SaveVsPlainWrite(benchmark::State& state) {
  const checkpoint::StateDict m = model(mesh1(), {Shard(0)}, true);
  std::vector<char> buf(static_cast<size_t>(kModelBytes), 1);
  const std::string path = dir() + "-plain.bin";
  // Once each untimed: the first save into a fresh directory, and the
  // first write of the buffer's pages, ran up to 5x slower.
  checkpoint::save(m, dir());
  plain_write(buf, path);
  bench::paired<std::milli>(
      state, [&] { checkpoint::save(m, dir()); }, "save_ms", [&] { plain_write(buf, path); },
      "plain_write_ms");
  state.SetBytesProcessed(state.iterations() * kModelBytes);
}
BENCHMARK(BM_SaveVsPlainWrite)->Iterations(11)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoadSameVsPlainRead(benchmark::State& state) {
  checkpoint::StateDict m = model(mesh1(), {Shard(0)}, false);
  std::vector<char> buf(static_cast<size_t>(kModelBytes), 1);
  const std::string path = dir() + "-plain.bin";
  bench::paired<std::milli>(
      state, [&] { checkpoint::load(m, dir()); }, "load_ms", [&] { plain_read(buf, path); },
      "plain_read_ms");
  state.SetBytesProcessed(state.iterations() * kModelBytes);
  if (world().holds(0)) {
    std::filesystem::remove_all(dir());
    std::filesystem::remove(path);
  }
}
BENCHMARK(BM_LoadSameVsPlainRead)->Iterations(15)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Checksum(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<char> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 2654435761u >> 7);
  namespace ckd = checkpoint::detail;
  bench::paired<std::micro>(
      state, [&] { return ckd::checksum(data.data(), static_cast<int64_t>(bytes)); }, "widest_us",
      [&] { return ckd::xxh3_64_baseline(data.data(), bytes); }, "baseline_us");
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.SetLabel(detail::simd_level_name(detail::simd_level()));
}
BENCHMARK(BM_Checksum)->Arg(4 << 20)->Arg(256 << 20)->Iterations(40)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  dtensor::bench::run_benchmarks(world().holds(0));
  benchmark::Shutdown();
  return 0;
}
