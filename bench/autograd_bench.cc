// Autograd costs, measured side by side in one run:
//
// BM_Backward<op>: per-op framework overhead of backward on a cache hit, on
// tiny tensors (8x8 per shard, simulated world of 4 ranks), next to the
// forward's. Counters (ns per call):
//   fwd_overhead_ns   forward without recording - its local kernel by hand
//   record_ns         forward recording its node - forward without
//   bwd_overhead_ns   backward() of that node - the local kernels its
//                     backward runs, by hand (leaves' grads cleared each time)
//   ratio             (record_ns + bwd_overhead_ns) / fwd_overhead_ns
//
// BM_BackwardAddChain: the same per op, in a graph of 16 adds (the costs
// backward() pays once per call spread over the nodes).
//
// BM_TpMlpTrainStep: y = relu(x W1^T + b1) W2^T + b2 with the parallel
// layers on a (dp=2, tp=4) mesh, forward + backward, against the same
// computation written by hand on the local shards with explicit collectives
// (forward all_reduce of y, backward all_reduce of x's gradient over tp).
// ratio = DTensor / hand-written, the fastest of 8 alternating rounds each. Also the bytes the graph holds for
// backward (graph_memory) against what backward truly needs: x, the
// pre-activation (or the relu mask/output), the hidden activation and the
// two weights.
#include <benchmark/benchmark.h>

#include <algorithm>

#include "bench_util.h"
#include "comm/backend.h"
#include "dtensor/dtensor.h"
#include "dtensor/parallel.h"

