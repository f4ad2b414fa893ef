# What the PyTorch-style training script (docs/python-pytorch.md, "The
# whole script") needed beyond the names: randint, torch's
# checkpoint.state_dict functions, in-place ops on fully_shard's ordered
# layout (S(0)[1],S(0)[0] inside tp's Shard(0)), and an evaluation forward
# that leaves the FSDP root sharded.
import tempfile

import numpy as np
import pytest

import dtensor as dt
import dtensor.checkpoint as dcp
from dtensor.checkpoint.state_dict import get_state_dict, set_state_dict
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module


def test_randint_forms():
    a = dt.randint(10, (3, 4), seed=1)
    b = dt.randint(0, 10, (3, 4), seed=1)
    assert a.dtype == dt.int64 and a.shape == (3, 4)
    assert np.array_equal(np.asarray(a), np.asarray(b))  # low 0 when left out
    c = np.asarray(dt.randint(-3, 5, size=(2000,), seed=2))
    assert c.min() == -3 and c.max() == 4  # [low, high), every value drawn
    dt.manual_seed(7)
    d1 = np.asarray(dt.randint(0, 100, (50,)))
    dt.manual_seed(7)
    assert np.array_equal(d1, np.asarray(dt.randint(0, 100, (50,))))  # the global generator
    assert dt.randint(0, 4, (3,), dtype=dt.float32, seed=1).dtype == dt.float32
    with pytest.raises(dt.Error, match="low 5 must be below high 5"):
        dt.randint(5, 5, (2,))
    with pytest.raises(dt.Error, match="randint"):
        dt.randint(1, 2, 3, (2,))


def model_on(mesh):
    dt.manual_seed(3)
    m = dt.nn.Sequential(dt.nn.Embedding(16, 8), dt.nn.Linear(8, 8, bias=False))
    parallelize_module(m, mesh["tp"], {"0": RowwiseParallel(input_layouts=dt.Replicate()),
                                       "1": ColwiseParallel()})
    fully_shard(m[1], mesh=mesh["dp"])
    fully_shard(m, mesh=mesh["dp"])
    return m


@pytest.fixture
def mesh():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))


def test_inplace_ops_on_an_ordered_layout(mesh):
    m = model_on(mesh)
    p = m[0].weight
    assert p.placements == (dt.Shard(0, order=1), dt.Shard(0, order=0))
    want = np.asarray(p.full_tensor()) * 0.5
    with dt.no_grad():
        p.mul_(0.5)  # a scalar: self's layout, order and all
        assert p.placements == (dt.Shard(0, order=1), dt.Shard(0, order=0))
        np.testing.assert_array_equal(np.asarray(p.full_tensor()), want)
        q = p * 3.0
        p.copy_(q)  # an operand laid out exactly as self
        np.testing.assert_allclose(np.asarray(p.full_tensor()), want * 3.0, rtol=1e-6)
        p.add_(dt.distribute_tensor(np.ones(8, np.float32), mesh, [dt.Replicate(), dt.Replicate()]))
        np.testing.assert_allclose(np.asarray(p.full_tensor()), want * 3.0 + 1, rtol=1e-6)


def test_evaluation_forward_leaves_the_root_sharded(mesh):
    m = model_on(mesh)
    opt = dt.optim.AdamW(m.parameters(), lr=0.1)
    x = dt.distribute_tensor(dt.randint(0, 16, (4, 3), seed=1), mesh, [dt.Shard(0), dt.Replicate()])
    sharded = [p.placements for p in m.parameters()]
    m(x).sum().backward()
    opt.step()
    with dt.no_grad():
        y = m(x)
    assert [p.placements for p in m.parameters()] == sharded
    assert len(dcp.get_state_dict(m, opt)) > 0  # the optimizer's parameters are the model's
    opt.zero_grad()
    m(x).sum().backward()  # and training goes on from there
    opt.step()
    assert [p.placements for p in m.parameters()] == sharded
    assert y.shape == (4, 3, 8)


def test_torch_state_dict_functions_round_trip(mesh):
    m = model_on(mesh)
    opt = dt.optim.AdamW(m.parameters(), lr=0.1)
    x = dt.distribute_tensor(dt.randint(0, 16, (4, 3), seed=1), mesh, [dt.Shard(0), dt.Replicate()])
    m(x).sum().backward()
    opt.step()
    model_sd, optim_sd = get_state_dict(m, opt)
    assert set(model_sd) == {"0.weight", "1.weight"}
    assert "0.weight.exp_avg" in optim_sd and "lr" in optim_sd
    ck = tempfile.mkdtemp() + "/ck"
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=ck)
    saved = [np.asarray(p.full_tensor()).copy() for p in m.parameters()]
    step = {k: v for k, v in optim_sd.items() if k.endswith(".step")}
    opt.zero_grad()
    m(x).sum().backward()
    opt.step()  # move everything, then load it back
    model_sd, optim_sd = get_state_dict(m, [opt])
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=ck)
    set_state_dict(m, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
    for p, s in zip(m.parameters(), saved):
        np.testing.assert_array_equal(np.asarray(p.full_tensor()), s)
    _, again = get_state_dict(m, opt)
    assert {k: again[k] for k in step} == step
    with pytest.raises(dt.Error, match="submodules= is not implemented"):
        get_state_dict(m, opt, submodules={m[0]})
    with pytest.raises(dt.Error, match="one optimizer per model"):
        get_state_dict(m, [opt, opt])


def test_state_dict_after_a_forward_without_backward_is_sharded(mesh):
    # A root keeps its gathered values from forward until backward (FSDP2);
    # when no backward comes, get_state_dict / state_dict() reshard first,
    # as FSDP2's state-dict hooks do, and a later backward still works.
    m = model_on(mesh)
    opt = dt.optim.SGD(m.parameters(), lr=0.1)
    x = dt.distribute_tensor(dt.randint(0, 16, (4, 3), seed=1), mesh, [dt.Shard(0), dt.Replicate()])
    sharded = [p.placements for p in m.parameters()]
    y = m(x)  # with grad: the root's values stay gathered
    assert [p.placements for p in m.parameters()] != sharded
    sd = m.state_dict()
    assert [v.placements for v in sd.values()] == sharded
    assert [p.placements for p in m.parameters()] == sharded
    assert len(dcp.get_state_dict(m, opt)) > 0
    y.sum().backward()  # the graph kept what it saved
    want = [np.asarray(p.full_tensor()) - 0.1 * np.asarray(p.grad.full_tensor())
            for p in m.parameters()]
    opt.step()
    for p, w in zip(m.parameters(), want):
        np.testing.assert_allclose(np.asarray(p.full_tensor()), w, rtol=1e-6)
    m(x)
    m.reshard()  # FSDP2's FSDPModule.reshard()
    assert [p.placements for p in m.parameters()] == sharded
    with pytest.raises(dt.Error, match="not under fully_shard"):
        dt.nn.Linear(2, 2).reshard()


def test_inplace_operand_takes_an_ordered_selfs_layout(mesh):
    m = model_on(mesh)
    p = m[0].weight  # S(0)[1],S(0)[0]
    q = dt.distribute_tensor(dt.randn((16, 8), seed=4), mesh, [dt.Shard(0), dt.Shard(0)])
    want = np.asarray(p.full_tensor()) + np.asarray(q.full_tensor())
    with dt.no_grad():
        p.add_(q)  # q (natural order: other pieces per rank) is laid out as p first
    assert p.placements == (dt.Shard(0, order=1), dt.Shard(0, order=0))
    np.testing.assert_allclose(np.asarray(p.full_tensor()), want, rtol=1e-6)
