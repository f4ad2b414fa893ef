# Autograd from Python: gradients against NumPy (analytic) and finite
# differences, placements of gradients, grad modes, accumulation, errors.
import threading

import numpy as np
import pytest

import dtensor as dt


@pytest.fixture
def mesh4():
    return dt.DeviceMesh(dt.World.simulated(4), (4,))


@pytest.fixture
def mesh22():
    return dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["dp", "tp"])


def full(d):
    return np.asarray(d.full_tensor())


def test_requires_grad_leaf_and_grad_none(mesh4, rng):
    w = dt.distribute_tensor(rng.standard_normal((8, 4)), mesh4, [dt.Shard(0)])
    assert not w.requires_grad and w.is_leaf and w.grad is None
    assert w.requires_grad_() is w
    assert w.requires_grad and w.is_leaf and w.grad_fn is None
    y = dt.relu(w)
    assert y.requires_grad and not y.is_leaf and y.grad_fn is not None
    w.requires_grad = False
    assert not w.requires_grad


def test_mm_relu_gradient_matches_numpy(mesh4, rng):
    x_np = rng.standard_normal((6, 8))
    w_np = rng.standard_normal((8, 5))
    x = dt.distribute_tensor(x_np, mesh4, [dt.Replicate()])
    w = dt.distribute_tensor(w_np, mesh4, [dt.Shard(1)]).requires_grad_()  # column-parallel
    loss = dt.sum(dt.relu(dt.mm(x, w)))
    loss.backward()
    expected = x_np.T @ (x_np @ w_np > 0).astype(np.float64)
    assert w.grad is not None
    assert w.grad.placements == w.placements  # sharded like the weight
    np.testing.assert_allclose(full(w.grad), expected, rtol=1e-12, atol=1e-12)


def test_replicated_weight_batch_sharded_gets_partial_gradient(mesh4, rng):
    x_np = rng.standard_normal((8, 3))
    w_np = rng.standard_normal((3, 2))
    x = dt.distribute_tensor(x_np, mesh4, [dt.Shard(0)])
    w = dt.distribute_tensor(w_np, mesh4, [dt.Replicate()]).requires_grad_()
    dt.sum(dt.mm(x, w)).backward()
    assert w.grad.placements == (dt.Partial(),)
    np.testing.assert_allclose(full(w.grad), x_np.T @ np.ones((8, 2)), rtol=1e-12)


def test_gelu_mean_matches_finite_differences(mesh22, rng):
    a_np = rng.standard_normal((4, 6))
    a = dt.distribute_tensor(a_np, mesh22, [dt.Shard(0), dt.Shard(1)]).requires_grad_()

    loss = dt.mean(dt.gelu(a) * 3.0)
    loss.backward()
    g = full(a.grad)
    eps = 1e-6
    numeric = np.zeros_like(a_np)
    for i in range(a_np.shape[0]):
        for j in range(a_np.shape[1]):
            plus, minus = a_np.copy(), a_np.copy()
            plus[i, j] += eps
            minus[i, j] -= eps
            lp = dt.mean(dt.gelu(dt.distribute_tensor(plus, mesh22, [dt.Shard(0), dt.Shard(1)])) * 3.0)
            lm = dt.mean(dt.gelu(dt.distribute_tensor(minus, mesh22, [dt.Shard(0), dt.Shard(1)])) * 3.0)
            numeric[i, j] = (lp.full_tensor().item() - lm.full_tensor().item()) / (2 * eps)
    np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-8)


# gelu_backward (ATen's name and arguments) against torch 1.13's on the
# same float64 and float32 values: within a few ulps (the erf and exp of two
# libraries); the DTensor form on a sharded 2x2 mesh gives the Tensor form's
# bits; a misspelled approximate is an error, not the exact form.
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_torch(mesh22, rng, approximate):
    torch = pytest.importorskip("torch")
    x_np = rng.standard_normal((6, 5)) * 3
    g_np = rng.standard_normal((6, 5))
    for np_dtype, rtol in ((np.float64, 1e-13), (np.float32, 1e-5)):
        x, g = x_np.astype(np_dtype), g_np.astype(np_dtype)
        got = dt.gelu_backward(dt.tensor(g), dt.tensor(x), approximate=approximate)
        want = torch.ops.aten.gelu_backward(torch.from_numpy(g), torch.from_numpy(x),
                                            approximate=approximate)
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=rtol, atol=rtol)
        placements = [dt.Shard(0), dt.Shard(1)]
        dg = dt.distribute_tensor(g, mesh22, placements)
        dx = dt.distribute_tensor(x, mesh22, placements)
        sharded = dt.gelu_backward(dg, dx, approximate=approximate)
        assert list(sharded.placements) == placements
        assert np.array_equal(full(sharded), np.asarray(got))
    with pytest.raises(dt.Error, match="approximate"):
        dt.gelu_backward(dt.tensor(g_np), dt.tensor(x_np), approximate="tan")
    with pytest.raises(dt.Error, match="approximate"):
        dt.tensor(x_np).gelu(approximate="tan")


def test_backward_with_gradient_and_accumulation(mesh4, rng):
    a_np = rng.standard_normal((8, 2))
    g_np = rng.standard_normal((8, 2))
    a = dt.distribute_tensor(a_np, mesh4, [dt.Shard(0)]).requires_grad_()
    y = a * a
    with pytest.raises(dt.Error):
        y.backward()  # not one element: needs a gradient
    g = dt.distribute_tensor(g_np, mesh4, [dt.Shard(0)])
    y.backward(g, retain_graph=True)
    once = full(a.grad)
    np.testing.assert_allclose(once, 2 * a_np * g_np, rtol=1e-15)
    y.backward(g)
    np.testing.assert_array_equal(full(a.grad), once + once)  # accumulates
    with pytest.raises(dt.Error):
        y.backward(g)  # graph freed
    a.grad = None
    assert a.grad is None


