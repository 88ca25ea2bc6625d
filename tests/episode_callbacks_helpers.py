"""Callbacks of the callback-form, Episode API and metrics-option tests, in an importable module.

Checkpoints record classes and functions by path; the Ray tests' workers find this
module too (the ``ray_cluster`` fixture puts ``tests/`` on their ``PYTHONPATH``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.episodes import Episode
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

EVENTS: list[tuple[Any, ...]] = []
"""What the hooks of this module saw, in order (this process only)."""


# ---------------------------------------------------------------------- function-form hooks


def fn_algorithm_init(*, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
    """Records the call and logs on the algorithm's logger."""
    EVENTS.append(("fn", "algorithm_init", algorithm.training_iteration))
    metrics_logger.log_value("fn_inits", 1, reduce="lifetime_sum")


def fn_episode_end(*, episode: Episode, metrics_logger: MetricsLogger, rl_module: Any, **kwargs: Any) -> None:
    """Counts episodes on the runner's logger; records that it got the runner's module(s)."""
    EVENTS.append(("fn", "episode_end", episode.env_index, type(rl_module).__name__))
    metrics_logger.log_value("fn_episodes", 1, reduce="lifetime_sum")


def fn_train_result_1(*, result: dict[str, Any], **kwargs: Any) -> None:
    """The first of a list of functions."""
    EVENTS.append(("fn", "train_result_1", result["training_iteration"]))


def fn_train_result_2(*, result: dict[str, Any], **kwargs: Any) -> None:
    """The second of a list of functions (adds an entry to the result)."""
    EVENTS.append(("fn", "train_result_2", result["training_iteration"]))
    result["fn_marker"] = 1


class ClassFirst(RLlibCallback):
    """A class whose hooks must run before the functions of the same hook (RLlib's order)."""

    def on_episode_end(self, **kwargs: Any) -> None:
        EVENTS.append(("class", "episode_end"))

    def on_train_result(self, **kwargs: Any) -> None:
        EVENTS.append(("class", "train_result"))


