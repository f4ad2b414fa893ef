"""dtensor.nn.init (import dtensor.nn.init as init): torch.nn.init's in-place
initialisations of a parameter (a DTensor), from the global generator
(dtensor.manual_seed). Each draws layout-invariant random numbers in the
parameter's own layout (dtensor.rand/randn with its mesh and placements: each
rank makes only its shard, no communication), transforms them elementwise
and copies them into the shards: the values are those of the whole tensor
whatever the layout, and the same on every process. Fan in/out as torch's
_calculate_fan_in_and_fan_out ((out, in, *receptive field))."""

import math
import sys
import types

from . import _dtensor as _dt


def _check(tensor, op):
    if not isinstance(tensor, _dt.DTensor):
        raise TypeError(f"init.{op}: expected a DTensor parameter, got {type(tensor).__name__}")
    if tensor.is_meta:
        raise _dt.Error(f"init.{op}: the parameter is on the meta device; call materialize() "
                        "first, or give its recipe as dtensor.nn.Init")
    if any(p.is_partial() for p in tensor.placements):
        raise _dt.Error(f"init.{op}: the parameter is laid out as {tensor.placements}; Shard "
                        "or Replicate expected")


def _like(tensor, draw):
    return draw(tuple(tensor.shape), dtype=tensor.dtype, device_mesh=tensor.device_mesh,
                placements=tensor.placements)


def _fill(tensor, values):
    # An op on a layout with ordered shards (fully_shard inside tp's Shard)
    # may answer in another layout of the same values; the copy is in place.
    if values.placements != tensor.placements:
        values = values.redistribute(tensor.placements)
    # Shard by shard (the same layout: no communication). DTensor.copy_ has
    # no rule for ordered shards (S(0)[1],S(0)[0]) even between equal specs.
    mine = values.local_shards()
    with _dt.no_grad():
        for rank, shard in tensor.local_shards().items():
            shard.copy_(mine[rank])
    return tensor


def uniform_(tensor, a=0.0, b=1.0):
    _check(tensor, "uniform_")
    return _fill(tensor, _like(tensor, _dt.rand) * (b - a) + a)


def normal_(tensor, mean=0.0, std=1.0):
    _check(tensor, "normal_")
    return _fill(tensor, _like(tensor, _dt.randn) * std + mean)


def constant_(tensor, val):
    _check(tensor, "constant_")
    return _fill(tensor, _dt.full(tuple(tensor.shape), val, dtype=tensor.dtype,
                                  device_mesh=tensor.device_mesh, placements=tensor.placements))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal(mean, std) restricted to [a, b]: each element is its first draw
    of a sequence of standard normals that lands in the interval (rejection;
    the same distribution as torch's inverse-CDF method, other values)."""
    _check(tensor, "trunc_normal_")
    if not a < b:
        raise _dt.Error(f"init.trunc_normal_: a must be below b, got a={a}, b={b}")
    lo, hi = (a - mean) / std, (b - mean) / std
    # A draw lands with probability P(lo <= z <= hi); give up only when it is
    # so small that the rounds needed are absurd.
    land = 0.5 * (math.erf(hi / math.sqrt(2)) - math.erf(lo / math.sqrt(2)))
    if land < 1e-6:
        raise _dt.Error(f"init.trunc_normal_: [a, b] = [{a}, {b}] holds too little of "
                        f"Normal({mean}, {std}) ({land:.3g})")
    center, half = (lo + hi) / 2, (hi - lo) / 2
    z = _like(tensor, _dt.randn)
    for _ in range(int(60 / land) + 10):
        outside = _dt.abs(z - center) > half
        if not bool(outside.any().full_tensor().item()):
            return _fill(tensor, z * std + mean)
        z = _dt.where(outside, _like(tensor, _dt.randn), z)
    raise _dt.Error("init.trunc_normal_: rejection did not converge")


def _fans(tensor, op):
    if len(tuple(tensor.shape)) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than "
                         "2 dimensions")
    receptive = 1
    for s in tuple(tensor.shape)[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor, "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor, "xavier_normal_")
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(tensor, a, mode, nonlinearity, op):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _fans(tensor, op)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_"))


init = types.ModuleType("dtensor.nn.init", __doc__)
for _name in ("uniform_", "normal_", "constant_", "zeros_", "ones_", "trunc_normal_",
              "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
              "calculate_gain"):
    setattr(init, _name, globals()[_name])
_dt.nn.init = init
sys.modules["dtensor.nn.init"] = init
