# The pointwise ops of PyTorch's families that a training script needs beyond
# the arithmetic (sin, cos, log1p, expm1, square, sign, floor, round, isnan,
# softplus, logical_*, addcmul, addcdiv, lerp, and the in-place addcmul_,
# addcdiv_, lerp_, clamp_, masked_fill_) against torch 1.13: values on plain
# Tensors and on DTensors over a 2x2 simulated mesh in several layouts
# (Shard on either dim, uneven shards of a 5x3 tensor, Partial(sum|max)
# inputs), and gradients through .backward() against torch's autograd.
#
# Tolerances: exact (bit for bit, the sign of zero and NaN included) for
# square, sign, floor, round, isnan and the logical ops, which round once or
# not at all. The transcendental ones (sin, cos, log1p, expm1, softplus) and
# the Partial layouts (whose pieces are summed in another order): rtol 1e-6
# in float32 (torch's SLEEF and glibc may differ in the last ulp; a sum of
# pieces rounds a few times), 1e-13 in float64; atol 1e-6 / 1e-13 for values
# next to zero, where a relative bound means nothing. addcmul and lerp too:
# torch's kernels fuse a multiply and an add (FMA) in their AVX2 loops but
# not in the scalar loop for the tail of a row, so its last bit depends on
# an element's position; dtensor rounds each step as the formula reads.
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dtensor as dt

MESH = dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["a", "b"])
R, S0, S1 = dt.Replicate(), dt.Shard(0), dt.Shard(1)
PSUM, PMAX = dt.Partial("sum"), dt.Partial("max")
# A 5x3 tensor over 2 ranks a dim: shards of 3 and 2 rows, 2 and 1 columns.
LAYOUTS = [[R, R], [S0, S1], [S1, S0], [S0, R], [R, S1], [PSUM, S0], [S1, PSUM], [PMAX, R],
           [S0, dt.Partial("min")]]
LAYOUT_IDS = ["RR", "S0S1", "S1S0", "S0R", "RS1", "PsumS0", "S1Psum", "PmaxR", "S0Pmin"]
EDGES = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, 1.5, 2.5, -0.5, -2.5, -1.0]
TOL = {np.float32: dict(rtol=1e-6, atol=1e-6), np.float64: dict(rtol=1e-13, atol=1e-13)}


def full(d):
    return np.asarray(d.full_tensor())


