"""dtensor: distributed tensors (PyTorch's DTensor model in native code).

One logical tensor laid out over an n-d DeviceMesh of ranks by placements
Shard(dim), Replicate(), Partial(op). World.simulated(n) runs all n ranks in
this process; World.mpi() one rank per process under mpirun.

    import dtensor as dt
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"))
    d = dt.distribute_tensor(np.arange(24.0).reshape(4, 6), mesh, [dt.Shard(0), dt.Shard(1)])
    r = d.redistribute([dt.Replicate(), dt.Shard(1)])
    r.full_tensor()
"""

import ctypes as _ctypes

from . import _build_config

# Open MPI loads its plugins (mca_*.so) with dlopen and expects them to find
# libmpi's symbols globally; a Python extension is loaded with RTLD_LOCAL, so
# libmpi is loaded with RTLD_GLOBAL first (as mpi4py does).
if _build_config.MPI_LIBRARY:
    try:
        _ctypes.CDLL(_build_config.MPI_LIBRARY, mode=_ctypes.RTLD_GLOBAL)
    except OSError:  # the extension's own link to libmpi then reports what is missing
        pass

from ._dtensor import *  # noqa: E402,F401,F403
from ._dtensor import Error, World, DeviceMesh, current_rank  # noqa: E402

__version__ = _build_config.VERSION


def init_device_mesh(*args, mesh_shape=None, mesh_dim_names=None, world=None, device_type=None):
    """A DeviceMesh of `mesh_shape` (a tuple, or an int for 1-d) over `world`.

    Both spellings work: init_device_mesh((2, 2), ("dp", "tp")) and PyTorch's
    init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")).
    Without a world: World.mpi() when this process was started by mpirun
    (its size must equal the mesh's), otherwise a new World.simulated of the
    mesh's size.
    """
    args = list(args)
    if args and isinstance(args[0], str):  # PyTorch's (device_type, mesh_shape, ...)
        if device_type is not None:
            raise TypeError("init_device_mesh: device_type given twice")
        device_type = args.pop(0)
    if len(args) > 2:
        raise TypeError(f"init_device_mesh: too many positional arguments: {len(args)}")
    if args:
        if mesh_shape is not None:
            raise TypeError("init_device_mesh: mesh_shape given twice")
        mesh_shape = args.pop(0)
    if args:
        if mesh_dim_names is not None:
            raise TypeError("init_device_mesh: mesh_dim_names given twice")
        mesh_dim_names = args.pop(0)
    if mesh_shape is None:
        raise TypeError("init_device_mesh: mesh_shape missing")
    if device_type not in (None, "cpu"):
        raise Error(f'init_device_mesh: device_type "{device_type}": dtensor runs on the CPU only')
    if isinstance(mesh_shape, int):
        mesh_shape = (mesh_shape,)
    size = 1
    for s in mesh_shape:
        size *= s
    if world is None:
        world = World.from_launcher(size)
    if world.size != size:
        raise Error(f"init_device_mesh: mesh shape {tuple(mesh_shape)} needs {size} ranks but "
                    f"the world has {world.size}")
    return DeviceMesh(world, tuple(mesh_shape), list(mesh_dim_names) if mesh_dim_names else None)

# torch.nn's Python side (after the extension's dtensor.nn): the Module API,
# containers and small modules, functional, init, and the layout calls that
# adopt modules made without a mesh.
from . import _nn_module, _nn_modules, _nn_functional, _nn_init, _nn_layout  # noqa: E402,F401
# torch.distributed.checkpoint.state_dict as dtensor.checkpoint.state_dict.
from . import _dcp_state_dict  # noqa: E402,F401
# Per-rank values: what "this process's" value is in a simulated world.
from ._rank_local import RankLocal, rank_map  # noqa: E402,F401


def each_rank(world_or_mesh):
    """Runs the body of a for loop once per rank this process holds, as that rank.

        for r in dtensor.each_rank(mesh):
            shard = d.to_local()      # rank r's; mesh.get_rank() == r

    Each iteration is inside `with current_rank(r):` (left again before the
    next). A mesh gives the held ranks it contains, a World all held ranks:
    every rank in a simulated world, the process's own under MPI, so the
    same loop runs once per process there. Ops and collectives inside still
    act for every rank: this is for the per-rank views (to_local,
    from_local of one tensor, get_rank, get_local_rank, get_coordinate).
    """
    if isinstance(world_or_mesh, DeviceMesh):
        ranks = [r for r in world_or_mesh.world.held_ranks if world_or_mesh.contains(r)]
    elif isinstance(world_or_mesh, World):
        ranks = list(world_or_mesh.held_ranks)
    else:
        raise TypeError(f"each_rank: expected a World or a DeviceMesh, got "
                        f"{type(world_or_mesh).__name__}")
    for r in ranks:
        with current_rank(r):
            yield r
