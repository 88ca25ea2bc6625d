"""Merging connector statistics across env runners (no Ray needed): deltas, by name, counted once."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.rl import ClipActions, ConnectorPipeline, EnvRunner, MeanStdFilter
from cairn.testing import assert_states_equal


def pipeline() -> ConnectorPipeline:
    """A stateless connector first, then the filter (RLlib lost filter states in this order)."""
    return ConnectorPipeline([(ClipActions, {"low": [-5.0] * 3, "high": [5.0] * 3}), (MeanStdFilter, {"shape": [3]})])


def feed(pipe: ConnectorPipeline, rows: np.ndarray) -> None:
    """Run ``rows`` through ``pipe`` as a runner does (ClipActions clips the actions, the filter sees the obs)."""
    pipe(rl_module=None, batch={"obs": rows, "actions": rows}, episodes=None)


def test_merged_statistics_equal_one_filter_that_saw_all_data() -> None:
    rng = np.random.default_rng(1)
    base = pipeline()
    runners = [pipeline() for _ in range(3)]
    reference = MeanStdFilter(shape=[3])
    for _ in range(2):  # two rounds: sample, report, merge, spread
        for runner in runners:
            data = rng.normal(2.0, 3.0, size=(int(rng.integers(5, 40)), 3))
            feed(runner, data)
            reference.update(data)
        for runner in runners:
            base.merge_deltas(runner.pop_deltas())
        for runner in runners:
            runner.set_synced_states(base.get_state())
        merged = base["MeanStdFilter"].get_state()
        assert merged["count"] == reference.count
        np.testing.assert_allclose(merged["mean"], reference.mean, rtol=1e-12)
        np.testing.assert_allclose(merged["m2"], reference.m2, rtol=1e-10)
        for runner in runners:
            assert_states_equal(runner.get_state(), base.get_state())


def test_data_seen_after_a_report_survives_the_spread_and_is_reported_next() -> None:
    base, runner = pipeline(), pipeline()
    feed(runner, np.ones((4, 3)))
    base.merge_deltas(runner.pop_deltas())
    feed(runner, np.full((6, 3), 3.0))  # not yet reported when the merged state comes back
    runner.set_synced_states(base.get_state())
    assert runner["MeanStdFilter"].count == 10
    base.merge_deltas(runner.pop_deltas())
    assert base["MeanStdFilter"].count == 10
    assert_states_equal(runner["MeanStdFilter"].get_state(), base["MeanStdFilter"].get_state())


def test_a_restored_state_forgets_unreported_data() -> None:
    runner = pipeline()
    feed(runner, np.ones((4, 3)))
    runner.set_state({"MeanStdFilter": {"count": 0, "mean": np.zeros(3), "m2": np.zeros(3)}})
    assert runner.pop_deltas()["MeanStdFilter"]["count"] == 0


def test_a_delta_for_an_unknown_connector_is_refused() -> None:
    with pytest.raises(ValueError, match="does not have"):
        pipeline().merge_deltas({"OtherFilter": {"count": 1, "mean": np.zeros(3), "m2": np.zeros(3)}})


def test_a_runner_that_keeps_group_totals_absorbs_reports(tmp_path: object) -> None:
    from dist_helpers import small_config

    config = small_config()
    totals = EnvRunner(config, worker_index=0)
    runners = [EnvRunner(config, worker_index=i) for i in (1, 2)]
    reports = []
    for runner in runners:
        runner.sample_batches()
        reports.append(runner.sample_report())
    totals.begin_group_iteration()
    for report in reports:
        totals.absorb_sample_report(report)
    assert totals.num_env_steps_sampled_lifetime == sum(r.num_env_steps_sampled_lifetime for r in runners)
    assert totals.num_episodes_lifetime == sum(r.num_episodes_lifetime for r in runners)
    merged = MeanStdFilter.merge_states([r.env_to_module["MeanStdFilter"].get_state() for r in runners])
    got = totals.env_to_module["MeanStdFilter"].get_state()
    assert got["count"] == merged["count"]
    np.testing.assert_allclose(got["mean"], merged["mean"], rtol=1e-12)
