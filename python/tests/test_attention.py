# scaled_dot_product_attention from Python: the plain op against NumPy
# (PyTorch's keyword names, causal with L != S, masks, scale), and the
# DTensor op with heads or the query sequence sharded: the same values, no
# collective, and gradients equal to the replicated computation's.
import numpy as np
import pytest

import dtensor as dt


def reference(q, k, v, mask=None, is_causal=False, scale=None):
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if is_causal:
        L, S = s.shape[-2:]
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isinf(m), 0, m))
    p = e / np.where(e.sum(-1, keepdims=True) == 0, 1, e.sum(-1, keepdims=True))
    return p @ v


@pytest.mark.parametrize("is_causal,mask_kind,scale", [(False, None, None), (True, None, 0.3),
                                                       (False, "bool", None), (False, "float", 0.5)])
def test_plain_against_numpy(rng, is_causal, mask_kind, scale):
    q = rng.standard_normal((2, 3, 5, 4))
    k = rng.standard_normal((2, 3, 7, 4))
    v = rng.standard_normal((2, 3, 7, 6))
    mask = None
    if mask_kind == "bool":
        mask = rng.random((5, 7)) < 0.7
        mask[0] = False  # a fully masked row gives zeros, as PyTorch's _safe_softmax
    elif mask_kind == "float":
        mask = rng.standard_normal((1, 5, 7))
    got = dt.scaled_dot_product_attention(dt.tensor(q), dt.tensor(k), dt.tensor(v),
                                          attn_mask=None if mask is None else dt.tensor(mask),
                                          is_causal=is_causal, scale=scale)
    np.testing.assert_allclose(np.asarray(got), reference(q, k, v, mask, is_causal, scale),
                               rtol=1e-10, atol=1e-12)


def test_errors():
    q = dt.tensor(np.ones((2, 3, 4)))
    with pytest.raises(dt.Error, match="dropout_p must be 0"):
        dt.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(dt.Error, match="must not be given with is_causal"):
        dt.scaled_dot_product_attention(q, q, q, attn_mask=dt.tensor(np.ones((3, 3))), is_causal=True)


@pytest.mark.parametrize("placements,expected", [
    ([dt.Shard(1), dt.Shard(0)], [dt.Shard(1), dt.Shard(0)]),   # heads, batch
    ([dt.Shard(0), dt.Shard(2)], [dt.Shard(0), dt.Shard(2)]),   # batch, query sequence
])
def test_dtensor_kept_layouts_and_gradients(rng, placements, expected):
    mesh = dt.init_device_mesh((2, 2))
    q = rng.standard_normal((2, 4, 7, 3))
    k = rng.standard_normal((2, 4, 5, 3))
    v = rng.standard_normal((2, 4, 5, 2))
    seq = placements[1] == dt.Shard(2)
    kv_placements = [placements[0], dt.Replicate()] if seq else placements
    dq = dt.distribute_tensor(q, mesh, placements).requires_grad_()
    dk = dt.distribute_tensor(k, mesh, kv_placements).requires_grad_()
    dv = dt.distribute_tensor(v, mesh, kv_placements).requires_grad_()
    with dt.CommDebugMode() as comm:
        out = dt.scaled_dot_product_attention(dq, dk, dv, is_causal=True)
    assert comm.get_total_counts() == 0
    assert list(out.placements) == expected
    np.testing.assert_allclose(np.asarray(out.full_tensor()), reference(q, k, v, is_causal=True),
                               rtol=1e-10, atol=1e-12)
    # Gradients equal those of the replicated computation.
    rq, rk, rv = (dt.distribute_tensor(x, mesh, [dt.Replicate()] * 2).requires_grad_()
                  for x in (q, k, v))
    w = rng.standard_normal(out.shape)
    for a, b, c in ((dq, dk, dv), (rq, rk, rv)):
        o = dt.scaled_dot_product_attention(a, b, c, is_causal=True)
        dt.sum(o * dt.distribute_tensor(w, mesh, [dt.Replicate()] * 2)).backward()
    for x, r in ((dq, rq), (dk, rk), (dv, rv)):
        np.testing.assert_allclose(np.asarray(x.grad.full_tensor()), np.asarray(r.grad.full_tensor()),
                                   rtol=1e-10, atol=1e-12)
