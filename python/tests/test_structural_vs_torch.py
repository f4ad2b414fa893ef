# The structural ops (flip, roll, cumprod, argsort, outer, dot, linspace,
# eye, diagonal, nonzero, std, max / min, view_as, expand_as, type_as)
# against PyTorch 1.13: values, and gradients via .backward() against torch
# autograd for the differentiable ones, on plain Tensors and on DTensors
# over a 2x2 simulated mesh in several layouts: Shard on the op's dim and
# on another dim, uneven shards (5 rows over 2 ranks), nested shards, and
# Partial inputs made of random pieces (so a rule that wrongly passed a
# Partial would sum wrong values, not value + zeros).
import numpy as np
import pytest
import torch

import dtensor as dt

R = dt.Replicate()
S = dt.Shard
MESH = dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["dp", "tp"])
NP = {dt.float32: np.float32, dt.float64: np.float64, dt.int64: np.int64}
FLOATS = [np.float32, np.float64]


def full(d):
    return np.asarray(d.full_tensor())


def close(got, want, dtype):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    elif dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    else:
        np.testing.assert_array_equal(got, want)


def layouts(ndim, dim):
    """Placements for a 2x2 mesh: replicated, Shard on the op's dim, on
    another dim, both, and nested on one dim."""
    other = (dim + 1) % ndim
    out = [[R, R], [S(dim), R], [R, S(other)], [S(other), S(dim)], [S(dim), S(dim)]]
    return out if ndim > 1 else [[R, R], [S(0), R], [R, S(0)], [S(0), S(0)]]


def partial(pieces, kind="sum"):
    """A [Replicate, Partial(kind)] DTensor whose ranks (i, j) hold pieces[j]."""
    return dt.DTensor.from_local(lambda rank: dt.tensor(pieces[rank % 2]), MESH,
                                 [R, dt.Partial(kind)])


def check(f_dt, f_torch, arrays, placements, grad=True, weight_seed=0):
    """f on Tensors and on DTensors of each placement list against torch;
    with grad, also the inputs' gradients of sum(f(x) * w)."""
    dtype = arrays[0].dtype.type
    grad = grad and dtype in FLOATS
    ts = [torch.tensor(a, requires_grad=grad) for a in arrays]
    want = f_torch(*ts)
    close(f_dt(*[dt.tensor(a) for a in arrays]), want, dtype)
    if grad:
        w = np.random.default_rng(weight_seed).standard_normal(tuple(want.shape)).astype(dtype)
        (want * torch.tensor(w)).sum().backward()
    for pls in placements:
        ds = [dt.distribute_tensor(a, MESH, pl) for a, pl in zip(arrays, pls)]
        if grad:
            ds = [d.requires_grad_() for d in ds]
        out = f_dt(*ds)
        close(full(out), want, dtype)
        if grad:
            dt.sum(out * dt.distribute_tensor(w, MESH, [R, R])).backward()
            for d, t in zip(ds, ts):
                if t.grad is None:
                    assert d.grad is None
                else:
                    close(full(d.grad), t.grad, dtype)


def each_input(pls):
    return [pls]


RNG = np.random.default_rng(43)


def values(shape, dtype, zeros=False):
    if dtype == np.int64:
        return RNG.integers(-9, 10, size=shape).astype(np.int64)
    a = RNG.standard_normal(shape).astype(dtype)
    if zeros:
        a[RNG.random(shape) < 0.2] = 0
    return a


# ---- flip, roll ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("dims", [(0,), (1,), (0, 1), (-1,)])
def test_flip(dtype, dims):
    a = values((5, 3), dtype)
    check(lambda x: dt.flip(x, dims), lambda x: torch.flip(x, dims), [a],
          [[p] for p in layouts(2, dims[0] % 2)])
    check(lambda x: x.flip(*dims), lambda x: x.flip(*dims), [a], [[[S(0), S(1)]]])


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("shifts,dims", [(2, 0), ((1, -4), (0, 1)), (3, None), (-7, 1),
                                         ((1, 1), (1, 1))])
