// World::Impl — the shared state behind every World handle: the size, the
// held ranks (ascending) and the Backend that runs the collectives. Made by
// World::simulated (world.cc) and World::mpi (mpi_world.cc).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "comm/backend.h"
#include "dtensor/world.h"

namespace dtensor {

struct World::Impl {
  Impl(int size, std::vector<int> held, std::unique_ptr<Backend> backend, bool simulated)
      : size(size), held(std::move(held)), backend(std::move(backend)), simulated(simulated) {}

  int size;
  std::vector<int> held;  // ascending
  std::unique_ptr<Backend> backend;
  bool simulated;
};

}  // namespace dtensor
