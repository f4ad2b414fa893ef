# A Python value of the wrong kind, wherever dtensor converts one, raises
# an exception naming the argument and what was expected (never pybind11's
# bare "Unable to cast Python instance to C++ type"); KeyboardInterrupt
# from Python code that C++ calls stays a KeyboardInterrupt; the optimizers
# refuse what PyTorch's refuse, with PyTorch's exception.
import contextlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dtensor as dt
from dtensor import nn

UNABLE = "Unable to cast"


@pytest.fixture
def mesh():
    return dt.DeviceMesh(dt.World.simulated(2), (2,), ["x"])


@contextlib.contextmanager
def raises_named(exc, *words):
    """pytest.raises(exc) whose message holds every word, and not pybind11's."""
    with pytest.raises(exc) as info:
        yield info
    text = str(info.value)
    assert UNABLE not in text, text
    for w in words:
        assert w in text, (w, text)


def test_mesh_getitem_takes_names_only(mesh):
    with raises_named(TypeError, "DeviceMesh[key]", "mesh dim name", "int 5"):
        mesh[5]
    with raises_named(TypeError, "DeviceMesh[key]", "float 1.5"):
        mesh[1.5]
    with raises_named(TypeError, "DeviceMesh.size(mesh_dim)", "float"):
        mesh.size(0.5)
    with raises_named(TypeError, "DeviceMesh.flatten(dims)", "float 1.5"):
        mesh.flatten(1.5)
    assert mesh["x"].shape == (2,)


def test_ints_beyond_int64_and_wrong_shapes_are_named(mesh):
    t = dt.zeros((2, 3))
    with raises_named(TypeError, "index", "int that fits int64", "int 18446744073709551616"):
        t[2 ** 64]
    with raises_named(TypeError, "Tensor[key] = value", "int 18446744073709551616"):
        t[0] = 2 ** 64
    for call, where in [(lambda: t.view(3, "a"), "view(*shape)"),
                        (lambda: t.reshape(3, 2 ** 64), "reshape(*shape)"),
                        (lambda: t.permute(1, None), "permute(*dims)"),
                        (lambda: t.repeat(1, 2.5), "repeat(*repeats)")]:
        with raises_named(TypeError, where):
            call()
    # A shape argument pybind11 converts: its TypeError names the function.
    with raises_named(TypeError, "zeros"):
        dt.zeros(2 ** 64)


def test_register_module_takes_modules(mesh):
    m = Identity(mesh)
    with raises_named(TypeError, "register_module('c')", "dtensor.nn.Module", "int 5"):
        m.register_module("c", 5)


def test_from_local_callable_returning_arrays(mesh):
    d = dt.DTensor.from_local(lambda rank: np.full((2,), float(rank)), mesh, [dt.Shard(0)])
    assert d.dtype == dt.float64
    np.testing.assert_array_equal(d.full_tensor().numpy(), [0, 0, 1, 1])
    with raises_named(dt.Error, "from_local: local_tensor(0)", "NoneType"):
        dt.DTensor.from_local(lambda rank: None, mesh, [dt.Shard(0)])
    with raises_named(TypeError, "from_local", "a rank (int)", "str"):
        dt.DTensor.from_local({"zero": np.ones(2)}, mesh, [dt.Shard(0)])


def test_checkpoint_int_beyond_int64_is_named(tmp_path, mesh):
    for state, key in [({"step": 2 ** 64}, "'step'"), ({"n": {"big": -2 ** 63 - 1}}, "'n.big'"),
                       ({"sizes": [1, 2 ** 64]}, "'sizes[1]'")]:
        with raises_named(TypeError, "checkpoint", key, "int64"):
            dt.checkpoint.save(state, checkpoint_id=str(tmp_path / "c"), world=mesh.world)
    dt.checkpoint.save({"step": 2 ** 63 - 1}, checkpoint_id=str(tmp_path / "ok"), world=mesh.world)
    back = {"step": 0}
    dt.checkpoint.load(back, checkpoint_id=str(tmp_path / "ok"), world=mesh.world)
    assert back["step"] == 2 ** 63 - 1


class Identity(nn.Module):
    def forward(self, x):
        return x


