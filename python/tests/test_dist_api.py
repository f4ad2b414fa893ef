# The distributed API with PyTorch 2's names (DeviceMesh.get_rank,
# get_local_rank, device_type, _flatten; distribute_tensor's defaults and
# src_data_rank; redistribute's order and keywords; to_local/full_tensor
# grad_placements; loss_parallel; fully_shard's mp_policy/offload_policy;
# use_local_output) and the simulated world's current rank. 1.13 has no
# DTensor: these check the documented behaviour against the single-process
# computation, and loss_parallel against torch 1.13's cross_entropy.
import numpy as np
import pytest
import torch

import dtensor as dt
from dtensor.parallel import loss_parallel


def mesh22():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))


# ---- the current rank and DeviceMesh -----------------------------------------------

def test_mesh_rank_queries_follow_the_current_rank():
    mesh = mesh22()
    seen = []
    for r in dt.each_rank(mesh):
        assert dt.get_current_rank() == r
        assert mesh.get_rank() == r
        coord = (r // 2, r % 2)
        assert mesh.get_coordinate() == coord
        assert mesh.get_local_rank("dp") == coord[0] == mesh.get_local_rank(0)
        assert mesh.get_local_rank("tp") == coord[1] == mesh.get_local_rank(mesh_dim=1)
        assert mesh["tp"].get_local_rank() == coord[1]  # 1-d: mesh_dim may be left out
        seen.append(r)
    assert seen == [0, 1, 2, 3]
    assert dt.get_current_rank() is None


def test_rank_queries_outside_the_context_are_per_rank_in_a_simulated_world():
    mesh = mesh22()
    assert mesh.get_rank().by_rank == {0: 0, 1: 1, 2: 2, 3: 3}
    assert mesh.get_local_rank(0).by_rank == {0: 0, 1: 0, 2: 1, 3: 1}
    assert mesh.get_local_rank("tp").by_rank == {0: 0, 1: 1, 2: 0, 3: 1}
    assert mesh.get_coordinate().by_rank == {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}
    # a sub-mesh's coordinate is each rank's in its own sub-mesh
    assert mesh["dp"].get_local_rank().by_rank == {0: 0, 1: 0, 2: 1, 3: 1}
    # one rank held by the mesh's ranks of this process: the plain value
    assert dt.init_device_mesh((1,)).get_local_rank() == 0
    for one in (bool, int, float, lambda v: [10, 20][v]):
        with pytest.raises(dt.Error, match="per-rank value.*current_rank.*rank_map"):
            one(mesh.get_local_rank(0))
    with dt.current_rank(1):
        with pytest.raises(dt.Error, match="mesh_dim must be given for a 2-d mesh"):
            mesh.get_local_rank()
        with pytest.raises(dt.Error, match="out of range"):
            mesh.get_local_rank(2)
    with dt.current_rank(7):
        with pytest.raises(dt.Error, match="current rank 7.*not held"):
            mesh.get_rank()
    with pytest.raises(dt.Error, match="rank >= 0"):
        dt.current_rank(-1)


def test_current_rank_nests():
    with dt.current_rank(1):
        with dt.current_rank(3):
            assert dt.get_current_rank() == 3
        assert dt.get_current_rank() == 1


def test_device_type_and_flatten():
    mesh = mesh22()
    assert mesh.device_type == "cpu"
    flat = mesh._flatten()
    assert flat.ndim == 1 and flat.size() == 4
    assert flat.mesh_dim_names == ("dp_tp",)
    assert mesh22()._flatten("all").mesh_dim_names == ("all",)
    with pytest.raises(dt.Error, match="already flattened as 'dp_tp'"):
        mesh._flatten("all")  # one name per flattening of a root, as PyTorch
    # the flattened dim is the row-major order of both: Shard(0) over it cuts 4 ways
    d = dt.distribute_tensor(np.arange(8.0), flat, [dt.Shard(0)])
    for r in dt.each_rank(flat):
        assert d.to_local().tolist() == [2.0 * r, 2.0 * r + 1]


def test_to_local_is_the_current_ranks_shard():
    mesh = mesh22()
    a = np.arange(20, dtype=np.float32).reshape(5, 4)  # uneven over dp
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    shards = d.local_shards()
    for r in dt.each_rank(mesh):
        local = d.to_local()
        assert local.data_ptr() == shards[r].data_ptr()
        off = d.spec.global_offset(r)
        shape = d.spec.local_shape(r)
        np.testing.assert_array_equal(np.asarray(local),
                                      a[off[0]:off[0] + shape[0], off[1]:off[1] + shape[1]])
    per_rank = d.to_local()  # outside current_rank: every rank's, aliasing the shards
    assert isinstance(per_rank, dt.RankLocal)
    assert {r: t.data_ptr() for r, t in per_rank.by_rank.items()} == {
        r: t.data_ptr() for r, t in shards.items()}


def test_from_local_of_one_tensor_is_the_current_ranks_shard():
    mesh = mesh22()
    t = dt.tensor([[1.0, 2.0]])
    with dt.current_rank(2):
        d = dt.DTensor.from_local(t, mesh, [dt.Shard(0), dt.Replicate()])
        assert d.to_local().data_ptr() == t.data_ptr()  # rank 2's shard is t itself
    shards = d.local_shards()
    assert all(shards[r].data_ptr() != t.data_ptr() for r in (0, 1, 3))  # the others copy
    assert all(shards[r].tolist() == [[1.0, 2.0]] for r in range(4))
    assert d.shape == (2, 2)
    # outside the context: unchanged, the lowest rank aliases it
    e = dt.DTensor.from_local(t, mesh, [dt.Shard(0), dt.Replicate()])
    assert e.local_shards()[0].data_ptr() == t.data_ptr()
    # placements default to Replicate, as PyTorch's
    assert dt.DTensor.from_local(t, mesh).placements == (dt.Replicate(), dt.Replicate())


def test_spmd_code_per_rank_builds_a_dtensor():
    # SPMD code written for one rank: each rank makes its own shard.
    mesh = dt.init_device_mesh((4,))
    shards = {}
    for r in dt.each_rank(mesh):
        shards[r] = dt.full((2, 3), float(mesh.get_rank()))
    d = dt.DTensor.from_local(shards, mesh, [dt.Shard(0)])
    np.testing.assert_array_equal(np.asarray(d.full_tensor())[:, 0], [0, 0, 1, 1, 2, 2, 3, 3])


# ---- distribute_tensor, redistribute ----------------------------------------------

def test_distribute_tensor_defaults_to_replicate():
    mesh = mesh22()
    d = dt.distribute_tensor(np.ones((3, 2)), mesh)
    assert d.placements == (dt.Replicate(), dt.Replicate())


@pytest.mark.parametrize("placements", [[dt.Shard(0), dt.Shard(1)], [dt.Replicate(), dt.Shard(0)],
                                        [dt.Shard(1), dt.Replicate()]])
def test_src_data_rank(placements):
    mesh = dt.init_device_mesh((2, 3))
    a = np.arange(35.0).reshape(5, 7)
    local = dt.distribute_tensor(a, mesh, placements, src_data_rank=None)
    for k in (0, 1):
        with dt.CommDebugMode() as comm:
            sent = dt.distribute_tensor(a, mesh, placements, src_data_rank=k)
        assert comm.get_total_counts() > 0  # scattered / broadcast, not cut locally
        assert sent.placements == local.placements
        np.testing.assert_array_equal(np.asarray(sent.full_tensor()), a)
        for r in range(6):
            np.testing.assert_array_equal(np.asarray(sent.to_local(r)), np.asarray(local.to_local(r)))
    with dt.CommDebugMode() as comm:
        dt.distribute_tensor(a, mesh, placements)
    assert comm.get_total_counts() == 0  # dtensor's default: each rank cuts its own
    with pytest.raises(dt.Error, match="src_data_rank=2 is not a rank of mesh dim 0 of size 2"):
        dt.distribute_tensor(a, mesh, placements, src_data_rank=2)
    with pytest.raises(dt.Error, match="both given"):
        dt.distribute_tensor(a, mesh, placements, src_data_rank=0, src_rank=0)


def test_src_data_rank_on_a_sub_mesh_is_refused():
    mesh = mesh22()
    with pytest.raises(dt.Error, match="sub-mesh"):
        dt.distribute_tensor(np.ones(4), mesh["tp"], [dt.Shard(0)], src_data_rank=0)


def test_redistribute_in_pytorchs_argument_order():
    mesh = mesh22()
    a = np.arange(12.0).reshape(4, 3)
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    for r in (d.redistribute(mesh, [dt.Replicate(), dt.Shard(0)]),
              d.redistribute(device_mesh=mesh, placements=[dt.Replicate(), dt.Shard(0)]),
              d.redistribute([dt.Replicate(), dt.Shard(0)], async_op=True),
              d.redistribute(placements="R,S(0)")):
        assert r.placements == (dt.Replicate(), dt.Shard(0))
        np.testing.assert_array_equal(np.asarray(r.full_tensor()), a)
    h = d.redistribute([dt.Replicate(), dt.Replicate()], forward_dtype=dt.float32)
    assert h.dtype == dt.float32
    with pytest.raises(dt.Error, match="placements missing"):
        d.redistribute(mesh)


def test_redistribute_grad_placements_moves_the_gradient():
    mesh = dt.init_device_mesh((4,))
    x = dt.distribute_tensor(np.arange(8.0), mesh, [dt.Shard(0)]).requires_grad_()
    y = x.redistribute([dt.Replicate()], grad_placements=[dt.Replicate()])
    (y * y).sum().backward()
    assert x.grad.placements == (dt.Replicate(),)
    np.testing.assert_array_equal(np.asarray(x.grad.full_tensor()), 2 * np.arange(8.0))


def test_to_local_and_full_tensor_grad_placements():
    mesh = dt.init_device_mesh((4,))
    x = dt.distribute_tensor(np.arange(8.0), mesh, [dt.Shard(0)])
    # no gradient to place: accepted, the values as without it
    assert x.full_tensor(grad_placements=[dt.Partial()]).tolist() == list(np.arange(8.0))
    assert x.to_local(rank=1, grad_placements=[dt.Shard(0)]).tolist() == [2.0, 3.0]
    with pytest.raises(dt.Error, match="grad_placements has 2 placements for a 1-d mesh"):
        x.full_tensor(grad_placements=[dt.Replicate(), dt.Replicate()])
    x.requires_grad_()
    # the plain Tensor has no autograd: a gradient would be lost, so refused
    with pytest.raises(dt.Error, match="requires grad.*no autograd"):
        x.full_tensor(grad_placements=[dt.Replicate()])
    with pytest.raises(dt.Error, match="requires grad.*no autograd"):
        x.to_local(rank=0, grad_placements=[dt.Partial()])
    with dt.no_grad():
        assert x.to_local(rank=0, grad_placements=[dt.Partial()]).tolist() == [0.0, 1.0]


# ---- loss_parallel -----------------------------------------------------------------

def torch_ce(logits, labels, **kw):
    t = torch.tensor(logits, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(t, torch.tensor(labels), **kw)
    loss.sum().backward()
    return loss.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("shape,placements", [
    ((6, 10), [dt.Shard(0), dt.Shard(1)]),      # batch over dp, classes over tp
    ((6, 10), [dt.Replicate(), dt.Shard(1)]),
    ((5, 7), [dt.Shard(0), dt.Shard(-1)]),      # uneven
    ((4, 6, 3), [dt.Shard(0), dt.Shard(1)]),    # (N, C, d): the class dim is 1
])
@pytest.mark.parametrize("kw", [{}, dict(reduction="sum"), dict(ignore_index=2),
                                dict(reduction="none")])
def test_loss_parallel_equals_replicated_and_torch(rng, shape, placements, kw):
    mesh = mesh22()
    logits = rng.standard_normal(shape)
    labels = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    ref_loss, ref_grad = torch_ce(logits, labels, **kw)
    x = dt.distribute_tensor(logits, mesh, placements).requires_grad_()
    y = dt.distribute_tensor(labels, mesh, [placements[0], dt.Replicate()])
    with loss_parallel():
        with dt.CommDebugMode() as comm:
            loss = dt.cross_entropy(x, y, **kw)
        (loss.sum() if kw.get("reduction") == "none" else loss).backward()
    assert set(comm.get_comm_counts()) == {"all_reduce"}  # the logits stay sharded (no all_to_all or all_gather of them)
    np.testing.assert_allclose(np.asarray(loss.full_tensor()), ref_loss, rtol=1e-12, atol=1e-12)
    assert x.grad.placements == x.placements
    np.testing.assert_allclose(np.asarray(x.grad.full_tensor()), ref_grad, rtol=1e-12, atol=1e-12)
    # outside the context: the ordinary op, the same values
    x2 = dt.distribute_tensor(logits, mesh, placements).requires_grad_()
    loss2 = dt.cross_entropy(x2, y, **kw)
    (loss2.sum() if kw.get("reduction") == "none" else loss2).backward()
    np.testing.assert_allclose(np.asarray(loss2.full_tensor()), ref_loss, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(x2.grad.full_tensor()), ref_grad, rtol=1e-12, atol=1e-12)


def test_loss_parallel_plain_target_is_each_ranks_own(rng):
    # PyTorch's: the target is the rank's own (from_local of it), its rows
    # those of the rank's logits - here each dp rank's half of the batch.
    mesh = mesh22()
    logits = rng.standard_normal((8, 6))
    labels = rng.integers(0, 6, (8,))
    w = rng.random(6) + 0.5
    ref_loss, ref_grad = torch_ce(logits, labels, weight=torch.tensor(w))
    x = dt.distribute_tensor(logits, mesh, [dt.Shard(0), dt.Shard(1)]).requires_grad_()
    own = dt.tensor(labels).chunk(2)[mesh.get_local_rank(0)]
    assert isinstance(own, dt.RankLocal) and own.shape == (4,)
    with loss_parallel():
        loss = dt.cross_entropy(x, own, weight=w)
        loss.backward()
    np.testing.assert_allclose(float(np.asarray(loss.full_tensor())), ref_loss, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x.grad.full_tensor()), ref_grad, rtol=1e-12)
    # One plain tensor is every rank's own: the global target is two copies
    # of it, which the 8 rows of logits do not match.
    with loss_parallel(), pytest.raises(dt.Error, match="target \\[16\\]"):
        dt.cross_entropy(x, dt.tensor(labels))
    # Where the batch is not split, every rank's own target is the whole one.
    y = dt.distribute_tensor(logits, mesh, [dt.Replicate(), dt.Shard(1)]).requires_grad_()
    with loss_parallel():
        loss = dt.cross_entropy(y, labels, weight=w)
    np.testing.assert_allclose(float(np.asarray(loss.full_tensor())), ref_loss, rtol=1e-12)


def test_loss_parallel_refuses_what_it_cannot_do(rng):
    mesh = mesh22()
    x = dt.distribute_tensor(rng.standard_normal((4, 6)), mesh, [dt.Replicate(), dt.Shard(1)])
    y = dt.distribute_tensor(np.array([0, 1, 2, 3]), mesh, [dt.Replicate(), dt.Replicate()])
    with loss_parallel():
        with pytest.raises(dt.Error, match="label_smoothing=0.1 is not implemented"):
            dt.cross_entropy(x, y, label_smoothing=0.1)
        with pytest.raises(dt.Error, match="by keyword"):
            dt.cross_entropy(x, y, "sum")
        # not sharded on the classes: the ordinary op
        a = rng.standard_normal((4, 6))
        r = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()])
        np.testing.assert_allclose(float(np.asarray(dt.cross_entropy(r, y).full_tensor())),
                                   torch_ce(a, np.array([0, 1, 2, 3]))[0], rtol=1e-12)


