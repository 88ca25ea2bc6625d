"""RLlib (Ray 2.60) saved and restored through cairn's format and storage (SPEC 11).

RLlib's ``Algorithm``, ``LearnerGroup``, ``Learner``, ``EnvRunner``,
connectors and ``RLModule`` implement the same ``Checkpointable`` methods
cairn's engine calls (``get_state``, ``set_state``,
``get_checkpointable_components``, ``get_ctor_args_and_kwargs``). An
:class:`RLlibCheckpointable` hands one of them, with its component tree, to
the engine: tensors go into safetensors, the rest into msgpack, every file is
checksummed, the commit is atomic, and any fsspec storage and
:class:`cairn.CheckpointManager` work::

    from cairn.integrations import rllib as cairn_rllib

    algo = config.build_algo()
    algo.train()
    path = cairn_rllib.save(algo, "ckpt")                 # or mgr.save(cairn_rllib.wrap(algo), step)
    cairn_rllib.restore(other_algo, path)                 # into an algorithm you built
    algo2 = cairn_rllib.from_checkpoint(path, config=config)   # or build one from the checkpoint

What JSON cannot hold. RLlib records constructor arguments with pickle: the
algorithm's config holds classes, functions and lambdas. cairn records
classes and module-level functions by import path and every other value it
can hold as data; a value it cannot (a lambda, an object) is listed in the
checkpoint's metadata (``rllib_unrecorded``). Restoring into an algorithm you
built needs none of it; :func:`from_checkpoint` then needs ``config=``
(never a silent fallback), or a save with ``allow_pickle=True``.

RLlib packs the running statistics of ``MeanStdFilter`` as base64 ``.npy``
strings, which RLlib loads with ``np.load(allow_pickle=True)``: cairn stores
them as arrays and writes them back in RLlib's form on restore, so a cairn
checkpoint never carries those pickles.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from cairn.checkpointable import Checkpointable, Names
from cairn.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    UnsafeCheckpointError,
)
from cairn.registry import (
    class_path,
    function_problem,
    register_passed,
    registered_for_value,
    resolve_function,
)

try:
    import ray
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.utils.actor_manager import FaultTolerantActorManager
    from ray.rllib.utils.checkpoints import Checkpointable as RLlibBase
except ImportError as _err:  # pragma: no cover - depends on the install
    raise ImportError(
        f"cairn.integrations.rllib needs RLlib ({_err}). Install it with: pip install 'cairn-rl[rllib]'",
        name="ray.rllib",
    ) from _err

__all__ = [
    "RLlibCheckpointable",
    "convert_checkpoint",
    "from_checkpoint",
    "restore",
    "save",
    "with_cairn_checkpoints",
    "wrap",
]

MARK = "__rllib__"
"""Key of the records this module puts into constructor arguments (a plain JSON object)."""

# The keys of an RLlib RunningStat state whose values are base64 .npy strings.
_RUNNING_STAT_ARRAYS = ("mean_array", "mean_delta_array", "sum_sq_diff_array", "sum_sq_diff_delta_array")


# --------------------------------------------------------------------------- state leaves


def _npy_to_array(text: str, where: str) -> np.ndarray:
    """RLlib's ``_serialize_ndarray`` string as an array, read without pickle."""
    import base64
    import zlib

    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
        arr: np.ndarray = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, zlib.error) as err:
        raise CheckpointError(f"The RLlib state at {where} holds a packed array cairn cannot read: {err}") from err
    return arr


def _array_to_npy(arr: Any) -> str:
    from ray.rllib.utils.serialization import _serialize_ndarray

    return str(_serialize_ndarray(np.asarray(arr)))


def _is_running_stat(d: dict[Any, Any]) -> bool:
    return "num_pushes" in d and all(k in d for k in _RUNNING_STAT_ARRAYS)


def to_cairn_state(tree: Any, path: str = "") -> Any:
    """An RLlib state with its packed ``.npy`` strings turned into arrays (no pickle on load)."""
    if type(tree) is dict:
        if _is_running_stat(tree):
            return {
                k: _npy_to_array(v, f"{path}/{k}") if k in _RUNNING_STAT_ARRAYS and isinstance(v, str) else v
                for k, v in tree.items()
            }
        return {k: to_cairn_state(v, f"{path}/{k}") for k, v in tree.items()}
    if type(tree) is list:
        return [to_cairn_state(v, f"{path}/{i}") for i, v in enumerate(tree)]
    if type(tree) is tuple:
        return tuple(to_cairn_state(v, f"{path}/{i}") for i, v in enumerate(tree))
    return tree


