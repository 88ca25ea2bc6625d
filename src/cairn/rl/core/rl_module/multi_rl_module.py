"""MultiRLModule: module id -> RLModule, each module a component named by its id; MultiRLModuleSpec."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.registry import class_path, register_type, resolve_class
from cairn.rl._aliases import register_old_paths
from cairn.rl.config.algorithm_config import DEFAULT_MODULE_ID, AlgorithmConfig
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.utils._util import (
    Names,
    check_component_name,
)

__all__ = [
    "DEFAULT_MODULE_ID",
    "MultiRLModule",
    "MultiRLModuleSpec",
    "load_module_state",
    "module_seed",
    "module_specs_from_config",
]


def module_seed(config: AlgorithmConfig, index: int) -> int:
    """The weight-initialisation seed of the ``index``-th module of ``config``."""
    return int(np.random.SeedSequence([config.seed, 7919, index]).generate_state(1)[0])


def module_specs_from_config(
    config: AlgorithmConfig, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> dict[str, RLModuleSpec]:
    """Module id -> complete spec of every policy of ``config``.

    The spec of a policy is ``config.rl_module_spec`` (one :class:`RLModuleSpec`
    for all, or the policy's entry of a :class:`MultiRLModuleSpec`), with what it
    leaves ``None`` filled in: the config's default module class, the env's
    spaces, ``config.model_config`` and a seed per module derived from
    ``config.seed`` (so every module starts from other weights). The specs keep
    their ``load_state_path`` (:func:`load_state_paths` reads them).

    Raises:
        TypeError: ``rl_module_spec`` is neither spec type.
        ValueError: A MultiRLModuleSpec names modules that are not policies.
    """
    given = config.rl_module_spec
    per_module: dict[str, RLModuleSpec]
    if given is None or isinstance(given, RLModuleSpec):
        one = given if given is not None else RLModuleSpec()
        per_module = {module_id: one for module_id in config.policies}
    elif isinstance(given, MultiRLModuleSpec):
        if given.multi_rl_module_class not in (None, MultiRLModule):
            raise ValueError(
                f"rl_module_spec has multi_rl_module_class={given.multi_rl_module_class!r}: an algorithm builds "
                "cairn's MultiRLModule (its learner and env runners hold the modules themselves); the class applies "
                "to MultiRLModuleSpec.build() only. Leave multi_rl_module_class None."
            )
        given = given.per_module(config.policies)
        assert isinstance(given.rl_module_specs, dict)
        extra = sorted(set(given.rl_module_specs) - set(config.policies))
        if extra:
            raise ValueError(
                f"rl_module_spec gives specs for {extra}, which are not in policies={list(config.policies)}; "
                "add them to policies (or remove their specs)."
            )
        per_module = {module_id: given.rl_module_specs.get(module_id, RLModuleSpec()) for module_id in config.policies}
    else:
        raise TypeError(
            f"rl_module_spec must be an RLModuleSpec, a MultiRLModuleSpec or None, got {type(given).__name__}."
        )
    default_class = config.get_default_rl_module_class()
    return {
        module_id: spec.with_defaults(
            module_class=default_class,
            observation_space=observation_space,
            action_space=action_space,
            model_config=config.model_config,
            seed=module_seed(config, index),
        )
        for index, (module_id, spec) in enumerate(per_module.items())
    }


def load_state_paths(config: AlgorithmConfig) -> dict[str, str]:
    """Module id -> the checkpoint each module of ``config`` starts from (``load_state_path``)."""
    given = config.rl_module_spec
    if isinstance(given, MultiRLModuleSpec):
        return given.per_module(config.policies).load_state_paths()
    if isinstance(given, RLModuleSpec) and given.load_state_path is not None:
        return {module_id: given.load_state_path for module_id in config.policies}
    return {}


def without_load_state_paths(rl_module_spec: Any) -> Any:
    """``rl_module_spec`` (either spec type, or None) with every ``load_state_path`` removed.

    What an algorithm records: its checkpoint holds the weights, so a rebuild must
    not read the (maybe gone) start checkpoint again.
    """
    if isinstance(rl_module_spec, RLModuleSpec):
        return replace(rl_module_spec, load_state_path=None)
    if isinstance(rl_module_spec, MultiRLModuleSpec):
        specs = rl_module_spec.rl_module_specs
        if isinstance(specs, RLModuleSpec):
            return MultiRLModuleSpec(replace(specs, load_state_path=None))
        return MultiRLModuleSpec({module_id: replace(s, load_state_path=None) for module_id, s in specs.items()})
    return rl_module_spec


def load_module_state(spec: RLModuleSpec, path: str) -> dict[str, Any]:
    """The weights of the RLModule checkpoint at ``path``, checked against a module ``spec`` builds.

    The checkpoint is read through cairn's verified restore (manifests and
    checksums, no pickle) into a new module of the spec, so a checkpoint of
    another architecture fails here, naming the parameter, before anything is trained.

    Raises:
        cairn.CheckpointError: The checkpoint is missing, corrupt, or does not fit the spec.
    """
    module = replace(spec, load_state_path=None).build()
    module.restore_from_path(path)
    return module.get_state()


def _multi_class(path: Any) -> type[MultiRLModule] | None:
    """The MultiRLModule class a :meth:`MultiRLModuleSpec.to_dict` names (imported already; nothing is imported)."""
    if path is None:
        return None
    found = resolve_class(path, where="MultiRLModuleSpec.from_dict: multi_rl_module_class")
    if not issubclass(found, MultiRLModule):
        raise IncompatibleCheckpointError(f"MultiRLModuleSpec.from_dict: {path!r} is not a MultiRLModule subclass.")
    return None if found is MultiRLModule else found


_SHARED_NEEDS_IDS = (
    "This MultiRLModuleSpec shares one RLModuleSpec among modules it does not name: build it through an algorithm "
    "config (its policies name the modules) or call spec.per_module([module ids]) first."
)


@register_type
@dataclass
class MultiRLModuleSpec:
    """The modules of a multi-module algorithm (RLlib's ``MultiRLModuleSpec``).

    Attributes:
        rl_module_specs: Module id -> spec of that module (fields left ``None``
            are filled in by the algorithm: class, spaces, model_config), or one
            :class:`RLModuleSpec` shared by every module (RLlib's shared form: the
            algorithm gives each policy its own module built from it; ``spec[id]``
            is that spec for any id).
        load_state_path: A checkpoint of a MultiRLModule (e.g.
            ``<algo ckpt>/learner_group/learner/rl_module``); the modules in
            :attr:`modules_to_load` start from its ``<module id>`` sub-folders
            when an algorithm is built. A module's own ``load_state_path`` wins.
        modules_to_load: The module ids to load from :attr:`load_state_path`;
            ``None``: every module of :attr:`rl_module_specs`.
    """

    # None only as the default, which __post_init__ refuses (RLlib's "must be a dict"): never None after it.
    rl_module_specs: dict[str, RLModuleSpec] | RLModuleSpec = None  # type: ignore[assignment]
    load_state_path: str | None = None
    modules_to_load: list[str] | None = None
    inference_only: bool | None = None
    """Whether every module is built for acting only; ``None``: whether all of :attr:`rl_module_specs` are."""
    multi_rl_module_class: type[MultiRLModule] | None = None
    """The :class:`MultiRLModule` subclass :meth:`build` makes (``None``: MultiRLModule), e.g. one whose
    ``setup()`` wires a shared encoder to its policies. An algorithm builds cairn's own MultiRLModule and
    refuses another class here."""
    model_config: dict[str, Any] | None = None
    """The multi-module's own settings (its ``self.model_config``, for its ``setup()``)."""

    def __post_init__(self) -> None:
        specs = self.rl_module_specs
        if specs is None:  # RLlib's check and words: a MultiRLModuleSpec names its modules
            raise ValueError(
                "`MultiRLModuleSpec.rl_module_specs` must be a dict mapping module ids to RLModuleSpecs (or one "
                "RLModuleSpec shared by every module); none was given. To use one RLModule for all agents, pass "
                "the RLModuleSpec to config.rl_module(rl_module_spec=..)."
            )
        if isinstance(specs, RLModuleSpec):
            if self.inference_only is None:
                self.inference_only = specs.inference_only
            return
        if not isinstance(specs, Mapping) or not all(
            isinstance(k, str) and isinstance(s, RLModuleSpec) for k, s in specs.items()
        ):
            raise TypeError(
                "MultiRLModuleSpec(rl_module_specs=...) takes a dict module id -> RLModuleSpec, or one RLModuleSpec "
                f"shared by every module; got {type(specs).__name__}."
            )
        self.rl_module_specs = dict(specs)
        if self.inference_only is None:
            self.inference_only = bool(specs) and all(s.inference_only for s in specs.values())

    @property
    def module_specs(self) -> dict[str, RLModuleSpec] | RLModuleSpec:
        """RLlib's deprecated name of :attr:`rl_module_specs` (RLlib 2.60 still sets it; read-only here).

        Removed 2027-06-01: read ``rl_module_specs``.
        """
        return self.rl_module_specs

    def per_module(self, module_ids: Iterable[str]) -> MultiRLModuleSpec:
        """The spec with a dict of module specs: a shared spec given to each of ``module_ids``; a dict as it is."""
        if not isinstance(self.rl_module_specs, RLModuleSpec):
            return self
        shared = self.rl_module_specs
        return replace(self, rl_module_specs={module_id: shared for module_id in module_ids})

    def __contains__(self, module_id: object) -> bool:
        if isinstance(self.rl_module_specs, RLModuleSpec):
            return isinstance(module_id, str)  # a shared spec is every module's
        return module_id in self.rl_module_specs

    def __getitem__(self, module_id: str) -> RLModuleSpec:
        if isinstance(self.rl_module_specs, RLModuleSpec):
            return self.rl_module_specs
        try:
            return self.rl_module_specs[module_id]
        except KeyError:
            raise KeyError(
                f"No module {module_id!r} in this MultiRLModuleSpec; it has {list(self.rl_module_specs)}."
            ) from None

    @classmethod
    def from_module(cls, module: MultiRLModule) -> MultiRLModuleSpec:
        """The spec that builds a MultiRLModule like ``module`` (its modules' specs; not its weights)."""
        if not isinstance(module, MultiRLModule):
            raise TypeError(
                f"MultiRLModuleSpec.from_module takes a MultiRLModule, got {type(module).__name__}; for one module "
                "use RLModuleSpec.from_module."
            )
        return cls(rl_module_specs=module.specs)

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (RLlib's ``MultiRLModuleSpec.to_dict``): module id -> :meth:`RLModuleSpec.to_dict`."""
        return {
            "multi_rl_module_class": class_path(self.multi_rl_module_class or MultiRLModule),
            "model_config": None if self.model_config is None else dict(self.model_config),
            "rl_module_specs": (
                self.rl_module_specs.to_dict()
                if isinstance(self.rl_module_specs, RLModuleSpec)
                else {module_id: spec.to_dict() for module_id, spec in self.rl_module_specs.items()}
            ),
            "load_state_path": self.load_state_path,
            "modules_to_load": None if self.modules_to_load is None else list(self.modules_to_load),
            "inference_only": self.inference_only,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MultiRLModuleSpec:
        """The spec :meth:`to_dict` gave (its module classes must be imported; nothing is imported).

        Raises:
            cairn.errors.CheckpointError: ``data`` is not such a dict.
        """
        specs = data.get("rl_module_specs") if isinstance(data, Mapping) else None
        if not isinstance(specs, Mapping) or not all(isinstance(k, str) for k in specs):
            raise IncompatibleCheckpointError(
                "MultiRLModuleSpec.from_dict: expected a dict from MultiRLModuleSpec.to_dict() with rl_module_specs "
                "(module id -> RLModuleSpec.to_dict())."
            )
        assert isinstance(data, Mapping)
        # The shared form is one RLModuleSpec.to_dict() (a str or None under "module_class"); the
        # per-module form has a dict under every key, also under a module id named "module_class".
        shared = "module_class" in specs and (specs["module_class"] is None or isinstance(specs["module_class"], str))
        return cls(
            rl_module_specs=RLModuleSpec.from_dict(specs)
            if shared
            else {module_id: RLModuleSpec.from_dict(spec) for module_id, spec in specs.items()},
            load_state_path=data.get("load_state_path"),
            modules_to_load=data.get("modules_to_load"),
            inference_only=data.get("inference_only"),
            multi_rl_module_class=_multi_class(data.get("multi_rl_module_class")),
            model_config=data.get("model_config"),
        )

    def update(self, other: MultiRLModuleSpec | RLModuleSpec, override: bool = False) -> None:
        """Take ``other``'s module specs (RLlib's ``MultiRLModuleSpec.update``).

        Args:
            other: A MultiRLModuleSpec (its modules are added; an existing one is replaced with
                ``override=True``, else filled in where it leaves fields ``None``) or one
                RLModuleSpec (applied to every module, as :meth:`RLModuleSpec.update`).
            override: See ``other``.
        """
        if isinstance(other, RLModuleSpec):
            mine = self.rl_module_specs
            targets: list[RLModuleSpec] = [mine] if isinstance(mine, RLModuleSpec) else list(mine.values())
            for spec in targets:
                spec.update(other, override=override)
            self.inference_only = other.inference_only  # RLlib: the flag follows the spec merged in
            return
        if not isinstance(other, MultiRLModuleSpec):
            raise TypeError(f"MultiRLModuleSpec.update takes a (Multi)RLModuleSpec, got {type(other).__name__}.")
        if isinstance(other.rl_module_specs, RLModuleSpec) or isinstance(self.rl_module_specs, RLModuleSpec):
            # A shared spec and module specs do not merge: with override (or nothing of its own) take other's.
            if override or self.rl_module_specs == {}:
                self.rl_module_specs = other.rl_module_specs
            return
        own: dict[str, RLModuleSpec] = self.rl_module_specs
        for module_id, spec in other.rl_module_specs.items():
            existing = own.get(module_id)
            if existing is None or override:
                own[module_id] = spec
            else:
                existing.update(spec, override=False)

    def load_state_paths(self) -> dict[str, str]:
        """Module id -> the checkpoint that module starts from (its own path, else the multi-module's).

        Raises:
            ValueError: A shared spec (no module ids yet: :meth:`per_module` first), or
                ``modules_to_load`` naming modules that are not specs.
        """
        if isinstance(self.rl_module_specs, RLModuleSpec):
            raise ValueError(_SHARED_NEEDS_IDS)
        paths: dict[str, str] = {}
        to_load = set(self.rl_module_specs if self.modules_to_load is None else self.modules_to_load)
        unknown = sorted(to_load - set(self.rl_module_specs))
        if unknown:
            raise ValueError(
                f"MultiRLModuleSpec.modules_to_load names {unknown}, which are not in rl_module_specs "
                f"({sorted(self.rl_module_specs)})."
            )
        for module_id, spec in self.rl_module_specs.items():
            if spec.load_state_path is not None:
                paths[module_id] = spec.load_state_path
            elif self.load_state_path is not None and module_id in to_load:
                paths[module_id] = f"{str(self.load_state_path).rstrip('/')}/{module_id}"
        return paths

    def build(self) -> MultiRLModule:
        """A MultiRLModule of these modules, the ones with a checkpoint path loaded from it."""
        if isinstance(self.rl_module_specs, RLModuleSpec):
            raise ValueError(_SHARED_NEEDS_IDS)
        multi_class = self.multi_rl_module_class or MultiRLModule
        if not (isinstance(multi_class, type) and issubclass(multi_class, MultiRLModule)):
            raise TypeError(
                f"MultiRLModuleSpec.multi_rl_module_class must be a MultiRLModule subclass, got {multi_class!r}."
            )
        multi = multi_class(
            rl_module_specs={
                module_id: replace(s, load_state_path=None) for module_id, s in self.rl_module_specs.items()
            },
            model_config=self.model_config,
        )
        for module_id, path in self.load_state_paths().items():
            multi[module_id].restore_from_path(path)
        return multi


def _torch_key(module_id: str) -> str:
    """The ``nn.ModuleDict`` key of a module id.

    Every id the component-name rule accepts must work, but torch refuses keys
    with a ``.`` and keys that are attributes of ``nn.ModuleDict`` (``"keys"``,
    ``"training"``). Those ids are stored as ``"/"`` + the id with ``.`` -> ``/``
    (``/`` never occurs in an id, so the mapping is one to one); every other id
    is its own key, so parameter names stay ``_rl_modules.<id>.*``.
    """
    if "." in module_id or hasattr(nn.ModuleDict, module_id):
        return "/" + module_id.replace(".", "/")
    return module_id


def _module_id(key: str) -> str:
    """The inverse of :func:`_torch_key`."""
    return key[1:].replace("/", ".") if key.startswith("/") else key


class MultiRLModule(nn.Module, Checkpointable):
    """A mapping from module id to :class:`RLModule`.

    Each module is a checkpoint component named by its id, so a checkpoint of
    a MultiRLModule holds one sub-folder per module, each a complete RLModule
    checkpoint. Restoring a state with modules ``{p0, p1}`` into a
    MultiRLModule with ``{p0}`` restores ``p0`` (``p1`` is not created); into
    ``{p0, p1, p2}`` restores ``p0`` and ``p1`` and leaves ``p2`` as it was.

    Args:
        specs: Module id -> spec of the module to build.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(
        self,
        specs: Mapping[str, RLModuleSpec] | None = None,
        *,
        rl_module_specs: Mapping[str, RLModuleSpec] | None = None,
        model_config: Mapping[str, Any] | None = None,
    ) -> None:
        if specs is not None and rl_module_specs is not None:
            raise TypeError("MultiRLModule takes its module specs once: specs= (cairn's record) or rl_module_specs=.")
        nn.Module.__init__(self)
        self.model_config: dict[str, Any] = dict(model_config or {})
        self._rl_modules = nn.ModuleDict()
        for module_id, spec in dict(specs or rl_module_specs or {}).items():
            self.add_module(module_id, spec.build())
        self.setup()

    def setup(self) -> None:
        """RLlib's hook, called once the modules are built: a subclass wires them together here."""

    def as_multi_rl_module(self) -> MultiRLModule:
        """This MultiRLModule itself (RLlib's: the method every RLModule has)."""
        return self

    def add_module(  # RLlib's name; overrides nn.Module.add_module on purpose
        self, module_id: str, module: nn.Module | None, *, override: bool = False
    ) -> None:
        """Add ``module`` under ``module_id``.

        Args:
            module_id: One path segment (letters, digits, ``_``, ``-``, ``.``).
            module: The module.
            override: Replace a module already registered under this id.

        Raises:
            ValueError: An invalid id, or an existing id without ``override``.
            TypeError: ``module`` is not an :class:`RLModule`.
        """
        check_component_name(module_id, what="Module id")
        if module_id in self and not override:
            raise ValueError(f"Module id {module_id!r} already exists; pass override=True to replace it.")
        if not isinstance(module, RLModule):
            raise TypeError(f"Expected an RLModule for {module_id!r}, got {type(module).__name__}.")
        self._rl_modules[_torch_key(module_id)] = module

    def remove_module(self, module_id: str) -> RLModule:
        """Remove and return the module registered under ``module_id``.

        Raises:
            KeyError: No such module; the message lists the ids that exist.
        """
        if module_id not in self:
            raise KeyError(f"No module {module_id!r}; the modules are {list(self.keys())}.")
        module = self._rl_modules[_torch_key(module_id)]
        del self._rl_modules[_torch_key(module_id)]
        assert isinstance(module, RLModule)
        return module

    # ------------------------------------------------------------------ mapping interface

    def __getitem__(self, module_id: str) -> RLModule:
        try:
            module = self._rl_modules[_torch_key(module_id)]
        except KeyError:
            raise KeyError(f"No module {module_id!r}; the modules are {list(self.keys())}.") from None
        assert isinstance(module, RLModule)
        return module

    def __contains__(self, module_id: object) -> bool:
        return isinstance(module_id, str) and _torch_key(module_id) in self._rl_modules

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._rl_modules)

    def keys(self) -> list[str]:
        """The module ids, in insertion order."""
        return [_module_id(key) for key in self._rl_modules]

    def items(self) -> list[tuple[str, RLModule]]:
        """``(module_id, module)`` pairs, in insertion order."""
        return [(module_id, self[module_id]) for module_id in self.keys()]

    @property
    def specs(self) -> dict[str, RLModuleSpec]:
        """Module id -> the spec of each module."""
        return {module_id: module.spec for module_id, module in self.items()}

    def forward_inference(self, batch: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, dict[str, torch.Tensor]]:
        """Greedy actions for each module id in ``batch`` (module id -> module batch)."""
        return {module_id: self[module_id].forward_inference(b) for module_id, b in batch.items()}

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """One component per module, named by its id."""
        return [(module_id, module) for module_id, module in self.items()]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Module id -> that module's state, for the selected modules."""
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore the modules whose ids are keys of ``state``; others are left as they are.

        Ids in ``state`` that this MultiRLModule does not have are ignored
        (SPEC section 5: restoring ``{p0, p1}`` into ``{p0}`` restores ``p0``).
        """
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((), {"specs": module id -> RLModuleSpec})`` for the current modules (and its ``model_config``)."""
        return (), {"specs": self.specs, **({"model_config": dict(self.model_config)} if self.model_config else {})}

    def get_metadata(self) -> dict[str, Any]:
        """Adds the module ids."""
        metadata = dict(super().get_metadata())
        metadata["module_ids"] = self.keys()
        return metadata


register_old_paths(MultiRLModule, MultiRLModuleSpec)
RLModule.multi_rl_module_class = MultiRLModule
