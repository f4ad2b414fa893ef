// Tests that only make sense with one rank per process (built into
// mpi_world_tests only): the desync check, and the world's basics.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "comm/mpi_backend.h"
#include "dtensor/mpi.h"
#include "dtensor/dtensor.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

TEST(MpiWorld, HoldsItsOwnRank) {
  World world = dtensor::testing::test_world();
  EXPECT_FALSE(world.is_simulated());
  ASSERT_EQ(world.held_ranks().size(), 1u);
  EXPECT_EQ(world.held_ranks()[0], world.rank());
  EXPECT_TRUE(World::mpi_available());
  EXPECT_EQ(World::mpi(), world);  // one world per process
}

// Ranks calling all_reduce with different shapes would hang or exchange
// garbage; with the check on, every rank raises an error naming both sides.
TEST(MpiWorld, DesyncCheckCatchesAMismatchedCall) {
  World world = dtensor::testing::test_world();
  auto& backend = static_cast<MpiBackend&>(world.backend());
  DeviceMesh mesh(world, {world.size()});
  set_mpi_desync_check(world, true);
  EXPECT_TRUE(mpi_desync_check(world));
  LocalTensor in;
  in.set(world.rank(), Tensor::zeros({2, world.rank() == 1 ? 4 : 3}));
  const std::string e =
      dtensor::testing::error_of([&] { backend.all_reduce(in, mesh, 0, ReduceOp::Sum); });
  EXPECT_NE(e.find("collective desync"), std::string::npos) << e;
  EXPECT_NE(e.find("all_reduce over mesh dim 0"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 4]"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3]"), std::string::npos) << e;
  // Matching calls pass the check and compute.
  LocalTensor ok;
  ok.set(world.rank(), Tensor::ones({2, 3}));
  const LocalTensor sum = backend.all_reduce(ok, mesh, 0, ReduceOp::Sum);
  EXPECT_TRUE(equal(sum.shard(world.rank()), Tensor::full({2, 3}, world.size())));
  set_mpi_desync_check(world, false);
  EXPECT_FALSE(backend.desync_check());
  // A simulated world has no such check, and says so.
  EXPECT_NE(dtensor::testing::error_of([] { set_mpi_desync_check(World::simulated(2), true); })
                .find("the world is simulated (2 ranks in this process)"),
            std::string::npos);
}

// A World over a communicator the program made: each half of the job is a
// world of its own, with its own ranks 0..n/2-1.
TEST(MpiWorld, AdoptsAnExistingCommunicator) {
  World world = dtensor::testing::test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const int half = world.rank() < world.size() / 2 ? 0 : 1;
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, half, world.rank(), &comm);
  int size = 0;
  MPI_Comm_size(comm, &size);
  {
    World sub = world_from_mpi_comm(comm);
    EXPECT_EQ(sub.size(), size);
    EXPECT_EQ(sub.rank(), half == 0 ? world.rank() : world.rank() - world.size() / 2);
    DeviceMesh mesh(sub, {size});
    const DTensor d = distribute_tensor(Tensor::full({3}, half + 1), mesh, {Partial()});
    // R -> P keeps the value on coordinate 0 only; the sum is the value.
    EXPECT_TRUE(allclose(d.full_tensor(), Tensor::full({3}, half + 1)));
  }
  MPI_Comm_free(&comm);
}

// At the first use of a group the members compare their calls before
// creating its communicator (MPI_Comm_create_group waits for every member),
// on a communicator of their own, and the records carry the call's number
// on the group.
TEST(MpiWorld, DesyncCheckRunsBeforeAGroupIsCreated) {
  World world = dtensor::testing::test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more processes";
  auto& backend = static_cast<MpiBackend&>(world.backend());
  // Ranks in reverse order: a group no other test has used.
  std::vector<int> ranks;
  for (int r = world.size() - 1; r >= 0; --r) ranks.push_back(r);
  DeviceMesh mesh(world, {world.size()}, ranks);
  set_mpi_desync_check(world, true);
  LocalTensor in;
  in.set(world.rank(), Tensor::ones({2, 3}));
  const std::string e = dtensor::testing::error_of([&] {
    if (world.rank() == 0)
      backend.all_gather(in, mesh, 0, 0);
    else
      backend.all_reduce(in, mesh, 0, ReduceOp::Sum);
  });
  EXPECT_NE(e.find("collective desync"), std::string::npos) << e;
  EXPECT_NE(e.find("(first use of the group)"), std::string::npos) << e;
  EXPECT_NE(e.find(world.rank() == 0 ? "calls all_reduce over mesh dim 0"
                                     : "calls all_gather over mesh dim 0"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("call #1 on it"), std::string::npos) << e;
  // The group is still usable: the next matching call is call #2 for all.
  const LocalTensor sum = backend.all_reduce(in, mesh, 0, ReduceOp::Sum);
  EXPECT_TRUE(equal(sum.shard(world.rank()), Tensor::full({2, 3}, world.size())));
  set_mpi_desync_check(world, false);
}

TEST(MpiWorld, CollectiveTimeoutIsSettable) {
  const double before = mpi_collective_timeout();
  set_mpi_collective_timeout(2.5);
  EXPECT_DOUBLE_EQ(mpi_collective_timeout(), 2.5);
  set_mpi_collective_timeout(0);  // off
  EXPECT_DOUBLE_EQ(mpi_collective_timeout(), 0);
  set_mpi_collective_timeout(std::numeric_limits<double>::infinity());  // off too
  EXPECT_DOUBLE_EQ(mpi_collective_timeout(), 0);
  set_mpi_collective_timeout(before);
  EXPECT_DOUBLE_EQ(mpi_collective_timeout(), before);
  // A negative or NaN timeout is refused, and the setting kept.
  dtensor::testing::expect_error([] { set_mpi_collective_timeout(-1); },
                                 {"set_mpi_collective_timeout(-1", "expected a number of seconds >= 0"});
  dtensor::testing::expect_error([] { set_mpi_collective_timeout(std::nan("")); },
                                 {"expected a number of seconds >= 0"});
  EXPECT_DOUBLE_EQ(mpi_collective_timeout(), before);
}

// The harness's own check (mpi_main.cc): rank 1 fails and leaves the test
// while the other ranks wait for it in an all_reduce. The job must end
// within seconds with rank 1's message instead of waiting for a timeout:
// without the harness's abort, rank 1 would go on to the next test (here a
// long one standing for any test whose collectives do not pair with the
// waiting ranks') and the job would outlast ctest's 60 s limit. Disabled:
// only `mpi.harness.failure_ends_the_job` runs them, expecting the job to
// fail.
TEST(MpiHarness, DISABLED_FailureOnOneRankEndsTheJob) {
  World world = dtensor::testing::test_world();
  ASSERT_NE(world.rank(), 1) << "deliberate failure on rank 1";
  DeviceMesh mesh(world, {world.size()});
  LocalTensor in;
  in.set(world.rank(), Tensor::ones({4}));
  world.backend().all_reduce(in, mesh, 0, ReduceOp::Sum);
}

TEST(MpiHarness, DISABLED_TheNextTestIsLong) {
  std::this_thread::sleep_for(std::chrono::seconds(120));
}
