// World — the ranks a program runs on and which of them this process holds.
//
// World::Impl is the shared state behind every World handle: the size, the
// held ranks (ascending) and the Backend that runs the collectives. Only the
// simulated world exists so far; an MPI world will build an Impl holding its
// one rank and an MPI backend (move Impl to a private header then).
#include "dtensor/world.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/backend.h"
#include "comm/sim_backend.h"
#include "dtensor/error.h"

namespace dtensor {

struct World::Impl {
  Impl(int size, std::vector<int> held, std::unique_ptr<Backend> backend, bool simulated)
      : size(size), held(std::move(held)), backend(std::move(backend)), simulated(simulated) {}

  int size;
  std::vector<int> held;  // ascending
  std::unique_ptr<Backend> backend;
  bool simulated;
};

World World::simulated(int size) {
  DT_CHECK(size >= 1, "World::simulated: size must be >= 1, got ", size);
  std::vector<int> held(static_cast<size_t>(size));
  std::iota(held.begin(), held.end(), 0);
  return World(std::make_shared<Impl>(size, std::move(held), std::make_unique<SimBackend>(),
                                      /*simulated=*/true));
}

int World::size() const { return impl_->size; }

const std::vector<int>& World::held_ranks() const { return impl_->held; }

bool World::holds(int rank) const {
  if (impl_->simulated) return rank >= 0 && rank < impl_->size;
  return std::binary_search(impl_->held.begin(), impl_->held.end(), rank);
}

bool World::is_simulated() const { return impl_->simulated; }

Backend& World::backend() const { return *impl_->backend; }

}  // namespace dtensor
