// Gradients of the view ops (view.cc) and the joining, copying and indexing
// ops (tensor_ops.cc) on every world (see world_util.h): random shapes
// (uneven and empty shards) and random input placements (Partials
// included) on the grad meshes, float64, against finite differences and
// against the same computation on replicated inputs. The checked function
// is op(inputs) * w with w a random layout of its own, so that the
// gradients reaching the backward formulas are sharded (and Partial) too,
// not only replicated. Data movement is exact: the replicated comparison
// has tolerance 0, except where w is Partial(sum|avg) (the gradient is then
// a sum of pieces g * w_i instead of g * sum(w_i)) and for index_select
// (repeated indices add). The gradient ops slice_backward, select_backward
// and index_select_backward are also checked directly against plain
// tensors on integer values (exact).
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "dtensor/dtensor.h"
#include "grad_util.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::check_gradients;
using dtensor::testing::check_matches_replicated;
using dtensor::testing::GradFn;
using dtensor::testing::make_dtensor;
using dtensor::testing::random_input_placements;
using dtensor::testing::takes_part;

namespace {

class AutogradViewTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

using ViewOp = std::function<DTensor(const std::vector<DTensor>&)>;

// Random ints in [lo, hi].
int64_t uniform(std::mt19937& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// A random shape of min_nd..max_nd dims, sizes 0-6 (uneven and empty
// shards), at most max_numel elements (finite differences rerun f per
// element).
Shape small_shape_view(std::mt19937& rng, int min_nd = 1, int max_nd = 4, int64_t max_numel = 48) {
  Shape s;
  const int64_t nd = uniform(rng, min_nd, max_nd);
  for (int64_t i = 0; i < nd; ++i) s.push_back(uniform(rng, 0, 6));
  for (;;) {
    int64_t p = 1;
    for (int64_t v : s) p *= v;
    if (p <= max_numel) return s;
    int64_t* big = &s[0];
    for (int64_t& v : s)
      if (v > *big) big = &v;
    *big /= 2;
  }
}

// What a case needs before it knows whether this process takes part: the
// random draws (the same on every rank).
struct Input {
  Shape shape;
  Placements placements;
  uint64_t seed;
  bool requires_grad = true;
};

Input draw_input(std::mt19937& rng, int mesh_ndim, const Shape& shape, bool requires_grad = true) {
  Input in{shape, random_input_placements(rng, mesh_ndim, static_cast<int64_t>(shape.size())),
           static_cast<uint64_t>(rng()), requires_grad};
  return in;
}

DTensor make(const Input& in, const DeviceMesh& mesh) {
  const Tensor full = Tensor::randn(in.shape, in.seed, 0, DType::Float64);
  DTensor x = make_dtensor(full, mesh, in.placements, in.seed + 1);
  if (in.requires_grad) x.requires_grad_();
  return x;
}

std::string describe_autograd_view(const std::vector<DTensor>& xs) {
  std::ostringstream o;
  for (const DTensor& x : xs) o << x.spec().to_string() << (x.requires_grad() ? " (grad) " : " ");
  return o.str();
}

// Checks the gradients of op at `inputs`: f = op(inputs) * w, w a random
// layout (seeded by `seed`) of op's output shape, against finite
// differences and against replicated inputs (tolerance `atol`, and 1e-12
// when w is Partial(sum|avg)).
void check_view_op(const ViewOp& op, std::vector<DTensor> inputs, uint64_t seed, const std::string& what,
              double atol = 0) {
  const DeviceMesh& mesh = inputs[0].mesh();
  Shape out_shape;
  {
    NoGradGuard no_grad;
    out_shape = op(inputs).shape();
  }
  std::mt19937 wrng(static_cast<uint32_t>(seed));
  const Placements wpl =
      random_input_placements(wrng, mesh.ndim(), static_cast<int64_t>(out_shape.size()));
  double tol = atol;
  for (const Placement& p : wpl)
    if (p.is_partial() && (p.reduce_op() == ReduceOp::Sum || p.reduce_op() == ReduceOp::Avg))
      tol = std::max(tol, 1e-12);
  inputs.push_back(make_dtensor(Tensor::randn(out_shape, seed + 1, 0, DType::Float64), mesh, wpl,
                                seed + 2));
  const GradFn f = [op](const std::vector<DTensor>& in) {
    const std::vector<DTensor> xs(in.begin(), in.end() - 1);
    return mul(op(xs), in.back());
  };
  const std::string where = what + " on " + describe_autograd_view(inputs);
  EXPECT_EQ(check_gradients(f, inputs, seed + 3), "") << where;
  EXPECT_EQ(check_matches_replicated(f, inputs, seed + 4, tol, tol), "") << where;
}

// Runs `cases` random cases on every grad mesh: draw(rng, mesh_ndim)
// draws a case (inputs and op) before the mesh is known to take part.
struct ViewCase {
  std::vector<Input> inputs;
  ViewOp op;
  std::string what;
  double atol = 0;
  std::function<std::vector<DTensor>(const DeviceMesh&)> make_extra = nullptr;  // non-differentiable inputs
};

template <class Draw>
void run_view_cases(const World& world, int cases, uint32_t seed, Draw draw) {
  std::mt19937 rng(seed);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const ViewCase c = draw(rng, mesh.ndim());
      const uint64_t s = rng();
      if (!takes_part(mesh)) continue;
      std::vector<DTensor> xs;
      for (const Input& in : c.inputs) xs.push_back(make(in, mesh));
      if (c.make_extra)
        for (DTensor& e : c.make_extra(mesh)) xs.push_back(e);
      check_view_op(c.op, xs, s, c.what + " mesh " + to_string(ms), c.atol);
    }
  }
}

