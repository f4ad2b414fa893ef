"""torch.nn's containers (Sequential, ModuleList, ModuleDict), parameterless
modules (Dropout, GELU, ReLU, SiLU) and Embedding(padding_idx=) as Python
subclasses of dtensor.nn.Module, so that they are ordinary nodes of the C++
tree (names "layers.0.weight", parallelize_module, fully_shard).

A container is made on its children's mesh when they share one (modules
built on a mesh), otherwise on the local mesh (modules made without one).
Children cannot be removed or replaced (nn::Module has no way to), so
del, pop and assigning to a taken index raise dtensor.Error, and a slice of
a ModuleList is a list of its modules (a module has one parent).
"""

from collections import OrderedDict

from . import _dtensor as _dt

_nn = _dt.nn
Module = _nn.Module


def _init_on(self, modules):
    meshes = [m.device_mesh for m in modules if not m._is_local]
    if meshes and len(meshes) == len(modules) and all(m == meshes[0] for m in meshes):
        Module.__init__(self, meshes[0])
    else:
        Module.__init__(self)


def _no_removal(kind):
    raise _dt.Error(f"{kind}: children cannot be removed or replaced (a dtensor module's tree "
                    "only grows)")


class Sequential(Module):
    """torch.nn.Sequential(*modules) or Sequential(OrderedDict(name=module))."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            items = list(args[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(args)]
        _init_on(self, [m for _, m in items])
        for name, m in items:
            self.add_module(name, m)

    def _list(self):
        return [m for _, m in self.named_children()]

    def __getitem__(self, idx):
        mods = self._list()
        if isinstance(idx, slice):
            return mods[idx]
        return mods[idx]

    def __setitem__(self, idx, module):
        _no_removal("Sequential")

    def __delitem__(self, idx):
        _no_removal("Sequential")

    def __len__(self):
        return len(self.named_children())

    def __iter__(self):
        return iter(self._list())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for m in self:
            input = m(input)
        return input


class ModuleList(Module):
    """torch.nn.ModuleList(modules=None): index, len, iter, append, extend."""

    def __init__(self, modules=None):
        mods = list(modules) if modules is not None else []
        _init_on(self, mods)
        for m in mods:
            self.append(m)

    def _list(self):
        return [m for _, m in self.named_children()]

    def __getitem__(self, idx):
        return self._list()[idx]  # a slice is a list: its modules keep their parent

    def __setitem__(self, idx, module):
        _no_removal("ModuleList")

    def __delitem__(self, idx):
        _no_removal("ModuleList")

    def __len__(self):
        return len(self.named_children())

    def __iter__(self):
        return iter(self._list())

    def __iadd__(self, modules):
        return self.extend(modules)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward: call its modules")


class ModuleDict(Module):
    """torch.nn.ModuleDict(modules=None): the mapping API (new keys only)."""

    def __init__(self, modules=None):
        items = list(modules.items() if hasattr(modules, "items") else modules or [])
        _init_on(self, [m for _, m in items])
        for k, m in items:
            self[k] = m

    def __getitem__(self, key):
        children = dict(self.named_children())
        if key not in children:
            raise KeyError(key)
        return children[key]

    def __setitem__(self, key, module):
        if key in self:
            _no_removal("ModuleDict")
        self.add_module(key, module)

    def __delitem__(self, key):
        _no_removal("ModuleDict")

    def pop(self, key):
        _no_removal("ModuleDict")

    def clear(self):
        _no_removal("ModuleDict")

    def __len__(self):
        return len(self.named_children())

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, key):
        return key in dict(self.named_children())

    def keys(self):
        return [k for k, _ in self.named_children()]

    def values(self):
        return [m for _, m in self.named_children()]

    def items(self):
        return list(self.named_children())

    def update(self, modules):
        for k, m in (modules.items() if hasattr(modules, "items") else modules):
            self[k] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward: call its modules")


class Dropout(Module):
    """torch.nn.Dropout(p=0.5): zeroes each element with probability p and
    scales the others by 1/(1-p) while training, the mask from the global
    generator (dtensor.manual_seed) and layout-invariant; identity in eval()."""

    def __init__(self, p=0.5, inplace=False):
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        if inplace:
            raise _dt.Error("Dropout(inplace=True) is not implemented")
        Module.__init__(self)
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return _functional_dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


def _functional_dropout(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout: identity unless training; p=1 gives zeros."""
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if inplace:
        raise _dt.Error("dropout(inplace=True) is not implemented")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0
    return _dt.dropout(input, p)


class GELU(Module):
    """torch.nn.GELU(approximate='none' | 'tanh')."""

    def __init__(self, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise _dt.Error(f"GELU: approximate must be 'none' or 'tanh', got '{approximate}'")
        Module.__init__(self)
        self.approximate = approximate

    def forward(self, input):
        return _dt.gelu(input, approximate=self.approximate)


class ReLU(Module):
    """torch.nn.ReLU()."""

    def __init__(self, inplace=False):
        Module.__init__(self)
        self.inplace = inplace

    def forward(self, input):
        return _dt.relu(input)


class SiLU(Module):
    """torch.nn.SiLU()."""

    def __init__(self, inplace=False):
        Module.__init__(self)
        self.inplace = inplace

    def forward(self, input):
        return _dt.silu(input)


_CEmbedding = _nn.Embedding


class Embedding(_CEmbedding):
    """torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx=None), and
    the mesh forms Embedding(mesh, num, dim) / Embedding(mesh, weight).

    padding_idx: that row starts at zero and gets no gradient (its lookups'
    output is kept out of the graph by a forward hook), as torch's."""

    def __init__(self, *args, padding_idx=None, **kwargs):
        _CEmbedding.__init__(self, *args, **kwargs)
        if padding_idx is None:
            self.__dict__["padding_idx"] = None
            return
        num = self.weight.shape[0]
        if not -num <= padding_idx < num:
            raise _dt.Error(f"Embedding: padding_idx must be within num_embeddings ({num}), "
                            f"got {padding_idx}")
        padding_idx %= num
        self.__dict__["padding_idx"] = padding_idx
        w = self.weight
        if w.is_meta:
            raise _dt.Error("Embedding(padding_idx=) under meta_device() is not implemented")
        full = w.full_tensor()
        import numpy as np
        rows = np.asarray(full).copy()
        rows[padding_idx] = 0
        with _dt.no_grad():
            w.copy_(_dt.distribute_tensor(_dt.tensor(rows), w.device_mesh, w.placements))

        def keep_padding_out_of_the_graph(module, ids, out):
            keep = (ids != padding_idx).unsqueeze(-1)
            return _dt.where(keep, out, out.detach())

        self.register_forward_hook(keep_padding_out_of_the_graph)


_nn.Sequential = Sequential
_nn.ModuleList = ModuleList
_nn.ModuleDict = ModuleDict
_nn.Dropout = Dropout
_nn.GELU = GELU
_nn.ReLU = ReLU
_nn.SiLU = SiLU
_nn.Embedding = Embedding
