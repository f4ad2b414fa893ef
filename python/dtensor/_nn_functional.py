"""dtensor.nn.functional (import dtensor.nn.functional as F): torch.nn.functional's
names over dtensor's ops. Ops with torch's signature are the dtensor ops
themselves, looked up by name (so ops added to dtensor later appear here,
also through the module's __getattr__); embedding and dropout differ in
their arguments and are wrapped here with torch's."""

import sys
import types

from . import _dtensor as _dt
from ._nn_modules import _functional_dropout

# The names torch.nn.functional has that are dtensor ops of the same
# signature (dtensor.X).
ALIASED = ("linear", "relu", "gelu", "silu", "softmax", "log_softmax", "cross_entropy",
           "nll_loss", "layer_norm", "rms_norm", "scaled_dot_product_attention", "pad",
           "softplus")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """torch.nn.functional.embedding(input, weight, padding_idx=None): rows of
    weight at the ids; the padding_idx rows get no gradient."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise _dt.Error("embedding: max_norm, scale_grad_by_freq and sparse are not implemented")
    out = _dt.embedding(weight, input)
    if padding_idx is None:
        return out
    if padding_idx < 0:
        padding_idx += weight.shape[0]
    keep = (input != padding_idx).unsqueeze(-1)
    return _dt.where(keep, out, out.detach())


functional = types.ModuleType("dtensor.nn.functional", __doc__)
functional.embedding = embedding
functional.dropout = _functional_dropout
for _name in ALIASED:
    if hasattr(_dt, _name):
        setattr(functional, _name, getattr(_dt, _name))


def _late(name):
    # An op added to dtensor after this module was made (names in ALIASED only).
    if name in ALIASED and hasattr(_dt, name):
        return getattr(_dt, name)
    raise AttributeError(f"module 'dtensor.nn.functional' has no attribute '{name}'")


functional.__getattr__ = _late
functional.ALIASED = ALIASED
_dt.nn.functional = functional
sys.modules["dtensor.nn.functional"] = functional