def to_rllib_state(tree: Any) -> Any:
    """The inverse of :func:`to_cairn_state`: arrays of running statistics back in RLlib's string form."""
    if type(tree) is dict:
        if _is_running_stat(tree):
            return {
                k: _array_to_npy(v) if k in _RUNNING_STAT_ARRAYS and not isinstance(v, str) else v
                for k, v in tree.items()
            }
        return {k: to_rllib_state(v) for k, v in tree.items()}
    if type(tree) is list:
        return [to_rllib_state(v) for v in tree]
    if type(tree) is tuple:
        return tuple(to_rllib_state(v) for v in tree)
    return tree


# --------------------------------------------------------------------------- constructor arguments


def _function_ref(fn: Any) -> str | None:
    """``"module:qualname"`` for a function a load can find again (:func:`~cairn.registry.resolve_function`)."""
    if function_problem(fn) is not None:
        return None  # lambdas, closures, scripts' functions, builtins and the standard library's: not recorded
    register_passed(fn)  # the program's config holds it: a checkpoint of it loads again in this program
    ref = f"{fn.__module__}:{fn.__qualname__}"
    try:
        resolve_function(ref, where="the function")
    except CheckpointError:
        return None  # not reachable by its path (a function replaced in its module): a load could not find it
    return ref


def _space_ok(value: Any) -> bool:
    from gymnasium import spaces

    simple = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    if type(value) in simple:
        return True
    if type(value) is spaces.Tuple:
        return all(_space_ok(s) for s in value.spaces)
    if type(value) is spaces.Dict:
        return all(_space_ok(s) for s in value.spaces.values())
    return False


def _picklable(value: Any) -> bool:
    import pickle

    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # lambdas, closures, live handles: whatever pickle refuses
        return False
    return True


