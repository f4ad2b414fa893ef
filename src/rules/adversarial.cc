// Inputs that make a wrong rule show (rules.h): integer-valued data, so
// sums of pieces are exact in any order and a wrong result differs by whole
// numbers; and Partial pieces no rule can get right by accident.
//
// The pieces of mesh dim m are made from the value every member of the group
// holds at that point (mesh dims are split one after another, so nested
// Partials divide pieces further): member g < n-1 holds a random integer of
// sign (-1)^g and magnitude about 10(g+1) for sum, the last member the
// rest; avg likewise with the last holding n*x minus the others; max holds x
// on one member per element (which one is random per element) and
// x - 5(g+1) - u on the others (u random in [0, 3] per element), min
// x + 5(g+1) + u; with `half`, 1/2 further (see split()). The randomness of mesh dim m depends only on the
// coordinates of the mesh dims split before it, so the members of a group
// agree on each other's pieces.
#include <algorithm>

#include "rules/cases.h"

namespace dtensor::rules {

namespace {

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ (v + 0x9E3779B97F4A7C15ull)) * 0x100000001B3ull; }

// Member g's random piece (sum, avg) for the group keyed by `key`.
Tensor piece(const Shape& shape, DType dtype, uint64_t key, int64_t g) {
  const double sign = g % 2 == 0 ? 1.0 : -1.0;
  Tensor r = Tensor::randint(1, 10, shape, mix(key, static_cast<uint64_t>(g))).to(dtype);
  return mul(add(r, Scalar(10.0 * static_cast<double>(g + 1))), Scalar(sign));
}

Tensor split(const Tensor& x, ReduceOp op, int64_t g, int64_t n, uint64_t key, bool half) {
  const Shape& shape = x.shape();
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: {
      if (g < n - 1) return piece(shape, x.dtype(), key, g);
      Tensor rest = op == ReduceOp::Sum ? x.clone() : mul(x, Scalar(static_cast<double>(n)));
      for (int64_t j = 0; j + 1 < n; ++j) rest = sub(rest, piece(shape, x.dtype(), key, j));
      return rest;
    }
    case ReduceOp::Max:
    case ReduceOp::Min: {
      // Which member holds element i is random, independently per element
      // (a pattern would repeat along some dim, and a reduction along it
      // could then pass by luck), and never the same member for all
      // elements, so no single member's piece passes for the value.
      std::vector<int64_t> h(static_cast<size_t>(shape.product()));
      uint64_t state = mix(key, 77);
      for (int64_t& v : h) {
        state = mix(state, 0x51ED27);
        v = static_cast<int64_t>((state >> 17) % static_cast<uint64_t>(n));
      }
      if (h.size() > 1 && std::count(h.begin(), h.end(), h[0]) == static_cast<int64_t>(h.size()))
        h[0] = (h[0] + 1) % n;
      const Tensor holder = Tensor::from_vector(h, shape);
      const Tensor other = ne(holder, Scalar(g));
      // 5(g+1) to 5(g+1)+3: distinct per member, varying per element; with
      // `half`, half an integer more (floats), so that no piece but the
      // holder's equals an integer value of the data and no wrong choice
      // among pieces gives the right number by luck. Without it pieces do
      // meet values, which is what shows a comparison wrong.
      const double off = 5.0 * static_cast<double>(g + 1) +
                         (half && is_floating(x.dtype()) ? 0.5 : 0.0);
      const Tensor offset = add(Tensor::randint(0, 4, shape, mix(key, 1000 + g)).to(x.dtype()),
                                Scalar(off));
      const Tensor moved = op == ReduceOp::Max ? sub(x, offset) : add(x, offset);
      return where(other, moved, x);
    }
  }
  DT_THROW("internal error: unknown reduce op");
}

}  // namespace

Tensor make_input(const CaseInput& in, uint64_t seed) {
  switch (in.kind) {
    case InputKind::Values: return Tensor::randint(-9, 10, in.shape, seed).to(DType::Float32);
    case InputKind::Positive: return Tensor::randint(1, 10, in.shape, seed).to(DType::Float32);
    case InputKind::FewZeros:
    case InputKind::FewNonzeros: {
      const Tensor picks = Tensor::randint(0, 5, in.shape, seed);
      const Tensor keep = in.kind == InputKind::FewZeros ? ne(picks, Scalar(0)) : eq(picks, Scalar(0));
      return mul(keep.to(DType::Float32), Tensor::randint(-9, 10, in.shape, seed + 1).to(DType::Float32));
    }
    case InputKind::Mask: return gt(Tensor::rand(in.shape, seed), Scalar(0.5));
    case InputKind::Index: return Tensor::randint(0, in.bound, in.shape, seed);
  }
  DT_THROW("internal error: unknown input kind");
}

DTensor adversarial(const Tensor& full, const DeviceMesh& mesh, const Placements& pl,
                    uint64_t seed, bool half) {
  Placements base = pl;
  for (Placement& p : base)
    if (p.is_partial()) p = Replicate();
  const DTensorSpec spec(mesh, pl, full.shape(), full.dtype());  // validates pl
  LocalTensor local = distribute_tensor(full, mesh, base).local();
  for (size_t m = 0; m < pl.size(); ++m) {
    if (!pl[m].is_partial()) continue;
    const int md = static_cast<int>(m);
    local = local.map([&](int rank, const Tensor& t) {
      uint64_t key = mix(seed, m);
      for (size_t j = 0; j < m; ++j)
        if (pl[j].is_partial())
          key = mix(key, static_cast<uint64_t>(mesh.group_index(rank, static_cast<int>(j))));
      return split(t, pl[m].reduce_op(), mesh.group_index(rank, md), mesh.size(md), key, half);
    });
  }
  return DTensor(spec, std::move(local));
}

}  // namespace dtensor::rules
