# The dense Tensor: dtypes, creation from NumPy, arithmetic against NumPy.
import numpy as np
import pytest

import dtensor as dt


def test_roundtrip_and_arithmetic(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    x, y = dt.from_numpy(a), dt.from_numpy(b)
    assert x.shape == (3, 4)
    assert x.dtype == dt.float32 and x.dtype == np.float32
    np.testing.assert_allclose(np.asarray(x + y), a + b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(x * 2 - y / 3), a * 2 - b / 3, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(x @ y.T), a @ b.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(x > y), a > b)


def test_promotion_and_scalars():
    i = dt.tensor([1, 2, 3])
    assert i.dtype == dt.int64
    assert (i + 2).dtype == dt.int64 and (i + 2.5).dtype == dt.float32
    assert (i / 2).dtype == dt.float32            # true division
    assert (i + True).dtype == dt.int64
    assert (2 - i).tolist() == [1, 0, -1]
    assert (i ** 2).tolist() == [1, 4, 9]
    assert (-i).tolist() == [-1, -2, -3]
    assert dt.tensor([True, False]).dtype == dt.bool
    assert i.sum().item() == 6 and isinstance(i.sum().item(), int)
    assert float(dt.tensor([2.5])) == 2.5
    assert dt.float32 == "float32" and dt.float64 == np.float64 and dt.int64 != dt.float32
    assert i.to("f64").dtype == dt.float64


def test_reductions_views_and_inplace_against_numpy(rng):
    a = rng.standard_normal((4, 5, 6))
    t = dt.tensor(a)
    np.testing.assert_allclose(np.asarray(t.sum(dim=(0, 2))), a.sum((0, 2)))
    np.testing.assert_allclose(np.asarray(dt.mean(t, dim=1, keepdim=True)), a.mean(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(t.var(dim=2)), a.var(2, ddof=1))
    np.testing.assert_array_equal(np.asarray(t.argmax(dim=1)), a.argmax(1))
    np.testing.assert_array_equal(np.asarray(t.permute(2, 0, 1)), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(t.view(20, 6)), a.reshape(20, 6))
    np.testing.assert_array_equal(np.asarray(t.reshape((-1,))), a.reshape(-1))
    np.testing.assert_allclose(np.asarray(dt.matmul(t, t.transpose(1, 2))), a @ a.transpose(0, 2, 1))
    parts = t.chunk(3, dim=2)
    assert [p.shape for p in parts] == [(4, 5, 2)] * 3
    u = t.clone()
    u.mul_(2).add_(1)
    np.testing.assert_allclose(np.asarray(u), a * 2 + 1)
    np.testing.assert_array_equal(np.asarray(t), a)   # clone did not alias


def test_indexing_is_a_view_and_setitem_writes():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    t = dt.tensor(a)
    for key in (1, -1, slice(1, 3), (slice(None), 2), (slice(None, None, 2), slice(1, 5, 3)),
                (None, 0), (2, slice(3, None))):
        np.testing.assert_array_equal(np.asarray(t[key]), a[key])
    assert np.shares_memory(np.asarray(t[1:3, 2]), np.asarray(t))
    t[0] = -1.0
    t[1:3, 0] = np.array([7.0, 8.0])
    assert t[0].tolist() == [-1.0] * 6 and t[:, 0].tolist() == [-1.0, 7.0, 8.0, 18.0]
    with pytest.raises(dt.Error, match="out of bounds"):  # torch's words
        t[4]
    with pytest.raises(TypeError):
        t["x"]
    mesh = dt.init_device_mesh((2,))
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0)])
    np.testing.assert_array_equal(np.asarray(d[1:3, ::2].full_tensor()), a[1:3, ::2])


def test_errors_are_runtime_errors_with_the_message():
    with pytest.raises(dt.Error, match=r"shapes \[2\] and \[3\] cannot be broadcast"):
        dt.ones((2,)) + dt.ones((3,))
    assert issubclass(dt.Error, RuntimeError)
    with pytest.raises(dt.Error, match="unknown dtype|dtype"):
        dt.zeros((2,), dtype="complex")


def test_numpy_scalars_are_scalars():
    t = dt.tensor([1.0, 2.0])
    assert (t * np.float32(2)).tolist() == [2.0, 4.0]
    assert (t + np.int64(1)).tolist() == [2.0, 3.0]
    assert (t * np.float64(0.5)).tolist() == [0.5, 1.0]