def record_ctor_value(value: Any, path: str, unrecorded: list[str], *, keep_raw: bool) -> Any:
    """``value`` as cairn's constructor codec can hold it, without pickle.

    Classes and module-level functions are recorded by import path, configs
    by their state, dataclasses by their fields; a value that has no such
    form is replaced by a record naming it (and its path appended to
    ``unrecorded``), or, with ``keep_raw`` and when pickle can hold it, kept as
    it is for the engine to pickle (the save passes ``allow_pickle=True``).
    """
    t = type(value)
    if value is None or t in (bool, int, float, str, bytes):
        return value
    if t is dict:
        return {k: record_ctor_value(v, f"{path}/{k}", unrecorded, keep_raw=keep_raw) for k, v in value.items()}
    if t is list:
        return [record_ctor_value(v, f"{path}/{i}", unrecorded, keep_raw=keep_raw) for i, v in enumerate(value)]
    if t is tuple:
        return tuple(record_ctor_value(v, f"{path}/{i}", unrecorded, keep_raw=keep_raw) for i, v in enumerate(value))
    if isinstance(value, np.ndarray | np.generic | np.dtype | enum.Enum):
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor | torch.dtype):
        return value
    if torch is not None and isinstance(value, torch.device):
        return {MARK: "torch_device", "device": str(value)}
    spaces = sys.modules.get("gymnasium.spaces")
    if spaces is not None and isinstance(value, spaces.Space) and _space_ok(value):
        return value
    if registered_for_value(value) is not None:
        return value
    if isinstance(value, type) and "<locals>" not in value.__qualname__ and value.__module__ != "__main__":
        return value
    if isinstance(value, AlgorithmConfig):
        return {
            MARK: "algorithm_config",
            "state": record_ctor_value(value.get_state(), path, unrecorded, keep_raw=keep_raw),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if "<locals>" not in cls.__qualname__ and cls.__module__ != "__main__":
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
            return {
                MARK: "dataclass",
                "class": cls,
                "fields": record_ctor_value(fields, path, unrecorded, keep_raw=keep_raw),
            }
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        ref = _function_ref(value)
        if ref is not None:
            return {MARK: "function", "ref": ref}
    if keep_raw and _picklable(value):
        return value  # the engine pickles it (the save passes allow_pickle=True)
    unrecorded.append(path)
    return {MARK: "unrecorded", "path": path, "type": class_path(type(value)), "repr": repr(value)[:200]}


def _importable_class(cls: type) -> type:
    """``cls``, or its nearest base that can be found again by import path (for classes made at run time)."""
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        obj: Any = module
        for part in klass.__qualname__.split("."):
            obj = getattr(obj, part, None)
        if obj is klass and klass.__module__ != "__main__":
            found: type = klass
            return found
    return cls


def _check_env(state: Any, where: str) -> None:
    """Refuse a recorded RLlib config whose env id or env_config would make RLlib import a module.

    RLlib makes its environments with ``gymnasium.make(config.env, **env_config)``:
    an id ``"this:CartPole-v1"`` imports ``this``, ``render_mode="human"``
    imports pygame. The same rules as cairn's own configs (SPEC 8).
    """
    import gymnasium as gym
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    from cairn.rl.env.multi_agent_env import check_env_config, check_env_id

    if isinstance(state, AlgorithmConfig):
        state = {"env": state.env, "env_config": state.env_config}
    if not isinstance(state, dict) or "env" not in state:
        return  # not a config (RLlib passes configs as AlgorithmConfig objects or their dicts)
    env = state.get("env")
    try:
        if isinstance(env, str):
            check_env_id(env)
        elif env is not None and not (isinstance(env, type) and issubclass(env, gym.Env | MultiAgentEnv)):
            # RLlib calls a class env with the env_config: subprocess.Popen there ran the config's keys.
            raise ValueError(f"env={env!r:.100} is neither a gymnasium id nor a gymnasium.Env or MultiAgentEnv class")
        check_env_config(state.get("env_config") or {})
    except ValueError as err:
        raise IncompatibleCheckpointError(f"{where}: the recorded algorithm config is refused: {err}") from err


def _check_callbacks(state: Any, where: str) -> None:
    """Refuse a recorded RLlib config whose ``callbacks_class`` is no ``RLlibCallback`` subclass (SPEC 8).

    RLlib instantiates ``callbacks_class`` and calls ``callbacks_on_*`` with the
    algorithm. Both were resolved through the allow-list when the config was
    decoded (classes by the codec, functions by :func:`~cairn.registry.resolve_function`);
    this checks the role's type: a callbacks class builds callbacks.
    """
    from ray.rllib.callbacks.callbacks import RLlibCallback

    if isinstance(state, AlgorithmConfig):
        items = dict(vars(state))
    elif isinstance(state, dict):
        items = state
    else:
        return
    for key, value in items.items():
        if not (key == "callbacks_class" or (isinstance(key, str) and key.startswith("callbacks_on_"))):
            continue
        for obj in value if isinstance(value, list | tuple) else [value]:
            if obj is None or (key == "callbacks_class" and obj is RLlibCallback):
                continue
            problem = (
                "it is no subclass of ray.rllib.callbacks.callbacks.RLlibCallback"
                if key == "callbacks_class" and not (isinstance(obj, type) and issubclass(obj, RLlibCallback))
                else None
            )
            if problem is not None:
                name = class_path(obj) if isinstance(obj, type) else repr(obj)[:120]
                raise UnsafeCheckpointError(
                    f"{where}: the recorded config's {key} names {name}, which cairn refuses to call back: "
                    f"{problem}. If the checkpoint is yours, pass config= (with your callbacks) to from_checkpoint."
                )


def rebuild_ctor_value(value: Any, missing: list[str], where: str) -> Any:
    """The inverse of :func:`record_ctor_value`; paths of unrecorded values go to ``missing``."""
    if type(value) is list:
        return [rebuild_ctor_value(v, missing, where) for v in value]
    if type(value) is tuple:
        return tuple(rebuild_ctor_value(v, missing, where) for v in value)
    if type(value) is not dict:
        return value
    kind = value.get(MARK)
    if kind is None:
        return {k: rebuild_ctor_value(v, missing, where) for k, v in value.items()}
    if kind == "unrecorded":
        missing.append(str(value.get("path")))
        return None
    if kind == "torch_device":
        import torch

        try:
            return torch.device(str(value.get("device")))
        except (RuntimeError, ValueError) as err:
            raise IncompatibleCheckpointError(f"{where} records an invalid torch device: {err}") from err
    if kind == "function":
        # The one resolver: only plain functions of modules already imported, never the standard library's
        # (a file naming builtins:exit would make the build exit the program).
        return resolve_function(value.get("ref"), where=where)
    if kind == "algorithm_config":
        state = rebuild_ctor_value(value.get("state"), missing, where)
        cls = state.get("class") if isinstance(state, dict) else None
        if not (isinstance(cls, type) and issubclass(cls, AlgorithmConfig)):
            raise IncompatibleCheckpointError(f"{where} holds an algorithm config without a config class.")
        return cls.from_state(state)
    if kind == "dataclass":
        cls = value.get("class")
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise IncompatibleCheckpointError(f"{where} holds a dataclass record of {cls!r}, which is not a dataclass.")
        fields = rebuild_ctor_value(value.get("fields"), missing, where)
        try:
            return cls(**fields)
        except TypeError as err:
            raise IncompatibleCheckpointError(f"{where}: cannot rebuild {cls.__qualname__}: {err}") from err
    raise IncompatibleCheckpointError(f"{where} holds an unknown RLlib record {kind!r}.")


# --------------------------------------------------------------------------- the adapter


class RLlibCheckpointable(Checkpointable):
    """An RLlib ``Checkpointable`` (algorithm, learner group, learner, env runner, connector, module) for cairn.

    The component tree is RLlib's own (``learner_group/learner/rl_module/
    default_policy``, ``env_runner/env_to_module_connector/MeanStdFilter``),
    so a cairn checkpoint reads like an RLlib one. On restore the whole state
    is given to RLlib's ``set_state`` at once, at the top of what is restored,
    so RLlib does what it does after its own restores (weights synced to the
    env runners, connector states spread to the remote ones).

    Args:
        obj: The live RLlib object. None builds one from ``rllib_class``,
            ``args`` and ``kwargs`` (what ``from_checkpoint`` passes).
        rllib_class: The RLlib class, when ``obj`` is None.
        args: Recorded positional constructor arguments.
        kwargs: Recorded keyword constructor arguments.
        pickle_ctor: Keep constructor values cairn cannot record as data (the
            save must then pass ``allow_pickle=True``) instead of listing them
            as unrecorded.
        **overrides: Constructor parameters of ``rllib_class`` that replace the
            recorded ones (``config=`` for an algorithm).
    """

    def __init__(
        self,
        obj: Any = None,
        *,
        rllib_class: type | None = None,
        args: Any = (),
        kwargs: dict[str, Any] | None = None,
        pickle_ctor: bool = False,
        **overrides: Any,
    ) -> None:
        if obj is None:
            obj = _build(rllib_class, args, kwargs or {}, overrides)
        elif not isinstance(obj, RLlibBase):
            raise CheckpointError(
                f"RLlibCheckpointable wraps an RLlib Checkpointable (Algorithm, Learner, EnvRunner, RLModule, ...), "
                f"not a {type(obj).__qualname__}."
            )
        self.obj = obj
        self.pickle_ctor = pickle_ctor
        self._parent: RLlibCheckpointable | None = None
        self._applies_alone = False
        self._pending: dict[str, Any] | None = None
        self._children: dict[str, RLlibCheckpointable] = {}
        self._unrecorded: list[str] = []
        self._static: _StaticFolder | None = None

    @classmethod
    def _from_files(
        cls, state: dict[str, Any], ctor: dict[str, Any], metadata: dict[str, Any], children: dict[str, Any]
    ) -> RLlibCheckpointable:
        """A folder of a converted RLlib checkpoint: data only, no RLlib object (it is only saved)."""
        self = cls.__new__(cls)
        self.obj = None
        self.pickle_ctor = False
        self._parent = None
        self._applies_alone = False
        self._pending = None
        self._children = dict(children)
        self._unrecorded = []
        self._static = _StaticFolder(state, ctor, metadata)
        return self

    # ------------------------------------------------------------------ tree

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """RLlib's components, each wrapped (the same wrapper object every time)."""
        out: list[tuple[str, Checkpointable]] = []
        if self._static is not None:
            return list(self._children.items())
        for name, comp in self.obj.get_checkpointable_components():
            if isinstance(comp, FaultTolerantActorManager):
                # Remote learners: their state is part of this object's state (RLlib saves the first
                # healthy actor's); it is written as this folder's own state, not as a sub-folder.
                continue
            child = self._children.get(name)
            if child is None or child.obj is not comp:
                child = RLlibCheckpointable(comp, pickle_ctor=self.pickle_ctor)
                child._parent = self
                self._children[name] = child
            out.append((name, child))
        return out

    # ------------------------------------------------------------------ state

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """RLlib's ``get_state`` in cairn's leaves (packed arrays unpacked)."""
        if self._static is not None:
            return {**self._static.state, **{n: c.get_state() for n, c in self._children.items()}}
        state = self.obj.get_state(components, not_components=not_components)
        converted: dict[str, Any] = to_cairn_state(state)
        return converted

    def set_state(self, state: dict[str, Any]) -> None:
        """Collect ``state``; the top of the restore hands the assembled tree to RLlib's ``set_state``.

        cairn applies a checkpoint bottom-up, one folder at a time; RLlib wants
        the whole tree in one call (its ``set_state`` syncs remote actors).
        """
        self._pending = dict(state)
        if self._parent is None or self._applies_alone:
            full = self._assemble()
            try:
                self.obj.set_state(to_rllib_state(full))
                self._after_set_state(full)
            except CheckpointError:
                raise
            except Exception as err:  # RLlib and torch raise what they raise; a restore raises CheckpointErrors
                raise IncompatibleCheckpointError(
                    f"RLlib's {type(self.obj).__qualname__}.set_state refused the checkpoint's state: "
                    f"{type(err).__name__}: {err}. The checkpoint was written for another configuration "
                    "(model, spaces, modules); restore it into an object built like the one that wrote it."
                ) from err

    def _assemble(self) -> dict[str, Any]:
        full = dict(self._pending or {})
        self._pending = None
        for name, child in self._children.items():
            if child._pending is not None and name not in full:
                full[name] = child._assemble()
        return full

    def _after_set_state(self, full: dict[str, Any]) -> None:
        """What RLlib's ``Algorithm.restore_from_path`` does after ``set_state`` and cairn must too."""
        if not isinstance(self.obj, Algorithm):
            return
        algo: Any = self.obj  # typed Any: RLlib's attributes are Optional until the algorithm is built
        group = algo.env_runner_group
        if group is None or group.num_remote_env_runners() == 0 or algo.env_runner is not None:
            return
        # No local env runner: the connector states sit at the top of the algorithm's state, and
        # Algorithm.set_state ignores them there (RLlib restores them from the folders).
        for key, connector in (
            ("env_to_module_connector", algo.env_to_module_connector),
            ("module_to_env_connector", algo.module_to_env_connector),
        ):
            if key in full and connector is not None:
                connector.set_state(to_rllib_state(full[key]))
        from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

        group.sync_env_runner_states(
            config=algo.config,
            from_worker=None,
            env_steps_sampled=algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0),
            env_to_module=algo.env_to_module_connector,
            module_to_env=algo.module_to_env_connector,
        )

    @contextmanager
    def _alone(self) -> Iterator[None]:
        """Make this wrapper the top of a restore (a component restored on its own).

        Scoped to one ``restore_from_path`` call of this wrapper's parent: the
        engine applies the component's folder to this wrapper alone, so this
        wrapper, not the parent, hands the state to RLlib.
        """
        self._applies_alone = True
        try:
            yield
        finally:
            self._applies_alone = False

    def restore_from_path(
        self,
        path: str | os.PathLike[str],
        *,
        component: str | None = None,
        filesystem: Any = None,
        allow_pickle: bool = False,
        public_key: str | os.PathLike[str] | bytes | None = None,
    ) -> None:
        """Restore from a cairn checkpoint; with ``component``, only that subcomponent (its folder at ``path``).

        After a component under ``learner_group`` of an algorithm is restored, the
        new weights are synced to the env runners, as RLlib does. ``public_key``: see
        :meth:`cairn.Checkpointable.restore_from_path` (whole checkpoints only).
        """
        if not component:
            super().restore_from_path(path, filesystem=filesystem, allow_pickle=allow_pickle, public_key=public_key)
            return
        if public_key is not None:
            raise CheckpointError(
                "A signature covers a whole checkpoint: verify its root with cairn.verify_signature(root, "
                "public_key), then restore the component without public_key."
            )
        from cairn._tree import find_component

        target = find_component(self, component)
        assert isinstance(target, RLlibCheckpointable)
        with target._alone():
            target.restore_from_path(path, filesystem=filesystem, allow_pickle=allow_pickle)
        algo: Any = self.obj  # typed Any: RLlib's attributes are Optional until the algorithm is built
        if isinstance(self.obj, Algorithm) and component.startswith("learner_group"):
            algo.env_runner_group.sync_weights(from_worker_or_learner_group=self.obj.learner_group, inference_only=True)

    # ------------------------------------------------------------------ constructor and metadata

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The RLlib class and its constructor arguments, recorded as data (see the module docs)."""
        if self._static is not None:
            return (), dict(self._static.ctor)
        args, kwargs = self.obj.get_ctor_args_and_kwargs()
        unrecorded: list[str] = []
        rec_args = [
            record_ctor_value(a, f"args/{i}", unrecorded, keep_raw=self.pickle_ctor) for i, a in enumerate(args)
        ]
        rec_kwargs = {
            k: record_ctor_value(v, f"kwargs/{k}", unrecorded, keep_raw=self.pickle_ctor) for k, v in kwargs.items()
        }
        self._unrecorded = unrecorded
        return (), {"rllib_class": _importable_class(type(self.obj)), "args": rec_args, "kwargs": rec_kwargs}

    def get_metadata(self) -> dict[str, Any]:
        """The RLlib class, Ray's version and the constructor values that could not be recorded."""
        if self._static is not None:
            return dict(self._static.metadata)
        if not self._unrecorded:
            self.get_ctor_args_and_kwargs()  # fills _unrecorded (the engine asks for both)
        return {
            "rllib_class": class_path(type(self.obj)),
            "ray_version": str(ray.__version__),
            "rllib_unrecorded": list(self._unrecorded),
        }