std::string shape_text(const Shape& s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         a.contiguous().to_vector<double>() == b.contiguous().to_vector<double>();
}

std::string list_text(const std::vector<int64_t>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

}  // namespace

// view, reshape, flatten, squeeze (both), unsqueeze.
TEST_F(AutogradViewTest, Reshapes) {
  run_view_cases(world, dtensor::testing::property_cases(4), 1, [](std::mt19937& rng, int mnd) {
    const Shape shape = small_shape_view(rng);
    const int64_t nd = static_cast<int64_t>(shape.size());
    ViewCase c{{draw_input(rng, mnd, shape)}, {}, "x " + shape_text(shape)};
    switch (rng() % 7) {
      case 0:
        c.what += " view(-1)";
        c.op = [](const auto& in) { return view(in[0], Shape{-1}); };
        break;
      case 1: {  // merge two adjacent dims, or add a size-1 dim
        Shape to = shape;
        if (nd >= 2) {
          const int64_t i = uniform(rng, 0, nd - 2);
          to[i] *= to[i + 1];
          to.erase(i + 1);
        } else {
          to.insert(0, 1);
        }
        c.what += " reshape " + shape_text(to);
        c.op = [to](const auto& in) { return reshape(in[0], to); };
        break;
      }
      case 2: {  // split a dim in two (p, n / p), maybe with -1
        Shape to = shape;
        const int64_t i = uniform(rng, 0, nd - 1);
        const int64_t n = to[i];
        int64_t p = 1;
        if (n > 0)
          for (int64_t q = n; q >= 1; --q)
            if (n % q == 0 && rng() % 2 == 0) p = q;
        to[i] = n == 0 ? 0 : n / p;
        to.insert(static_cast<size_t>(i), n == 0 ? 2 : p);
        if (shape.product() > 0 && rng() % 2 == 0) to[i] = -1;
        c.what += " view " + shape_text(to);
        c.op = [to](const auto& in) { return view(in[0], to); };
        break;
      }
      case 3: {
        const int64_t a = uniform(rng, 0, nd - 1), b = uniform(rng, a, nd - 1);
        c.what += " flatten " + std::to_string(a) + " " + std::to_string(b);
        c.op = [a, b](const auto& in) { return flatten(in[0], a, b); };
        break;
      }
      case 4:
        c.what += " squeeze";
        c.op = [](const auto& in) { return squeeze(in[0]); };
        break;
      case 5: {
        const int64_t d = uniform(rng, -nd, nd - 1);
        c.what += " squeeze " + std::to_string(d);
        c.op = [d](const auto& in) { return squeeze(in[0], d); };
        break;
      }
      default: {
        const int64_t d = uniform(rng, -nd - 1, nd);
        c.what += " unsqueeze " + std::to_string(d);
        c.op = [d](const auto& in) { return unsqueeze(in[0], d); };
        break;
      }
    }
    return c;
  });
}

