# Models larger than a process from Python: meta-device building and
# materialize(), activation checkpointing (checkpoint_wrapper and
# dtensor.utils.checkpoint.checkpoint), the memory report, the generator's
# state; each checked bit for bit against the plain way.
import numpy as np
import pytest

import dtensor as dt
import dtensor.nn as nn
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module
from dtensor.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts


@pytest.fixture
def mesh():
    return dt.DeviceMesh(dt.World.simulated(8), (2, 4), ["dp", "tp"])


def full(d):
    return np.asarray(d.full_tensor())


class MLP(nn.Module):
    def __init__(self, mesh, seed):
        super().__init__(mesh)
        self.up = nn.Linear(mesh, 12, 40, seed=seed)
        self.norm = nn.LayerNorm(mesh, 40)
        self.down = nn.Linear(mesh, 40, 12, seed=seed + 2)

    def forward(self, x):
        return x + self.down(dt.gelu(self.norm(self.up(x))))


def lay_out(model, mesh):
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])


def test_meta_device_then_materialize_gives_the_values_of_the_model_made_whole(mesh):
    with nn.meta_device():
        meta = MLP(mesh, 5)
    with pytest.raises(dt.Error, match="materialize"):
        meta(dt.distribute_tensor(np.ones((4, 12), np.float32), mesh, [dt.Shard(0), dt.Replicate()]))
    with dt.CommDebugMode() as comm:
        lay_out(meta, mesh)
    assert comm.get_total_counts() == 0
    assert meta.materialize() == 6
    assert meta.materialize() == 0
    whole = MLP(mesh, 5)
    for (name, a), (_, b) in zip(meta.named_parameters(), whole.named_parameters()):
        np.testing.assert_array_equal(full(a), full(b), err_msg=name)


def test_checkpoint_wrapper_and_checkpoint_give_the_same_gradients(mesh, rng):
    x_np = rng.standard_normal((8, 12)).astype(np.float32)
    grads = []
    for mode in ("keep", "wrapper", "function"):
        model = MLP(mesh, 9)
        lay_out(model, mesh)
        if mode == "wrapper":
            assert nn.checkpoint_wrapper(model) is model
        x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
        y = checkpoint(model, x) if mode == "function" else model(x)
        dt.sum(y * y).backward()
        grads.append({n: full(p.grad) for n, p in model.named_parameters()})
    for other in grads[1:]:
        for name in grads[0]:
            np.testing.assert_array_equal(other[name], grads[0][name], err_msg=name)


def test_selective_checkpointing_keeps_the_listed_outputs(mesh, rng):
    x_np = rng.standard_normal((8, 12)).astype(np.float32)
    grads, kept = [], []
    for mode in ("keep", "wrapper", "function"):
        model = MLP(mesh, 9)
        lay_out(model, mesh)
        if mode == "wrapper":
            nn.checkpoint_wrapper(model, save_ops=["linear"])
        x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Replicate()])
        if mode == "function":
            # As PyTorch: context_fn makes the contexts; dtensor functions or names.
            y = checkpoint(model, x,
                           context_fn=lambda: create_selective_checkpoint_contexts([dt.linear]))
        else:
            y = model(x)
        loss = dt.sum(y * y)
        kept.append(dt.autograd.graph_memory(loss)["saved_bytes"])
        loss.backward()
        grads.append({n: full(p.grad) for n, p in model.named_parameters()})
    for other in grads[1:]:
        for name in grads[0]:
            np.testing.assert_array_equal(other[name], grads[0][name], err_msg=name)
    assert kept[1] == kept[2] and kept[1] < kept[0]
    assert create_selective_checkpoint_contexts(["mm", dt.matmul]).save_ops == ["mm", "matmul"]
    with pytest.raises(dt.Error, match='names "relu", whose output a region cannot keep'):
        create_selective_checkpoint_contexts(["relu"])


