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
on_environment_created every env runner   the runner's (once, when it built its envs)
on_episode_created     every env runner   the runner's
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
metrics logger. As in RLlib, ``algorithm.callbacks`` (and ``env_runner.callbacks``) is the
list of those objects (:class:`CallbackList`: ``algo.callbacks[0]``), on which calling a
hook calls every object's, then the functions given per hook.

Of ``cairn.rl`` this module imports only how a config records callbacks
(:mod:`cairn.rl.config.callback_forms`) and the metrics logger: the algorithm and the env
runners import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from cairn.registry import class_path
from cairn.rl.config.callback_forms import CALLBACK_HOOKS, CallbackClass, function_field, resolve_callback_function
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

if TYPE_CHECKING:
    # For annotations only: the env runners (a floor above) import this module and hand
    # the hooks their episodes, so importing the episodes here would climb a floor.
    from cairn.rl.env.episodes import Episode

__all__ = ["CallbackList", "RLlibCallback", "callbacks_from_config", "make_callbacks", "overrides"]


class RLlibCallback:
    """Base class of callbacks; every hook does nothing (RLlib's ``RLlibCallback``).

    Subclasses must be constructible without arguments and live in an importable
    module (not a script's ``__main__``, not a function's locals): checkpoints
    record the class by its path.
    """

    def on_algorithm_init(self, *, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        """The algorithm was built (also by ``from_checkpoint``, before the state is restored)."""

    def on_episode_created(
        self,
        *,
        episode: Episode,
        env_runner: Any,
        metrics_logger: MetricsLogger,
        env: Any,
        env_index: int,
        **kwargs: Any,
    ) -> None:
        """A new episode object exists for sub-environment ``env_index`` (RLlib's hook): the multi-agent
        runner's game before its reset's observations, the single-agent runner's episode just before its
        ``on_episode_start``. Called only when a callback overrides an episode hook."""

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
        """The episode in sub-environment ``env_index`` took a step (its last one too, before
        :meth:`on_episode_end`, as in RLlib). Called only when a callback overrides it."""

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
        """An episode ended (terminated or truncated) in sub-environment ``env_index``.

        The runner also passes RLlib's ``prev_episode_chunks`` (the chunks of this episode earlier
        ``sample()`` calls returned): always ``[]``, as cairn's episode object holds the whole episode.
        A multi-agent runner calls the episode hooks once per game with its
        :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode` (each agent's part in
        ``episode.agent_episodes``), as RLlib does.
        """

    def on_sample_end(self, *, env_runner: Any, metrics_logger: MetricsLogger, samples: Any, **kwargs: Any) -> None:
        """An env runner finished one ``sample()``; ``samples`` is what it returns (module id -> batch)."""

    def on_train_result(
        self, *, algorithm: Any, metrics_logger: MetricsLogger, result: dict[str, Any], **kwargs: Any
    ) -> None:
        """``train()`` is about to return ``result`` (change it in place to add or alter entries)."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """The algorithm's state was restored (``restore_from_path``, ``from_checkpoint``)."""

    def on_evaluate_start(self, *, algorithm: Any, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        """An evaluation is about to run (``algo.evaluate()``, or ``train()`` every ``evaluation_interval``)."""

    def on_evaluate_end(
        self, *, algorithm: Any, metrics_logger: MetricsLogger, evaluation_metrics: dict[str, Any], **kwargs: Any
    ) -> None:
        """An evaluation ran; ``evaluation_metrics`` is what ``evaluate()`` returns (change it in place to add)."""

    def on_env_runners_recreated(
        self,
        *,
        algorithm: Any,
        env_runner_group: Any,
        env_runner_indices: list[int],
        is_evaluation: bool,
        **kwargs: Any,
    ) -> None:
        """Remote env runners that failed were replaced, and the replacements (worker indices
        ``env_runner_indices``) are up, with the group's connector states and the latest weights
        (RLlib's hook; ``restart_failed_env_runners``). Called in the algorithm's process."""

    def on_environment_created(
        self, *, env_runner: Any, metrics_logger: MetricsLogger, env: Any, env_context: Any, **kwargs: Any
    ) -> None:
        """An env runner built its environment (RLlib's hook), before its first reset's episodes start.

        ``env`` is the single-agent runner's ``gymnasium.vector.SyncVectorEnv`` (all its copies; RLlib
        passes its vector env too), or one ``MultiAgentEnv`` copy of the multi-agent runner, which calls
        the hook once per copy; ``env_context`` is an :class:`~cairn.rl.env.env_context.EnvContext`
        (the ``env_config`` with ``worker_index``, ``num_workers``, ``vector_index``, ``remote``).
        """


class CallbackList(RLlibCallback, Sequence[RLlibCallback]):
    """The callbacks of a config: its callbacks objects, then its per-hook functions, called in that order.

    As RLlib's ``algorithm.callbacks`` it is the list of the callbacks objects the config's
    ``callbacks_class`` built (``algo.callbacks[0]``, ``len``, iteration); calling a hook on it
    (``callbacks.on_train_result(...)``) calls the hook of each object, then the functions
    given for that hook (RLlib's ``make_callback``).

    Args:
        callbacks: The callbacks objects, in the order of ``callbacks_class``.
        functions: Hook name -> the functions given for it (``callbacks(on_train_result=...)``).
    """

    def __init__(
        self, callbacks: Sequence[RLlibCallback], functions: Mapping[str, Sequence[Callable[..., Any]]] | None = None
    ) -> None:
        self.callbacks = list(callbacks)
        self.functions = {hook: list(fns) for hook, fns in (functions or {}).items() if fns}

    @overload
    def __getitem__(self, index: int) -> RLlibCallback: ...

    @overload
    def __getitem__(self, index: slice) -> list[RLlibCallback]: ...

    def __getitem__(self, index: int | slice) -> RLlibCallback | list[RLlibCallback]:
        """The ``index``-th callbacks object (in the order of ``callbacks_class``)."""
        return self.callbacks[index]

    def __len__(self) -> int:
        """How many callbacks objects (functions given per hook are not counted, as in RLlib)."""
        return len(self.callbacks)

    def _call(self, hook: str, kwargs: dict[str, Any]) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(**kwargs)
        for fn in self.functions.get(hook, ()):
            fn(**kwargs)

    def on_algorithm_init(self, **kwargs: Any) -> None:
        self._call("on_algorithm_init", kwargs)

    def on_episode_created(self, **kwargs: Any) -> None:
        self._call("on_episode_created", kwargs)

    def on_episode_start(self, **kwargs: Any) -> None:
        self._call("on_episode_start", kwargs)

    def on_episode_step(self, **kwargs: Any) -> None:
        self._call("on_episode_step", kwargs)

    def on_episode_end(self, **kwargs: Any) -> None:
        self._call("on_episode_end", kwargs)

    def on_sample_end(self, **kwargs: Any) -> None:
        self._call("on_sample_end", kwargs)

    def on_train_result(self, **kwargs: Any) -> None:
        self._call("on_train_result", kwargs)

    def on_checkpoint_loaded(self, **kwargs: Any) -> None:
        self._call("on_checkpoint_loaded", kwargs)

    def on_evaluate_start(self, **kwargs: Any) -> None:
        self._call("on_evaluate_start", kwargs)

    def on_evaluate_end(self, **kwargs: Any) -> None:
        self._call("on_evaluate_end", kwargs)

    def on_env_runners_recreated(self, **kwargs: Any) -> None:
        self._call("on_env_runners_recreated", kwargs)

    def on_environment_created(self, **kwargs: Any) -> None:
        self._call("on_environment_created", kwargs)


def overrides(callbacks: RLlibCallback, hook: str) -> bool:
    """Whether ``callbacks`` (or one of a list of them, or a function) overrides ``hook``, so that a caller may
    skip a costly loop."""
    if isinstance(callbacks, CallbackList):
        return bool(callbacks.functions.get(hook)) or any(overrides(c, hook) for c in callbacks.callbacks)
    return getattr(type(callbacks), hook) is not getattr(RLlibCallback, hook)


def make_callbacks(
    callbacks_class: Any, functions: Mapping[str, Sequence[Callable[..., Any]]] | None = None
) -> CallbackList:
    """Build the callbacks a config names: ``callbacks_class`` (``None``, a class, a
    :class:`~cairn.rl.config.callback_forms.CallbackClass` partial, or a list of them), then ``functions``
    (hook -> functions, called after the classes' hooks).

    Raises:
        ValueError: Something else than subclasses of :class:`RLlibCallback`
            (checked before anything is constructed: the value may come from a
            checkpoint's recorded config).
    """
    if callbacks_class is None:
        classes: list[Any] = []
    else:
        classes = list(callbacks_class) if isinstance(callbacks_class, list | tuple) else [callbacks_class]
    for cls in classes:
        target = cls.func if isinstance(cls, CallbackClass) else cls
        if not (isinstance(target, type) and issubclass(target, RLlibCallback)):
            what = class_path(target) if isinstance(target, type) else repr(target)[:80]
            raise ValueError(
                f"callbacks_class must be a subclass of cairn.rl.callbacks.callbacks.RLlibCallback, a "
                f"functools.partial of one, or a list of them; got {what}."
            )
    return CallbackList([cls() for cls in classes], functions)


def callbacks_from_config(config: Any) -> CallbackList:
    """The callbacks of ``config``: its ``callbacks_class`` and its ``callbacks_on_<hook>`` functions.

    The functions are resolved by :func:`~cairn.rl.config.callback_forms.resolve_callback_function`
    (the allow-list, never an import: a function the program registered or a load trusted; on a
    remote worker, what its driver resolved), all before any callbacks object is built.
    """
    functions = {
        hook: [resolve_callback_function(ref, hook) for ref in getattr(config, function_field(hook), None) or ()]
        for hook in CALLBACK_HOOKS
    }
    return make_callbacks(config.callbacks_class, functions)
