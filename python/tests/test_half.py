# dtensor.bfloat16 and dtensor.float16 in the Python API: the dtype objects,
# factories, .to(), NumPy (float16 only: NumPy has no bfloat16) and DLPack
# with torch both ways. Their values against torch are in test_half_vs_torch.py.
import numpy as np
import pytest
import torch

import dtensor as dt

HALVES = [(dt.bfloat16, torch.bfloat16, "bfloat16", "bf16"), (dt.float16, torch.float16, "float16", "f16")]


def torch_of(x):
    """A torch view of a dtensor Tensor (DLPack, no copy)."""
    return torch.from_dlpack(x)


@pytest.mark.parametrize("d,td,name,short", HALVES, ids=[h[2] for h in HALVES])
def test_dtype_objects(d, td, name, short):
    assert repr(d) == "dtensor." + name and str(d) == "dtensor." + name
    assert d.name == name and d.itemsize == 2 and d.is_floating_point
    assert d == name and d == short
    assert d != dt.float32 and hash(d) != hash(dt.float32)
    assert dt.zeros((2, 3), dtype=d).dtype == d
    assert dt.ones((2,), dtype=name).dtype == d
    assert dt.full((2,), 1.5, dtype=d).tolist() == [1.5, 1.5]
    assert dt.empty((4,), dtype=short).dtype == d
    x = dt.tensor([1.0, -2.5, 3.0])
    assert x.to(d).dtype == d and x.to(name).dtype == d
    assert x.to(d).to(dt.float32).tolist() == [1.0, -2.5, 3.0]
    assert x.to(d).itemsize == 2 and x.to(d).nbytes == 6
    assert dt.tensor([0.5], dtype=d).dtype == d
    assert x.to(d)[1].item() == -2.5 and isinstance(x.to(d)[1].item(), float)
    assert float(x.to(d)[2]) == 3.0
    assert name in repr(x.to(d))


def test_method_shorthands_and_promotion():
    x = dt.tensor([1.0, 2.0])
    assert x.bfloat16().dtype == dt.bfloat16 and x.half().dtype == dt.float16
    assert (x.bfloat16() + x.half()).dtype == dt.float32      # as torch.promote_types
    assert (x.bfloat16() + x).dtype == dt.float32
    assert (x.bfloat16() + 1.5).dtype == dt.bfloat16          # a Python float keeps the tensor's
    assert (dt.tensor([1, 2]) + x.half()).dtype == dt.float16
    assert dt.float16 == np.float16 and dt.dtype == type(dt.bfloat16)


def test_tensor_from_python_values_rounds_like_torch():
    # A Python float is a double: torch (c10) rounds it to float32 first,
    # then to the 16-bit type; so does dtensor. 1 + 2**-8 + 2**-30 rounds up
    # to bfloat16 only when rounded once from the double.
    vals = [1 + 2**-8 + 2**-30, 1 + 2**-11 + 2**-40, 65519.999, 1e-8, -0.0, 3.0e38]
    for d, td, _, _ in HALVES:
        got = torch_of(dt.tensor(vals, dtype=d)).view(torch.int16)
        want = torch.tensor(vals, dtype=td).view(torch.int16)
        assert torch.equal(got, want), (d, got, want)


def test_float16_numpy_round_trip_shares_memory():
    a = (np.arange(12, dtype=np.float32).reshape(3, 4) / 7).astype(np.float16)
    t = dt.from_numpy(a)
    assert t.dtype == dt.float16 and t.data_ptr() == a.ctypes.data
    back = np.asarray(t)
    assert back.dtype == np.float16 and np.shares_memory(back, a)
    np.testing.assert_array_equal(back, a)
    assert memoryview(t).format == "e"
    assert dt.tensor(a).dtype == dt.float16                    # as torch.tensor(a)
    assert dt.as_tensor(a.T).data_ptr() == a.ctypes.data       # a view
    np.testing.assert_array_equal(np.asarray(dt.from_numpy(a.T) * 2), a.T * 2)


def test_bfloat16_has_no_numpy_array_and_says_what_to_do():
    t = dt.tensor([1.0, 2.0]).to(dt.bfloat16)
    for to_numpy in (np.asarray, lambda x: x.numpy(), lambda x: np.array(x, dtype=np.float32)):
        with pytest.raises(dt.Error, match=r"bfloat16.*\.to\(dtensor\.float32\)"):
            to_numpy(t)
    with pytest.raises(BufferError, match=r"bfloat16.*\.to\(dtensor\.float32\)"):
        memoryview(t)                                          # the buffer protocol's own error
    assert t.tolist() == [1.0, 2.0]                            # exact through float32
    np.testing.assert_array_equal(np.asarray(t.to(dt.float32)), [1.0, 2.0])


