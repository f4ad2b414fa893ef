# Param groups as PyTorch writes them: dicts of params and overrides, a
# schedule over groups, param_groups read and written while training, and
# optimizer.state_dict() / load_state_dict; against PyTorch 1.13 where it
# has the same thing.
import numpy as np
import pytest
import torch

import dtensor as dt
from dtensor.optim import SGD, AdamW, NAdam

SHAPES = [(6, 5), (5,), (3, 4), (7,)]
PLACEMENTS = [[dt.Shard(0), dt.Shard(1)], [dt.Replicate(), dt.Replicate()],
              [dt.Replicate(), dt.Shard(1)], [dt.Shard(0), dt.Replicate()]]


def make_params(rng, mesh):
    values = [rng.standard_normal(s) for s in SHAPES]
    ours = [dt.distribute_tensor(v, mesh, pl).requires_grad_() for v, pl in zip(values, PLACEMENTS)]
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    return ours, theirs


def set_grads(rng, ours, theirs):
    for p, r, pl in zip(ours, theirs, PLACEMENTS):
        g = rng.standard_normal(tuple(p.shape))
        p.grad = dt.distribute_tensor(g, p.device_mesh, pl)
        r.grad = torch.tensor(g)


@pytest.fixture
def mesh():
    return dt.DeviceMesh(dt.World.simulated(4), (2, 2))


# torch's SequentialLR calls step(0) on its pieces, which warns.
@pytest.mark.filterwarnings("ignore:The epoch parameter")
def test_groups_and_schedule_match_torch(rng, mesh):
    ours, theirs = make_params(rng, mesh)

    def groups(ps):
        return [{"params": [ps[0], ps[2]]},
                {"params": [ps[1], ps[3]], "weight_decay": 0.0, "lr": 0.05}]

    opt = AdamW(groups(ours), lr=0.01, weight_decay=0.1)
    topt = torch.optim.AdamW(groups(theirs), lr=0.01, weight_decay=0.1, foreach=False)

    def schedule(o, cls):
        return cls.SequentialLR(o, [cls.LinearLR(o, 0.25, 1.0, 3), cls.CosineAnnealingLR(o, 10)], [3])

    import dtensor.optim.lr_scheduler as ours_sched
    sched = schedule(opt, ours_sched)
    tsched = schedule(topt, torch.optim.lr_scheduler)
    for step in range(8):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        np.testing.assert_allclose(sched.get_last_lr(), tsched.get_last_lr(), rtol=1e-14)
        for p, r in zip(ours, theirs):
            np.testing.assert_allclose(np.asarray(p.full_tensor()), r.detach().numpy(),
                                       rtol=1e-12, atol=1e-14, err_msg=f"step {step}")
    assert sched.base_lrs == [0.01, 0.05]
    for g, tg in zip(opt.param_groups, topt.param_groups):
        for key in g.keys():
            if key != "params":  # lr: PyTorch's SequentialLR steps recursively
                assert g[key] == pytest.approx(tg[key], rel=1e-14), key
        assert [p.shape for p in g["params"]] == [tuple(p.shape) for p in tg["params"]]


def test_param_groups_are_writable(rng, mesh):
    ours, theirs = make_params(rng, mesh)
    opt = SGD([{"params": ours[:2]}, {"params": ours[2:], "momentum": 0.9}], lr=0.1)
    topt = torch.optim.SGD([{"params": theirs[:2]}, {"params": theirs[2:], "momentum": 0.9}],
                           lr=0.1, foreach=False)
    assert opt.lr == 0.1
    for step in range(4):
        if step == 2:
            for o in (opt, topt):
                o.param_groups[1]["lr"] = 0.5
                o.param_groups[0]["weight_decay"] = 0.2
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
    for p, r in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(p.full_tensor()), r.detach().numpy(), rtol=1e-12)
    assert opt.param_groups[1]["lr"] == 0.5 and "momentum" in opt.param_groups[1]
    with pytest.raises(dt.Error, match="different learning rates"):
        opt.lr
    opt.lr = 0.3
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.3]
    with pytest.raises(dt.Error, match="no hyper-parameter 'betas'"):
        opt.param_groups[0]["betas"] = (0.9, 0.99)
    with pytest.raises(dt.Error, match="momentum >= 0"):
        opt.param_groups[0]["momentum"] = -1.0


