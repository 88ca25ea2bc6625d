"""EnvRunnerGroup: the env runners of an algorithm, local or on Ray.

The group always has a local :class:`~cairn.rl.env.env_runner.EnvRunner`, the
algorithm's ``env_runner`` checkpoint component. With ``num_env_runners=0``
it is the one runner and samples in this process. With ``num_env_runners=N >
0`` there are N remote runners, Ray actors
(:class:`~cairn.rl.distributed.env_runners.RemoteEnvRunners`), which sample in
parallel, and the local runner does not sample: it keeps the group's totals
(lifetime counters, recent episode returns) and the merged connector states.

The runners are :class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner`
when the config's ``env`` names a
:class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv`, else ``EnvRunner`` (a
gymnasium id, or ``"multi:<id>"`` copies). Modules outside the config's
``policies_to_train`` act but their batches are not handed to the learners.

The interface is the same either way: :meth:`sample_batches`, :meth:`get_metrics`,
:meth:`sync_weights` (versioned broadcasts), :meth:`sync_connector_states_to_local`
(merge the runners' connector statistics into the local runner) and
:meth:`sync_local_state_to_others` (spread the merged states back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.env_creators import live_env_creator
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.env_runner import EnvRunner, SampleBatch
from cairn.rl.env.multi_agent_env import is_multi_agent_env
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner

if TYPE_CHECKING:
    from cairn.delegation import DelegatedComponent
    from cairn.rl.distributed.env_runners import RemoteEnvRunners

__all__ = ["EnvRunnerBackend", "EnvRunnerGroup", "LocalEnvRunners"]


class EnvRunnerBackend(Protocol):
    """Where an :class:`EnvRunnerGroup`'s sampling runners run: the local runner, or Ray actors.

    The group picks one when it is built (:class:`LocalEnvRunners`, or
    :class:`~cairn.rl.distributed.env_runners.RemoteEnvRunners` for
    ``num_env_runners`` > 0) and hands every operation to it.
    """

    @property
    def num_env_runners(self) -> int:
        """How many runners sample."""

    @property
    def delegate(self) -> DelegatedComponent | None:
        """Who writes and reads the local runner's checkpoint folder; None: the engine itself."""

    def sample_batches(self) -> list[dict[str, SampleBatch]]:
        """One rollout from each sampling runner: a list of module id -> batch."""

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """What each sampling runner's callbacks logged since the last call."""

    def sync_weights(self, weights: Any) -> None:
        """Load module weights (a dict, or a Ray object reference to one) into every sampling runner."""

    def sync_connector_states_to_local(self) -> None:
        """Merge the sampling runners' connector statistics into the local runner."""

    def sync_local_state_to_others(self) -> None:
        """Send the local runner's (merged) connector states to the other runners."""

    def get_runner_states(self) -> dict[str, Any]:
        """What the sampling runners hold beyond the local runner's state, as ``env_runner`` state keys."""

    def set_runner_states(self, state: Mapping[str, Any]) -> None:
        """Give each sampling runner its part of an ``env_runner`` state."""

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module to every runner."""

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Every runner checks that it can drop ``module_id``; nothing changes."""

    def discard_remove_module(self) -> None:
        """Every runner forgets a prepared removal."""

    def apply_remove_module(self, *, config: AlgorithmConfig) -> None:
        """Every runner drops the module it checked."""

    def close(self) -> None:
        """Close every runner's environments (stop actors)."""

    def foreach_env_runner(self, func: Callable[[EnvRunner], Any]) -> list[Any]:
        """``func(runner)`` on every sampling runner, in order (remote ones get it by reference)."""


