"""dtensor.checkpoint.state_dict: torch.distributed.checkpoint.state_dict's
functions, over dtensor.checkpoint.get_state_dict / set_state_dict (one flat
dict: the model's keys, "optim.<param>.<buffer>", "optim.lr", ...).

    from dtensor.checkpoint.state_dict import get_state_dict, set_state_dict
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    ...
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)

The DTensors of both dicts alias the live parameters and optimizer buffers,
so dcp.load writes into them; set_state_dict then applies what is not a
buffer (step counts, lr). The optimizer's dict is dtensor's flat form keyed
by parameter name ("fc.weight.exp_avg"), not PyTorch's {"state",
"param_groups"} nesting: it round-trips through dcp.save/load and
set_state_dict, which is what it is for.
"""

import sys

from . import _dtensor as _dt

_ck = _dt.checkpoint
_OPTIM = "optim."


def _one_optimizer(optimizers, by):
    if optimizers is None:
        return None
    if isinstance(optimizers, (list, tuple)):
        if len(optimizers) != 1:
            raise _dt.Error(f"{by}: dtensor takes one optimizer per model, got "
                            f"{len(optimizers)}")
        return optimizers[0]
    return optimizers


def _refuse(by, submodules, options):
    if submodules is not None:
        raise _dt.Error(f"{by}: submodules= is not implemented (the whole model's state only)")
    if options is not None:
        raise _dt.Error(f"{by}: options= (StateDictOptions) is not implemented: dtensor's state "
                        "dicts are always sharded DTensors keyed by parameter name")


def get_model_state_dict(model, *, submodules=None, options=None):
    """The model's parameters and persistent buffers by name, as DTensors
    aliasing the live ones."""
    _refuse("get_model_state_dict", submodules, options)
    return _ck.get_state_dict(model)


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    """The optimizer's buffers, step counts and hyper-parameters."""
    _refuse("get_optimizer_state_dict", submodules, options)
    opt = _one_optimizer(optimizers, "get_optimizer_state_dict")
    flat = _ck.get_state_dict(model, opt)
    return {k[len(_OPTIM):]: v for k, v in flat.items() if k.startswith(_OPTIM)}


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    """(model state dict, optimizer state dict), as PyTorch's."""
    _refuse("get_state_dict", submodules, options)
    opt = _one_optimizer(optimizers, "get_state_dict")
    flat = _ck.get_state_dict(model, opt)
    model_sd = {k: v for k, v in flat.items() if not k.startswith(_OPTIM)}
    optim_sd = {k[len(_OPTIM):]: v for k, v in flat.items() if k.startswith(_OPTIM)}
    return model_sd, optim_sd


def set_model_state_dict(model, model_state_dict, *, options=None):
    _refuse("set_model_state_dict", None, options)
    _ck.set_state_dict(dict(model_state_dict), model)


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    _refuse("set_optimizer_state_dict", None, options)
    opt = _one_optimizer(optimizers, "set_optimizer_state_dict")
    _ck.set_state_dict({_OPTIM + k: v for k, v in optim_state_dict.items()}, model, opt)


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    """Applies loaded state dicts: the model's values (where they are not the
    live DTensors already) and the optimizer's step counts, lr and buffers."""
    _refuse("set_state_dict", None, options)
    opt = _one_optimizer(optimizers, "set_state_dict")
    flat = dict(model_state_dict)
    flat.update({_OPTIM + k: v for k, v in optim_state_dict.items()})
    _ck.set_state_dict(flat, model, opt)


_module = sys.modules[__name__]
sys.modules["dtensor.checkpoint.state_dict"] = _module
_ck.state_dict = _module
