"""One connector pipeline per module: the multi-agent runner's ``env_to_module`` and ``module_to_env``.

Agents with different spaces need different connectors (a ``MeanStdFilter`` of
their observation shape, a ``ClipActions`` of their bounds), and agents that
share a module share its statistics. :class:`ModulePipelines` holds a
:class:`~cairn.rl.connectors.connectors.ConnectorPipeline` per module id, each a
checkpoint component named by the module id::

    env_runner/env_to_module_connector/<module_id>/MeanStdFilter/

It speaks the pipeline's group API with one more level (module id -> what a
pipeline gives), so that remote runners' deltas merge per module exactly as a
single pipeline's do.

Checkpoints written before (one filter shared by all agents, at
``env_to_module_connector/MeanStdFilter/``) still load: the container lists a
component under that old name whose state, when a checkpoint holds one, goes
into the filter of that name of every module (they all had the shared filter's
shape then, because that runner refused agents with other spaces). New
checkpoints write that component empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.utils._util import Names, check_component_name

__all__ = ["LEGACY_SHARED_CONNECTOR", "ModulePipelines"]

LEGACY_SHARED_CONNECTOR = "MeanStdFilter"
"""The one stateful connector of the shared multi-agent pipeline before per-module pipelines."""

ConnectorSpecs = Sequence[tuple[type[ConnectorV2], Mapping[str, Any]]]
"""``(ConnectorV2 class, keyword arguments)`` pairs, as :class:`ConnectorPipeline` takes them."""


class _LegacySharedState(Checkpointable):
    """The old shared connector's folder: its state, if any, goes into every module's connector of that name."""

    def __init__(self, owner: ModulePipelines, name: str) -> None:
        self._owner = owner
        self._name = name

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Empty: new checkpoints keep each module's state under its module id."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """An old checkpoint's shared state: given to every module's connector of this name."""
        if not state:
            return
        for pipeline in self._owner.pipelines.values():
            if any(c.name == self._name for c in pipeline.connectors):
                pipeline[self._name].set_state(dict(state))

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Not rebuilt on its own: it lives inside its container."""
        return (), {}


class ModulePipelines(Checkpointable):
    """Module id -> :class:`ConnectorPipeline`, each a component named by the module id.

    Args:
        pipelines: Module id -> the ``(connector class, kwargs)`` pairs of its pipeline.

    Raises:
        ValueError: A module id that is no valid component name.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(self, pipelines: Mapping[str, ConnectorSpecs] | None = None) -> None:
        self.pipelines: dict[str, ConnectorPipeline] = {}
        for module_id, specs in (pipelines or {}).items():
            self.add(module_id, ConnectorPipeline(specs))

    def add(self, module_id: str, pipeline: ConnectorPipeline) -> None:
        """Give ``module_id`` its pipeline (replacing one it had)."""
        check_component_name(module_id, what="Module id")
        self.pipelines[module_id] = pipeline

    def remove(self, module_id: str) -> None:
        """Forget ``module_id``'s pipeline (if it has one)."""
        self.pipelines.pop(module_id, None)

    def __getitem__(self, module_id: str) -> ConnectorPipeline:
        return self.pipelines[module_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.pipelines)

    def __len__(self) -> int:
        return len(self.pipelines)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """Each module's pipeline, named by module id; and the old shared connector's folder (see the module doc)."""
        components: list[tuple[str, Checkpointable]] = list(self.pipelines.items())
        if LEGACY_SHARED_CONNECTOR not in self.pipelines and any(
            any(c.name == LEGACY_SHARED_CONNECTOR for c in p.connectors) for p in self.pipelines.values()
        ):
            components.append((LEGACY_SHARED_CONNECTOR, _LegacySharedState(self, LEGACY_SHARED_CONNECTOR)))
        return components

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Module id -> pipeline state, for the selected modules."""
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Forward each module's state; modules missing from ``state`` are left as they are."""
        self._set_components_state(state)

    def pop_deltas(self) -> dict[str, dict[str, Any]]:
        """Module id -> its pipeline's deltas (:meth:`ConnectorPipeline.pop_deltas`), modules with some."""
        out: dict[str, dict[str, Any]] = {}
        for module_id, pipeline in self.pipelines.items():
            deltas = pipeline.pop_deltas()
            if deltas:
                out[module_id] = deltas
        return out

    def merge_deltas(self, deltas: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        """Add another runner's :meth:`pop_deltas`, module by module.

        A module this runner no longer has (removed while the other runner
        sampled) is skipped: its statistics go with the module.
        """
        for module_id, module_deltas in deltas.items():
            if module_id in self.pipelines:
                self.pipelines[module_id].merge_deltas(module_deltas)

    def set_synced_states(self, state: Mapping[str, Any]) -> None:
        """Take the group's merged states (module id -> pipeline state, as :meth:`get_state` gives)."""
        for module_id, pipeline in self.pipelines.items():
            if module_id in state:
                pipeline.set_synced_states(state[module_id])

    def get_runner_local_states(self) -> dict[str, Any]:
        """Module id -> its pipeline's runner-local states (frame stacks of episodes in flight), modules with some."""
        states = {m: p.get_runner_local_states() for m, p in self.pipelines.items()}
        return {module_id: state for module_id, state in states.items() if state}

    def set_runner_local_states(self, states: Mapping[str, Any]) -> None:
        """Load :meth:`get_runner_local_states`; modules this runner does not have are skipped.

        Raises:
            IncompatibleCheckpointError: ``states`` is no dict.
        """
        if not isinstance(states, Mapping):
            raise IncompatibleCheckpointError(f"Runner-local connector states must be a dict, got {type(states)}.")
        for module_id, pipeline in self.pipelines.items():
            if module_id in states:
                pipeline.set_runner_local_states(states[module_id])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(({module id: [(class, kwargs), ...]},), {})``."""
        return ({m: p.get_ctor_args_and_kwargs()[0][0] for m, p in self.pipelines.items()},), {}
