"""Ready components for plain PyTorch training loops (SPEC 11).

A training script written in CleanRL's style (one file, a model, an optimizer,
a loop) gets cairn's verified, atomic checkpoints and an exact resume in a few
lines::

    import cairn, cairn.torch

    ckpt = cairn.torch.TrainState(model=agent, optimizer=opt, scheduler=sched,
                                  rng=True, iteration=0)
    mgr = cairn.CheckpointManager("runs/ppo", keep_last=3)
    if mgr.restore_latest(ckpt):              # resume where the last run stopped
        start = ckpt.iteration + 1
    for it in range(start, n):
        ...
        ckpt.iteration = it
        mgr.save(ckpt, it)

Every component restores **in place**: the model's parameters, the optimizer's
moments and the other live tensors are overwritten where they are (a restore
from local disk reads straight into them, through ``get_state_buffers``), so
references the script already holds (``agent``, ``opt``, the scheduler bound
to ``opt``) stay valid. Nothing in a checkpoint names a class to build: these
components are restored into the objects the script made, so no constructor
arguments need recording and no pickle is involved.

This module imports torch; ``import cairn`` does not import it.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Collection, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from cairn.checkpointable import Checkpointable, Names
from cairn.errors import CheckpointError, IncompatibleCheckpointError
from cairn.registry import class_path
from cairn.state_checks import Count, corrupt, count

__all__ = [
    "RNG",
    "GradScaler",
    "LRScheduler",
    "Module",
    "Optimizer",
    "StateDict",
    "Stateful",
    "TrainState",
    "as_component",
    "clone_state",
    "generator_state",
    "normalize_optimizer_state",
    "parameters_problem",
]


@runtime_checkable
class Stateful(Protocol):
    """Anything with PyTorch's ``state_dict()`` / ``load_state_dict(state)`` pair."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state_dict: Any) -> Any: ...


def clone_state(tree: Any) -> Any:
    """A copy of a state tree that training can no longer change (tensors and arrays copied).

    What a ``get_state`` hands out of live state (an optimizer's ``state_dict()``), so that an
    async save sees a snapshot.

    Dicts of any dict class (``OrderedDict``, ``defaultdict``) come back as plain dicts.
    """
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, dict):
        # A module's state_dict() is an OrderedDict (a dict subclass the codec refuses): it becomes a
        # plain dict here, with its tensors copied, and load_state_dict takes a plain dict back.
        return {k: clone_state(v) for k, v in tree.items()}
    if type(tree) is list:
        return [clone_state(v) for v in tree]
    if type(tree) is tuple:
        return tuple(clone_state(v) for v in tree)
    return tree


_REAL = (int, float, np.integer, np.floating)


