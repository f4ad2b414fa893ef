// Random DTensors (rand, randn) and dropout, layout-invariant: the element at
// global row-major index i is a pure function of (seed, i), so each rank
// makes only its own block, without communication, and the whole equals
// Tensor::rand(shape, seed) whatever the placements.
//
// A block (local shape and global offset from the spec) is made run by run:
// a run is a stretch of the block that is contiguous in the global tensor
// (a row along the last dim, or several whole trailing dims at once), made
// by the plain generator with offset = the global index of its first element.
//
// Calls without a seed take one from the global generator (manual_seed):
// a seed per draw, from a fixed sequence, never per rank, so the values stay
// layout-invariant and the same in every world.
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"

namespace dtensor {

using namespace dispatch;

namespace {

enum class Distribution { Uniform, Normal };

// The block `e` of the global tensor `global` that Tensor::rand/randn(global,
// seed) would give, made on its own.
Tensor random_block(Distribution dist, const Shape& global, const ShardExtent& e, uint64_t seed,
                    DType dtype) {
  auto gen = [&](const Shape& shape, uint64_t offset) {
    return dist == Distribution::Uniform ? Tensor::rand(shape, seed, offset, dtype)
                                         : Tensor::randn(shape, seed, offset, dtype);
  };
  const Shape& local = e.local_shape;
  const int64_t nd = static_cast<int64_t>(local.size());
  if (nd == 0) return gen({}, 0);
  if (local.product() == 0) return Tensor::empty(local, dtype);
  // Dims after j are whole, so a run covers local[j] x the trailing dims.
  int64_t j = nd - 1;
  while (j > 0 && local[j] == global[j]) --j;
  int64_t run = 1;
  for (int64_t d = j; d < nd; ++d) run *= local[d];
  const Shape strides = contiguous_strides(global);
  Tensor out = Tensor::empty(local, dtype);
  char* dst = static_cast<char*>(out.raw_data());
  const size_t run_bytes = static_cast<size_t>(run) * itemsize(dtype);
  const int64_t runs = local.product() / run;
  Shape index(static_cast<size_t>(j), 0);  // position among the runs (dims < j)
  for (int64_t r = 0; r < runs; ++r) {
    int64_t start = e.global_offset[j] * strides[j];
    for (int64_t d = 0; d < j; ++d) start += (e.global_offset[d] + index[d]) * strides[d];
    const Tensor piece = gen({run}, static_cast<uint64_t>(start));
    std::memcpy(dst + static_cast<size_t>(r) * run_bytes, piece.raw_data(), run_bytes);
    for (int64_t d = j - 1; d >= 0; --d) {  // odometer
      if (++index[d] < local[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// Everything is checked before the seed is drawn and before anything is
// allocated: a refused call leaves the generator and the memory as they were.
DTensor random_dtensor(Distribution dist, const char* op, const Shape& shape,
                       const DeviceMesh& mesh, const Placements& placements,
                       std::optional<uint64_t> seed, DType dtype) {
  DT_CHECK(is_floating(dtype), op, ": dtype must be floating point (float32 or float64), got ",
           dtype);
  for (size_t i = 0; i < placements.size(); ++i)
    DT_CHECK(!placements[i].is_partial(), op, ": placements must be Shard or Replicate, got ",
             to_string(placements), " (", placements[i], " on mesh dim ", i, ")");
  for (int64_t n : shape) DT_CHECK(n >= 0, op, ": invalid size ", n, " in shape ", shape);
  DTensorSpec spec(mesh, placements, shape, dtype);  // validates the placements
  if (mesh.world().is_shape_only()) {  // shapes, no values (drawing its seed all the same)
    if (!seed) next_seed();
    return DTensor::meta(spec);
  }
  std::vector<PlannedTensor> blocks;
  for (int rank : mesh.world().held_ranks())
    if (auto e = spec.extent_of_rank(rank))
      blocks.push_back({"the block of rank " + std::to_string(rank), e->local_shape, dtype});
  check_allocation(op, blocks);
  const uint64_t s = seed ? *seed : next_seed();
  LocalTensor local;
  for (int rank : mesh.world().held_ranks())
    if (auto e = spec.extent_of_rank(rank)) local.set(rank, random_block(dist, shape, *e, s, dtype));
  return DTensor(std::move(spec), std::move(local));
}

// ---- dropout ---------------------------------------------------------------------

TensorMeta dropout_meta(const OpSchema& s) {
  const DTensorSpec& x = s.input(0);
  DT_CHECK(is_floating(x.dtype()), "dropout: input dtype must be floating point (float32 or "
           "float64), got ", x.dtype());
  return {x.shape(), contiguous_strides(x.shape()), x.dtype()};
}

// A fixed mask and a non-negative scale commute with every reduction of a
// Partial: sums and averages by linearity, and for max/min,
// max_r(m·c·x_r) = m·c·max_r(x_r) when c >= 0 and m is 0 or 1.
void dropout_strategies(const OpSchema&, const TensorMeta& out, std::vector<DimStrategy>& c) {
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d)
    c.push_back({{Shard(d)}, Shard(d)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    c.push_back({{Partial(op)}, Partial(op)});
  c.push_back({{Replicate()}, Replicate()});
}

constexpr OpRule kDropout{"dropout", dropout_meta, dropout_strategies};

// ---- the global generator ------------------------------------------------------

// PyTorch's default seed, so that an unseeded program is still repeatable.
constexpr uint64_t kDefaultSeed = 67280421310721ull;

struct Generator {
  std::mutex mutex;
  uint64_t seed = kDefaultSeed;
  uint64_t draws = 0;
};

Generator& generator() {
  static auto* g = new Generator();  // never destroyed: draws may run at exit
  return *g;
}

// SplitMix64's finaliser over the seed's Weyl sequence: draws look like
// unrelated 64-bit seeds, not manual_seed + 1, + 2, ..., which would repeat
// the small explicit seeds programs pass (seed=1 here, the 1st draw after
// manual_seed(0) there) and give their tensors the same values.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  g.seed = seed;
  g.draws = 0;
}

RngState get_rng_state() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  return {g.seed, g.draws};
}

void set_rng_state(const RngState& state) {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  g.seed = state.seed;
  g.draws = state.draws;
}

uint64_t initial_seed() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  return g.seed;
}

uint64_t next_seed() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  ++g.draws;
  return mix(g.seed + g.draws * 0x9E3779B97F4A7C15ull);
}

DTensor rand(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
             std::optional<uint64_t> seed, DType dtype) {
  return random_dtensor(Distribution::Uniform, "rand", shape, mesh, placements, seed, dtype);
}

DTensor randn(const Shape& shape, const DeviceMesh& mesh, const Placements& placements,
              std::optional<uint64_t> seed, DType dtype) {
  return random_dtensor(Distribution::Normal, "randn", shape, mesh, placements, seed, dtype);
}

DTensor dropout(const DTensor& x, double p, std::optional<uint64_t> maybe_seed) {
  DT_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  const uint64_t seed = maybe_seed ? *maybe_seed : next_seed();
  const OpSchema schema(OpId::Dropout, {&x.spec()});
  const DTensor* inputs[1] = {&x};
  DTensor out = run(schema, kDropout, inputs, [&](int rank, const Tensor* const* t,
                                                  const OutputSharding& s) {
    if (p == 0) return t[0]->clone();
    // The mask's block at this rank's place in the output (the whole of a
    // dim where the output is Partial), so every piece of a Partial sees
    // the same mask.
    const ShardExtent e = *s.output.extent_of_rank(rank);
    const Tensor keep = ge(random_block(Distribution::Uniform, x.shape(), e, seed,
                                        DType::Float32),
                           p);
    return div(mul(*t[0], keep), 1 - p);
  });
  // The gradient is g * mask / (1 - p) with the same global mask: dropout
  // of g with the same seed (the mask is a function of the seed and the
  // global index only, whatever g's layout).
  if (autograd::recording({&x}))
    autograd::record(out, "dropout", {&x}, {}, [p, seed](const autograd::Context& c) {
      return autograd::Grads{dropout(c.grad, p, seed)};
    });
  return out;
}

}  // namespace dtensor
