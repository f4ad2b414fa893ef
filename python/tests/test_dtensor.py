# DTensors from Python: random layouts on meshes of 1-3 dims with uneven
# shards, compared with the same computation in NumPy.
import gc
import itertools

import numpy as np
import pytest

import dtensor as dt

MESHES = [((4,), ("x",)), ((3,), ("x",)), ((2, 2), ("dp", "tp")), ((2, 3), ("dp", "tp")),
          ((2, 2, 2), ("dp", "cp", "tp"))]


def random_placements(rng, mesh_ndim, tensor_ndim, partial=False):
    choices = [dt.Replicate()] + [dt.Shard(d) for d in range(tensor_ndim)]
    if partial:
        choices.append(dt.Partial())
    return [choices[rng.integers(len(choices))] for _ in range(mesh_ndim)]


def cases(n):
    rng = np.random.default_rng(42)
    for i in range(n):
        shape, names = MESHES[i % len(MESHES)]
        tshape = tuple(int(s) for s in rng.integers(1, 8, size=2))  # uneven, sometimes empty shards
        yield shape, names, tshape, random_placements(rng, len(shape), 2), random_placements(rng, len(shape), 2)


@pytest.mark.parametrize("mesh_shape,names,tshape,src,dst", list(cases(30)))
def test_distribute_redistribute_full_tensor(mesh_shape, names, tshape, src, dst):
    mesh = dt.init_device_mesh(mesh_shape, mesh_dim_names=names)
    a = np.random.default_rng(7).standard_normal(tshape).astype(np.float32)
    d = dt.distribute_tensor(a, mesh, src)
    assert d.placements == tuple(src)
    assert d.shape == tshape and d.dtype == dt.float32
    np.testing.assert_array_equal(np.asarray(d.full_tensor()), a)
    # each rank's shard is the part the spec gives it
    for rank, shard in d.local_shards().items():
        off, shp = d.spec.global_offset(rank), d.spec.local_shape(rank)
        assert shard.shape == shp
        idx = tuple(slice(o, o + s) if s else slice(0, 0) for o, s in zip(off, shp))
        np.testing.assert_array_equal(np.asarray(shard), a[idx])
    r = d.redistribute(dst)
    assert r.placements == tuple(dst)
    np.testing.assert_array_equal(np.asarray(r.full_tensor()), a)
    # arithmetic keeps the value
    b = np.random.default_rng(8).standard_normal(tshape).astype(np.float32)
    e = dt.distribute_tensor(b, mesh, dst)
    np.testing.assert_allclose(np.asarray(((d + e) * 2 - d / 4).full_tensor()),
                               (a + b) * 2 - a / 4, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(dt.sum(d, dim=1).full_tensor()), a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(d.mean().full_tensor()), a.mean(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_ops_against_numpy(seed):
    rng = np.random.default_rng(seed)
    shape, names = MESHES[seed % len(MESHES)]
    mesh = dt.init_device_mesh(shape, mesh_dim_names=names)
    n, k, m = (int(v) for v in rng.integers(2, 9, size=3))
    a = rng.standard_normal((n, k))
    b = rng.standard_normal((k, m))
    da = dt.distribute_tensor(a, mesh, random_placements(rng, len(shape), 2))
    db = dt.distribute_tensor(b, mesh, random_placements(rng, len(shape), 2))
    assert da.dtype == dt.float64
    np.testing.assert_allclose(np.asarray((da @ db).full_tensor()), a @ b, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(dt.mm(da, db).full_tensor()), a @ b, rtol=1e-10)
    sm = np.exp(a - a.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(dt.softmax(da, -1).full_tensor()), sm, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(dt.relu(-da).full_tensor()), np.maximum(-a, 0))
    np.testing.assert_allclose(np.asarray(da.amax(dim=0).full_tensor()), a.max(0))
    np.testing.assert_array_equal(np.asarray((da > 0).full_tensor()), a > 0)
    np.testing.assert_allclose(np.asarray(da.t().full_tensor()), a.T)
    np.testing.assert_allclose(np.asarray((2.0 - da).full_tensor()), 2.0 - a)
    np.testing.assert_allclose(np.asarray(dt.exp(da).full_tensor()), np.exp(a), rtol=1e-12)
    # in place keeps the placements
    before = da.placements
    da += 1
    da *= 2
    assert da.placements == before
    np.testing.assert_allclose(np.asarray(da.full_tensor()), (a + 1) * 2)


def test_partial_and_reductions_of_uneven_shards():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    a = np.arange(35, dtype=np.float64).reshape(5, 7)
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    s = dt.sum(d, dim=1)
    assert s.placements == (dt.Shard(0), dt.Partial("sum"))
    np.testing.assert_array_equal(np.asarray(s.full_tensor()), a.sum(1))
    r = s.redistribute([dt.Replicate(), dt.Replicate()])
    np.testing.assert_array_equal(np.asarray(r.to_local(rank=3)), a.sum(1))
    p = dt.distribute_tensor(a, mesh, [dt.Partial("max"), dt.Replicate()])
    np.testing.assert_array_equal(np.asarray(p.full_tensor()), a)


def test_placements_repr_eq_and_text():
    assert dt.Shard(1) == dt.Shard(1) and dt.Shard(1) != dt.Shard(0)
    assert dt.Replicate() == dt.Replicate() and dt.Replicate() != dt.Partial()
    assert dt.Partial() == dt.Partial("sum") and dt.Partial("avg") != dt.Partial("sum")
    assert repr(dt.Shard(0)) == "Shard(dim=0)"
    assert repr(dt.Replicate()) == "Replicate()"
    assert repr(dt.Partial("avg")) == "Partial(avg)"
    assert str(dt.Shard(2)) == "S(2)" and str(dt.Partial()) == "P(sum)"
    assert isinstance(dt.Shard(0), dt.Placement) and dt.Shard(0).dim == 0
    assert dt.Partial("min").reduce_op == "min"
    assert len({dt.Shard(0), dt.Shard(0), dt.Replicate()}) == 2
    assert dt.parse_placements("S(0),R,P(avg)") == (dt.Shard(0), dt.Replicate(), dt.Partial("avg"))
    with pytest.raises(dt.Error, match="unknown reduce_op \"prod\""):
        dt.Partial("prod")
    mesh = dt.init_device_mesh((2,))
    d = dt.distribute_tensor(np.ones((4, 2)), mesh, "S(1)")  # the text form works as placements
    assert d.placements == (dt.Shard(1),)
    assert type(d.placements[0]) is dt.Shard


def test_mesh():
    mesh = dt.init_device_mesh((2, 3), mesh_dim_names=("dp", "tp"))
    assert mesh.shape == (2, 3) and mesh.ndim == 2 and mesh.size() == 6
    assert mesh.mesh_dim_names == ("dp", "tp")
    assert mesh.size("tp") == 3 and mesh.size(0) == 2
    tp = mesh["tp"]
    assert tp.shape == (3,) and tp.mesh_dim_names == ("tp",)
    assert tp.ranks() == [0, 1, 2] and tp.ranks(4) == [3, 4, 5]
    assert mesh["dp"].ranks(4) == [1, 4]
    assert mesh.groups(0) == [[0, 3], [1, 4], [2, 5]]
    flat = mesh.flatten(["dp", "tp"])
    assert flat.shape == (6,) and flat.mesh_dim_names == ("dp_tp",)
    assert mesh.world.size == 6 and mesh.world.is_simulated
    assert mesh.world.held_ranks == list(range(6))
    assert dt.DeviceMesh(dt.World.simulated(4), (4,)).mesh_dim_names is None
    with pytest.raises(dt.Error, match="pp"):
        mesh["pp"]
    with pytest.raises(dt.Error, match="needs 4 ranks but the world has 6"):
        dt.init_device_mesh((2, 2), world=dt.World.simulated(6))
    assert dt.init_device_mesh("cpu", (2,)).shape == (2,)   # PyTorch's spelling
    pt = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert pt.shape == (2, 2) and pt.mesh_dim_names == ("dp", "tp")
    assert dt.init_device_mesh((2, 3), ("a", "b")).mesh_dim_names == ("a", "b")
    with pytest.raises(TypeError, match="mesh_dim_names given twice"):
        dt.init_device_mesh((2, 2), ("a", "b"), mesh_dim_names=("c", "d"))
    with pytest.raises(dt.Error, match="CPU only"):
        dt.init_device_mesh("cuda", (2,))
    assert "DeviceMesh" in repr(mesh)


def test_to_local_and_local_shards_share_memory():
    mesh = dt.init_device_mesh((4,))
    a = np.arange(8, dtype=np.float32).reshape(4, 2)
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0)])
    shards = d.local_shards()
    assert {r: t.tolist() for r, t in d.to_local().by_rank.items()} == {
        r: t.tolist() for r, t in shards.items()}
    assert sorted(shards) == [0, 1, 2, 3]
    s2 = d.to_local(rank=2)
    assert s2.tolist() == [[4.0, 5.0]]
    assert s2.data_ptr() == shards[2].data_ptr()
    np.asarray(s2)[0, 0] = -1       # writes through to the DTensor
    assert d.full_tensor().tolist()[2][0] == -1
    # the shards outlive the DTensor
    del d
    gc.collect()
    assert shards[3].tolist() == [[6.0, 7.0]]


