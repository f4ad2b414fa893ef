# PyTorch's arguments and conversions against torch 1.13 (Debian's
# python3-torch): item()/float/int/bool, dtype= on reductions and softmax,
# cross_entropy / nll_loss with weight, label_smoothing and probability
# targets, embedding's padding_idx, var's unbiased=, norm's p="fro",
# squeeze with a tuple, where(cond), clamp with tensor bounds, sizes as
# varargs, and dropout's training= and global generator. Values on Tensors
# and DTensors of several layouts (uneven shards included), gradients on
# DTensors.
import numpy as np
import pytest

import dtensor as dt

torch = pytest.importorskip("torch")
F = torch.nn.functional

LAYOUTS = [[dt.Replicate(), dt.Replicate()], [dt.Shard(0), dt.Replicate()],
           [dt.Shard(0), dt.Shard(1)], [dt.Shard(1), dt.Shard(0)]]


def np_of(t):
    return np.asarray(t.full_tensor() if hasattr(t, "full_tensor") else t)


@pytest.fixture
def mesh():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))


def each_layer(a, mesh, layouts=LAYOUTS):
    """a as a Tensor, then as DTensors of each layout."""
    yield dt.tensor(a)
    for pl in layouts:
        yield dt.distribute_tensor(a, mesh, pl)


def test_item_and_number_conversions(mesh):
    for value in (np.array([2.5]), np.array([[3]], dtype=np.int64), np.array(True),
                  np.array([0.0], dtype=np.float32)):
        t = torch.tensor(value)
        for x in each_layer(value, mesh, [[dt.Replicate(), dt.Replicate()], [dt.Shard(0), dt.Replicate()]]
                            if value.ndim else [[dt.Replicate(), dt.Replicate()]]):
            assert x.item() == t.item() and type(x.item()) is type(t.item())
            assert float(x) == float(t) and int(x) == int(t) and bool(x) == bool(t)
    many = np.arange(6.0).reshape(2, 3)
    for x in each_layer(many, mesh):
        with pytest.raises(dt.Error, match="one element"):
            x.item()
        with pytest.raises(dt.Error, match="one element"):
            float(x)
        with pytest.raises(dt.Error, match="ambiguous"):
            bool(x)
    # A sum over shards (a Partial before it is read) gives its full value.
    s = dt.sum(dt.distribute_tensor(np.arange(1.0, 6.0), mesh, [dt.Shard(0), dt.Replicate()]))
    assert s.item() == 15.0 and float(s) == 15.0 and int(s) == 15


def test_reductions_and_softmax_cast_to_dtype_first(mesh):
    ints = np.arange(1, 16, dtype=np.int64).reshape(5, 3)
    floats = np.linspace(-2, 2, 15, dtype=np.float32).reshape(5, 3)
    for a in (ints, floats):
        ta = torch.tensor(a)
        for x in each_layer(a, mesh):
            for name in ("sum", "mean", "prod"):
                want = getattr(torch, name)(ta, 1, dtype=torch.float64)
                got = getattr(dt, name)(x, 1, dtype=dt.float64)
                assert got.dtype == dt.float64
                np.testing.assert_allclose(np_of(got), want.numpy(), rtol=1e-12, atol=1e-12)
                got = getattr(x, name)(dtype=dt.float64)
                np.testing.assert_allclose(np_of(got), getattr(torch, name)(ta, dtype=torch.float64).numpy(),
                                           rtol=1e-12, atol=1e-12)
            got = dt.cumsum(x, 0, dtype=dt.float64)
            assert got.dtype == dt.float64
            np.testing.assert_allclose(np_of(got), torch.cumsum(ta, 0, dtype=torch.float64).numpy())
            if a.dtype == np.float32:
                for name in ("softmax", "log_softmax"):
                    want = getattr(torch, name)(ta, 1, dtype=torch.float64)
                    got = getattr(dt, name)(x, 1, dtype=dt.float64)
                    assert got.dtype == dt.float64
                    np.testing.assert_allclose(np_of(got), want.numpy(), rtol=1e-12, atol=1e-12)
                    np.testing.assert_allclose(np_of(getattr(x, name)(1, dtype=dt.float64)),
                                               want.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError):
        dt.amax(dt.tensor(floats), dtype=dt.float64)  # torch's amax has no dtype=


