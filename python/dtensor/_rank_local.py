"""Per-rank values: what "this process's" value is in a simulated world.

Under MPI a process holds one rank, and PyTorch's per-process answers
(mesh.get_rank(), mesh.get_local_rank(), d.to_local()) are plain values. A
simulated world holds every rank in one process, so outside
`with dtensor.current_rank(r):` each of them is a RankLocal: one value per
held rank (PyTorch's LocalTensor / LocalIntNode, for its LocalTensorMode).
A RankLocal acts like its values, rank by rank: methods, attributes,
arithmetic and indexing apply to each rank's value (inside that rank's
current_rank) and give a RankLocal again, or the plain value when it is a
non-tensor equal on every rank (so `x.shape` of equal shapes is a shape).
What needs ONE value (bool(), int(), float(), a list index) raises
dtensor.Error, except the pieces of chunk/split/unbind/tensor_split, which
take a RankLocal index. Where a RankLocal meets the distributed API it is a
dict of shards: DTensor.from_local takes one, a module under fully_shard,
replicate or parallelize_module takes one as the ranks' local batch (as a
plain tensor under MPI), and so does loss_parallel's cross_entropy target.

So SPMD code written for one rank, such as

    tokens = tokens.chunk(mesh["dp"].size())[mesh["dp"].get_local_rank()]

runs unchanged in both worlds: under MPI it is the process's chunk, in a
simulated world a RankLocal of every rank's.
"""

import functools
import sys

from . import _dtensor as _dt

_SCALARS = (int, float, bool, str, bytes, type(None), complex)


class RankLocal:
    """One value per rank: `RankLocal({rank: value, ...})` (see the module's doc)."""

    __slots__ = ("_by_rank",)

    def __init__(self, by_rank):
        if not isinstance(by_rank, dict) or not by_rank:
            raise _dt.Error(f"RankLocal: expected a non-empty dict {{rank: value}}, got "
                            f"{type(by_rank).__name__}")
        for r in by_rank:
            if not isinstance(r, int) or isinstance(r, bool) or r < 0:
                raise _dt.Error(f"RankLocal: a rank must be an int >= 0, got {r!r}")
        object.__setattr__(self, "_by_rank", dict(sorted(by_rank.items())))

    @property
    def by_rank(self):
        """{rank: value}, in rank order (a new dict)."""
        return dict(self._by_rank)

    @property
    def ranks(self):
        return list(self._by_rank)

    def __repr__(self):
        return "RankLocal({" + ", ".join(f"{r}: {v!r}" for r, v in self._by_rank.items()) + "})"

    def __format__(self, spec):
        return "RankLocal({" + ", ".join(f"{r}: {format(v, spec)}"
                                         for r, v in self._by_rank.items()) + "})"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        values = {r: getattr(v, name) for r, v in self._by_rank.items()}
        if all(callable(v) for v in values.values()):
            return functools.partial(_call_each, values)
        return _combine(values)

    def __setattr__(self, name, value):
        for r, v in self._by_rank.items():
            setattr(v, name, _at(value, r))

    def __getitem__(self, key):
        return rank_map(lambda v, k: v[k], self, key)

    def __setitem__(self, key, value):
        rank_map(lambda v, k, x: v.__setitem__(k, x), self, key, value)

    def __len__(self):
        return _one(rank_map(len, self), "len()")

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def _needs_one(self, what):
        raise _dt.Error(
            f"{what} of a per-rank value ({self!r}) needs one value, but this simulated world "
            f"holds several ranks and they differ; run the code for one rank inside "
            f"`with dtensor.current_rank(r):` (or `for r in dtensor.each_rank(mesh):`), or "
            f"apply it to every rank's value with dtensor.rank_map(fn, value)")

    def __bool__(self):
        self._needs_one("bool()")

    def __index__(self):
        self._needs_one("Using it as an index (__index__)")

    def __int__(self):
        self._needs_one("int()")

    def __float__(self):
        self._needs_one("float()")

    def __complex__(self):
        self._needs_one("complex()")

    __hash__ = None


def _unary(name):
    def op(self):
        return rank_map(lambda v: getattr(v, name)(), self)
    op.__name__ = name
    return op


def _binary(name):
    def op(self, other):
        return rank_map(lambda v, o: getattr(v, name)(o), self, other)
    op.__name__ = name
    return op


for _name in ("neg", "pos", "abs", "invert"):
    setattr(RankLocal, f"__{_name}__", _unary(f"__{_name}__"))
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lshift", "rshift"):
    for _form in ("", "r", "i"):
        setattr(RankLocal, f"__{_form}{_name}__", _binary(f"__{_form}{_name}__"))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(RankLocal, f"__{_name}__", _binary(f"__{_name}__"))


def _at(value, rank):
    """`value` as rank `rank` sees it: its value there for a RankLocal (also
    inside lists, tuples and dicts), else itself."""
    if isinstance(value, RankLocal):
        try:
            return value._by_rank[rank]
        except KeyError:
            raise _dt.Error(f"a per-rank value over ranks {value.ranks} has no value for rank "
                            f"{rank}: per-rank values used together must cover the same ranks"
                            ) from None
    if type(value) in (list, tuple):
        return type(value)(_at(v, rank) for v in value)
    if type(value) is dict:
        return {k: _at(v, rank) for k, v in value.items()}
    return value


