"""Callbacks and the metrics logger (SPEC 9): hooks in order, custom lifetime metrics exact across a checkpoint."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rl_helpers import small_config

import callback_helpers
from cairn import IncompatibleCheckpointError
from cairn.rl import PPO
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger
from cairn.testing import assert_states_equal
from callback_helpers import EVENTS, CreatedThenStarted, LongEpisodes, RecordEvents, RecordSteps, SecondRecorder

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


# ---------------------------------------------------------------------- MetricsLogger


def test_reductions_per_iteration_and_lifetime() -> None:
    """RLlib 2.60: every stat starts over at each reduce, but a root logger's lifetime sums."""
    m = MetricsLogger(root=True)
    for v in (3, 1, 2):
        m.log_value("lifetime", v, reduce="lifetime_sum")
        m.log_value("kept_sum", v, reduce="sum", clear_on_reduce=False)  # RLlib's older spelling
        m.log_value("sum", v, reduce="sum")
        m.log_value("min", v, reduce="min")
        m.log_value("max", v, reduce="max")
        m.log_value("mean2", v, reduce="mean", window=2)
        m.log_value("mean", v, reduce="mean")
        m.log_value("ema", v, reduce="ema", ema_coeff=0.5)
    assert m.peek("lifetime") == 6 and isinstance(m.peek("lifetime"), int) and m.peek("kept_sum") == 6
    assert (m.peek("sum"), m.peek("min"), m.peek("max"), m.peek("mean2"), m.peek("mean")) == (6, 1, 3, 1.5, 2.0)
    assert m.peek("ema") == 0.5 * (0.5 * 3 + 0.5 * 1) + 0.5 * 2
    assert m.reduce(compile=True)["sum"] == 6
    assert math.isnan(m.peek("sum")) and math.isnan(m.peek("mean")) and m.peek("lifetime") == 6
    m.log_value("sum", 4)
    m.log_value("lifetime", 4)
    assert m.reduce(compile=True) | {"min": 0, "max": 0, "mean2": 0, "mean": 0, "ema": 0} == {
        "lifetime": 10, "kept_sum": 6, "sum": 4, "min": 0, "max": 0, "mean2": 0, "mean": 0, "ema": 0
    }  # fmt: skip


def test_nested_keys_log_dict_and_peek() -> None:
    m = MetricsLogger(root=True)
    m.log_dict({"a": {"b": 1, "c": 2.5}}, key="top", reduce="lifetime_sum")
    m.log_value(("top", "a", "b"), 2, reduce="lifetime_sum")
    assert m.peek("top/a/b") == 3 and m.peek(("top", "a", "c")) == 2.5
    assert m.peek("top") == {"a": {"b": 3, "c": 2.5}}
    assert m.reduce() == {"top": {"a": {"b": 3, "c": 2.5}}}
    assert m.peek("missing", default=7) == 7
    with pytest.raises(KeyError, match="top/a/b"):
        m.peek("missing")
    assert math.isnan(MetricsLogger().peek("x", default=math.nan))


def test_a_key_keeps_its_settings() -> None:
    m = MetricsLogger()
    m.log_value("x", 1, reduce="sum", window=3)
    m.log_value("x", 1, reduce="sum")  # no window given: the recorded one
    m.log_value("x", 1)  # no reduce given: the recorded one (RLlib)
    assert m.peek("x") == 3
    with pytest.raises(ValueError, match="was first logged as SumStats"):
        m.log_value("x", 1, reduce="max")
    with pytest.raises(ValueError, match="was first logged as SumStats"):
        m.log_value("x", 1, window=5)
    with pytest.raises(ValueError, match="clashes"):
        m.log_value("x/y", 1)
    with pytest.raises(ValueError, match="invalid reduce method 'median'"):
        m.log_value("z", 1, reduce="median")
    with pytest.raises(ValueError, match="with_throughput applies only to"):
        m.log_value("z", 1, reduce="mean", with_throughput=True)
    with pytest.raises(TypeError, match="numbers"):
        m.log_value("z", "1")
    assert "z" not in m  # the refused calls left nothing behind
    m.log_value("item", "a string", reduce="item")
    assert m.peek("item") == "a string"


