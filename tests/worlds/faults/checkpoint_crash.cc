// A rank killed in the middle of a checkpoint save (checkpoint_crash.cmake):
//
//   checkpoint_crash save DIR V           save the state of version V
//   checkpoint_crash crash DIR V POINT R N
//                                         save version V, but the process of
//                                         rank R kills itself (SIGKILL) the N-th
//                                         time the save reaches POINT (prepare,
//                                         write, written, metadata, publish)
//   checkpoint_crash check DIR V          load DIR into another layout; exit 0
//                                         when it holds version V exactly
//
// World::from_launcher: one rank per process under mpirun, else a simulated
// world of 4 ranks, so a checkpoint left by a killed MPI job is checked in
// the simulated world.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "checkpoint/common.h"
#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

// Version v of the state: two tensors (one uneven, one replicated) and a step.
Tensor weight(int v) { return Tensor::randn({13, 6}, static_cast<uint64_t>(v)); }
Tensor bias(int v) { return Tensor::randn({6}, static_cast<uint64_t>(100 + v)); }

checkpoint::StateDict state_of(const DeviceMesh& mesh, int v) {
  return {{"w", distribute_tensor(weight(v), mesh, {Shard(0)})},
          {"b", distribute_tensor(bias(v), mesh, {Replicate()})},
          {"step", checkpoint::Value(int64_t{v})}};
}

}  // namespace

int main(int argc, char** argv) {
  World world = World::from_launcher(4, &argc, &argv);
  const std::string mode = argc > 3 ? argv[1] : "";
  if (mode.empty() || (mode == "crash" && argc != 7)) {
    std::cerr << "usage: checkpoint_crash save|check DIR V | crash DIR V POINT RANK N\n";
    return 2;
  }
  const std::string dir = argv[2];
  const int v = std::atoi(argv[3]);
  const DeviceMesh mesh(world, Shape{world.size()});
  if (mode == "save" || mode == "crash") {
    if (mode == "crash") {
      const std::string point = argv[4];
      const int victim = std::atoi(argv[5]);
      const int nth = std::atoi(argv[6]);
      checkpoint::detail::set_save_fault_hook([=, seen = 0](const char* at, int rank) mutable {
        if (point == at && rank == victim && ++seen == nth) {
          std::fprintf(stderr, "checkpoint_crash: killing rank %d at %s #%d\n", rank, at, nth);
          std::raise(SIGKILL);
        }
      });
    }
    checkpoint::save(state_of(mesh, v), dir);
    return 0;
  }
  if (mode == "check") {
    const DeviceMesh other(world, Shape{2, world.size() / 2});
    checkpoint::StateDict state{
        {"w", distribute_tensor(Tensor::zeros({13, 6}), other, {Replicate(), Shard(1)})},
        {"b", distribute_tensor(Tensor::zeros({6}), other, {Shard(0), Replicate()})},
        {"step", checkpoint::Value(int64_t{-1})}};
    checkpoint::load(state, dir);
    const bool ok = equal(std::get<DTensor>(state["w"]).full_tensor(), weight(v)) &&
                    equal(std::get<DTensor>(state["b"]).full_tensor(), bias(v)) &&
                    std::get<int64_t>(std::get<checkpoint::Value>(state["step"])) == v;
    if (world.rank() == 0 || world.is_simulated())
      std::cout << dir << (ok ? " holds" : " does NOT hold") << " version " << v << "\n";
    return ok ? 0 : 1;
  }
  std::cerr << "checkpoint_crash: unknown mode '" << mode << "'\n";
  return 2;
}