class Threshold(RLlibCallback):
    """A callbacks class with constructor arguments (``functools.partial(Threshold, threshold=..., name=...)``)."""

    def __init__(self, threshold: float = 100.0, name: str = "long", extra: Any = None) -> None:
        self.threshold = threshold
        self.name = name
        self.extra = extra

    def on_episode_end(self, *, episode: Episode, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        metrics_logger.log_value(self.name, int(episode.get_return() > self.threshold), reduce="lifetime_sum")


# ---------------------------------------------------------------------- Episode API


class PoleAngles(RLlibCallback):
    """RLlib's custom_metrics_in_env_runners pattern on CartPole: per-episode data in ``custom_data``.

    The pole angle of every step goes into ``episode.custom_data["angles"]``; at the
    episode's end their mean and max are logged, so an episode that a checkpoint cut
    in two reports the same numbers only if its ``custom_data`` came back whole.
    """

    def on_episode_start(self, *, episode: Episode, **kwargs: Any) -> None:
        episode.custom_data["angles"] = [float(abs(episode.get_observations(-1)[2]))]
        episode.custom_data["meta"] = {"id": episode.id_, "arr": np.arange(3, dtype=np.int64)}

    def on_episode_step(self, *, episode: Episode, **kwargs: Any) -> None:
        episode.custom_data["angles"].append(float(abs(episode.get_observations(-1)[2])))
        episode.add_temporary_timestep_data("rewards", episode.get_rewards(-1))

    def on_episode_end(self, *, episode: Episode, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        angles = episode.custom_data["angles"]
        assert episode.custom_data["meta"]["id"] == episode.id_
        assert len(angles) == len(episode) + 1  # one per observation (on_episode_step runs at the last step too)
        assert len(episode.get_temporary_timestep_data("rewards")) == len(episode)
        metrics_logger.log_value("pole_angle_mean", float(np.mean(angles)), reduce="mean", window=10)
        metrics_logger.log_value("pole_angle_max", max(angles), reduce="max")
        metrics_logger.log_value("episode_ids", int(episode.id_.split("-")[-1]), reduce="item_series")


class BadCustomData(RLlibCallback):
    """Puts a value a checkpoint cannot hold into ``custom_data``."""

    def on_episode_start(self, *, episode: Episode, **kwargs: Any) -> None:
        episode.custom_data["handle"] = object()


class AgentCustomData(RLlibCallback):
    """Multi-agent: each game (one MultiAgentEpisode) counts its env steps in ``custom_data``; at its end,
    per-agent numbers from its agent episodes."""

    def on_episode_start(self, *, episode: Any, **kwargs: Any) -> None:
        episode.custom_data["steps"] = 0
        episode.custom_data["modules"] = sorted({str(episode.module_for(a)) for a in episode.agent_episodes})

    def on_episode_step(self, *, episode: Any, **kwargs: Any) -> None:
        episode.custom_data["steps"] += 1

    def on_episode_end(self, *, episode: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        # Every env step of the game went through on_episode_step (its last one too).
        assert episode.custom_data["steps"] == len(episode) == episode.env_t
        metrics_logger.log_value("game_steps_counted", episode.custom_data["steps"], reduce="lifetime_sum")
        for agent_episode in episode.agent_episodes.values():
            metrics_logger.log_value(f"by_module/{agent_episode.module_id}", 1, reduce="lifetime_sum")
            metrics_logger.log_value(f"agent_steps/{agent_episode.agent_id}", len(agent_episode), reduce="lifetime_sum")


class IntAgentIds(RLlibCallback):
    """MultiAgentCartPole's int agent ids: custom_data keeps the ids each hook saw; the end logs per agent."""

    def on_episode_start(self, *, episode: Any, **kwargs: Any) -> None:
        episode.custom_data["ids"] = sorted(episode.agent_episodes)

    def on_episode_step(self, *, episode: Any, **kwargs: Any) -> None:
        episode.custom_data["ids"].extend(sorted(episode.agent_episodes))

    def on_episode_end(self, *, episode: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        ids = [*episode.custom_data["ids"], *episode.agent_episodes]
        kinds = "_".join(sorted({type(agent).__name__ for agent in ids}))
        episode.custom_data["ended_with"] = kinds
        for agent, agent_episode in episode.agent_episodes.items():
            metrics_logger.log_value(f"agent_{agent}/{kinds}", len(agent_episode), reduce="lifetime_sum")


# ---------------------------------------------------------------------- metrics options


class EveryMetricOption(RLlibCallback):
    """Logs with every MetricsLogger option, on the env runners and on the algorithm."""

    def on_episode_end(self, *, episode: Episode, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        ret = episode.get_return()
        metrics_logger.log_value("returns_list", ret, reduce="item_series")
        metrics_logger.log_value("returns_window", ret, reduce="item_series", window=5)
        metrics_logger.log_value("returns_pct", ret, reduce="percentiles", window=8)
        metrics_logger.log_value("returns_pct_list", ret, reduce="percentiles", window=8, percentiles=[10, 50, 90])
        metrics_logger.log_value("returns_ema", ret, reduce="ema", ema_coeff=0.2)
        metrics_logger.log_value("returns_win_mean", ret, reduce="mean", window=3)
        metrics_logger.log_value("returns_min", ret, reduce="min", window=4)
        metrics_logger.log_value("returns_max", ret, reduce="max")
        metrics_logger.log_dict({"a": len(episode), "b": 1}, key="lengths", reduce="lifetime_sum")
        with metrics_logger.log_time("timers/episode_end"):
            pass

    def on_train_result(self, *, metrics_logger: MetricsLogger, result: dict[str, Any], **kwargs: Any) -> None:
        metrics_logger.log_value("algo_list", result["training_iteration"], reduce="item_series", window=3)
        metrics_logger.log_value("algo_ema", float(result["training_iteration"]), ema_coeff=0.5)
        with metrics_logger.log_time("timers/train_result", reduce="max"):
            pass


def fn_evaluate_start(*, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
    """on_evaluate_start as a function: counts evaluations in the algorithm's logger."""
    metrics_logger.log_value("evaluations_started", 1, reduce="sum", clear_on_reduce=False)


def fn_evaluate_end(*, algorithm: Any, evaluation_metrics: dict[str, Any], **kwargs: Any) -> None:
    """on_evaluate_end as a function: adds an entry to the evaluation's results (RLlib lets the hook change them)."""
    returns = evaluation_metrics["env_runners"]["episode_return_mean"]
    evaluation_metrics["return_seen_by_hook"] = returns


class EvaluationHooks(RLlibCallback):
    """on_evaluate_start/end as class hooks: they run before the functions (RLlib's order)."""

    order: list[str] = []

    def on_evaluate_start(self, *, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        EvaluationHooks.order.append("class_start")

    def on_evaluate_end(
        self, *, algorithm: Any, metrics_logger: MetricsLogger, evaluation_metrics: dict[str, Any], **kwargs: Any
    ) -> None:
        EvaluationHooks.order.append("class_end")