namespace {

using namespace dtensor;

using dtensor::bench::ns_per_call;

struct Tiny {
  World world = World::simulated(4);
  DeviceMesh mesh{world, {4}};
  DTensor a = distribute_tensor(Tensor::randn({32, 8}, 1), mesh, {Shard(0)});
  DTensor b = distribute_tensor(Tensor::randn({32, 8}, 2), mesh, {Shard(0)});
  DTensor w = distribute_tensor(Tensor::randn({8, 8}, 3), mesh, {Replicate()});
  Tiny() {
    a.requires_grad_();
    b.requires_grad_();
    w.requires_grad_();
  }
  void clear() {
    a.zero_grad();
    b.zero_grad();
    w.zero_grad();
  }
};

// op: the DTensor op; local_fwd: its kernel by hand; local_bwd(g): the
// kernels its backward runs, by hand, given the output gradient's shards.
template <class Op, class LocalFwd, class LocalBwd>
void run(benchmark::State& state, Tiny& f, Op&& op, LocalFwd&& local_fwd, LocalBwd&& local_bwd) {
  DTensor g = [&] {
    NoGradGuard no_grad;
    return ones_like(op());
  }();
  const LocalTensor gl = g.local();
  const double fwd_local = ns_per_call(local_fwd);
  const double fwd_plain = ns_per_call([&] {
    NoGradGuard no_grad;
    return op();
  });
  const double fwd_record = ns_per_call(op);
  const double bwd_local = ns_per_call([&] { return local_bwd(gl); });
  auto step = [&] {
    op().backward(g);
    f.clear();
  };
  for (auto _ : state) step();
  const double fwd_bwd = ns_per_call(step);
  const double fwd_overhead = fwd_plain - fwd_local;
  const double record = fwd_record - fwd_plain;
  const double bwd_overhead = fwd_bwd - fwd_record - bwd_local;
  state.counters["fwd_overhead_ns"] = fwd_overhead;
  state.counters["record_ns"] = record;
  state.counters["bwd_overhead_ns"] = bwd_overhead;
  state.counters["ratio"] = (record + bwd_overhead) / fwd_overhead;
}

void BM_BackwardAdd(benchmark::State& state) {
  Tiny f;
  run(state, f, [&] { return f.a + f.b; },
      [&] { return f.a.local().zip(f.b.local(), [](int, auto& x, auto& y) { return x + y; }); },
      [&](const LocalTensor& g) { return g; });  // the gradient passes through
}
BENCHMARK(BM_BackwardAdd);

void BM_BackwardMul(benchmark::State& state) {
  Tiny f;
  run(state, f, [&] { return f.a * f.b; },
      [&] { return f.a.local().zip(f.b.local(), [](int, auto& x, auto& y) { return x * y; }); },
      [&](const LocalTensor& g) {
        benchmark::DoNotOptimize(g.zip(f.b.local(), [](int, auto& x, auto& y) { return x * y; }));
        return g.zip(f.a.local(), [](int, auto& x, auto& y) { return x * y; });
      });
}
BENCHMARK(BM_BackwardMul);

void BM_BackwardMm(benchmark::State& state) {
  Tiny f;
  run(state, f, [&] { return mm(f.a, f.w); },
      [&] { return f.a.local().zip(f.w.local(), [](int, auto& x, auto& y) { return mm(x, y); }); },
      [&](const LocalTensor& g) {
        // grad_a = g w^T; grad_w = a^T g (Partial over the sharded rows).
        benchmark::DoNotOptimize(
            g.zip(f.w.local(), [](int, auto& x, auto& y) { return mm(x, y.t()); }));
        return f.a.local().zip(g, [](int, auto& x, auto& y) { return mm(x.t(), y); });
      });
}
BENCHMARK(BM_BackwardMm);

void BM_BackwardSum(benchmark::State& state) {
  Tiny f;
  run(state, f, [&] { return sum(f.a, {1}); },
      [&] { return f.a.local().map([](int, auto& x) { return sum(x, {1}); }); },
      [&](const LocalTensor& g) {
        return g.map([](int, auto& x) { return x.unsqueeze(1).expand({8, 8}); });
      });
}
BENCHMARK(BM_BackwardSum);

// A chain of 16 adds, each with a leaf of its own: y = ((a + b0) + b1) + ...
// The backward of an add runs no kernel (the gradient passes through to
// both inputs), so everything backward() costs past the forward is the
// engine's: per op, with the per-call costs spread over 16 nodes.
void BM_BackwardAddChain(benchmark::State& state) {
  Tiny f;
  constexpr int kOps = 16;
  std::vector<DTensor> leaves;
  for (int i = 0; i < kOps; ++i) {
    leaves.push_back(distribute_tensor(Tensor::randn({32, 8}, 10 + i), f.mesh, {Shard(0)}));
    leaves.back().requires_grad_();
  }
  auto chain = [&] {
    DTensor y = f.a;
    for (const DTensor& b : leaves) y = y + b;
    return y;
  };
  const DTensor g = [&] {
    NoGradGuard no_grad;
    return ones_like(chain());
  }();
  const double local = ns_per_call([&] {
    LocalTensor y = f.a.local();
    for (const DTensor& b : leaves)
      y = y.zip(b.local(), [](int, const Tensor& p, const Tensor& q) { return p + q; });
    return y;
  }, 2000);
  const double plain = ns_per_call([&] {
    NoGradGuard no_grad;
    return chain();
  }, 2000);
  const double recorded = ns_per_call(chain, 2000);
  auto step = [&] {
    chain().backward(g);
    f.a.zero_grad();
    for (DTensor& b : leaves) b.zero_grad();
  };
  for (auto _ : state) step();
  const double full = ns_per_call(step, 2000);
  state.counters["fwd_overhead_ns"] = (plain - local) / kOps;
  state.counters["record_ns"] = (recorded - plain) / kOps;
  state.counters["bwd_overhead_ns"] = (full - recorded) / kOps;
  state.counters["ratio"] = (full - plain) / (plain - local);
}
BENCHMARK(BM_BackwardAddChain);

// ---- the TP MLP train step ----------------------------------------------------------------

struct TpMlp {
  World world = World::simulated(8);
  DeviceMesh mesh{world, {2, 4}, {"dp", "tp"}};
  int64_t batch, d_model, hidden;
  Tensor w1_full, b1_full, w2_full, b2_full;
  ColumnParallelLinear up;
  RowParallelLinear down;
  DTensor x, gy;

  TpMlp(int64_t batch_, int64_t d_model_, int64_t hidden_)
      : batch(batch_), d_model(d_model_), hidden(hidden_),
        w1_full(Tensor::randn({hidden, d_model}, 2) * 0.05), b1_full(Tensor::randn({hidden}, 3)),
        w2_full(Tensor::randn({d_model, hidden}, 4) * 0.05), b2_full(Tensor::randn({d_model}, 5)),
        up(mesh, 1, w1_full, b1_full), down(mesh, 1, w2_full, b2_full),
        x(distribute_tensor(Tensor::randn({batch, d_model}, 1), mesh, {Shard(0), Replicate()})),
        gy(distribute_tensor(Tensor::randn({batch, d_model}, 6), mesh, {Shard(0), Replicate()})) {
    x.requires_grad_();
  }