// permute, transpose, t.
TEST_F(AutogradViewTest, Permutes) {
  run_view_cases(world, dtensor::testing::property_cases(3), 2, [](std::mt19937& rng, int mnd) {
    const Shape shape = small_shape_view(rng);
    const int64_t nd = static_cast<int64_t>(shape.size());
    ViewCase c{{draw_input(rng, mnd, shape)}, {}, "x " + shape_text(shape)};
    switch (rng() % 3) {
      case 0: {
        DimVector perm;
        for (int64_t i = 0; i < nd; ++i) perm.push_back(i);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t& p : perm)
          if (rng() % 2 == 0) p -= nd;
        c.what += " permute " + shape_text(perm);
        c.op = [perm](const auto& in) { return permute(in[0], perm); };
        break;
      }
      case 1: {
        const int64_t a = uniform(rng, -nd, nd - 1), b = uniform(rng, -nd, nd - 1);
        c.what += " transpose " + std::to_string(a) + " " + std::to_string(b);
        c.op = [a, b](const auto& in) { return transpose(in[0], a, b); };
        break;
      }
      default:
        if (nd > 2) {
          c.inputs[0] = draw_input(rng, mnd, Shape{shape[0], shape[1]});
          c.what = "x " + shape_text(c.inputs[0].shape);
        }
        c.what += " t";
        c.op = [](const auto& in) { return t(in[0]); };
        break;
    }
    return c;
  });
}

// expand: the gradient sums over the new leading dims and the broadcast
// size-1 dims (to sizes 0 and more); a reduction, so the replicated
// comparison has a small tolerance.
TEST_F(AutogradViewTest, Expand) {
  run_view_cases(world, dtensor::testing::property_cases(4), 3, [](std::mt19937& rng, int mnd) {
    Shape shape = small_shape_view(rng, 1, 3);
    for (int64_t& v : shape)
      if (rng() % 2 == 0) v = 1;
    Shape to;
    const int64_t lead = uniform(rng, 0, 2);
    for (int64_t i = 0; i < lead; ++i) to.push_back(uniform(rng, 1, 3));
    for (int64_t v : shape) {
      if (v == 1) to.push_back(rng() % 6 == 0 ? 0 : uniform(rng, 1, 4));
      else to.push_back(rng() % 3 == 0 ? -1 : v);
    }
    ViewCase c{{draw_input(rng, mnd, shape)}, {},
           "x " + shape_text(shape) + " expand " + shape_text(to)};
    c.atol = 1e-12;  // a sum over the expanded dims, in another order when they are sharded
    c.op = [to](const auto& in) { return expand(in[0], to); };
    return c;
  });
}

