# Modules, parallelize_module, fully_shard and the parallel layers from
# Python, each checked against the same math on full NumPy arrays.
import gc

import numpy as np
import pytest

import dtensor as dt
import dtensor.nn as nn
from dtensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel, fully_shard,
                              parallelize_module)


@pytest.fixture
def mesh():
    return dt.DeviceMesh(dt.World.simulated(8), (2, 4), ["dp", "tp"])


def full(d):
    return np.asarray(d.full_tensor())


def gelu_np(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


class Block(nn.Module):
    """x + down(gelu(up(norm(x)))), as in examples/tensor_parallel.cc."""

    def __init__(self, mesh, w_up, b_up, w_down, b_down, norm=False):
        super().__init__(mesh)
        if norm:
            self.norm = nn.LayerNorm(mesh, w_up.shape[1])
        self.up = nn.Linear(mesh, w_up, b_up)
        self.down = nn.Linear(mesh, w_down, b_down)
        self.has_norm = norm

    def forward(self, x):
        h = self.norm(x) if self.has_norm else x
        return x + self.down(dt.gelu(self.up(h)))


def weights(rng, hidden=16, ffn=64):
    f = np.float32
    return (rng.standard_normal((ffn, hidden)).astype(f) * 0.25, rng.standard_normal(ffn).astype(f) * 0.1,
            rng.standard_normal((hidden, ffn)).astype(f) * 0.125, rng.standard_normal(hidden).astype(f) * 0.1)


def block_np(x, w_up, b_up, w_down, b_down):
    return x + gelu_np(x @ w_up.T + b_up) @ w_down.T + b_down


def test_linear_matches_numpy_and_names(mesh, rng):
    w, b = rng.standard_normal((3, 5)), rng.standard_normal(3)
    lin = nn.Linear(mesh, w, b)
    x_np = rng.standard_normal((4, 5))
    y = lin(dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()]))
    np.testing.assert_allclose(full(y), x_np @ w.T + b, rtol=1e-12)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    assert lin.in_features == 5 and lin.out_features == 3
    assert lin.weight.requires_grad and lin.weight.placements == (dt.Replicate(), dt.Replicate())
    seeded = nn.Linear(mesh, 8, 4, seed=7)
    bound = 1 / np.sqrt(8)
    assert np.all(np.abs(full(seeded.weight)) <= bound)
    np.testing.assert_array_equal(full(nn.Linear(mesh, 8, 4, seed=7).weight), full(seeded.weight))


def test_python_module_tree_parameters_and_forward(mesh, rng):
    class Scaled(nn.Module):
        def __init__(self, mesh):
            super().__init__(mesh)
            self.scale = nn.Parameter(np.full(4, 2.0))
            self.inner = nn.Linear(mesh, np.eye(4), None)

        def forward(self, x):
            return self.inner(x) * self.scale

    m = Scaled(mesh)
    assert [n for n, _ in m.named_parameters()] == ["scale", "inner.weight"]
    assert [n for n, _ in m.named_modules()] == ["", "inner"]
    assert m.get_submodule("inner") is m.inner
    x_np = rng.standard_normal((2, 4))
    y = m(dt.distribute_tensor(x_np, mesh, [dt.Replicate(), dt.Replicate()]))
    np.testing.assert_allclose(full(y), x_np * 2.0, rtol=1e-15)
    dt.sum(y).backward()
    np.testing.assert_allclose(full(m.scale.grad), x_np.sum(0), rtol=1e-12)
    m.zero_grad()
    assert m.scale.grad is None
    with pytest.raises(dt.Error, match="already"):
        m.inner = nn.Linear(mesh, np.eye(4), None)
    other = Scaled(mesh)
    with pytest.raises(dt.Error, match="one parent"):
        other.again = m.inner
    with pytest.raises(AttributeError):
        m.missing
    assert "Scaled(" in repr(m)


def test_modules_survive_their_python_names(mesh, rng):
    def make():
        b = Block(mesh, *weights(rng))
        return b.up  # the child keeps its parent alive
    up = make()
    gc.collect()
    x = dt.distribute_tensor(rng.standard_normal((2, 16)).astype(np.float32), mesh, [dt.Replicate()] * 2)
    assert up(x).shape == (2, 64)
    for _ in range(20):  # trees made and dropped: collected without crashing
        Block(mesh, *weights(rng))
    del up
    gc.collect()


