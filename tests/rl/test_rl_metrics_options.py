"""MetricsLogger options RLlib's examples use (issue 28 item 5), with RLlib's semantics, restored exactly."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rl_helpers import small_config

from cairn.errors import IncompatibleCheckpointError
from cairn.rl import PPO
from cairn.rl.utils.metrics.metrics_logger import DEFAULT_PERCENTILES, MetricsLogger
from cairn.rl.utils.metrics.stats import LifetimeSumStats
from cairn.testing import assert_states_equal
from episode_callbacks_helpers import EveryMetricOption

TINY = {"rollout_length": 24, "minibatch_size": 24, "num_epochs": 1, "model_config": {"hidden_sizes": [8]}}
VALUES = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0, 6.0]


def _pct(values: list[float], percentiles: Any) -> dict[int, float]:
    """numpy's (linear) percentiles, as a dict percentile -> value."""
    return dict(zip(percentiles, np.percentile(values, percentiles), strict=True))


def test_item_series_keeps_a_list_windowed_and_per_cycle() -> None:
    m = MetricsLogger()
    for v in VALUES:
        m.log_value("all", v, reduce="item_series")
        m.log_value("last3", v, reduce="item_series", window=3)
        m.log_value("last", v, reduce="item")
    assert m.peek("all") == VALUES and m.peek("last3") == VALUES[-3:] and m.peek("last") == VALUES[-1]
    assert m.reduce(compile=True) == {"all": VALUES, "last3": VALUES[-3:], "last": VALUES[-1]}
    assert m.peek("last") is None and m.peek("last3", compile=False) == []  # a new cycle
    m.log_value("all", 7)
    assert m.reduce(compile=True)["all"] == [7]


def test_percentiles_are_numpys_linear_percentiles_of_the_window() -> None:
    m = MetricsLogger()
    for v in VALUES:
        m.log_value("p", v, reduce="percentiles", window=5)
        m.log_value("q", v, reduce="percentiles", percentiles=[10, 50, 90])
    window = VALUES[-5:]
    assert list(m.peek("p")) == list(DEFAULT_PERCENTILES) == [0, 50, 75, 90, 95, 99, 100]
    assert m.peek("p") == pytest.approx(_pct(window, DEFAULT_PERCENTILES))
    assert m.peek("q") == pytest.approx(_pct(VALUES, [10, 50, 90]))
    assert MetricsLogger().peek("x", default=None) is None
    m.reduce()
    assert m.peek("q") == {10: None, 50: None, 90: None}  # RLlib reports None when there is no value
    with pytest.raises(ValueError, match="NaN"):
        m.log_value("q", float("nan"))


def test_ema_coeff_window_and_log_time() -> None:
    m = MetricsLogger()
    for v in VALUES:
        m.log_value("ema", v, ema_coeff=0.3)
    expected = VALUES[0]
    for v in VALUES[1:]:
        expected = 0.7 * expected + 0.3 * v
    assert m.peek("ema") == expected
    with m.log_time("t"):
        time.sleep(0.001)
    with m.log_time("t"):
        pass
    with m.log_time("t_max", reduce="max", window=2):
        pass
    stats = {tuple(r["key"]): r["state"] for r in m.get_state()["stats"]}
    assert stats[("t",)]["stats_cls_identifier"] == "ema" and stats[("t",)]["ema_coeff"] == 0.01
    assert m.peek("t") > 0 and stats[("t_max",)]["window"] == 2 and len(stats[("t_max",)]["values"]) == 1


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"reduce": "mean", "percentiles": [50]}, "percentiles apply only to reduce='percentiles'"),
        ({"reduce": "percentiles", "percentiles": [50, 101]}, "list of numbers in \\[0, 100\\]"),
        ({"reduce": "percentiles", "percentiles": "median"}, "list of numbers"),
        ({"reduce": "sum", "ema_coeff": 0.1}, "ema_coeff"),
        ({"reduce": "mean", "ema_coeff": 0.1}, "ema_coeff"),
        ({"window": 3, "ema_coeff": 0.1}, "ema_coeff"),
        ({"reduce": "ema", "window": 3}, "an EMA has no window"),
        ({"reduce": "ema", "ema_coeff": 1.5}, "ema_coeff must be a number in"),
        ({"reduce": "item_series", "window": 0}, "window must be None or an int"),
        ({"reduce": "median"}, "invalid reduce method"),
        ({"reduce": "max", "with_throughput": True}, "with_throughput"),
    ],
)
def test_settings_rllib_refuses_are_refused_before_anything_is_logged(settings: dict[str, Any], match: str) -> None:
    m = MetricsLogger()
    with pytest.raises(ValueError, match=match):
        m.log_value("x", 1.0, **settings)
    with pytest.raises(ValueError, match=match), m.log_time("y", **settings):
        pass
    assert m.get_state()["stats"] == []


def test_a_key_keeps_its_percentile_settings() -> None:
    m = MetricsLogger()
    m.log_value("x", 1, reduce="percentiles", window=4, percentiles=[50])
    m.log_value("x", 2)  # no settings: the recorded ones
    with pytest.raises(ValueError, match="was first logged as PercentilesStats"):
        m.log_value("x", 3, reduce="percentiles", window=5)
    assert m.peek("x") == {50: 1.5}