# ---- parallel styles and fully_shard's keywords ------------------------------------

def test_use_local_output():
    for style in (dt.ColwiseParallel, dt.RowwiseParallel, dt.SequenceParallel,
                  dt.PrepareModuleInput, dt.PrepareModuleOutput):
        style(use_local_output=False)
        with pytest.raises(dt.Error, match="use_local_output=True.*not supported"):
            style(use_local_output=True)


def test_fully_shard_mp_policy_and_offload_policy(rng):
    mesh = dt.init_device_mesh((4,))
    x = dt.distribute_tensor(rng.standard_normal((8, 4)).astype(np.float32), mesh, [dt.Shard(0)])
    ref = dt.nn.Linear(mesh, 4, 3, seed=1)
    mp = dt.parallel.MixedPrecisionPolicy(param_dtype=dt.bfloat16, output_dtype=dt.float64)
    assert mp.param_dtype == dt.bfloat16 and mp.reduce_dtype is None and mp.cast_forward_inputs
    m = dt.fully_shard(dt.nn.Linear(mesh, 4, 3, seed=1), mp_policy=mp,
                       offload_policy=dt.parallel.OffloadPolicy())
    assert m.weight.dtype == dt.float32  # the sharded master weights keep theirs
    y, y_ref = m(x), ref(x)
    assert y.dtype == dt.float64
    # computed from bfloat16 parameters and inputs: close to, not equal to, float32's
    diff = np.abs(np.asarray(y.full_tensor()) - np.asarray(y_ref.full_tensor()))
    assert 0 < diff.max() < 0.1
    with pytest.raises(dt.Error, match="CPUOffloadPolicy.*not supported"):
        dt.fully_shard(dt.nn.Linear(mesh, 4, 3), offload_policy=dt.parallel.CPUOffloadPolicy())
    with pytest.raises(TypeError, match="mp_policy"):
        dt.fully_shard(dt.nn.Linear(mesh, 4, 3), mp_policy="bf16")
    r = dt.replicate(dt.nn.Linear(mesh, 4, 3, seed=1),
                     mp_policy=dt.parallel.MixedPrecisionPolicy(reduce_dtype=dt.float64))
    r(x).sum().backward()
    assert r.weight.grad.dtype == dt.float32


def test_sub_mesh_ranks_follow_the_current_rank():
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    assert mesh.ranks() == [0, 1, 2, 3]
    assert mesh["tp"].ranks(3) == [2, 3]
    for r in dt.each_rank(mesh):
        tp = mesh["tp"].ranks()
        assert r in tp and tp == mesh["tp"].ranks(r)
        assert mesh["dp"].ranks() == mesh["dp"].ranks(r)