def test_parallelize_module_colwise_rowwise(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    block = Block(mesh, *w)
    assert parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()}) is block
    assert block.up.weight.placements == (dt.Replicate(), dt.Shard(0))
    assert block.down.weight.placements == (dt.Replicate(), dt.Shard(1))
    x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
    with dt.CommDebugMode() as comm:
        y = block(x)
    assert comm.get_comm_counts()["all_reduce"] == 1 and comm.get_total_counts() == 1
    assert y.placements == (dt.Shard(0), dt.Replicate())
    np.testing.assert_allclose(full(y), block_np(x_np, *w), rtol=2e-5, atol=2e-5)


def test_sequence_parallel_plan(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    block = Block(mesh, *w, norm=True)
    parallelize_module(block, "tp", {"norm": SequenceParallel(), "up": ColwiseParallel(),
                                     "down": RowwiseParallel(output_layouts=(dt.Shard(1),))})
    x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Shard(1)])
    with dt.CommDebugMode() as comm:
        y = block(x)
    counts = comm.get_comm_counts()
    assert counts["all_gather"] == 1 and counts["reduce_scatter"] == 1
    mu = x_np.mean(-1, keepdims=True)
    var = x_np.var(-1, keepdims=True)
    normed = (x_np - mu) / np.sqrt(var + 1e-5)
    expected = x_np + gelu_np(normed @ w[0].T + w[1]) @ w[2].T + w[3]
    np.testing.assert_allclose(full(y), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(dt.Error):
        parallelize_module(block, mesh["tp"], {"nothing.here": ColwiseParallel()})


def test_fully_shard_trains_like_the_replicated_model(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    ref = Block(mesh, *w)
    sharded = Block(mesh, *w)
    fully_shard(sharded.up, mesh=mesh["dp"])
    fully_shard(sharded, mesh=mesh["dp"])
    assert dt.parallel.is_fully_sharded(sharded)
    assert sharded.up.weight.placements[0] == dt.Shard(0)
    xs = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
    losses = []
    for model in (ref, sharded):
        opt = dt.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            y = model(xs)
            loss = dt.mean(y * y)
            loss.backward()
            opt.step()
        losses.append(loss.full_tensor().item())
        grads = {n: p.grad for n, p in model.named_parameters()}
        assert all(g is not None for g in grads.values())
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for (n, a), (_, b) in zip(ref.named_parameters(), sharded.named_parameters()):
        np.testing.assert_allclose(full(a), full(b), rtol=1e-5, atol=1e-6, err_msg=n)


def test_fsdp_module_methods(mesh, rng):
    # FSDP2's gradient accumulation: two backwards without sync, one with;
    # the gradient is the sum of the three, as plain accumulation gives.
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    ref = Block(mesh, *w)
    sharded = Block(mesh, *w)
    fully_shard(sharded.up, mesh=mesh["dp"])
    fully_shard(sharded, mesh=mesh["dp"])
    xs = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
    sharded.set_requires_gradient_sync(False)
    for model in (ref, sharded):
        for k in range(3):
            if model is sharded and k == 2:
                sharded.set_requires_gradient_sync(True)
            y = model(xs)
            dt.mean(y * y).backward()
            if model is sharded and k < 2:
                assert sharded.up.weight.grad is None
    for (n, a), (_, b) in zip(ref.named_parameters(), sharded.named_parameters()):
        np.testing.assert_allclose(full(a.grad), full(b.grad), rtol=1e-4, atol=1e-5, err_msg=n)
    sharded.set_gradient_divide_factor(2.0)
    sharded.set_reshard_after_forward(False, recurse=False)
    with pytest.raises(dt.Error, match="not under fully_shard"):
        ref.set_requires_gradient_sync(False)


def test_fully_shard_on_a_2d_mesh_is_hsdp(mesh, rng):
    # FSDP2's HSDP: mesh (dp=2 replicate, tp=4 shard); the batch over both.
    w = weights(rng)
    x_np = rng.standard_normal((8, 8, 16)).astype(np.float32)
    ref = Block(mesh, *w)
    hsdp = Block(mesh, *w)
    fully_shard(hsdp.up, mesh=mesh["dp", "tp"])
    fully_shard(hsdp, mesh=mesh["dp", "tp"])
    assert hsdp.up.weight.placements == (dt.Replicate(), dt.Shard(0))
    xs = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Shard(0)])
    for model in (ref, hsdp):
        y = model(xs)
        with dt.CommDebugMode() as comm:
            dt.mean(y * y).backward()
        if model is hsdp:
            counts = comm.get_comm_counts()
            assert counts["reduce_scatter"] == 2 and counts["all_reduce"] == 2
    for (n, a), (_, b) in zip(ref.named_parameters(), hsdp.named_parameters()):
        np.testing.assert_allclose(full(a.grad), full(b.grad), rtol=1e-4, atol=1e-5, err_msg=n)