def test_from_local_forms():
    mesh = dt.init_device_mesh((2,))
    parts = {0: np.array([[1.0, 2.0], [3.0, 4.0]]), 1: np.array([[5.0, 6.0]])}  # chunks of ceil(3/2)
    d = dt.DTensor.from_local(parts, mesh, [dt.Shard(0)], shape=(3, 2))
    assert d.shape == (3, 2)
    assert d.full_tensor().tolist() == [[1, 2], [3, 4], [5, 6]]
    # no copy: the shard of rank 0 is the array's memory
    assert d.to_local(rank=0).data_ptr() == parts[0].ctypes.data
    e = dt.DTensor.from_local([np.ones((1, 2)), np.zeros((1, 2))], mesh, [dt.Shard(0)])
    assert e.full_tensor().tolist() == [[1, 1], [0, 0]]
    f = dt.DTensor.from_local(lambda r: dt.full((2,), float(r + 1), dtype=dt.float64), mesh,
                              [dt.Partial()])
    assert f.full_tensor().tolist() == [3.0, 3.0]
    g = dt.DTensor.from_local(np.ones(3), mesh, [dt.Replicate()])
    assert g.to_local(rank=0).data_ptr() != g.to_local(rank=1).data_ptr()
    with pytest.raises(dt.Error):
        dt.DTensor.from_local({0: np.ones((1, 2)), 1: np.ones((2, 2))}, mesh, [dt.Shard(0)])


