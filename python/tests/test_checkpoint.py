# dtensor.checkpoint from Python: round trips with resharding (bitwise),
# plain values and tensors, nested dicts, models with optimizers resumed on
# the same layout (bitwise) and another (within a derived tolerance), errors.
import math
import os
import pathlib

import numpy as np
import pytest

import dtensor as dt
import dtensor.checkpoint as dcp


def full(d):
    return np.asarray(d.full_tensor())


def test_save_sharded_load_into_another_mesh_and_layout(tmp_path, rng):
    a_np = rng.standard_normal((10, 6))  # uneven over 4 ranks
    b_np = rng.standard_normal((4, 8)).astype(np.float32)
    w4 = dt.World.simulated(4)
    mesh = dt.DeviceMesh(w4, (4,))
    state = {"a": dt.distribute_tensor(a_np, mesh, [dt.Shard(0)]),
             "b": dt.distribute_tensor(b_np, mesh, [dt.Shard(1)])}
    dcp.save(state, checkpoint_id=tmp_path / "ck")
    assert sorted(dcp.read_metadata(tmp_path / "ck")["tensors"]) == ["a", "b"]
    dcp.verify(str(tmp_path / "ck"))

    # Another world and mesh (2x3), other placements.
    w6 = dt.World.simulated(6)
    mesh2 = dt.DeviceMesh(w6, (2, 3))
    a2 = dt.zeros((10, 6), dtype=dt.float64, device_mesh=mesh2, placements=[dt.Replicate(), dt.Shard(1)])
    b2 = dt.zeros((4, 8), device_mesh=mesh2, placements=[dt.Shard(0), dt.Shard(1)])
    target = {"a": a2, "b": b2}
    dcp.load(target, checkpoint_id=str(tmp_path / "ck"))
    np.testing.assert_array_equal(full(a2), a_np)  # in place, bitwise
    np.testing.assert_array_equal(full(b2), b_np)
    assert a2.placements == (dt.Replicate(), dt.Shard(1))


def test_values_plain_tensors_and_nested_dicts(tmp_path, rng):
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    arr = rng.standard_normal((3, 3))
    state = {"model": {"w": dt.distribute_tensor(arr, mesh, [dt.Shard(0)])},
             "step": 7, "lr": 0.1, "nan": math.nan, "inf": -math.inf, "name": "run-1",
             "flag": True, "ids": [1, 2, 3], "xs": [0.5, 1.5], "plain": arr.copy()}
    dcp.save(state, tmp_path / "v")
    assert "model.w" in dcp.read_metadata(tmp_path / "v")["tensors"]
    back = {"model": {"w": dt.zeros((3, 3), dtype=dt.float64, device_mesh=mesh, placements=[dt.Replicate()])},
            "step": 0, "lr": 0.0, "nan": 0.0, "inf": 0.0, "name": "", "flag": False, "ids": [],
            "xs": [0.0], "plain": np.zeros((3, 3))}
    dcp.load(back, tmp_path / "v")
    np.testing.assert_array_equal(full(back["model"]["w"]), arr)
    assert back["step"] == 7 and isinstance(back["step"], int)
    assert back["lr"] == 0.1 and math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert back["name"] == "run-1" and back["flag"] is True
    assert back["ids"] == [1, 2, 3] and back["xs"] == [0.5, 1.5]
    np.testing.assert_array_equal(np.asarray(back["plain"]), arr)


def test_strict_missing_and_errors(tmp_path):
    mesh = dt.DeviceMesh(dt.World.simulated(2), (2,))
    dcp.save({"a": dt.ones((4,), device_mesh=mesh, placements=[dt.Shard(0)])}, tmp_path / "s")
    extra = dt.zeros((4,), device_mesh=mesh, placements=[dt.Shard(0)])
    with pytest.raises(dt.Error, match="missing|lacks|not in|b"):
        dcp.load({"a": dt.zeros((4,), device_mesh=mesh, placements=[dt.Shard(0)]), "b": extra},
                 tmp_path / "s")
    dcp.load({"b": extra}, tmp_path / "s", strict=False)
    np.testing.assert_array_equal(full(extra), np.zeros(4, np.float32))
    with pytest.raises(dt.Error):  # shape mismatch
        dcp.load({"a": dt.zeros((5,), device_mesh=mesh, placements=[dt.Shard(0)])}, tmp_path / "s")
    # A corrupted data file is found by verify and by load.
    data = [f for f in os.listdir(tmp_path / "s") if f.endswith(".bin")][0]
    with open(tmp_path / "s" / data, "r+b") as f:
        f.seek(0)
        byte = f.read(1)
        f.seek(0)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(dt.Error, match="checksum|corrupt"):
        dcp.verify(tmp_path / "s")
    with pytest.raises(dt.Error, match="state dict holds"):
        dcp.save({"x": object()}, tmp_path / "t", world=mesh.world)


