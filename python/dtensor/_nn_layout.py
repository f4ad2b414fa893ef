"""parallelize_module, fully_shard and replicate for modules made without a
mesh: the subtree still on the local mesh is first adopted onto the root
mesh of the mesh the call names (nn::Module::adopt: parameters Replicate
from their whole values; buffers here, likewise), then the C++ call lays it
out as it lays out a module built on that mesh (include/dtensor/nn.h)."""

import sys

from . import _dtensor as _dt

_parallel = _dt.parallel
_cpp = {name: getattr(_parallel, name) for name in ("parallelize_module", "fully_shard",
                                                     "replicate")}


def _adopt(module, mesh, by):
    if not isinstance(module, _dt.nn.Module):
        return  # the C++ call names what it expected
    local = [m for _, m in module.named_modules() if m._is_local]
    if not local:
        return
    if not isinstance(mesh, _dt.DeviceMesh):
        raise _dt.Error(f"{by}: the module was made without a mesh; pass the mesh itself "
                        f"(e.g. mesh[\"tp\"]), got {mesh!r}")
    root = mesh.root()
    module._adopt(root, by)
    replicate = [_dt.Replicate()] * root.ndim
    for m in local:
        for name in m.__dict__.get("_buffer_names", {}):
            value = m.__dict__.get(name)
            if isinstance(value, _dt.DTensor) and value.device_mesh != root:
                m.__dict__[name] = _dt.distribute_tensor(value.full_tensor(), root, replicate)


def parallelize_module(module, device_mesh=None, parallelize_plan=None, **kwargs):
    _adopt(module, device_mesh, "parallelize_module")
    return _cpp["parallelize_module"](module, device_mesh, parallelize_plan, **kwargs)


def fully_shard(module, *args, mesh=None, **kwargs):
    _adopt(module, mesh, "fully_shard")
    return _cpp["fully_shard"](module, *args, mesh=mesh, **kwargs)


def replicate(module, *args, mesh=None, **kwargs):
    _adopt(module, mesh, "replicate")
    return _cpp["replicate"](module, *args, mesh=mesh, **kwargs)


for _f in (parallelize_module, fully_shard, replicate):
    _f.__doc__ = (_cpp[_f.__name__].__doc__ or "") + (
        "\nA module made without a mesh is first adopted onto the root of the mesh given "
        "(its whole parameters distributed Replicate there).")
    setattr(_parallel, _f.__name__, _f)
    setattr(_dt, _f.__name__, _f)
    setattr(sys.modules["dtensor"], _f.__name__, _f)
