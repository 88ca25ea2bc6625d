"""Callbacks in RLlib's forms (issue 28 item 4): per-hook functions, partial classes, lists, ``rl_module``."""

from __future__ import annotations

import functools
import sys
import types
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from rl_helpers import CounterEnv, small_config

import cairn
import episode_callbacks_helpers as helpers
from cairn import UnsafeCheckpointError
from cairn.registry import Unrecorded
from cairn.rl import PPO, PPOConfig
from cairn.rl.callbacks.callbacks import callbacks_from_config
from cairn.rl.config.callback_forms import CallbackClass
from callback_helpers import RecordEvents

TINY = {"rollout_length": 16, "minibatch_size": 16, "num_epochs": 1, "model_config": {"hidden_sizes": [8]}}


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def test_functions_are_recorded_by_reference_and_run_after_the_class_hooks() -> None:
    # A function passed as an object is registered by the config; one passed by its path is not
    # (the config never imports what a string names): the program registers it, one line (SPEC 8).
    cairn.register(helpers.fn_train_result_2)
    config = small_config(**TINY).callbacks(
        helpers.ClassFirst,
        on_algorithm_init=helpers.fn_algorithm_init,
        on_episode_end=helpers.fn_episode_end,
        on_train_result=[helpers.fn_train_result_1, "episode_callbacks_helpers:fn_train_result_2"],
    )
    assert config.callbacks_on_episode_end == ["episode_callbacks_helpers:fn_episode_end"]
    assert config.callbacks_on_train_result == [
        "episode_callbacks_helpers:fn_train_result_1",
        "episode_callbacks_helpers:fn_train_result_2",
    ]
    assert config.callbacks_on_sample_end is None
    helpers.EVENTS.clear()
    algo = PPO(config)
    try:
        assert helpers.EVENTS == [("fn", "algorithm_init", 0)]
        result = algo.train()
    finally:
        algo.stop()
    ends = [e for e in helpers.EVENTS if e[1] == "episode_end"]
    assert ends and len(ends) % 2 == 0
    # Per episode: the class's hook, then the function's (RLlib's make_callback order).
    assert all(a == ("class", "episode_end") and b[0] == "fn" for a, b in zip(ends[::2], ends[1::2], strict=True))
    assert {b[3] for b in ends[1::2]} == {"MultiRLModule"}  # rl_module: the runner's module(s)
    assert helpers.EVENTS[-3:] == [("class", "train_result"), ("fn", "train_result_1", 1), ("fn", "train_result_2", 1)]
    assert result["fn_marker"] == 1 and result["fn_inits"] == 1
    assert result["env_runners/fn_episodes"] == len(ends) // 2


def test_functions_alone_and_a_restored_config_call_them_again(tmp_path: Path) -> None:
    algo = PPO(small_config(**TINY, callbacks_on_episode_end=helpers.fn_episode_end))
    try:
        first = _results(algo, 1)
        path = algo.save_to_path(tmp_path / "ckpt")
        expected = _results(algo, 2)
    finally:
        algo.stop()
    assert first[0]["env_runners/fn_episodes"] > 0
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.config.callbacks_on_episode_end == ["episode_callbacks_helpers:fn_episode_end"]
        assert _results(restored, 2) == expected
    finally:
        restored.stop()


def _main_function() -> Any:
    """A function whose module is ``__main__`` (as one defined in a script)."""
    code = compile("def on_end(**kwargs):\n    pass\n", "<script>", "exec")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(code, namespace)
    return namespace["on_end"]


@pytest.mark.parametrize(
    ("fn", "qualname"),
    [
        (lambda **kwargs: None, "<lambda>"),
        (functools.partial(helpers.fn_episode_end), "partial"),
        (print, "print"),
        (_main_function(), "on_end"),
    ],
)
def test_a_function_no_path_names_is_kept_live_and_recorded_only_by_its_names(fn: Any, qualname: str) -> None:
    """Issue 39: RLlib's forms run unchanged; the config keeps the callable, a checkpoint only its names."""
    config = PPOConfig(env="CartPole-v1").callbacks(on_episode_end=fn)
    (kept,) = config.callbacks_on_episode_end or []
    assert isinstance(kept, Unrecorded) and kept.fn is fn and qualname in kept.qualname
    assert (kept.role, kept.index) == ("callbacks_on_episode_end", 0)
    assert callbacks_from_config(config).functions["on_episode_end"] == [fn]


def test_what_is_neither_callable_nor_a_path_is_refused() -> None:
    config = PPOConfig(env="CartPole-v1")
    with pytest.raises(ValueError, match="'module:function'"):
        config.callbacks(on_episode_end="no_colon")
    with pytest.raises(ValueError, match="give a function"):
        config.callbacks(on_episode_end=3)
    assert config.callbacks_on_episode_end is None  # nothing changed


