# bfloat16 and float16 values against PyTorch 1.13 (Debian's python3-torch)
# on random tensors mixed with NaN, +-inf, +-0, values at and next to
# rounding ties, subnormals of float32, bfloat16 and float16, and values
# past float16's range.
#
# What is compared, and how closely:
# - float32 -> bfloat16 / float16 conversion: bitwise equal to torch's
#   .to(torch.bfloat16) / .to(torch.float16).
# - add, sub, mul, div, neg, abs, relu, maximum, minimum, sqrt, where and the
#   comparisons: bitwise equal. Each is correctly rounded in float32, so
#   computing in float32 and rounding once (dtensor's rule and PyTorch's)
#   gives exactly one answer.
# - square, sign, floor, round: bitwise equal, as the ops above.
# - exp, log, tanh, sigmoid, sin, cos, log1p, expm1, softplus: within 1 ulp
#   of the 16-bit type (the float32
#   functions are not correctly rounded, and two libms may sit on either side
#   of a 16-bit rounding tie). gelu (both forms): within 1 ulp for x >= -4,
#   against torch's float32 gelu rounded once (see the test for why).
# - sum, mean, softmax, matmul: |dtensor - torch| <= 2 eps |torch's value|
#   (eps the 16-bit machine epsilon, 2^-7 or 2^-10: 1 to 2 ulps) + 2^-20 *
#   (the same op on |x|) for cancellation; both accumulate in float32, and
#   torch rounds some of them twice (a bfloat16 mean divides a rounded sum).
#
# NaNs are compared by class (NaN or not), never by payload: c10 makes the
# quiet NaN 0x7FC0 where its vectorised path makes 0xFFFF.
#
# The oracle is torch's op on the 16-bit tensors. Where torch 1.13 has no CPU
# kernel for float16 (exp, sqrt, relu, softmax, matmul, ... raise "not
# implemented for 'Half'"), it is torch's float32 op on the same float16
# values, rounded once to float16: the rule torch follows where it has them
# (and later versions follow for float16 too). torch_ref says which was used.
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dtensor as dt

HALVES = {"bfloat16": (dt.bfloat16, torch.bfloat16), "float16": (dt.float16, torch.float16)}


# ---- inputs --------------------------------------------------------------------


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def special_values():
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0,
         np.finfo(np.float32).max, -np.finfo(np.float32).max, np.finfo(np.float32).tiny,
         65504.0, 65519.996, 65520.0, -65520.0, 65536.0, 2.0**-14, 2.0**-24, 2.0**-25,
         1.5 * 2.0**-25, 2.0**-26, 2.0**-149, -2.0**-149, 2.0**-133, 3 * 2.0**-134]
    return np.array(v, dtype=np.float32)


