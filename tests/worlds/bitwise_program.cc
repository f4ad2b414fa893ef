// bitwise_program: the same random DTensor programs, printed as hashes of
// their results' bits, so that a run in the simulated world and a run under
// `mpirun -np N` can be compared byte for byte (tests/worlds/same_bits.cmake).
//
//   bitwise_program N CASES SEED    # N simulated ranks, or N processes under mpirun
//
// Each case draws a mesh of 1-4 dims that fits N ranks, a float tensor with
// uneven and empty shards, and a source layout with Partials of every kind
// whose per-rank pieces are arbitrary floats (so that the order in which a
// sum adds them shows in the last bits; max/min pieces sometimes hold NaN),
// then redistributes it, runs one op on it and prints, on rank 0, an FNV-1a
// hash of the full tensor's bytes after each step, and of the gradient of
// sum(op(y) * w) with respect to x (w random). Both worlds must print the
// same lines: every reduction runs in group-rank order in both, backward
// included.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "dtensor/dtensor.h"
#include "layout_util.h"

using namespace dtensor;

namespace {

uint64_t fnv1a(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The source: one full tensor of arbitrary floats per coordinate over the
// Partial mesh dims (so replicas agree and each Partial piece differs),
// each rank holding its extent of its piece; NaN now and then in max/min
// pieces. Seeded by that coordinate, so both worlds build the same ones.
DTensor random_source(const DeviceMesh& mesh, const Placements& pl, const Shape& shape,
                      uint64_t seed, bool with_nan) {
  const DTensorSpec spec(mesh, pl, shape);
  FromLocalOptions options;
  options.shape = shape;
  options.requires_grad = true;
  return from_local(
      [&](int rank) {
        const DimVector coord = *mesh.coordinate(rank);
        uint64_t piece = 0;
        for (size_t i = 0; i < pl.size(); ++i)
          if (pl[i].is_partial()) piece = piece * 64 + static_cast<uint64_t>(coord[i]);
        Tensor full = Tensor::randn(shape, seed * 4099 + piece) * 3.7;
        if (with_nan && full.numel() > 0 && (seed + piece) % 3 == 0)
          full.view({full.numel()}).narrow(0, static_cast<int64_t>(piece) % full.numel(), 1)
              .fill_(std::numeric_limits<double>::quiet_NaN());
        const ShardExtent e = spec.extent(coord);
        Tensor t = full;
        for (int64_t d = 0; d < full.dim(); ++d)
          t = t.narrow(d, e.local_shape[d] == 0 ? 0 : e.global_offset[d], e.local_shape[d]);
        return t.contiguous();
      },
      mesh, pl, options);
}

DTensor run_op(int which, const DTensor& y, uint64_t seed) {
  const int64_t nd = y.dim();
  switch (which) {
    case 0: return sum(y, {0});
    case 1: return mean(y);
    case 2: return softmax(y, nd - 1);
    case 3: return y * y + 0.25;
    case 4: return y.shape()[nd - 1] > 0 ? amax(y, {nd - 1}) : sum(y);  // amax of none: an error
    default: {
      // y (flattened to 2-d) @ w with w sharded on its rows like y's columns
      // may be: a Partial(sum) result reduced by the next full_tensor.
      const DTensor y2 = nd == 1 ? unsqueeze(y, 0) : flatten(y, 0, nd - 2);
      const int64_t k = y2.shape()[1];
      Placements wp;
      for (size_t i = 0; i < y2.placements().size(); ++i)
        wp.push_back(y2.placements()[i].is_shard(1) ? Shard(0) : Replicate());
      const DTensor w = distribute_tensor(Tensor::randn({k, 3}, seed), y.spec().mesh(), wp);
      return matmul(y2, w);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 4) {
      std::fprintf(stderr, "usage: bitwise_program RANKS CASES SEED\n");
      return 2;
    }
    const int ranks = std::atoi(argv[1]);
    const int cases = std::atoi(argv[2]);
    World world = World::from_launcher(ranks, &argc, &argv);
    if (world.size() != ranks) {
      std::fprintf(stderr, "bitwise_program: %d ranks asked, the world has %d\n", ranks,
                   world.size());
      return 2;
    }
    std::mt19937 rng(static_cast<uint32_t>(std::atoi(argv[3])));
    for (int c = 0; c < cases; ++c) {
      const Shape mesh_shape = dtensor::testing::random_mesh(rng, ranks);
      DeviceMesh mesh(world, mesh_shape);
      const Shape shape = dtensor::testing::random_shape_for(rng, mesh.size());
      const auto [from, to] =
          dtensor::testing::random_placement_pair(rng, mesh.ndim(), static_cast<int64_t>(shape.size()));
      bool max_min = false;
      for (const Placement& p : from)
        max_min |= p.is_partial() && (p.reduce_op() == ReduceOp::Max || p.reduce_op() == ReduceOp::Min);
      const int op = static_cast<int>(rng() % 6);
      const uint64_t seed = rng();
      // A mesh smaller than the world leaves some processes out (rank 0,
      // which prints, is always in): they drew the same numbers and go on.
      if (!mesh.contains(world.held_ranks().front())) continue;
      const DTensor x = random_source(mesh, from, shape, seed, max_min);
      const DTensor y = x.redistribute(to);
      const uint64_t hx = fnv1a(x.full_tensor()), hy = fnv1a(y.full_tensor());
      const DTensor z = run_op(op, y, seed + 1);
      const uint64_t hz = fnv1a(z.full_tensor());
      const DTensor w = distribute_tensor(Tensor::randn(z.shape(), seed + 2), mesh,
                                          Placements(static_cast<size_t>(mesh.ndim()), Replicate()));
      sum(mul(z, w)).backward();
      const uint64_t hg = x.grad() ? fnv1a(x.grad()->full_tensor()) : 0;
      if (world.rank() == 0)
        std::printf("case %d %s %s -> %s op %d: %016llx %016llx %016llx grad %016llx\n", c,
                    mesh.to_string().c_str(), to_string(from).c_str(), to_string(to).c_str(), op,
                    static_cast<unsigned long long>(hx), static_cast<unsigned long long>(hy),
                    static_cast<unsigned long long>(hz), static_cast<unsigned long long>(hg));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bitwise_program: %s\n", e.what());
    return 1;
  }
}