def loss_cases():
    """(kwargs for both, whether the target holds probabilities)."""
    w = np.array([0.5, 2.0, 1.0, 0.25, 3.0])
    out = []
    for reduction in ("mean", "sum", "none"):
        out.append((dict(reduction=reduction, weight=w), False))
        out.append((dict(reduction=reduction, weight=w, ignore_index=2), False))
        out.append((dict(reduction=reduction, label_smoothing=0.2), False))
        out.append((dict(reduction=reduction, weight=w, label_smoothing=0.1, ignore_index=1), False))
        out.append((dict(reduction=reduction), True))
        out.append((dict(reduction=reduction, weight=w, label_smoothing=0.3), True))
    return out


def torch_kwargs(kw):
    return {k: (torch.tensor(v) if k == "weight" else v) for k, v in kw.items()}


def test_cross_entropy_and_nll_loss_arguments_match_torch(mesh):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((6, 5))
    target = np.array([0, 2, 4, 1, 2, 3], dtype=np.int64)
    probs = rng.random((6, 5))
    probs /= probs.sum(1, keepdims=True)
    batch = [[dt.Replicate(), dt.Replicate()], [dt.Shard(0), dt.Replicate()], [dt.Shard(0), dt.Shard(0)]]
    for kw, prob in loss_cases():
        tgt = probs if prob else target
        tl = torch.tensor(logits, requires_grad=True)
        want = F.cross_entropy(tl, torch.tensor(tgt), **torch_kwargs(kw))
        want.sum().backward()
        got = dt.cross_entropy(dt.tensor(logits), dt.tensor(tgt), **{**kw, **(
            {"weight": dt.tensor(kw["weight"])} if "weight" in kw else {})})
        np.testing.assert_allclose(np_of(got), want.detach().numpy(), rtol=1e-12, atol=1e-14)
        for pl in batch:
            d = dt.distribute_tensor(logits, mesh, pl).requires_grad_()
            dtgt = dt.distribute_tensor(tgt, mesh, pl if prob else pl)
            dkw = dict(kw)
            if "weight" in kw:
                dkw["weight"] = dt.distribute_tensor(kw["weight"], mesh, [dt.Replicate(), dt.Replicate()])
            loss = dt.cross_entropy(d, dtgt, **dkw)
            np.testing.assert_allclose(np_of(loss), want.detach().numpy(), rtol=1e-12, atol=1e-14)
            dt.sum(loss).backward()
            np.testing.assert_allclose(np_of(d.grad), tl.grad.numpy(), rtol=1e-10, atol=1e-14)
        if not prob and kw.get("label_smoothing", 0) == 0:  # nll_loss takes the same weights
            lp = torch.log_softmax(torch.tensor(logits), 1)
            want = F.nll_loss(lp, torch.tensor(target), **torch_kwargs(kw))
            got = dt.nll_loss(dt.log_softmax(dt.tensor(logits), 1), dt.tensor(target), **{**kw, **(
                {"weight": dt.tensor(kw["weight"])} if "weight" in kw else {})})
            np.testing.assert_allclose(np_of(got), want.numpy(), rtol=1e-12, atol=1e-12)


def test_cross_entropy_argument_errors():
    x = dt.tensor(np.zeros((2, 3)))
    with pytest.raises(dt.Error, match="ignore_index is not supported for a probability"):
        dt.cross_entropy(x, dt.tensor(np.full((2, 3), 1 / 3)), ignore_index=0)
    with pytest.raises(dt.Error, match="one value per class"):
        dt.cross_entropy(x, dt.tensor(np.array([0, 1])), weight=dt.tensor(np.ones(2)))
    with pytest.raises(dt.Error, match="label_smoothing must be in"):
        dt.cross_entropy(x, dt.tensor(np.array([0, 1])), label_smoothing=1.5)
    with pytest.raises(dt.Error, match="deprecated"):
        dt.cross_entropy(x, dt.tensor(np.array([0, 1])), size_average=True)


def test_embedding_padding_idx_gets_no_gradient(mesh):
    rng = np.random.default_rng(4)
    table = rng.standard_normal((7, 4))
    ids = np.array([[1, 0, 6], [0, 3, 6]], dtype=np.int64)
    for pad in (0, -1):
        tw = torch.tensor(table, requires_grad=True)
        want = F.embedding(torch.tensor(ids), tw, padding_idx=pad)
        (want * torch.arange(4.0)).sum().backward()
        np.testing.assert_array_equal(np_of(dt.embedding(dt.tensor(ids), dt.tensor(table), padding_idx=pad)),
                                      want.detach().numpy())
        for pl in ([dt.Replicate(), dt.Replicate()], [dt.Shard(0), dt.Replicate()], [dt.Shard(1), dt.Shard(0)]):
            w = dt.distribute_tensor(table, mesh, pl).requires_grad_()
            i = dt.distribute_tensor(ids, mesh, [dt.Replicate(), dt.Shard(1)])
            got = dt.embedding(i, w, padding_idx=pad)  # F.embedding's order
            np.testing.assert_array_equal(np_of(got), want.detach().numpy())
            arange = dt.distribute_tensor(np.arange(4.0), mesh, [dt.Replicate(), dt.Replicate()])
            dt.sum(got * arange).backward()
            np.testing.assert_array_equal(np_of(w.grad), tw.grad.numpy())
    with pytest.raises(dt.Error, match="padding_idx must be within"):
        dt.embedding(dt.tensor(ids), dt.tensor(table), padding_idx=7)


def test_var_norm_squeeze_where_clamp(mesh):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((5, 3))
    ta = torch.tensor(a)
    for x in each_layer(a, mesh):
        np.testing.assert_allclose(np_of(dt.var(x, 1, unbiased=False)), torch.var(ta, 1, unbiased=False).numpy())
        np.testing.assert_allclose(np_of(dt.var(x, 0, False)), torch.var(ta, 0, False).numpy())
        np.testing.assert_allclose(np_of(x.var(1, unbiased=True, keepdim=True)),
                                   ta.var(1, unbiased=True, keepdim=True).numpy())
        np.testing.assert_allclose(np_of(dt.var(x, 1, correction=0)), torch.var(ta, 1, unbiased=False).numpy())
        np.testing.assert_allclose(np_of(dt.norm(x, p="fro")), torch.norm(ta, p="fro").numpy())
        np.testing.assert_allclose(np_of(x.norm("fro", dim=1)), ta.norm("fro", dim=1).numpy())
        np.testing.assert_allclose(np_of(dt.norm(x)), torch.norm(ta).numpy())
        with pytest.raises(dt.Error, match="nuc.*not implemented"):
            dt.norm(x, p="nuc")
    with pytest.raises(dt.Error, match="unbiased or correction"):
        dt.var(dt.tensor(a), 1, unbiased=True, correction=0)
    b = np.arange(6.0).reshape(1, 3, 1, 2)
    tb = torch.tensor(b)
    for x in each_layer(b, mesh, [[dt.Replicate(), dt.Replicate()], [dt.Shard(1), dt.Shard(3)]]):
        for dims in ((0, 2), (0, 1), (-2,), (3, 0)):
            want = tb
            for d in sorted([d % 4 for d in dims], reverse=True):
                want = want.squeeze(d)  # torch 1.13 takes one dim at a time
            assert tuple(dt.squeeze(x, dims).shape) == tuple(want.shape)
            np.testing.assert_array_equal(np_of(x.squeeze(dims)), want.numpy())
        with pytest.raises(dt.Error, match="multiple times"):
            dt.squeeze(x, (0, -4))
    c = np.array([[0, 2, 0], [1, 0, 3]], dtype=np.int64)
    for x in each_layer(c, mesh, [[dt.Shard(0), dt.Shard(1)]]):
        for got, want in zip(dt.where(x), torch.where(torch.tensor(c))):
            np.testing.assert_array_equal(np_of(got), want.numpy())
        for got, want in zip(dt.where(x > 0), torch.where(torch.tensor(c) > 0)):
            np.testing.assert_array_equal(np_of(got), want.numpy())