// narrow (negative start too), slice (steps 1-4, starts and ends past
// either end), select (negative index too).
TEST_F(AutogradViewTest, NarrowSliceSelect) {
  run_view_cases(world, dtensor::testing::property_cases(6), 4, [](std::mt19937& rng, int mnd) {
    const Shape shape = small_shape_view(rng);
    const int64_t nd = static_cast<int64_t>(shape.size());
    const int64_t d = uniform(rng, -nd, nd - 1);
    const int64_t n = shape[d < 0 ? d + nd : d];
    ViewCase c{{draw_input(rng, mnd, shape)}, {}, "x " + shape_text(shape)};
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0 || (kind == 2 && n == 0)) {
      int64_t start = uniform(rng, 0, n);
      const int64_t length = uniform(rng, 0, n - start);
      if (start > 0 && rng() % 3 == 0) start -= n;
      c.what += " narrow " + std::to_string(d) + " " + std::to_string(start) + " " +
                std::to_string(length);
      c.op = [=](const auto& in) { return narrow(in[0], d, start, length); };
    } else if (kind == 1) {
      const int64_t start = uniform(rng, -n - 2, n + 2), end = uniform(rng, -n - 2, n + 2);
      const int64_t step = uniform(rng, 1, 4);
      c.what += " slice " + std::to_string(d) + " [" + std::to_string(start) + ":" +
                std::to_string(end) + ":" + std::to_string(step) + "]";
      c.op = [=](const auto& in) { return slice(in[0], d, start, end, step); };
    } else {
      const int64_t index = uniform(rng, -n, n - 1);
      c.what += " select " + std::to_string(d) + " " + std::to_string(index);
      c.op = [=](const auto& in) { return select(in[0], d, index); };
    }
    return c;
  });
}

// chunk and split: every piece is differentiable; pieces used several
// times (joined with cat in random order) add their gradients, unused
// pieces give zeros.
TEST_F(AutogradViewTest, ChunkAndSplitPiecesAccumulate) {
  run_view_cases(world, dtensor::testing::property_cases(4), 5, [](std::mt19937& rng, int mnd) {
    const Shape shape = small_shape_view(rng);
    const int64_t nd = static_cast<int64_t>(shape.size());
    const int64_t d = uniform(rng, -nd, nd - 1);
    const bool use_chunk = rng() % 2 == 0;
    const int64_t arg = use_chunk ? uniform(rng, 1, 5) : uniform(rng, 1, 4);
    std::vector<uint32_t> picks;
    const int64_t uses = uniform(rng, 1, 4);
    for (int64_t i = 0; i < uses; ++i) picks.push_back(rng());
    ViewCase c{{draw_input(rng, mnd, shape)}, {}, "x " + shape_text(shape)};
    c.what += (use_chunk ? " chunk " : " split ") + std::to_string(arg) + " dim " +
              std::to_string(d) + " uses " + std::to_string(uses);
    c.op = [=](const auto& in) {
      const std::vector<DTensor> pieces =
          use_chunk ? chunk(in[0], arg, d) : split(in[0], arg, d);
      std::vector<DTensor> used;
      for (uint32_t p : picks) {
        const DTensor& piece = pieces[p % pieces.size()];
        // Sometimes doubled (add: a second use of the piece in one op).
        used.push_back((p / 7) % 3 == 0 ? add(piece, piece) : piece);
      }
      return cat(used, d);
    };
    return c;
  });
}

// The gradients of several pieces add up exactly: sum(cat(pieces)) with
// the first piece used twice gives 2 on its rows and 1 elsewhere, for x
// sharded on the split dim, on another dim, or Partial.
TEST_F(AutogradViewTest, ChunkPiecesAddExactly) {
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    if (!takes_part(mesh)) continue;
    for (const Placement& p : {Shard(0), Shard(1), Partial(), Replicate()}) {
      const Placements pl(static_cast<size_t>(mesh.ndim()), p);
      DTensor x = make_dtensor(Tensor::randn(Shape{7, 3}, 1, 0, DType::Float64), mesh, pl, 2);
      x.requires_grad_();
      for (bool use_chunk : {true, false}) {
        x.zero_grad();
        std::vector<DTensor> pieces = use_chunk ? chunk(x, 3, 0) : split(x, 3, 0);
        pieces.push_back(pieces[0]);
        sum(cat(pieces, 0)).backward();
        Tensor want = Tensor::ones(Shape{7, 3}, DType::Float64);
        want.narrow(0, 0, 3).fill_(2.0);
        ASSERT_TRUE(x.grad().has_value());
        EXPECT_TRUE(same(x.grad()->full_tensor(), want)) << ms << " " << to_string(pl);
      }
    }
  }
}