def test_aggregating_plain_deltas_equals_aggregating_stats() -> None:
    """pop_deltas() (plain data, what a remote runner sends) aggregates as reduce()'s stats do."""
    runners = [[MetricsLogger(), MetricsLogger()] for _ in range(2)]
    roots = [MetricsLogger(root=True), MetricsLogger(root=True)]
    for step in range(3):
        for pair in runners:
            for r, runner in enumerate(pair):
                for v in (step + r, 0.5 * step):
                    runner.log_value("lifetime", v, reduce="lifetime_sum")
                    runner.log_value("win", v, reduce="mean", window=3)
                    runner.log_value("ema", v)
                    runner.log_value("max", v, reduce="max")
                    runner.log_value("items", v, reduce="item_series")
        roots[0].aggregate([r.pop_deltas() for r in runners[0]], key="env_runners")
        roots[1].aggregate([r.reduce() for r in runners[1]], key="env_runners")
        assert roots[0].reduce(compile=True) == roots[1].reduce(compile=True)
    assert roots[0].peek("env_runners/lifetime") == sum(s + r + 0.5 * s for s in range(3) for r in range(2))
    assert runners[0][0].peek("lifetime") == 0  # a leaf hands its increment up once
    with pytest.raises(ValueError, match="reduced stats"):
        roots[0].aggregate([{"lifetime": 3}])
    roots[0].log_value("direct", 1)
    with pytest.raises(ValueError, match="logged directly"):
        roots[0].aggregate([{"direct": _stat_of(1)}])


def test_state_round_trip_and_a_state_that_does_not_fit() -> None:
    m = MetricsLogger(root=True)
    m.log_value("a/sum", 2, reduce="lifetime_sum")
    m.log_value("a/win", 1.5, reduce="mean", window=4)
    m.log_value("ema", 3.0)
    m.aggregate([MetricsLogger().reduce() | {"b": _stat_of(5)}])
    copy = MetricsLogger(root=True)
    copy.set_state(m.get_state())
    assert copy.get_state() == m.get_state() and copy.reduce(compile=True) == m.reduce(compile=True)
    good = {"key": ["a"], "state": {"stats_cls_identifier": "sum", "is_root": True, "is_leaf": True, "window": None,
                                    "values": [1], "track_throughput": False}}  # fmt: skip
    MetricsLogger().set_state({"version": 2, "stats": [good]})
    for record, match in (
        ({**good, "state": {**good["state"], "stats_cls_identifier": "median"}}, "unknown stats class 'median'"),
        ({**good, "state": {**good["state"], "values": [1, 2, 3]}}, "3 values for a leaf stat that keeps at most 1"),
        ({**good, "state": {**good["state"], "window": 0}}, "window must be None or an int"),
        ({**good, "state": {**good["state"], "values": ["1"]}}, "numbers"),
        ({**good, "key": ["a", ""]}, "no empty parts"),
    ):
        with pytest.raises(IncompatibleCheckpointError, match=rf"metrics/stats\[0\].*{match}"):
            MetricsLogger().set_state({"version": 2, "stats": [record]})
    with pytest.raises(IncompatibleCheckpointError, match="clashes"):
        MetricsLogger().set_state({"version": 2, "stats": [good, {**good, "key": ["a", "b"]}]})
    with pytest.raises(IncompatibleCheckpointError, match="version 3"):
        MetricsLogger().set_state({"version": 3, "stats": []})


def _stat_of(value: int) -> Any:
    from cairn.rl.utils.metrics.stats import LifetimeSumStats

    stat = LifetimeSumStats()
    stat.push(value)
    return stat


# ---------------------------------------------------------------------- callbacks in an algorithm