def test_tied_weights_stay_tied(mesh, rng):
    # The embedding and the head share one weight (PyTorch's tying); after
    # tensor parallelism and fully_shard it is still one parameter.
    class TiedLM(nn.Module):
        def __init__(self, mesh):
            super().__init__(mesh)
            self.tok = nn.Embedding(mesh, 11, 6)
            self.head = nn.Linear(mesh, 6, 11, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, ids):
            return self.head(self.tok(ids))

    m = TiedLM(mesh)
    assert [n for n, _ in m.named_parameters()] == ["tok.weight"]
    dt.parallelize_module(m, mesh["tp"], {"tok": RowwiseParallel(), "head": ColwiseParallel()})
    fully_shard(m, mesh=mesh["dp"])
    assert [n for n, _ in m.named_parameters()] == ["tok.weight"]
    ids = dt.distribute_tensor(np.arange(8).reshape(2, 4) % 11, mesh, [dt.Shard(0), dt.Replicate()])
    dt.mean(m(ids)).backward()
    assert m.tok.weight.grad is not None
    np.testing.assert_array_equal(full(m.tok.weight.grad), full(m.head.weight.grad))
    m2 = TiedLM(mesh)
    with pytest.raises(dt.Error, match="one \\(tied\\) parameter"):
        dt.parallelize_module(m2, mesh["tp"], {"tok": ColwiseParallel(), "head": ColwiseParallel()})


def test_python_hooks(mesh, rng):
    lin = nn.Linear(mesh, np.eye(3), None)
    lin.register_forward_pre_hook(lambda m, x: x * 2.0)
    lin.register_forward_hook(lambda m, x, y: None)  # None keeps the output
    lin.register_forward_hook(lambda m, x, y: y + 1.0)
    x_np = rng.standard_normal((2, 3))
    y = lin(dt.distribute_tensor(x_np, mesh, [dt.Replicate()] * 2))
    np.testing.assert_allclose(full(y), 2 * x_np + 1, rtol=1e-15)


def test_parallel_layers_and_loss(mesh, rng):
    from dtensor.parallel import (ColumnParallelLinear, RowParallelLinear,
                                  vocab_parallel_cross_entropy)
    w1, b1, w2, b2 = weights(rng)
    up = ColumnParallelLinear(mesh, "tp", w1, b1)
    down = RowParallelLinear(mesh, mesh["tp"], w2, b2)
    x_np = rng.standard_normal((4, 16)).astype(np.float32)
    x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
    y = down(dt.gelu(up(x)))
    np.testing.assert_allclose(full(y), gelu_np(x_np @ w1.T + b1) @ w2.T + b2, rtol=2e-5, atol=2e-5)
    assert up.weight.placements == (dt.Replicate(), dt.Shard(0))

    logits_np = rng.standard_normal((4, 6, 8))
    target_np = rng.integers(0, 8, (4, 6))
    logits = dt.distribute_tensor(logits_np, mesh, [dt.Shard(0), dt.Shard(2)]).requires_grad_()
    target = dt.distribute_tensor(target_np, mesh, [dt.Shard(0), dt.Replicate()])
    loss = vocab_parallel_cross_entropy(logits, target, tp=1)
    lse = np.log(np.exp(logits_np).sum(-1))
    picked = np.take_along_axis(logits_np, target_np[..., None], -1)[..., 0]
    assert loss.full_tensor().item() == pytest.approx((lse - picked).mean(), rel=1e-12)
    loss.backward()
    soft = np.exp(logits_np - lse[..., None])
    soft[np.arange(4)[:, None], np.arange(6)[None, :], target_np] -= 1
    np.testing.assert_allclose(full(logits.grad), soft / 24, rtol=1e-10, atol=1e-14)


