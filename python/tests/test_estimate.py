# dtensor.estimate from Python: a step written in Python (an MLP laid out
# with parallelize_module and fully_shard, AdamW) profiled on a simulated
# world and on a shape-only one gives every rank the same memory and the
# same collectives; the time is estimated; a value read in a shape-only
# world raises.
import pytest

import dtensor as dt
import dtensor.nn as nn
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module


class MLP(nn.Module):
    def __init__(self, mesh):
        super().__init__(mesh)
        self.up = nn.Linear(mesh, 12, 40, seed=1)
        self.down = nn.Linear(mesh, 40, 12, seed=3)

    def forward(self, x):
        return x + self.down(dt.gelu(self.up(x)))


def step_on(world):
    def step():
        mesh = dt.DeviceMesh(world, (2, 4), ["dp", "tp"])
        with nn.meta_device():
            model = MLP(mesh)
        parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
        model.materialize()
        opt = dt.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(2):
            dt.estimate_phase("forward")
            x = dt.randn((6, 12), seed=5, device_mesh=mesh, placements=[dt.Shard(0), dt.Replicate()])
            loss = model(x).sum()
            dt.estimate_phase("backward")
            loss.backward()
            dt.estimate_phase("optimizer")
            opt.step()
            opt.zero_grad()
    return step


def test_a_shape_only_world_profiles_every_rank_as_the_simulated_one():
    real = dt.estimate(step_on(dt.World.simulated(8)), dt.World.simulated(8))
    world = dt.World.shape_only(8)
    assert world.is_shape_only and repr(world) == "World.shape_only(8)"
    shapes = dt.estimate(step_on(world), world, cluster="a100", from_phase=3, roles=False)
    assert real["phases"] == shapes["phases"] == ["forward", "backward", "optimizer"] * 2
    assert len(shapes["ranks"]) == 8
    for r, s in zip(real["ranks"], shapes["ranks"]):
        assert r["rank"] == s["rank"]
        assert r["memory"] == s["memory"]
        assert r["memory"]["peak"] > 0
        assert r["collectives"] == s["collectives"]
        assert any(c["kind"] == "all_gather" for c in r["collectives"])
    assert shapes["exact"] == ["memory", "collectives"] and shapes["estimated"] == ["time"]
    t = shapes["time"]
    assert t["step_s"] > 0 and t["compute_s"] > 0 and t["flops"] > 0
    assert [name for name, _ in t["phases_s"]] == ["forward", "backward", "optimizer"]


def test_by_roles_each_rank_has_the_figures_of_its_stand_in():
    real = dt.estimate(step_on(dt.World.simulated(8)), dt.World.simulated(8))
    world = dt.World.shape_only(8)
    roles = dt.estimate(step_on(world), world)
    # The 2x4 mesh's ranks by first-or-not on each dim: 0, 1-3, 4, 5-7.
    assert [r["stands_for"] for r in roles["ranks"]] == [[0], [1, 2, 3], [4], [5, 6, 7]]
    assert roles["runs"] == 2  # the step makes the mesh: then it runs again by roles
    for s in roles["ranks"]:
        for rank in s["stands_for"]:
            r = real["ranks"][rank]
            assert r["memory"] == s["memory"]
            assert [(c["kind"], c["dtype"], c["bytes"]) for c in r["collectives"]] == [
                (c["kind"], c["dtype"], c["bytes"]) for c in s["collectives"]]
            assert all(rank in c["group"] for c in r["collectives"])
    assert roles["time"]["step_s"] == dt.estimate(step_on(world), world, roles=False)["time"]["step_s"]


def test_reading_a_value_in_a_shape_only_world_raises():
    world = dt.World.shape_only(4)
    mesh = dt.DeviceMesh(world, (4,), ["dp"])
    x = dt.randn((8, 3), seed=1, device_mesh=mesh, placements=[dt.Shard(0)])
    y = (x * 2).sum()
    assert y.shape == ()
    with pytest.raises(dt.Error, match="meta tensor"):
        y.full_tensor().item()
