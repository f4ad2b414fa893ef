# The operators' C fast path (python/src/fast_ops.cc): + - * / of two
# DTensors or two Tensors skip pybind11's dispatcher. The same values as the
# functions, the same errors, and every other operand mix still reaches the
# bound methods (numbers either side, Tensor with DTensor, subclasses).
import operator

import numpy as np
import pytest

import dtensor as dt

OPS = [(operator.add, dt.add), (operator.sub, dt.sub), (operator.mul, dt.mul),
       (operator.truediv, dt.div)]


@pytest.fixture
def mesh():
    return dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))


@pytest.mark.parametrize("op,fn", OPS)
def test_same_bits_as_the_functions(mesh, op, fn):
    a = dt.randn((5, 3), seed=1)
    b = dt.randn((5, 3), seed=2) + 3.0
    assert np.array_equal(np.asarray(op(a, b)), np.asarray(fn(a, b)))
    da = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()])
    db = dt.distribute_tensor(b, mesh, [dt.Replicate(), dt.Shard(1)])
    got, want = op(da, db), fn(da, db)
    assert got.placements == want.placements
    assert np.array_equal(np.asarray(got.full_tensor()), np.asarray(want.full_tensor()))
    want_np = op(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(got.full_tensor()), want_np, rtol=1e-6)


@pytest.mark.parametrize("op,fn", OPS)
def test_other_operand_mixes(mesh, op, fn):
    a = dt.randn((4, 4), seed=3) + 5.0
    d = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()])
    an = np.asarray(a)
    for x, xn in ((a, an), (d, an)):
        full = (lambda t: np.asarray(t.full_tensor())) if x is d else np.asarray
        np.testing.assert_allclose(full(op(x, 2.0)), op(xn, 2.0), rtol=1e-6)
        np.testing.assert_allclose(full(op(2.0, x)), op(2.0, xn), rtol=1e-6)
    one = dt.tensor(np.float32(2.0))  # a one-element Tensor with a DTensor
    np.testing.assert_allclose(np.asarray(op(d, one).full_tensor()), op(an, 2.0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(op(one, d).full_tensor()), op(2.0, an), rtol=1e-6)
    with pytest.raises(TypeError):
        op(d, "x")
    with pytest.raises(TypeError):
        op("x", a)


def test_subclasses_take_the_bound_methods():
    class Plain(dt.Tensor):  # inherits the fast slot, not exactly a Tensor
        pass

    class Mine(dt.Tensor):  # its own __add__ and __radd__
        def __add__(self, other):
            return "mine"

        def __radd__(self, other):
            return "mine, reflected"

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p, t = Plain(a), dt.tensor(a)
    for got in (p + p, p + t, t + p, p * 2.0, 3.0 - p):
        assert isinstance(got, dt.Tensor)
    np.testing.assert_array_equal(np.asarray(p + t), 2 * a)
    np.testing.assert_array_equal(np.asarray(3.0 - p), 3.0 - a)
    m = Mine(a)
    assert m + t == "mine"
    # Python's rule: a right operand whose type subclasses the left's answers first.
    assert t + m == "mine, reflected"


def test_errors_are_dtensor_errors(mesh):
    a, b = dt.randn((2, 3), seed=1), dt.randn((4, 5), seed=2)
    with pytest.raises(dt.Error, match="broadcast"):
        a + b
    da = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()])
    db = dt.distribute_tensor(b, mesh, [dt.Shard(0), dt.Replicate()])
    with pytest.raises(dt.Error, match="broadcast"):
        da * db
    other = dt.init_device_mesh((2, 2))  # another world: a mesh mismatch
    dc = dt.distribute_tensor(a, other, [dt.Shard(0), dt.Replicate()])
    with pytest.raises(dt.Error):
        da - dc


def test_autograd_through_the_operators(mesh):
    x = dt.distribute_tensor(dt.randn((4, 4), seed=5), mesh, [dt.Shard(0), dt.Shard(1)])
    x.requires_grad_()
    y = dt.distribute_tensor(dt.randn((4, 4), seed=6) + 4.0, mesh, [dt.Replicate(), dt.Shard(0)])
    ((x * x + x / y - y) * 2.0).sum().backward()
    xn, yn = np.asarray(x.full_tensor()), np.asarray(y.full_tensor())
    np.testing.assert_allclose(np.asarray(x.grad.full_tensor()), (2 * xn + 1 / yn) * 2,
                               rtol=1e-5)
