# CommDebugMode, VerifyMode, visualize_sharding and plan_redistribute.
import numpy as np
import pytest

import dtensor as dt


def test_comm_debug_mode_counts_collectives():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    d = dt.distribute_tensor(np.ones((8, 4), dtype=np.float32), mesh, [dt.Shard(0), dt.Shard(1)])
    with dt.CommDebugMode() as comm:
        d.redistribute([dt.Replicate(), dt.Shard(1)])
    assert comm.get_total_counts() == 1
    assert comm.get_comm_counts() == {"all_gather": 1}
    assert comm.get_comm_bytes()["all_gather"] > 0
    assert comm.plans_run == 1 and comm.planned_cost_us > 0
    with dt.CommDebugMode() as comm2:
        s = dt.sum(d, dim=1)            # local: S(1) summed -> P(sum)
        s.full_tensor()                 # one all_reduce over tp, one all_gather over dp
    assert comm2.get_comm_counts().get("all_reduce", 0) >= 1
    assert comm2.get_total_counts() == sum(comm2.get_comm_counts().values())
    assert "all_reduce" in comm2.table() and '"total"' in comm2.json()
    with dt.CommDebugMode() as none:
        d * 2
    assert none.get_total_counts() == 0


def test_verify_mode():
    mesh = dt.init_device_mesh((2,))
    d = dt.distribute_tensor(np.arange(6.0).reshape(3, 2), mesh, [dt.Shard(0)])
    with dt.VerifyMode() as v:
        assert dt.verify_enabled()
        (d @ d.t()).full_tensor()
    assert v.checks >= 1


def test_visualize_sharding():
    mesh = dt.init_device_mesh((2,))
    d = dt.distribute_tensor(np.zeros((4, 2)), mesh, [dt.Shard(0)])
    text = dt.visualize_sharding(d)
    assert "[0, 2)" in text and "[2, 4)" in text
    assert dt.visualize_sharding(d.spec) == text


def test_plan_redistribute():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    d = dt.distribute_tensor(np.ones((8, 8), dtype=np.float32), mesh, [dt.Shard(0), dt.Shard(1)])
    # one exchange of boxes over the flattened group, the cheapest plan
    box = dt.plan_redistribute(d, [dt.Replicate(), dt.Replicate()])
    assert box.counts == {"box_exchange": 1} and box.steps[0].group_size == 4
    assert box.peak_bytes <= 2 * 256
    # the plan of one-mesh-dim collectives: one all_gather per tensor dim
    plan = dt.plan_redistribute(d, [dt.Replicate(), dt.Replicate()], box_exchange=False)
    assert box.cost_us < plan.cost_us
    assert len(plan.steps) >= 1
    assert all(s.kind == "all_gather" for s in plan.steps)
    assert sorted(s.tensor_dim for s in plan.steps) == [0, 1]
    assert plan.cost_us == pytest.approx(sum(s.cost_us for s in plan.steps))
    assert plan.counts == {"all_gather": len(plan.steps)}
    step = plan.steps[0]
    assert step.bytes > 0 and step.group_size >= 2 and step.reduce_op is None
    assert isinstance(step.from_placements[0], dt.Placement)
    assert str(plan) == plan.explain() and "all_gather" in str(plan)
    # the same plan from a spec; partial -> shard is a reduce_scatter
    p = dt.distribute_tensor(np.ones((8, 8)), mesh, [dt.Partial(), dt.Replicate()])
    rs = dt.plan_redistribute(p.spec, [dt.Shard(0), dt.Replicate()])
    assert [s.kind for s in rs.steps] == ["reduce_scatter"] and rs.steps[0].reduce_op == "sum"
    with pytest.raises(dt.Error, match="P"):
        dt.plan_redistribute(d, [dt.Partial(), dt.Replicate()])
    with dt.CommDebugMode() as comm:
        d.redistribute([dt.Replicate(), dt.Replicate()])
    assert comm.get_total_counts() == box.num_collectives == 1
