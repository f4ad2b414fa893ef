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