def test_callbacks_fire_in_order() -> None:
    EVENTS.clear()
    algo = PPO(small_config(callbacks_class=RecordEvents))
    try:
        slots = algo.env_runner.num_slots
        assert [e[1:] for e in EVENTS] == [("algorithm_init", 0)]
        EVENTS.clear()
        algo.train()
        events = [e[1:] for e in EVENTS]
    finally:
        algo.stop()
    # The first episodes start when sampling begins (RLlib: at the reset in sample()).
    assert events[:slots] == [("episode_start", i) for i in range(slots)]
    assert events[-2:] == [("sample_end", 0), ("train_result", 1)]
    episode_events = events[slots:-2]
    ends = [i for i, e in enumerate(episode_events) if e[0] == "episode_end"]
    assert ends, "CartPole episodes end within 32 steps of random play"
    for i in ends:  # the same-step autoreset: the next episode of that env begins at once
        assert episode_events[i + 1] == ("episode_start", episode_events[i][1])
    assert len(episode_events) == 2 * len(ends)


def test_on_episode_step_fires_for_every_step_the_last_too() -> None:
    EVENTS.clear()
    algo = PPO(small_config(callbacks_class=RecordSteps, rollout_length=16))
    try:
        algo.train()
        slots, horizon = algo.env_runner.num_slots, 16
    finally:
        algo.stop()
    steps = [e for e in EVENTS if e[1] == "episode_step"]
    ends = [e for e in EVENTS if e[1] == "episode_end"]
    assert len(steps) == slots * horizon  # each env, each step (an episode's last one too, as RLlib's runners)
    assert all(length >= 1 for *_, length in steps)
    for end in ends:  # an episode's last step: on_episode_step of that env, then its on_episode_end
        before = EVENTS[EVENTS.index(end) - 1]
        assert before[1] == "episode_step" and before[2] == end[2]