class LocalEnvRunners:
    """The :class:`EnvRunnerBackend` of ``num_env_runners=0``: the local runner samples.

    Args:
        runner: The group's local runner.
    """

    def __init__(self, runner: EnvRunner) -> None:
        self.runner = runner

    @property
    def num_env_runners(self) -> int:
        """One."""
        return 1

    @property
    def delegate(self) -> DelegatedComponent | None:
        """None: the engine writes and reads the runner's folder."""
        return None

    def sample_batches(self) -> list[dict[str, SampleBatch]]:
        """The runner's rollout."""
        return [self.runner.sample_batches()]

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """The runner's logged deltas."""
        return [self.runner.metrics.pop_deltas()]

    def sync_weights(self, weights: Any) -> None:
        """Load ``weights`` (a dict, or a Ray object reference from remote learners) into the runner."""
        if not isinstance(weights, Mapping):
            import numpy as np
            import ray

            # Arrays from the object store are read-only views; the module copies them in.
            weights = {
                module_id: {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in state.items()}
                for module_id, state in ray.get(weights).items()
            }
        self.runner.set_weights(weights)

    def sync_connector_states_to_local(self) -> None:
        """Nothing: the local runner is the only one."""

    def sync_local_state_to_others(self) -> None:
        """Nothing: there are no others."""

    def get_runner_states(self) -> dict[str, Any]:
        """Nothing beyond the local runner's state."""
        return {}

    def set_runner_states(self, state: Mapping[str, Any]) -> None:
        """Nothing: the engine restores the local runner."""

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """The runner's ``add_module``."""
        self.runner.add_module(module_id, spec, config=config)

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """The runner's ``prepare_remove_module``."""
        self.runner.prepare_remove_module(module_id, config=config)

    def discard_remove_module(self) -> None:
        """The runner's ``discard_remove_module``."""
        self.runner.discard_remove_module()

    def apply_remove_module(self, *, config: AlgorithmConfig) -> None:
        """The runner's ``apply_remove_module``."""
        self.runner.apply_remove_module()

    def close(self) -> None:
        """Close the runner's environments."""
        self.runner.close()

    def foreach_env_runner(self, func: Callable[[EnvRunner], Any]) -> list[Any]:
        """``[func(runner)]``."""
        return [func(self.runner)]