def test_hook_returning_a_non_dtensor_is_named(mesh):
    x = dt.distribute_tensor(np.ones(4), mesh, [dt.Shard(0)])
    m = Identity(mesh)
    m.register_forward_hook(lambda mod, inp, out: 5)
    with raises_named(TypeError, "forward hook", "DTensor or None", "int 5"):
        m(x)
    m = Identity(mesh)
    m.register_forward_pre_hook(lambda mod, inp: "x")
    with raises_named(TypeError, "forward pre-hook", "DTensor or None", "str"):
        m(x)

    class Bad(nn.Module):
        def forward(self, x):
            return np.ones(4)

    with raises_named(TypeError, "Bad.forward", "DTensor", "ndarray"):
        Bad(mesh)(x)


def test_optimizer_bad_params_say_so(mesh):
    p = dt.distribute_tensor(np.ones(4), mesh, [dt.Shard(0)])
    p.requires_grad_()
    for opt in (dt.optim.SGD, dt.optim.Adam, dt.optim.AdamW):
        with raises_named(TypeError, "param group 1", "expected a dict like the others", "list"):
            opt([{"params": [p], "lr": 0.1}, [p]])
        with raises_named(TypeError, "optimizer: params", "DTensor", "ndarray"):
            opt([np.ones(4)])
        with raises_named(TypeError, "optimizer: params", "iterable", "int 3"):
            opt(3)


def test_optimizer_empty_parameter_list_is_a_value_error():
    for opt in (dt.optim.SGD, dt.optim.Adam, dt.optim.AdamW):
        with pytest.raises(ValueError, match="^optimizer got an empty parameter list$"):
            opt([])
        with pytest.raises(ValueError, match="empty parameter list"):
            opt(iter([]))


def test_keyboard_interrupt_in_a_custom_kernel_stays_one(mesh):
    def kernel(x):
        raise KeyboardInterrupt

    op = dt.register_sharding("py_errors_interrupt", kernel, [([dt.Shard(0)], dt.Shard(0))])
    with pytest.raises(KeyboardInterrupt):
        op(dt.ones((4,)))
    with pytest.raises(KeyboardInterrupt):
        op(dt.distribute_tensor(np.ones(4), mesh, [dt.Shard(0)]))
    # An ordinary exception is still the op's dtensor.Error, naming it.
    op2 = dt.register_sharding("py_errors_value", lambda x: 1 // 0, [([dt.Shard(0)], dt.Shard(0))])
    with pytest.raises(dt.Error, match="py_errors_value: the kernel raised ZeroDivisionError"):
        op2(dt.ones((4,)))


def test_keyboard_interrupt_in_forward_and_hooks_stays_one(mesh):
    x = dt.distribute_tensor(np.ones(4), mesh, [dt.Shard(0)])

    class Interrupted(nn.Module):
        def forward(self, x):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Interrupted(mesh)(x)
    m = Identity(mesh)

    def hook(mod, inp, out):
        raise KeyboardInterrupt

    m.register_forward_hook(hook)
    with pytest.raises(KeyboardInterrupt):
        m(x)


def run_python(code):
    """Runs code in a fresh interpreter: a crash fails the test, not pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


def test_attributes_before_module_init_do_not_crash():
    r = run_python("""
        import numpy as np
        import dtensor as dt
        from dtensor import nn
        mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))

        class Early(nn.Module):
            def __init__(self, mesh):
                self.plain = 3                  # as PyTorch allows
                self.name = "early"
                assert not hasattr(self, "missing")
                super().__init__(mesh)
                self.w = nn.Parameter(np.ones(2))

            def forward(self, x):
                return x * self.w

        m = Early(mesh)
        print("plain", m.plain, m.name, [n for n, _ in m.named_parameters()])

        for value, what in [(nn.Parameter(np.ones(2)), "parameters"),
                            (nn.Linear(mesh, 2, 2), "module")]:
            class TooEarly(nn.Module):
                def __init__(self, mesh):
                    self.p = value
                    super().__init__(mesh)
            try:
                TooEarly(mesh)
            except AttributeError as e:
                print("refused", what, "before Module.__init__() call" in str(e))
    """)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines() == ["plain 3 early ['w']", "refused parameters True",
                                     "refused module True"], r.stdout