def test_roll(dtype, shifts, dims):
    a = values((5, 3), dtype)
    d0 = 0 if dims is None else (dims if isinstance(dims, int) else dims[0])
    check(lambda x: dt.roll(x, shifts, dims), lambda x: torch.roll(x, shifts, dims), [a],
          [[p] for p in layouts(2, d0)])
    check(lambda x: x.roll(shifts, dims), lambda x: x.roll(shifts, dims), [a], [])


def test_flip_roll_layouts_and_partials():
    a = values((5, 4), np.float64)
    d = dt.distribute_tensor(a, MESH, [S(0), R])
    with dt.CommDebugMode() as comm:
        f = dt.flip(d, [1])
        r = dt.roll(d, 3, 1)
    assert comm.get_total_counts() == 0
    assert f.placements == (S(0), R) and r.placements == (S(0), R)
    # Along the sharded dim: dim 0 is no longer sharded (gathered, or the
    # shards moved to another dim if that is cheaper).
    assert S(0) not in dt.flip(d, [0]).placements
    # A permutation commutes with every reduction: Partials pass untouched.
    pieces = [values((5, 4), np.float64) for _ in range(2)]
    for kind in ("sum", "max"):
        p = partial(pieces, kind)
        with dt.CommDebugMode() as comm:
            pf = dt.flip(p, [0, 1])
            pr = dt.roll(p, (2, 1), (0, 1))
        assert comm.get_total_counts() == 0
        assert pf.placements == (R, dt.Partial(kind))
        ref = torch.tensor(pieces[0] + pieces[1] if kind == "sum" else np.maximum(*pieces))
        close(full(pf), torch.flip(ref, (0, 1)), np.float64)
        close(full(pr), torch.roll(ref, (2, 1), (0, 1)), np.float64)


# ---- cumprod -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod(dtype, dim):
    # Zeros in the data: the gradient must be exact there (no division).
    a = values((5, 3), dtype, zeros=True)
    a[1, :] = 0
    check(lambda x: dt.cumprod(x, dim), lambda x: torch.cumprod(x, dim), [a],
          [[p] for p in layouts(2, dim % 2)])
    check(lambda x: x.cumprod(dim), lambda x: x.cumprod(dim), [a], [])


def test_cumprod_bool_and_partial():
    b = np.array([[True, False, True], [True, True, True]])
    close(dt.cumprod(dt.tensor(b), 1), torch.cumprod(torch.tensor(b), 1), np.int64)
    pieces = [values((4, 3), np.float64) for _ in range(2)]
    p = partial(pieces)
    out = dt.cumprod(p, 1)  # not linear: the Partial is reduced first
    assert not any(pl.is_partial() for pl in out.placements)
    close(full(out), torch.cumprod(torch.tensor(pieces[0] + pieces[1]), 1), np.float64)


# ---- argsort -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("dim,descending", [(0, False), (1, True), (-1, False)])
def test_argsort(dtype, dim, descending):
    # Distinct values: torch's stable=False order is then the only one.
    a = RNG.permutation(15).reshape(5, 3).astype(dtype) - 7
    check(lambda x: dt.argsort(x, dim, descending), lambda x: torch.argsort(x, dim, descending),
          [a], [[p] for p in layouts(2, dim % 2)], grad=False)
    check(lambda x: x.argsort(dim=dim, descending=descending),
          lambda x: x.argsort(dim=dim, descending=descending), [a], [], grad=False)
    pieces = [a, RNG.permutation(15).reshape(5, 3).astype(dtype) * 100]
    close(full(dt.argsort(partial(pieces), dim, descending)),
          torch.argsort(torch.tensor(pieces[0] + pieces[1]), dim, descending), np.int64)


# ---- outer, dot ------------------------------------------------------------------------------

