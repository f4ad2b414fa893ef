// The MPI world: one rank per process, collectives through MpiBackend.
//
// Lifetime: World::mpi initialises MPI unless the program did; then dtensor
// finalises it once, at exit (atexit). The world's state is kept for the
// whole run, so group communicators are never freed after finalisation.
// Failure: World::mpi installs a terminate handler, so an exception that
// escapes on one rank prints "dtensor: rank R: <message>" and calls
// MPI_Abort, which ends every rank of the job with a non-zero code rather
// than leaving the others blocked in their next collective.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>

#include "comm/mpi_backend.h"
#include "comm/world_impl.h"
#include "dtensor/error.h"
#include "dtensor/mpi.h"

namespace dtensor {

namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

[[noreturn]] void abort_job() {
  int rank = -1;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* what = "unknown exception";
  std::string text;
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      text = ex.what();
      what = text.c_str();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an exception";
  }
  std::fprintf(stderr, "dtensor: rank %d: %s\n", rank, what);
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// MPI's default handler aborts the job inside the MPI library on any error,
// so the return codes the backend checks would never be seen. With
// MPI_ERRORS_RETURN on dtensor's communicator (and the group communicators
// made from it, which inherit it) a failed call becomes a dtensor::Error
// naming the call; escaping main, it still ends the job with that message.
void return_errors(MPI_Comm comm) { MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN); }

std::shared_ptr<World::Impl> make_impl(MPI_Comm comm) {
  int size = 0, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  return std::make_shared<World::Impl>(size, std::vector<int>{rank},
                                       std::make_unique<MpiBackend>(comm), /*simulated=*/false);
}

}  // namespace

bool World::mpi_available() { return true; }

World World::mpi(int* argc, char*** argv) {
  static std::mutex mu;
  static std::shared_ptr<Impl>* world = nullptr;  // never destroyed: used until exit
  std::lock_guard<std::mutex> lock(mu);
  if (world == nullptr) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
      DT_CHECK(rc == MPI_SUCCESS, "World::mpi: MPI_Init_thread failed (code ", rc, ")");
      std::atexit(finalize_at_exit);
    }
    std::set_terminate(abort_job);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    return_errors(comm);
    world = new std::shared_ptr<Impl>(make_impl(comm));
  }
  return World(*world);
}

World world_from_mpi_comm(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  DT_CHECK(initialized, "world_from_mpi_comm: MPI is not initialised (call MPI_Init first, or use "
           "World::mpi())");
  DT_CHECK(comm != MPI_COMM_NULL, "world_from_mpi_comm: the communicator is MPI_COMM_NULL");
  std::set_terminate(abort_job);
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(comm, &dup);
  return_errors(dup);
  return World(make_impl(dup));
}

namespace {

MpiBackend& mpi_backend_of(const World& world, const char* fn) {
  auto* backend = dynamic_cast<MpiBackend*>(&world.backend());
  DT_CHECK(backend != nullptr, fn, ": the world is simulated (", world.size(),
           " ranks in this process); the desync check is for MPI worlds (World::mpi)");
  return *backend;
}

}  // namespace

void set_mpi_desync_check(const World& world, bool on) {
  mpi_backend_of(world, "set_mpi_desync_check").set_desync_check(on);
}

bool mpi_desync_check(const World& world) {
  return mpi_backend_of(world, "mpi_desync_check").desync_check();
}

}  // namespace dtensor