def _train(model, opt, x, steps):
    for _ in range(steps):
        opt.zero_grad()
        y = model(x)
        dt.mean(y * y).backward()
        opt.step()


def _tensor_parallel(model, mesh):
    dt.parallelize_module(model, mesh["tp"], dt.ColwiseParallel(output_layouts=dt.Replicate()))
    return model


def test_model_and_optimizer_resume_on_the_same_and_another_layout(tmp_path, rng):
    w = rng.standard_normal((6, 4)).astype(np.float32) * 0.5
    b = rng.standard_normal(6).astype(np.float32) * 0.1
    x_np = rng.standard_normal((8, 4)).astype(np.float32)
    mesh = dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["dp", "tp"])
    x = dt.distribute_tensor(x_np, mesh, [dt.Replicate(), dt.Replicate()])

    # Uninterrupted: 4 steps, the weight tensor-parallel, and replicated.
    ref_tp = _tensor_parallel(dt.nn.Linear(mesh, w, b), mesh)
    _train(ref_tp, dt.optim.AdamW(ref_tp.named_parameters(), lr=0.01), x, 4)
    ref = dt.nn.Linear(mesh, w, b)
    _train(ref, dt.optim.AdamW(ref.named_parameters(), lr=0.01), x, 4)

    # 2 steps tensor-parallel, save.
    first = _tensor_parallel(dt.nn.Linear(mesh, w, b), mesh)
    opt = dt.optim.AdamW(first.named_parameters(), lr=0.01)
    _train(first, opt, x, 2)
    state = dcp.get_state_dict(first, opt)
    assert state["optim.weight.step"] == 2
    dcp.save(state, tmp_path / "step-2")

    def resume(model):
        opt2 = dt.optim.AdamW(model.named_parameters(), lr=0.01)
        state2 = dcp.get_state_dict(model, opt2)
        dcp.load(state2, tmp_path / "step-2")
        dcp.set_state_dict(state2, model, opt2)
        assert opt2.state("weight")["step"] == 2
        _train(model, opt2, x, 2)
        return model

    # On the layout that saved it: the same calls on the same local shapes,
    # so the uninterrupted run's bits (docs/testing.md, "What is bitwise").
    same = resume(_tensor_parallel(dt.nn.Linear(mesh, np.zeros_like(w), np.zeros_like(b)), mesh))
    np.testing.assert_array_equal(full(same.weight), full(ref_tp.weight))
    np.testing.assert_array_equal(full(same.bias), full(ref_tp.bias))

    # On another layout (replicated), against the replicated uninterrupted
    # run. The two differ in steps 1-2 only, where each tensor-parallel rank
    # multiplies [8, 4] x [4, 3] and the replicated run [8, 4] x [4, 6]: the
    # same sums, but BLAS may round them differently for other shapes (other
    # kernel blocking; OPENBLAS_CORETYPE=Prescott gives one ulp here), so
    # not bitwise. The bound: every product is a float32 sum of K <= 8 terms
    # (forward K = 4, weight gradient K = 8 over the batch), which two
    # kernels round at most gamma_K = K * 2^-24 ~ 4.8e-7 apart relative to
    # the sum of the terms' magnitudes. AdamW's update lr * m/(sqrt(v) + eps)
    # is invariant to the gradients' scale, so a relative change d of a
    # gradient moves a step by about lr * d, and 4 steps at lr 0.01 by about
    # 4 * 0.01 * 4.8e-7 * c ~ 1.9e-8 * c, c the sums' cancellation
    # (sum |terms| / |sum|), plus the parameters' own rounding (an ulp of
    # values below 2 is at most 2.4e-7) in each of the 4 updates. 2e-6
    # covers c up to ~50 and those roundings (measured: 0 with this CPU's
    # kernels, 3.7e-9 with OPENBLAS_CORETYPE=Prescott or Atom); a state
    # restored wrongly (a fresh AdamW after step 2) moves a weight by 1.4e-2.
    other = resume(dt.nn.Linear(mesh, np.zeros_like(w), np.zeros_like(b)))
    np.testing.assert_allclose(full(other.weight), full(ref.weight), rtol=0, atol=2e-6)
    np.testing.assert_allclose(full(other.bias), full(ref.bias), rtol=0, atol=2e-6)


def test_safetensors_round_trip(tmp_path, rng):
    mesh = dt.DeviceMesh(dt.World.simulated(4), (4,))
    a_np = rng.standard_normal((8, 2)).astype(np.float32)
    dcp.export_safetensors({"a": dt.distribute_tensor(a_np, mesh, [dt.Shard(0)]), "note": "x"},
                           pathlib.Path(tmp_path / "m.safetensors"))
    back = {"a": dt.zeros((8, 2), device_mesh=mesh, placements=[dt.Replicate()])}
    dcp.import_safetensors(back, tmp_path / "m.safetensors")
    np.testing.assert_array_equal(full(back["a"]), a_np)