def test_checkpoint_replays_dropout_and_refuses_reentrant(mesh):
    x_np = np.linspace(-1, 1, 48, dtype=np.float32).reshape(8, 6)
    grads = []
    for ac in (False, True):
        dt.manual_seed(3)
        x = dt.distribute_tensor(x_np, mesh, [dt.Shard(0), dt.Shard(1)])
        x.requires_grad_()
        fn = lambda t: dt.tanh(dt.dropout(t * 3.0, 0.5))  # noqa: E731
        y = checkpoint(fn, x) if ac else fn(x)
        dt.sum(y).backward()
        grads.append(full(x.grad))
    np.testing.assert_array_equal(grads[0], grads[1])
    with pytest.raises(dt.Error, match="use_reentrant"):
        checkpoint(fn, x, use_reentrant=True)


def test_memory_tracker_counts_each_ranks_bytes(mesh):
    model = MLP(mesh, 1)
    lay_out(model, mesh)
    opt = dt.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = dt.MemoryTracker(model, opt)
    x = dt.distribute_tensor(np.ones((8, 12), np.float32), mesh, [dt.Shard(0), dt.Replicate()])
    loss = dt.sum(model(x))
    tracker.after_forward(loss)
    loss.backward()
    opt.step()
    report = tracker.report()
    assert len(report["ranks"]) == 8
    for r in report["ranks"]:
        params = sum(p.to_local(r["rank"]).numel() * 4 for p in model.parameters())
        assert r["parameters"] == params
        assert r["gradients"] == params
        assert r["optimizer_state"] == 2 * params
        assert r["activations"] > 0
    assert report["peak_allocated"] >= report["ranks"][0]["parameters"]
    assert "optim state" in report["table"]
    assert dt.memory_stats()["allocated"] > 0
    # fully_shard's gathered values and flat buffers, counted apart; none
    # is left after backward.
    assert report["peak_unsharded_parameters"] > 0
    assert report["peak_communication_buffers"] > 0
    assert dt.memory_stats()["unsharded_parameters"] == 0
    assert dt.memory_stats()["communication_buffers"] == 0


def test_rng_state_round_trips():
    dt.manual_seed(11)
    state = dt.get_rng_state()
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    first = full(dt.rand((5,), device_mesh=mesh, placements=[dt.Shard(0)]))
    dt.set_rng_state(state)
    np.testing.assert_array_equal(full(dt.rand((5,), device_mesh=mesh, placements=[dt.Shard(0)])), first)
    with pytest.raises(dt.Error, match="seed, draws"):
        dt.set_rng_state((1, 2, 3))


class Recipes(nn.Module):
    def __init__(self, mesh):
        super().__init__(mesh)
        self.w = nn.Parameter(nn.Init.normal((10, 6), seed=4, std=0.02))
        self.b = nn.Parameter(nn.Init.uniform((6,), seed=5, low=-1.0, high=2.0))
        self.g = nn.Parameter(nn.Init.constant((6,), 1.5))

    def forward(self, x):
        return x @ self.w + self.b


def test_parameters_from_recipes_are_meta_until_materialize(mesh):
    with nn.meta_device():
        meta = Recipes(mesh)
    assert all(p.is_meta for p in meta.parameters())
    fully_shard(meta, mesh=mesh["dp"])
    assert meta.materialize() == 3
    assert not any(p.is_meta for p in meta.parameters())
    whole = Recipes(mesh)
    for (name, a), (_, b) in zip(meta.named_parameters(), whole.named_parameters()):
        np.testing.assert_array_equal(full(a), full(b), err_msg=name)
    recipe = nn.Init.normal((10, 6), 4, 0.02)
    np.testing.assert_array_equal(full(whole.w), np.asarray(recipe.full()))
    np.testing.assert_array_equal(
        full(whole.w), 0.02 * full(dt.randn((10, 6), seed=4, device_mesh=mesh,
                                            placements=[dt.Replicate(), dt.Shard(1)])))
