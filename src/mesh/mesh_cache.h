// How the process-wide caches (the redistribution plan cache and the
// sharding-propagation cache) hold meshes without keeping dead ones alive.
//
// A cached spec holds a DeviceMesh, which holds its root and the root its
// World (for MPI, its communicators). A cache marks the meshes of what it
// stores with hold(); those handles keep the root alive but are not counted
// as its users. When a root's last user handle goes, every hook registered
// with on_root_released is called with root_id of that root (on the thread
// dropping the handle, while the root is still alive), and each cache drops
// its entries on it; then the root dies with its World.
#pragma once

#include <cstdint>

#include "dtensor/mesh.h"

namespace dtensor {

struct MeshCacheAccess {
  // Marks `mesh` (a handle owned by a cache entry) as the cache's.
  // REQUIRES: called before the entry is published, never on a user's handle.
  static void hold(const DeviceMesh& mesh);
  // The identity of the mesh's root, as passed to the hooks.
  static const void* root_id(const DeviceMesh& mesh);
  // Roots alive in this process (every World's meshes), for tests.
  static int64_t live_roots();
};

// A hook: drop every entry on this root. Must not throw; it may run from a
// destructor on any thread, but never while a cache lock is held (cached
// handles never trigger it).
using RootReleasedFn = void (*)(const void* root_id);
// Registers a hook (at most 8; each cache registers one when it is made).
void on_root_released(RootReleasedFn fn);

}  // namespace dtensor