def test_a_closure_is_kept_and_a_function_passed_in_code_is_the_programs_choice() -> None:
    def closure(**kwargs: Any) -> None:
        pass

    kept = PPOConfig(env="CartPole-v1", callbacks_on_episode_start=[closure]).callbacks_on_episode_start
    assert kept == [Unrecorded("callbacks_on_episode_start", __name__, closure.__qualname__, 0)]
    # No deny-list decides (issue 33): a framework's function the program passes is its choice,
    # and building the config registers it. A file naming one nobody passed is refused (below).
    config = PPOConfig(env="CartPole-v1").callbacks(on_train_result=gym.make)
    assert config.callbacks_on_train_result == ["gymnasium.envs.registration:make"]
    assert callbacks_from_config(config).functions["on_train_result"] == [gym.make]
    created = PPOConfig(env="CartPole-v1").callbacks(on_episode_created=helpers.fn_episode_end)
    assert callbacks_from_config(created).functions["on_episode_created"] == [helpers.fn_episode_end]


def test_a_recorded_reference_is_resolved_without_importing() -> None:
    """A config from a file names functions by path; building its callbacks imports nothing."""
    hostile = ["no_such_module_xyz:fn", "os:system", "shutil:rmtree", "torch.hub:load", "tqdm.cli:main"]
    modules_before = set(sys.modules)
    for ref in hostile:
        config = PPOConfig(env="CartPole-v1")
        config.callbacks_on_episode_end = [ref]  # as a decoded checkpoint would hold it
        with pytest.raises(UnsafeCheckpointError, match=f"{ref!r}, which is not on cairn's allow-list"):
            callbacks_from_config(config)
    assert set(sys.modules) == modules_before  # nothing imported


def test_a_partial_class_is_recorded_with_its_arguments(tmp_path: Path) -> None:
    partial = functools.partial(helpers.Threshold, threshold=20.0, name="over_20")
    config = small_config(**TINY).callbacks([partial, RecordEvents])
    kept = config.callbacks_class[0]
    assert (
        isinstance(kept, CallbackClass) and kept == partial and kept.keywords == {"threshold": 20.0, "name": "over_20"}
    )
    algo = PPO(config)
    try:
        first = _results(algo, 2)
        path = algo.save_to_path(tmp_path / "ckpt")
        expected = _results(algo, 1)
    finally:
        algo.stop()
    assert "env_runners/over_20" in first[-1]
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.config.callbacks_class == [partial, RecordEvents]
        built = restored.env_runner.callbacks.callbacks[0]
        assert (type(built), built.threshold, built.name) == (helpers.Threshold, 20.0, "over_20")
        assert _results(restored, 1) == expected
    finally:
        restored.stop()
    single = small_config(**TINY).callbacks(functools.partial(helpers.Threshold, 5.0))
    assert PPO(single).callbacks[0].threshold == 5.0  # RLlib's algorithm.callbacks: a list


def test_a_partial_with_other_arguments_or_of_a_local_class_is_refused() -> None:
    with pytest.raises(ValueError, match=r"argument 'extra' is a object.*plain data"):
        PPOConfig(env="CartPole-v1").callbacks(functools.partial(helpers.Threshold, extra=object()))
    with pytest.raises(ValueError, match="argument 'extra' is a ndarray"):
        PPOConfig(env="CartPole-v1").callbacks(functools.partial(helpers.Threshold, extra=__import__("numpy").ones(2)))

    def local() -> type:
        class Inner(helpers.RLlibCallback):
            pass

        return Inner

    with pytest.raises(ValueError, match="top level of a module"):
        PPOConfig(env="CartPole-v1").callbacks(functools.partial(local()))
    main_class = types.new_class("Main", (helpers.RLlibCallback,))
    main_class.__module__ = "__main__"
    with pytest.raises(ValueError, match="not __main__"):
        PPOConfig(env="CartPole-v1").callbacks(functools.partial(main_class))
    with pytest.raises(ValueError, match=r"a callbacks class is a subclass of .*RLlibCallback, and it is not"):
        PPOConfig(env="CartPole-v1").callbacks(functools.partial(dict))
    with pytest.raises(ValueError, match=r"subclass of cairn\.rl\.callbacks\.callbacks[.:]RLlibCallback"):
        PPO(small_config(**TINY, callbacks_class=functools.partial(CounterEnv)))


def test_a_callbacks_class_given_by_name_is_refused_at_config_time() -> None:
    """RLlib's ``callbacks()`` refuses what is not callable at once; so does cairn, before any build."""
    with pytest.raises(ValueError, match=r"callbacks_class='cairn.rl.callbacks.callbacks:RLlibCallback' is refused"):
        PPOConfig(env="CartPole-v1").callbacks("cairn.rl.callbacks.callbacks:RLlibCallback")
    with pytest.raises(ValueError, match="not a name"):
        PPOConfig(env="CartPole-v1", callbacks_class=[helpers.Threshold, "x:Y"])
