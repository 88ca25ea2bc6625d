"""RLModule: the base class of every policy network, and RLModuleSpec, the recipe of one.

A module is a torch ``nn.Module`` and a cairn ``Checkpointable``. A user
subclasses :class:`RLModule`, builds any layers in ``__init__`` from
``(observation_space, action_space, model_config)`` and implements three
forward passes (RLlib's names):

- :meth:`RLModule.forward_inference`: greedy actions, for evaluation;
- :meth:`RLModule.forward_exploration`: sampled actions with what the
  algorithm needs from sampling time (PPO: ``action_logp``, ``vf_preds``);
- :meth:`RLModule.forward_train`: what the loss needs, with gradients (PPO:
  ``action_logp``, ``entropy``, ``vf_preds``).

Its checkpoint is its ``state_dict`` and its constructor arguments; the class
is recorded by reference (``"your_module:YourModule"``) and found again through
the allow-list (:func:`cairn.registry.resolve`), which imports nothing, so::

    module = RLModule.from_checkpoint(ckpt + "/learner_group/learner/rl_module/default_policy")
    module.forward_inference({"obs": torch.as_tensor(obs[None])})["actions"]

rebuilds the user's own class, ready to act, once the program allows it
(``@cairn.register`` on the class, or ``trusted=[YourModule]`` on the load).
PPO's default module (an MLP actor-critic) is
:class:`~cairn.rl.algorithms.ppo.default_ppo_rl_module.DefaultPPORLModule`.
"""

from __future__ import annotations

import abc
import contextlib
import os
import warnings
from collections.abc import Collection, Mapping
from dataclasses import InitVar, dataclass, fields, replace
from typing import Any, ClassVar, Self

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn import Checkpointable
from cairn._ctor_bounds import FolderSizes, alloc_limit, mlp_parameter_bytes
from cairn.codec.ctor import CtorEncoder, decode_ctor
from cairn.errors import IncompatibleCheckpointError, UnsafeCheckpointError
from cairn.registry import MODULE_CLASS, class_path, register_type, resolve_class
from cairn.rl._aliases import register_old_paths
from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.utils._util import Names
from cairn.rl.utils.companions import connectors_note
from cairn.torch import parameters_problem

__all__ = [
    "ModuleWithoutConnectorsWarning",
    "RLModule",
    "RLModuleSpec",
    "box_observation_size",
    "layers_parameter_bytes",
    "recurrent_parameter_bytes",
]


class ModuleWithoutConnectorsWarning(UserWarning):
    """A module was taken out of an algorithm checkpoint without the env-to-module connectors it was trained behind."""


def box_observation_size(observation_space: gym.Space[Any], *, module_class: type) -> int:
    """The number of values of one observation of a ``Box`` space (flattened), for an MLP's input.

    The one check of the default modules (PPO's, DQN's, SAC's), which take ``Box``
    observations only.

    Raises:
        ValueError: ``observation_space`` is not a ``Box``; the message names ``module_class``
            and the ways out (a flattening wrapper, or the user's own module).
    """
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(
            f"{module_class.__name__} needs a Box observation space, got {observation_space!r}; flatten or one-hot "
            "other spaces with a gymnasium wrapper first (gymnasium.wrappers.FlattenObservation), or bring your own "
            "RLModule (RLModuleSpec(module_class=...))."
        )
    return int(np.prod(observation_space.shape))


def recurrent_parameter_bytes(model_config: Any) -> int:
    """A lower bound of the parameter bytes a ``model_config["lstm_cell_size"]`` asks for, 0 without one.

    An LSTM of ``cell`` units has hidden-to-hidden weights ``[4 * cell, cell]`` (float32): the
    bound :meth:`RLModule.ctor_args_problem` and the algorithm's hook check before building.
    """
    cell = model_config.get("lstm_cell_size") if isinstance(model_config, Mapping) else None
    if type(cell) is not int or cell < 1:
        return 0
    return 4 * 4 * cell * cell


