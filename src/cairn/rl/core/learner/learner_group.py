"""LearnerGroup: the learners of an algorithm; one local Learner, or several on Ray.

The group is the algorithm's ``learner_group`` component and its Learner is
the component ``learner``. With ``num_learners`` 0 or 1 the learner trains in
this process. With ``num_learners=N > 1`` there are N data-parallel learners,
Ray actors (:class:`~cairn.rl.distributed.learners.RemoteLearners`), whose
states are identical after every update; the local :attr:`learner` is then
only the shape of the checkpoint (class, constructor, components) and is not
trained. A checkpoint holds one learner's state and restores into any number
of learners: learner 0 writes ``learner/`` itself, and on restore every
learner reads it in parallel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from cairn import Checkpointable
from cairn.rl._aliases import register_old_paths
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.learner.learner import Learner, TrainBatch
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.utils._util import Names

if TYPE_CHECKING:
    from cairn.delegation import DelegatedComponent
    from cairn.rl.distributed.learners import RemoteLearners

__all__ = ["LearnerBackend", "LearnerGroup", "LocalLearners"]


class LearnerBackend(Protocol):
    """Where a :class:`LearnerGroup`'s learners run: this process, or Ray actors.

    The group picks one when it is built (:class:`LocalLearners`, or
    :class:`~cairn.rl.distributed.learners.RemoteLearners` for ``num_learners`` > 1)
    and hands every operation to it; both keep the group's local learner as the
    shape of the checkpoint.
    """

    @property
    def num_learners(self) -> int:
        """How many learners train."""

    @property
    def delegate(self) -> DelegatedComponent | None:
        """Who writes and reads the ``learner`` folder of a checkpoint; None: the engine itself."""

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """Update on ``batches``; the (first) learner's metrics."""

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state of the (first) learner."""

    def get_weights_ref(self) -> dict[str, Any] | Any:
        """The weights for a broadcast (a Ray object reference when remote)."""

    def get_module(self, module_id: str) -> RLModule:
        """The local module ``module_id`` holding the current weights."""

    def add_module(
        self, module_id: str, module_spec: RLModuleSpec | RLModule, config_overrides: Mapping[str, Any] | None
    ) -> RLModule:
        """Add a module to every learner; return the local one."""

    def remove_module(self, module_id: str) -> RLModule:
        """Remove a module from every learner; return the local one."""

    def get_state(self, components: Names, not_components: Names) -> dict[str, Any]:
        """The (first) learner's state, the selected parts."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Give every learner a learner state."""

    def close(self) -> None:
        """Release the learners (stop actors)."""


class LocalLearners:
    """The :class:`LearnerBackend` of ``num_learners`` 0 or 1: the group's learner trains in this process.

    Args:
        learner: The group's learner.
    """

    def __init__(self, learner: Learner) -> None:
        self.learner = learner

    @property
    def num_learners(self) -> int:
        """One."""
        return 1

    @property
    def delegate(self) -> DelegatedComponent | None:
        """None: the engine writes and reads the learner's folder."""
        return None

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """The learner's update."""
        return self.learner.update(batches)

    def get_weights(self) -> dict[str, Any]:
        """The learner's weights."""
        return self.learner.get_weights()

    def get_weights_ref(self) -> dict[str, Any]:
        """The learner's weights (no object store in one process)."""
        return self.learner.get_weights()

    def get_module(self, module_id: str) -> RLModule:
        """The learner's module."""
        return self.learner.module[module_id]

    def add_module(
        self, module_id: str, module_spec: RLModuleSpec | RLModule, config_overrides: Mapping[str, Any] | None
    ) -> RLModule:
        """The learner's ``add_module``."""
        return self.learner.add_module(module_id, module_spec, config_overrides=config_overrides)

    def remove_module(self, module_id: str) -> RLModule:
        """The learner's ``remove_module``."""
        return self.learner.remove_module(module_id)

    def get_state(self, components: Names, not_components: Names) -> dict[str, Any]:
        """The learner's state."""
        return self.learner.get_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """The learner's ``set_state``."""
        self.learner.set_state(state)

    def close(self) -> None:
        """Nothing to release."""


