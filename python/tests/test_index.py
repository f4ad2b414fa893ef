# clamp, tril/triu, gather, scatter, scatter_add, index_add and index_put
# from Python: Tensors and DTensors against NumPy, PyTorch's keywords, and
# a gradient.
import numpy as np
import pytest

import dtensor as dt


def np_of(t):
    return np.asarray(t.full_tensor() if hasattr(t, "full_tensor") else t)


@pytest.fixture
def mesh():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))


def test_clamp_and_triangles(mesh):
    a = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    t = dt.tensor(a)
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    for x in (t, d):
        np.testing.assert_array_equal(np_of(dt.clamp(x, min=-2, max=3)), np.clip(a, -2, 3))
        np.testing.assert_array_equal(np_of(x.clamp(max=1.5)), np.minimum(a, 1.5))
        np.testing.assert_array_equal(np_of(dt.clamp_min(x, 0)), np.maximum(a, 0))
        np.testing.assert_array_equal(np_of(dt.tril(x, diagonal=1)), np.tril(a, 1))
        np.testing.assert_array_equal(np_of(x.triu(-1)), np.triu(a, -1))
    assert dt.tril(d).placements == d.placements
    with pytest.raises(Exception, match="at least one of min and max"):
        dt.clamp(t)


def test_gather_scatter_index_add(mesh):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[3, 0], [1, 1], [2, 0]], dtype=np.int64)
    src = np.full((3, 2), 9, dtype=np.float32)
    want_gather = np.take_along_axis(a, idx, 1)
    want_scatter = a.copy()
    np.put_along_axis(want_scatter, idx, src, 1)
    want_add = a.copy()
    np.add.at(want_add, (np.arange(3)[:, None], idx), src)
    rows = np.array([2, 0, 2], dtype=np.int64)
    want_index_add = a.copy()
    np.add.at(want_index_add, rows, 2 * a)
    rep = [dt.Replicate(), dt.Replicate()]
    for wrap in (dt.tensor, lambda v: dt.distribute_tensor(v, mesh, [dt.Shard(0), dt.Replicate()])):
        x, i, s = wrap(a), wrap(idx), wrap(src)
        np.testing.assert_array_equal(np_of(dt.gather(x, 1, i)), want_gather)
        np.testing.assert_array_equal(np_of(x.gather(dim=1, index=i)), want_gather)
        np.testing.assert_array_equal(np_of(dt.scatter(x, 1, i, src=s)), want_scatter)
        np.testing.assert_array_equal(np_of(dt.scatter_add(x, 1, i, s)), want_add)
        r = dt.distribute_tensor(rows, mesh, rep) if isinstance(x, dt.DTensor) else dt.tensor(rows)
        np.testing.assert_array_equal(np_of(dt.index_add(x, 0, r, x, alpha=2)), want_index_add)
    v = dt.scatter(dt.tensor(a), 0, dt.tensor(np.zeros((1, 4), dtype=np.int64)), value=-1.0)
    assert np_of(v)[0].tolist() == [-1, -1, -1, -1]


def test_index_put_and_gradient(mesh):
    a = np.zeros((3, 4), dtype=np.float64)
    cols = np.array([3, 0], dtype=np.int64)
    vals = np.array([[1.0, 2.0]] * 3)
    want = a.copy()
    want[:, cols] = vals
    out = dt.index_put(dt.tensor(a), [None, dt.tensor(cols)], dt.tensor(vals))
    np.testing.assert_array_equal(np_of(out), want)
    x = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()]).requires_grad_()
    c = dt.distribute_tensor(cols, mesh, [dt.Replicate(), dt.Replicate()])
    v = dt.distribute_tensor(vals, mesh, [dt.Shard(0), dt.Replicate()]).requires_grad_()
    y = x.index_put([None, c], v, accumulate=True)
    np.testing.assert_array_equal(np_of(y), want)
    assert y.placements == x.placements
    dt.sum(y * 3.0).backward()
    np.testing.assert_array_equal(np_of(x.grad), np.full((3, 4), 3.0))
    np.testing.assert_array_equal(np_of(v.grad), np.full((3, 2), 3.0))


# ---- x[key] and x[key] = v against torch 1.13 ---------------------------------------------

torch = pytest.importorskip("torch")

LAYOUTS = [[dt.Replicate(), dt.Replicate()], [dt.Shard(0), dt.Replicate()],
           [dt.Shard(0), dt.Shard(1)], [dt.Shard(1), dt.Shard(0)]]

# Keys as (dtensor key, torch key) builders over the (5, 3, 4) test tensor:
# index tensors are given as lists, int64 Tensors and bool masks.
I = np.array([4, 0, -1, 2], dtype=np.int64)
M = (np.arange(15).reshape(5, 3) % 4 == 1)


