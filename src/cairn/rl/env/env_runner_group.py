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

The interface is the same either way: :meth:`sample`, :meth:`get_metrics`,
:meth:`sync_weights` (versioned broadcasts), :meth:`sync_connector_states_to_local`
(merge the runners' connector statistics into the local runner) and
:meth:`sync_local_state_to_others` (spread the merged states back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.env_runner import EnvRunner, SampleBatch
from cairn.rl.env.multi_agent_env import multi_agent_env_creator
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner

if TYPE_CHECKING:
    from cairn.rl.distributed.env_runners import RemoteEnvRunners

__all__ = ["EnvRunnerGroup"]


class EnvRunnerGroup:
    """A group of env runners: one local runner, plus ``num_env_runners`` Ray actors when > 0.

    Args:
        config: The algorithm config.

    Raises:
        ValueError: ``num_env_runners`` > 0 and Ray is not installed (the message
            says ``pip install 'cairn-rl[ray]'``).
    """

    def __init__(self, config: AlgorithmConfig) -> None:
        self.config = config
        runner_class = MultiAgentEnvRunner if multi_agent_env_creator(config.env) is not None else EnvRunner
        self.local_env_runner: EnvRunner = runner_class(config, worker_index=0)
        self.remote: RemoteEnvRunners | None = None
        if int(config.num_env_runners) > 0:
            from cairn.rl.distributed.env_runners import RemoteEnvRunners

            self.remote = RemoteEnvRunners(config, self.local_env_runner)

    @property
    def num_env_runners(self) -> int:
        """How many runners sample (the remote ones, or the one local runner)."""
        return len(self.remote.actors) if self.remote is not None else 1

    def sample(self) -> list[dict[str, SampleBatch]]:
        """One rollout from each sampling runner (in parallel when remote): a list of module id -> batch.

        Only the modules of ``policies_to_train`` (all when it is ``None``) have batches.
        """
        per_runner = self.remote.sample() if self.remote is not None else [self.local_env_runner.sample()]
        trainable = self.config.policies_to_train
        if trainable is None:
            return per_runner
        return [{m: batch for m, batch in batches.items() if m in trainable} for batches in per_runner]

    def get_metrics(self) -> dict[str, float | int]:
        """Episode and counter metrics over all runners (the local runner keeps the totals)."""
        return self.local_env_runner.get_metrics()

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """What the sampling runners' callbacks logged since the last call, one list per runner, in order.

        Each list is a :meth:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger.pop_deltas`,
        for the algorithm's :meth:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger.aggregate`.
        """
        if self.remote is not None:
            return self.remote.pop_metrics()
        return [self.local_env_runner.metrics.pop_deltas()]

    def sync_weights(self, weights: Mapping[str, Any] | Any) -> None:
        """Load module weights (module id -> RLModule state) into every sampling runner.

        ``weights`` may also be a Ray object reference to such a dict (what a remote
        learner group hands out), so that the weights never pass through the driver.
        """
        if self.remote is not None:
            self.remote.sync_weights(weights)
            return
        if not isinstance(weights, Mapping):
            import numpy as np
            import ray

            # Arrays from the object store are read-only views; the module copies them in.
            weights = {
                module_id: {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in state.items()}
                for module_id, state in ray.get(weights).items()
            }
        self.local_env_runner.set_weights(weights)

    def sync_connector_states_to_local(self) -> None:
        """Merge the connector statistics of all runners into the local runner."""
        if self.remote is not None:
            self.remote.collect_connector_deltas()

    def sync_local_state_to_others(self) -> None:
        """Send the local runner's (merged) connector states to every remote runner."""
        if self.remote is not None:
            self.remote.sync_connector_states()

    def get_runner_states(self) -> dict[str, Any]:
        """What the sampling runners hold beyond the local runner's state, as ``env_runner`` state keys.

        Nothing for a local group. With remote runners: runner 1's ``rng`` and
        ``env``, and ``other_env_runners`` (those of runners 2..N), the same as
        runner 1 writes into ``env_runner/`` itself.
        """
        return self.remote.get_runner_states() if self.remote is not None else {}

    def set_runner_states(self, env_runner_state: Mapping[str, Any]) -> None:
        """Give each remote runner its part of an ``env_runner`` state (see :meth:`get_runner_states`)."""
        if self.remote is not None:
            self.remote.set_runner_states(env_runner_state)

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module to every runner (weights follow with :meth:`sync_weights`)."""
        self.local_env_runner.add_module(module_id, spec, config=config)
        if self.remote is not None:
            self.remote.add_module(module_id, spec, config=config)
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
        try:
            self.local_env_runner.prepare_remove_module(module_id, config=config)
            if self.remote is not None:
                self.remote.prepare_remove_module(module_id, config=config)
        except BaseException:
            self.local_env_runner.discard_remove_module()
            if self.remote is not None:
                self.remote.discard_remove_module()
            raise
        self.local_env_runner.apply_remove_module()
        if self.remote is not None:
            self.remote.apply_remove_module(config=config)
        self.config = config

    def close(self) -> None:
        """Close every runner's environments; stop the remote runners."""
        if self.remote is not None:
            self.remote.close()
        self.local_env_runner.close()
