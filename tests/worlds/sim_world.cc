// world_tests: the tests of tests/worlds/ on a simulated world of 64 ranks,
// or DTENSOR_TEST_WORLD_SIZE ranks when that is set (e.g. 12 to match an
// MPI run of -np 12).
#include <cstdlib>
#include <string>

#include "worlds/world_util.h"

namespace dtensor::testing {

World test_world() {
  static const World world = [] {
    const char* text = std::getenv("DTENSOR_TEST_WORLD_SIZE");
    return World::simulated(text != nullptr && *text != '\0' ? std::stoi(text) : 64);
  }();
  return world;
}

}  // namespace dtensor::testing
