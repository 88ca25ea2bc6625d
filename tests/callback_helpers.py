"""Callbacks of the callback tests, in an importable module (checkpoints record them by path).

The Ray tests' workers find this module too: the ``ray_cluster`` fixture puts
``tests/`` on their ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Any

import cairn
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.episodes import Episode
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

EVENTS: list[tuple[Any, ...]] = []
"""What :class:`RecordEvents` saw, in order (this process only)."""

LONG_RETURN = 15.0


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class RecordEvents(RLlibCallback):
    """Appends ``(TAG, hook, detail)`` to :data:`EVENTS` in every hook."""

    TAG = "first"

    def on_algorithm_init(self, *, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "algorithm_init", algorithm.training_iteration))

    def on_episode_start(self, *, env_index: int, **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "episode_start", env_index))

    def on_episode_end(self, *, episode: Episode, env_index: int, **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "episode_end", env_index))

    def on_sample_end(self, *, env_runner: Any, samples: Any, **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "sample_end", env_runner.worker_index))

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any], **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "train_result", result["training_iteration"]))

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "checkpoint_loaded", algorithm.training_iteration))


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class CreatedThenStarted(RLlibCallback):
    """Records on_episode_created and on_episode_start of a single-agent runner's episodes."""

    def on_episode_created(self, *, episode: Episode, env_index: int, **kwargs: Any) -> None:
        EVENTS.append(("sa", "created", env_index, episode.id_))

    def on_episode_start(self, *, episode: Episode, env_index: int, **kwargs: Any) -> None:
        EVENTS.append(("sa", "start", env_index, episode.id_))


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class RecordSteps(RecordEvents):
    """Also records ``on_episode_step``."""

    def on_episode_step(self, *, episode: Episode, env_index: int, **kwargs: Any) -> None:
        EVENTS.append((self.TAG, "episode_step", env_index, len(episode)))


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class SecondRecorder(RecordEvents):
    """The same, tagged ``"second"`` (for a list of callbacks)."""

    TAG = "second"


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class LongEpisodes(RLlibCallback):
    """Custom metrics of every kind: lifetime sums, a per-iteration sum, a window, an algorithm-side sum."""

    def on_episode_end(self, *, episode: Episode, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        ret = episode.get_return()
        metrics_logger.log_value("num_long_episodes", int(ret > LONG_RETURN), reduce="lifetime_sum")
        metrics_logger.log_value("reward_sum", ret, reduce="lifetime_sum")
        metrics_logger.log_value("episodes_this_iteration", 1, reduce="sum")
        metrics_logger.log_value("return_last_5", ret, reduce="mean", window=5)
        metrics_logger.log_value("return_ema", ret)  # no reduce, no window: a moving average (RLlib 2.60)
        metrics_logger.log_value(("lengths", "max"), len(episode), reduce="max")

    def on_train_result(self, *, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        metrics_logger.log_value("train_calls", 1, reduce="lifetime_sum")


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class WinsPerModule(RLlibCallback):
    """The games of a multi-agent runner (one MultiAgentEpisode each): every start/end, and from each
    agent's part a lifetime count of wins per module."""

    def on_episode_created(self, *, episode: Any, env_index: int, **kwargs: Any) -> None:
        EVENTS.append(("ma", "created", env_index, episode.id_, len(episode.agent_episodes)))

    def on_episode_start(self, *, episode: Any, env_index: int, **kwargs: Any) -> None:
        EVENTS.append(("ma", "start", env_index, episode.id_, len(episode)))

    def on_episode_end(self, *, episode: Any, env_index: int, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        EVENTS.append(("ma", "end", env_index, episode.id_, len(episode)))
        metrics_logger.log_value("games", 1, reduce="lifetime_sum")
        for agent_episode in episode.agent_episodes.values():
            won = int(agent_episode.get_return() > 0)
            metrics_logger.log_value(f"wins/{agent_episode.module_id}", won, reduce="lifetime_sum")
            metrics_logger.log_value("agent_episodes", 1, reduce="lifetime_sum")


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class CountGames(RLlibCallback):
    """RLlib's EpisodeAndSampleCallbacks on a multi-agent runner's RLlib-API ``sample()``: counts per game."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {"start": 0, "step": 0, "end": 0, "sample": 0}
        self.lengths: dict[str, int] = {}

    def on_episode_start(self, *, episode: Any, **kwargs: Any) -> None:
        self.counts["start"] += 1
        self.lengths[episode.id_] = 0

    def on_episode_step(self, *, episode: Any, **kwargs: Any) -> None:
        self.counts["step"] += 1
        self.lengths[episode.id_] += 1

    def on_episode_end(self, *, episode: Any, prev_episode_chunks: list[Any], **kwargs: Any) -> None:
        assert sum(len(chunk) for chunk in [episode, *prev_episode_chunks]) == self.lengths.pop(episode.id_)
        self.counts["end"] += 1

    def on_sample_end(self, *, samples: Any, **kwargs: Any) -> None:
        self.counts["sample"] += 1


SAMPLE_END_PEEKS: list[tuple[int, int]] = []
"""``(num_env_steps_sampled, num_agent_steps_sampled)`` that :class:`PeekSampledSteps` peeked (this process)."""


@cairn.register  # the program that imports this module allows what checkpoints name (SPEC 8)
class PeekSampledSteps(RLlibCallback):
    """Peeks the runner's sampling counters in ``on_sample_end``, as RLlib users do."""

    def on_sample_end(self, *, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        SAMPLE_END_PEEKS.append(
            (metrics_logger.peek("num_env_steps_sampled"), metrics_logger.peek("num_agent_steps_sampled"))
        )