def test_grad_setter_and_copies_share_gradient(mesh4):
    w = dt.distribute_tensor(np.ones((4, 4)), mesh4, [dt.Shard(0)]).requires_grad_()
    copy = dt.optim.SGD([w], lr=0.1).params[0]  # a C++ copy, another Python object
    assert copy is not w
    dt.sum(copy * 2.0).backward()  # backward through the copy fills w.grad
    np.testing.assert_array_equal(full(w.grad), np.full((4, 4), 2.0))
    w.grad = dt.distribute_tensor(np.full((4, 4), 7.0), mesh4, [dt.Shard(0)])
    np.testing.assert_array_equal(full(copy.grad), np.full((4, 4), 7.0))
    with pytest.raises(dt.Error):  # another shape
        w.grad = dt.distribute_tensor(np.ones((4, 2)), mesh4, [dt.Shard(0)])


def test_no_grad_enable_grad_set_grad_enabled(mesh4):
    w = dt.distribute_tensor(np.ones((4,)), mesh4, [dt.Shard(0)]).requires_grad_()
    assert dt.is_grad_enabled()
    with dt.no_grad():
        assert not dt.is_grad_enabled()
        assert not (w * 2.0).requires_grad
        with dt.enable_grad():
            assert (w * 2.0).requires_grad
        assert not dt.is_grad_enabled()
    assert dt.is_grad_enabled() and (w * 2.0).requires_grad

    dt.set_grad_enabled(False)  # a plain call takes effect and stays
    assert not dt.is_grad_enabled()
    dt.set_grad_enabled(True)
    assert dt.is_grad_enabled()
    with dt.set_grad_enabled(False):
        assert not dt.is_grad_enabled()
    assert dt.is_grad_enabled()

    @dt.no_grad()
    def doubled(t):
        return t * 2.0

    assert not doubled(w).requires_grad
    assert dt.is_grad_enabled()


def test_grad_mode_is_per_thread(mesh4):
    seen = []
    with dt.no_grad():
        t = threading.Thread(target=lambda: seen.append(dt.is_grad_enabled()))
        t.start()
        t.join()
    assert seen == [True]


def test_detach_and_retain_grad(mesh4, rng):
    a_np = rng.standard_normal((4,))
    a = dt.distribute_tensor(a_np, mesh4, [dt.Shard(0)]).requires_grad_()
    d = a.detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_array_equal(full(d), a_np)
    h = a * 3.0
    h.retain_grad()
    dt.sum(h * h).backward()
    np.testing.assert_allclose(full(h.grad), 2 * 3.0 * a_np, rtol=1e-15)
    np.testing.assert_allclose(full(a.grad), 18.0 * a_np, rtol=1e-15)


def test_autograd_backward_several_outputs(mesh4, rng):
    a_np = rng.standard_normal((8,))
    a = dt.distribute_tensor(a_np, mesh4, [dt.Shard(0)]).requires_grad_()
    dt.autograd.backward([dt.sum(a * 2.0), dt.sum(a * a)])
    np.testing.assert_allclose(full(a.grad), 2.0 + 2 * a_np, rtol=1e-15)
    import dtensor.autograd as ag
    assert ag.graph_memory(dt.sum(a * a))["nodes"] >= 1


def test_errors_arrive_as_dtensor_error(mesh4):
    i = dt.distribute_tensor(np.arange(4), mesh4, [dt.Shard(0)])
    with pytest.raises(dt.Error, match="float"):
        i.requires_grad_()
    f = dt.distribute_tensor(np.ones(4), mesh4, [dt.Shard(0)])
    with pytest.raises(dt.Error):
        dt.sum(f).backward()  # does not require grad
    assert issubclass(dt.Error, RuntimeError)


def test_backward_releases_the_gil(mesh4):
    # A Python forward hook runs inside Module.__call__, which releases the
    # GIL; the hook must take it back (no deadlock) and see a live thread.
    lin = dt.nn.Linear(mesh4, 4, 4, seed=1)
    calls = []
    lin.register_forward_hook(lambda m, x, y: calls.append(threading.get_ident()))
    x = dt.distribute_tensor(np.ones((2, 4), dtype=np.float32), mesh4, [dt.Replicate()])
    dt.sum(lin(x)).backward()
    assert calls == [threading.get_ident()]
    assert lin.weight.grad is not None


def test_saved_tensors_hooks_pack_and_unpack(mesh4, rng):
    from dtensor.autograd.graph import saved_tensors_hooks
    a_np = rng.standard_normal((8,))
    a = dt.distribute_tensor(a_np, mesh4, [dt.Shard(0)]).requires_grad_()
    packed, unpacked = [], []

    def pack(t):
        packed.append(t.shape)
        return ("kept", t)

    def unpack(p):
        assert p[0] == "kept"
        unpacked.append(1)
        return p[1]

    with saved_tensors_hooks(pack, unpack):
        y = dt.sum(a * a)  # mul saves both operands
    assert len(packed) >= 1 and not unpacked
    y.backward()
    assert len(unpacked) == len(packed)
    np.testing.assert_allclose(full(a.grad), 2 * a_np, rtol=1e-15)