PAIRS_1D = [[[R, R], [R, R]], [[S(0), R], [R, R]], [[R, R], [R, S(0)]], [[S(0), S(0)], [S(0), R]],
            [[R, S(0)], [S(0), R]]]


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
def test_outer(dtype):
    a, b = values((5,), dtype), values((3,), dtype)
    check(dt.outer, torch.outer, [a, b], PAIRS_1D)
    check(lambda x, y: x.outer(y), lambda x, y: x.outer(y), [a, b], [])
    # outer of a S(0) vector with a replicated one needs no communication.
    with dt.CommDebugMode() as comm:
        o = dt.outer(dt.distribute_tensor(a, MESH, [S(0), R]), dt.distribute_tensor(b, MESH, [R, R]))
    assert comm.get_total_counts() == 0 and o.placements == (S(0), R)
    pieces = [values((5,), dtype) for _ in range(2)]
    close(full(dt.outer(partial(pieces), dt.distribute_tensor(b, MESH, [R, R]))),
          torch.outer(torch.tensor(pieces[0] + pieces[1]), torch.tensor(b)), dtype)


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
def test_dot(dtype):
    a, b = values((5,), dtype), values((5,), dtype)
    check(dt.dot, torch.dot, [a, b], PAIRS_1D)
    check(lambda x, y: x.dot(y), lambda x, y: x.dot(y), [a, b], [])
    # Sharded alike: each rank sums its own products, a Partial(sum).
    da, db = (dt.distribute_tensor(v, MESH, [S(0), R]) for v in (a, b))
    with dt.CommDebugMode() as comm:
        d = dt.dot(da, db)
    assert comm.get_total_counts() == 0 and d.placements == (dt.Partial(), R)
    close(full(d), torch.dot(torch.tensor(a), torch.tensor(b)), dtype)


def test_outer_dot_errors():
    with pytest.raises(dt.Error, match="same dtype"):
        dt.dot(dt.tensor(np.ones(2, np.float32)), dt.tensor(np.ones(2)))
    with pytest.raises(dt.Error, match="dot"):
        dt.dot(dt.tensor(np.ones(2)), dt.tensor(np.ones(3)))
    with pytest.raises(dt.Error, match="1-D"):
        dt.outer(dt.tensor(np.ones((2, 2))), dt.tensor(np.ones(2)))


# ---- linspace, eye -----------------------------------------------------------------------------

DTYPES = [(dt.float32, torch.float32), (dt.float64, torch.float64), (dt.int64, torch.int64)]
FACTORY_LAYOUTS_1D = [[R, R], [S(0), R], [R, S(0)], [S(0), S(0)], [dt.Partial(), R],
                      [dt.Partial("max"), S(0)]]


