"""One remote env runner as a Ray actor (:class:`EnvRunnerActor`), started by
:class:`~cairn.rl.distributed.env_runners.RemoteEnvRunners`.

Checkpoints: runner 1 writes the ``env_runner`` folder itself: its RNG and
environments, the group's counters, episode windows and merged connector
states (which the driver passes along), and under ``other_env_runners`` the
RNG and environment state of runners 2..N (each hands its own, small, to runner
1 through the object store). A local :class:`EnvRunner` ignores that key, so
the folder is an ordinary ``env_runner`` checkpoint. On restore every runner
reads the folder in parallel; runner 1 takes its part, runner k takes the
entry recorded for worker index k if there is one (same scale: the run goes on
bit for bit; its callbacks' metrics logger comes back too), else only the
connector states, keeping its own environments and RNG (two runners never
replay the same episodes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.delegation import DelegatedFolder, LoadedComponent
from cairn.registry import AllowedNames
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.distributed.checkpoint import FolderActor
from cairn.rl.env.env_runner import EnvRunner, SampleBatch
from cairn.rl.env.runner_state_checks import PEER_OWN_KEYS, PEER_STATES_KEY

if TYPE_CHECKING:
    from cairn.manifest import FileEntry
    from cairn.rl.config.algorithm_config import AlgorithmConfig


__all__ = ["EnvRunnerActor"]


CHECKPOINT_WRITER_INDEX = 1
"""The worker index of the remote runner that writes (and fully restores) ``env_runner/``."""

OTHER_RUNNERS_KEY = PEER_STATES_KEY
"""Key of ``env_runner/``'s state holding the RNG and environments of runners 2..N."""

OWN_KEYS = PEER_OWN_KEYS
"""The keys of an ``env_runner`` state that belong to one runner: RNG, environments, its callbacks' metrics."""


def _own_part(env_runner_state: Mapping[str, Any], worker_index: int) -> dict[str, Any]:
    """The ``rng``/``env``/``metrics`` of an ``env_runner`` state meant for the runner ``worker_index``.

    Runner 1's are the state's own keys; runner k's, the ``other_env_runners`` entry
    recorded for worker index k. Empty when the state has none for that runner.
    """
    if worker_index == CHECKPOINT_WRITER_INDEX:
        source: Mapping[str, Any] = env_runner_state
    else:
        source = {}
        for entry in env_runner_state.get(OTHER_RUNNERS_KEY, ()):
            if isinstance(entry, Mapping) and entry.get("worker_index") == worker_index:
                source = entry
    return {key: source[key] for key in OWN_KEYS if key in source}


def _import_driver_names(allowed: AllowedNames) -> None:
    """Register the names the driver resolved for the config it sends (and nothing else).

    A config arrives from the driver: when the runner starts, and with ``add_module`` /
    ``remove_module``, whose new mapping function may live in a module the driver imported
    since. The driver resolved its names (:func:`~cairn.rl.env.multi_agent_env.driver_names`);
    this worker imports their modules and registers exactly those objects, then resolves
    the config's names with the same resolver, which refuses whatever else the config names.
    """
    allowed.import_here(where="a remote env runner")