class EnvRunnerGroup:
    """A group of env runners: one local runner, plus ``num_env_runners`` Ray actors when > 0.

    Args:
        config: The algorithm config.
        evaluation: The algorithm's evaluation runners (their Ray actors take the evaluation
            bundles of a Tune trial's placement group, :mod:`cairn.rl.distributed.placement`).

    Raises:
        ValueError: ``num_env_runners`` > 0 and Ray is not installed (the message
            says ``pip install 'cairn-rl[ray]'``).
    """

    def __init__(self, config: AlgorithmConfig, *, evaluation: bool = False) -> None:
        self.config = config
        multi = is_multi_agent_env(config.env, config.env_config, live_env_creator(config))
        runner_class = MultiAgentEnvRunner if multi else EnvRunner
        self.local_env_runner: EnvRunner = runner_class(config, worker_index=0)
        self.remote: RemoteEnvRunners | None = None
        """The Ray runners when ``num_env_runners`` > 0 (for inspection; the group works through :attr:`backend`)."""
        self.backend: EnvRunnerBackend = LocalEnvRunners(self.local_env_runner)
        if int(config.num_env_runners) > 0:
            from cairn.rl.distributed.env_runners import RemoteEnvRunners

            self.remote = RemoteEnvRunners(config, self.local_env_runner, evaluation=evaluation)
            self.backend = self.remote

    @property
    def num_env_runners(self) -> int:
        """How many runners sample (the remote ones, or the one local runner)."""
        return self.backend.num_env_runners

    @property
    def delegate(self) -> DelegatedComponent | None:
        """Who writes and reads the local runner's checkpoint folder: the remote runners, or None (the engine)."""
        return self.backend.delegate

    def sample_batches(self) -> list[dict[str, SampleBatch]]:
        """One rollout from each sampling runner (in parallel when remote): a list of module id -> batch.

        Only the modules of ``policies_to_train`` (all when it is ``None``) have batches.
        """
        per_runner = self.backend.sample_batches()
        trainable = self.config.policies_to_train
        if trainable is None:
            return per_runner
        return [{m: batch for m, batch in batches.items() if m in trainable} for batches in per_runner]

    def pop_recreated(self) -> list[int]:
        """Worker indices of remote runners replaced since the last call, now up (``on_env_runners_recreated``)."""
        return [] if self.remote is None else self.remote.pop_recreated()

    @property
    def num_healthy_env_runners(self) -> int:
        """How many runners sample now (RLlib's ``num_healthy_remote_workers``; the local one when there are none)."""
        return self.backend.num_env_runners if self.remote is None else self.remote.num_healthy_env_runners

    def fault_tolerance_stats(self) -> dict[str, int]:
        """RLlib's ``result["fault_tolerance"]``: healthy remote runners now, and remote runners restarted so far."""
        if self.remote is None:
            return {"num_healthy_workers": 0, "num_remote_worker_restarts": 0}
        return {
            "num_healthy_workers": int(self.remote.num_healthy_env_runners),
            "num_remote_worker_restarts": int(self.remote.num_restarts),
        }

    def get_metrics(self) -> dict[str, float | int]:
        """Episode and counter metrics over all runners (the local runner keeps the totals)."""
        return self.local_env_runner.get_metrics()

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """What the sampling runners' callbacks logged since the last call, one list per runner, in order.

        Each list is a :meth:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger.pop_deltas`,
        for the algorithm's :meth:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger.aggregate`.
        """
        return self.backend.pop_metrics()

    def sync_weights(self, weights: Mapping[str, Any] | Any) -> None:
        """Load module weights (module id -> RLModule state) into every sampling runner.

        ``weights`` may also be a Ray object reference to such a dict (what a remote
        learner group hands out), so that the weights never pass through the driver.
        """
        self.backend.sync_weights(weights)

    def sync_connector_states_to_local(self) -> None:
        """Merge the connector statistics of all runners into the local runner."""
        self.backend.sync_connector_states_to_local()

    def sync_local_state_to_others(self) -> None:
        """Send the local runner's (merged) connector states to every remote runner."""
        self.backend.sync_local_state_to_others()

    def get_runner_states(self) -> dict[str, Any]:
        """What the sampling runners hold beyond the local runner's state, as ``env_runner`` state keys.

        Nothing for a local group. With remote runners: runner 1's ``rng`` and
        ``env``, and ``other_env_runners`` (those of runners 2..N), the same as
        runner 1 writes into ``env_runner/`` itself.
        """
        return self.backend.get_runner_states()

    def set_runner_states(self, env_runner_state: Mapping[str, Any]) -> None:
        """Give each remote runner its part of an ``env_runner`` state (see :meth:`get_runner_states`)."""
        self.backend.set_runner_states(env_runner_state)

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module to every runner (weights follow with :meth:`sync_weights`)."""
        self.backend.add_module(module_id, spec, config=config)
        self.config = config

    def remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Drop the inference copy of ``module_id`` from every runner, or from none.

        Every runner, local and remote, first checks that it can
        (:meth:`~cairn.rl.env.env_runner.EnvRunner.prepare_remove_module`: a
        mapping function may still pick the module for an agent of an episode in
        flight on one runner and not on another); only when all agreed does any
        apply it. A refusal anywhere thus changes nothing anywhere.

        Raises:
            ValueError: A runner refused (its message names the agent and env copy).
        """
        self.prepare_remove_module(module_id, config=config)
        self.apply_remove_module(config=config)

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Let every runner check that it can drop ``module_id`` (changes nothing); a refusal forgets them all.

        With :meth:`apply_remove_module` (or :meth:`discard_remove_module`), an algorithm removes a
        module from several groups (training and evaluation runners) only when all of them agreed.

        Raises:
            ValueError: A runner refused (nothing is prepared anywhere then).
        """
        try:
            self.backend.prepare_remove_module(module_id, config=config)
        except BaseException:
            self.backend.discard_remove_module()
            raise

    def apply_remove_module(self, *, config: AlgorithmConfig) -> None:
        """Apply the removal :meth:`prepare_remove_module` checked on every runner; take ``config``."""
        self.backend.apply_remove_module(config=config)
        self.config = config

    def discard_remove_module(self) -> None:
        """Forget a removal :meth:`prepare_remove_module` checked (another group refused it)."""
        self.backend.discard_remove_module()

    def foreach_env_runner(self, func: Callable[[EnvRunner], Any] | str, *, local_env_runner: bool = True) -> list[Any]:
        """Call ``func(env_runner)`` on the runners; the results in order (RLlib's ``foreach_env_runner``).

        With ``num_env_runners=0`` the local runner is the one runner (called once). With
        remote runners, the local runner first when ``local_env_runner`` (it keeps the
        group's totals and does not sample), then each remote runner, which gets ``func``
        from the driver: by reference (``"module:function"``, resolved on the worker with
        :func:`cairn.registry.resolve_function`) when it has one, else (a lambda, a closure)
        over Ray's own channel, as RLlib sends it; never from a file. Returns plain data.

        Raises:
            ValueError: ``func`` is not callable.
        """
        if self.remote is None:
            fn = _callable(func)
            return self.backend.foreach_env_runner(fn) if local_env_runner else []
        results = [_callable(func)(self.local_env_runner)] if local_env_runner else []
        return results + self.remote.foreach_env_runner(func)

    def close(self) -> None:
        """Close every runner's environments; stop the remote runners."""
        self.backend.close()


def _callable(func: Callable[[EnvRunner], Any] | str) -> Callable[[EnvRunner], Any]:
    """``func``, or the function its ``"module:function"`` path names (resolved, never imported)."""
    if isinstance(func, str):
        from cairn.registry import WORKER_FUNCTION, resolve_function

        return resolve_function(func, where="foreach_env_runner(func=...)", role=WORKER_FUNCTION)
    if not callable(func):
        raise ValueError(f"foreach_env_runner needs a function of one env runner, got {type(func).__qualname__}.")
    return func
