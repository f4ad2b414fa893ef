// mpi_world_tests: the tests of tests/worlds/ on MPI, one rank per process
// (`mpirun -np 4 mpi_world_tests`). Every rank runs every test; the job
// fails when any rank fails. Rank 0 prints the progress; the others print
// only their failures.
//
// A test that fails on some ranks only ends the job at the end of that
// test: its ranks leave the test early (a failed ASSERT, an exception), so
// they skip collectives the other ranks are blocked in, and the job would
// otherwise wait for the collective timeout (ctest's, or the watchdog's 600
// s). MPI_Abort from the failing rank ends every rank within seconds, after
// the failure has been printed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "worlds/world_util.h"

namespace dtensor::testing {

World test_world() { return World::mpi(); }

namespace {

// Prints the failures of a rank other than 0, prefixed with the rank. The
// test's name is kept from OnTestStart: OnTestPartResult runs with
// GoogleTest's lock held, and asking UnitTest::current_test_info() there
// takes it again, which deadlocked the rank (and so the job) at its first
// failure.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s failed at %s:%d\n%s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
  std::string test_ = "?";
};

// Ends the job when a test failed on this rank (see the file comment).
class AbortOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::fprintf(stderr,
                 "[rank %d] %s.%s failed: ending the job (the other ranks may be waiting in "
                 "a collective this rank skipped)\n",
                 rank_, info.test_suite_name(), info.name());
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  int rank_;
};

}  // namespace

}  // namespace dtensor::testing

int main(int argc, char** argv) {
  dtensor::World world = dtensor::World::mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dtensor::testing::FailurePrinter(world.rank()));
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new dtensor::testing::AbortOnFailure(world.rank()));
  return RUN_ALL_TESTS();
}