class LearnerGroup(Checkpointable):
    """A group of learners: one local learner, or ``num_learners`` > 1 on Ray.

    Args:
        config: The algorithm's config; its ``get_default_learner_class()`` is the learner built.
        module_specs: Module id -> spec of each module to train.

    Raises:
        ValueError: ``num_learners`` > 1 and Ray is not installed (the message
            says ``pip install 'cairn-rl[ray]'``).
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        self.config = config
        self.module_specs = dict(module_specs)
        self.learner: Learner = config.get_default_learner_class()(config, self.module_specs)
        self.remote: RemoteLearners | None = None
        """The Ray learners when ``num_learners`` > 1 (for inspection; the group works through :attr:`backend`)."""
        self.backend: LearnerBackend = LocalLearners(self.learner)
        if int(config.num_learners) > 1:
            from cairn.rl.distributed.learners import RemoteLearners

            self.remote = RemoteLearners(config, self.module_specs, local=self.learner)
            self.backend = self.remote

    @property
    def num_learners(self) -> int:
        """How many learners the group runs."""
        return self.backend.num_learners

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """Update on ``batches`` (module id -> flat batch); returns the (first) learner's metrics."""
        return self.backend.update(batches)

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state of the (first) learner."""
        return self.backend.get_weights()

    def get_weights_ref(self) -> dict[str, Any] | Any:
        """The weights for a broadcast: a Ray object reference when the learners are remote, else the dict."""
        return self.backend.get_weights_ref()

    def add_module(
        self,
        module_id: str,
        module_spec: RLModuleSpec | RLModule,
        *,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> RLModule:
        """Add a module to every learner (RLlib's ``LearnerGroup.add_module``); returns the local one.

        The local learner builds it (or takes the module given); remote learners
        build the same spec and take the same weights, so they stay identical. The
        group records the new set of modules and overrides, so that a checkpoint's
        ``from_checkpoint`` rebuilds exactly them.

        Args:
            module_id: The new module's id.
            module_spec: A spec (its class defaults to the algorithm's module) or a module.
            config_overrides: The module's own settings (``{"lr": 1e-3}``).
        """
        module = self.backend.add_module(module_id, module_spec, config_overrides)
        self.config = self.learner.config
        self.module_specs = self.learner.module_specs
        return module

    def remove_module(self, module_id: str) -> RLModule:
        """Remove a module from every learner (its optimizer and overrides too); returns the local one.

        Raises:
            KeyError: No such module.
        """
        module = self.backend.remove_module(module_id)
        self.config = self.learner.config
        self.module_specs = self.learner.module_specs
        return module

    def get_module(self, module_id: str) -> RLModule:
        """The module ``module_id`` with the current weights (fetched from learner 0 when remote)."""
        return self.backend.get_module(module_id)

    def close(self) -> None:
        """Stop the remote learners, if any."""
        self.backend.close()

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``learner``: the local learner (with remote learners, the shape of their state)."""
        return [("learner", self.learner)]

    def get_delegated_components(self) -> dict[str, DelegatedComponent]:
        """``{"learner": the remote learners}`` when remote: they write and read that folder."""
        delegate = self.backend.delegate
        return {"learner": delegate} if delegate is not None else {}

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"learner": learner state}`` for the selected parts (learner 0's when remote)."""
        if not self._check_component("learner", components, not_components):
            return {}
        return {
            "learner": self.backend.get_state(
                self._get_subcomponents("learner", components),
                self._get_not_subcomponents("learner", not_components),
            )
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Forward ``state["learner"]`` to the learner(s) if present."""
        if "learner" in state:
            self.backend.set_state(state["learner"])

    def on_from_checkpoint_failed(self) -> None:
        """Stop the remote learners: the group ``from_checkpoint`` built is dropped, they must not outlive it."""
        self.close()

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config, module_specs), {})`` of the modules trained now (after add_module / remove_module)."""
        return (self.config, dict(self.module_specs)), {}


register_old_paths(LearnerGroup)