  DTensor forward() const { return down(relu(up(x))); }

  void step() {
    forward().backward(gy);
    // Copies share the gradient state, so clearing a copy clears the parameter.
    for (DTensor p : {x, up.weight(), *up.bias(), down.weight(), *down.bias()}) p.zero_grad();
  }

  // The same by hand on the local shards: forward, then the gradients of
  // x, W1, b1, W2, b2, with the two all_reduces over tp Megatron runs.
  struct Grads {
    LocalTensor x, w1, b1, w2, b2;
  };
  Grads by_hand() const {
    Backend& backend = world.backend();
    LocalTensor pre = x.local().map([&](int r, const Tensor& xs) {
      return linear(xs, up.weight().to_local(r), up.bias()->to_local(r));
    });
    LocalTensor h = pre.map([](int, const Tensor& t) { return relu(t); });
    LocalTensor partial = h.map([&](int r, const Tensor& hs) {
      if (mesh.group_index(r, 1) == 0)
        return linear(hs, down.weight().to_local(r), down.bias()->to_local(r));
      return linear(hs, down.weight().to_local(r));
    });
    LocalTensor y = backend.all_reduce(partial, mesh, 1, ReduceOp::Sum);
    benchmark::DoNotOptimize(y);
    Grads g;
    const LocalTensor& gy_l = gy.local();
    g.w2 = gy_l.zip(h, [](int, const Tensor& gs, const Tensor& hs) { return mm(gs.t(), hs); });
    g.b2 = gy_l.map([](int, const Tensor& gs) { return sum(gs, {0}); });
    LocalTensor gh = gy_l.map([&](int r, const Tensor& gs) { return mm(gs, down.weight().to_local(r)); });
    LocalTensor gpre = gh.zip(pre, [](int, const Tensor& a, const Tensor& p) {
      return where(gt(p, 0.0), a, 0.0);
    });
    g.w1 = gpre.zip(x.local(), [](int, const Tensor& a, const Tensor& xs) { return mm(a.t(), xs); });
    g.b1 = gpre.map([](int, const Tensor& a) { return sum(a, {0}); });
    LocalTensor gx_partial =
        gpre.map([&](int r, const Tensor& a) { return mm(a, up.weight().to_local(r)); });
    g.x = backend.all_reduce(gx_partial, mesh, 1, ReduceOp::Sum);
    return g;
  }

  // Bytes backward truly needs: x, the pre-activation, the hidden
  // activation and the two weights, summed over the held ranks.
  int64_t needed_bytes() const {
    int64_t n = 0;
    auto add = [&](const LocalTensor& l) {
      for (const auto& [r, t] : l.shards()) n += static_cast<int64_t>(t.nbytes());
    };
    NoGradGuard no_grad;
    const DTensor pre = up(x.detach());
    add(x.local());
    add(pre.local());
    add(pre.local());  // relu's output, the same size
    add(up.weight().local());
    add(down.weight().local());
    return n;
  }
};

void BM_TpMlpTrainStep(benchmark::State& state) {
  TpMlp m(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) m.step();
  // The two measured in turns, the fastest round of each kept: on a shared
  // machine the minimum is the figure least disturbed by other work.
  double hand_ns = 1e300, dtensor_ns = 1e300;
  for (int round = 0; round < 8; ++round) {
    hand_ns = std::min(hand_ns, ns_per_call([&] { return m.by_hand(); }, 10));
    dtensor_ns = std::min(dtensor_ns, ns_per_call([&] { m.step(); }, 10));
  }
  state.counters["hand_us"] = hand_ns / 1e3;
  state.counters["dtensor_us"] = dtensor_ns / 1e3;
  state.counters["ratio"] = dtensor_ns / hand_ns;
  const DTensor y = m.forward();
  const GraphMemory mem = graph_memory(y);
  state.counters["saved_MiB"] = static_cast<double>(mem.saved_bytes) / (1 << 20);
  state.counters["needed_MiB"] = static_cast<double>(m.needed_bytes()) / (1 << 20);
  state.counters["nodes"] = static_cast<double>(mem.nodes);
}
BENCHMARK(BM_TpMlpTrainStep)->Args({64, 256, 1024})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
