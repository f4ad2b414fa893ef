# vector_norm / norm from Python: Tensor and DTensor, PyTorch's keyword
# names, values against NumPy, the layouts the rule promises, errors.
import math

import numpy as np
import pytest

import dtensor as dt


def np_norm(a, ord, axis=None, keepdims=False):
    a = np.abs(a)
    if ord == math.inf:
        return a.max(axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return a.min(axis=axis, keepdims=keepdims)
    if ord == 0:
        return (a != 0).sum(axis=axis, keepdims=keepdims).astype(a.dtype)
    return (a**ord).sum(axis=axis, keepdims=keepdims) ** (1.0 / ord)


@pytest.mark.parametrize("ord", [2, 1, 0, math.inf, -math.inf, 3, 0.5, -1])
def test_tensor_vector_norm_matches_numpy(rng, ord):
    a = rng.standard_normal((4, 5))
    x = dt.tensor(a)
    np.testing.assert_allclose(np.asarray(dt.vector_norm(x, ord)), np_norm(a, ord), rtol=1e-12)
    got = dt.linalg.vector_norm(x, ord=ord, dim=1, keepdim=True)
    np.testing.assert_allclose(np.asarray(got), np_norm(a, ord, 1, True), rtol=1e-12)
    got = dt.norm(x, p=ord, dim=[0, -1])
    np.testing.assert_allclose(np.asarray(got), np_norm(a, ord), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x.norm(ord, dim=0)), np_norm(a, ord, 0), rtol=1e-12)


def test_dtensor_norm_layouts():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    a = np.arange(35, dtype=np.float64).reshape(5, 7) - 17
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    # ord 1 over a sharded dim: a lazy Partial(sum), kept dim stays sharded.
    s = dt.vector_norm(d, 1, dim=1)
    assert s.placements == (dt.Shard(0), dt.Partial("sum"))
    np.testing.assert_array_equal(np.asarray(s.full_tensor()), np.abs(a).sum(1))
    m = dt.linalg.vector_norm(d, ord=math.inf, dim=0)
    assert m.placements == (dt.Partial("max"), dt.Shard(0))
    np.testing.assert_array_equal(np.asarray(m.full_tensor()), np.abs(a).max(0))
    # ord 2 over everything: one reduction, nothing partial left.
    n = d.norm()
    assert all(not isinstance(p, dt.Partial) for p in n.placements)
    assert float(np.asarray(n.full_tensor())) == pytest.approx(np.linalg.norm(a), rel=1e-12)


def test_dtensor_norm_backward():
    mesh = dt.init_device_mesh((2,))
    a = np.array([[3.0, -4.0], [1.0, 2.0], [0.5, -1.0]])
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0)])
    d.requires_grad_()
    dt.vector_norm(d, 2, dim=0).backward(
        dt.distribute_tensor(np.ones(2), mesh, [dt.Replicate()]))
    np.testing.assert_allclose(np.asarray(d.grad.full_tensor()), a / np.linalg.norm(a, axis=0),
                               rtol=1e-12)


def test_errors():
    with pytest.raises(dt.Error, match="vector_norm.*int64"):
        dt.vector_norm(dt.tensor(np.arange(3)))
    with pytest.raises(dt.Error, match="inf norm.*empty dim 0"):
        dt.norm(dt.tensor(np.zeros((0, 2))), p=math.inf, dim=0)