// cat (with skipped 1-d empty inputs, and more inputs than one schema
// holds) and stack; some inputs do not require grad.
TEST_F(AutogradViewTest, CatAndStack) {
  run_view_cases(world, dtensor::testing::property_cases(3), 6, [](std::mt19937& rng, int mnd) {
    const int64_t count = rng() % 6 == 0 ? 10 : uniform(rng, 1, 3);
    Shape base = small_shape_view(rng, 1, 3, count > 3 ? 8 : 24);
    const int64_t nd = static_cast<int64_t>(base.size());
    const int64_t d = uniform(rng, -nd, nd - 1);
    const int64_t dd = d < 0 ? d + nd : d;
    const bool use_stack = rng() % 3 == 0;
    ViewCase c;
    for (int64_t i = 0; i < count; ++i) {
      Shape s = base;
      if (!use_stack) s[dd] = uniform(rng, 0, count > 3 ? 1 : 3);
      if (!use_stack && nd > 1 && i > 0 && rng() % 6 == 0) s = Shape{0};  // skipped by cat
      c.inputs.push_back(draw_input(rng, mnd, s, i == 0 || rng() % 4 != 0));
    }
    c.what = std::string(use_stack ? "stack" : "cat") + " of " + std::to_string(count) + " dim " +
             std::to_string(d) + " base " + shape_text(base);
    if (use_stack) {
      const int64_t sd = uniform(rng, -nd - 1, nd);
      c.what += " stack dim " + std::to_string(sd);
      c.op = [sd](const auto& in) { return stack(in, sd); };
    } else {
      c.op = [d](const auto& in) { return cat(in, d); };
    }
    return c;
  });
}

// clone and contiguous (of a transposed, non-contiguous view).
TEST_F(AutogradViewTest, CloneAndContiguous) {
  run_view_cases(world, dtensor::testing::property_cases(2), 7, [](std::mt19937& rng, int mnd) {
    const Shape shape = small_shape_view(rng);
    ViewCase c{{draw_input(rng, mnd, shape)}, {}, "x " + shape_text(shape)};
    if (rng() % 2 == 0) {
      c.what += " clone";
      c.op = [](const auto& in) { return clone(in[0]); };
    } else {
      c.what += " contiguous(transpose)";
      c.op = [](const auto& in) { return contiguous(transpose(in[0], 0, -1)); };
    }
    return c;
  });
}

// index_select with repeated and negative indices (their gradients add),
// 1-d and 0-d indices sharded or replicated; the index gets no gradient.
TEST_F(AutogradViewTest, IndexSelect) {
  run_view_cases(world, dtensor::testing::property_cases(4), 8, [](std::mt19937& rng, int mnd) {
    const Shape shape = small_shape_view(rng);
    const int64_t nd = static_cast<int64_t>(shape.size());
    const int64_t d = uniform(rng, -nd, nd - 1);
    const int64_t n = shape[d < 0 ? d + nd : d];
    std::vector<int64_t> idx;
    const int64_t len = n == 0 ? 0 : uniform(rng, 0, 6);
    for (int64_t i = 0; i < len; ++i) idx.push_back(uniform(rng, -n, n - 1));
    const bool zero_d = n > 0 && rng() % 5 == 0;
    if (zero_d) idx = {uniform(rng, -n, n - 1)};
    const Placements ipl = random_input_placements(rng, mnd, zero_d ? 0 : 1, false);
    ViewCase c{{draw_input(rng, mnd, shape)}, {},
           "x " + shape_text(shape) + " dim " + std::to_string(d)};
    c.what += " index " + list_text(idx) + (zero_d ? " (0-d)" : "") + " " + to_string(ipl);
    c.atol = 1e-12;
    c.make_extra = [=](const DeviceMesh& mesh) {
      const Tensor index = zero_d ? Tensor::from_vector(idx).reshape(Shape{})
                                  : Tensor::from_vector(idx);
      return std::vector<DTensor>{distribute_tensor(index, mesh, ipl)};
    };
    c.op = [d](const auto& in) { return index_select(in[0], d, in[1]); };
    return c;
  });
}

