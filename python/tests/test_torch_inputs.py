# Real PyTorch tensors into dtensor (Debian's python3-torch, PyTorch 1.13,
# installed by scripts/install-deps): every entry point keeps a torch
# tensor's dtype, shape and values, 0-d included, as torch.tensor(t) does.
# test_conversion.py covers the same rules with stand-in objects; this file
# is the witness that a real torch tensor takes the same path.
import numpy as np
import pytest
import torch

import dtensor as dt

MESH = dt.DeviceMesh(dt.World.simulated(2), (2,))

ENTRY_POINTS = [
    ("tensor", dt.tensor),
    ("as_tensor", dt.as_tensor),
    ("distribute_tensor", lambda x: dt.distribute_tensor(x, MESH, [dt.Replicate()])),
    ("from_local", lambda x: dt.DTensor.from_local({0: x, 1: x}, MESH, [dt.Replicate()])),
    ("from_local_callable", lambda x: dt.DTensor.from_local(lambda rank: x, MESH, [dt.Replicate()])),
]

# (id, torch tensor, dtensor dtype). 0.1 is not a float32: a detour shows.
TENSORS = [
    ("float64", torch.tensor([[0.1, -2.5, 3.0], [4.0, 5.5, -6.0]], dtype=torch.float64), dt.float64),
    ("float64_0d", torch.tensor(0.1, dtype=torch.float64), dt.float64),
    ("float64_transposed", torch.arange(6, dtype=torch.float64).reshape(2, 3).t() / 10, dt.float64),
    ("float32", torch.tensor([0.1, 2.0]), dt.float32),
    ("float32_0d", torch.tensor(1.5), dt.float32),
    ("int64", torch.tensor([[1, -2], [3, 2**40]]), dt.int64),
    ("int64_0d", torch.tensor(7), dt.int64),
    ("bool", torch.tensor([True, False, True]), dt.bool),
]


def whole(x):
    return np.asarray(x.full_tensor() if isinstance(x, dt.DTensor) else x)


@pytest.mark.parametrize("entry", [e[1] for e in ENTRY_POINTS], ids=[e[0] for e in ENTRY_POINTS])
@pytest.mark.parametrize("t,dtype", [x[1:] for x in TENSORS], ids=[x[0] for x in TENSORS])
def test_a_torch_tensor_keeps_dtype_shape_and_bits(entry, t, dtype):
    out = entry(t)
    assert out.dtype == dtype
    assert tuple(out.shape) == tuple(t.shape)
    got = whole(out)
    assert got.shape == tuple(t.shape)
    np.testing.assert_array_equal(got, t.numpy())
    assert got.dtype == t.numpy().dtype


def test_sharded_float64_round_trips_through_torch():
    t = torch.linspace(0, 1, 12, dtype=torch.float64).reshape(4, 3)
    d = dt.distribute_tensor(t, MESH, [dt.Shard(0)])
    back = torch.from_numpy(np.asarray(d.full_tensor()))
    assert back.dtype == torch.float64
    assert torch.equal(back, t)