def test_fully_shard_shard_placement_fn_shards_another_dim(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    ref = Block(mesh, *w)
    sharded = Block(mesh, *w)
    fully_shard(sharded, mesh=mesh["dp"],
                shard_placement_fn=lambda p: dt.Shard(1) if p.ndim == 2 else None)
    assert sharded.up.weight.placements == (dt.Shard(1), dt.Replicate())
    assert sharded.up.bias.placements == (dt.Shard(0), dt.Replicate())
    xs = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
    for model in (ref, sharded):
        y = model(xs)
        dt.mean(y * y).backward()
    for (n, a), (_, b) in zip(ref.named_parameters(), sharded.named_parameters()):
        np.testing.assert_allclose(full(a.grad), full(b.grad), rtol=1e-5, atol=1e-6, err_msg=n)
    with pytest.raises(TypeError, match="shard_placement_fn"):
        fully_shard(Block(mesh, *w), shard_placement_fn=lambda p: "no")


def test_fully_shard_reshard_after_forward_int_gathers_over_fewer_ranks(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    grads, gathered = [], []
    for reshard in (True, 2):
        model = Block(mesh, *w)
        fully_shard(model.up, mesh=mesh["tp"], reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh["tp"])
        y = model(dt.distribute_tensor(x_np, mesh, [dt.Replicate(), dt.Shard(0)]))
        loss = dt.mean(y * y)
        with dt.CommDebugMode() as comm:
            loss.backward()
        gathered.append(comm.get_comm_bytes()["all_gather"])
        grads.append({n: full(p.grad) for n, p in model.named_parameters()})
    assert gathered[1] == gathered[0] * 2  # each of 2 ranks sends the 2 pieces it kept
    for name in grads[0]:
        np.testing.assert_array_equal(grads[1][name], grads[0][name], err_msg=name)
    with pytest.raises(dt.Error, match="must divide"):
        fully_shard(Block(mesh, *w), mesh=mesh["tp"], reshard_after_forward=3)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_vocab_parallel_cross_entropy_matches_torch_with_weights_and_class_dim_1(mesh, reduction):
    import torch
    rng = np.random.default_rng(5)
    logits_np = rng.standard_normal((4, 11, 3))            # (N, C, d1): classes at dim 1
    target_np = rng.integers(0, 11, (4, 3))
    target_np[0, 1] = -100
    weight_np = rng.random(11)
    up_np = rng.standard_normal((4, 3)) if reduction == "none" else np.array(1.25)
    t_logits = torch.tensor(logits_np, requires_grad=True)
    want = torch.nn.functional.cross_entropy(t_logits, torch.tensor(target_np),
                                             weight=torch.tensor(weight_np), reduction=reduction)
    want.backward(torch.tensor(up_np))
    logits = dt.distribute_tensor(logits_np, mesh, [dt.Shard(0), dt.Shard(1)])
    logits.requires_grad_()
    target = dt.distribute_tensor(target_np, mesh, [dt.Shard(0), dt.Replicate()])
    weight = dt.distribute_tensor(weight_np, mesh, [dt.Replicate(), dt.Shard(0)])
    loss = dt.parallel.vocab_parallel_cross_entropy(logits, target, "tp", weight=weight,
                                                     reduction=reduction, class_dim=1)
    up_layout = [dt.Shard(0), dt.Replicate()] if reduction == "none" else [dt.Replicate()] * 2
    loss.backward(dt.distribute_tensor(up_np, mesh, up_layout))
    np.testing.assert_allclose(full(loss), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(full(logits.grad), t_logits.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_fully_shard_prefetch_gives_the_same_gradients(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    grads = []
    for mode in ("off", "implicit", "explicit"):
        model = Block(mesh, *w)
        fully_shard(model.up, mesh=mesh["dp"], prefetch=mode == "implicit")
        fully_shard(model.down, mesh=mesh["dp"], prefetch=mode == "implicit")
        fully_shard(model, mesh=mesh["dp"])
        if mode == "explicit":
            model.up.set_modules_to_forward_prefetch([model.down])
            model.down.set_modules_to_backward_prefetch([model.up])
        xs = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
        for _ in range(2):
            y = model(xs)
            dt.mean(y * y).backward()
        grads.append({n: full(p.grad) for n, p in model.named_parameters()})
    for other in grads[1:]:
        for name in grads[0]:
            np.testing.assert_array_equal(other[name], grads[0][name], err_msg=name)


def test_fully_shard_async_reduce_scatter_gives_the_same_gradients(mesh, rng):
    w = weights(rng)
    x_np = rng.standard_normal((4, 8, 16)).astype(np.float32)
    grads = []
    for async_rs in (False, True):
        model = Block(mesh, *w)
        for m in (model.up, model.down, model):
            fully_shard(m, mesh=mesh["dp"], async_reduce_scatter=async_rs)
        xs = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
        for _ in range(2):
            y = model(xs)
            dt.mean(y * y).backward()
            assert dt.parallel.reduce_scatters_in_flight() == 0
        grads.append({n: full(p.grad) for n, p in model.named_parameters()})
    for name in grads[0]:
        np.testing.assert_array_equal(grads[1][name], grads[0][name], err_msg=name)