// *_like outputs do not depend on x's values: they do not require grad, and
// using them leaves x's gradient that of the other terms.
TEST_F(AutogradViewTest, LikeOpsRecordNothing) {
  std::mt19937 rng(9);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    const Input in = draw_input(rng, mesh.ndim(), small_shape_view(rng));
    const uint64_t s = rng();
    if (!takes_part(mesh)) continue;
    DTensor x = make(in, mesh);
    EXPECT_FALSE(zeros_like(x).requires_grad());
    EXPECT_FALSE(ones_like(x).requires_grad());
    EXPECT_FALSE(full_like(x, 2.5).requires_grad());
    EXPECT_TRUE(zeros_like(x).is_leaf());
    check_view_op([](const auto& v) { return add(mul(v[0], ones_like(v[0])), full_like(v[0], 2.0)); },
             {x}, s, "x + like");
  }
}

// ---- the gradient ops themselves, against plain tensors (integer values: exact) ----

namespace {

Tensor ints(const Shape& shape, uint64_t seed) {
  return dtensor::testing::int_valued(shape, seed).to(DType::Float64);
}

}  // namespace

TEST_F(AutogradViewTest, SliceAndSelectBackwardMatchPlain) {
  std::mt19937 rng(10);
  const int cases = dtensor::testing::property_cases(15);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const Shape shape = small_shape_view(rng);
      const int64_t nd = static_cast<int64_t>(shape.size());
      const int64_t d = uniform(rng, -nd, nd - 1);
      const int64_t n = shape[d < 0 ? d + nd : d];
      const bool sel = n > 0 && rng() % 3 == 0;
      const int64_t start = sel ? uniform(rng, -n, n - 1) : uniform(rng, -n - 2, n + 2);
      const int64_t end = uniform(rng, -n - 2, n + 2), step = uniform(rng, 1, 4);
      const Tensor probe = Tensor::zeros(shape, DType::Float64);
      const Shape gshape =
          sel ? probe.select(d, start).shape() : probe.slice(d, start, end, step).shape();
      const Placements pl =
          random_input_placements(rng, mesh.ndim(), static_cast<int64_t>(gshape.size()));
      const uint64_t seed = rng();
      if (!takes_part(mesh)) continue;
      const DTensor g = make_dtensor(ints(gshape, seed), mesh, pl, seed + 1);
      const DTensor got = sel ? select_backward(g, shape, d, start)
                              : slice_backward(g, shape, d, start, end, step);
      Tensor want = Tensor::zeros(shape, DType::Float64);
      (sel ? want.select(d, start) : want.slice(d, start, end, step)).copy_(g.full_tensor());
      EXPECT_TRUE(same(got.full_tensor(), want))
          << ms << " x " << shape << " d " << d << (sel ? " select " : " slice ") << start << ":"
          << end << ":" << step << " grad " << g.spec().to_string() << " -> "
          << got.spec().to_string();
    }
  }
}