def make(a, mesh, layout):
    """a laid out as `layout` over the 2x2 mesh, with Partial pieces that
    differ on every rank (distribute_tensor's Partial(sum) keeps the value on
    one rank and zeros elsewhere, which any op with f(0) = 0 passes by luck):
    along a Partial(sum) mesh dim the pieces are a - n and n, along a
    Partial(max) a and a - |n|, along a Partial(min) a and a + |n|, for
    integer noise n (so that the pieces add up exactly)."""
    a = np.asarray(a)
    if not any(p.is_partial() for p in layout):
        return dt.distribute_tensor(a, mesh, layout)
    rng = np.random.default_rng(a.size)
    noise = [rng.integers(-4, 5, a.shape).astype(a.dtype) for _ in layout]

    def local(rank):
        coord = (rank // 2, rank % 2)
        v = a.copy()
        for k, p in enumerate(layout):
            if p.is_partial():
                n, first = noise[k], coord[k] == 0
                v = {"sum": v - n if first else n, "avg": v - n if first else v + n,
                     "max": v if first else v - np.abs(n),
                     "min": v if first else v + np.abs(n)}[p.reduce_op]
        for k, p in enumerate(layout):
            if p.is_shard():
                v = np.array_split(v, 2, axis=p.dim)[coord[k]] if v.shape[p.dim] % 2 == 0 else \
                    np.split(v, [-(-v.shape[p.dim] // 2)], axis=p.dim)[coord[k]]
        return np.ascontiguousarray(v)

    return dt.DTensor.from_local(local, mesh, layout, shape=list(a.shape))


def data(rng, dtype, edges=True, shape=(5, 3)):
    a = rng.standard_normal(shape) * 3
    if edges:
        flat = a.reshape(-1)
        flat[: len(EDGES)] = EDGES
        rng.shuffle(flat)
    return a.astype(dtype)


def same(got, want, exact, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if exact:
        np.testing.assert_array_equal(got, want)
        if got.dtype.kind == "f":  # the sign of zero too
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    else:
        np.testing.assert_allclose(got, want, equal_nan=True, **TOL[dtype])


# name: (dtensor op, torch op, exact, values for gradients (finite, away from kinks))
UNARY = {
    "sin": (dt.sin, torch.sin, False),
    "cos": (dt.cos, torch.cos, False),
    "log1p": (dt.log1p, torch.log1p, False),
    "expm1": (dt.expm1, torch.expm1, False),
    "square": (dt.square, torch.square, True),
    "sign": (dt.sign, torch.sign, True),
    "floor": (dt.floor, torch.floor, True),
    "round": (dt.round, torch.round, True),
    "round_decimals": (lambda x: dt.round(x, decimals=1), lambda t: torch.round(t, decimals=1),
                       True),
    "round_decimals_neg": (lambda x: x.round(decimals=-1),
                           lambda t: torch.round(t, decimals=-1), True),
    "softplus": (dt.softplus, F.softplus, False),
    "softplus_beta": (lambda x: dt.softplus(x, beta=2, threshold=3),
                      lambda t: F.softplus(t, beta=2, threshold=3), False),
    "isnan": (dt.isnan, torch.isnan, True),
    "logical_not": (dt.logical_not, torch.logical_not, True),
}
DIFFERENTIABLE = ["sin", "cos", "log1p", "expm1", "square", "sign", "floor", "round",
                  "round_decimals", "softplus", "softplus_beta"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_on_tensors(name, dtype, rng):
    f, g, exact = UNARY[name]
    a = data(rng, dtype)
    want = g(torch.tensor(a)).numpy()
    same(f(dt.tensor(a)), want, exact, dtype)
    # the method form, where PyTorch has one
    if hasattr(torch.Tensor, name):
        same(getattr(dt.tensor(a), name)(), want, exact, dtype)


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_on_dtensors(name, layout, rng):
    f, g, exact = UNARY[name]
    a = data(rng, np.float32)
    x = make(a, MESH, layout)
    partial = any(p.is_partial() for p in layout)
    same(full(f(x)), g(torch.tensor(a)).numpy(), exact and not partial, np.float32)


def test_unary_integer_and_bool_inputs():
    i = np.array([-2, 0, 3])
    b = np.array([True, False])
    for name in ["sin", "cos", "log1p", "expm1", "square", "sign", "floor", "round", "isnan",
                 "logical_not"]:
        f, g, _ = UNARY[name]
        same(f(dt.tensor(i)), g(torch.tensor(i)).numpy(), name not in ("sin", "cos", "log1p", "expm1"),
             np.float32)
    for name in ["sin", "square", "sign", "isnan", "logical_not"]:
        f, g, _ = UNARY[name]
        same(f(dt.tensor(b)), g(torch.tensor(b)).numpy(), name != "sin", np.float32)
    for bad in [lambda: dt.floor(dt.tensor(b)), lambda: dt.round(dt.tensor(b)),
                lambda: dt.round(dt.tensor(i), decimals=1), lambda: dt.softplus(dt.tensor(i))]:
        with pytest.raises(dt.Error):
            bad()


@pytest.mark.parametrize("layout", [[R, R], [S0, S1], [S1, S0], [PSUM, S0], [PMAX, R]],
                         ids=["RR", "S0S1", "S1S0", "PsumS0", "PmaxR"])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_unary_gradients(name, layout, rng):
    f, g, _ = UNARY[name]
    a = rng.standard_normal((5, 3)) * 2
    if name == "log1p":
        a = np.abs(a) - 0.5  # inside the domain
    if name.startswith("softplus"):
        a[0, :] = [25.0, 1.4, -30.0]  # past the threshold, just under, far below
    w = rng.standard_normal((5, 3))
    x = make(a, MESH, layout).requires_grad_()
    dt.sum(f(x) * make(w, MESH, [R, R])).backward()
    t = torch.tensor(a, requires_grad=True)
    (g(t) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(full(x.grad), t.grad.numpy(), rtol=1e-13, atol=1e-13)


def test_max_and_min_partials_pass_through_the_monotone_ops(rng):
    a = data(rng, np.float32, edges=False)
    for f in [dt.floor, dt.round, dt.sign, dt.expm1, dt.softplus]:
        y = f(make(a, MESH, [PMAX, S0]))
        assert y.placements == (PMAX, S0)
    # log1p is increasing but NaN below -1, sin is not monotone: they reduce first
    for f in [dt.log1p, dt.sin, dt.square]:
        assert not f(make(a, MESH, [PMAX, S0])).placements[0].is_partial()


LOGICAL = ["logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("b_layout", [[R, R], [R, S0], [S0, R]], ids=["RR", "RS0", "S0R"])
@pytest.mark.parametrize("layout", [[R, R], [S0, S1], [S1, S0], [S0, R]],
                         ids=["RR", "S0S1", "S1S0", "S0R"])
@pytest.mark.parametrize("name", LOGICAL)
def test_logical_ops(name, layout, b_layout, rng):
    a = data(rng, np.float32)
    a[1, :] = 0
    b = np.array([0, 2, -1])  # int64, broadcast over the rows
    want = getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy()
    same(getattr(dt, name)(dt.tensor(a), dt.tensor(b)), want, True, np.float32)
    same(getattr(dt.tensor(a), name)(dt.tensor(b)), want, True, np.float32)
    x = make(a, MESH, layout)
    y = make(b, MESH, b_layout)
    same(full(getattr(dt, name)(x, y)), want, True, np.float32)
    bools = np.array([True, False, True])
    same(getattr(dt, name)(dt.tensor(bools), dt.tensor(np.array([0.5, 0.0, 0.0]))),
         getattr(torch, name)(torch.tensor(bools), torch.tensor([0.5, 0.0, 0.0])).numpy(), True,
         np.float32)


# ---- addcmul, addcdiv, lerp -------------------------------------------------------

def ternary_cases():
    # (name, dtensor op, torch op); the third operand broadcasts over rows.
    return [
        ("addcmul", lambda a, b, c: dt.addcmul(a, b, c), lambda a, b, c: torch.addcmul(a, b, c)),
        ("addcmul_value", lambda a, b, c: dt.addcmul(a, b, c, value=-0.5),
         lambda a, b, c: torch.addcmul(a, b, c, value=-0.5)),
        ("addcdiv", lambda a, b, c: a.addcdiv(b, c, value=2),
         lambda a, b, c: torch.addcdiv(a, b, c, value=2)),
        ("lerp_tensor", lambda a, b, c: dt.lerp(a, b, c), lambda a, b, c: torch.lerp(a, b, c)),
    ] + [(f"lerp_{w}", lambda a, b, c, w=w: dt.lerp(a, b, w) + c * 0,
          lambda a, b, c, w=w: torch.lerp(a, b, w) + c * 0) for w in [0.3, 0.7, -0.6, 1.0]]


TERNARY = {n: (f, g) for n, f, g in ternary_cases()}
TERNARY_LAYOUTS = [([R, R], [R, R], [R, R]), ([S0, S1], [S0, S1], [R, S0]),
                   ([S1, S0], [R, R], [R, R]), ([PSUM, S0], [PSUM, S0], [R, R]),
                   ([PSUM, R], [R, R], [PSUM, R]), ([PMAX, R], [R, S1], [R, R]),
                   ([S0, PSUM], [R, R], [R, R])]


def ternary_inputs(rng, dtype, weight=False):
    a = data(rng, dtype, edges=False)
    b = data(rng, dtype, edges=False)
    c = rng.standard_normal(3).astype(dtype)
    if weight:
        c = rng.uniform(-1, 2, 3).astype(dtype)
    return a, b, c


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(TERNARY))
def test_ternary_on_tensors(name, dtype, rng):
    f, g = TERNARY[name]
    a, b, c = ternary_inputs(rng, dtype, weight=name.startswith("lerp"))
    want = g(torch.tensor(a), torch.tensor(b), torch.tensor(c)).numpy()
    same(f(dt.tensor(a), dt.tensor(b), dt.tensor(c)), want, name.startswith("addcdiv"), dtype)


@pytest.mark.parametrize("layouts", TERNARY_LAYOUTS,
                         ids=["RRR", "SSS", "S1RR", "PsumPsumR", "PsumRPsum", "PmaxSR", "S0PsumRR"])
@pytest.mark.parametrize("name", list(TERNARY))
def test_ternary_on_dtensors_values_and_gradients(name, layouts, rng):
    f, g = TERNARY[name]
    a, b, c = ternary_inputs(rng, np.float64, weight=name.startswith("lerp"))
    xs = [make(v, MESH, p).requires_grad_() for v, p in zip((a, b, c), layouts)]
    ts = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
    w = rng.standard_normal((5, 3))
    y = f(*xs)
    want = g(*ts)
    np.testing.assert_allclose(full(y), want.detach().numpy(), rtol=1e-13, atol=1e-13)
    dt.sum(y * make(w, MESH, [R, R])).backward()
    (want * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(full(x.grad), t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_linear_ternary_ops_keep_partial_sums(rng):
    a, b, c = ternary_inputs(rng, np.float64)
    p = [make(v, MESH, [PSUM, S0]) for v in (a, b)]
    r = make(c, MESH, [R, R])
    assert dt.addcmul(p[0], p[1], r).placements == (PSUM, S0)
    assert dt.addcdiv(p[0], p[1], r + 5).placements == (PSUM, S0)
    assert dt.lerp(p[0], p[1], 0.25).placements == (PSUM, S0)
    # with replicated factors, t1 is split into pieces (a Partial(sum) of it)
    # rather than adding t1 * t2 on every rank
    y = dt.addcmul(p[0], r, r)
    np.testing.assert_allclose(full(y), a + c * c, rtol=1e-14)


def test_ternary_dtypes_and_errors():
    i = dt.tensor(np.array([-2, 0, 3]))
    same(dt.addcmul(i, i, i, value=2), torch.addcmul(*[torch.tensor([-2, 0, 3])] * 3, value=2).numpy(),
         True, np.float32)
    # an integer result truncates a floating value, as torch
    same(dt.addcmul(i, i, i, value=0.5), torch.tensor([-2, 0, 3]).numpy(), True, np.float32)
    f32, f64 = dt.ones([2]), dt.ones([2], dtype=dt.float64)
    assert dt.addcmul(f32, f64, f32).dtype == dt.float64
    for bad in [lambda: dt.addcdiv(i, i, i), lambda: dt.lerp(f32, f64, 0.5),
                lambda: dt.lerp(f32, f32, f64), lambda: dt.lerp(i, i, 0.5),
                lambda: dt.addcmul(dt.ones([2]), dt.ones([3]), dt.ones([2]))]:
        with pytest.raises(dt.Error):
            bad()


# ---- in place ----------------------------------------------------------------------

INPLACE = {
    "addcmul_": (lambda x, o: x.addcmul_(o[0], o[1], value=0.5),
                 lambda t, o: t.addcmul_(o[0], o[1], value=0.5)),
    "addcdiv_": (lambda x, o: x.addcdiv_(o[0], o[1] + 4),
                 lambda t, o: t.addcdiv_(o[0], o[1] + 4)),
    "lerp_": (lambda x, o: x.lerp_(o[0], 0.3), lambda t, o: t.lerp_(o[0], 0.3)),
    "lerp_weight_": (lambda x, o: x.lerp_(o[0], o[1]), lambda t, o: t.lerp_(o[0], o[1])),
    "clamp_": (lambda x, o: x.clamp_(min=-1.0, max=2.0), lambda t, o: t.clamp_(min=-1.0, max=2.0)),
    "clamp_min_": (lambda x, o: x.clamp_(min=0.5), lambda t, o: t.clamp_(min=0.5)),
    "clamp_tensors_": (lambda x, o: x.clamp_(o[1] - 1, o[1] + 1),
                       lambda t, o: t.clamp_(o[1] - 1, o[1] + 1)),
    "clamp_tensor_max_": (lambda x, o: x.clamp_(max=o[1]), lambda t, o: t.clamp_(max=o[1])),
    "masked_fill_": (lambda x, o: x.masked_fill_(o[2], -7.0),
                     lambda t, o: t.masked_fill_(o[2], -7.0)),
}


def inplace_operands(rng):
    b = rng.standard_normal((5, 3))
    c = rng.standard_normal(3)  # broadcast over the rows
    m = rng.standard_normal(3) > 0
    return b, c, m


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_on_tensors(name, rng):
    f, g = INPLACE[name]
    a = data(rng, np.float64, edges=False)
    ops = inplace_operands(rng)
    x = dt.tensor(a)
    before = x
    assert f(x, [dt.tensor(v) for v in ops]) is not None
    t = torch.tensor(a)
    g(t, [torch.tensor(v) for v in ops])
    same(x, t.numpy(), name.startswith(("clamp", "masked", "addcdiv")), np.float64)
    assert before is x


@pytest.mark.parametrize("layout", [[R, R], [S0, S1], [S1, R], [PMAX, S0]],
                         ids=["RR", "S0S1", "S1R", "PmaxS0"])
@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_on_dtensors_keeps_the_layout(name, layout, rng):
    f, g = INPLACE[name]
    a = data(rng, np.float64, edges=False)
    b, c, m = inplace_operands(rng)
    ops = [make(b, MESH, [R, S0]), make(c, MESH, [R, R]),
           make(m, MESH, [R, S0])]
    x = make(a, MESH, layout)
    t = torch.tensor(a)
    g(t, [torch.tensor(v) for v in (b, c, m)])
    try:
        f(x, ops)
    except dt.Error as e:
        # lerp_ of a Partial(max) would have to move self: refused, not wrong
        assert PMAX in layout and name.startswith("lerp"), str(e)
        return
    assert x.placements == tuple(layout)
    np.testing.assert_allclose(full(x), t.numpy(), rtol=1e-14, atol=1e-14)


def test_inplace_refusals():
    x = make(np.ones((5, 3)), MESH, [PSUM, S0])
    mask = make(np.ones(3, dtype=bool), MESH, [R, R])
    for bad in [lambda: x.clamp_(min=0.0), lambda: x.masked_fill_(mask, 1.0),
                lambda: x.clamp_(make(np.zeros(3), MESH, [R, R]), None)]:
        with pytest.raises(dt.Error):
            bad()
    np.testing.assert_array_equal(full(x), np.ones((5, 3)))  # nothing changed
    leaf = make(np.ones((5, 3)), MESH, [S0, R]).requires_grad_()
    with pytest.raises(dt.Error):
        leaf.masked_fill_(mask, 0.0)
    t = dt.ones([2])
    with pytest.raises(dt.Error):  # cannot grow self by broadcasting
        t.addcmul_(dt.ones([3, 2]), dt.ones([2]))
    with pytest.raises(dt.Error):  # float result into an int64 tensor
        dt.tensor(np.array([1, 2])).clamp_(dt.zeros([2]), None)
    with pytest.raises(dt.Error):
        dt.ones([2]).clamp_(None, None)


@pytest.mark.parametrize("name", ["addcmul_", "addcdiv_", "lerp_", "lerp_weight_",
                                  "clamp_tensors_", "clamp_tensor_max_", "masked_fill_"])
def test_inplace_gradients(name, rng):
    f, g = INPLACE[name]
    a = rng.standard_normal((5, 3)) * 2
    b, c, m = inplace_operands(rng)
    w = rng.standard_normal((5, 3))
    xs = [make(a, MESH, [S0, S1]).requires_grad_(),
          make(b, MESH, [R, S0]).requires_grad_(),
          make(c, MESH, [R, R]).requires_grad_()]
    y = xs[0] * 1.0  # a non-leaf may change in place
    f(y, [xs[1], xs[2], make(m, MESH, [R, S0])])
    dt.sum(y * make(w, MESH, [R, R])).backward()
    ts = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
    u = ts[0] * 1.0
    g(u, [ts[1], ts[2], torch.tensor(m)])
    (u * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts):
        want = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
        got = full(x.grad) if x.grad is not None else np.zeros(t.shape)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
