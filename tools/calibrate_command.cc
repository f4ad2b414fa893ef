// `dtensor calibrate`: this machine's figures for `dtensor estimate
// --calibration`, measured as a training run meets them: every rank of an
// mpirun job computing at once (so ranks that share cores share them here
// too), each op through the DTensor dispatcher, each collective through
// the MPI backend. Writes estimate::cluster_json.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <thread>
#include <tuple>
#include <vector>

#include "cli.h"
#include "dtensor/dtensor.h"
#include "dtensor/estimate.h"
#include "train.h"
#include "trainer.h"

namespace dtensor::cli {

namespace {

using Clock = std::chrono::steady_clock;

// A collective over the whole world that every rank waits in: the ranks
// start each measurement together.
void barrier(const DeviceMesh& mesh) {
  const DeviceMesh all(mesh.world(), Shape{mesh.world().size()});
  const DTensor t = from_local([](int) { return Tensor::zeros({1}); }, all, {Partial()});
  (void)t.redistribute({Replicate()});
}

// The largest of every rank's x (an all_reduce max over the world).
double world_max(const World& world, double x) {
  const DeviceMesh all(world, Shape{world.size()});
  const DTensor t = from_local([&](int) { return Tensor::full({1}, x, DType::Float64); }, all,
                               {Partial(ReduceOp::Max)});
  return t.redistribute({Replicate()}).to_local(world.held_ranks().front()).item<double>();
}

// Seconds per call of f: the median of `reps` runs of calls repeated for
// at least 20 ms (after one to warm up), the slowest rank's (a max over
// the world). Long runs and the median, not a best time: ranks that share
// cores take turns, and a training step meets them taking turns. Every
// rank makes the same number of calls (f may be a collective).
template <class F>
double seconds_of(const DeviceMesh& mesh, int reps, F&& f) {
  const auto t0 = Clock::now();
  f();
  const double once =
      world_max(mesh.world(), std::chrono::duration<double>(Clock::now() - t0).count());
  const int calls = std::max(1, static_cast<int>(0.02 / std::max(once, 1e-7)));
  std::vector<double> runs;
  for (int i = 0; i < reps; ++i) {
    barrier(mesh);
    const auto start = Clock::now();
    for (int k = 0; k < calls; ++k) f();
    runs.push_back(std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  std::nth_element(runs.begin(), runs.begin() + reps / 2, runs.end());
  return world_max(mesh.world(), runs[static_cast<size_t>(reps / 2)]);
}

}  // namespace

int run_calibrate(const CalibrateArgs& a) {
  const World world = World::from_launcher(1);
  const int n = world.size();
  const DeviceMesh mesh(world, Shape{n});
  const bool print = world.rank() == 0;
  estimate::Cluster c;
  c.device.name = "calibrated";
  c.device.memory = static_cast<double>(physical_memory_bytes()) / n;
  c.device.matmul_efficiency = 1;  // fitted below
  c.device.memory_efficiency = 1;
  c.ranks_per_node = n;

  // The ops, on rank 0 alone (a one-rank world of its own; the others
  // wait), through the DTensor dispatcher as the model's ops run.
  const DeviceMesh one(World::simulated(1), Shape{1});
  const auto alone = [&](auto&& f) {
    return world_max(world, world.rank() == 0 ? seconds_of(one, a.reps, f) : 0.0);
  };
  // Ranks beyond the cores take turns: each has cores / ranks of the
  // machine. (Measuring it, a matmul alone against one on every rank at
  // once, gave 0.92 for 4 ranks on 2 cores, the ranks' loops hardly
  // overlapping, and estimates further from the runs than cores / ranks.)
  // The rates below are one rank's alone, then shared so.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  c.device.share = std::min(1.0, static_cast<double>(cores) / n);
  // Products: the rate of a square matmul per dtype.
  const int64_t m = a.matmul_size;
  for (DType d : {DType::Float32, DType::BFloat16}) {
    const DTensor x = distribute_tensor(Tensor::randn({m, m}, 1).to(d), one, {Replicate()});
    const double s = alone([&] { (void)mm(x, x); });
    c.device.peak_flops[static_cast<int>(d)] = 2.0 * static_cast<double>(m * m * m) / s;
  }
  c.device.peak_flops[static_cast<int>(DType::Float16)] =
      c.device.peak_flops[static_cast<int>(DType::BFloat16)];
  // Memory: an add of vectors far larger than the caches (three streams).
  {
    const int64_t len = a.stream_elements;
    const DTensor x = distribute_tensor(Tensor::randn({len}, 2), one, {Replicate()});
    const double s = alone([&] { (void)add(x, x); });
    c.device.memory_bandwidth = 3.0 * 4.0 * static_cast<double>(len) / s;
    // A vector op's arithmetic never limits it here: one FLOP per element.
    c.device.vector_flops = static_cast<double>(len) / s * 4;
  }
  // The cost of one op apart from its work, as a training step pays it
  // (dispatch, autograd's records and backward nodes, fully_shard's
  // copies): a tiny step of `dtensor train`'s model on one rank, whose
  // kernels take next to nothing, timed, less what the rates above give
  // its ops, over the number of its ops (a shape-only profile counts them).
  // Then the efficiency of the rates on the model's own ops (small
  // products, transcendental pointwise ops), from a step of a middle size
  // the same way: its time less the ops' overhead, over what the rates give.
  const auto step_of = [&](int64_t hidden, int64_t seq) {
    TrainArgs t;
    t.mesh = "1";
    t.scheme = "fsdp";
    t.batch = 2, t.seq = seq, t.hidden = hidden, t.heads = 2, t.layers = 2;
    t.mixed_precision = "none";
    const models::GPTConfig config = gpt_config(t, 64);
    const Scheme scheme = parse_scheme(t.scheme, 1, t.mesh);
    double step_s = 0;
    if (world.rank() == 0) {
      Trainer trainer(config, one, scheme, t, false);
      const DTensor ids =
          distribute_tensor(Tensor::zeros({t.batch, t.seq}, DType::Int64), one, trainer.input);
      step_s = seconds_of(one, a.reps, [&] { (void)trainer.step(ids, ids); });
    }
    const World shapes = World::shape_only(1);
    const DeviceMesh shapes_mesh(shapes, Shape{1});
    const estimate::Profile p = estimate::profile(shapes, [&] {
      Trainer trainer(config, shapes_mesh, scheme, t, true);
      const DTensorSpec batch(shapes_mesh, trainer.input, Shape{t.batch, t.seq}, DType::Int64);
      trainer.step(DTensor::meta(batch), DTensor::meta(batch));
    });
    estimate::Device free = c.device;  // the rates without overhead, alone
    free.op_overhead = 0;
    free.share = 1;
    double work = 0;
    int64_t ops = 0;
    for (const StepEvent& e : p.events)
      if (e.type == StepEvent::Type::Op) {
        work += estimate::op_seconds(free, e);
        ++ops;
      }
    return std::tuple{world_max(world, step_s), work,
                      static_cast<double>(std::max<int64_t>(ops, 1))};
  };
  {
    const auto [step_s, work, ops] = step_of(16, 8);
    c.device.op_overhead = std::max(0.0, (step_s - work) / ops);
  }
  {
    const auto [step_s, work, ops] = step_of(256, 128);
    const double eff =
        std::clamp(work / std::max(step_s - ops * c.device.op_overhead, 1e-9), 0.05, 1.0);
    c.device.matmul_efficiency = eff;
    c.device.memory_efficiency = eff;
  }
  // Collectives by size over groups of every size the world factors into
  // (a mesh g x n/g, the groups of its last dim), then the link's latency
  // and bandwidth fitted to the all_gathers: t = (g-1) (alpha + b / beta).
  std::vector<std::pair<double, double>> fit;  // (g - 1), (g - 1) b -> t
  std::vector<double> times;
  for (int g = 2; g <= n; ++g) {
    if (n % g != 0) continue;
    const DeviceMesh groups(world, Shape{n / g, g});
    const Placements r{Replicate(), Replicate()};
    for (int64_t bytes = 1024; bytes <= a.max_bytes; bytes *= 4) {
      const int64_t len = bytes / 4;
      const DTensor shard = from_local([&](int) { return Tensor::randn({len}, 4); }, groups,
                                       {Replicate(), Shard(0)}, {.shape = Shape{len * g}});
      const DTensor partial = from_local([&](int) { return Tensor::randn({len}, 5); }, groups,
                                         {Replicate(), Partial()});
      const DTensor whole = from_local([&](int) { return Tensor::randn({len * g}, 6); }, groups,
                                       {Replicate(), Partial()});
      const double ag = seconds_of(groups, a.reps, [&] { (void)shard.redistribute(r); });
      const double ar = seconds_of(groups, a.reps, [&] { (void)partial.redistribute(r); });
      const double rs = seconds_of(groups, a.reps, [&] {
        (void)whole.redistribute({Replicate(), Shard(0)});
      });
      c.measured.push_back({CollectiveKind::AllGather, g, bytes, ag});
      c.measured.push_back({CollectiveKind::AllReduce, g, bytes, ar});
      c.measured.push_back({CollectiveKind::ReduceScatter, g, bytes * g, rs});
      fit.emplace_back(g - 1.0, (g - 1.0) * static_cast<double>(bytes));
      times.push_back(ag);
    }
  }
  if (fit.size() >= 2) {
    // Least squares of t = alpha x + y / beta over the sizes, relative
    // (each row divided by its t, so small sizes weigh as much as large).
    double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
    for (size_t i = 0; i < fit.size(); ++i) {
      const double x = fit[i].first / times[i], y = fit[i].second / times[i];
      sxx += x * x, sxy += x * y, syy += y * y, sxt += x, syt += y;
    }
    const double det = sxx * syy - sxy * sxy;
    const double alpha = (sxt * syy - syt * sxy) / det, inv_beta = (sxx * syt - sxy * sxt) / det;
    c.within_node = {std::max(alpha, 0.0), inv_beta > 0 ? 1 / inv_beta : 1e12};
  } else {
    c.within_node = {0, 1e12};
  }
  c.across_nodes = c.within_node;

  if (print) {
    const std::string json = estimate::cluster_json(c);
    if (a.out.empty()) {
      std::cout << json << "\n";
    } else {
      std::ofstream out(a.out);
      DT_CHECK(out, "--out: cannot write ", quote(a.out));
      out << json << "\n";
      std::cout << std::setprecision(3) << "calibrated " << n << (n == 1 ? " rank" : " ranks")
                << " (" << (world.is_simulated() ? "simulated world" : "MPI") << "): float32 "
                << c.device.peak_flops[static_cast<int>(DType::Float32)] / 1e9
                << " GFLOP/s, bfloat16 "
                << c.device.peak_flops[static_cast<int>(DType::BFloat16)] / 1e9
                << " GFLOP/s, memory " << c.device.memory_bandwidth / 1e9 << " GB/s, "
                << c.device.op_overhead * 1e6 << " us per op, efficiency "
                << c.device.matmul_efficiency << ", a share of " << c.device.share
                << " of the machine per rank; links " << c.within_node.latency * 1e6 << " us + "
                << c.within_node.bandwidth / 1e9 << " GB/s; written to " << a.out << "\n";
    }
  }
  return 0;
}

}  // namespace dtensor::cli
