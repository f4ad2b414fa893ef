# Adagrad, RMSprop, Adadelta, Adamax, NAdam and RAdam step by step against
# PyTorch 1.13's torch.optim on the full tensors (its single-tensor path;
# NAdam's foreach path, see below), on random layouts of 1- to 3-d meshes
# with uneven and empty shards, in float64 and float32.
import numpy as np
import pytest
import torch

import dtensor as dt
from dtensor.optim import Adadelta, Adagrad, Adamax, NAdam, RAdam, RMSprop

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
    (Adadelta, torch.optim.Adadelta, {}),
    (Adadelta, torch.optim.Adadelta, dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.02)),
    (Adadelta, torch.optim.Adadelta, dict(maximize=True)),
    (Adamax, torch.optim.Adamax, {}),
    (Adamax, torch.optim.Adamax, dict(lr=0.01, betas=(0.5, 0.8), weight_decay=0.05)),
    (Adamax, torch.optim.Adamax, dict(eps=0.3, maximize=True)),
    (NAdam, torch.optim.NAdam, {}),
    (NAdam, torch.optim.NAdam, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.05,
                                    momentum_decay=0.1)),
    (RAdam, torch.optim.RAdam, {}),
    (RAdam, torch.optim.RAdam, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.05)),
]
# Seven steps: RAdam's rectified update starts at step 6.
STEPS = 7