class EnvRunnerActor(FolderActor):
    """The body of one remote env runner (run as a Ray actor); runner 1 writes ``env_runner/``, all read it.

    Args:
        config: The algorithm's config.
        worker_index: This runner's index (1..N); seeds differ per index.
        runner_class: The class of the group's local runner (``EnvRunner`` or
            ``MultiAgentEnvRunner``).
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        worker_index: int,
        runner_class: type[EnvRunner],
        allowed: AllowedNames,
    ) -> None:
        import torch

        super().__init__()
        if config.num_torch_threads is not None:
            torch.set_num_threads(int(config.num_torch_threads))
        _import_driver_names(allowed)
        self.runner = runner_class(config, worker_index=worker_index)
        self.weights_version = -1

    @property
    def checkpoint_target(self) -> EnvRunner:
        """The runner."""
        return self.runner

    def ping(self) -> int:
        """The worker index (a liveness check)."""
        return self.runner.worker_index

    def set_weights(self, version: int, weights: Mapping[str, Any]) -> int:
        """Load ``weights`` unless this runner already holds a newer version; return the version held."""
        if version > self.weights_version:
            # Arrays from the object store are read-only views; the module copies them in.
            self.runner.set_weights(
                {
                    m: {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in s.items()}
                    for m, s in weights.items()
                }
            )
            self.weights_version = version
        return self.weights_version

    def add_module(self, module_id: str, spec: RLModuleSpec, config: AlgorithmConfig, allowed: AllowedNames) -> None:
        """Add an inference copy of a new module (its weights come with the next broadcast)."""
        _import_driver_names(allowed)
        self.runner.add_module(module_id, spec, config=config)

    def prepare_remove_module(self, module_id: str, config: AlgorithmConfig, allowed: AllowedNames) -> None:
        """Check that ``module_id`` can be dropped, changing nothing (``EnvRunner.prepare_remove_module``)."""
        _import_driver_names(allowed)
        self.runner.prepare_remove_module(module_id, config=config)

    def apply_remove_module(self) -> None:
        """Drop the module :meth:`prepare_remove_module` checked."""
        self.runner.apply_remove_module()

    def discard_remove_module(self) -> None:
        """Forget a prepared removal (another runner refused it)."""
        self.runner.discard_remove_module()

    def set_connector_states(self, states: Mapping[str, Any]) -> None:
        """Take the group's merged connector states (keeping data not yet reported)."""
        self.runner.set_synced_connector_states(states)

    def sample_batches(self) -> tuple[dict[str, SampleBatch], dict[str, Any]]:
        """One rollout, and the report for the group (with the weights version used)."""
        batches = self.runner.sample_batches()
        report = self.runner.sample_report()
        report["weights_version"] = self.weights_version
        return batches, report

    def call_function(self, ref: str, allowed: AllowedNames) -> Any:
        """``fn(runner)`` for the function ``ref`` names (``foreach_env_runner``), resolved here, never unpickled."""
        from cairn.registry import WORKER_FUNCTION, resolve_function

        _import_driver_names(allowed)
        return resolve_function(ref, where="foreach_env_runner(func=...)", role=WORKER_FUNCTION)(self.runner)

    def pop_connector_deltas(self) -> dict[str, Any]:
        """The connectors' deltas (data seen since the last report), without sampling."""
        return self.runner.pop_connector_deltas()

    def get_connector_states(self) -> dict[str, Any]:
        """Both pipelines' states (for tests and inspection)."""
        return self.runner.get_connector_states()

    def get_module_state(self) -> tuple[int, dict[str, Any]]:
        """``(weights version, module id -> RLModule state)`` of the inference copy."""
        return self.weights_version, self.runner.module.get_state()

    def get_state(self) -> dict[str, Any]:
        """The runner's full state."""
        return self.runner.get_state()

    def get_own_state(self) -> dict[str, Any]:
        """What only this runner has (``worker_index``, ``rng``, ``env``, ``metrics``), for runner 1's checkpoint."""
        state = self.runner.get_state(components=[])
        return {"worker_index": self.runner.worker_index, **{key: state[key] for key in OWN_KEYS}}

    def set_own_state(self, state: dict[str, Any]) -> None:
        """Take an ``rng``/``env`` state (from :meth:`get_own_state` or a checkpoint)."""
        self.runner.set_state(state)

    def save(
        self,
        folder: DelegatedFolder,
        *,
        allow_pickle: bool,
        overrides: Mapping[str, Any],
        other_runners: list[dict[str, Any]],
    ) -> FileEntry:
        """Write the ``env_runner`` folder.

        Args:
            folder: Where ``env_runner/`` goes in the staging place.
            allow_pickle: As for ``save_to_path``.
            overrides: The group's totals (counters, episode windows).
            other_runners: :meth:`get_own_state` of runners 2..N.
        """
        import ray

        def make_state() -> dict[str, Any]:
            # References inside a list are not resolved by Ray before the call: get them here.
            others = [ray.get(r) if isinstance(r, ray.ObjectRef) else r for r in other_runners]
            state = self.runner.get_state()
            state.update({**overrides, OTHER_RUNNERS_KEY: others})
            return state

        return self._write(folder, allow_pickle=allow_pickle, make_state=make_state)

    def _apply(self, pending: LoadedComponent) -> None:
        """Apply a folder read: all of it for the checkpoint's runner, else the connectors only."""
        if self.runner.worker_index != CHECKPOINT_WRITER_INDEX and pending.target is self.runner:
            # Another runner's RNG and environments would duplicate its data: take this
            # runner's own entry when the checkpoint has one, else only the connectors.
            pending.apply(own_state=_own_part(pending.own_state(), self.runner.worker_index))
            return
        pending.apply()
