"""torch.nn.Module's Python API on dtensor.nn.Module: buffers, state_dict /
load_state_dict, children, apply, parameters(recurse=), requires_grad_.

The tree (parameters, children, hooks, the mesh) lives in C++ (nn.h,
python/src/nn.cc); what PyTorch keeps in Python dicts and no C++ code reads
(buffers and their persistence) lives in the module's __dict__ here.
"""

from collections import namedtuple

from . import _dtensor as _dt

_M = _dt.nn.Module
_cpp_named_parameters = _M.named_parameters


def _as_dtensor(value, mesh, what):
    """A buffer or loaded value as a DTensor on `mesh` (Replicate when whole)."""
    if isinstance(value, _dt.DTensor):
        return value
    try:
        t = value if isinstance(value, _dt.Tensor) else _dt.tensor(value)
    except Exception as e:  # noqa: BLE001 - re-raised with what was given
        raise TypeError(f"{what}: expected a DTensor, Tensor or array, got "
                        f"{type(value).__name__}") from e
    return _dt.distribute_tensor(t, mesh, [_dt.Replicate()] * mesh.ndim)


def _buffer_names(module):
    return module.__dict__.get("_buffer_names", {})


def register_buffer(self, name, tensor, persistent=True):
    """torch's: a tensor that is state but no parameter (in state_dict() when
    persistent, never in parameters()). A Tensor or array becomes a DTensor,
    Replicate on the module's mesh (moved with it by parallelize_module and
    fully_shard); None is kept as None."""
    if not isinstance(name, str):
        raise TypeError(f"buffer name should be a string. Got {type(name).__name__}")
    if "." in name or name == "":
        raise KeyError(f'buffer name can\'t contain "." or be empty, got "{name}"')
    if name in dict(self.named_children()) or any(n == name for n, _ in self.named_parameters(
            recurse=False)):
        raise KeyError(f"attribute '{name}' already exists")
    value = None if tensor is None else _as_dtensor(tensor, self.device_mesh,
                                                    f"register_buffer('{name}')")
    names = dict(_buffer_names(self))
    names[name] = bool(persistent)
    self.__dict__["_buffer_names"] = names
    self.__dict__[name] = value


def named_buffers(self, prefix="", recurse=True):
    mods = self.named_modules() if recurse else [("", self)]
    out = []
    for mname, m in mods:
        for b in _buffer_names(m):
            value = m.__dict__.get(b)
            if value is not None:
                full = (mname + "." if mname else "") + b
                out.append(((prefix + "." if prefix else "") + full, value))
    return out


def buffers(self, recurse=True):
    return [b for _, b in named_buffers(self, recurse=recurse)]


def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
    """[(dotted name, parameter)], each parameter once (tied ones under their
    first name), own parameters first, then each child's."""
    if not remove_duplicate:
        raise _dt.Error("named_parameters(remove_duplicate=False) is not implemented")
    out = []
    for name, p in _cpp_named_parameters(self):
        if not recurse and "." in name:
            continue
        out.append(((prefix + "." if prefix else "") + name, p))
    return out


def parameters(self, recurse=True):
    return [p for _, p in named_parameters(self, recurse=recurse)]


def children(self):
    return [m for _, m in self.named_children()]


def apply(self, fn):
    """fn on every child (recursively), then on this module; returns it."""
    for child in children(self):
        child.apply(fn)
    fn(self)
    return self


def requires_grad_(self, requires_grad=True):
    for p in parameters(self):
        p.requires_grad_(requires_grad)
    return self


def zero_grad(self, set_to_none=True):
    """Every parameter's .grad to None (or zeros when set_to_none=False)."""
    for p in parameters(self):
        if set_to_none or p.grad is None:
            p.grad = None
        else:
            p.grad = _dt.zeros_like(p.grad)


def state_dict(self, destination=None, prefix="", keep_vars=False):
    """{dotted name: value}: each module's parameters, then its persistent
    buffers, parents first (torch's order). The DTensors alias the
    parameters, so dtensor.checkpoint.load into it restores them in place."""
    out = {} if destination is None else destination
    _dt.parallel._reshard_all(self)  # the shards, not an FSDP root's gathered values
    by_module = {}
    for name, p in _cpp_named_parameters(self):
        owner, _, _ = name.rpartition(".")
        by_module.setdefault(owner, []).append((name, p))
    for mname, m in self.named_modules():
        for name, p in by_module.get(mname, []):
            out[prefix + name] = p
        for b, persistent in _buffer_names(m).items():
            value = m.__dict__.get(b)
            if persistent and value is not None:
                out[prefix + (mname + "." if mname else "") + b] = value
    return out


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _copy_into(target, value):
    """value (any layout, mesh, or whole values) copied into target in place."""
    if target.is_meta:
        raise _dt.Error("load_state_dict into a parameter that is not materialized (meta); "
                        "call materialize() first")
    if isinstance(value, _dt.DTensor):
        if value.device_mesh == target.device_mesh:
            src = value.redistribute(target.placements)
        else:
            src = _dt.distribute_tensor(value.full_tensor(), target.device_mesh, target.placements)
    else:
        t = value if isinstance(value, _dt.Tensor) else _dt.tensor(value)
        src = _dt.distribute_tensor(t, target.device_mesh, target.placements)
    if src.dtype != target.dtype:
        src = src.to(target.dtype)
    with _dt.no_grad():
        target.copy_(src)


def load_state_dict(self, state_dict, strict=True):
    """torch's: copies the values in place (any layout or whole values);
    returns (missing_keys, unexpected_keys); strict raises on either, with
    torch's message. A shape mismatch always raises."""
    own = self.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    errors = []
    for k, target in own.items():
        if k not in state_dict:
            continue
        value = state_dict[k]
        shape = tuple(value.shape) if hasattr(value, "shape") else None
        if shape != tuple(target.shape):
            errors.append(f"size mismatch for {k}: copying a param with shape {shape} from "
                          f"checkpoint, the shape in current model is {tuple(target.shape)}.")
            continue
    if strict:
        if unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in unexpected)))
        if missing:
            errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in missing)))
    if errors:
        raise _dt.Error("Error(s) in loading state_dict for {}:\n\t{}".format(
            type(self).__name__, "\n\t".join(errors)))
    for k, target in own.items():
        if k in state_dict:
            _copy_into(target, state_dict[k])
    return _IncompatibleKeys(missing, unexpected)


def to_empty(self, *, device=None, recurse=True):
    """torch's (after building under meta_device() and laying the model out):
    allocates each process's shards. torch leaves the values unset; here
    they are the recipes' (materialize()), which an init_weights() with
    dtensor.nn.init then overwrites in place. Returns the module."""
    if device not in (None, "cpu"):
        raise _dt.Error(f'to_empty: device "{device}": dtensor runs on the CPU only')
    if not recurse:
        raise _dt.Error("to_empty(recurse=False) is not implemented")
    self.materialize()
    return self


for _name, _fn in [("register_buffer", register_buffer), ("to_empty", to_empty), ("named_buffers", named_buffers),
                   ("buffers", buffers), ("named_parameters", named_parameters),
                   ("parameters", parameters), ("children", children), ("apply", apply),
                   ("requires_grad_", requires_grad_), ("zero_grad", zero_grad),
                   ("state_dict", state_dict), ("load_state_dict", load_state_dict)]:
    setattr(_M, _name, _fn)
