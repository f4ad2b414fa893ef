# cumsum, sort, topk, logsumexp, all, any from Python: Tensor and DTensor
# against NumPy, PyTorch's keyword names, the (values, indices) named tuple,
# the layouts that need no communication, and cumsum's gradient.
import numpy as np
import pytest

import dtensor as dt


@pytest.fixture
def mesh22():
    return dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["dp", "tp"])


def full(d):
    return np.asarray(d.full_tensor())


def test_plain_tensor_ops_match_numpy():
    a = np.array([[3.0, 1.0, 2.0, 1.0], [0.0, -1.0, 5.0, 5.0]], dtype=np.float64)
    t = dt.tensor(a)
    np.testing.assert_array_equal(np.asarray(dt.cumsum(t, dim=1)), np.cumsum(a, axis=1))
    np.testing.assert_array_equal(np.asarray(t.cumsum(0)), np.cumsum(a, axis=0))
    r = dt.sort(t, dim=1, descending=True, stable=True)
    values, indices = r
    assert r.values is not None and r.indices is not None
    np.testing.assert_array_equal(np.asarray(values), -np.sort(-a, axis=1, kind="stable"))
    np.testing.assert_array_equal(np.asarray(indices), [[0, 2, 1, 3], [2, 3, 0, 1]])
    v, i = t.topk(2, largest=False)
    np.testing.assert_array_equal(np.asarray(v), [[1.0, 1.0], [-1.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(i), [[1, 3], [1, 0]])
    np.testing.assert_allclose(np.asarray(dt.logsumexp(t, dim=1)),
                               np.log(np.exp(a).sum(axis=1)), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(dt.all(t, dim=1)), [True, False])
    np.testing.assert_array_equal(np.asarray(t.any(dim=0, keepdim=True)), [[True, True, True, True]])
    assert bool(np.asarray(dt.any(t))) and not bool(np.asarray(t.all()))


def test_errors_are_dtensor_errors():
    t = dt.tensor(np.zeros((2, 3)))
    with pytest.raises(dt.Error, match="topk"):
        dt.topk(t, 4)
    with pytest.raises(dt.Error, match="cumsum"):
        dt.cumsum(t, dim=2)


def test_dtensor_ops_match_numpy_and_keep_layouts(mesh22):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, size=(5, 7)).astype(np.float32)
    d = dt.distribute_tensor(a, mesh22, [dt.Shard(0), dt.Replicate()])
    with dt.CommDebugMode() as comm:
        c = dt.cumsum(d, dim=1)
        v, i = dt.sort(d, dim=-1)
        tv, ti = d.topk(3, dim=1)
        lse = dt.logsumexp(d, dim=1)
        al = dt.all(d, dim=1)
    assert comm.get_total_counts() == 0
    for out in (c, v, i, tv, ti, lse, al):
        assert out.placements == (dt.Shard(0), dt.Replicate())
    np.testing.assert_array_equal(full(c), np.cumsum(a, axis=1))
    np.testing.assert_array_equal(full(v), np.sort(a, axis=1, kind="stable"))
    np.testing.assert_array_equal(full(i), np.argsort(a, axis=1, kind="stable"))
    np.testing.assert_array_equal(full(tv), -np.sort(-a, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(full(lse), np.log(np.exp(a.astype(np.float64)).sum(axis=1)), rtol=1e-5)
    np.testing.assert_array_equal(full(al), (a != 0).all(axis=1))
    # A sharded reduced dim: Partial(max) for any, resolved on full_tensor().
    s = dt.distribute_tensor(a, mesh22, [dt.Shard(0), dt.Shard(1)])
    an = dt.any(s, dim=1)
    assert an.placements == (dt.Shard(0), dt.Partial("max"))
    np.testing.assert_array_equal(full(an), (a != 0).any(axis=1))


def test_cumsum_gradient(mesh22):
    a = np.arange(12.0).reshape(3, 4)
    d = dt.distribute_tensor(a, mesh22, [dt.Shard(0), dt.Shard(1)]).requires_grad_()
    w = np.random.default_rng(0).standard_normal((3, 4))
    wd = dt.distribute_tensor(w, mesh22, [dt.Replicate(), dt.Replicate()])
    dt.sum(dt.cumsum(d, dim=1) * wd).backward()
    want = np.flip(np.cumsum(np.flip(w, axis=1), axis=1), axis=1)
    np.testing.assert_allclose(full(d.grad), want, rtol=1e-12)