@dataclasses.dataclass
class _StaticFolder:
    state: dict[str, Any]
    ctor: dict[str, Any]
    metadata: dict[str, Any]


def _build(rllib_class: Any, args: Any, kwargs: dict[str, Any], overrides: dict[str, Any]) -> Any:
    """Construct the recorded RLlib class; refuse when something needed was not recorded."""
    import inspect

    if not (isinstance(rllib_class, type) and issubclass(rllib_class, RLlibBase)):
        raise IncompatibleCheckpointError(
            f"The checkpoint records {rllib_class!r} as the RLlib class, which is not an RLlib Checkpointable."
        )
    where = f"the constructor arguments of {class_path(rllib_class)}"
    missing: list[str] = []
    args = list(rebuild_ctor_value(list(args), missing, where))
    kwargs = dict(rebuild_ctor_value(dict(kwargs), missing, where))
    for value in [*args, *kwargs.values()]:
        # The recorded values only: a config= the caller passes is the caller's own choice.
        _check_callbacks(value, where)
    sig = inspect.signature(rllib_class)
    names = [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for key, value in overrides.items():
        if key in names and names.index(key) < len(args):
            args[names.index(key)] = value
        else:
            kwargs[key] = value
        prefix = f"args/{names.index(key)}" if key in names and names.index(key) < len(args) else f"kwargs/{key}"
        missing = [m for m in missing if m != prefix and not m.startswith(prefix + "/")]
    for value in [*args, *kwargs.values()]:
        # Algorithm(config): a dict or AlgorithmConfig naming the env RLlib makes; checked after the
        # overrides, since a config= passed by the caller replaces the recorded one.
        _check_env(value, where)
    if missing:
        raise IncompatibleCheckpointError(
            f"Cannot build {class_path(rllib_class)} from this checkpoint: {len(missing)} constructor value(s) were "
            f"not recorded because they are not data (lambdas or objects): {', '.join(missing[:8])}"
            f"{' ...' if len(missing) > 8 else ''}. Pass them to from_checkpoint (for an algorithm: "
            "config=your_config), restore into an object you built, or save with allow_pickle=True."
        )
    try:
        return rllib_class(*args, **kwargs)
    except (Exception, SystemExit) as err:  # SystemExit too: code a checkpoint reaches never ends the program
        raise IncompatibleCheckpointError(
            f"Building {class_path(rllib_class)} from the recorded constructor arguments failed: "
            f"{type(err).__name__}: {err}"
        ) from err


# --------------------------------------------------------------------------- functions


def wrap(obj: Any, *, pickle_ctor: bool = False) -> RLlibCheckpointable:
    """An RLlib object as a cairn ``Checkpointable`` (for :class:`cairn.CheckpointManager`)."""
    return obj if isinstance(obj, RLlibCheckpointable) else RLlibCheckpointable(obj, pickle_ctor=pickle_ctor)


def save(
    obj: Any, path: str | os.PathLike[str] | None = None, *, filesystem: Any = None, allow_pickle: bool = False
) -> str:
    """Save an RLlib object (an ``Algorithm``, ...) as a cairn checkpoint; returns the path.

    Args:
        obj: The RLlib object.
        path: Where (local path or fsspec URI); None writes under the temp dir.
        filesystem: An fsspec filesystem ``path`` lives on.
        allow_pickle: Pickle the constructor values that are not data (lambdas
            in the config fail even then: pickle cannot hold them).
    """
    return wrap(obj, pickle_ctor=allow_pickle).save_to_path(path, filesystem=filesystem, allow_pickle=allow_pickle)


def restore(
    obj: Any,
    path: str | os.PathLike[str],
    *,
    component: str | None = None,
    filesystem: Any = None,
    allow_pickle: bool = False,
) -> None:
    """Restore an RLlib object you built from a cairn checkpoint (or one component of it).

    Args:
        obj: The RLlib object (e.g. ``config.build_algo()``).
        path: The checkpoint (with ``component``: that component's folder).
        component: A ``/``-joined component path, e.g.
            ``"learner_group/learner/rl_module/default_policy"``.
        filesystem: An fsspec filesystem ``path`` lives on.
        allow_pickle: Allow a checkpoint written with pickle.
    """
    wrap(obj).restore_from_path(path, component=component, filesystem=filesystem, allow_pickle=allow_pickle)


def from_checkpoint(
    path: str | os.PathLike[str],
    *,
    config: Any = None,
    filesystem: Any = None,
    allow_pickle: bool = False,
    **overrides: Any,
) -> Any:
    """A new RLlib object built from a cairn checkpoint and restored.

    With ``config`` (an ``AlgorithmConfig``) the algorithm is built with
    ``config.build_algo()``; otherwise with the recorded class and arguments,
    which fails with :class:`IncompatibleCheckpointError`, naming them, when
    some could not be recorded without pickle.

    Returns:
        The RLlib object (an ``Algorithm`` for an algorithm's checkpoint).
    """
    if config is not None and isinstance(config, AlgorithmConfig):
        algo = config.build_algo()
        restore(algo, path, filesystem=filesystem, allow_pickle=allow_pickle)
        return algo
    if config is not None:
        overrides["config"] = config
    wrapper = RLlibCheckpointable.from_checkpoint(path, filesystem=filesystem, allow_pickle=allow_pickle, **overrides)
    return wrapper.obj


TUNE_CHECKPOINT_FOLDER = "cairn"
"""The cairn checkpoint's folder inside a Tune checkpoint directory (as in :mod:`cairn.integrations.tune`)."""


def with_cairn_checkpoints(algo_class: type[Algorithm]) -> type[Algorithm]:
    """A subclass of an RLlib algorithm whose Tune checkpoints are cairn checkpoints.

    Run RLlib under Ray Tune as usual, with the subclass as the trainable::

        tune.Tuner(cairn_rllib.with_cairn_checkpoints(PPO), param_space=config, ...)

    ``save_checkpoint`` writes a cairn checkpoint (no RLlib pickle) into the
    folder Tune gives, and ``load_checkpoint`` restores from it, so Tune's
    fault tolerance, ``Tuner.restore`` and PBT use cairn checkpoints.
    """
    if not (isinstance(algo_class, type) and issubclass(algo_class, Algorithm)):
        raise CheckpointError(f"with_cairn_checkpoints takes an RLlib Algorithm class, not {algo_class!r}.")

    def save_checkpoint(self: Algorithm, checkpoint_dir: str) -> None:
        save(self, Path(checkpoint_dir) / TUNE_CHECKPOINT_FOLDER)

    def load_checkpoint(self: Algorithm, checkpoint_dir: str) -> None:
        from ray.rllib.callbacks.utils import make_callback

        restore(self, Path(checkpoint_dir) / TUNE_CHECKPOINT_FOLDER)
        algo: Any = self  # as RLlib's own load_checkpoint: the callback after a restore
        make_callback(
            "on_checkpoint_loaded",
            callbacks_objects=algo.callbacks,
            callbacks_functions=algo.config.callbacks_on_checkpoint_loaded,
            kwargs={"algorithm": algo},
        )

    namespace = {
        "save_checkpoint": save_checkpoint,
        "load_checkpoint": load_checkpoint,
        "__doc__": f"{algo_class.__qualname__} with cairn checkpoints under Ray Tune.",
        "__module__": algo_class.__module__,
    }
    return type(f"Cairn{algo_class.__name__}", (algo_class,), namespace)


# --------------------------------------------------------------------------- converting RLlib checkpoints


_RLLIB_CTOR = "class_and_ctor_args.pkl"


def _read_rllib_folder(folder: Path, where: str) -> RLlibCheckpointable:
    import pickle

    ctor_file = folder / _RLLIB_CTOR
    if not ctor_file.is_file():
        raise CheckpointNotFoundError(
            f"{folder} is not an RLlib (new API stack) checkpoint folder: it has no {_RLLIB_CTOR}."
        )
    with open(ctor_file, "rb") as f:
        info = pickle.load(f)  # the caller allowed pickle: RLlib writes nothing else here
    rllib_class = info["class"]
    args, kwargs = info["ctor_args_and_kwargs"]
    unrecorded: list[str] = []
    ctor = {
        "rllib_class": rllib_class,
        "args": [record_ctor_value(a, f"args/{i}", unrecorded, keep_raw=False) for i, a in enumerate(args)],
        "kwargs": {k: record_ctor_value(v, f"kwargs/{k}", unrecorded, keep_raw=False) for k, v in kwargs.items()},
    }
    # Each RLlib class names its own files (Algorithm: algorithm_state, RLModule: module_state, ...).
    stem = str(getattr(rllib_class, "STATE_FILE_NAME", "state"))
    state: dict[str, Any] = {}
    if (folder / f"{stem}.msgpack").is_file():
        from ray.rllib.utils.checkpoints import try_import_msgpack

        with open(folder / f"{stem}.msgpack", "rb") as f:
            state = try_import_msgpack(error=True).load(f, strict_map_key=False)
    elif (folder / f"{stem}.pkl").is_file():
        with open(folder / f"{stem}.pkl", "rb") as f:
            state = pickle.load(f)
    else:
        raise CheckpointNotFoundError(f"The RLlib checkpoint folder {folder} has no {stem}.pkl or {stem}.msgpack.")
    meta: dict[str, Any] = {}
    meta_file = folder / str(getattr(rllib_class, "METADATA_FILE_NAME", "metadata.json"))
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text())
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            meta = {}
        if not isinstance(meta, dict):  # RLlib writes an object; anything else holds nothing we read
            meta = {}
    children = {
        sub.name: _read_rllib_folder(sub, f"{where}/{sub.name}")
        for sub in sorted(folder.iterdir())
        if sub.is_dir() and (sub / _RLLIB_CTOR).is_file()
    }
    metadata = {
        "rllib_class": class_path(rllib_class) if isinstance(rllib_class, type) else str(rllib_class),
        "ray_version": str(meta.get("ray_version", "")),
        "rllib_unrecorded": unrecorded,
        "converted_from": str(folder),
    }
    state = to_cairn_state({k: v for k, v in state.items() if k not in children})
    return RLlibCheckpointable._from_files(state, ctor, metadata, children)


