"""Callbacks: user code that runs at fixed points of training, with a metrics logger.

:class:`RLlibCallback` mirrors RLlib's ``ray.rllib.callbacks.callbacks.RLlibCallback``
(new API stack). Subclass it, override the hooks you need (each takes keyword
arguments; keep ``**kwargs`` so that hooks may gain arguments), and name the
class in the config::

    class CountLongEpisodes(RLlibCallback):
        def on_episode_end(self, *, episode, metrics_logger, **kwargs):
            if episode.get_return() > 100:
                metrics_logger.log_value("num_long_episodes", 1, reduce="sum")

    algo = PPO(PPOConfig(env="CartPole-v1", callbacks_class=CountLongEpisodes))
    algo.train()["env_runners/num_long_episodes"]   # a lifetime sum, checkpointed

Where each hook runs, and which logger it gets:

=====================  =================  ==========================================
hook                   runs in            ``metrics_logger``
=====================  =================  ==========================================
on_algorithm_init      the algorithm      the algorithm's (``algorithm.metrics``)
on_episode_start/end   every env runner   the runner's (``env_runner.metrics``)
on_episode_step        every env runner   the runner's
on_sample_end          every env runner   the runner's
on_train_result        the algorithm      the algorithm's
on_checkpoint_loaded   the algorithm      (none; ``algorithm.metrics``)
=====================  =================  ==========================================

After each iteration's sampling, what the env runners logged is reduced into
the algorithm's logger under ``env_runners/`` (as in RLlib), and ``train()``
returns every value of the algorithm's logger, flattened with ``/``.

The config records the class by reference (``"module:QualName"``), never by
value (SPEC 8): ``from_checkpoint`` finds it only in a module the program has
already imported, and otherwise fails with an error that says which module to
import. Each algorithm and each env runner builds its own instance
(:func:`make_callbacks`), so a callback's attributes are not shared across
processes and are not checkpointed: keep what must survive a restart in the
metrics logger.

This module imports nothing else of ``cairn.rl``: the algorithm and the env
runners import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cairn.registry import class_path
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

__all__ = ["Episode", "RLlibCallback", "make_callbacks", "overrides"]


@dataclass(frozen=True)
class Episode:
    """What the episode hooks see of one single-agent episode (a small part of RLlib's ``SingleAgentEpisode``).

    Attributes:
        env_index: The sub-environment (slot) of the env runner it runs in.
        agent_id: The agent (``"default_agent"`` for single-agent envs).
        module_id: The module that acts for the agent.
        episode_return: The sum of its rewards so far.
        length: Its steps so far.
        is_done: Whether it ended (terminated or truncated).
    """

    env_index: int
    agent_id: str
    module_id: str
    episode_return: float
    length: int
    is_done: bool

    def get_return(self) -> float:
        """The sum of the episode's rewards so far (RLlib's ``episode.get_return()``)."""
        return self.episode_return

    def __len__(self) -> int:
        return self.length


class RLlibCallback:
    """Base class of callbacks; every hook does nothing (RLlib's ``RLlibCallback``).

    Subclasses must be constructible without arguments and live in an importable
    module (not a script's ``__main__``, not a function's locals): checkpoints
    record the class by its path.
    """

    def on_algorithm_init(self, *, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        """The algorithm was built (also by ``from_checkpoint``, before the state is restored)."""

    def on_episode_start(
        self,
        *,
        episode: Episode,
        env_runner: Any,
        metrics_logger: MetricsLogger,
        env: Any,
        env_index: int,
        **kwargs: Any,
    ) -> None:
        """An episode started in sub-environment ``env_index`` (after the reset)."""

    def on_episode_step(
        self,
        *,
        episode: Episode,
        env_runner: Any,
        metrics_logger: MetricsLogger,
        env: Any,
        env_index: int,
        **kwargs: Any,
    ) -> None:
        """The episode in sub-environment ``env_index`` took a step and goes on (its last step calls
        :meth:`on_episode_end` instead, as in RLlib). Called only when a callback overrides it."""

    def on_episode_end(
        self,
        *,
        episode: Episode,
        env_runner: Any,
        metrics_logger: MetricsLogger,
        env: Any,
        env_index: int,
        **kwargs: Any,
    ) -> None:
        """An episode ended (terminated or truncated) in sub-environment ``env_index``."""

    def on_sample_end(self, *, env_runner: Any, metrics_logger: MetricsLogger, samples: Any, **kwargs: Any) -> None:
        """An env runner finished one ``sample()``; ``samples`` is what it returns (module id -> batch)."""

    def on_train_result(
        self, *, algorithm: Any, metrics_logger: MetricsLogger, result: dict[str, Any], **kwargs: Any
    ) -> None:
        """``train()`` is about to return ``result`` (change it in place to add or alter entries)."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """The algorithm's state was restored (``restore_from_path``, ``from_checkpoint``)."""


class _CallbackList(RLlibCallback):
    """Several callbacks, called in the order given (RLlib: a list of classes in ``callbacks_class``)."""

    def __init__(self, callbacks: Sequence[RLlibCallback]) -> None:
        self.callbacks = list(callbacks)

    def on_algorithm_init(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_algorithm_init(**kwargs)

    def on_episode_start(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_episode_start(**kwargs)

    def on_episode_step(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_episode_step(**kwargs)

    def on_episode_end(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_episode_end(**kwargs)

    def on_sample_end(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_sample_end(**kwargs)

    def on_train_result(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_train_result(**kwargs)

    def on_checkpoint_loaded(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_checkpoint_loaded(**kwargs)


def overrides(callbacks: RLlibCallback, hook: str) -> bool:
    """Whether ``callbacks`` (or one of a list of them) overrides ``hook``, so that a caller may skip a costly loop."""
    if isinstance(callbacks, _CallbackList):
        return any(overrides(callback, hook) for callback in callbacks.callbacks)
    return getattr(type(callbacks), hook) is not getattr(RLlibCallback, hook)


def make_callbacks(callbacks_class: Any) -> RLlibCallback:
    """Build the callbacks a config's ``callbacks_class`` names: ``None``, a class, or a list of classes.

    Raises:
        ValueError: Something else than subclasses of :class:`RLlibCallback`
            (checked before anything is constructed: the value may come from a
            checkpoint's recorded config).
    """
    if callbacks_class is None:
        return RLlibCallback()
    classes = list(callbacks_class) if isinstance(callbacks_class, list | tuple) else [callbacks_class]
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, RLlibCallback)):
            what = class_path(cls) if isinstance(cls, type) else repr(cls)[:80]
            raise ValueError(
                f"callbacks_class must be a subclass of cairn.rl.callbacks.callbacks.RLlibCallback (or a list of "
                f"them), got {what}."
            )
    if len(classes) == 1:
        built: RLlibCallback = classes[0]()
        return built
    return _CallbackList([cls() for cls in classes])
