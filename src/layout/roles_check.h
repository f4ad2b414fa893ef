// The check behind a shape-only world's roles (world/roles.h): every
// DTensor made while the world computes by roles has, on each rank, the
// local shape of the rank that stands in for it.
#pragma once

#include "dtensor/spec.h"

namespace dtensor::detail {

// Throws RolesChanged (world/roles.h), the roles split by the local
// shapes of `spec`, when a rank's differs from its stand-in's (or one is
// in spec's mesh and the other not). REQUIRES: WorldRoles::active(the
// spec's world). Each spec is checked once per epoch of the roles.
void check_roles(const DTensorSpec& spec);
// Drops the specs remembered as checked (and the worlds they hold).
void forget_role_checks();

}  // namespace dtensor::detail