def keys():
    return [
        (..., ...), ((..., 0), (..., 0)), ((None,), (None,)), ((None, ..., 1), (None, ..., 1)),
        ((slice(None, None, 2),), (slice(None, None, 2),)),
        ((slice(1, 5, 3), slice(None), slice(0, 4, 2)), (slice(1, 5, 3), slice(None), slice(0, 4, 2))),
        (([0, 2],), ([0, 2],)), ((slice(None), [2, 0, 2]), (slice(None), [2, 0, 2])),
        ((dt.tensor(I),), (torch.tensor(I),)),
        ((0, slice(None), dt.tensor(I[1:3])), (0, slice(None), torch.tensor(I[1:3]))),
        ((dt.tensor(I[:2]), slice(None), dt.tensor(I[2:])), (torch.tensor(I[:2]), slice(None), torch.tensor(I[2:]))),
        ((slice(None), [[0], [2]], [1, 3]), (slice(None), [[0], [2]], [1, 3])),
        ((dt.tensor(M),), (torch.tensor(M),)),
        ((dt.tensor(M[:, 0]), 1), (torch.tensor(M[:, 0]), 1)),
        ((Ellipsis, dt.tensor(np.array([True, False, True, True]))),
         (Ellipsis, torch.tensor([True, False, True, True]))),
    ]


def test_getitem_matches_torch_on_tensors_and_dtensors():
    mesh = dt.init_device_mesh((2, 2))
    a = np.arange(60, dtype=np.float64).reshape(5, 3, 4)
    ta = torch.tensor(a)
    for k, tk in keys():
        want = ta[tk].numpy()
        got = dt.tensor(a)[k]
        assert np_of(got).shape == want.shape, (k, np_of(got).shape, want.shape)
        np.testing.assert_array_equal(np_of(got), want)
        for pl in LAYOUTS:
            d = dt.distribute_tensor(a, mesh, pl)
            np.testing.assert_array_equal(np_of(d[k]), want)
    # A mask's result has a data-dependent shape: replicated on a DTensor.
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    assert d[dt.tensor(M)].placements == (dt.Replicate(), dt.Replicate())
    # A DTensor index is read whole.
    idx = dt.distribute_tensor(I, mesh, [dt.Shard(0), dt.Replicate()])
    np.testing.assert_array_equal(np_of(d[idx]), a[I])


def test_getitem_gradient_matches_torch():
    mesh = dt.init_device_mesh((2, 2))
    a = np.random.default_rng(1).standard_normal((5, 3, 4))
    w = np.random.default_rng(2).standard_normal((5, 3, 4))
    for k, tk in keys():
        ta = torch.tensor(a, requires_grad=True)
        (ta[tk] * torch.tensor(w)[tk]).sum().backward()
        for pl in LAYOUTS[1:]:
            d = dt.distribute_tensor(a, mesh, pl).requires_grad_()
            dw = dt.distribute_tensor(w, mesh, pl)
            dt.sum(d[k] * dw[k]).backward()
            np.testing.assert_allclose(np_of(d.grad), ta.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_getitem_errors():
    x = dt.tensor(np.zeros((3, 4)))
    with pytest.raises(dt.Error, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[[0, 3]]
    with pytest.raises(dt.Error, match="shape of the mask"):
        x[dt.tensor(np.array([True, False]))]
    with pytest.raises(dt.Error, match="must be int64 or bool"):
        x[dt.tensor(np.array([0.5]))]
    with pytest.raises(dt.Error, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(dt.Error, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(dt.Error, match="step must be positive"):
        x[::-1]


def setitem_cases():
    v3 = np.array([7.0, 8.0, 9.0])
    return [
        (lambda x: x.__setitem__(slice(1, 3), 0), None),
        (lambda x: x.__setitem__((slice(None), 1), -1.5), None),
        (lambda x: x.__setitem__(dt.tensor(M[:, 0]) if isinstance(x, (dt.Tensor, dt.DTensor)) else torch.tensor(M[:, 0]), 5), None),
        (lambda x: x.__setitem__([4, 0], v3 if not isinstance(x, torch.Tensor) else torch.tensor(v3)), None),
        (lambda x: x.__setitem__((Ellipsis, [0, 2]), 3), None),
    ]


def test_setitem_matches_torch_in_place_keeping_placements():
    mesh = dt.init_device_mesh((2, 2))
    a = np.arange(15, dtype=np.float64).reshape(5, 3)
    for assign, _ in setitem_cases():
        ta = torch.tensor(a)
        assign(ta)
        t = dt.tensor(a)
        alias = t[0:5]  # a view: writes through t must show in it
        assign(t)
        np.testing.assert_array_equal(np_of(t), ta.numpy())
        np.testing.assert_array_equal(np_of(alias), ta.numpy())
        for pl in LAYOUTS:
            d = dt.distribute_tensor(a, mesh, pl)
            assign(d)
            assert d.placements == tuple(pl)
            np.testing.assert_array_equal(np_of(d), ta.numpy())
    # x[mask] = v and x[idx] = t with tensors of x's layer.
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    d[d > 10] = 0
    want = a.copy()
    want[want > 10] = 0
    np.testing.assert_array_equal(np_of(d), want)
    rows = dt.distribute_tensor(np.array([1, 3]), mesh, [dt.Replicate(), dt.Replicate()])
    d[rows] = dt.distribute_tensor(np.ones((2, 3)), mesh, [dt.Shard(0), dt.Replicate()])
    want[[1, 3]] = 1
    np.testing.assert_array_equal(np_of(d), want)
    with pytest.raises(dt.Error, match="cannot be broadcast"):
        d[[0, 1]] = dt.tensor(np.ones(4))