def torch_linspace_scalar(start, end, steps, tdtype):
    """torch 1.13's scalar linspace formula (its vectorised CPU path builds
    whole vectors from one base: the last bits differ, and an int64
    linspace(0, 1, 1000) even loses its end, all zeros)."""
    t = torch.tensor([start, end]).to(tdtype)
    step_t = torch.float64 if tdtype == torch.int64 else tdtype
    lo, hi = t.to(step_t)
    if steps == 1:
        return torch.tensor([lo]).to(tdtype)
    step = (hi - lo) / (steps - 1)
    out = [lo + step * i if i < steps // 2 else hi - step * (steps - i - 1) for i in range(steps)]
    return torch.stack(out).to(tdtype) if out else torch.zeros(0, dtype=tdtype)


@pytest.mark.parametrize("dtype,tdtype", DTYPES)
@pytest.mark.parametrize("start,end,steps", [(0, 10, 7), (-1, 1, 5), (3, 5, 1), (0, 1, 0),
                                             (2.5, -3.25, 11), (0, 1, 1000), (-7, 8, 33)])
def test_linspace(dtype, tdtype, start, end, steps):
    want = torch.linspace(start, end, steps, dtype=tdtype)
    scalar = torch_linspace_scalar(start, end, steps, tdtype)
    if tdtype == torch.int64:
        # torch 1.13's vectorised path truncates each vector's base and adds
        # the lanes' steps to it, so its int64 values stray from its own
        # formula (linspace(0, 1, 1000) loses its end): short ones, which it
        # computes one by one, match exactly; the rest are the formula's.
        if steps < 8:
            np.testing.assert_array_equal(scalar, want)
        assert steps < 2 or scalar[-1] == int(end)
        want = scalar
    else:
        # torch's values within its vectorised path's rounding; the scalar
        # formula exactly.
        tol = 1e-6 if tdtype == torch.float32 else 1e-14
        np.testing.assert_allclose(scalar, want, rtol=tol, atol=tol)
        want = scalar
    np.testing.assert_array_equal(np.asarray(dt.linspace(start, end, steps, dtype=dtype)), want)
    for pl in FACTORY_LAYOUTS_1D:
        if dtype == dt.int64 and any(p == dt.Partial("avg") for p in pl):
            continue
        d = dt.linspace(start, end, steps, dtype=dtype, device_mesh=MESH, placements=pl)
        assert d.placements == tuple(pl)
        np.testing.assert_array_equal(full(d), want)


def test_linspace_default_dtype_and_errors():
    assert dt.linspace(0, 1, 3).dtype == dt.float32
    with pytest.raises(dt.Error, match="non-negative"):
        dt.linspace(0, 1, -1)
    with pytest.raises(dt.Error, match="both device_mesh and placements"):
        dt.linspace(0, 1, 3, device_mesh=MESH)


FACTORY_LAYOUTS_2D = [[R, R], [S(0), S(1)], [S(1), S(0)], [S(0), S(0)], [dt.Partial(), S(1)],
                      [S(1), dt.Partial("avg")]]


@pytest.mark.parametrize("dtype,tdtype", DTYPES + [(dt.bool, torch.bool)])
@pytest.mark.parametrize("n,m", [(3, None), (5, 3), (2, 7), (0, 2), (5, 5)])
def test_eye(dtype, tdtype, n, m):
    want = torch.eye(n, m, dtype=tdtype) if m is not None else torch.eye(n, dtype=tdtype)
    np.testing.assert_array_equal(np.asarray(dt.eye(n, m, dtype=dtype)), want)
    for pl in FACTORY_LAYOUTS_2D:
        if dtype in (dt.bool, dt.int64) and dt.Partial("avg") in pl:
            continue  # an average of integers is not an integer
        if dtype == dt.bool and any(p.is_partial() for p in pl):
            continue
        d = dt.eye(n, m, dtype=dtype, device_mesh=MESH, placements=pl)
        np.testing.assert_array_equal(full(d), want)
    with pytest.raises(dt.Error, match="eye"):
        dt.eye(-1)


# ---- diagonal ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (0, 1, 0),
                                              (1, -1, 0), (0, 2, 1), (9, 0, 1)])
def test_diagonal(dtype, offset, dim1, dim2):
    a = values((5, 4, 3), dtype)
    f = lambda x: dt.diagonal(x, offset, dim1, dim2)  # noqa: E731
    g = lambda x: torch.diagonal(x, offset, dim1, dim2)  # noqa: E731
    check(f, g, [a], [[p] for p in layouts(3, dim1 % 3)] + [[[S(2), S(1)]], [[S(1), S(0)]]])
    check(lambda x: x.diagonal(offset, dim1, dim2), lambda x: x.diagonal(offset, dim1, dim2),
          [a], [])


