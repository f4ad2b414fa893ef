// world_tests: the tests of tests/worlds/ on a simulated world of 8 ranks.
#include "worlds/world_util.h"

namespace dtensor::testing {

World test_world() {
  static const World world = World::simulated(8);
  return world;
}

}  // namespace dtensor::testing