def convert_checkpoint(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    allow_pickle: bool = False,
    filesystem: Any = None,
) -> str:
    """Turn an RLlib checkpoint folder (local) into a cairn checkpoint at ``dst``.

    RLlib writes its constructor arguments (and, by default, its states) with
    pickle, and reading them runs whatever the files say: only with
    ``allow_pickle=True``, for checkpoints you trust. The result holds no
    pickle: it restores with :func:`restore` like any cairn checkpoint of an
    RLlib object, and ``cairn verify`` / ``inspect`` / ``diff`` read it.

    Returns:
        The path written.

    Raises:
        UnsafeCheckpointError: Without ``allow_pickle``.
        CheckpointNotFoundError: ``src`` is not an RLlib checkpoint folder.
    """
    if not allow_pickle:
        raise UnsafeCheckpointError(
            f"Converting the RLlib checkpoint {src} reads RLlib's pickle files, and unpickling can run arbitrary "
            "code. Pass allow_pickle=True (cairn convert rllib --allow-pickle) only for checkpoints you trust."
        )
    folder = Path(src)
    if not folder.is_dir():
        raise CheckpointNotFoundError(f"No RLlib checkpoint at {src}: the folder does not exist.")
    try:
        tree = _read_rllib_folder(folder, ".")
    except CheckpointError:
        raise
    except Exception as err:  # unpickling a damaged or foreign file raises anything
        raise CorruptCheckpointError(
            f"Cannot read the RLlib checkpoint {src}: {type(err).__name__}: {err}. It is damaged, or was written by "
            "another Ray version or the old API stack."
        ) from err
    return tree.save_to_path(dst, filesystem=filesystem)