def layers_parameter_bytes(model_config: Any) -> int:
    """A lower bound of the parameter bytes of the layers a default module's ``model_config`` asks for.

    The hidden-to-hidden weights of ``hidden_sizes`` (or RLlib's ``fcnet_hiddens``), an LSTM's
    (:func:`recurrent_parameter_bytes`) and one head's ``head_fcnet_hiddens`` from the encoder's last
    width (PPO has two heads, DQN one or two: one is the bound); 0 for values that are not widths
    (the module's constructor refuses those). The bound :meth:`RLModule.ctor_args_problem` and the
    algorithm's hook check.
    """
    if not isinstance(model_config, Mapping):
        return 0
    hidden = model_config.get("hidden_sizes", model_config.get("fcnet_hiddens"))
    head = model_config.get("head_fcnet_hiddens")
    recurrent = recurrent_parameter_bytes(model_config)
    total = recurrent
    with contextlib.suppress(ValueError):  # not MLP widths: the module's own constructor judges them
        total += mlp_parameter_bytes(hidden) if hidden is not None else 0
    with contextlib.suppress(ValueError):  # the head's hidden layers, from the encoder's last width
        first = hidden[-1:] if isinstance(hidden, list) and not recurrent else []
        total += mlp_parameter_bytes([*first, *head]) if isinstance(head, list) else 0
    return total