def test_on_episode_created_comes_just_before_each_on_episode_start() -> None:
    EVENTS.clear()
    algo = PPO(small_config(callbacks_class=CreatedThenStarted, rollout_length=32))
    try:
        algo.train()
    finally:
        algo.stop()
    events = [e for e in EVENTS if e[0] == "sa"]
    assert len(events) > 2 * algo.env_runner.num_slots  # episodes ended and new ones began
    assert [e[1] for e in events] == ["created", "start"] * (len(events) // 2)
    assert [e[2:] for e in events[::2]] == [e[2:] for e in events[1::2]]


def test_several_callbacks_run_in_the_order_given() -> None:
    EVENTS.clear()
    algo = PPO(small_config(callbacks_class=[RecordEvents, SecondRecorder]))
    try:
        algo.train()
    finally:
        algo.stop()
    assert [tag for tag, *_ in EVENTS] == ["first", "second"] * (len(EVENTS) // 2)
    assert [e[1:] for e in EVENTS[::2]] == [e[1:] for e in EVENTS[1::2]]


def test_on_checkpoint_loaded_fires_after_restore_and_from_checkpoint(tmp_path: Path) -> None:
    algo = PPO(small_config(callbacks_class=RecordEvents))
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
        algo.train()
        EVENTS.clear()
        algo.restore_from_path(path)
        assert [e[1:] for e in EVENTS] == [("checkpoint_loaded", 1)]  # after the state was applied
        EVENTS.clear()
        algo.restore_from_path(Path(path) / "learner_group", component="learner_group")
        assert [e[1:] for e in EVENTS] == [("checkpoint_loaded", 1)]
    finally:
        algo.stop()
    EVENTS.clear()
    restored = PPO.from_checkpoint(path)
    try:
        assert [e[1:] for e in EVENTS] == [("algorithm_init", 0), ("checkpoint_loaded", 1)]
        EVENTS.clear()
        restored.train()  # the restored episodes go on: no new starts but after the ends
        events = [e[1:] for e in EVENTS]
        assert [e for i, e in enumerate(events) if e[0] == "episode_start" and events[i - 1][0] != "episode_end"] == []
    finally:
        restored.stop()


def test_a_checkpoint_before_the_first_sample_still_starts_the_first_episodes(tmp_path: Path) -> None:
    algo = PPO(small_config(callbacks_class=RecordEvents))
    try:
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        EVENTS.clear()
        restored.train()
        slots = restored.env_runner.num_slots
        assert [e[1:] for e in EVENTS[:slots]] == [("episode_start", i) for i in range(slots)]
    finally:
        restored.stop()


def test_custom_lifetime_metrics_continue_exactly(tmp_path: Path) -> None:
    straight = PPO(small_config(callbacks_class=LongEpisodes))
    try:
        first = _results(straight, 2)
        path = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, 2)
        expected_states = (straight.metrics.get_state(), straight.env_runner.metrics.get_state())
    finally:
        straight.stop()
    assert first[1]["env_runners/num_long_episodes"] > 0 and first[1]["train_calls"] == 1
    assert expected[1]["env_runners/reward_sum"] > first[1]["env_runners/reward_sum"]
    assert expected[1]["env_runners/episodes_this_iteration"] == expected[1]["env_runners/num_episodes"]
    resumed = PPO.from_checkpoint(path)
    try:
        assert _results(resumed, 2) == expected
        assert_states_equal(resumed.metrics.get_state(), expected_states[0])
        assert_states_equal(resumed.env_runner.metrics.get_state(), expected_states[1])
    finally:
        resumed.stop()


def test_a_callbacks_class_must_be_a_callback() -> None:
    with pytest.raises(ValueError, match=r"subclass of cairn\.rl\.callbacks\.callbacks\.RLlibCallback"):
        PPO(small_config(callbacks_class=dict))


def test_a_checkpoint_never_imports_its_callbacks_module(tmp_path: Path) -> None:
    algo = PPO(small_config(callbacks_class=LongEpisodes))
    try:
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    script = (
        "import sys\n"
        "from cairn import UnsafeCheckpointError\n"
        "from cairn.rl import PPO\n"
        "try:\n"
        "    PPO.from_checkpoint(sys.argv[1])\n"
        "except UnsafeCheckpointError as err:\n"
        "    print(err)\n"
        "print('imported' if 'callback_helpers' in sys.modules else 'not imported')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}  # importable, yet never imported
    out = subprocess.run(
        [sys.executable, "-c", script, path], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "callback_helpers:LongEpisodes" in out and "not on cairn's allow-list" in out, out
    assert "cairn.register(callback_helpers.LongEpisodes)" in out, out  # the line that allows it
    assert out.strip().endswith("not imported")
    assert callback_helpers.LongEpisodes is LongEpisodes


def test_on_sample_end_peeks_the_runners_sampling_counters() -> None:
    """RLlib's env runner logs ``num_env_steps_sampled`` before ``on_sample_end`` (issue 25): a callback
    peeks this sample's counts, and ``train()`` reports the iteration's under ``env_runners/``."""
    callback_helpers.SAMPLE_END_PEEKS.clear()
    algo = PPO(small_config(callbacks_class=callback_helpers.PeekSampledSteps))
    steps = 2 * 32  # num_envs_per_env_runner x rollout_length
    results = _results(algo, 2)
    algo.stop()
    assert [(steps, steps), (steps, steps)] == callback_helpers.SAMPLE_END_PEEKS  # one sample each, not a running sum
    for result in results:
        assert result["env_runners/num_env_steps_sampled"] == steps
        assert result["env_runners/num_agent_steps_sampled"] == steps


def test_on_sample_end_counts_agent_steps_of_a_multi_agent_copy_env() -> None:
    """On ``"multi:"`` env copies every agent's action is an agent step."""
    callback_helpers.SAMPLE_END_PEEKS.clear()
    algo = PPO(
        small_config(
            env="multi:CartPole-v1", num_agents=2, callbacks_class=callback_helpers.PeekSampledSteps, rollout_length=8
        )
    )
    algo.train()
    algo.stop()
    assert callback_helpers.SAMPLE_END_PEEKS == [(2 * 8, 2 * 2 * 8)]