def test_errors_carry_the_cpp_message():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    d = dt.distribute_tensor(np.ones((4, 3)), mesh, [dt.Shard(0), dt.Replicate()])
    e = dt.distribute_tensor(np.ones((5, 2)), mesh, [dt.Replicate(), dt.Replicate()])
    with pytest.raises(dt.Error, match=r"\[4, 3\].*\[5, 2\]") as info:
        d @ e
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(dt.Error, match="expected placements for a 2-d mesh|placements"):
        d.redistribute([dt.Replicate()])
    with pytest.raises(dt.Error, match="P"):
        d.redistribute([dt.Partial(), dt.Replicate()])  # S -> P is refused
    with pytest.raises(dt.Error, match="must be >= 1"):
        dt.World.simulated(0)
    with pytest.raises(TypeError):
        dt.distribute_tensor(np.ones(2), "not a mesh", [dt.Replicate()])


def test_factories_and_random_are_layout_invariant():
    mesh = dt.init_device_mesh((2, 2))
    z = dt.zeros((3, 5), device_mesh=mesh, placements=[dt.Shard(0), dt.Shard(1)])
    assert isinstance(z, dt.DTensor) and z.full_tensor().tolist() == np.zeros((3, 5)).tolist()
    assert isinstance(dt.ones((2,)), dt.Tensor)
    x1 = dt.randn((6, 4), seed=3, device_mesh=mesh, placements=[dt.Shard(0), dt.Replicate()])
    x2 = dt.randn((6, 4), seed=3, device_mesh=mesh, placements=[dt.Replicate(), dt.Shard(1)])
    np.testing.assert_array_equal(np.asarray(x1.full_tensor()), np.asarray(x2.full_tensor()))
    np.testing.assert_array_equal(np.asarray(x1.full_tensor()), np.asarray(dt.randn((6, 4), seed=3)))
    f = dt.full((2, 2), 7, device_mesh=mesh, placements="R,R")
    assert f.dtype == dt.int64 and f.full_tensor().tolist() == [[7, 7], [7, 7]]


def test_implicit_replication():
    mesh = dt.init_device_mesh((2,))
    d = dt.distribute_tensor(np.ones((2, 3)), mesh, [dt.Shard(0)])
    t = dt.tensor(np.arange(3.0))
    with pytest.raises(dt.Error):
        d + t
    with dt.implicit_replication():
        assert dt.implicit_replication_enabled()
        np.testing.assert_array_equal(np.asarray((d + t).full_tensor()), 1 + np.arange(3.0)[None, :].repeat(2, 0))
    assert not dt.implicit_replication_enabled()