TEST_F(AutogradViewTest, IndexSelectBackwardMatchesPlain) {
  std::mt19937 rng(11);
  const int cases = dtensor::testing::property_cases(15);
  for (const Shape& ms : dtensor::testing::grad_meshes(world.size())) {
    DeviceMesh mesh(world, ms);
    for (int k = 0; k < cases; ++k) {
      const Shape shape = small_shape_view(rng);
      const int64_t nd = static_cast<int64_t>(shape.size());
      const int64_t d = uniform(rng, -nd, nd - 1), dd = d < 0 ? d + nd : d;
      const int64_t n = shape[dd];
      std::vector<int64_t> idx;
      const int64_t len = n == 0 ? 0 : uniform(rng, 0, 8);
      for (int64_t i = 0; i < len; ++i) idx.push_back(uniform(rng, -n, n - 1));
      Shape gshape = shape;
      gshape[dd] = len;
      const Placements pl =
          random_input_placements(rng, mesh.ndim(), static_cast<int64_t>(gshape.size()));
      const Placements ipl = random_input_placements(rng, mesh.ndim(), 1, false);
      const uint64_t seed = rng();
      if (!takes_part(mesh)) continue;
      const DTensor g = make_dtensor(ints(gshape, seed), mesh, pl, seed + 1);
      const DTensor index = distribute_tensor(Tensor::from_vector(idx), mesh, ipl);
      const DTensor got = index_select_backward(g, shape, d, index);
      const Tensor gf = g.full_tensor();
      Tensor want = Tensor::zeros(shape, DType::Float64);
      for (size_t r = 0; r < idx.size(); ++r)
        want.select(dd, idx[r] < 0 ? idx[r] + n : idx[r])
            .add_(gf.select(dd, static_cast<int64_t>(r)));
      EXPECT_TRUE(same(got.full_tensor(), want))
          << ms << " x " << shape << " d " << d << " index " << list_text(idx) << " "
          << to_string(ipl) << " grad " << g.spec().to_string() << " -> " << got.spec().to_string();
    }
  }
}

// The gradient ops keep what can stay sharded: a gradient sharded on
// another dim stays sharded, Partials pass, and rows sharded with their
// indices give Partial(sum) - all without communication.
TEST_F(AutogradViewTest, GradientOpsKeepShards) {
  DeviceMesh mesh(world, Shape{std::min<int64_t>(4, world.size())});
  if (!takes_part(mesh)) return;
  const Tensor gf = ints(Shape{3, 8}, 1);
  const DTensor g1 = distribute_tensor(gf, mesh, {Shard(1)});
  auto placed = [](const DTensor& t) { return to_string(t.placements()); };
  EXPECT_EQ(placed(slice_backward(g1, Shape{9, 8}, 0, 1, 9, 3)), "S(1)");
  EXPECT_EQ(placed(select_backward(g1, Shape{3, 5, 8}, 1, 2)), "S(2)");
  const DTensor gp = make_dtensor(gf, mesh, {Partial()}, 2);
  EXPECT_EQ(placed(slice_backward(gp, Shape{5, 8}, 0, 2, 5)), "P(sum)");
  const DTensor g0 = distribute_tensor(gf, mesh, {Shard(0)});
  const DTensor index =
      distribute_tensor(Tensor::from_vector(std::vector<int64_t>{2, 0, 2}), mesh, {Shard(0)});
  const DTensor got = index_select_backward(g0, Shape{4, 8}, 0, index);
  EXPECT_EQ(placed(got), "P(sum)");
  Tensor want = Tensor::zeros(Shape{4, 8}, DType::Float64);
  want.select(0, 2).add_(gf.select(0, 0));
  want.select(0, 0).add_(gf.select(0, 1));
  want.select(0, 2).add_(gf.select(0, 2));
  EXPECT_TRUE(same(got.full_tensor(), want));
  // Shape mismatches are errors naming both shapes.
  EXPECT_THROW(slice_backward(g1, Shape{9, 8}, 0, 0, 9, 2), Error);
  EXPECT_THROW(select_backward(g1, Shape{3, 8}, 0, 1), Error);
  EXPECT_THROW(index_select_backward(g0, Shape{4, 7}, 0, index), Error);
}
