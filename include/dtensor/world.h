// World — the set of ranks a program runs on, and which of them this process
// holds.
//
// World::simulated(n) holds all n ranks in this process (the "LocalTensor"
// mode: every op runs on every rank's shard and collectives are computed from
// the shards directly). World::mpi() holds exactly one rank per process, the
// process's rank in an MPI job (mpirun -np N program). Everything above the Backend — meshes, specs, DTensors, the
// planner — is written against World and never asks which kind it is, so the
// same program runs on both.
//
// A World is a cheap handle (shared); copies refer to the same world.
#pragma once

#include <memory>
#include <vector>

namespace dtensor {

class Backend;     // src/comm/backend.h: the collectives
struct WorldRoles;  // src/world/roles.h: a shape-only world's roles (estimate::profile)

class World {
 public:
  // All `size` ranks held by this process. REQUIRES: size >= 1.
  static World simulated(int size);
  // All `size` ranks held by this process, as shapes only: every tensor of
  // the world is on the meta device (shapes, dtypes, strides and layouts,
  // no data), ops compute their outputs' shapes without running kernels,
  // and collectives record themselves (CommDebugMode, CollectiveTrace) and
  // give each rank the shape it would get. The same program that trains on
  // World::simulated runs here unchanged, in time and memory that depend
  // on shapes only: what `dtensor estimate` plans a large run with
  // (docs/estimate.md). Reading a value (item(), full_tensor()'s data)
  // throws. REQUIRES: size >= 1.
  static World shape_only(int size);
  // This process's rank of an MPI job: MPI_COMM_WORLD, initialised here
  // unless the program already did (then it is also the program's to
  // finalise; otherwise dtensor finalises it once, at exit, after every
  // rank has reached exit). Calling it again returns the same world.
  // From then on a rank that ends abnormally ends the whole job within
  // seconds, with a "dtensor: rank R: ..." line, instead of leaving the
  // others waiting in a collective: an exception escaping main
  // (MPI_Abort), exit(n) or return n from main with n != 0 (MPI is not
  // finalised, so mpirun ends the job), an exit with status 0 while a
  // rank of this node waits for this one in a collective, and SIGSEGV,
  // SIGBUS, SIGFPE, SIGILL, SIGABRT (printed, then handed on). A
  // collective that has not completed after DTENSOR_COLLECTIVE_TIMEOUT
  // seconds (default 600; set_mpi_collective_timeout in dtensor/mpi.h)
  // ends the job naming the ranks that did not arrive. To adopt another
  // communicator, see dtensor/mpi.h. Throws when built without MPI.
  static World mpi(int* argc = nullptr, char*** argv = nullptr);
  // Whether this build has the MPI backend.
  static bool mpi_available();
  // Whether an MPI launcher started this process (mpirun, srun: the
  // variables they set, read without initialising MPI).
  static bool launched_by_mpi();
  // World::mpi when launched by mpirun (and built with MPI), otherwise
  // World::simulated(simulated_size): one program for both ways of running,
  // `./prog` and `mpirun -np N ./prog`. The caller checks that the size it
  // got is the one its mesh needs. In a build without MPI, every process
  // mpirun starts runs its own simulated world.
  static World from_launcher(int simulated_size, int* argc = nullptr, char*** argv = nullptr);

  int size() const;
  // The ranks this process holds, ascending (all ranks when simulated).
  const std::vector<int>& held_ranks() const;
  bool holds(int rank) const;
  bool is_simulated() const;
  // Whether it is a World::shape_only (which is also simulated).
  bool is_shape_only() const;
  // This process's rank (MPI); 0 in a simulated world.
  int rank() const;
  // The collectives of this world.
  Backend& backend() const;

  friend bool operator==(const World& a, const World& b) { return a.impl_ == b.impl_; }
  friend bool operator!=(const World& a, const World& b) { return a.impl_ != b.impl_; }

  struct Impl;
  explicit World(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  friend struct WorldRoles;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtensor
