# dtensor.nn as torch.nn, checked against PyTorch 1.13: containers and
# parameter names, the small modules, nn.functional, nn.init, the Module API
# (train/eval, buffers, state_dict/load_state_dict, apply, ...), forward with
# several arguments, and modules made without a mesh, laid out afterwards by
# parallelize_module and fully_shard (a Llama-style model end to end).
from collections import OrderedDict

import numpy as np
import pytest

import dtensor as dt
import dtensor.nn as nn
import dtensor.nn.functional as F
import dtensor.nn.init as init

torch = pytest.importorskip("torch")
tnn, TF = torch.nn, torch.nn.functional

LAYOUTS = [
    [dt.Replicate(), dt.Replicate()],
    [dt.Shard(0), dt.Replicate()],
    [dt.Shard(0), dt.Shard(1)],
    [dt.Replicate(), dt.Shard(1)],
]


@pytest.fixture
def mesh():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"), world=dt.World.simulated(4))


def full(d):
    return np.asarray(d.full_tensor() if isinstance(d, dt.DTensor) else d)


def tt(a, grad=False):
    t = torch.tensor(np.asarray(a))
    return t.requires_grad_() if grad else t


def copy_weights(ours, theirs):
    """torch module <- our parameters, by name."""
    sd = {k: tt(full(v)) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(sd)


# ---- containers and names ------------------------------------------------------------


def test_sequential_names_indexing_and_append_as_torch():
    ours = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    theirs = tnn.Sequential(tnn.Linear(4, 8), tnn.ReLU(), tnn.Linear(8, 2))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert len(ours) == 3 and isinstance(ours[1], nn.ReLU) and ours[-1] is ours[2]
    assert [type(m).__name__ for m in ours] == ["Linear", "ReLU", "Linear"]
    ours.append(nn.SiLU())
    theirs.append(tnn.SiLU())
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    named = nn.Sequential(OrderedDict([("fc", nn.Linear(4, 4)), ("act", nn.GELU())]))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]
    assert named[0] is named.fc
    # forward runs each in turn
    copy_weights(ours, theirs)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(full(ours(dt.tensor(x))), theirs(tt(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_module_list_and_dict_as_torch():
    ours = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    ours.append(nn.Linear(2, 3))
    ours.extend([nn.Linear(3, 3)])
    theirs = tnn.ModuleList([tnn.Linear(2, 2) for _ in range(2)])
    theirs.append(tnn.Linear(2, 3))
    theirs.extend([tnn.Linear(3, 3)])
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert len(ours) == 4 and ours[3].out_features == 3 and ours[-1] is ours[3]
    assert [m.out_features for m in ours[1:3]] == [2, 3]
    assert [m.out_features for m in ours] == [2, 2, 3, 3]
    with pytest.raises(dt.Error, match="cannot be removed or replaced"):
        ours[0] = nn.Linear(2, 2)
    d = nn.ModuleDict({"up": nn.Linear(2, 4), "down": nn.Linear(4, 2)})
    d["act"] = nn.ReLU()
    assert list(d.keys()) == ["up", "down", "act"] and len(d) == 3 and "up" in d
    assert [k for k in d] == list(d.keys()) and d["down"].in_features == 4
    assert [n for n, _ in d.named_parameters()] == ["up.weight", "up.bias", "down.weight",
                                                   "down.bias"]
    assert [k for k, _ in d.items()] == ["up", "down", "act"] and len(d.values()) == 3
    with pytest.raises(KeyError):
        d["missing"]
    with pytest.raises(dt.Error, match="cannot be removed"):
        d.pop("up")


# ---- the modules, against torch ------------------------------------------------------


def check_module(ours, theirs, x, mesh=None, layouts=(None,), atol=1e-5, int_input=False):
    """Values and every gradient of ours vs theirs (weights copied), meshless
    and, given a mesh, with the input in each layout."""
    copy_weights(ours, theirs)
    tx = tt(x, grad=not int_input)
    ty = theirs(tx)
    tg = tt(np.random.default_rng(9).standard_normal(tuple(ty.shape)).astype(np.float32))
    (ty * tg).sum().backward()
    for layout in layouts:
        ours.zero_grad()
        if layout is None:
            dx = dt.distribute_tensor(dt.tensor(x), nn.Module().device_mesh, [dt.Replicate()])
        else:
            dx = dt.distribute_tensor(dt.tensor(x), mesh, layout)
        if not int_input:
            dx.requires_grad_()
        y = ours(dx)
        np.testing.assert_allclose(full(y), ty.detach().numpy(), rtol=1e-5, atol=atol)
        g = dt.distribute_tensor(dt.tensor(tg.numpy()), y.device_mesh, y.placements)
        (y * g).sum().backward()
        if not int_input:
            np.testing.assert_allclose(full(dx.grad), tx.grad.numpy(), rtol=1e-5, atol=atol)
        tgrads = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            np.testing.assert_allclose(full(p.grad), tgrads[name].grad.numpy(), rtol=1e-4,
                                       atol=atol, err_msg=name)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_as_torch(mesh, bias):
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    ours = nn.Linear(6, 5, bias=bias)
    assert ours.in_features == 6 and ours.out_features == 5 and (ours.bias is None) != bias
    check_module(ours, tnn.Linear(6, 5, bias=bias), x)
    # torch's initialisation: uniform within 1/sqrt(in_features)
    w = full(nn.Linear(100, 300).weight)
    assert np.abs(w).max() <= 0.1 and np.abs(w).max() > 0.099
    assert abs(w.std() - 0.1 / np.sqrt(3)) < 0.003


def test_activations_as_torch(mesh):
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    for ours, theirs in [(nn.ReLU(), tnn.ReLU()), (nn.SiLU(), tnn.SiLU()),
                         (nn.GELU(), tnn.GELU()), (nn.GELU(approximate="tanh"),
                                                   tnn.GELU(approximate="tanh"))]:
        check_module(ours, theirs, x)
    with pytest.raises(dt.Error, match="approximate"):
        nn.GELU(approximate="fast")


def test_layer_norm_and_embedding_as_torch(mesh):
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    ln, tln = nn.LayerNorm(6), tnn.LayerNorm(6)
    with dt.no_grad():
        ln.weight.copy_(dt.distribute_tensor(dt.tensor(np.linspace(0.5, 2, 6, dtype=np.float32)),
                                             ln.weight.device_mesh, ln.weight.placements))
    check_module(ln, tln, x)
    check_module(nn.LayerNorm((6,), eps=1e-3), tnn.LayerNorm((6,), eps=1e-3), x)
    ids = np.array([[1, 0, 3], [3, 2, 0]], dtype=np.int64)
    emb = nn.Embedding(5, 3)
    assert emb.num_embeddings == 5 and emb.embedding_dim == 3 and emb.padding_idx is None
    check_module(emb, tnn.Embedding(5, 3), ids, int_input=True)
    # padding_idx: the row starts at zero and gets no gradient, as torch's
    pad = nn.Embedding(5, 3, padding_idx=0)
    assert np.all(full(pad.weight)[0] == 0) and pad.padding_idx == 0
    check_module(pad, tnn.Embedding(5, 3, padding_idx=0), ids, int_input=True)
    assert np.all(full(pad.weight.grad)[0] == 0)


def test_rms_norm_formula(mesh):
    # torch 1.13 has no RMSNorm: its definition, x / sqrt(mean(x^2) + eps) * weight
    x = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    norm = nn.RMSNorm(6, eps=1e-6)
    w = np.linspace(0.5, 2, 6, dtype=np.float32)
    with dt.no_grad():
        norm.weight.copy_(dt.distribute_tensor(dt.tensor(w), norm.weight.device_mesh,
                                               norm.weight.placements))

    class TorchRMSNorm(tnn.Module):
        def __init__(self):
            super().__init__()
            self.weight = tnn.Parameter(torch.ones(6))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    check_module(norm, TorchRMSNorm(), x)


UNEVEN = [[dt.Shard(0), dt.Replicate()], [dt.Replicate(), dt.Shard(1)],
          [dt.Shard(0), dt.Shard(1)], [dt.Replicate(), dt.Replicate()]]


def test_modules_laid_out_on_a_mesh_as_torch(mesh):
    # (5, 6): uneven shards over 2 ranks on either dim
    x = np.random.default_rng(12).standard_normal((5, 6)).astype(np.float32)
    for ours, theirs in [(nn.GELU(approximate="tanh"), tnn.GELU(approximate="tanh")),
                         (nn.SiLU(), tnn.SiLU()), (nn.ReLU(), tnn.ReLU()),
                         (nn.Dropout(0.3).eval(), tnn.Dropout(0.3).eval())]:
        check_module(ours, theirs, x, mesh, UNEVEN)
    dt.manual_seed(3)
    col, row = nn.Linear(6, 4), nn.Linear(6, 4)
    dt.parallelize_module(col, mesh["tp"], dt.ColwiseParallel())
    dt.parallelize_module(row, mesh["tp"], dt.RowwiseParallel())
    check_module(col, tnn.Linear(6, 4), x, mesh, UNEVEN)
    check_module(row, tnn.Linear(6, 4), x, mesh, UNEVEN)
    ln = dt.fully_shard(nn.LayerNorm(6), mesh=mesh["dp"])
    check_module(ln, tnn.LayerNorm(6), x, mesh, UNEVEN)
    ids = np.array([[1, 0, 3], [3, 2, 0], [4, 4, 1]], dtype=np.int64)
    emb = dt.parallelize_module(nn.Embedding(5, 3), mesh["tp"], dt.ColwiseParallel())
    check_module(emb, tnn.Embedding(5, 3), ids, mesh, UNEVEN, int_input=True)


def test_dropout_train_eval_and_statistics(mesh):
    drop = nn.Dropout(0.25)
    x = dt.distribute_tensor(dt.ones((64, 64)), mesh, [dt.Shard(0), dt.Shard(1)])
    dt.manual_seed(3)
    y = full(drop(x))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.03  # 4096 Bernoulli(0.75): sd 0.007
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    # the same seed gives the same mask in another layout (layout-invariant)
    dt.manual_seed(3)
    np.testing.assert_array_equal(full(drop(x.redistribute([dt.Replicate(), dt.Replicate()]))), y)
    assert drop.training
    drop.eval()
    assert not drop.training
    np.testing.assert_array_equal(full(drop(x)), 1.0)
    assert np.all(full(F.dropout(x, 0.5, training=False)) == 1)
    assert np.all(full(F.dropout(x, 1.0)) == 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


# ---- nn.functional ---------------------------------------------------------------------


def test_functional_names_as_torch(mesh):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((3, 6)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    target = np.array([0, 2, 1, 2], dtype=np.int64)
    cases = {
        "linear": (lambda f, t: f(t(x), t(w), t(b))),
        "relu": (lambda f, t: f(t(x))),
        "gelu": (lambda f, t: f(t(x), approximate="tanh")),
        "silu": (lambda f, t: f(t(x))),
        "softmax": (lambda f, t: f(t(x), dim=-1)),
        "log_softmax": (lambda f, t: f(t(x), dim=1)),
        "cross_entropy": (lambda f, t: f(t(x[:, :3]), t(target), ignore_index=1)),
        "nll_loss": (lambda f, t: f(t(x[:, :3]), t(target), reduction="sum")),
        "layer_norm": (lambda f, t: f(t(x), (6,))),
        "pad": (lambda f, t: f(t(x), (1, 2))),
        "softplus": (lambda f, t: f(t(x))),
        "embedding": (lambda f, t: f(t(target), t(x))),
    }
    for name, call in cases.items():
        if not hasattr(F, name):
            continue  # an op not (yet) in dtensor; listed in docs/python.md
        want = call(getattr(TF, name), lambda a: torch.tensor(a)).numpy()
        got = call(getattr(F, name), dt.tensor)
        np.testing.assert_allclose(full(got), want, rtol=1e-5, atol=1e-6, err_msg=name)
    # on DTensors too (the same ops)
    dx = dt.distribute_tensor(dt.tensor(x), mesh, [dt.Shard(0), dt.Shard(1)])
    np.testing.assert_allclose(full(F.gelu(dx)), TF.gelu(tt(x)).numpy(), rtol=1e-5, atol=1e-6)
    # rms_norm: torch 1.13 has none; its formula
    np.testing.assert_allclose(full(F.rms_norm(dt.tensor(x), (6,), eps=1e-6)),
                               x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), rtol=1e-5)
    # scaled_dot_product_attention: torch 1.13 has none; softmax(q k^T / sqrt(d)) v
    q, k, v = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    s = q @ k.transpose(0, 2, 1) / 2
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(
        full(F.scaled_dot_product_attention(dt.tensor(q), dt.tensor(k), dt.tensor(v))),
        (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)
    assert dt.nn.functional is F
    with pytest.raises(AttributeError):
        F.no_such_function


def test_functional_embedding_padding_gradient_as_torch():
    ids = np.array([0, 2, 0, 1], dtype=np.int64)
    w = np.random.default_rng(6).standard_normal((3, 2)).astype(np.float32)
    dw = dt.distribute_tensor(dt.tensor(w), nn.Module().device_mesh, [dt.Replicate()])
    dw.requires_grad_()
    did = dt.distribute_tensor(dt.tensor(ids), dw.device_mesh, [dt.Replicate()])
    F.embedding(did, dw, padding_idx=0).sum().backward()
    tw = tt(w, grad=True)
    TF.embedding(tt(ids), tw, padding_idx=0).sum().backward()
    np.testing.assert_array_equal(full(dw.grad), tw.grad.numpy())


# ---- nn.init ---------------------------------------------------------------------------


def param(mesh, shape, layout):
    p = dt.distribute_tensor(dt.zeros(shape), mesh, layout)
    return p.requires_grad_()


@pytest.mark.parametrize("name,args,check", [
    ("uniform_", (-0.5, 1.5), lambda a: a.min() >= -0.5 and a.max() < 1.5
     and abs(a.mean() - 0.5) < 0.02 and abs(a.var() - 4 / 12) < 0.02),
    ("normal_", (1.0, 0.5), lambda a: abs(a.mean() - 1) < 0.01 and abs(a.std() - 0.5) < 0.01),
    ("trunc_normal_", (0.0, 1.0, -1.0, 2.0), lambda a: a.min() >= -1 and a.max() <= 2
     and abs(a.mean() - 0.2296) < 0.02 and abs(a.std() - 0.7210) < 0.01),
    ("constant_", (0.25,), lambda a: np.all(a == 0.25)),
    ("zeros_", (), lambda a: np.all(a == 0)),
    ("ones_", (), lambda a: np.all(a == 1)),
    ("xavier_uniform_", (), lambda a: abs(a.std() - np.sqrt(2 / (64 + 128))) < 0.003
     and np.abs(a).max() <= np.sqrt(6 / (64 + 128))),
    ("xavier_normal_", (2.0,), lambda a: abs(a.std() - 2 * np.sqrt(2 / (64 + 128))) < 0.005),
    ("kaiming_uniform_", (), lambda a: abs(a.std() - np.sqrt(2) / 8) < 0.004),
    ("kaiming_normal_", (0, "fan_out", "relu"),
     lambda a: abs(a.std() - np.sqrt(2) / np.sqrt(128)) < 0.004),
])
def test_init_distributions_and_layout_invariance(mesh, name, args, check):
    fn = getattr(init, name)
    results = []
    for layout in LAYOUTS:
        p = param(mesh, (128, 64), layout)
        dt.manual_seed(21)
        assert fn(p, *args) is p
        assert p.placements == tuple(layout) and p.is_leaf and p.requires_grad
        results.append(full(p))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])  # whatever the layout
    assert check(results[0].astype(np.float64)), (name, results[0].mean(), results[0].std())
    # torch's draws of the same distribution have the same moments
    t = torch.zeros(128, 64)
    torch.manual_seed(0)
    getattr(tnn.init, name)(t, *args)
    assert abs(t.numpy().mean() - results[0].mean()) < 0.03
    assert abs(t.numpy().std() - results[0].std()) < 0.03


def test_init_refuses_what_it_cannot_do(mesh):
    with pytest.raises(ValueError, match="fewer than 2"):
        init.xavier_uniform_(param(mesh, (8,), [dt.Replicate(), dt.Replicate()]))
    with pytest.raises(TypeError, match="DTensor"):
        init.normal_(np.zeros(3))


# ---- the Module API --------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("scale", np.full(4, 2.0, np.float32))
        self.register_buffer("cache", np.zeros(4, np.float32), persistent=False)

    def forward(self, x, shift=None, *, times=1):
        y = self.drop(self.fc(x)) * self.scale
        if shift is not None:
            y = y + shift
        return y * times


class TorchBlock(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(4, 4)
        self.drop = tnn.Dropout(0.5)
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.register_buffer("cache", torch.zeros(4), persistent=False)


def test_module_api_as_torch():
    ours, theirs = nn.Sequential(Block(), Block()), tnn.Sequential(TorchBlock(), TorchBlock())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours[0].named_children()] == ["fc", "drop"]
    assert [type(c).__name__ for c in ours[0].children()] == ["Linear", "Dropout"]
    assert len(ours[0].parameters(recurse=False)) == 0 and len(ours[0].fc.parameters()) == 2
    assert len(ours.modules()) == 7
    # train / eval are recursive; assigning .training is this module's only
    assert ours.training and ours[1].drop.training
    assert ours.eval() is ours and not ours[1].drop.training
    ours.train()
    ours[0].training = False
    assert not ours[0].training and ours[0].drop.training
    theirs.train()
    theirs[0].training = False
    assert not theirs[0].training and theirs[0].drop.training
    # apply: children first, then the module
    seen = []
    ours.apply(lambda m: seen.append(type(m).__name__))
    assert seen == [type(m).__name__.replace("Torch", "") for m in _torch_apply_order(theirs)]
    # requires_grad_ and zero_grad
    ours.requires_grad_(False)
    assert not any(p.requires_grad for p in ours.parameters())
    ours.requires_grad_()
    assert all(p.requires_grad for p in ours.parameters())


def _torch_apply_order(m):
    out = []
    m.apply(out.append)
    return out


def test_load_state_dict_as_torch():
    ours, theirs = Block(), TorchBlock()
    sd = {k: full(v) for k, v in ours.state_dict().items()}
    tsd = {k: torch.tensor(v) for k, v in sd.items()}
    other = Block()
    r = other.load_state_dict(sd)
    assert r.missing_keys == [] and r.unexpected_keys == [] and str(r) == str(
        theirs.load_state_dict(tsd))
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(full(v), sd[k])
    del sd["fc.bias"], tsd["fc.bias"]
    sd["extra"], tsd["extra"] = np.zeros(1, np.float32), torch.zeros(1)
    with pytest.raises(RuntimeError) as want:
        theirs.load_state_dict(tsd)
    with pytest.raises(dt.Error) as got:
        other.load_state_dict(sd)
    assert str(got.value).replace("Block", "TorchBlock") == str(want.value)
    r = other.load_state_dict(sd, strict=False)
    assert tuple(r) == tuple(theirs.load_state_dict(tsd, strict=False))
    sd["fc.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(dt.Error, match="size mismatch for fc.weight"):
        other.load_state_dict(sd, strict=False)


def test_forward_with_several_arguments_and_hooks():
    dt.manual_seed(1)
    b = Block().eval()
    x = dt.distribute_tensor(dt.ones((2, 4)), b.device_mesh, [dt.Replicate()])
    base = full(b(x))
    np.testing.assert_allclose(full(b(x, dt.ones((2, 4)), times=3)), (base + 1) * 3, rtol=1e-6)
    # a dtensor.Tensor input of a module on the local mesh is its whole value
    np.testing.assert_allclose(full(b(dt.ones((2, 4)), times=2)), base * 2, rtol=1e-6)
    # with hooks: they see the first argument and the result; the rest reach forward
    calls = []
    b.register_forward_pre_hook(lambda m, inp: calls.append("pre"))
    b.register_forward_hook(lambda m, inp, out: out + 100)
    np.testing.assert_allclose(full(b(x, dt.ones((2, 4)), times=3)), (base + 1) * 3 + 100,
                               rtol=1e-6)
    assert calls == ["pre"]
    with pytest.raises(dt.Error, match="DTensor as its first argument"):
        b(None, x)


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4, bias=False)

    def forward(self, x, mask, *, scale=1.0):
        return self.fc(x) * mask * scale


def test_extra_arguments_reach_forward_under_fully_shard_and_checkpointing(mesh):
    dt.manual_seed(2)
    ref, gate = Gate(), Gate()
    gate.load_state_dict(ref.state_dict())
    x = np.random.default_rng(10).standard_normal((4, 4)).astype(np.float32)
    m = np.random.default_rng(11).standard_normal((4, 4)).astype(np.float32)
    # the reference: unsharded, no hooks (the Python forward called as is)
    rx = dt.distribute_tensor(dt.tensor(x), ref.device_mesh, [dt.Replicate()])
    ref(rx, dt.tensor(m), scale=0.5).sum().backward()
    dt.fully_shard(gate, mesh=mesh["dp"])
    nn.checkpoint_wrapper(gate)
    layout = [dt.Shard(0), dt.Replicate()]
    dx = dt.distribute_tensor(dt.tensor(x), mesh, layout)
    dm = dt.distribute_tensor(dt.tensor(m), mesh, layout)
    y = gate(dx, dm, scale=0.5)
    np.testing.assert_allclose(full(y), full(ref(rx, dt.tensor(m), scale=0.5)), rtol=1e-6)
    y.sum().backward()  # the recomputation gets mask and scale again
    np.testing.assert_allclose(full(gate.fc.weight.grad), full(ref.fc.weight.grad), rtol=1e-5)


# ---- modules made without a mesh, laid out afterwards -----------------------------------


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (w(x).view(b, s, -1, d // self.heads).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.w2(self.act(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=1e-6)
        self.attention = Attention(dim, heads)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-6)
        self.feed_forward = FeedForward(dim, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        h = x + self.dropout(self.attention(self.attention_norm(x)))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, vocab=16, dim=8, heads=2, hidden=12, layers=2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([TransformerBlock(dim, heads, hidden) for _ in range(layers)])
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def torch_llama(vocab=16, dim=8, heads=2, hidden=12, layers=2):
    class RMSNorm(tnn.Module):
        def __init__(self):
            super().__init__()
            self.weight = tnn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Attention(tnn.Module):
        def __init__(self):
            super().__init__()
            for n in ("wq", "wk", "wv", "wo"):
                setattr(self, n, tnn.Linear(dim, dim, bias=False))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (w(x).view(b, s, -1, d // heads).transpose(1, 2)
                       for w in (self.wq, self.wk, self.wv))
            scores = q @ k.transpose(-1, -2) / (d // heads) ** 0.5
            scores = scores.masked_fill(torch.ones(s, s).triu(1).bool(), float("-inf"))
            o = scores.softmax(-1) @ v
            return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    class FeedForward(tnn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tnn.Linear(dim, hidden, bias=False)
            self.w2 = tnn.Linear(hidden, dim, bias=False)
            self.w3 = tnn.Linear(dim, hidden, bias=False)

        def forward(self, x):
            return self.w2(TF.silu(self.w1(x)) * self.w3(x))

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.attention = RMSNorm(), Attention()
            self.ffn_norm, self.feed_forward = RMSNorm(), FeedForward()
            self.dropout = tnn.Dropout(0.1)

        def forward(self, x):
            h = x + self.dropout(self.attention(self.attention_norm(x)))
            return h + self.feed_forward(self.ffn_norm(h))

    class Model(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = tnn.Embedding(vocab, dim)
            self.layers = tnn.ModuleList([Block() for _ in range(layers)])
            self.norm, self.output = RMSNorm(), tnn.Linear(dim, vocab, bias=False)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = layer(h)
            return self.output(self.norm(h))

    return Model()


TOKENS = np.random.default_rng(7).integers(0, 16, size=(4, 6)).astype(np.int64)
TARGETS = np.random.default_rng(8).integers(0, 16, size=(4, 6)).astype(np.int64)


def llama_step(model, tokens, targets):
    logits = model(tokens)
    loss = F.cross_entropy(logits.view(-1, 16), targets.view(-1))
    loss.backward()
    return logits, loss


def compare_llama(model, tmodel, logits, loss):
    tlogits = tmodel(tt(TOKENS))
    tloss = TF.cross_entropy(tlogits.view(-1, 16), tt(TARGETS).view(-1))
    tloss.backward()
    np.testing.assert_allclose(full(logits), tlogits.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full(loss), tloss.item(), rtol=1e-5)
    tgrads = dict(tmodel.named_parameters())
    names = [n for n, _ in model.named_parameters()]
    assert names == list(tgrads)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(full(p.grad), tgrads[name].grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_llama_meshless_then_parallelized_as_torch(mesh):
    dt.manual_seed(0)
    model = Llama().eval()  # dropout off: the same computation as torch's in eval()
    assert model._is_local and model.layers[0].attention.wq._is_local
    tmodel = torch_llama().eval()
    copy_weights(model, tmodel)
    # single process, unsharded: dtensor.Tensors in
    targets = dt.distribute_tensor(dt.tensor(TARGETS), model.device_mesh, [dt.Replicate()])
    logits, loss = llama_step(model, dt.tensor(TOKENS), targets)
    compare_llama(model, tmodel, logits, loss)
    whole = {k: full(v) for k, v in model.state_dict().items()}

    # the same model laid out: tp on each block, fully_shard per block and at the root
    for block in model.layers:
        dt.parallelize_module(block, mesh["tp"], {
            "attention.wq": dt.ColwiseParallel(), "attention.wk": dt.ColwiseParallel(),
            "attention.wv": dt.ColwiseParallel(), "attention.wo": dt.RowwiseParallel(),
            "feed_forward.w1": dt.ColwiseParallel(), "feed_forward.w3": dt.ColwiseParallel(),
            "feed_forward.w2": dt.RowwiseParallel()})
        dt.fully_shard(block, mesh=mesh["dp"])
    dt.fully_shard(model, mesh=mesh["dp"])
    assert not model._is_local and model.device_mesh == mesh
    wq = model.layers[0].attention.wq.weight
    assert wq.device_mesh == mesh and [p.dim for p in wq.placements] == [0, 0]  # dp inside tp
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(full(v), whole[k], err_msg=k)  # the values moved as they were
    tmodel.zero_grad()
    tokens = dt.distribute_tensor(dt.tensor(TOKENS), mesh, [dt.Shard(0), dt.Replicate()])
    targets = dt.distribute_tensor(dt.tensor(TARGETS), mesh, [dt.Shard(0), dt.Replicate()])
    logits, loss = llama_step(model, tokens, targets)
    compare_llama(model, tmodel, logits, loss)
    # an optimizer over the laid-out parameters steps
    opt = dt.optim.AdamW(model.parameters(), lr=1e-2)
    opt.step()


def test_meshless_adoption_errors_and_ties(mesh):
    lin = nn.Linear(4, 4)
    with pytest.raises(dt.Error, match="made without a mesh"):
        dt.fully_shard(lin)
    with pytest.raises(dt.Error, match="made without a mesh"):
        dt.parallelize_module(lin, 1, dt.ColwiseParallel())
    # a meshless module mixed with one on a mesh raises (no silent broadcast)
    on_mesh = nn.Linear(mesh, 4, 4)
    x = dt.distribute_tensor(dt.ones((2, 4)), mesh, [dt.Replicate(), dt.Replicate()])
    with pytest.raises(dt.Error):
        lin(on_mesh(x))
    # the adopted values are the whole ones, Replicate on the mesh's root
    w = full(lin.weight)
    dt.parallelize_module(lin, mesh["tp"], dt.ColwiseParallel())
    np.testing.assert_array_equal(full(lin.weight), w)
    assert lin.weight.placements == (dt.Replicate(), dt.Shard(0))
    # buffers move with the module
    b = Block()
    dt.fully_shard(b, mesh=mesh["dp"])
    assert b.scale.device_mesh == mesh and np.all(full(b.scale) == 2)


def test_meshless_model_under_meta_device(mesh):
    dt.manual_seed(4)
    plain = Llama()
    dt.manual_seed(4)
    with nn.meta_device():
        meta = Llama()
    assert meta.output.weight.is_meta
    for m in (plain, meta):
        for block in m.layers:
            dt.parallelize_module(block, mesh["tp"], {"feed_forward.w1": dt.ColwiseParallel(),
                                                      "feed_forward.w2": dt.RowwiseParallel()})
        dt.fully_shard(m, mesh=mesh["dp"])
    assert meta.materialize() == len(meta.parameters())
    for (n, a), (_, b) in zip(plain.named_parameters(), meta.named_parameters()):
        assert a.placements == b.placements, n
        np.testing.assert_array_equal(full(a), full(b), err_msg=n)


def test_to_empty_then_init_weights_as_torchtitan(mesh):
    # torchtitan: build on meta, lay out, to_empty, init_weights with nn.init
    def build(meta):
        if meta:
            with nn.meta_device():
                m = Llama()
        else:
            m = Llama()
        dt.parallelize_module(m.layers[0], mesh["tp"], {"feed_forward.w1": dt.ColwiseParallel()})
        dt.fully_shard(m, mesh=mesh["dp"])
        if meta:
            assert m.to_empty(device="cpu") is m
        dt.manual_seed(8)
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                init.ones_(p)
            else:
                init.trunc_normal_(p, mean=0.0, std=0.02, a=-0.04, b=0.04)
        return m

    a, b = build(True), build(False)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(full(p), full(q), err_msg=n)
    w = full(a.layers[0].feed_forward.w1.weight)
    assert np.abs(w).max() <= 0.04 and 0.01 < w.std() < 0.02
