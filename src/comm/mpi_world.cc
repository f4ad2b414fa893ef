// The MPI world: one rank per process, collectives through MpiBackend.
//
// Lifetime: World::mpi initialises MPI unless the program did; then dtensor
// finalises it once, at exit (on_exit). The world's state is kept for the
// whole run, so group communicators are never freed after finalisation.
//
// Failure: any rank that ends abnormally ends the whole job within seconds,
// with a "dtensor: rank R: ..." line, instead of leaving the other ranks
// blocked in their next collective:
// - an exception escaping main: a terminate handler prints it and calls
//   MPI_Abort;
// - exit(n) or return n from main with n != 0: the exit handler prints the
//   status and does not finalise; mpirun ends the job when a rank exits
//   non-zero (a blocking MPI_Finalize here was the old hang);
// - exit with status 0 while other ranks still run: MPI_Finalize would wait
//   for them, so the exit handler first waits for every rank to reach exit
//   (a polled MPI_Ibarrier), and ends the job (message, then _exit(1)) as
//   soon as a rank of this node is seen blocked in a collective that
//   includes this rank and that it never entered (the CollectiveMonitor's
//   shared-memory board). There is no time limit on that wait: a rank may
//   finish long before the others (a checkpoint written by rank 0); a peer
//   on another node that waits for it is ended by its own collective
//   timeout;
// - SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: a handler prints the signal,
//   then hands it on (Open MPI's backtrace, then death by the signal, which
//   mpirun answers by ending the job). SIGKILL cannot be caught: mpirun
//   reports it ("exited on signal 9").
// The collective timeout (mpi_watchdog.h) covers what is left: a stopped or
// stuck rank.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/mpi_backend.h"
#include "comm/mpi_watchdog.h"
#include "dtensor/error.h"
#include "dtensor/mpi.h"
#include "world/world_impl.h"

namespace dtensor {

namespace {

// The world of World::mpi (never destroyed: used until exit).
std::shared_ptr<World::Impl>* g_world = nullptr;
MPI_Comm g_exit_comm = MPI_COMM_NULL;  // the exit barrier's, a duplicate of MPI_COMM_WORLD
int g_rank = -1;                       // MPI_COMM_WORLD rank, for the signal handler

MpiBackend* world_backend() {
  return g_world == nullptr ? nullptr : dynamic_cast<MpiBackend*>((*g_world)->backend.get());
}

// Status 0: wait until every rank has reached exit before MPI_Finalize (which
// would otherwise wait forever for a rank blocked in a collective), watching
// for a peer that waits on this rank in vain. No time limit (see the top).
void wait_for_all_at_exit() {
  MpiBackend* backend = world_backend();
  if (backend != nullptr) backend->monitor().mark_exited();
  if (g_exit_comm == MPI_COMM_NULL) return;
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(g_exit_comm, &req) != MPI_SUCCESS) return;
  std::string suspect;
  auto suspect_since = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) return;
    const auto now = std::chrono::steady_clock::now();
    if (backend != nullptr && i % 20 == 0) {
      // The same wait seen for half a second: not a peer just leaving a
      // collective this rank did make (or a root that returns early).
      const std::string w = backend->monitor().peer_waiting_on_me(
          [backend](uint64_t h) { return backend->calls_on(h); });
      if (w != suspect) {
        suspect = w;
        suspect_since = now;
      } else if (!w.empty() && now - suspect_since > std::chrono::milliseconds(500)) {
        print_rank_message(g_rank, "exited (status 0) while " + w +
                                       ". Ending the job.");
        _exit(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void finalize_at_exit(int status, void*) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  if (status != 0) {
    // Not finalising is what ends the job: mpirun aborts it when a rank
    // exits non-zero, while MPI_Finalize would wait for the others.
    if (MpiBackend* backend = world_backend()) backend->monitor().mark_exited();
    print_rank_message(g_rank, "exited with status " + std::to_string(status) +
                                   " (exit() or a non-zero return from main); ending the job");
    return;
  }
  wait_for_all_at_exit();
  MPI_Finalize();
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

// ---- fatal signals ----------------------------------------------------------------

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[sizeof(kFatalSignals) / sizeof(int)];

// Async-signal-safe: fixed buffers and write(2) only.
void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  char line[160];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s && n + 1 < sizeof(line)) line[n++] = *s++;
  };
  auto put_int = [&](long v) {
    char digits[24];
    int k = 0;
    const bool neg = v < 0;
    unsigned long u = neg ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0 && k < 22);
    if (neg) digits[k++] = '-';
    while (k > 0 && n + 1 < sizeof(line)) line[n++] = digits[--k];
  };
  const char* name = sig == SIGSEGV ? "SIGSEGV (segmentation fault)"
                     : sig == SIGBUS ? "SIGBUS (bus error)"
                     : sig == SIGFPE ? "SIGFPE (arithmetic exception)"
                     : sig == SIGILL ? "SIGILL (illegal instruction)"
                                     : "SIGABRT (abort)";
  put("dtensor: rank ");
  put_int(g_rank);
  put(": killed by signal ");
  put_int(sig);
  put(" ");
  put(name);
  put("; ending the job\n");
  ssize_t ignored = ::write(2, line, n);
  (void)ignored;
  // Hand the signal on: to the handler before ours (Open MPI prints a
  // backtrace and re-raises), or to the default action. The signal is
  // blocked while this runs, so the raise is delivered once it returns (a
  // real fault re-executes the faulting instruction and arrives there too).
  for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(int); ++i) {
    if (kFatalSignals[i] != sig) continue;
    struct sigaction prev = g_previous[i];
    if (!(prev.sa_flags & SA_SIGINFO) &&
        (prev.sa_handler == SIG_IGN || prev.sa_handler == SIG_DFL)) {
      prev.sa_handler = SIG_DFL;
    }
    sigaction(sig, &prev, nullptr);
  }
  (void)info;
  (void)context;
  raise(sig);
}

void install_signal_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(int); ++i) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = on_fatal_signal;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(kFatalSignals[i], &action, &g_previous[i]);
  }
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
      // on_exit (glibc) and not atexit: the handler needs the exit status.
      on_exit(finalize_at_exit, nullptr);
      MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_comm);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    std::set_terminate(abort_job);
    install_signal_handlers();
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    return_errors(comm);
    world = new std::shared_ptr<Impl>(make_impl(comm));
    g_world = world;
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
  install_signal_handlers();
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

void set_mpi_collective_timeout(double seconds) { set_collective_timeout_seconds(seconds); }

double mpi_collective_timeout() { return collective_timeout_seconds(); }

}  // namespace dtensor
