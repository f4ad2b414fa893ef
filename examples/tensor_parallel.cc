// Tensor parallelism with parallelize_module (dtensor/tensor_parallel.h): a
// Megatron MLP block, written as nn modules as on one device, laid out on a
// (dp, tp) mesh of 8 simulated ranks by a plan of parallel styles; first
// with replicated activations (one all_reduce), then sequence parallel (one
// all_gather and one reduce_scatter), each checked against the same math
// on full tensors.
//
// The PyTorch spelling of the same thing:
//   parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(),
//                                          "down": RowwiseParallel()})
#include <dtensor/tensor_parallel.h>

#include <iostream>
#include <memory>

using namespace dtensor;

namespace {

// x + down(gelu(up(norm(x)))), the norm left out when not given.
class Block : public nn::Module {
 public:
  Block(const DeviceMesh& mesh, const Tensor& w_up, const Tensor& b_up, const Tensor& w_down,
        const Tensor& b_down, const Tensor* g = nullptr, const Tensor* b = nullptr)
      : nn::Module(mesh) {
    if (g) norm_ = register_module("norm", std::make_unique<nn::LayerNorm>(mesh, *g, *b));
    up_ = register_module("up", std::make_unique<nn::Linear>(mesh, w_up, b_up));
    down_ = register_module("down", std::make_unique<nn::Linear>(mesh, w_down, b_down));
  }
  DTensor forward(const DTensor& x) override {
    return x + (*down_)(gelu((*up_)(norm_ ? (*norm_)(x) : x)));
  }
  nn::Linear& up() { return *up_; }
  nn::Linear& down() { return *down_; }

 private:
  nn::LayerNorm* norm_ = nullptr;
  nn::Linear *up_, *down_;
};

}  // namespace

int main() {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 4}, {"dp", "tp"});
  const int tp = mesh.dim_index("tp");

  // Full weights, the same in every process (one seed each).
  const int64_t hidden = 16, ffn = 64;
  Tensor w_up = Tensor::randn({ffn, hidden}, 1) * 0.25, b_up = Tensor::randn({ffn}, 2) * 0.1;
  Tensor w_down = Tensor::randn({hidden, ffn}, 3) * 0.125, b_down = Tensor::randn({hidden}, 4) * 0.1;
  Tensor x = Tensor::randn({4, 8, hidden}, 5);  // (batch, seq, hidden)
  Tensor expected = x + linear(gelu(linear(x, w_up, b_up)), w_down, b_down);

  // 1. Tensor parallel: W_up split by rows (output features), W_down by
  //    columns (input features); the batch is split over dp.
  Block block(mesh, w_up, b_up, w_down, b_down);
  parallelize_module(block, tp, {{"up", ColwiseParallel{}}, {"down", RowwiseParallel{}}});
  std::cout << "up.weight   " << to_string(block.up().weight().placements()) << "\n"
            << "down.weight " << to_string(block.down().weight().placements()) << "\n";
  DTensor dx = distribute_tensor(x, mesh, {Shard(0), Replicate()});
  CommDebugMode comm;
  DTensor y = block(dx);
  std::cout << "tensor parallel: output " << to_string(y.placements()) << ", "
            << comm.count(CollectiveKind::AllReduce) << " all_reduce, "
            << comm.total_count() << " collectives in all\n";
  const int64_t tp_collectives = comm.total_count();
  const double diff = max_abs_diff(y.full_tensor(), expected);

  // 2. Sequence parallel: activations split on the sequence dim over tp
  //    between blocks; the norm runs on the slices, `up` all-gathers, and
  //    `down` reduce-scatters back onto the sequence dim.
  Tensor g = Tensor::ones({hidden}), b = Tensor::zeros({hidden});
  Block sp_block(mesh, w_up, b_up, w_down, b_down, &g, &b);
  parallelize_module(sp_block, tp,
                     {{"norm", SequenceParallel{}},
                      {"up", ColwiseParallel{}},
                      {"down", RowwiseParallel{.output_layouts = Shard(1)}}});
  DTensor sx = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
  CommDebugMode comm_sp;  // counts what runs from here on (comm does too)
  DTensor ys = sp_block(sx);
  const int64_t sp_collectives = comm_sp.total_count();
  std::cout << "sequence parallel: output " << to_string(ys.placements()) << ", "
            << comm_sp.count(CollectiveKind::AllGather) << " all_gather + "
            << comm_sp.count(CollectiveKind::ReduceScatter) << " reduce_scatter\n";
  Tensor expected_sp = x + linear(gelu(linear(layer_norm(x, {hidden}, g, b), w_up, b_up)),
                                  w_down, b_down);
  const double diff_sp = max_abs_diff(ys.full_tensor(), expected_sp);

  std::cout << "max |difference| from the full-tensor math: " << diff << ", " << diff_sp << "\n";
  const bool ok = diff <= 1e-5 && diff_sp <= 1e-5 && tp_collectives == 1 &&
                  sp_collectives == 2;
  std::cout << (ok ? "ok" : "MISMATCH") << "\n";
  return ok ? 0 : 1;
}
