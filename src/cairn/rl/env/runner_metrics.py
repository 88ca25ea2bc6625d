"""An env runner's counters, episode windows and reports to its group.

:class:`EnvRunnerMetrics` gives both runners what their group's driver reads after each
round of sampling (``sample_report``, ``absorb_sample_report``, ``get_metrics``) and the
windows of recent episodes they record. The runners' attributes it reads are set by the
runners' ``__init__`` (declared below for the type checker).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.utils.metrics.constants import MODULE_EPISODE_RETURNS_MEAN
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

__all__ = ["EnvRunnerMetrics"]


class EnvRunnerMetrics:
    """Counters, recent-episode windows and group reports of :class:`~cairn.rl.env.env_runner.EnvRunner`."""

    # What the runner's __init__ (and _init_sampling) sets, and these methods read and write.
    config: AlgorithmConfig
    num_envs: int
    env_to_module: ConnectorPipeline
    module_to_env: ConnectorPipeline
    metrics: MetricsLogger
    last_episodes: list[tuple[float, int, str]]
    num_env_steps_sampled_lifetime: int
    num_agent_steps_sampled_lifetime: int
    num_episodes_lifetime: int
    _episodes_this_iteration: int
    _multi_agent: bool
    _recent_returns: deque[float]
    _recent_lengths: deque[int]
    _recent_module_returns: dict[str, deque[float]]
    _agent_steps_of_last_sample: Callable[[], int]
    _last_env_steps: int

    def _record_episode(self, episode_return: float, length: int, module_id: str) -> None:
        self._recent_returns.append(episode_return)
        self._recent_lengths.append(length)
        if module_id in self._recent_module_returns:
            self._recent_module_returns[module_id].append(episode_return)
        self.num_episodes_lifetime += 1
        self._episodes_this_iteration += 1
        self.last_episodes.append((episode_return, length, module_id))

    # ------------------------------------------------------------------ group bookkeeping

    def sample_report(self) -> dict[str, Any]:
        """What the group's driver needs from this runner after a :meth:`sample_batches`.

        The steps taken, the episodes that ended (in order), the connectors'
        deltas (statistics of the data seen since the last report, connector name
        -> delta, per pipeline) and what the callbacks logged since the last report
        (:meth:`MetricsLogger.pop_deltas`); small, whatever the size of the batches.
        """
        return {
            "env_steps": self._last_env_steps,
            "agent_steps": self._agent_steps_of_last_sample(),
            "episodes": list(self.last_episodes),
            "connector_deltas": self.pop_connector_deltas(),
            "metrics": self.metrics.pop_deltas(),
        }

    def pop_connector_deltas(self) -> dict[str, Any]:
        """The connectors' deltas (statistics of the data seen since the last call), by pipeline name."""
        return {
            "env_to_module_connector": self.env_to_module.pop_deltas(),
            "module_to_env_connector": self.module_to_env.pop_deltas(),
        }

    def begin_group_iteration(self) -> None:
        """Start counting a new iteration's episodes (for a runner that keeps a group's totals)."""
        self._episodes_this_iteration = 0
        self.last_episodes = []

    def absorb_sample_report(self, report: Mapping[str, Any]) -> None:
        """Add another runner's :meth:`sample_report` to this runner's counters, windows and connectors.

        The runner that keeps a group's totals (the local runner of a group of
        remote runners) calls this for every remote runner after each round of
        sampling, in runner order, so that the totals are deterministic.
        """
        self.num_env_steps_sampled_lifetime += int(report["env_steps"])
        self.num_agent_steps_sampled_lifetime += int(report["agent_steps"])
        for episode_return, length, module_id in report["episodes"]:
            self._record_episode(float(episode_return), int(length), str(module_id))
        deltas = report["connector_deltas"]
        self.env_to_module.merge_deltas(deltas.get("env_to_module_connector", {}))
        self.module_to_env.merge_deltas(deltas.get("module_to_env_connector", {}))

    def get_connector_states(self) -> dict[str, Any]:
        """The states of both connector pipelines, by component name."""
        return {
            "env_to_module_connector": self.env_to_module.get_state(),
            "module_to_env_connector": self.module_to_env.get_state(),
        }

    def set_synced_connector_states(self, states: Mapping[str, Any]) -> None:
        """Take the group's merged connector states (as :meth:`get_connector_states` gives)."""
        if "env_to_module_connector" in states:
            self.env_to_module.set_synced_states(states["env_to_module_connector"])
        if "module_to_env_connector" in states:
            self.module_to_env.set_synced_states(states["module_to_env_connector"])

    def get_metrics(self) -> dict[str, float | int]:
        """Episode and counter metrics (NaN means: no episode has ended yet)."""
        metrics: dict[str, float | int] = {
            "episode_return_mean": _mean(self._recent_returns),
            "episode_return_min": min(self._recent_returns, default=math.nan),
            "episode_return_max": max(self._recent_returns, default=math.nan),
            "episode_len_mean": _mean(self._recent_lengths),
            "num_episodes": self._episodes_this_iteration,
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
            "num_agent_steps_sampled_lifetime": self.num_agent_steps_sampled_lifetime,
        }
        if len(self.config.policies) > 1 or self._multi_agent:
            for module_id, returns in self._recent_module_returns.items():
                metrics[f"{MODULE_EPISODE_RETURNS_MEAN}/{module_id}"] = _mean(returns)
        return metrics


def _mean(values: deque[float] | deque[int]) -> float:
    return float(np.mean(np.asarray(values, dtype=np.float64))) if values else float("nan")
