// <dtensor/dtensor.h> gives the whole API: this file includes nothing else
// of dtensor's and uses a name from every public header (except mpi.h,
// which needs MPI's headers, and models/), so a header left out of the
// umbrella fails to compile here. Built with -Wextra, it also pins that the
// options structs' designated-initializer idiom ({.merge = false}) is
// warning-free: every member has a default member initializer.
#include <dtensor/dtensor.h>

#include <gtest/gtest.h>

#include <type_traits>

namespace dtensor {
namespace {

TEST(Umbrella, GivesEveryPublicHeader) {
  World world = World::simulated(2);                                       // world.h
  DeviceMesh mesh(world, {2}, {"tp"});                                     // mesh.h
  Tensor x = Tensor::ones({4, 2});                                         // tensor.h
  DTensor d = distribute_tensor(x, mesh, {Shard(0)});                      // distributed_tensor.h, placement.h
  EXPECT_EQ(d.spec().ndim(), 2);                                           // spec.h
  EXPECT_EQ(d.local().shard(1).size(0), 2);                                // local_tensor.h
  CommDebugMode comm;                                                      // debug.h
  DTensor r = d.redistribute({Replicate()}, {.merge = false});             // redistribute.h
  EXPECT_EQ(comm.count(CollectiveKind::AllGather), 1);
  EXPECT_TRUE(equal(sum(r).full_tensor(), Tensor::full({}, 8.0)));         // ops.h
  EXPECT_EQ(checked_mul(3, 4, "umbrella"), 12);                            // checked.h
  EXPECT_THROW(Tensor::ones({2}).view({3}), Error);                        // error.h
  EXPECT_GE(num_threads(), 1);                                             // threads.h
  {
    NoGradGuard no_grad;                                                   // autograd.h
  }
  Topology topology{.devices_per_host = 4};                                // the idiom on mesh.h's struct
  EXPECT_TRUE(topology.per_dim.empty());
  nn::Linear linear(mesh, 2, 3, /*bias=*/true, /*seed=*/0);                // nn.h
  optim::SGD sgd(linear.parameters(), {.lr = 0.1});                        // optim.h
  static_assert(std::is_class_v<ColumnParallelLinear>);                    // parallel.h
  EXPECT_EQ(to_string(ParallelStyle(ColwiseParallel{})).empty(), false);   // tensor_parallel.h
  void (*shard_module)(nn::Module&, const FullyShardOptions&) = fully_shard;  // fsdp.h
  EXPECT_NE(shard_module, nullptr);
  checkpoint::SaveOptions save_options{.block_bytes = 64};                 // checkpoint.h
  EXPECT_EQ(save_options.block_bytes, 64);
}

}  // namespace
}  // namespace dtensor