def _tname(value: Any) -> str:
    return type(value).__qualname__


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a tensor or array, None for anything else."""
    if isinstance(value, torch.Tensor | np.ndarray | np.generic):
        return tuple(int(n) for n in value.shape)
    return None


def _unfit(saved: Any, own: Any, where: str, *, loose: bool) -> str | None:
    """Why ``saved`` cannot take the place of ``own`` (a live object's state value), or None when it can.

    PyTorch's ``load_state_dict`` methods check little: a scheduler's is ``__dict__.update``
    (any key replaces any attribute), an optimizer takes every hyperparameter of its saved
    groups as it is, and a value of another type or length surfaces only at the next
    ``step()``, far from the checkpoint that caused it. So a state is compared with the live
    object's own ``state_dict()``, recursively: the same kinds of values (numbers, flags,
    strings, None, tensors of the same shape, lists and tuples of the same length, dicts),
    and, unless ``loose``, no key the live object does not save (nested schedulers'
    states included) and the same strings (a scheduler's mode or phase names) and Nones.
    With ``loose`` (an optimizer's param groups), extra keys are allowed (torch ignores
    them) and a live ``None`` (``foreach``, ``fused``: "the default") takes a flag, number
    or string. The recursion follows ``own``, a live object's finite state, so a hostile
    file's depth cannot drive it.
    """
    if isinstance(own, dict):
        if not isinstance(saved, dict):
            return f"{where} is a {_tname(saved)}, not a dict"
        unknown = [repr(k)[:60] for k in saved if k not in own]
        if unknown and not loose:
            saves = sorted(map(str, own))
            return f"{where} sets {', '.join(unknown[:5])}, which this object does not save (it saves {saves})"
        for key, value in saved.items():
            if key in own:
                problem = _unfit(value, own[key], f"{where}[{key!r}]", loose=loose)
                if problem:
                    return problem
        return None
    if isinstance(own, list | tuple):
        if loose and _shape(saved) == (len(own),) and all(isinstance(v, _REAL) for v in own):
            return None  # numbers as an array (RLlib's convert_to_numpy): normalize_optimizer_state converts them
        if not isinstance(saved, list | tuple):
            return f"{where} is a {_tname(saved)}, not a {_tname(own)} of {len(own)}"
        if len(saved) != len(own):
            return f"{where} has {len(saved)} entries where this object has {len(own)}"
        for index, (value, reference) in enumerate(zip(saved, own, strict=True)):
            problem = _unfit(value, reference, f"{where}[{index}]", loose=loose)
            if problem:
                return problem
        return None
    if isinstance(own, torch.Tensor | np.ndarray):
        shape = _shape(saved)
        if shape is None:
            if not isinstance(saved, _REAL) or isinstance(saved, bool):
                return f"{where} is a {_tname(saved)}, not a tensor"
            shape = ()
        own_shape = _shape(own) or ()
        if shape != own_shape and not math.prod(shape) == 1 == math.prod(own_shape):  # () and (1,): one value
            return f"{where} has shape {shape} where this object has {_shape(own)}"
        return None
    if isinstance(own, bool | np.bool_):
        return None if isinstance(saved, bool | np.bool_) else f"{where} is a {_tname(saved)}, not a flag (bool)"
    if isinstance(own, _REAL):
        if isinstance(saved, bool) or not (isinstance(saved, _REAL) or _shape(saved) in ((), (1,))):
            return f"{where} is a {_tname(saved)}, not a number"
        return None
    if isinstance(own, str):
        if not isinstance(saved, str):
            return f"{where} is a {_tname(saved)}, not a string"
        if saved != own and not loose:
            return f"{where} is {saved[:60]!r} where this object has {own!r}"
        return None
    if own is None:
        if saved is None or (loose and isinstance(saved, bool | int | float | str)):
            return None
        return f"{where} is a {_tname(saved)} where this object has None"
    return None  # a value of a kind torch's states do not hold: the object's own load decides


# --------------------------------------------------------------------------- module


def parameters_problem(state: Mapping[str, Any], own: Mapping[str, Any], *, strict: bool) -> str | None:
    """Why a saved ``state_dict`` does not fit a module's own ``own`` (checked before a restore), or None.

    Names the module does not have, (``strict``) names of the module the state lacks, or a
    parameter of another shape: another architecture.
    """
    unknown = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state)) if strict else []
    names = [f"parameters {unknown} are in the checkpoint but not in the module"] if unknown else []
    names += [f"parameters {missing} of the module are not in the checkpoint"] if missing else []
    if names:
        return "; ".join(names)
    for name, value in state.items():
        shape, wanted = tuple(getattr(value, "shape", ())), tuple(own[name].shape)
        if shape != wanted:
            return f"parameter {name!r} has shape {shape} in the checkpoint but {wanted} in the module"
    return None


class Module(Checkpointable):
    """A ``torch.nn.Module``'s parameters and buffers (its ``state_dict``), restored in place.

    Args:
        module: The live module.
        strict: Refuse a checkpoint that lacks some of the module's parameters
            (it was written for another architecture). With ``strict=False`` the
            missing ones are left as they are; unknown names are always refused.
    """

    def __init__(self, module: torch.nn.Module, *, strict: bool = True) -> None:
        if not isinstance(module, torch.nn.Module):
            raise CheckpointError(f"cairn.torch.Module wraps a torch.nn.Module, not a {type(module).__qualname__}.")
        self.module = module
        self.strict = strict

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Parameter and buffer name -> tensor (copies)."""
        return {name: value.detach().clone() for name, value in self.module.state_dict().items()}

    def get_state_buffers(self) -> dict[str, Any] | None:
        """The live parameters and buffers: a restore from local disk reads straight into them."""
        return dict(self.module.state_dict())

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse, before a restore changes anything, what :meth:`set_state` refuses.

        Raises:
            IncompatibleCheckpointError: Unknown parameter names, other shapes, or
                (with ``strict``) missing parameters: another architecture.
        """
        problem = parameters_problem(state, self.module.state_dict(), strict=self.strict)
        if problem:
            raise IncompatibleCheckpointError(
                f"The checkpoint of {class_path(type(self.module))} does not fit this module: {problem}; it was "
                "written for another architecture. Build the module the checkpoint was written for (or wrap it "
                "with cairn.torch.Module(module, strict=False) to leave missing parameters as they are)."
            )

    def set_state(self, state: dict[str, Any]) -> None:
        """Load ``state`` into the module.

        Raises:
            IncompatibleCheckpointError: Unknown parameter names, other shapes, or
                (with ``strict``) missing parameters: another architecture.
        """
        self.check_state(state, ())
        where = f"the checkpoint of {class_path(type(self.module))}"
        tensors = {name: torch.as_tensor(value) for name, value in state.items()}
        try:
            self.module.load_state_dict(tensors, strict=False)
        except RuntimeError as err:
            raise IncompatibleCheckpointError(f"{where} cannot be loaded into this module: {err}") from err

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Nothing recorded: pass ``module=`` to ``from_checkpoint``."""
        return (), {}

    def get_metadata(self) -> dict[str, Any]:
        """The module's class and number of parameters (for ``cairn inspect``)."""
        return {
            "torch_class": class_path(type(self.module)),
            "num_parameters": int(sum(p.numel() for p in self.module.parameters())),
        }


# --------------------------------------------------------------------------- optimizer


def _like(value: Any, reference: Any) -> Any:
    """``value`` in the Python type of ``reference`` (a hyperparameter of a live param group)."""
    if isinstance(reference, bool):
        return bool(value) if isinstance(value, bool | int | np.bool_ | np.integer) else value
    if isinstance(reference, float) and isinstance(value, torch.Tensor | np.ndarray | np.generic | int):
        return float(value)
    if isinstance(reference, int) and isinstance(value, torch.Tensor | np.ndarray | np.generic):
        return int(value)
    if isinstance(reference, torch.Tensor) and not isinstance(value, torch.Tensor):
        return torch.tensor(value, dtype=reference.dtype, device=reference.device)
    if isinstance(reference, tuple | list) and isinstance(value, tuple | list | np.ndarray | torch.Tensor):
        items = list(value)
        if len(items) == len(reference):
            return type(reference)(_like(v, r) for v, r in zip(items, reference, strict=True))
    return value


def normalize_optimizer_state(state: Mapping[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Bring an optimizer state dict back to the types ``optimizer`` uses.

    cairn's format keeps types, but a state converted from another tool (RLlib
    stores optimizer states through ``convert_to_numpy``) or edited by hand may
    hold numpy arrays, or hyperparameters as tensors: Adam's ``betas`` as a
    tensor make the next ``step()`` fail with "beta1 as a Tensor is not
    supported" (ray-project/ray#51560). Hyperparameters take the type of the
    live optimizer's own (a float stays a float, a tuple of floats a tuple,
    a tensor ``lr`` a tensor); per-parameter buffers become tensors (torch then
    moves them to the parameter's device and dtype, and makes ``step`` a tensor).
    """
    live_groups = optimizer.param_groups
    groups = []
    for i, group in enumerate(state["param_groups"]):
        group = dict(group)
        reference = live_groups[i] if i < len(live_groups) else {}
        for key, value in group.items():
            if key == "params":
                group[key] = [int(p) for p in value]
            elif key in reference:
                group[key] = _like(value, reference[key])
        groups.append(group)
    per_param = {
        int(k): {name: torch.as_tensor(v) if isinstance(v, np.ndarray | np.generic) else v for name, v in s.items()}
        for k, s in state["state"].items()
    }
    return {"state": per_param, "param_groups": groups}


# Per-parameter buffers of torch's optimizers that have their parameter's shape (Adam's moments,
# SGD's momentum, ...): torch's load_state_dict casts their dtype but never checks their shape.
_PARAM_SHAPED = frozenset(
    {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "grad_avg", "acc_delta"}
    | {"sum", "exp_inf", "prev", "step_size", "ax"}
)


def _buffer_unfit(value: Any, where: str) -> str | None:
    """Why a per-parameter value of another optimizer's kind is no state at all (strings, dicts...)."""
    if value is None or isinstance(value, bool | _REAL) or _shape(value) is not None:
        return None
    if isinstance(value, list | tuple):  # LBFGS keeps lists of tensors
        for i, item in enumerate(value):
            if not (isinstance(item, bool | _REAL) or _shape(item) is not None):
                return f"{where}[{i}] is a {_tname(item)}, not a tensor or number"
        return None
    return f"{where} is a {_tname(value)}, not a tensor or number"


def _optimizer_unfit(state: Mapping[str, Any], optimizer: torch.optim.Optimizer) -> str | None:
    """Why ``state`` (a saved ``state_dict()``) cannot be loaded into ``optimizer``, or None."""
    groups, per_param = state["param_groups"], state["state"]
    live = optimizer.param_groups
    if not isinstance(groups, list | tuple) or len(groups) != len(live):
        found = f"{len(groups)} param groups" if isinstance(groups, list | tuple) else f"a {_tname(groups)}"
        return f"param_groups is {found}; this optimizer has {len(live)}"
    id_map: dict[int, torch.Tensor] = {}
    for i, (group, reference) in enumerate(zip(groups, live, strict=True)):
        if not isinstance(group, dict):
            return f"param_groups[{i}] is a {_tname(group)}, not a dict"
        params = group.get("params")
        if not isinstance(params, list | tuple) or not all(count.fits(p) for p in params):
            return f"param_groups[{i}]['params'] is not a list of parameter indices"
        if len(params) != len(reference["params"]):
            return f"param_groups[{i}] has {len(params)} parameters; this optimizer's has {len(reference['params'])}"
        for index, param in zip(params, reference["params"], strict=True):
            if int(index) in id_map:
                return f"parameter index {int(index)} appears twice in param_groups"
            id_map[int(index)] = param
        hyper = {k: v for k, v in group.items() if k != "params"}
        own = {k: v for k, v in reference.items() if k != "params"}
        problem = _unfit(hyper, own, f"param_groups[{i}]", loose=True)
        if problem:
            return problem
    if not isinstance(per_param, dict):
        return f"state is a {_tname(per_param)}, not a dict"
    for key, entry in per_param.items():
        if not count.fits(key) or int(key) not in id_map:
            return f"state holds an entry {repr(key)[:40]} for no parameter of param_groups"
        if not isinstance(entry, dict):
            return f"state[{key}] is a {_tname(entry)}, not a dict"
        param = id_map[int(key)]
        live_entry = optimizer.state.get(param, {})
        for name, value in entry.items():
            where = f"state[{key}][{name!r}]"
            if not isinstance(name, str):
                return f"state[{key}] has a key {repr(name)[:40]}, not a name"
            if name in live_entry:
                problem = _unfit(value, live_entry[name], where, loose=True)
            elif name in _PARAM_SHAPED and value is not None:
                shape = _shape(value)
                ok = shape == tuple(param.shape)
                problem = None if ok else f"{where} has shape {shape}, its parameter {tuple(param.shape)}"
            elif name == "step":
                shape = _shape(value)
                one = (isinstance(value, _REAL) and not isinstance(value, bool)) or (
                    shape is not None and math.prod(shape) == 1
                )
                problem = None if one else f"{where} is a {_tname(value)}, not a step count"
            else:
                problem = _buffer_unfit(value, where)
            if problem:
                return problem
    return None


class Optimizer(Checkpointable):
    """A ``torch.optim.Optimizer``'s state (moments, step counts, param groups), restored in place.

    Args:
        optimizer: The live optimizer.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise CheckpointError(
                f"cairn.torch.Optimizer wraps a torch.optim.Optimizer, not a {type(optimizer).__qualname__}."
            )
        self.optimizer = optimizer

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``optimizer.state_dict()`` (a copy): ``state`` per parameter index and ``param_groups``."""
        return dict(clone_state(self.optimizer.state_dict()))

    def get_state_buffers(self) -> dict[str, Any] | None:
        """The live per-parameter tensors (Adam's moments): a restore reads into them when they exist."""
        return dict(self.optimizer.state_dict())

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse, before a restore changes anything, a state the next ``step()`` would crash on.

        Raises:
            IncompatibleCheckpointError: Another number of parameter groups or parameters,
                hyperparameters of other types or lengths than this optimizer's, per-parameter
                buffers of other shapes than their parameters, or entries for no parameter.
        """
        if "state" not in state or "param_groups" not in state:
            return  # nothing of the optimizer was saved (a partial state)
        problem = _optimizer_unfit(state, self.optimizer)
        if problem:
            raise IncompatibleCheckpointError(
                f"The checkpoint of the optimizer {class_path(type(self.optimizer))} does not fit this optimizer: "
                f"{problem}. It was written for another model, optimizer class or set of parameter groups, or "
                "tampered with; build the optimizer the checkpoint was written for."
            )

    def set_state(self, state: dict[str, Any]) -> None:
        """Load ``state`` (with the hyperparameter types this optimizer uses).

        Raises:
            IncompatibleCheckpointError: What :meth:`check_state` refuses.
        """
        if "state" not in state or "param_groups" not in state:
            return  # nothing of the optimizer was saved (a partial state)
        self.check_state(state, ())
        try:
            self.optimizer.load_state_dict(normalize_optimizer_state(state, self.optimizer))
        except (ValueError, KeyError, RuntimeError, TypeError) as err:
            raise IncompatibleCheckpointError(
                f"The checkpoint of the optimizer {class_path(type(self.optimizer))} does not fit this "
                f"optimizer: {err}. It was written for another model or another set of parameter groups."
            ) from err

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Nothing recorded: pass ``optimizer=`` to ``from_checkpoint``."""
        return (), {}

    def get_metadata(self) -> dict[str, Any]:
        """The optimizer's class."""
        return {"torch_class": class_path(type(self.optimizer))}


# --------------------------------------------------------------------------- other state dicts


class StateDict(Checkpointable):
    """Any object with ``state_dict()`` / ``load_state_dict()``, restored through them.

    Used for LR schedulers, gradient scalers and user objects that follow
    PyTorch's convention (an EMA of the weights, a running normalizer, the
    state of a set of environments). The state must hold cairn's state leaves
    (tensors, arrays, numbers, strings, bytes, None, dicts, lists, tuples).

    Args:
        obj: The live object.
    """

    def __init__(self, obj: Any) -> None:
        if not isinstance(obj, Stateful):
            raise CheckpointError(
                f"{type(self).__qualname__} wraps an object with state_dict() and load_state_dict(), "
                f"not a {type(obj).__qualname__}."
            )
        self.obj = obj

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"state_dict": obj.state_dict()}`` (a copy)."""
        return {"state_dict": clone_state(self.obj.state_dict())}

    def set_state(self, state: dict[str, Any]) -> None:
        """``obj.load_state_dict(state["state_dict"])``.

        Raises:
            IncompatibleCheckpointError: When the object refuses the state.
        """
        if "state_dict" not in state:
            return
        self.check_state(state, ())
        # torch's load_state_dict methods change the object as they go (a scheduler's
        # __dict__.update comes before its checks): on a refusal, put the old state back.
        before = clone_state(self.obj.state_dict())
        try:
            self.obj.load_state_dict(state["state_dict"])
        except (ValueError, KeyError, RuntimeError, TypeError, IndexError, AttributeError) as err:
            with contextlib.suppress(Exception):
                self.obj.load_state_dict(before)
            raise IncompatibleCheckpointError(
                f"The checkpoint of {class_path(type(self.obj))} does not fit this object: {type(err).__name__}: {err}"
            ) from err

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Nothing recorded: pass ``obj=`` to ``from_checkpoint``."""
        return (), {}

    def get_metadata(self) -> dict[str, Any]:
        """The wrapped object's class."""
        return {"torch_class": class_path(type(self.obj))}


class LRScheduler(StateDict):
    """A learning-rate scheduler (``torch.optim.lr_scheduler``): epoch counters and last rates.

    The rate itself lives in the optimizer's param groups and comes back with
    :class:`Optimizer`.
    """

    def __init__(self, scheduler: Any) -> None:
        super().__init__(scheduler)

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse, before a restore changes anything, what the scheduler cannot take.

        Only the keys its own ``state_dict()`` has, at every depth (the states of the
        schedulers inside a ``SequentialLR`` or ``ChainedScheduler``, a ``LambdaLR``'s
        lambda objects), with values of the same kinds, lengths and strings.

        Raises:
            IncompatibleCheckpointError: A key the scheduler does not save: torch's
                ``load_state_dict`` is ``__dict__.update(state)``, also for nested
                schedulers, so a key from a file (``optimizer``) would replace any
                attribute of the live scheduler; or a value the next ``step()`` would
                crash on.
        """
        if "state_dict" not in state:
            return  # nothing of the scheduler was saved (a partial state)
        problem = _unfit(state["state_dict"], self.obj.state_dict(), "state_dict", loose=False)
        if problem:
            raise IncompatibleCheckpointError(
                f"The checkpoint of the LR scheduler {class_path(type(self.obj))} does not fit this scheduler: "
                f"{problem}. It was written for another scheduler class or configuration, or tampered with; "
                "build the scheduler the checkpoint was written for."
            )


class GradScaler(StateDict):
    """A ``torch.amp.GradScaler``: the loss scale and its growth tracker."""

    def __init__(self, scaler: Any) -> None:
        super().__init__(scaler)

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse, before a restore changes anything, a state this scaler cannot take.

        Raises:
            IncompatibleCheckpointError: A state of a disabled scaler for an enabled one;
                keys, types or values an enabled scaler cannot take (torch reads every key
                and sets them one by one; its constructor's rules: a scale > 0, a growth
                factor > 1, a backoff factor in (0, 1), a growth interval >= 1).
        """
        if "state_dict" not in state or not getattr(self.obj, "is_enabled", lambda: False)():
            return  # a disabled scaler loads nothing
        saved = state["state_dict"]
        if isinstance(saved, dict) and not saved:
            raise IncompatibleCheckpointError(
                "The checkpoint holds the state of a disabled GradScaler (no loss scale), and this "
                "GradScaler is enabled: it would start from its initial scale. Build the scaler with "
                "enabled=False, or restore a checkpoint of an enabled one."
            )
        own = self.obj.state_dict()
        problem = _unfit(saved, own, "state_dict", loose=False)
        if problem is None and isinstance(saved, dict):
            missing = sorted(set(own) - set(saved))
            rules: dict[str, Callable[[Any], bool]] = {
                "scale": lambda v: 0 < v < math.inf,
                "growth_factor": lambda v: 1 < v < math.inf,
                "backoff_factor": lambda v: 0 < v < 1,
                "growth_interval": Count(low=1).fits,
                "_growth_tracker": count.fits,
            }
            bad = [f"{k}={saved[k]!r}" for k, rule in rules.items() if k in saved and not rule(saved[k])]
            problem = f"it lacks {missing}" if missing else f"{', '.join(bad)} out of range" if bad else None
        if problem:
            raise IncompatibleCheckpointError(
                f"The checkpoint of the GradScaler does not fit this scaler: {problem}. It was not written by a "
                "GradScaler, or tampered with; restore a checkpoint of an enabled GradScaler."
            )


# --------------------------------------------------------------------------- RNG

_GeneratorLike = torch.Generator | np.random.Generator | random.Random


def generator_state(generator: torch.Generator, value: Any, *, where: str, values: bool = True) -> torch.Tensor:
    """A saved state of the torch ``generator``, checked: the uint8 bytes of its state's size, which a
    fresh generator of its device takes (the live one is never tried).

    ``values=False`` checks the layout only: during a restore, an array read into a live
    buffer does not hold its bytes until every check has passed.

    Raises:
        CorruptCheckpointError: Not a uint8 vector of the generator's state size, or bytes torch refuses.
    """
    array = value.numpy() if isinstance(value, torch.Tensor) else value
    size = generator.get_state().numel()
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.shape != (size,):
        what = f"{array.dtype} array of shape {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
        raise corrupt(where, f"expected the {size} bytes of a torch generator's state (uint8), found a {what}")
    state = torch.as_tensor(np.array(array, copy=True), dtype=torch.uint8)
    if values:
        try:
            torch.Generator(device=generator.device).set_state(state)
        except RuntimeError as err:
            raise corrupt(where, f"torch refuses it as a generator state ({err})") from err
    return state


def _generator_state(gen: _GeneratorLike) -> Any:
    if isinstance(gen, torch.Generator):
        return {"kind": "torch", "state": gen.get_state()}
    if isinstance(gen, np.random.Generator):
        return {"kind": "numpy", "state": gen.bit_generator.state}
    return {"kind": "python", "state": gen.getstate()}


def _set_generator_state(gen: _GeneratorLike, saved: Any, name: str) -> None:
    kind = _generator_state(gen)["kind"]
    if not isinstance(saved, dict) or saved.get("kind") != kind:
        got = saved.get("kind") if isinstance(saved, dict) else type(saved).__name__
        raise IncompatibleCheckpointError(
            f"The RNG checkpoint holds a {got} generator under {name!r}, but this RNG's {name!r} is a {kind} one."
        )
    try:
        if isinstance(gen, torch.Generator):
            gen.set_state(torch.as_tensor(saved["state"], dtype=torch.uint8))
        elif isinstance(gen, np.random.Generator):
            gen.bit_generator.state = saved["state"]
        else:
            gen.setstate(_as_python_rng_state(saved["state"]))
    except (ValueError, TypeError, RuntimeError, KeyError) as err:
        raise IncompatibleCheckpointError(f"Cannot restore the RNG {name!r}: {err}") from err


def _as_python_rng_state(state: Any) -> Any:
    # random.setstate wants (version, tuple of ints, gauss); keep it exact whatever list/tuple came back.
    version, internal, gauss = state
    return (int(version), tuple(int(x) for x in internal), gauss)


def _fresh_like(gen: _GeneratorLike) -> _GeneratorLike:
    """A new generator of ``gen``'s kind (and device, or bit generator), to try a saved state on."""
    if isinstance(gen, torch.Generator):
        return torch.Generator(device=gen.device)
    if isinstance(gen, np.random.Generator):
        return np.random.Generator(type(gen.bit_generator)())
    return random.Random()


class RNG(Checkpointable):
    """The random number generators a training loop draws from.

    By default the global ones: Python's ``random``, numpy's legacy
    ``np.random`` and torch's CPU generator (and the CUDA generators when CUDA
    is in use). ``generators`` adds named generator objects (``torch.Generator``,
    ``np.random.Generator``, ``random.Random``) that are restored in place.

    Args:
        python: Save ``random``'s global state.
        numpy: Save ``np.random``'s global state.
        torch: Save torch's global CPU (and CUDA) generators.
        generators: Name -> generator object.
    """

    _KINDS: ClassVar[tuple[str, ...]] = ("python", "numpy", "torch")

    def __init__(
        self,
        *,
        python: bool = True,
        numpy: bool = True,
        torch: bool = True,
        generators: Mapping[str, _GeneratorLike] | None = None,
    ) -> None:
        self.python = python
        self.numpy = numpy
        self.torch = torch
        self.generators = dict(generators or {})
        for name, gen in self.generators.items():
            if not isinstance(gen, _GeneratorLike):
                raise CheckpointError(
                    f"cairn.torch.RNG: generator {name!r} is a {type(gen).__qualname__}; expected a "
                    "torch.Generator, np.random.Generator or random.Random."
                )

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The generators' states (copies)."""
        state: dict[str, Any] = {}
        if self.python:
            state["python"] = random.getstate()
        if self.numpy:
            state["numpy"] = np.random.get_state(legacy=False)
        if self.torch:
            state["torch"] = torch.get_rng_state()
            if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                state["cuda"] = list(torch.cuda.get_rng_state_all())
        if self.generators:
            state["generators"] = {name: _generator_state(g) for name, g in self.generators.items()}
        cloned: dict[str, Any] = clone_state(state)
        return cloned

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse a state one of the generators would not take, before a restore sets any of them.

        :meth:`set_state` sets the generators one after the other: each saved state is first
        tried on a fresh generator of the same kind, so a refusal leaves every one as it was.

        Raises:
            IncompatibleCheckpointError: A state of another kind, or one Python or numpy refuses.
            CorruptCheckpointError: A torch state that is not a torch generator's bytes.
        """
        try:
            if self.python and "python" in state:
                random.Random().setstate(_as_python_rng_state(state["python"]))
            if self.numpy and "numpy" in state:
                np.random.RandomState().set_state(state["numpy"])
        except (ValueError, TypeError, RuntimeError, KeyError) as err:
            raise IncompatibleCheckpointError(f"Cannot restore the global RNG states: {err}") from err
        if self.torch and "torch" in state:
            generator_state(torch.default_generator, state["torch"], where="torch")
        saved = state.get("generators", {})
        for name, gen in self.generators.items():
            if name in saved:  # tried on a fresh generator of the same kind, never on the live one
                fresh = _fresh_like(gen)
                _set_generator_state(fresh, saved[name], name)

    def set_state(self, state: dict[str, Any]) -> None:
        """Set every generator this RNG saves from ``state`` (those ``state`` lacks are left).

        Raises:
            IncompatibleCheckpointError, CorruptCheckpointError: What :meth:`check_state` refuses
                (checked first here too: a refused state sets no generator).
        """
        self.check_state(state, ())
        try:
            if self.python and "python" in state:
                random.setstate(_as_python_rng_state(state["python"]))
            if self.numpy and "numpy" in state:
                np.random.set_state(state["numpy"])
            if self.torch and "torch" in state:
                torch.set_rng_state(torch.as_tensor(state["torch"], dtype=torch.uint8))
            if self.torch and "cuda" in state and torch.cuda.is_available():
                torch.cuda.set_rng_state_all([torch.as_tensor(s, dtype=torch.uint8) for s in state["cuda"]])
        except (ValueError, TypeError, RuntimeError, KeyError) as err:
            raise IncompatibleCheckpointError(f"Cannot restore the global RNG states: {err}") from err
        saved = state.get("generators", {})
        for name, gen in self.generators.items():
            if name in saved:
                _set_generator_state(gen, saved[name], name)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The flags; generator objects are not recorded (pass ``generators=`` to ``from_checkpoint``)."""
        return (), {"python": self.python, "numpy": self.numpy, "torch": self.torch}


# --------------------------------------------------------------------------- TrainState

_WRAPPERS: list[tuple[Callable[[Any], bool], Callable[[Any], Checkpointable]]] = [
    (lambda o: isinstance(o, Checkpointable), lambda o: o),
    (lambda o: isinstance(o, torch.nn.Module), Module),
    (lambda o: isinstance(o, torch.optim.Optimizer), Optimizer),
    (
        lambda o: isinstance(o, torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau),
        LRScheduler,
    ),
    (lambda o: isinstance(o, torch.amp.GradScaler), GradScaler),
    (
        lambda o: isinstance(o, _GeneratorLike),
        lambda o: RNG(python=False, numpy=False, torch=False, generators={"generator": o}),
    ),
    (lambda o: isinstance(o, Stateful), StateDict),
]


def as_component(obj: Any) -> Checkpointable | None:
    """The cairn component for a live training object, or None for a plain value.

    A ``Checkpointable`` is used as it is; an ``nn.Module``, optimizer, LR
    scheduler, ``GradScaler`` or generator gets its wrapper; any other object
    with ``state_dict()``/``load_state_dict()`` becomes a :class:`StateDict`.
    """
    for matches, wrap in _WRAPPERS:
        if matches(obj):
            return wrap(obj)
    return None


def _reserved(name: Any) -> bool:
    """A name a plain value may not have: read back as an attribute, it would hide a method or property."""
    return not isinstance(name, str) or name.startswith("_") or hasattr(TrainState, name)


class TrainState(Checkpointable):
    """The whole state of a training script, as one checkpointable object.

    Each live object becomes a component (a sub-folder of the checkpoint,
    restored in place); plain values (a step counter, a best score, arrays)
    are this object's own state and readable and writable as attributes::

        ckpt = TrainState(model=net, optimizer=opt, scheduler=sched, rng=True, step=0)
        ckpt.step = 10          # before a save
        ckpt.model is net       # the live objects, as given

    Args:
        model: An ``nn.Module`` (or any component), saved as ``model/``.
        optimizer: A ``torch.optim.Optimizer``, saved as ``optimizer/``.
        scheduler: An LR scheduler, saved as ``scheduler/``.
        scaler: A ``torch.amp.GradScaler``, saved as ``scaler/``.
        rng: True saves the global RNGs (Python, numpy, torch) as ``rng/``; an
            :class:`RNG` instance chooses which.
        **extra: More named objects (a second optimizer, a target network, an
            object with ``state_dict``/``load_state_dict``, a ``Checkpointable``)
            or plain values.
    """

    def __init__(
        self,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        rng: bool | RNG = False,
        **extra: Any,
    ) -> None:
        objects: dict[str, Any] = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
        objects.update(extra)
        if rng is True:
            objects["rng"] = RNG()
        elif isinstance(rng, RNG):
            objects["rng"] = rng
        elif rng is not False:
            raise CheckpointError(f"TrainState: rng must be True, False or a cairn.torch.RNG, not {rng!r}.")
        live: dict[str, Any] = {}
        components: dict[str, Checkpointable] = {}
        values: dict[str, Any] = {}
        for name, obj in objects.items():
            if obj is None and name in ("model", "optimizer", "scheduler", "scaler"):
                continue
            if _reserved(name):
                raise CheckpointError(f"TrainState: {name!r} is a reserved name; give the object another name.")
            comp = as_component(obj)
            if comp is None:
                values[name] = obj
            else:
                components[name] = comp
                live[name] = obj
        object.__setattr__(self, "_live", live)
        object.__setattr__(self, "_components", components)
        object.__setattr__(self, "_values", values)

    # Attribute access: the live objects and the plain values by name.

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        if name in self._live:
            return self._live[name]
        raise AttributeError(
            f"TrainState has no {name!r}; it holds {sorted(self._live)} and the values {sorted(self._values)}."
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._live:
            raise AttributeError(f"TrainState.{name} is the live object it was built with; it cannot be replaced.")
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        self._values[name] = value

    @property
    def values(self) -> dict[str, Any]:
        """The plain values (the live dict: changes show in the next save)."""
        values: dict[str, Any] = self._values
        return values

    # Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """One component per live object, named as given."""
        components: dict[str, Checkpointable] = self._components
        return list(components.items())

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"values": the plain values}`` and the components' states under their names."""
        return {
            "values": clone_state(dict(self._values)),
            **self._get_components_state(components, not_components=not_components),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore the components given and the plain values (values the state lacks are left).

        Raises:
            IncompatibleCheckpointError: The values are not a dict, or one is named like a live
                object or a reserved name (read back as an attribute, it would replace the model
                the script holds with whatever the file says).
        """
        values = state.get("values", {})
        bad = [repr(k)[:80] for k in values if _reserved(k) or k in self._live] if isinstance(values, dict) else None
        if bad is None or bad:
            raise IncompatibleCheckpointError(
                "The TrainState checkpoint's plain values "
                + (f"are a {type(values).__name__}, not a dict" if bad is None else f"use the names {', '.join(bad)}")
                + f", which are reserved or name this TrainState's live objects ({', '.join(sorted(self._live))}). "
                "It was not written by a TrainState like this one, or was tampered with; restore a checkpoint "
                "written by this script."
            )
        self._set_components_state(state)
        self._values.update(values)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Nothing recorded: a TrainState is restored into the one the script builds."""
        return (), {}

    def get_metadata(self) -> dict[str, Any]:
        """The names of the values (for ``cairn inspect``)."""
        return {"values": sorted(self._values)}
