# Adagrad and RMSprop step by step against PyTorch 1.13's torch.optim on the
# full tensors (its single-tensor path), on random layouts of 1- to 3-d
# meshes with uneven and empty shards, in float64 and float32.
import numpy as np
import pytest
import torch

import dtensor as dt
from dtensor.optim import Adagrad, RMSprop

LAYOUTS = [
    ((4,), [dt.Shard(0)]),
    ((4,), [dt.Replicate()]),
    ((2, 2), [dt.Shard(1), dt.Shard(0)]),
    ((2, 3), [dt.Replicate(), dt.Shard(0)]),
    ((2, 2, 2), [dt.Shard(0), dt.Replicate(), dt.Shard(1)]),
]
SHAPES = [(5, 3), (3, 7), (1, 2)]  # uneven; (1, 2) leaves shards empty

CONFIGS = [
    (Adagrad, torch.optim.Adagrad, {}),
    (Adagrad, torch.optim.Adagrad,
     dict(lr=0.05, lr_decay=0.1, weight_decay=0.01, initial_accumulator_value=0.3, eps=1e-6)),
    (Adagrad, torch.optim.Adagrad, dict(lr=0.02, maximize=True)),
    (RMSprop, torch.optim.RMSprop, {}),
    (RMSprop, torch.optim.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.02)),
    (RMSprop, torch.optim.RMSprop, dict(lr=0.01, momentum=0.9, centered=True)),
    (RMSprop, torch.optim.RMSprop, dict(lr=0.003, momentum=0.5, maximize=True)),
]


@pytest.mark.parametrize("ours,theirs,kwargs", CONFIGS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_steps_match_torch(rng, ours, theirs, kwargs, dtype):
    np_dtype = np.float64 if dtype == "float64" else np.float32
    # float64: the same operations in the same order, so only libm's sqrt
    # (correctly rounded) could differ; float32 likewise, with a looser bound
    # for torch's vectorized CPU path.
    rtol, atol = (1e-12, 1e-14) if dtype == "float64" else (1e-5, 1e-6)
    for case, (mesh_shape, placements) in enumerate(LAYOUTS):
        shape = SHAPES[case % len(SHAPES)]
        world = dt.World.simulated(int(np.prod(mesh_shape)))
        mesh = dt.DeviceMesh(world, mesh_shape)
        placements = [p if not isinstance(p, dt.Shard) or p.dim < len(shape) else dt.Replicate()
                      for p in placements]
        p0 = rng.standard_normal(shape).astype(np_dtype)
        p = dt.distribute_tensor(p0, mesh, placements).requires_grad_()
        ref = torch.tensor(p0, requires_grad=True)
        opt = ours([p], **kwargs)
        topt = theirs([ref], foreach=False, **kwargs)
        for _ in range(4):
            g = rng.standard_normal(shape).astype(np_dtype)
            p.grad = dt.distribute_tensor(g, mesh, placements)
            ref.grad = torch.tensor(g)
            opt.step()
            topt.step()
            np.testing.assert_allclose(np.asarray(p.full_tensor()), ref.detach().numpy(),
                                       rtol=rtol, atol=atol,
                                       err_msg=f"{ours.__name__} {kwargs} {mesh_shape} {placements}")
        state = opt.state(0)
        tstate = topt.state[ref]
        assert state["step"] == 4
        for name in opt.buffer_names:
            assert state[name].placements == p.placements
            np.testing.assert_allclose(np.asarray(state[name].full_tensor()),
                                       tstate[name].numpy(), rtol=rtol, atol=atol)


def test_bad_arguments_are_errors():
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    p = dt.distribute_tensor(np.ones(4), mesh, [dt.Shard(0)]).requires_grad_()
    with pytest.raises(dt.Error, match="lr_decay"):
        Adagrad([p], lr_decay=-1.0)
    with pytest.raises(dt.Error, match="initial_accumulator_value"):
        Adagrad([p], initial_accumulator_value=-0.5)
    with pytest.raises(dt.Error, match="alpha"):
        RMSprop([p], alpha=-0.1)
    with pytest.raises(dt.Error, match="momentum"):
        RMSprop([p], momentum=-1.0)
    assert RMSprop([p], momentum=0.9, centered=True).buffer_names == [
        "square_avg", "momentum_buffer", "grad_avg"]