def sample(rng, n=6000):
    """float32 values over the whole range, with ties and subnormals."""
    wide = rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))
    normal = rng.standard_normal(n) * 4
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    bits = bits[(bits & 0x7F800000) != 0x7F800000]               # NaNs and infs come below
    # bfloat16 ties: the 16 dropped bits exactly half, and one either side.
    low = np.array([0x8000, 0x7FFF, 0x8001], dtype=np.uint32)[rng.integers(0, 3, bits.size)]
    bf_ties = f32((bits & 0xFFFF0000) | low)
    # float16 ties: a float16 (normal or subnormal) plus half its spacing.
    h = rng.integers(0, 0x7C00, n).astype(np.uint16).view(np.float16).astype(np.float32)
    spacing = np.where(np.abs(h) < 2.0**-14, np.float32(2.0**-24),
                       np.exp2(np.floor(np.log2(np.maximum(np.abs(h), 2.0**-14)))) * 2.0**-10)
    f16_ties = (h + spacing / 2).astype(np.float32) * rng.choice([-1, 1], n)
    subnormal = f32(rng.integers(1, 0x800000, n // 4, dtype=np.uint32)) * rng.choice([-1, 1], n // 4)
    out = np.concatenate([wide, normal, bf_ties, f16_ties, subnormal, special_values()]).astype(np.float32)
    return rng.permutation(out)


@pytest.fixture(scope="module")
def values():
    return sample(np.random.default_rng(40))


# ---- bits ------------------------------------------------------------------------


def bits_of(x):
    """The 16-bit patterns of a torch or dtensor 16-bit tensor (dtensor through DLPack)."""
    t = x if isinstance(x, torch.Tensor) else torch.from_dlpack(x)
    return t.contiguous().view(torch.int16).numpy().view(np.uint16).astype(np.int64)


def is_nan(b, name):
    return (b & 0x7FFF) > (0x7F80 if name == "bfloat16" else 0x7C00)


def ordered(b):
    """The bit patterns as integers that count ulps (+0 and -0 both 0)."""
    mag = b & 0x7FFF
    return np.where(b & 0x8000, -mag, mag)


def check_ulps(got, want, name, ulps, inputs):
    g, w = bits_of(got), bits_of(want)
    assert g.shape == w.shape
    gn, wn = is_nan(g, name), is_nan(w, name)
    bad = gn != wn
    bad |= ~wn & (np.abs(ordered(g) - ordered(w)) > ulps)
    if ulps == 0:
        bad |= ~wn & (g != w)                                 # -0 is not +0
    if bad.any():
        i = np.flatnonzero(bad.ravel())[:5]
        shown = [tuple(float(a.ravel()[j]) for a in inputs) for j in i]
        pytest.fail(f"{bad.sum()} of {bad.size} differ by more than {ulps} ulp: inputs {shown}, "
                    f"dtensor bits {[hex(v) for v in g.ravel()[i]]}, "
                    f"torch bits {[hex(v) for v in w.ravel()[i]]}")


def torch_ref(op, *xs):
    """op on the 16-bit torch tensors, or, where torch 1.13 has no kernel for
    the dtype, on their float32 values rounded once (see the top)."""
    try:
        return op(*xs)
    except RuntimeError as e:
        if "not implemented for 'Half'" not in str(e):
            raise
        dtype = next(x.dtype for x in xs if x.is_floating_point())
        return op(*[x.float() if x.is_floating_point() else x for x in xs]).to(dtype)


def pair(values, name, shift=1):
    """Two 16-bit operands, as torch and as dtensor (the same bits)."""
    _, td = HALVES[name]
    a = torch.from_numpy(values).to(td)
    b = torch.from_numpy(np.roll(values, shift)).to(td)
    return a, b, dt.tensor(a), dt.tensor(b)


# ---- conversion -------------------------------------------------------------------


@pytest.mark.parametrize("name", HALVES)
def test_float32_to_half_is_bitwise_torch(values, name):
    d, td = HALVES[name]
    got = dt.from_numpy(values).to(d)
    want = torch.from_numpy(values).to(td)
    check_ulps(got, want, name, 0, [values])
    # and back to float32 exactly (every 16-bit value is a float32)
    back = np.asarray(got.to(dt.float32))
    np.testing.assert_array_equal(back, want.float().numpy())


@pytest.mark.parametrize("name", HALVES)
def test_float64_and_int64_to_half_go_through_float32_as_torch(values, name):
    d, td = HALVES[name]
    x64 = values.astype(np.float64) * (1 + 2.0**-30)       # not float32 values any more
    check_ulps(dt.from_numpy(x64).to(d), torch.from_numpy(x64).to(td), name, 0, [x64])
    i64 = np.random.default_rng(1).integers(-2**62, 2**62, 4000)
    check_ulps(dt.from_numpy(i64).to(d), torch.from_numpy(i64).to(td), name, 0, [i64])


# ---- exact elementwise ops ------------------------------------------------------

BINARY = {
    "add": (dt.add, torch.add), "sub": (dt.sub, torch.sub), "mul": (dt.mul, torch.mul),
    "div": (dt.div, torch.div), "maximum": (dt.maximum, torch.maximum),
    "minimum": (dt.minimum, torch.minimum),
}
UNARY = {
    "neg": (dt.neg, torch.neg), "abs": (dt.abs, torch.abs), "relu": (dt.relu, torch.relu),
    "sqrt": (dt.sqrt, torch.sqrt), "square": (dt.square, torch.square),
    "sign": (dt.sign, torch.sign), "floor": (dt.floor, torch.floor),
    "round": (dt.round, torch.round),
}
COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
           "ge": torch.ge}


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", BINARY)
def test_binary_ops_are_bitwise_torch(values, name, op):
    a, b, x, y = pair(values, name)
    check_ulps(BINARY[op][0](x, y), torch_ref(BINARY[op][1], a, b), name, 0, [a.float(), b.float()])


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", UNARY)
def test_unary_ops_are_bitwise_torch(values, name, op):
    a, _, x, _ = pair(values, name)
    check_ulps(UNARY[op][0](x), torch_ref(UNARY[op][1], a), name, 0, [a.float()])


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", COMPARE)
def test_comparisons_are_torch(values, name, op):
    a, b, x, y = pair(values, name)
    got = getattr(dt, op)(x, y)
    assert got.dtype == dt.bool
    np.testing.assert_array_equal(np.asarray(got), COMPARE[op](a, b).numpy())


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", ["where"])
def test_where_is_bitwise_torch(values, name, op):
    a, b, x, y = pair(values, name)
    cond = a.float() < b.float().abs()
    got = dt.where(dt.tensor(cond.numpy()), x, y)
    check_ulps(got, torch.where(cond, a, b), name, 0, [a.float(), b.float()])


# ---- transcendental ops: 1 ulp ------------------------------------------------------

TRANSCENDENTAL = {
    "exp": (dt.exp, torch.exp), "log": (dt.log, torch.log), "tanh": (dt.tanh, torch.tanh),
    "sigmoid": (dt.sigmoid, torch.sigmoid), "sin": (dt.sin, torch.sin),
    "cos": (dt.cos, torch.cos),
    # torch 1.13's log1p (bfloat16 and float32 alike) gives inf above about
    # 1e38, where it is about 88: its float64 log1p, rounded, is the reference.
    "log1p": (dt.log1p, lambda t: torch.log1p(t.double()).float().to(t.dtype)),
    "expm1": (dt.expm1, torch.expm1), "softplus": (dt.softplus, F.softplus),
}


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", TRANSCENDENTAL)
def test_transcendental_ops_within_one_ulp_of_torch(values, name, op):
    a, _, x, _ = pair(values, name)
    check_ulps(TRANSCENDENTAL[op][0](x), torch_ref(TRANSCENDENTAL[op][1], a), name, 1, [a.float()])


# gelu's oracle is torch's float32 gelu of the 16-bit values, rounded once,
# for both types: torch 1.13's bfloat16 gelu keeps bfloat16 intermediates
# (it flushes subnormal inputs to 0 and is tens of ulps off near x = -3 with
# approximate="tanh"), so it does not follow the rule, and it has no float16
# gelu. For x < -4 the float32 formula itself cancels (1 + erf(x/sqrt 2),
# 1 + tanh(...) keep a few float32 ulps of 1) and both results are within
# |x| * 2^-22 of each other (and of 0) rather than within a 16-bit ulp.
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_within_one_ulp_of_torch_float32_rounded_once(values, name, approximate):
    a, _, x, _ = pair(values, name)
    got = dt.gelu(x, approximate=approximate)
    want = F.gelu(a.float(), approximate=approximate).to(a.dtype)
    head = a.float() >= -4
    check_ulps(dt.tensor(torch.from_dlpack(got)[head]), want[head], name, 1, [a.float()[head]])
    tail = ~head & ~a.isnan()
    g, w = torch.from_dlpack(got)[tail].double(), want[tail].double()
    assert torch.equal(g.isnan(), w.isnan())
    ok = g.isnan() | ((g - w).abs() <= a[tail].double().abs() * 2.0**-22)
    assert bool(ok.all()), f"tail inputs {a[tail][~ok][:5].tolist()}: {g[~ok][:5].tolist()} vs {w[~ok][:5].tolist()}"


# ---- reductions, softmax, matmul: a stated tolerance ---------------------------------

EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10}   # machine epsilon: the spacing just above 1