@dataclass
class RLModuleSpec:
    """Everything needed to build one :class:`RLModule` (RLlib's ``RLModuleSpec``).

    Attributes:
        module_class: The :class:`RLModule` subclass to build; ``None`` means the
            algorithm's default module (PPO: ``DefaultPPORLModule``), filled in
            when the algorithm is built.
        observation_space: The module's observation space; ``None``: taken from the env.
        action_space: The module's action space; ``None``: taken from the env.
        model_config: Passed to the module's constructor; ``None``: the
            algorithm config's ``model_config``. A
            :class:`~cairn.rl.core.rl_module.default_model_config.DefaultModelConfig`
            is recorded as the dict of its set fields (RLlib's key names, which
            cairn's default modules read as well as their own).
        load_state_path: A checkpoint of an RLModule (e.g.
            ``<algo ckpt>/learner_group/learner/rl_module/<module id>``) whose
            weights the module starts from when an algorithm is built with this
            spec (read through cairn's verified restore, never pickle). When the
            path is exactly that folder of a cairn algorithm checkpoint, the
            observation filter travels with the weights: the new algorithm's env
            runners start their ``env_to_module`` connectors from the state of
            ``<algo ckpt>/env_runner/env_to_module_connector`` (a *companion
            component*, see :mod:`cairn.rl.env.pretrained_connectors`), so the module
            sees observations normalised as where it was trained. A new config
            without the filter the module was trained with is refused; opt out
            with ``config.load_pretrained_connectors = False``.
        seed: Seed of the weight initialisation: the module is built with
            torch's global RNG seeded with it (and restored afterwards), so any
            module class initialises bit for bit the same; ``None`` draws from
            torch's global RNG. Algorithms derive one per module from their seed.
        inference_only: Build the module for acting only (RLlib's flag): passed to the
            module's constructor as ``inference_only=True`` (a
            :class:`~cairn.rl.core.rl_module.torch.TorchRLModule` keeps it as
            ``self.inference_only``, for ``setup()`` to leave out learner-only layers).
    """

    default_module_class: ClassVar[type[RLModule] | None] = None
    """What a spec without ``module_class`` builds outside an algorithm: PPO's
    ``DefaultPPORLModule`` (0.1's only module), which sets it when imported (``from cairn.rl import
    RLModuleSpec`` and every PPO import do; core/ never imports an algorithm)."""

    module_class: type[RLModule] | None = None
    observation_space: gym.Space[Any] | None = None
    action_space: gym.Space[Any] | None = None
    model_config: dict[str, Any] | None = None
    load_state_path: str | None = None
    seed: int | None = None
    inference_only: bool = False
    catalog_class: InitVar[type | None] = None
    """RLlib's catalog of the module's networks: taken only when it is the catalog the module class
    builds from anyway (its ``default_catalog_class``, PPO's ``PPOCatalog``), so it changes nothing
    and is not kept; cairn's modules build their networks themselves."""

    def __post_init__(self, catalog_class: type | None) -> None:
        # RLlib's DefaultModelConfig is recorded as a plain dict: checkpoints hold msgpack-safe values.
        given: Any = self.model_config
        if isinstance(given, DefaultModelConfig):
            self.model_config = given.to_dict()
        if catalog_class is not None:
            default = getattr(self.module_class, "default_catalog_class", None)
            if default is None or catalog_class is not default:
                raise ValueError(
                    f"RLModuleSpec(catalog_class={getattr(catalog_class, '__qualname__', catalog_class)!r}) with "
                    f"module_class={getattr(self.module_class, '__qualname__', None)!r}: cairn's modules build "
                    "their networks themselves, so a spec takes only the catalog its module class builds from "
                    f"anyway ({getattr(default, '__qualname__', 'none for this class')}). For other networks, "
                    "write a TorchRLModule (docs/rl.md, 'Your own module') or set model_config."
                )

    @property
    def model_config_dict(self) -> None:
        """RLlib's deprecated ``RLModuleSpec.model_config_dict``: ``None``, as RLlib 2.60's always is (it refuses
        any other value; the settings are :attr:`model_config`). Removed 2027-06-01: read ``model_config``."""
        return None

    @classmethod
    def from_module(cls, module: RLModule) -> RLModuleSpec:
        """The spec that builds a module like ``module`` (RLlib's ``RLModuleSpec.from_module``).

        Its class, spaces, ``model_config`` and seed; not its weights (save the
        module and give the folder as ``load_state_path`` for those).

        Raises:
            TypeError: ``module`` is not an :class:`RLModule` (a MultiRLModule's specs
                are its ``specs``; RLlib: ``MultiRLModuleSpec.from_module``).
        """
        if not isinstance(module, RLModule):
            raise TypeError(
                f"RLModuleSpec.from_module takes an RLModule, got {type(module).__name__}; for a MultiRLModule "
                "use MultiRLModuleSpec(rl_module_specs=multi_module.specs)."
            )
        return module.spec

    def build(self) -> RLModule:
        """Build a new module (random weights; :attr:`load_state_path` is applied by the algorithm).

        Raises:
            ValueError: The spec has no class or no spaces yet (an algorithm fills them in).
            TypeError: ``module_class`` is not an :class:`RLModule` subclass.
        """
        module_class = self.module_class or RLModuleSpec.default_module_class
        if module_class is None:
            raise ValueError(
                "This RLModuleSpec has no module_class: give one (RLModuleSpec(module_class=MyModule, ...)), "
                "or let an algorithm fill in its default module (PPO: DefaultPPORLModule)."
            )
        if not (isinstance(module_class, type) and issubclass(module_class, RLModule)):
            raise TypeError(f"RLModuleSpec.module_class must be an RLModule subclass, got {module_class!r}.")
        if self.observation_space is None or self.action_space is None:
            raise ValueError(
                f"The RLModuleSpec of {module_class.__qualname__} has no observation_space or action_space: "
                "give both, or let an algorithm fill them in from its environment."
            )
        args = (self.observation_space, self.action_space, dict(self.model_config or {}))
        # Passed only when set: a module class of an earlier cairn need not take the keyword.
        kwargs: dict[str, Any] = {"inference_only": True} if self.inference_only else {}
        if self.seed is None:  # fresh random weights from torch's global RNG
            return module_class(*args, seed=None, **kwargs)
        # Layers draw their initial weights from torch's global RNG: seed it for this build only,
        # so that a user's module initialises reproducibly and the caller's RNG stream is untouched.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.seed))
            return module_class(*args, seed=self.seed, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (RLlib's ``RLModuleSpec.to_dict``): the class as ``"module:QualName"``,
        spaces and ``model_config`` as cairn's constructor codec writes them (JSON-ready)."""
        encoder = CtorEncoder(allow_pickle=False)
        return {
            "module_class": None if self.module_class is None else class_path(self.module_class),
            "observation_space": encoder.encode(self.observation_space, ("observation_space",)),
            "action_space": encoder.encode(self.action_space, ("action_space",)),
            "model_config": encoder.encode(self.model_config, ("model_config",)),
            "inference_only": self.inference_only,
            "load_state_path": self.load_state_path,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RLModuleSpec:
        """The spec :meth:`to_dict` gave. The class must be on the allow-list (SPEC 8; nothing is imported).

        Raises:
            cairn.errors.CheckpointError: ``data`` is not such a dict, or names a class that is not an
                allowed :class:`RLModule` subclass (cairn's own, or registered by the program).
        """
        where = "RLModuleSpec.from_dict"
        if not isinstance(data, Mapping):
            raise IncompatibleCheckpointError(
                f"{where}: expected a dict from RLModuleSpec.to_dict(), got {type(data).__name__}."
            )
        path = data.get("module_class")
        module_class = None if path is None else resolve_class(path, where=f"{where}: module_class", role=MODULE_CLASS)
        if module_class is not None and not issubclass(module_class, RLModule):
            raise IncompatibleCheckpointError(f"{where}: module_class {path!r} is not an RLModule subclass.")
        (observation_space, action_space, model_config), _ = decode_ctor(
            {"args": [data.get("observation_space"), data.get("action_space"), data.get("model_config")], "kwargs": {}},
            allow_pickle=False,
            where=where,
        )
        seed, inference_only = data.get("seed"), data.get("inference_only", False)
        if not (seed is None or type(seed) is int) or not isinstance(inference_only, bool):
            raise IncompatibleCheckpointError(f"{where}: seed is an int or None and inference_only a bool.")
        return cls(
            module_class=module_class,
            observation_space=observation_space,
            action_space=action_space,
            model_config=model_config,
            load_state_path=data.get("load_state_path"),
            seed=seed,
            inference_only=inference_only,
        )

    def update(self, other: RLModuleSpec, override: bool = True) -> None:
        """Take ``other``'s settings (RLlib's ``RLModuleSpec.update``).

        Args:
            other: The spec to take settings from.
            override: ``True``: every field ``other`` sets (not ``None``) replaces this
                spec's; ``False``: only fields this spec leaves ``None`` are filled in.

        Raises:
            TypeError: ``other`` is not an :class:`RLModuleSpec`.
        """
        if not isinstance(other, RLModuleSpec):
            raise TypeError(f"RLModuleSpec.update takes an RLModuleSpec, got {type(other).__name__}.")
        for name in ("module_class", "observation_space", "action_space", "model_config", "load_state_path", "seed"):
            theirs = getattr(other, name)
            if theirs is not None and (override or getattr(self, name) is None):
                setattr(self, name, theirs)
        if override:
            self.inference_only = other.inference_only

    def with_defaults(
        self,
        *,
        module_class: type[RLModule],
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any],
        seed: int | None,
    ) -> RLModuleSpec:
        """A copy whose unset fields (``None``) take these values."""
        return replace(
            self,
            module_class=self.module_class or module_class,
            observation_space=self.observation_space if self.observation_space is not None else observation_space,
            action_space=self.action_space if self.action_space is not None else action_space,
            model_config=dict(self.model_config) if self.model_config is not None else dict(model_config),
            seed=self.seed if self.seed is not None else seed,
        )


def _decode_spec(recorded: Any) -> RLModuleSpec:
    # A checkpoint's own state is the state: cairn never records load_state_path (algorithms and
    # multi-module specs strip it when saving), and a file that does would make a load read another
    # checkpoint or a URL (SPEC 8). Only the caller's code passes one.
    if not isinstance(recorded, dict):
        raise TypeError(f"expected the recorded of an RLModuleSpec, got {type(recorded).__name__}")
    if recorded.get("load_state_path") is not None:
        raise UnsafeCheckpointError(
            f"A recorded RLModuleSpec names load_state_path={str(recorded['load_state_path'])[:200]!r}, which cairn "
            "never follows from a checkpoint (the checkpoint's own state is the state). To start a module from "
            "another checkpoint, pass RLModuleSpec(load_state_path=...) in your own code."
        )
    return RLModuleSpec(**recorded)


register_type(
    RLModuleSpec,
    encode=lambda spec: {f.name: getattr(spec, f.name) for f in fields(spec) if f.init},
    decode=_decode_spec,
)


class RLModule(nn.Module, Checkpointable):
    """Base class of policy networks: subclass it and implement the three forward passes.

    A subclass builds its layers in ``__init__`` after calling
    ``super().__init__(observation_space, action_space, model_config, **kwargs)``;
    it takes ``(observation_space, action_space, model_config=None, **kwargs)``
    and passes ``kwargs`` (``seed``) on, because that is how specs and
    checkpoints build it. Batches are dicts of tensors with a leading batch
    dimension (``{"obs": Tensor[B, *obs_shape]}``).

    Args:
        observation_space: The observations this module reads.
        action_space: The actions it chooses.
        model_config: The subclass's own settings (any keys; recorded in checkpoints).
        seed: The seed it was built with (recorded; :meth:`RLModuleSpec.build` applies it).
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    default_catalog_class: ClassVar[type | None] = None
    """The RLlib catalog this class's networks are (PPO's default module: ``PPOCatalog``): the one
    ``RLModuleSpec(catalog_class=...)`` takes for it; ``None``: the spec takes none."""

    takes_nested_observations: ClassVar[bool] = False
    """A capability: whether this module reads Dict/Tuple observations as they are. ``True``: when the
    observation space reaching it (after the env-to-module pipeline) is a ``Dict`` or ``Tuple``, its
    ``batch["obs"]`` is a dict (tuple) of tensors with the batch first, in every forward pass and in
    training minibatches (RLlib's action-masking modules). ``False`` (the default modules, which need
    flat ``Box`` observations): such a space is refused when the env runner is built, with the way out
    (``FlattenObservations``)."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | DefaultModelConfig | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        nn.Module.__init__(self)
        self.observation_space = observation_space
        self.action_space = action_space
        if isinstance(model_config, DefaultModelConfig):
            model_config = model_config.to_dict()
        self.model_config: dict[str, Any] = dict(model_config or {})
        self.seed = seed

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str | torch.device | None = None,
        note_connectors: bool = True,
        filesystem: Any = None,
        allow_pickle: bool = False,
        public_key: str | os.PathLike[str] | bytes | None = None,
        **ctor_overrides: Any,
    ) -> Self:
        """The module saved at ``path``, on ``device`` (``map_location``; tensors load on the CPU by default).

        ``path`` may be a module folder inside an algorithm checkpoint
        (``<ckpt>/learner_group/learner/rl_module/<module id>``), a module saved on its
        own, or either inside a zip (``"zip://<folder>::<file>.zip"``). When the algorithm's
        env runner had env-to-module connectors (an observation filter), a
        :class:`ModuleWithoutConnectorsWarning` says so once, with the line that applies them:
        the module alone acts on raw observations. ``note_connectors=False``: the caller applies
        them itself (``cairn.rl.inference.Policy``, ``cairn evaluate``), so nothing is said.

        Other arguments as :meth:`cairn.Checkpointable.from_checkpoint`.
        """
        module = super().from_checkpoint(
            path, filesystem=filesystem, allow_pickle=allow_pickle, public_key=public_key, **ctor_overrides
        )
        if device is not None:
            module.to(torch.device(device))
        local = filesystem is None and "://" not in str(path)
        note = connectors_note(str(path)) if note_connectors and local else None
        if note is not None:
            warnings.warn(note, ModuleWithoutConnectorsWarning, stacklevel=2)
        return module

    @property
    def spec(self) -> RLModuleSpec:
        """The spec that builds a module like this one (its class, spaces, model_config, seed)."""
        return RLModuleSpec(
            module_class=type(self),
            observation_space=self.observation_space,
            action_space=self.action_space,
            model_config=dict(self.model_config),
            seed=self.seed,
            inference_only=bool(getattr(self, "inference_only", False)),
        )

    multi_rl_module_class: ClassVar[Any] = None
    """The MultiRLModule class :meth:`as_multi_rl_module` builds (set by its module when imported: core's
    rl_module never imports multi_rl_module, which builds on it)."""

    def as_multi_rl_module(self) -> Any:
        """A MultiRLModule holding this module as its only one, under ``DEFAULT_MODULE_ID`` (RLlib's)."""
        if RLModule.multi_rl_module_class is None:  # pragma: no cover - cairn.rl imports it
            raise RuntimeError("Import cairn.rl.core.rl_module.multi_rl_module before calling as_multi_rl_module().")
        multi = RLModule.multi_rl_module_class()
        multi.add_module(DEFAULT_MODULE_ID, self)
        return multi

    # ------------------------------------------------------------------ forward passes

    @abc.abstractmethod
    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Greedy actions, without gradients: ``{"actions": Tensor[B, ...]}``."""

    @abc.abstractmethod
    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Sampled actions, without gradients.

        Args:
            batch: ``{"obs": Tensor[B, *obs_shape]}``.
            generator: The RNG to sample with; the env runner owns and checkpoints
                it, so sampling is reproducible. Sample only with it.

        Returns:
            ``{"actions", ...}``; PPO also reads ``"action_logp"`` and ``"vf_preds"`` (each ``Tensor[B]``).
        """

    @abc.abstractmethod
    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What the algorithm's loss needs, with gradients.

        Args:
            batch: The columns of a training minibatch (``"obs"``, ``"actions"``, ...).

        Returns:
            PPO reads ``"action_logp"``, ``"entropy"`` and ``"vf_preds"`` (each ``Tensor[B]``).
        """

    def compute_values(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Value estimates ``Tensor[B]`` without gradients (for bootstrapping cut episodes).

        By default the ``vf_preds`` of :meth:`forward_exploration`, sampled with a
        throw-away generator so that the env runner's RNG is not advanced;
        override it when the value can be computed on its own.
        """
        out = self.forward_exploration(batch, generator=torch.Generator().manual_seed(0))
        return out["vf_preds"].detach()

    def forward(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Same as :meth:`forward_train`."""
        return self.forward_train(batch)

    # ------------------------------------------------------------------ state (recurrent modules)

    def get_initial_state(self) -> dict[str, Any]:
        """The state a new episode starts from (RLlib's name); ``{}``: the module is stateless.

        A recurrent module returns name -> array (or tensor) of one episode, without a
        batch dimension (an LSTM: ``{"h": np.zeros(cell), "c": np.zeros(cell)}``). The env
        runner then gives every forward pass ``batch[Columns.STATE_IN]`` (the same names,
        the batch first) with observations of one time step (``[B, 1, ...]``), and the
        pass returns ``Columns.STATE_OUT`` in that layout; PPO trains it on sequences
        (``obs`` ``[B, T, ...]``, the state at their start). See docs/rl.md, "Recurrent modules".
        """
        return {}

    def is_stateful(self) -> bool:
        """Whether :meth:`get_initial_state` is not empty (RLlib's rule)."""
        return bool(self.get_initial_state())

    # ------------------------------------------------------------------ Checkpointable

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The module's ``state_dict``: parameter name -> tensor (a copy)."""
        return {name: value.detach().clone() for name, value in self.state_dict().items()}

    def get_state_buffers(self) -> dict[str, Any] | None:
        """The live parameters and buffers (no copies): a restore from local disk reads into them."""
        return dict(self.state_dict())

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse, before a restore changes anything, a state of another architecture.

        Raises:
            IncompatibleCheckpointError: An unknown parameter name or a shape that
                does not match this module (another architecture or other spaces).
        """
        # A method: the names and shapes are the live module's (missing ones are left as they are).
        problem = parameters_problem(state, self.state_dict(), strict=False)
        if problem:
            raise IncompatibleCheckpointError(
                f"The RLModule state does not fit this {type(self).__qualname__} ({self.observation_space} -> "
                f"{self.action_space}, model_config={self.model_config}): {problem}. The checkpoint was written by "
                "another architecture: build the module with its spaces and model_config, or use from_checkpoint."
            )

    def set_state(self, state: dict[str, Any]) -> None:
        """Load tensors from ``state``; parameters missing from it are left as they are.

        Raises:
            IncompatibleCheckpointError: An unknown parameter name or a shape that
                does not match this module (another architecture or other spaces).
        """
        self.check_state(state, ())
        own = self.state_dict()
        with torch.no_grad():
            for name, value in state.items():
                tensor = torch.as_tensor(value)
                target = own[name]
                target.copy_(tensor.to(dtype=target.dtype, device=target.device))

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """Why recorded constructor arguments cannot belong to a checkpoint folder of these sizes, or None.

        The hook of :mod:`cairn._ctor_bounds`, asked before the module is built: a
        ``model_config["hidden_sizes"]`` whose hidden-to-hidden weights alone are
        more than the folder can hold (it holds the parameters) is refused, and so is a
        ``head_fcnet_hiddens`` whose head layers are. The
        default modules (PPO, DQN, SAC) and any subclass that reads ``hidden_sizes``
        as MLP widths get it; a subclass that allocates by other arguments overrides it.
        """
        model_config = kwargs.get("model_config", args[2] if len(args) > 2 else None)
        hidden = model_config.get("hidden_sizes") if isinstance(model_config, Mapping) else None
        head = model_config.get("head_fcnet_hiddens") if isinstance(model_config, Mapping) else None
        recurrent = recurrent_parameter_bytes(model_config)
        lower = layers_parameter_bytes(model_config)
        if lower > alloc_limit(folder.tree_bytes):
            cell = f" and lstm_cell_size={model_config['lstm_cell_size']}" if recurrent else ""  # type: ignore[index]
            heads = f" and head_fcnet_hiddens={str(head)[:80]}" if head else ""
            return (
                f"model_config hidden_sizes={str(hidden)[:80]}{cell}{heads} make at least {lower} bytes of parameters, "
                f"and the module's folder holds {folder.tree_bytes} bytes"
            )
        return None

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((observation_space, action_space), {"model_config": ..., "seed": ...})``."""
        return (
            (self.observation_space, self.action_space),
            {"model_config": dict(self.model_config), "seed": self.seed},
        )

    def get_metadata(self) -> dict[str, Any]:
        """Adds the spaces (as text) and the number of parameters."""
        metadata = dict(super().get_metadata())
        metadata.update(
            {
                "observation_space": str(self.observation_space),
                "action_space": str(self.action_space),
                "num_parameters": int(sum(p.numel() for p in self.parameters())),
            }
        )
        return metadata


# 0.1's "cairn.rl.rl_module:RLModule" was the PPO MLP: its alias is registered by DefaultPPORLModule.
register_old_paths(RLModuleSpec)
