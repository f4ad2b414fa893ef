// A first DTensor program: a mesh of 4 simulated ranks, a tensor laid out
// over it, an op that propagates the layout, a redistribution, and the
// check every dtensor program can make: full_tensor() equals the plain math.
// Run: build/bin/example_first_dtensor
//
// The PyTorch spelling of the same thing:
//   mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
//   d = distribute_tensor(x, mesh, [Shard(0), Shard(1)])
//   r = (d * 2 + 1).redistribute(mesh, [Replicate(), Shard(1)])
#include <dtensor/dtensor.h>

#include <iostream>

using namespace dtensor;

int main() {
  World world = World::simulated(4);                // 4 ranks, all in this process
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});      // ranks [[0, 1], [2, 3]]
  Tensor x = Tensor::randn({8, 6}, /*seed=*/0);

  // Rows split over dp, columns over tp: each rank holds a 4x3 block.
  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
  std::cout << visualize_sharding(d);

  // A pointwise op keeps the layout and moves nothing.
  DTensor y = d * 2.0 + 1.0;
  std::cout << "y = d * 2 + 1: " << to_string(y.placements()) << "\n";

  // Gather the rows over dp: one all_gather, counted by CommDebugMode.
  CommDebugMode comm;
  DTensor r = y.redistribute({Replicate(), Shard(1)});
  std::cout << "redistributed to " << to_string(r.placements()) << " with "
            << comm.count(CollectiveKind::AllGather) << " all_gather; rank 3 holds "
            << r.to_local(3).shape() << "\n";

  // A sum over the sharded column dim leaves a pending reduction over tp.
  DTensor s = sum(r, {1});
  std::cout << "sum over dim 1: " << to_string(s.placements()) << "\n";

  const bool same = equal(r.full_tensor(), x * 2.0 + 1.0) &&
                    allclose(s.full_tensor(), sum(x * 2.0 + 1.0, {1}), 1e-5, 1e-5);
  std::cout << (same ? "full tensors match the plain math" : "MISMATCH") << "\n";
  return same ? 0 : 1;
}