@pytest.mark.parametrize("d,td,name,short", HALVES, ids=[h[2] for h in HALVES])
def test_dlpack_with_torch_both_ways_without_copies(d, td, name, short):
    src = torch.linspace(-3, 3, 12).reshape(3, 4).to(td)
    x = dt.from_dlpack(src)
    assert x.dtype == d and x.shape == (3, 4) and x.data_ptr() == src.data_ptr()
    assert torch.equal(torch_of(x.to(dt.float32)), src.float())
    x.fill_(0.25)                                              # shared memory: torch sees it
    assert (src == 0.25).all()
    # dtensor -> torch: the view keeps dtype, strides and memory.
    y = dt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).to(d).t()
    ty = torch_of(y)
    assert ty.dtype == td and ty.shape == (3, 2) and ty.stride() == tuple(y.stride())
    assert ty.data_ptr() == y.data_ptr()
    assert torch.equal(ty.float(), torch.tensor([[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]))
    # A torch tensor given where a Tensor is taken (bfloat16: NumPy cannot
    # read it, so DLPack) keeps its dtype and values.
    z = dt.tensor(src)
    assert z.dtype == d and z.data_ptr() != src.data_ptr()
    assert torch.equal(torch_of(z), src)
    assert (dt.as_tensor(src) + x).dtype == d


def test_dlpack_capsule_codes():
    # kDLBfloat is code 4, kDLFloat 2; both 16 bits. A capsule from torch's
    # to_dlpack is read as the same dtype.
    for td, d in ((torch.bfloat16, dt.bfloat16), (torch.float16, dt.float16)):
        cap = torch.utils.dlpack.to_dlpack(torch.ones(3, dtype=td))
        assert dt.from_dlpack(cap).dtype == d


@pytest.mark.parametrize("d,td,name,short", HALVES, ids=[h[2] for h in HALVES])
def test_dtensor_layouts_keep_the_bits(d, td, name, short):
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    g = torch.Generator().manual_seed(3)
    t = (torch.randn(6, 5, generator=g) * 100).to(td)
    for placements in ([dt.Shard(0)], [dt.Shard(1)], [dt.Replicate()]):
        x = dt.distribute_tensor(t, mesh, placements)
        assert x.dtype == d
        assert torch.equal(torch_of(x.full_tensor()).view(torch.int16), t.view(torch.int16))
    # Partial(sum) -> Replicate folds in float32 and rounds once: torch's a + b.
    u = (torch.randn(6, 5, generator=g) * 100).to(td)
    p = dt.DTensor.from_local({0: dt.tensor(t), 1: dt.tensor(u)}, mesh, [dt.Partial()])
    r = p.redistribute(placements=[dt.Replicate()]).full_tensor()
    assert r.dtype == d
    assert torch.equal(torch_of(r).view(torch.int16), (t + u).view(torch.int16))


def test_autocast_casts_by_pytorchs_cpu_lists():
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    x = dt.distribute_tensor(dt.randn((4, 6), seed=1), mesh, [dt.Shard(0)])
    w = dt.distribute_tensor(dt.randn((5, 6), seed=2), mesh, [dt.Replicate()])
    x.requires_grad_()
    w.requires_grad_()
    assert dt.get_autocast_dtype() is None
    with dt.autocast("cpu", dtype=dt.bfloat16):
        assert dt.get_autocast_dtype() == dt.bfloat16
        y = dt.linear(x, w)
        assert y.dtype == dt.bfloat16
        assert dt.softmax(y, 1).dtype == dt.bfloat16  # torch's CPU list: not float32
        target = dt.distribute_tensor(dt.zeros((4,), dtype=dt.int64), mesh, [dt.Shard(0)])
        assert dt.cross_entropy(y, target).dtype == dt.float32
        with dt.autocast("cpu", enabled=False):
            assert dt.linear(x, w).dtype == dt.float32
        loss = y.to(dt.float32).sum()
    assert dt.get_autocast_dtype() is None
    loss.backward()
    assert x.grad.dtype == dt.float32 and w.grad.dtype == dt.float32

    @dt.autocast("cpu", dtype=dt.float16)
    def product(a, b):
        return a @ b

    assert product(x, w.t()).dtype == dt.float16

    # Against torch 1.13's own CPU autocast: the same dtypes, and the bf16
    # linear within two bfloat16 steps (both accumulate in float32; the
    # order of the sums differs).
    tx = torch_of(x.full_tensor()).clone()
    tw = torch_of(w.full_tensor()).clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty = torch.nn.functional.linear(tx, tw)
        assert torch.softmax(ty, 1).dtype == torch.bfloat16
        assert torch.nn.functional.cross_entropy(ty, torch.zeros(4, dtype=torch.int64)).dtype \
            == torch.float32
    with dt.autocast("cpu", dtype=dt.bfloat16):
        y = dt.linear(x, w)
    assert ty.dtype == torch.bfloat16
    got = torch_of(y.full_tensor().to(dt.float32))
    want = ty.float()
    assert torch.all((got - want).abs() <= 2 * 2.0 ** -8 * want.abs() + 1e-6)
    with pytest.raises(dt.Error, match="device_type must be 'cpu'"):
        dt.autocast("cuda")
    with pytest.raises(dt.Error, match="bfloat16 or dtensor.float16"):
        dt.autocast("cpu", dtype=dt.float32)