def test_aggregating_runner_deltas_merges_each_kind_as_rllib_does() -> None:
    runners = [MetricsLogger(), MetricsLogger()]
    for i, runner in enumerate(runners):
        for v in VALUES[i * 4 : i * 4 + 4]:
            runner.log_value("list", v, reduce="item_series")
            runner.log_value("pct", v, reduce="percentiles", window=3, percentiles=[0, 50, 100])
            runner.log_value("ema", v, ema_coeff=0.5)
            runner.log_value("mean", v, reduce="mean")
            runner.log_value("sum", v, reduce="sum")
            runner.log_value("lifetime", v, reduce="lifetime_sum")
            runner.log_value("max", v, reduce="max")
    algo = MetricsLogger(root=True)
    algo.aggregate([r.pop_deltas() for r in runners], key="env_runners")
    assert algo.peek("env_runners/list") == VALUES  # lists concatenated in runner order
    # Percentiles of both windows together; means and EMAs: the mean of the runners' values.
    assert algo.peek("env_runners/pct") == pytest.approx(_pct(VALUES[1:4] + VALUES[5:8], [0, 50, 100]))
    halves = [VALUES[:4], VALUES[4:]]
    assert algo.peek("env_runners/mean") == pytest.approx(np.mean([np.mean(h) for h in halves]))
    emas = []
    for half in halves:
        direct = MetricsLogger()
        for v in half:
            direct.log_value("ema", v, ema_coeff=0.5)
        emas.append(direct.peek("ema"))
    assert algo.peek("env_runners/ema") == pytest.approx(np.mean(emas))
    assert algo.peek("env_runners/sum") == sum(VALUES) == algo.peek("env_runners/lifetime")
    assert algo.peek("env_runners/max") == max(VALUES)
    algo.reduce()
    algo.aggregate([r.pop_deltas() for r in runners], key="env_runners")
    assert algo.peek("env_runners/lifetime") == sum(VALUES)  # each runner's increment counted once
    assert np.isnan(algo.peek("env_runners/sum")) and algo.peek("env_runners/list", compile=False) == []


def test_state_round_trip_and_old_records() -> None:
    m = MetricsLogger()
    for v in VALUES:
        m.log_value("pct", v, reduce="percentiles", window=3)
        m.log_value("lst", v, reduce="item_series")
    state = m.get_state()
    restored = MetricsLogger()
    restored.set_state(state)
    assert_states_equal(restored.get_state(), state)
    assert restored.peek("pct") == m.peek("pct") and restored.peek("lst") == VALUES
    # cairn's earlier logger: a kept sum is a lifetime sum (a leaf keeps what it had not handed over yet).
    record = {"key": ["s"], "reduce": "sum", "window": None, "ema_coeff": None, "clear_on_reduce": False}
    old = {"stats": [{**record, "values": [3]}], "deltas": [{**record, "values": [2]}]}
    root = MetricsLogger(root=True)
    root.set_state(old)
    restored.set_state(old)
    assert root.peek("s") == 3 and restored.peek("s") == 2
    assert isinstance(root.stats["s"], LifetimeSumStats)
    ema = {"key": ["e"], "reduce": "mean", "window": None, "ema_coeff": 0.5, "clear_on_reduce": False, "values": [4.0]}
    lst = {"key": ["l"], "reduce": None, "window": 2, "ema_coeff": None, "clear_on_reduce": False, "values": [1, 2]}
    pct = {**lst, "key": ["p"], "percentiles": [50]}
    root.set_state({"stats": [ema, lst, pct], "deltas": []})
    assert (root.peek("e"), root.peek("l"), root.peek("p")) == (4.0, [1, 2], {50: 1.5})
    # A leaf (an env runner) keeps only what it had not handed over: the values of its pending deltas.
    restored.set_state({"stats": [ema, lst], "deltas": [{**lst, "values": [2]}]})
    assert np.isnan(restored.peek("e")) and restored.peek("l") == [2]
    bad = {"stats": [{**old["stats"][0], "reduce": None, "percentiles": [500]}]}
    with pytest.raises(IncompatibleCheckpointError, match=r"stats\[0\] is not a metric record"):
        restored.set_state(bad)


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    # perf/ and the log_time timers are wall-clock measurements: the rest must be equal bit for bit.
    return [{k: v for k, v in algo.train().flatten(wall_clock=False).items() if "timers/" not in k} for _ in range(n)]


def test_every_option_continues_exactly_from_a_checkpoint(tmp_path: Path) -> None:
    straight = PPO(small_config(**TINY, callbacks_class=EveryMetricOption))
    try:
        first = _results(straight, 2)
        path = straight.save_to_path(tmp_path / "mid")
        saved = (straight.metrics.get_state(), straight.env_runner.metrics.get_state())
        expected = _results(straight, 2)
    finally:
        straight.stop()
    last = first[-1]
    assert isinstance(last["env_runners/returns_list"], list) and last["env_runners/returns_list"]
    assert set(last) >= {f"env_runners/returns_pct/{p}" for p in DEFAULT_PERCENTILES} | {"algo_list", "algo_ema"}
    assert last["algo_list"] == 1  # on_train_result logs after the result was reduced (as in RLlib)
    resumed = PPO.from_checkpoint(path)
    try:
        # Every statistic (windows, lists, EMAs, percentiles, timers) is back as it was saved.
        assert_states_equal(resumed.metrics.get_state(), saved[0])
        assert_states_equal(resumed.env_runner.metrics.get_state(), saved[1])
        assert _results(resumed, 2) == expected
    finally:
        resumed.stop()