@pytest.fixture
def float64_scalars():
    # NAdam keeps its momentum product, and every optimizer its step, as a
    # tensor of the default dtype: float64 makes them the Python floats
    # dtensor computes with.
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize("ours,theirs,kwargs", CONFIGS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_steps_match_torch(rng, float64_scalars, ours, theirs, kwargs, dtype):
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
        assert ref.dtype == (torch.float64 if dtype == "float64" else torch.float32)
        opt = ours([p], **kwargs)
        # 1.13's single-tensor NAdam multiplies mu_t into the product twice
        # (fixed in PyTorch 2.0); its foreach path has PyTorch 2's rule.
        topt = theirs([ref], foreach=ours is NAdam, **kwargs)
        for _ in range(STEPS):
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
        assert state["step"] == STEPS
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
    with pytest.raises(dt.Error, match="rho"):
        Adadelta([p], rho=1.5)
    with pytest.raises(dt.Error, match="betas.first"):
        Adamax([p], betas=(1.0, 0.9))
    with pytest.raises(dt.Error, match="momentum_decay"):
        NAdam([p], momentum_decay=-0.1)
    with pytest.raises(dt.Error, match="betas.second"):
        RAdam([p], betas=(0.9, -0.1))
    assert Adadelta([p]).buffer_names == ["square_avg", "acc_delta"]
    assert Adamax([p]).buffer_names == ["exp_avg", "exp_inf"]


def test_nadam_momentum_product_is_pytorchs():
    # PyTorch 2's mu_product after t steps: the product of
    # beta1 * (1 - 0.5 * 0.96 ** (k * momentum_decay)) for k = 1..t.
    mesh = dt.DeviceMesh(dt.World.simulated(1), (1,))
    p = dt.distribute_tensor(np.ones(2), mesh, [dt.Replicate()]).requires_grad_()
    opt = NAdam([p], betas=(0.8, 0.9), momentum_decay=0.1)
    want = 1.0
    for k in range(1, 6):
        want *= 0.8 * (1.0 - 0.5 * 0.96 ** (k * 0.1))
        assert opt.mu_product(k) == want


# ---- zero_grad(set_to_none=False), clip_grad_norm_'s result, clip_grad_value_ ----

def same_storage(a, b):
    sa, sb = a.local_shards(), b.local_shards()
    return sa.keys() == sb.keys() and all(sa[r].data_ptr() == sb[r].data_ptr() for r in sa)


def grads_from(rng, layout_shape, placements, shape):
    mesh = dt.init_device_mesh(layout_shape)
    w = rng.standard_normal(shape)
    g = rng.standard_normal(shape) * 3
    p = dt.distribute_tensor(w, mesh, placements).requires_grad_()
    p.grad = dt.distribute_tensor(g, mesh, placements)
    t = torch.tensor(w, requires_grad=True)
    t.grad = torch.tensor(g)
    return p, t


@pytest.mark.parametrize("mesh_shape,placements", LAYOUTS)
def test_zero_grad_keeping_the_gradients_vs_torch(rng, mesh_shape, placements):
    p, t = grads_from(rng, mesh_shape, placements, (5, 3))
    opt = dt.optim.SGD([p], lr=0.1, momentum=0.9)
    topt = torch.optim.SGD([t], lr=0.1, momentum=0.9)
    grad = p.grad
    for _ in range(3):
        opt.step()
        topt.step()
        opt.zero_grad(set_to_none=False)
        topt.zero_grad(set_to_none=False)
        assert p.grad is not None and p.grad.placements == grad.placements
        np.testing.assert_array_equal(np.asarray(p.grad.full_tensor()), t.grad.numpy())
        assert same_storage(p.grad, grad)  # zeroed in place, the same storage
        g = rng.standard_normal((5, 3))
        p.grad.add_(dt.distribute_tensor(g, p.device_mesh, p.placements))
        t.grad.add_(torch.tensor(g))
    np.testing.assert_allclose(np.asarray(p.full_tensor()), t.detach().numpy(), rtol=1e-12)
    opt.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize("mesh_shape,placements", LAYOUTS)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_result_vs_torch(rng, mesh_shape, placements, norm_type):
    p, t = grads_from(rng, mesh_shape, placements, (5, 3))
    total = dt.nn.utils.clip_grad_norm_([p], 1.0, norm_type=norm_type, foreach=None)
    expected = torch.nn.utils.clip_grad_norm_([t], 1.0, norm_type=norm_type)
    assert isinstance(total, dt.Tensor) and total.shape == ()
    assert float(total) == pytest.approx(float(expected), rel=1e-12)
    assert total.item() == float(total)
    np.testing.assert_allclose(np.asarray(p.grad.full_tensor()), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("mesh_shape,placements", LAYOUTS)
def test_clip_grad_value_vs_torch(rng, mesh_shape, placements):
    p, t = grads_from(rng, mesh_shape, placements, (5, 3))
    grad = p.grad
    dt.nn.utils.clip_grad_value_([p], 2.0)
    torch.nn.utils.clip_grad_value_([t], 2.0)
    np.testing.assert_array_equal(np.asarray(p.grad.full_tensor()), t.grad.numpy())
    assert same_storage(p.grad, grad)  # clamped in place


def test_clip_grad_value_of_a_partial_gradient_vs_torch(rng):
    # A replicated weight used on batch-sharded input: its gradient is
    # Partial(sum); clamping each rank's piece would be wrong.
    mesh = dt.init_device_mesh((4,))
    w_np, x_np = rng.standard_normal((3, 2)), rng.standard_normal((8, 3)) * 4
    w = dt.distribute_tensor(w_np, mesh, [dt.Replicate()]).requires_grad_()
    x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0)])
    (x @ w).sum().backward()
    assert w.grad.placements == (dt.Partial(),)
    tw = torch.tensor(w_np, requires_grad=True)
    (torch.tensor(x_np) @ tw).sum().backward()
    dt.nn.utils.clip_grad_value_([w], 1.5)
    torch.nn.utils.clip_grad_value_([tw], 1.5)
    assert w.grad.placements == (dt.Replicate(),)
    np.testing.assert_array_equal(np.asarray(w.grad.full_tensor()), tw.grad.numpy())
    assert np.abs(tw.grad.numpy()).max() == 1.5  # the clamp did bite
    with pytest.raises(dt.Error, match="clip_value must be >= 0"):
        dt.nn.utils.clip_grad_value_([w], -1.0)
