"""Evaluation env runners: RLlib's ``evaluation(...)`` config and ``Algorithm.evaluate()``.

An algorithm whose config sets ``evaluation_interval`` or ``evaluation_num_env_runners``
gets a second :class:`~cairn.rl.env.env_runner_group.EnvRunnerGroup`, its evaluation
runners (one local runner when ``evaluation_num_env_runners=0``, else that many Ray
actors behind a local runner that keeps their totals, as for training). They are built
from the training config with ``evaluation_config`` applied (``{"explore": False}``:
greedy actions, ``forward_inference``) and a seed of their own, so their environments
never replay the training runners' episodes.

Before each evaluation they get the learners' current weights and the training
runners' connector states (the observation filter's statistics); they never train, and
what they sample is dropped. One evaluation samples rounds of ``rollout_length`` steps
until ``evaluation_duration`` episodes ended (the first that many, in runner order,
are reported) or at least that many env steps were taken (``"timesteps"``). Their
episodes go on from one evaluation to the next (RLlib's
``evaluation_force_reset_envs_before_iteration=False``).

Their state (environments, action RNG, counters, connectors, callbacks' metrics) is the
algorithm's checkpoint component ``eval_env_runner`` (RLlib's
``COMPONENT_EVAL_ENV_RUNNER``), so a run that evaluates goes on bit for bit after a restore.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.env.env_runner_group import EnvRunnerGroup
from cairn.rl.utils.metrics.constants import (
    AGENT_EPISODE_RETURNS_MEAN,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    MODULE_EPISODE_RETURNS_MEAN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
)

__all__ = ["EvaluationRunners", "evaluation_runner_config", "wants_evaluation_runners"]

_EVALUATION_SEED_SALT = 7_919
"""Mixed into the config's seed for the evaluation runners' seed (a fixed constant: reproducible)."""


def wants_evaluation_runners(config: AlgorithmConfig) -> bool:
    """Whether ``config`` asks for evaluation runners (an interval, or remote evaluation runners)."""
    return config.evaluation_interval is not None or int(config.evaluation_num_env_runners) > 0


def evaluation_runner_config(config: AlgorithmConfig) -> AlgorithmConfig:
    """The config the evaluation runners are built with: ``config`` with its ``evaluation_config``
    applied, ``evaluation_num_env_runners`` runners and a seed of their own."""
    seed = int(np.random.SeedSequence([int(config.seed), _EVALUATION_SEED_SALT]).generate_state(1)[0] >> 1)
    return replace(
        config,
        **dict(config.evaluation_config),
        num_env_runners=int(config.evaluation_num_env_runners),
        seed=seed,
        evaluation_interval=None,
        evaluation_num_env_runners=0,
        evaluation_config={},
    )


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan


class EvaluationRunners:
    """An algorithm's evaluation env runners and the evaluations they run.

    Args:
        config: The algorithm's config (``evaluation_*`` settings).
    """

    def __init__(self, config: AlgorithmConfig) -> None:
        self.config = evaluation_runner_config(config)
        self.duration = int(config.evaluation_duration)
        self.unit = str(config.evaluation_duration_unit)
        self.group = EnvRunnerGroup(self.config, evaluation=True)
        # Refusals of a restore name its folder: the algorithm's checkpoint holds it as eval_env_runner.
        self.group.local_env_runner.checkpoint_label = "eval_env_runner"

    @property
    def local_env_runner(self) -> EnvRunner:
        """The local evaluation runner: the ``eval_env_runner`` checkpoint component."""
        return self.group.local_env_runner

    def run(
        self, weights: Mapping[str, Any] | Any, connector_states: Mapping[str, Any], *, single_agent_module: str | None
    ) -> dict[str, Any]:
        """One evaluation with ``weights`` and the training runners' ``connector_states``.

        Returns:
            Its ``env_runners`` results: episode statistics of the episodes it counted,
            the steps it sampled and the evaluation runners' lifetime counters.
        """
        runner = self.local_env_runner
        # What the last evaluation added to the filters is dropped (never reported to anyone, and not in
        # a checkpoint): every evaluation starts from the training runners' statistics, restored or not.
        runner.pop_connector_deltas()
        runner.set_synced_connector_states(connector_states)
        self.group.sync_local_state_to_others()
        self.group.sync_weights(weights)
        episodes: list[tuple[float, int, str]] = []
        env_before = runner.num_env_steps_sampled_lifetime
        agent_before = runner.num_agent_steps_sampled_lifetime
        while not self._done(len(episodes), runner.num_env_steps_sampled_lifetime - env_before):
            self.group.sample_batches()
            episodes.extend(runner.last_episodes)
        if self.unit == "episodes":
            episodes = episodes[: self.duration]
        returns = [float(r) for r, _, _ in episodes]
        results: dict[str, Any] = {
            EPISODE_RETURN_MEAN: _mean(returns),
            EPISODE_RETURN_MIN: min(returns, default=math.nan),
            EPISODE_RETURN_MAX: max(returns, default=math.nan),
            EPISODE_LEN_MEAN: _mean([float(length) for _, length, _ in episodes]),
            NUM_EPISODES: len(episodes),
            NUM_ENV_STEPS_SAMPLED: runner.num_env_steps_sampled_lifetime - env_before,
            NUM_AGENT_STEPS_SAMPLED: runner.num_agent_steps_sampled_lifetime - agent_before,
            NUM_EPISODES_LIFETIME: runner.num_episodes_lifetime,
            NUM_ENV_STEPS_SAMPLED_LIFETIME: runner.num_env_steps_sampled_lifetime,
            NUM_AGENT_STEPS_SAMPLED_LIFETIME: runner.num_agent_steps_sampled_lifetime,
        }
        per_module: dict[str, list[float]] = {}
        for episode_return, _, module_id in episodes:
            per_module.setdefault(module_id, []).append(float(episode_return))
        results[MODULE_EPISODE_RETURNS_MEAN] = {m: _mean(r) for m, r in sorted(per_module.items())}
        if single_agent_module is not None:
            results[AGENT_EPISODE_RETURNS_MEAN] = {"default_agent": results[EPISODE_RETURN_MEAN]}
        return results

    def _done(self, num_episodes: int, num_steps: int) -> bool:
        return (num_episodes if self.unit == "episodes" else num_steps) >= self.duration

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """What the evaluation runners' callbacks logged since the last call (see ``EnvRunnerGroup.pop_metrics``)."""
        return self.group.pop_metrics()

    def update_config(self, config: AlgorithmConfig) -> None:
        """Take the algorithm's new config (after ``add_module`` / ``remove_module``)."""
        self.config = evaluation_runner_config(config)

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module to every evaluation runner (``config``: the algorithm's new one)."""
        self.update_config(config)
        self.group.add_module(module_id, spec, config=self.config)

    def remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Drop ``module_id`` from every evaluation runner, or from none (see ``EnvRunnerGroup.remove_module``)."""
        self.prepare_remove_module(module_id, config=config)
        self.apply_remove_module(config=config)

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Check that every evaluation runner can drop ``module_id`` (``EnvRunnerGroup.prepare_remove_module``)."""
        self.group.prepare_remove_module(module_id, config=evaluation_runner_config(config))

    def apply_remove_module(self, *, config: AlgorithmConfig) -> None:
        """Apply the prepared removal; take the algorithm's new ``config``."""
        self.group.apply_remove_module(config=evaluation_runner_config(config))
        self.update_config(config)

    def discard_remove_module(self) -> None:
        """Forget the prepared removal (the training runners refused it)."""
        self.group.discard_remove_module()

    def close(self) -> None:
        """Close the evaluation runners' environments; stop the remote ones."""
        self.group.close()
