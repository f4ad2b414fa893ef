// Training a tensor-parallel MLP with autograd: the Megatron MLP of
// dtensor/parallel.h's layer math on a (dp, tp) mesh of 8 simulated ranks,
// fitted to a random linear target by SGD with momentum (dtensor/optim.h).
//
//   loss.backward() fills grad() of every parameter: the column-parallel
//   weight's gradient is sharded like it on tp (Shard(0)), the row-parallel
//   one's too (Shard(1)), and since every parameter is replicated over dp
//   (each dp rank saw half the batch) each gradient is Partial(sum) over dp,
//   which optimizer.step() all-reduces before its update, as data
//   parallelism does. The step then updates every rank's shards in place,
//   with no further communication.
//
// The first step's gradients are checked against the same computation on
// replicated tensors; the program fails unless they match and the loss
// falls.
#include <dtensor/dtensor.h>
#include <dtensor/optim.h>

#include <cstdio>
#include <optional>
#include <vector>

using namespace dtensor;

namespace {

// A parameter: a leaf that requires grad, laid out by `placements`.
DTensor parameter(const Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  DTensor p = distribute_tensor(full, mesh, placements);
  p.requires_grad_();
  return p;
}

}  // namespace

int main() {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 4}, {"dp", "tp"});
  const int64_t batch = 16, d = 8, hidden = 32;
  const Tensor x_full = Tensor::randn({batch, d}, 1);
  const Tensor target_full = linear(x_full, Tensor::randn({d, d}, 2) * 0.5);

  // Column-parallel up (W1 rows split over tp), row-parallel down (W2
  // columns split over tp); replicated over dp. The batch is split over dp.
  DTensor w1 = parameter(Tensor::randn({hidden, d}, 3) * 0.3, mesh, {Replicate(), Shard(0)});
  DTensor b1 = parameter(Tensor::zeros({hidden}), mesh, {Replicate(), Shard(0)});
  DTensor w2 = parameter(Tensor::randn({d, hidden}, 4) * 0.2, mesh, {Replicate(), Shard(1)});
  DTensor b2 = parameter(Tensor::zeros({d}), mesh, {Replicate(), Replicate()});
  const DTensor x = distribute_tensor(x_full, mesh, {Shard(0), Replicate()});
  const DTensor target = distribute_tensor(target_full, mesh, {Shard(0), Replicate()});

  auto forward = [&](const DTensor& a, const DTensor& w1_, const DTensor& b1_, const DTensor& w2_,
                     const DTensor& b2_) {
    const DTensor y = linear(gelu(linear(a, w1_, b1_)), w2_, b2_);  // Partial(sum) on tp
    const DTensor err = y.redistribute({Shard(0), Replicate()}) - target;  // one all_reduce
    return mean(err * err);
  };

  optim::SGD optimizer({w1, b1, w2, b2}, {.lr = 0.05, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    optimizer.zero_grad();
    std::optional<CommDebugMode> comm(std::in_place);
    const DTensor loss = forward(x, w1, b1, w2, b2);
    loss.backward();
    const int64_t collectives = comm->total_count();
    comm.reset();
    last = loss.full_tensor().item<double>();
    if (step == 0) {
      first = last;
      std::printf("gradients: W1 %s, b1 %s, W2 %s, b2 %s\n",
                  to_string(w1.grad()->placements()).c_str(),
                  to_string(b1.grad()->placements()).c_str(),
                  to_string(w2.grad()->placements()).c_str(),
                  to_string(b2.grad()->placements()).c_str());
      // The forward's all_reduce of y over tp; backward needs none (x
      // needs no gradient, and every weight gradient is local).
      std::printf("step 0 forward+backward: %lld collective(s)\n",
                  static_cast<long long>(collectives));
      // The same step on replicated tensors.
      const Placements rr{Replicate(), Replicate()};
      DTensor r1 = parameter(w1.full_tensor(), mesh, rr), rb1 = parameter(b1.full_tensor(), mesh, rr);
      DTensor r2 = parameter(w2.full_tensor(), mesh, rr), rb2 = parameter(b2.full_tensor(), mesh, rr);
      forward(distribute_tensor(x_full, mesh, rr), r1, rb1, r2, rb2).backward();
      double diff = 0;
      for (auto [a, b] : std::vector<std::pair<DTensor, DTensor>>{{w1, r1}, {b1, rb1}, {w2, r2}, {b2, rb2}})
        diff = std::max(diff, max_abs_diff(a.grad()->full_tensor(), b.grad()->full_tensor()));
      std::printf("largest difference from the replicated gradients: %.3g\n", diff);
      if (diff > 1e-5) return 1;
    }
    if (step % 5 == 0 || step == 29) std::printf("step %2d loss %.6f\n", step, last);
    optimizer.step();
  }
  const bool learned = last < 0.5 * first;
  std::printf("%s: loss %.6f -> %.6f\n", learned ? "trained" : "NOT LEARNING", first, last);
  return learned ? 0 : 1;
}
