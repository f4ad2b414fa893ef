# Per-rank values (dtensor.RankLocal): what PyTorch's per-process answers
# are in a simulated world, and SPMD code written for one rank running
# unchanged on it - the batch split by rank and fed to a model laid out by
# parallelize_module + fully_shard, and to loss_parallel's cross_entropy,
# giving what the global batch gives. The values are checked against the
# same step with the batch distributed as one DTensor (itself checked
# against torch in test_nn_modules.py), bit for bit.
import numpy as np
import pytest

import dtensor as dt
import dtensor.nn as nn
import dtensor.nn.functional as F
from dtensor.parallel import loss_parallel


def mesh22():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))


def full(d):
    return np.asarray(d.full_tensor())


# ---- RankLocal as a value ----------------------------------------------------------

def test_a_rank_local_acts_like_its_values_rank_by_rank():
    a = dt.RankLocal({1: 10, 0: 3})
    assert a.ranks == [0, 1] and a.by_rank == {0: 3, 1: 10}
    assert (a + 1).by_rank == {0: 4, 1: 11}
    assert (2 * a - a // 2).by_rank == {0: 5, 1: 15}
    assert (a + a).by_rank == {0: 6, 1: 20}
    assert (a > 5).by_rank == {0: False, 1: True}
    assert (a * 0) == 0  # equal non-tensors collapse to the plain value
    assert repr(a) == "RankLocal({0: 3, 1: 10})"
    assert f"{dt.RankLocal({0: 1.0, 2: 0.5}):.2f}" == "RankLocal({0: 1.00, 2: 0.50})"
    b = dt.RankLocal({0: [1, 2, 3], 1: [4, 5, 6]})
    assert len(b) == 3 and b[a // 5].by_rank == {0: 1, 1: 6}
    assert [v.by_rank for v in b] == [{0: 1, 1: 4}, {0: 2, 1: 5}, {0: 3, 1: 6}]
    with pytest.raises(dt.Error, match="len\\(\\).*per-rank value"):
        len(dt.RankLocal({0: [1], 1: [1, 2]}))
    with pytest.raises(dt.Error, match="different ranks"):
        a + dt.RankLocal({0: 1, 2: 1})
    with pytest.raises(dt.Error, match="non-empty dict"):
        dt.RankLocal({})
    with pytest.raises(dt.Error, match="rank must be an int"):
        dt.RankLocal({"0": 1})


def test_tensor_methods_and_attributes_map_over_the_ranks():
    t = dt.RankLocal({0: dt.arange(6.0).view(2, 3), 1: dt.arange(6.0, 12.0).view(2, 3)})
    assert t.shape == (2, 3) and t.dtype == dt.float32  # the same on every rank: plain
    s = t.flatten(0, 1).sum()
    assert isinstance(s, dt.RankLocal) and {r: v.item() for r, v in s.by_rank.items()} == {
        0: 15.0, 1: 51.0}
    u = t[:, 1:] * 2 + t.T.T[:, 1:]
    assert {r: v.tolist() for r, v in u.by_rank.items()} == {
        0: [[3.0, 6.0], [12.0, 15.0]], 1: [[21.0, 24.0], [30.0, 33.0]]}
    t[0, 0] = dt.RankLocal({0: -1.0, 1: -2.0})  # __setitem__ per rank
    assert t[0, 0].item().by_rank == {0: -1.0, 1: -2.0}
    # dtensor.rank_map runs any function per rank, as that rank
    got = dt.rank_map(lambda x, k: (dt.get_current_rank(), x.shape[0] + k), t, 5)
    assert got.by_rank == {0: (0, 7), 1: (1, 7)}
    assert dt.rank_map(lambda: 4) == 4  # no per-rank argument: one call


def test_pieces_take_a_per_rank_index():
    mesh = mesh22()
    x = dt.arange(10.0).view(5, 2)
    i = mesh.get_local_rank("dp")
    for pieces in (x.chunk(2), dt.chunk(x, 2), x.split(3), x.tensor_split(2)
                   if hasattr(x, "tensor_split") else x.chunk(2)):
        assert isinstance(pieces, tuple)
        mine = pieces[i]
        assert mine.ranks == [0, 1, 2, 3]
        for r, v in mine.by_rank.items():
            assert v.tolist() == pieces[r // 2].tolist()
    rows = x.unbind(0)[mesh.get_local_rank("tp")]
    assert {r: v.tolist() for r, v in rows.by_rank.items()} == {
        0: [0.0, 1.0], 1: [2.0, 3.0], 2: [0.0, 1.0], 3: [2.0, 3.0]}
    assert isinstance(x.chunk(5)[1:3], tuple) and len(x.chunk(5)[1:3]) == 2
    with pytest.raises(dt.Error, match="__index__.*current_rank"):
        [x, x][i]  # a plain list cannot take one: it needs one int


def test_from_local_and_to_local_of_rank_locals():
    mesh = mesh22()
    a = np.arange(24.0).reshape(4, 6)
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    mine = d.to_local()
    assert isinstance(mine, dt.RankLocal)
    back = dt.DTensor.from_local(mine * 1, mesh, [dt.Shard(0), dt.Shard(1)])
    np.testing.assert_array_equal(full(back), a)
    # inside current_rank every query is the plain value again
    with dt.current_rank(3):
        assert mesh.get_rank() == 3 and d.to_local().tolist() == a[2:, 3:].tolist()


# ---- A model fed each rank's own batch -----------------------------------------------

VOCAB, DIM = 16, 8


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.up = nn.Linear(DIM, 2 * DIM, bias=False)
        self.down = nn.Linear(2 * DIM, DIM, bias=False)
        self.out = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.emb(tokens)
        h = h + self.down(F.gelu(self.up(h)))
        return self.out(h)


def laid_out(mesh):
    dt.manual_seed(0)
    model = Tiny()
    dt.parallelize_module(model, mesh["tp"], {
        "emb": dt.RowwiseParallel(input_layouts=dt.Replicate()),
        "up": dt.ColwiseParallel(), "down": dt.RowwiseParallel(),
        "out": dt.ColwiseParallel(output_layouts=dt.Shard(-1), use_local_output=False)})
    dt.fully_shard(model, mesh=mesh["dp"])
    return model


def step(model, tokens, labels):
    with loss_parallel():
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1))
        loss.backward()
    return loss, {n: full(p.grad) for n, p in model.named_parameters()}


def test_each_ranks_own_batch_is_the_global_batch_sharded_over_dp():
    data = np.random.default_rng(3).integers(0, VOCAB, (4, 7))
    tokens, labels = dt.tensor(data[:, :-1]), dt.tensor(data[:, 1:])
    mesh = mesh22()
    global_view = laid_out(mesh)
    want_loss, want_grads = step(
        global_view, dt.distribute_tensor(tokens, mesh, [dt.Shard(0), dt.Replicate()]),
        dt.distribute_tensor(labels, mesh, [dt.Shard(0), dt.Replicate()]))

    spmd = laid_out(mesh)  # as a PyTorch script writes it, for one rank
    dp = mesh["dp"]
    loss, grads = step(spmd, tokens.chunk(dp.size())[dp.get_local_rank()],
                       labels.chunk(dp.size())[dp.get_local_rank()])
    assert full(loss).tolist() == full(want_loss).tolist()
    assert grads.keys() == want_grads.keys()
    for name in grads:
        np.testing.assert_array_equal(grads[name], want_grads[name], err_msg=name)


def test_one_plain_tensor_is_every_ranks_own_batch():
    # As under MPI with every process passing the same rows: the global
    # batch is that tensor once per dp rank.
    data = np.random.default_rng(4).integers(0, VOCAB, (2, 5))
    mesh = mesh22()
    model = laid_out(mesh)
    logits = model(dt.tensor(data))
    assert logits.shape == (4, 5, VOCAB)
    assert logits.placements == (dt.Shard(0), dt.Shard(2))
    whole = full(logits)
    np.testing.assert_array_equal(whole[:2], whole[2:])


def test_a_module_without_data_parallelism_takes_the_batch_replicated():
    mesh = dt.init_device_mesh((4,), mesh_dim_names=("tp",))
    dt.manual_seed(1)
    lin = nn.Linear(4, 8)
    dt.parallelize_module(lin, mesh, dt.ColwiseParallel(use_local_output=False))
    x = dt.arange(8.0).view(2, 4)
    y = lin(x)
    assert y.placements == (dt.Shard(1),)
    np.testing.assert_allclose(full(y), full(lin(dt.distribute_tensor(x, mesh, [dt.Replicate()]))))
    # per-rank batches of different sizes make no DTensor:
    odd = dt.RankLocal({r: dt.ones((r % 2 + 1, 4)) for r in range(4)})
    with pytest.raises(dt.Error, match="shape"):
        lin(odd)