def finite(rng, shape, name):
    """Values an accumulation can take without overflowing float16."""
    _, td = HALVES[name]
    return torch.from_numpy((rng.standard_normal(shape) * 2).astype(np.float32)).to(td)


REDUCTIONS = {
    "sum": (lambda x: x.sum(), lambda a: a.sum()),
    "sum_dim": (lambda x: x.sum(dim=1), lambda a: a.sum(dim=1)),
    "mean": (lambda x: x.mean(), lambda a: a.mean()),
    "mean_dim": (lambda x: x.mean(dim=0), lambda a: a.mean(dim=0)),
    "softmax": (lambda x: dt.softmax(x, -1), lambda a: torch.softmax(a, -1)),
    "matmul": (lambda x: x @ x.t(), lambda a: a @ a.t()),
}


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_softmax_matmul_close_to_torch(name, op):
    a = finite(np.random.default_rng(7), (48, 300), name)
    ours, theirs = REDUCTIONS[op]
    got = ours(dt.tensor(a))
    assert got.dtype == HALVES[name][0]
    want = torch_ref(theirs, a).double()
    scale = torch_ref(theirs, a.abs()).double().abs()      # what cancellation can lose
    diff = (torch.from_dlpack(got).double() - want).abs()
    tol = 2 * EPS[name] * want.abs() + 2.0**-20 * scale
    assert bool((diff <= tol).all()), f"max excess {(diff - tol).max().item()} over tolerance"
