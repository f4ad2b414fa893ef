# NumPy and DLPack interop: zero copies both ways, lifetimes, dtypes, and
# the layouts that are refused.
import gc
import weakref

import numpy as np
import pytest

import dtensor as dt

DTYPES = [(np.bool_, dt.bool), (np.int64, dt.int64), (np.float32, dt.float32),
          (np.float64, dt.float64), (np.float16, dt.float16)]


def sample(np_dtype, shape=(3, 5)):
    rng = np.random.default_rng(1)
    if np_dtype == np.bool_:
        return rng.random(shape) > 0.5
    return (rng.standard_normal(shape) * 10).astype(np_dtype)


@pytest.mark.parametrize("np_dtype,dt_dtype", DTYPES)
def test_from_numpy_shares_memory_every_dtype(np_dtype, dt_dtype):
    a = sample(np_dtype)
    t = dt.from_numpy(a)
    assert t.dtype == dt_dtype
    assert t.data_ptr() == a.ctypes.data
    back = np.asarray(t)
    assert back.dtype == np_dtype
    assert np.shares_memory(back, a)
    np.testing.assert_array_equal(back, a)
    # through the buffer protocol too
    assert np.shares_memory(np.frombuffer(memoryview(t), dtype=np_dtype).reshape(a.shape), a)


def test_writes_are_seen_both_ways():
    a = np.zeros((2, 3), dtype=np.float32)
    t = dt.from_numpy(a)
    t += 1.5                     # in place through dtensor
    assert (a == 1.5).all()
    a[1, 2] = 7                  # in place through NumPy
    assert t.tolist()[1][2] == 7
    t.fill_(0)
    assert (a == 0).all()


def test_strided_numpy_views_stay_views():
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    for view in (base.T, base[::2, 1:7:3], base[:, 3], base[2:4]):
        t = dt.from_numpy(view)
        assert t.shape == view.shape
        np.testing.assert_array_equal(np.asarray(t), view)
        assert np.shares_memory(np.asarray(t), base)
        np.testing.assert_array_equal(np.asarray(t * 2), view * 2)
    assert not dt.from_numpy(base.T).is_contiguous()


def test_refused_layouts_raise_dtensor_error():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(dt.Error, match="negative stride"):
        dt.from_numpy(base[::-1])
    ro = base.copy()
    ro.flags.writeable = False
    with pytest.raises(dt.Error, match="read-only"):
        dt.from_numpy(ro)
    with pytest.raises(dt.Error, match="int32 has no dtensor counterpart"):
        dt.from_numpy(base.astype(np.int32))
    with pytest.raises(dt.Error, match="not aligned"):
        raw = np.zeros(9 * 4 + 1, dtype=np.uint8)
        dt.from_numpy(raw[1:].view(np.float32))
    # the copying constructors take all of them
    np.testing.assert_array_equal(np.asarray(dt.tensor(base[::-1])), base[::-1])
    assert dt.tensor(base.astype(np.int32)).dtype == dt.int64
    assert not np.shares_memory(np.asarray(dt.tensor(base)), base)
    assert dt.tensor([1.5, 2]).dtype == dt.float32      # as torch.tensor
    assert dt.tensor([[1, 2]]).dtype == dt.int64
    assert dt.tensor([True]).dtype == dt.bool


def test_deleting_the_source_array_keeps_the_data():
    a = np.arange(1000, dtype=np.float64)
    ref = weakref.ref(a) if hasattr(a, "__weakref__") else None
    t = dt.from_numpy(a)
    view = t.narrow(0, 10, 5)
    del a
    gc.collect()
    # NumPy arrays are weak-referenceable: the Tensor keeps it alive
    assert ref is None or ref() is not None
    for _ in range(3):
        np.ones(1000) * 3          # reuse of freed memory would show here
    assert view.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
    del t
    gc.collect()
    assert view.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
    del view
    gc.collect()
    assert ref is None or ref() is None   # the last view released the array


def test_numpy_view_keeps_the_tensor_alive():
    t = dt.arange(0, 100, 1, dtype=dt.float32)
    ptr = t.data_ptr()
    arr = np.asarray(t)
    assert arr.ctypes.data == ptr
    del t
    gc.collect()
    dt.zeros((100,))               # would land in the freed block
    np.testing.assert_array_equal(arr, np.arange(100, dtype=np.float32))
    arr2 = dt.ones((4, 4)).numpy()   # a temporary Tensor: the array's base holds it
    gc.collect()
    assert (arr2 == 1).all()
    assert isinstance(arr2.base, dt.Tensor)


@pytest.mark.parametrize("np_dtype", [np.int64, np.float32, np.float64])
def test_dlpack_to_numpy_is_zero_copy(np_dtype):
    t = dt.tensor(sample(np_dtype))
    b = np.from_dlpack(t)          # NumPy 1.24: the legacy "dltensor" capsule
    assert b.ctypes.data == t.data_ptr()
    np.testing.assert_array_equal(b, np.asarray(t))
    tt = t.transpose(0, 1)
    bt = np.from_dlpack(tt)
    np.testing.assert_array_equal(bt, np.asarray(t).T)
    assert bt.ctypes.data == tt.data_ptr()
    del t, tt
    gc.collect()
    np.testing.assert_array_equal(bt.T, b)


def test_dlpack_capsules_legacy_and_versioned():
    t = dt.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    legacy = t.__dlpack__()
    assert "dltensor" in repr(legacy) and "versioned" not in repr(legacy)
    versioned = t.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(versioned)
    assert t.__dlpack_device__() == (1, 0)
    for cap in (legacy, versioned):
        u = dt.from_dlpack(cap)
        assert u.data_ptr() == t.data_ptr()
        assert u.tolist() == t.tolist()
        with pytest.raises(dt.Error, match="consumed only once"):
            dt.from_dlpack(cap)
    # an unconsumed capsule frees its tensor when collected
    t.__dlpack__(max_version=(1, 0))
    gc.collect()


def test_from_dlpack_of_numpy_and_torch():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    t = dt.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    del a
    gc.collect()
    assert t.sum().item() == 66
    torch = pytest.importorskip("torch")
    x = torch.arange(10, dtype=torch.float32)[::2]
    u = dt.from_dlpack(x)
    assert u.data_ptr() == x.data_ptr()
    assert u.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    u.mul_(3)
    assert x.tolist() == [0.0, 6.0, 12.0, 18.0, 24.0]
    back = torch.from_dlpack(u)
    assert back.data_ptr() == x.data_ptr()


def test_dlpack_bool_uses_kdlbool():
    t = dt.tensor([True, False])
    torch = pytest.importorskip("torch")
    try:
        b = torch.from_dlpack(t)
    except Exception:      # torch 1.13 predates kDLBool (DLPack 0.8)
        return
    assert b.tolist() == [True, False]