def test_state_dict_round_trip(rng, mesh):
    a, _ = make_params(np.random.default_rng(5), mesh)
    b, _ = make_params(np.random.default_rng(5), mesh)

    def groups(ps):
        return [{"params": ps[:2]}, {"params": ps[2:], "weight_decay": 0.0}]

    def step(ps, o, k):
        for p, pl in zip(ps, PLACEMENTS):
            g = np.random.default_rng(100 + k).standard_normal(tuple(p.shape))
            p.grad = dt.distribute_tensor(g, p.device_mesh, pl)
        o.step()

    straight = NAdam(groups(a), lr=0.01, weight_decay=0.1)
    other = NAdam(groups(b), lr=0.01, weight_decay=0.1)
    for k in range(2):
        step(a, straight, k)
        step(b, other, k)
    sd = other.state_dict()
    assert sorted(sd.keys()) == ["param_groups", "state"]
    assert sd["state"][0]["step"] == 2
    assert sd["param_groups"][1]["params"] == [2, 3]
    assert sd["param_groups"][1]["weight_decay"] == 0.0
    resumed = NAdam(groups(b), lr=0.5)
    resumed.load_state_dict(sd)
    assert resumed.param_groups[0]["lr"] == 0.01
    for k in range(2, 5):
        step(a, straight, k)
        step(b, resumed, k)
    for p, q in zip(a, b):
        assert np.array_equal(np.asarray(p.full_tensor()), np.asarray(q.full_tensor()))


def test_bad_groups_are_errors(rng, mesh):
    ours, _ = make_params(rng, mesh)
    with pytest.raises(KeyError, match="has no 'params'"):
        SGD([{"lr": 0.1}])
    with pytest.raises(dt.Error, match="no hyper-parameter 'betas'"):
        SGD([{"params": ours, "betas": (0.9, 0.99)}])
    with pytest.raises(dt.Error, match="again"):
        SGD([{"params": ours}, {"params": [ours[0]]}])
    with pytest.raises(ValueError, match="empty parameter list"):
        SGD([])


def test_bad_state_dicts_are_errors(rng, mesh):
    ours, _ = make_params(rng, mesh)
    opt = SGD([{"params": ours[:2]}, {"params": ours[2:]}], lr=0.1, momentum=0.9)
    good = opt.state_dict()
    for bad, match in [
            ({"state": [], "param_groups": good["param_groups"]}, "'state': expected a dict"),
            ({"state": {0: 5}, "param_groups": good["param_groups"]}, "state of a parameter"),
            ({"state": {}, "param_groups": {"lr": 1}}, "'param_groups': expected a list"),
            ({"state": {}, "param_groups": [1, 2]}, "a param group: expected a dict"),
            ({"state": {}, "param_groups": [{"params": "ab"}, {"params": [2, 3]}]},
             "'params': expected a list of parameter indices"),
            ({"state": {}, "param_groups": [{1: 2}, {"params": [2, 3]}]}, "str keys"),
            ({"state": {}}, "'state' and 'param_groups'")]:
        with pytest.raises((TypeError, KeyError), match=match):
            opt.load_state_dict(bad)
    with pytest.raises(dt.Error, match="2 param groups, the optimizer 1"):
        SGD(ours, lr=0.1).load_state_dict(good)
    with pytest.raises(TypeError, match="initial_lr"):
        opt.param_groups[0]["initial_lr"] = "x"
    opt.load_state_dict(good)  # still loads after the refusals


def test_a_tensor_lr_is_read_each_step_and_written_by_schedulers():
    # PyTorch's tensor lr: the same steps as a float lr; a write into the
    # tensor changes the next step; a scheduler writes into it in place;
    # param_groups[...]['lr'] is the tensor itself.
    import torch
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(3)]
    results = []
    lr_t = torch.tensor(0.01, dtype=torch.float64)
    for lr in (lr_t, 0.01):
        p = dt.distribute_tensor(w0, mesh, [dt.Shard(0)])
        p.requires_grad_()
        opt = dt.optim.AdamW([p], lr=lr)
        for k, g in enumerate(grads):
            if k == 2:
                if isinstance(lr, float):
                    opt.param_groups[0]["lr"] = 0.003
                else:
                    lr.fill_(0.003)          # the user's write, seen by the next step
            p.grad = dt.distribute_tensor(g, mesh, [dt.Shard(0)])
            opt.step()
        results.append(np.asarray(p.full_tensor()))
    np.testing.assert_array_equal(results[0], results[1])
    p = dt.distribute_tensor(w0, mesh, [dt.Shard(0)])
    p.requires_grad_()
    lr_t = torch.tensor(0.02, dtype=torch.float64)
    opt = dt.optim.SGD([{"params": [p], "lr": lr_t}], lr=0.5)
    assert opt.param_groups[0]["lr"].item() == 0.02
    sched = dt.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=4)
    sched.step()
    assert lr_t.item() == pytest.approx(sched.get_last_lr()[0], rel=1e-15)
    with pytest.raises(TypeError, match="lr"):
        dt.optim.SGD([p], lr=torch.tensor([0.1, 0.2]))
