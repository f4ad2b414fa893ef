// The program the consumer tests build against an installed dtensor (with
// find_package and with pkg-config): the README's first program, which
// prints the placements it reaches and whether the full tensors match.
#include <dtensor/dtensor.h>

#include <iostream>

using namespace dtensor;

int main() {
  World world = World::simulated(4);
  DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  Tensor x = Tensor::randn({8, 6}, /*seed=*/0);
  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
  DTensor y = (d * 2.0 + 1.0).redistribute({Replicate(), Shard(1)});
  DTensor s = sum(y, {1});
  const bool same = equal(y.full_tensor(), x * 2.0 + 1.0);
  std::cout << "dtensor consumer: " << to_string(y.placements()) << " then "
            << to_string(s.placements()) << ", " << (same ? "match" : "MISMATCH") << "\n";
  return same ? 0 : 1;
}
