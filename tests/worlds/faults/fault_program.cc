// One MPI program, many ways for one rank to go wrong (argv[1] names it).
// Each must end the whole job within seconds with a non-zero status and a
// message naming the rank, never leave the other ranks waiting in a
// collective. tests/CMakeLists.txt runs each mode under expect_abort.cmake.
//
//   throw             rank 1 throws; the others all_reduce
//   exit1             rank 1 calls exit(1); the others all_reduce
//   return2           rank 1 returns 2 from main; the others all_reduce
//   return0           rank 1 returns 0 from main; the others all_reduce
//   sigkill           rank 1 kills itself with SIGKILL; the others all_reduce
//   sigsegv           rank 1 raises SIGSEGV; the others all_reduce
//   mismatch_first    2x2 mesh: rank 1's first collective is over mesh dim 1,
//                     the others' over mesh dim 0 (first use of both groups)
//   mismatch_later    after a good all_reduce, rank 1 all_gathers while the
//                     others all_reduce, over the same group
//   skip_full_tensor  rank 1 skips one full_tensor() of a [6] tensor
//   swap_full_tensor  rank 1 gathers a [7] tensor then a [6] one, the others
//                     the [6] one first (shards differ only along the gather dim)
//   sleep             rank 1 sleeps 60 s before its all_reduce (the watchdog
//                     ends the job after DTENSOR_COLLECTIVE_TIMEOUT)
//   sigstop           rank 1 stops itself (SIGSTOP) before its all_reduce
//   ok                every rank does the same: must exit 0
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

Tensor sum_over_world(const DeviceMesh& mesh, int64_t n) {
  return distribute_tensor(Tensor::ones({n}), mesh, {Partial()}).full_tensor();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  World world = World::mpi(&argc, &argv);
  const int rank = world.rank();
  const bool odd_one = rank == 1;
  if (mode == "mismatch_first") {
    DeviceMesh mesh(world, {2, world.size() / 2});
    DTensor d = distribute_tensor(Tensor::ones({4}), mesh, {Partial(), Partial()});
    // Rank 1 reduces over mesh dim 1 first, the others over mesh dim 0.
    d = d.redistribute(odd_one ? Placements{Partial(), Replicate()}
                               : Placements{Replicate(), Partial()});
    std::cout << "rank " << rank << ": " << d.to_local(rank).shape() << "\n";
    return 0;
  }
  DeviceMesh mesh(world, {world.size()});
  if (mode == "ok") {
    const Tensor t = sum_over_world(mesh, 4);
    std::cout << "rank " << rank << ": " << t.shape() << "\n";
    return 0;
  }
  if (mode == "mismatch_later") {
    sum_over_world(mesh, 4);  // the group exists and works
    const Tensor t =
        odd_one ? distribute_tensor(Tensor::ones({4}), mesh, {Shard(0)}).full_tensor()
                : sum_over_world(mesh, 4);
    std::cout << "rank " << rank << ": " << t.shape() << "\n";
    return 0;
  }
  if (mode == "swap_full_tensor") {
    DTensor a = distribute_tensor(Tensor::arange(6), mesh, {Shard(0)});
    DTensor b = distribute_tensor(Tensor::arange(7), mesh, {Shard(0)});
    const Tensor first = odd_one ? b.full_tensor() : a.full_tensor();
    const Tensor second = odd_one ? a.full_tensor() : b.full_tensor();
    std::cout << "rank " << rank << ": " << first.shape() << " " << second.shape() << "\n";
    return 0;
  }
  if (mode == "skip_full_tensor") {
    DTensor d = distribute_tensor(Tensor::arange(6), mesh, {Shard(0)});
    Tensor first;
    if (!odd_one) first = d.full_tensor();  // rank 1 skips this one
    const Tensor second = d.full_tensor();
    std::cout << "rank " << rank << ": " << second.shape() << "\n";
    return 0;
  }
  if (odd_one) {
    if (mode == "throw") throw std::runtime_error("boom from rank 1");
    if (mode == "exit1") {
      std::fprintf(stderr, "rank 1 calls exit(1)\n");
      std::exit(1);
    }
    if (mode == "return2") {
      std::fprintf(stderr, "rank 1 returns 2\n");
      return 2;
    }
    if (mode == "return0") return 0;
    if (mode == "sigkill") std::raise(SIGKILL);
    if (mode == "sigsegv") std::raise(SIGSEGV);
    if (mode == "sleep") sleep(60);
    if (mode == "sigstop") std::raise(SIGSTOP);
  }
  const Tensor t = sum_over_world(mesh, 4);
  std::cout << "rank " << rank << ": " << t.shape() << "\n";
  return 0;
}
