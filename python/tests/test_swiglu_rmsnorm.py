# The pieces of a Llama block from Python: silu (SwiGLU's gate) on Tensors
# and DTensors against PyTorch, values and gradient, and nn.RMSNorm against
# its formula, sequence-parallel like LayerNorm.
import numpy as np
import torch

import dtensor as dt
import dtensor.nn as nn


def full(d):
    return np.asarray(d.full_tensor())


def test_silu_matches_torch(rng):
    a = rng.standard_normal((5, 7)) * 4
    np.testing.assert_allclose(np.asarray(dt.silu(dt.tensor(a))),
                               torch.nn.functional.silu(torch.tensor(a)).numpy(), rtol=1e-14)
    assert np.asarray(dt.tensor(a).silu()).shape == (5, 7)


def test_silu_gradient_on_shards_matches_torch(rng):
    a = rng.standard_normal((4, 6)) * 3
    mesh = dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["dp", "tp"])
    x = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)]).requires_grad_()
    y = dt.silu(x)
    assert y.placements == (dt.Shard(0), dt.Shard(1))  # pointwise: no communication
    dt.sum(y * y).backward()
    t = torch.tensor(a, requires_grad=True)
    (torch.nn.functional.silu(t) ** 2).sum().backward()
    np.testing.assert_allclose(full(y), torch.nn.functional.silu(t).detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(full(x.grad), t.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_rmsnorm_module_is_the_formula(rng):
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,), ["tp"])
    w = 1 + 0.1 * rng.standard_normal(6)
    a = rng.standard_normal((3, 4, 6))
    norm = nn.RMSNorm(mesh, dt.tensor(w), eps=1e-5)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    got = full(norm(dt.distribute_tensor(a, mesh, [dt.Shard(1)])))
    want = a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(got, want, rtol=1e-12)
    ones = nn.RMSNorm(mesh, 6)
    np.testing.assert_array_equal(full(ones.weight), np.ones(6, dtype=np.float32))
