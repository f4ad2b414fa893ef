// A box exchange's pieces worked out once, when the plan is made: they
// depend only on the two layouts and the global shape, which the plan cache
// keys on, so a cache hit runs the exchange without intersecting a box.
// The rest of the box exchange (the step, its cost, running it from two
// layouts) is declared in transforms.h.
#pragma once

#include <memory>
#include <optional>

#include "comm/backend.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

// The routes from layout `from` to `to` by mesh coordinate (row-major
// linear index) rather than by rank: outputs[c] is coordinate c's target
// box shape, each move's `from`/`to` name coordinates and its starts are
// relative to the sender's and the receiver's boxes. One set serves every
// view of the mesh (a sub-mesh has one per coordinate of the other root
// dims). REQUIRES: neither layout has a Partial.
std::shared_ptr<const BoxRoutes> box_routes(const DTensorSpec& from, const DTensorSpec& to);

// box_exchange_step (transforms.h) with its box_routes, from one pass over
// the pieces: what the planner keeps when the exchange wins.
std::optional<RedistributeStep> box_exchange_step_with_routes(const DTensorSpec& from,
                                                              const DTensorSpec& to,
                                                              double base_us);

// Runs the exchange of `routes` (by coordinate of `mesh`) over g.
LocalTensor box_exchange(const LocalTensor& in, const Group& g, const DeviceMesh& mesh,
                         const BoxRoutes& routes);

}  // namespace dtensor::redistribute_detail