def test_diagonal_keeps_other_dims_and_partials():
    a = values((4, 5, 6), np.float64)
    d = dt.distribute_tensor(a, MESH, [S(0), R])
    with dt.CommDebugMode() as comm:
        out = dt.diagonal(d, 1, 1, 2)
    assert comm.get_total_counts() == 0 and out.placements == (S(0), R)
    d = dt.distribute_tensor(a, MESH, [R, S(2)])
    assert dt.diagonal(d, 0, 0, 1).placements == (R, S(0))
    pieces = [values((4, 5), np.float64) for _ in range(2)]
    for kind in ("sum", "min"):
        p = partial(pieces, kind)
        out = dt.diagonal(p, -1)
        assert out.placements == (R, dt.Partial(kind))
        ref = pieces[0] + pieces[1] if kind == "sum" else np.minimum(*pieces)
        close(full(out), torch.diagonal(torch.tensor(ref), -1), np.float64)
    with pytest.raises(dt.Error, match="diagonal"):
        dt.diagonal(dt.tensor(np.ones(3)))
    with pytest.raises(dt.Error, match="identical"):
        dt.diagonal(dt.tensor(np.ones((3, 3))), 0, 1, 1)


# ---- nonzero ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(5, 3), (7,), (2, 3, 2), ()])
def test_nonzero(dtype, shape):
    a = np.asarray((RNG.integers(-1, 2, size=shape) * RNG.integers(0, 2, size=shape)).astype(dtype))
    ta = torch.tensor(a)
    for as_tuple in (False, True):
        want = torch.nonzero(ta, as_tuple=as_tuple)
        got = dt.nonzero(dt.tensor(a), as_tuple=as_tuple)
        wants, gots = (want, got) if as_tuple else ((want,), (got,))
        assert len(gots) == len(wants)
        for g, w in zip(gots, wants):
            np.testing.assert_array_equal(np.asarray(g), w)
        lays = [[R, R]] if a.ndim == 0 else [[S(0), R], [R, S(a.ndim - 1)], [S(0), S(0)]]
        for pl in lays:
            got = dt.distribute_tensor(a, MESH, pl).nonzero(as_tuple=as_tuple)
            gots = got if as_tuple else (got,)
            for g, w in zip(gots, wants):
                assert g.placements == (R, R) and g.dtype == dt.int64
                np.testing.assert_array_equal(full(g), w)


def test_nonzero_of_a_partial_reduces_first():
    pieces = [np.array([[1.0, -2.0, 0.0], [3.0, 0.0, 0.0]]), np.array([[-1.0, 2.0, 0.0], [0.0, 1.0, 0.0]])]
    got = dt.nonzero(partial(pieces))
    np.testing.assert_array_equal(full(got), torch.nonzero(torch.tensor(pieces[0] + pieces[1])))


# ---- std ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": (0, 1)}, {"dim": 0, "unbiased": False},
                                    {"dim": 1, "keepdim": True}, {"dim": 0, "correction": 0},
                                    {"dim": 1, "correction": 2}, {"unbiased": False}])
def test_std(dtype, kwargs):
    a = values((5, 4), dtype)
    a[2, :] = 1.5  # a constant row: std 0, gradient 0 there (not NaN)
    check(lambda x: dt.std(x, **kwargs), lambda x: torch.std(x, **kwargs), [a],
          [[p] for p in layouts(2, 0)] + [[[S(1), S(0)]]])
    check(lambda x: x.std(**kwargs), lambda x: x.std(**kwargs), [a], [])


def test_std_positional_forms_and_errors():
    a = values((5, 4), np.float64)
    x, t = dt.tensor(a), torch.tensor(a)
    close(dt.std(x, 1, False, True), torch.std(t, 1, False, True), np.float64)
    close(dt.std(x, False), torch.std(t, False), np.float64)
    with pytest.raises(dt.Error, match="correction and unbiased"):
        dt.std(x, 1, unbiased=True, correction=1)
    with pytest.raises(dt.Error, match="floating"):
        dt.std(dt.tensor(np.ones(3, np.int64)))