def _ranks_of(values, ranks=None):
    for v in values:
        if isinstance(v, RankLocal):
            if ranks is None:
                ranks = v.ranks
            elif v.ranks != ranks:
                raise _dt.Error(f"per-rank values over different ranks used together: {ranks} "
                                f"and {v.ranks}")
        elif type(v) in (list, tuple):
            ranks = _ranks_of(v, ranks)
        elif type(v) is dict:
            ranks = _ranks_of(v.values(), ranks)
    return ranks


def _combine(values):
    """{rank: value} as one value when every rank's is the same non-tensor
    (PyTorch's LocalIntNode collapses equal ints the same way), else a
    RankLocal. Tensors stay per rank even when equal: each rank owns its own."""
    first = next(iter(values.values()))
    if _plain(first):
        try:
            if all(_plain(v) and v == first for v in values.values()):
                return first
        except Exception:  # noqa: BLE001 - a value that cannot compare stays per rank
            pass
    return RankLocal(values)


def _plain(v):
    if isinstance(v, _SCALARS):
        return True
    return type(v) in (list, tuple) and all(_plain(x) for x in v)


def _call_each(fns, *args, **kwargs):
    ranks = _ranks_of(list(args) + list(kwargs.values()), list(fns))
    if ranks != list(fns):
        raise _dt.Error(f"per-rank values over different ranks used together: {list(fns)} and "
                        f"{ranks}")
    out = {}
    for r, fn in fns.items():
        with _dt.current_rank(r):
            out[r] = fn(*_at(args, r), **_at(kwargs, r))
    return _combine(out)


def rank_map(fn, *args, **kwargs):
    """fn(*args, **kwargs) once per rank of the RankLocal arguments, each call
    inside that rank's `current_rank` with every RankLocal replaced by the
    rank's value; the results as a RankLocal (or the plain value when every
    rank's is the same non-tensor). Without RankLocal arguments, fn is called
    once, as is."""
    ranks = _ranks_of(list(args) + list(kwargs.values()))
    if ranks is None:
        return fn(*args, **kwargs)
    out = {}
    for r in ranks:
        with _dt.current_rank(r):
            out[r] = fn(*_at(args, r), **_at(kwargs, r))
    return _combine(out)


def _one(value, what):
    if isinstance(value, RankLocal):
        value._needs_one(what)
    return value


class Pieces(tuple):
    """The pieces of chunk, split, unbind and tensor_split (a tuple, as in
    PyTorch) that also take a per-rank index: pieces[mesh.get_local_rank()]
    is each rank's piece."""

    __slots__ = ()

    def __getitem__(self, key):
        if isinstance(key, RankLocal):
            return rank_map(lambda k: tuple.__getitem__(self, k), key)
        out = tuple.__getitem__(self, key)
        return Pieces(out) if isinstance(key, slice) else out


# --- The per-process queries, per rank outside current_rank ---------------

def _held_in(mesh):
    return [r for r in mesh.world.held_ranks if mesh.contains(r)]


def _per_rank_query(cpp, held, names_a_rank=lambda args, kwargs: False):
    @functools.wraps(cpp)
    def query(self, *args, **kwargs):
        if _dt.get_current_rank() is None and not names_a_rank(args, kwargs):
            ranks = held(self)
            if len(ranks) > 1:
                out = {}
                for r in ranks:
                    with _dt.current_rank(r):
                        out[r] = cpp(self, *args, **kwargs)
                return _combine(out)
        return cpp(self, *args, **kwargs)
    query.__doc__ = (cpp.__doc__ or "") + (
        "\nIn a simulated world holding several ranks, outside `with dtensor.current_rank(r):`: "
        "a RankLocal of every held rank's answer (a plain value when all are equal).")
    return query


for _name in ("get_rank", "get_local_rank", "get_coordinate"):
    setattr(_dt.DeviceMesh, _name, _per_rank_query(getattr(_dt.DeviceMesh, _name), _held_in))
# to_local(rank) names its rank itself.
_dt.DTensor.to_local = _per_rank_query(
    _dt.DTensor.to_local, lambda d: _held_in(d.device_mesh),
    lambda args, kwargs: (args and args[0] is not None) or kwargs.get("rank") is not None)


def _pieces(cpp):
    @functools.wraps(cpp)
    def pieces(*args, **kwargs):
        return Pieces(cpp(*args, **kwargs))
    return pieces


for _name in ("chunk", "split", "unbind", "tensor_split"):
    for _owner in (_dt.Tensor, _dt.DTensor, _dt):
        if hasattr(_owner, _name):
            setattr(_owner, _name, _pieces(getattr(_owner, _name)))
    if hasattr(_dt, _name):
        setattr(sys.modules["dtensor"], _name, getattr(_dt, _name))
