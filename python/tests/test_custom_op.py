"""register_sharding and check_rules from Python (docs/rules.md)."""
import numpy as np
import pytest

import dtensor as dt


def _scale_cols():
    # x * scale[j]: rows stay sharded; a Partial(sum) x times a replicated scale stays Partial.
    if not hasattr(_scale_cols, "op"):
        _scale_cols.op = dt.register_sharding(
            "py_scale_cols",
            lambda x, s: x * s,
            [([dt.Shard(0), dt.Replicate()], dt.Shard(0)),
             ([dt.Shard(1), dt.Shard(0)], dt.Shard(1)),
             ([dt.Partial(), dt.Replicate()], dt.Partial()),
             ([dt.Replicate(), dt.Replicate()], dt.Replicate())],
            backward=lambda g, x, s: [g * s, dt.sum(g * x, [0])])
    return _scale_cols.op


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.integers(-9, 10, size=(4, 5)).astype(np.float32)
    s = rng.integers(-9, 10, size=(5,)).astype(np.float32)
    return x, s


def test_runs_the_rule_without_communication():
    op = _scale_cols()
    x, s = _inputs()
    mesh = dt.init_device_mesh((4,))
    dx = dt.distribute_tensor(x, mesh, [dt.Shard(1)])
    ds = dt.distribute_tensor(s, mesh, [dt.Shard(0)])
    with dt.CommDebugMode() as comm:
        y = op(dx, ds)
    assert comm.get_total_counts() == 0
    assert list(y.placements) == [dt.Shard(1)]
    np.testing.assert_array_equal(np.asarray(y.full_tensor()), x * s)
    np.testing.assert_array_equal(np.asarray(op(dt.from_numpy(x), dt.from_numpy(s))), x * s)


def test_backward():
    op = _scale_cols()
    x, s = _inputs()
    mesh = dt.init_device_mesh((3,))
    dx = dt.distribute_tensor(x, mesh, [dt.Shard(0)]).requires_grad_()
    ds = dt.distribute_tensor(s, mesh, [dt.Replicate()]).requires_grad_()
    dt.sum(op(dx, ds)).backward()
    np.testing.assert_array_equal(np.asarray(dx.grad.full_tensor()), np.broadcast_to(s, x.shape))
    np.testing.assert_array_equal(np.asarray(ds.grad.full_tensor()), x.sum(0))


def test_check_rules_reports_wrong_and_missing_layouts():
    x, s = _inputs()
    report = dt.check_rules(_scale_cols(), [dt.from_numpy(x), dt.from_numpy(s)], meshes=[[3]])
    assert report["incorrect"] == 0, report["table"]
    assert report["missing"] > 0 and "P(avg)" in report["table"]
    bad = dt.register_sharding("py_bad_add_one", lambda t: t + 1.0,
                               [([dt.Partial()], dt.Partial()), ([dt.Replicate()], dt.Replicate())])
    assert dt.check_rules(bad, [dt.from_numpy(x)], meshes=[[3]])["incorrect"] > 0


def test_errors():
    _scale_cols()
    with pytest.raises(dt.Error, match="already registered"):
        dt.register_sharding("py_scale_cols", lambda x: x, [])
