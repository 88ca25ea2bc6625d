"""MultiRLModule: module id -> RLModule, each module a component named by its id."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from cairn import Checkpointable
from cairn.rl._aliases import register_old_paths
from cairn.rl.algorithms.algorithm_config import DEFAULT_MODULE_ID
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.utils._util import (
    Names,
    check_component_name,
)

__all__ = ["DEFAULT_MODULE_ID", "MultiRLModule"]


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

    def __init__(self, specs: Mapping[str, RLModuleSpec] | None = None) -> None:
        nn.Module.__init__(self)
        self._rl_modules = nn.ModuleDict()
        for module_id, spec in (specs or {}).items():
            self.add_module(module_id, spec.build())

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
        """``((), {"specs": module id -> RLModuleSpec})`` for the current modules."""
        return (), {"specs": self.specs}

    def get_metadata(self) -> dict[str, Any]:
        """Adds the module ids."""
        metadata = dict(super().get_metadata())
        metadata["module_ids"] = self.keys()
        return metadata


register_old_paths(MultiRLModule)
