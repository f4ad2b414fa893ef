# Optimizers, schedules and clipping from Python, against NumPy versions of
# PyTorch's update rules (same operation order, float64).
import math

import numpy as np
import pytest

import dtensor as dt
from dtensor.optim import SGD, Adam, AdamW, clip_grad_norm_
from dtensor.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, LinearLR, SequentialLR


@pytest.fixture
def mesh4():
    return dt.DeviceMesh(dt.World.simulated(4), (4,))


def full(d):
    return np.asarray(d.full_tensor())


def set_grad(p, g_np):
    p.grad = dt.distribute_tensor(g_np, p.device_mesh, p.placements)


def test_sgd_momentum_nesterov_weight_decay_matches_numpy(mesh4, rng):
    p_np = rng.standard_normal((8, 3))
    p = dt.distribute_tensor(p_np, mesh4, [dt.Shard(0)]).requires_grad_()
    opt = SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
    buf = None
    ref = p_np.copy()
    for _ in range(4):
        g = rng.standard_normal((8, 3))
        set_grad(p, g)
        opt.step()
        # PyTorch's rule: g = g + wd p; buf = g, then buf = m buf + g; g = g + m buf.
        gg = g + 0.01 * ref
        buf = gg.copy() if buf is None else 0.9 * buf + gg
        gg = gg + 0.9 * buf
        ref = ref - 0.1 * gg
    np.testing.assert_allclose(full(p), ref, rtol=1e-13, atol=1e-15)
    st = opt.state(0)
    assert st["step"] == 4
    np.testing.assert_allclose(full(st["momentum_buffer"]), buf, rtol=1e-13)
    assert st["momentum_buffer"].placements == p.placements


@pytest.mark.parametrize("cls,decoupled", [(AdamW, True), (Adam, False)])
def test_adam_family_matches_numpy(mesh4, rng, cls, decoupled):
    p_np = rng.standard_normal((4, 4))
    p = dt.distribute_tensor(p_np, mesh4, [dt.Shard(1)]).requires_grad_()
    lr, (b1, b2), eps, wd = 0.01, (0.8, 0.95), 1e-6, 0.1
    opt = cls([("w", p)], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    m = np.zeros_like(p_np)
    v = np.zeros_like(p_np)
    ref = p_np.copy()
    for t in range(1, 4):
        g = rng.standard_normal((4, 4))
        set_grad(p, g)
        opt.step()
        if decoupled:
            ref = ref * (1 - lr * wd)
        else:
            g = g + wd * ref
        m = m + (g - m) * (1 - b1)
        v = b2 * v + (1 - b2) * g * g
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        ref = ref - (lr / bc1) * m / (np.sqrt(v) / math.sqrt(bc2) + eps)
    np.testing.assert_allclose(full(p), ref, rtol=1e-12, atol=1e-14)
    assert opt.state("w")["step"] == 3
    assert set(opt.buffer_names) >= {"exp_avg", "exp_avg_sq"}


def test_partial_gradient_is_all_reduced_by_step(mesh4, rng):
    # A replicated weight used with batch-sharded data: its gradient is
    # Partial(sum); step() reduces it first, giving the full-batch update.
    x_np = rng.standard_normal((8, 3))
    w_np = rng.standard_normal((3, 1))
    x = dt.distribute_tensor(x_np, mesh4, [dt.Shard(0)])
    w = dt.distribute_tensor(w_np, mesh4, [dt.Replicate()]).requires_grad_()
    opt = SGD([w], lr=0.5)
    opt.zero_grad()
    dt.sum(dt.mm(x, w)).backward()
    assert w.grad.placements == (dt.Partial(),)
    with dt.CommDebugMode() as comm:
        opt.step()
    assert comm.get_comm_counts()["all_reduce"] == 1
    np.testing.assert_allclose(full(w), w_np - 0.5 * x_np.sum(0, keepdims=True).T, rtol=1e-13)
    opt.zero_grad()
    assert w.grad is None


def test_parameters_from_a_module_and_lr_property(mesh4):
    lin = dt.nn.Linear(mesh4, 4, 2, seed=3)
    opt = AdamW(lin.parameters(), lr=0.1)
    assert len(opt) == 2 and opt.lr == 0.1
    opt.lr = 0.05
    assert opt.lr == 0.05
    named = SGD(lin.named_parameters(), lr=0.1)
    assert [named.name(i) for i in range(len(named))] == ["weight", "bias"]
    with pytest.raises(dt.Error):
        SGD([dt.distribute_tensor(np.ones(4), mesh4, [dt.Shard(0)])])  # does not require grad
    with pytest.raises(dt.Error):
        SGD(lin.weight, lr=0.1)  # one DTensor, not a list


def test_schedulers_follow_pytorch_closed_forms(mesh4):
    p = dt.distribute_tensor(np.ones(4), mesh4, [dt.Shard(0)]).requires_grad_()
    opt = SGD([p], lr=1.0)
    warm = LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=4)
    cos = CosineAnnealingLR(opt, T_max=6, eta_min=0.01)
    seq = SequentialLR(opt, [warm, cos], milestones=[4])
    lrs = [opt.lr]
    for _ in range(10):
        seq.step()
        lrs.append(opt.lr)
    expected = [0.1 + 0.9 * e / 4 for e in range(4)]
    expected += [0.01 + 0.99 * (1 + math.cos(math.pi * e / 6)) / 2 for e in range(7)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)
    assert seq.get_last_lr() == [lrs[-1]]
    assert seq.last_epoch == 10


def test_lambda_lr_calls_python(mesh4):
    p = dt.distribute_tensor(np.ones(4), mesh4, [dt.Shard(0)]).requires_grad_()
    opt = SGD([p], lr=2.0)
    sched = LambdaLR(opt, lambda epoch: 0.5 ** epoch)
    sched.step()
    sched.step()
    assert opt.lr == 2.0 * 0.25
    sched.last_epoch = 0
    assert opt.lr == 2.0


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_matches_numpy(mesh4, rng, norm_type):
    a = dt.distribute_tensor(rng.standard_normal((8, 2)), mesh4, [dt.Shard(0)]).requires_grad_()
    b = dt.distribute_tensor(rng.standard_normal((3,)), mesh4, [dt.Replicate()]).requires_grad_()
    ga, gb = rng.standard_normal((8, 2)) * 3, rng.standard_normal((3,)) * 3
    set_grad(a, ga)
    set_grad(b, gb)
    allg = np.concatenate([ga.ravel(), gb.ravel()])
    expected = np.max(np.abs(allg)) if math.isinf(norm_type) else np.sum(np.abs(allg) ** norm_type) ** (1 / norm_type)
    norm = clip_grad_norm_([a, b], max_norm=1.0, norm_type=norm_type)
    assert norm == pytest.approx(expected, rel=1e-12)
    coef = 1.0 / (expected + 1e-6)
    np.testing.assert_allclose(full(a.grad), ga * coef, rtol=1e-12)
    np.testing.assert_allclose(full(b.grad), gb * coef, rtol=1e-12)
    assert dt.nn.utils.clip_grad_norm_ is clip_grad_norm_  # torch.nn.utils spelling, same function