# ---- max, min -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_whole(dtype, name):
    a = values((5, 3), dtype)
    a[4, 2] = a[0, 1] = (a.max() if name == "max" else a.min())  # a tie: the gradient splits
    check(getattr(dt, name), getattr(torch, name), [a], [[p] for p in layouts(2, 0)])
    check(lambda x: getattr(x, name)(), lambda x: getattr(x, name)(), [a], [])


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_max_min_along_dim(dtype, name, dim, keepdim):
    a = values((5, 3), dtype)
    for part in (0, 1):  # values (with gradients), then indices
        check(lambda x: getattr(dt, name)(x, dim, keepdim)[part],
              lambda x: getattr(torch, name)(x, dim, keepdim)[part], [a],
              [[p] for p in layouts(2, dim % 2)], grad=part == 0)
    r = getattr(dt.tensor(a), name)(dim=dim, keepdim=keepdim)
    w = getattr(torch.tensor(a), name)(dim=dim, keepdim=keepdim)
    close(r.values, w.values, dtype)
    close(r.indices, w.indices, np.int64)


def test_max_min_ties_nan_partial_and_layout():
    a = np.array([[3.0, 1.0, 3.0], [np.nan, 2.0, 5.0]])
    for name in ("max", "min"):
        v, i = getattr(dt, name)(dt.tensor(a), 1)
        wv, wi = getattr(torch, name)(torch.tensor(a), 1)
        np.testing.assert_array_equal(np.asarray(v), wv)
        np.testing.assert_array_equal(np.asarray(i), wi)
    # The reduced dim not sharded: no communication, the other dim's shards kept.
    d = dt.distribute_tensor(values((5, 4), np.float64), MESH, [S(0), R])
    with dt.CommDebugMode() as comm:
        v, i = dt.max(d, 1)
    assert comm.get_total_counts() == 0 and v.placements == (S(0), R) == i.placements
    pieces = [values((4, 3), np.float64) for _ in range(2)]
    v, i = dt.min(partial(pieces), 0)
    wv, wi = torch.min(torch.tensor(pieces[0] + pieces[1]), 0)
    close(full(v), wv, np.float64)
    close(full(i), wi, np.int64)
    with pytest.raises(dt.Error, match="numel"):
        dt.max(dt.tensor(np.ones((0, 2))))
    with pytest.raises(dt.Error, match="non-zero size"):
        dt.min(dt.tensor(np.ones((0, 2))), 0)


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_of_two(dtype, name):
    a, b = values((5, 3), dtype), values((5, 3), dtype)
    check(getattr(dt, name), getattr(torch, name), [a, b],
          [[[S(0), R], [R, S(1)]], [[S(1), S(0)], [S(1), S(0)]]])
    check(lambda x, y: getattr(x, name)(y), lambda x, y: getattr(x, name)(y), [a, b], [])


# ---- view_as, expand_as, type_as ------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_view_expand_type_as(dtype):
    a, b = values((6, 2), dtype), values((3, 4), dtype)
    check(lambda x, y: x.view_as(y), lambda x, y: x.view_as(y), [a, b],
          [[[S(0), R], [R, R]], [[R, R], [S(1), S(0)]]])
    c, e = values((1, 4), dtype), values((5, 4), dtype)
    check(lambda x, y: x.expand_as(y), lambda x, y: x.expand_as(y), [c, e],
          [[[R, S(1)], [S(0), R]], [[R, R], [R, R]]])
    other = np.float64 if dtype == np.float32 else np.float32
    for pl in ([S(0), R], [R, S(1)]):
        x = dt.distribute_tensor(a, MESH, pl).requires_grad_()
        y = dt.distribute_tensor(a.astype(other), MESH, [R, R])
        z = x.type_as(y)
        tx = torch.tensor(a, requires_grad=True)
        tz = tx.type_as(torch.tensor(a.astype(other)))
        assert z.dtype == {np.float32: dt.float32, np.float64: dt.float64}[other]
        close(full(z), tz, other)
        dt.sum(z * z).backward()
        (tz * tz).sum().backward()
        close(full(x.grad), tx.grad, dtype)
    close(dt.tensor(a).type_as(dt.tensor(np.ones(1, np.int64))), torch.tensor(a).long(), np.int64)