def test_clamp_with_tensor_bounds_values_and_gradients(mesh):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((5, 4))
    lo = rng.standard_normal(4) - 0.5
    hi = rng.standard_normal((5, 1)) + 0.5
    ta = torch.tensor(a, requires_grad=True)
    tlo = torch.tensor(lo, requires_grad=True)
    thi = torch.tensor(hi, requires_grad=True)
    want = torch.clamp(ta, min=tlo, max=thi)
    (want * torch.arange(20.0).view(5, 4)).sum().backward()
    np.testing.assert_array_equal(np_of(dt.clamp(dt.tensor(a), min=dt.tensor(lo), max=dt.tensor(hi))),
                                  want.detach().numpy())
    np.testing.assert_array_equal(np_of(dt.tensor(a).clamp(min=dt.tensor(lo))),
                                  torch.clamp(torch.tensor(a), min=torch.tensor(lo)).numpy())
    rep = [dt.Replicate(), dt.Replicate()]
    for pl in LAYOUTS:
        x = dt.distribute_tensor(a, mesh, pl).requires_grad_()
        dlo = dt.distribute_tensor(lo, mesh, rep).requires_grad_()
        dhi = dt.distribute_tensor(hi, mesh, rep).requires_grad_()
        got = x.clamp(min=dlo, max=dhi)
        np.testing.assert_array_equal(np_of(got), want.detach().numpy())
        dt.sum(got * dt.distribute_tensor(np.arange(20.0).reshape(5, 4), mesh, pl)).backward()
        np.testing.assert_array_equal(np_of(x.grad), ta.grad.numpy())
        np.testing.assert_array_equal(np_of(dlo.grad), tlo.grad.numpy())
        np.testing.assert_array_equal(np_of(dhi.grad), thi.grad.numpy())
    nan = dt.clamp(dt.tensor(a), min=dt.tensor(np.full(4, np.nan)))
    assert np.isnan(np_of(nan)).all()


def test_sizes_as_varargs(mesh):
    for name in ("zeros", "ones", "empty"):
        f = getattr(dt, name)
        assert tuple(f(2, 3).shape) == (2, 3) == tuple(f((2, 3)).shape) == tuple(f(size=(2, 3)).shape)
        assert f(2, 3, dtype=dt.float64).dtype == dt.float64
        d = f(4, 3, device_mesh=mesh, placements=[dt.Shard(0), dt.Replicate()])
        assert tuple(d.shape) == (4, 3) and d.placements == (dt.Shard(0), dt.Replicate())
    np.testing.assert_array_equal(np_of(dt.ones(2, 3, dtype=dt.int64)), torch.ones(2, 3, dtype=torch.int64).numpy())
    np.testing.assert_array_equal(np_of(dt.randn(2, 3, seed=5)), np_of(dt.randn((2, 3), seed=5)))
    np.testing.assert_array_equal(np_of(dt.rand(2, 3, seed=5)), np_of(dt.rand(size=[2, 3], seed=5)))
    x = dt.tensor(np.arange(6.0))
    assert tuple(x.new_zeros(2, 3).shape) == (2, 3) and x.new_ones(2, 3, dtype=dt.int64).dtype == dt.int64
    assert tuple(x.new_empty(3, 1).shape) == (3, 1)
    t = torch.arange(6.0)
    np.testing.assert_array_equal(np_of(x.reshape(2, 3).permute(1, 0).repeat(2, 1)),
                                  t.reshape(2, 3).permute(1, 0).repeat(2, 1).numpy())
    np.testing.assert_array_equal(np_of(x.view(3, 2)), t.view(3, 2).numpy())
    with pytest.raises(TypeError, match="size given twice"):
        dt.zeros(2, size=(2, 3))


def test_dropout_training_and_global_generator(mesh):
    a = np.ones((8, 6))
    for x in each_layer(a, mesh):
        assert dt.dropout(x, 0.5, training=False) is x
        assert dt.dropout(x, p=0.3, training=False) is x
        dt.manual_seed(11)
        first = np_of(dt.dropout(x, 0.5))
        second = np_of(dt.dropout(x, 0.5))
        dt.manual_seed(11)
        np.testing.assert_array_equal(np_of(dt.dropout(x, 0.5)), first)
        assert not np.array_equal(first, second)
        assert set(np.unique(first)) <= {0.0, 2.0}
    # The same seed gives the same mask on a Tensor and on any DTensor layout.
    want = np_of(dt.dropout(dt.tensor(a), 0.25, seed=3))
    for pl in LAYOUTS:
        np.testing.assert_array_equal(np_of(dt.dropout(dt.distribute_tensor(a, mesh, pl), 0.25, seed=3)), want)
    x = dt.tensor(a.copy())
    assert dt.dropout(x, 0.5, inplace=True, seed=1) is x
    np.testing.assert_array_equal(np_of(x), np_of(dt.dropout(dt.tensor(a), 0.5, seed=1)))
    dt.manual_seed(2)
    r1 = np_of(dt.randn(3, 4))
    dt.manual_seed(2)
    np.testing.assert_array_equal(np_of(dt.randn(3, 4, device_mesh=mesh, placements=[dt.Shard(0), dt.Replicate()])), r1)
