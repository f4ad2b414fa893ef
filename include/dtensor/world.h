// World — the set of ranks a program runs on, and which of them this process
// holds.
//
// World::simulated(n) holds all n ranks in this process (the "LocalTensor"
// mode: every op runs on every rank's shard and collectives are computed from
// the shards directly). An MPI world (a later issue) holds exactly one rank
// per process. Everything above the Backend — meshes, specs, DTensors, the
// planner — is written against World and never asks which kind it is, so the
// same program runs on both.
//
// A World is a cheap handle (shared); copies refer to the same world.
#pragma once

#include <memory>
#include <vector>

namespace dtensor {

class Backend;  // src/comm/backend.h: the collectives

class World {
 public:
  // All `size` ranks held by this process. REQUIRES: size >= 1.
  static World simulated(int size);

  int size() const;
  // The ranks this process holds, ascending (all ranks when simulated).
  const std::vector<int>& held_ranks() const;
  bool holds(int rank) const;
  bool is_simulated() const;
  // The collectives of this world.
  Backend& backend() const;

  friend bool operator==(const World& a, const World& b) { return a.impl_ == b.impl_; }
  friend bool operator!=(const World& a, const World& b) { return a.impl_ != b.impl_; }

  struct Impl;
  explicit World(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtensor
