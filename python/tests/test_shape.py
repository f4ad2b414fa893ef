# The shape family from Python: repeat, tile, unbind, split with sizes, pad,
# new_* / empty_like and einsum, on Tensors and DTensors, against NumPy.
import numpy as np
import pytest

import dtensor as dt


def test_repeat_tile_unbind_split_on_tensors():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = dt.from_numpy(a)
    np.testing.assert_array_equal(np.asarray(x.repeat(2, 1, 2)), np.tile(a, (2, 1, 2)))
    np.testing.assert_array_equal(np.asarray(dt.repeat(x, [1, 2])), np.tile(a, (1, 2)))
    np.testing.assert_array_equal(np.asarray(dt.tile(x, [2])), np.tile(a, 2))
    cols = dt.unbind(x, dim=1)
    assert len(cols) == 3
    np.testing.assert_array_equal(np.asarray(cols[2]), a[:, 2])
    parts = dt.split(x, [1, 2], dim=1)
    np.testing.assert_array_equal(np.asarray(parts[1]), a[:, 1:])
    assert len(x.split([2, 0], 0)) == 2
    with pytest.raises(Exception, match="can not be smaller"):
        x.repeat(2)


def test_pad_modes_match_numpy():
    a = np.arange(12, dtype=np.float64).reshape(1, 3, 4)
    x = dt.from_numpy(a)
    np.testing.assert_array_equal(np.asarray(dt.pad(x, [1, 2], value=9.0)),
                                  np.pad(a, ((0, 0), (0, 0), (1, 2)), constant_values=9.0))
    np.testing.assert_array_equal(np.asarray(dt.pad(x, (2, 1, 1, 1), mode="reflect")),
                                  np.pad(a, ((0, 0), (1, 1), (2, 1)), mode="reflect"))
    np.testing.assert_array_equal(np.asarray(dt.pad(x, (2, 1, 1, 1), mode="replicate")),
                                  np.pad(a, ((0, 0), (1, 1), (2, 1)), mode="edge"))
    np.testing.assert_array_equal(np.asarray(dt.pad(x, [-1, 0])), a[:, :, 1:])
    with pytest.raises(Exception, match="doesn't take in value"):
        dt.pad(x, [1, 1], mode="reflect", value=0.0)


def test_new_factories():
    x = dt.from_numpy(np.ones(3, dtype=np.float64))
    z = x.new_zeros((2, 2))
    assert z.dtype == dt.float64 and z.shape == (2, 2)
    assert x.new_ones([3], dtype=dt.int64).dtype == dt.int64
    np.testing.assert_array_equal(np.asarray(x.new_full((2,), 1.5)), [1.5, 1.5])
    assert x.new_empty((0, 4)).shape == (0, 4)
    assert dt.empty_like(x).shape == (3,)


def test_einsum_on_tensors():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4))
    b = rng.standard_normal((2, 4, 5))
    got = dt.einsum("bij,bjk->bik", dt.from_numpy(a), dt.from_numpy(b))
    np.testing.assert_allclose(np.asarray(got), np.einsum("bij,bjk->bik", a, b), rtol=1e-12)
    got = dt.einsum("...ij,...jk", [dt.from_numpy(a), dt.from_numpy(b)])
    np.testing.assert_allclose(np.asarray(got), np.einsum("...ij,...jk", a, b), rtol=1e-12)
    with pytest.raises(Exception, match="diagonal"):
        dt.einsum("ii->i", dt.from_numpy(np.eye(2)))


def test_dtensor_shape_ops_keep_layouts():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    a = np.arange(48, dtype=np.float32).reshape(4, 3, 4)
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()])
    with dt.CommDebugMode() as comm:
        r = d.repeat(1, 2, 1)
        p = dt.pad(d, [1, 1])
        e = d.new_zeros((5,))
        same = d.new_full((4, 3, 4), 2.0)
    assert comm.get_total_counts() == 0
    assert same.placements == (dt.Shard(0), dt.Replicate())  # x's own shape: x's shards
    np.testing.assert_array_equal(np.asarray(same.full_tensor()), np.full((4, 3, 4), 2.0))
    assert r.placements == (dt.Shard(0), dt.Replicate())
    assert p.placements == (dt.Shard(0), dt.Replicate())
    assert e.placements == (dt.Replicate(), dt.Replicate())
    np.testing.assert_array_equal(np.asarray(r.full_tensor()), np.tile(a, (1, 2, 1)))
    np.testing.assert_array_equal(np.asarray(p.full_tensor()),
                                  np.pad(a, ((0, 0), (0, 0), (1, 1))))
    pieces = dt.split(d, [1, 3], dim=0)
    np.testing.assert_array_equal(np.asarray(pieces[1].full_tensor()), a[1:])
    assert len(d.unbind(2)) == 4
    # einsum: batch sharded stays sharded; a contracted dim sharded on both is Partial(sum).
    w = np.arange(20, dtype=np.float32).reshape(4, 5)
    dw = dt.distribute_tensor(w, mesh, [dt.Replicate(), dt.Shard(0)])
    dx = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(2)])
    with dt.CommDebugMode() as comm:
        out = dt.einsum("bij,jk->bik", dx, dw)
    assert comm.get_total_counts() == 0
    assert out.placements == (dt.Shard(0), dt.Partial("sum"))
    np.testing.assert_allclose(np.asarray(out.full_tensor()), np.einsum("bij,jk->bik", a, w))
