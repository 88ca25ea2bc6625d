"""Connectors: MeanStdFilter statistics, merging, pipelines as checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cairn.errors import IncompatibleCheckpointError
from cairn.rl import ClipActions, ConnectorPipeline, MeanStdFilter
from cairn.testing import CheckpointableContract, assert_states_equal


class TestMeanStdFilterContract(CheckpointableContract):
    def make(self) -> MeanStdFilter:
        return MeanStdFilter(shape=(3,))

    def mutate(self, obj: MeanStdFilter) -> None:  # type: ignore[override]
        obj.update(np.arange(12, dtype=np.float32).reshape(4, 3))


class TestPipelineContract(CheckpointableContract):
    def make(self) -> ConnectorPipeline:
        return ConnectorPipeline(
            [(MeanStdFilter, {"shape": [2], "clip": 5.0}), (ClipActions, {"low": [-1, -1], "high": [1, 1]})]
        )

    def mutate(self, obj: ConnectorPipeline) -> None:  # type: ignore[override]
        rows = np.array([[1.0, 2.0], [3.0, 5.0], [0.0, -4.0]])
        out = obj(rl_module=None, batch={"obs": rows, "actions": rows}, episodes=None, update=True)
        assert out["actions"].max() == 1.0  # each piece its column: the filter "obs", ClipActions "actions"


def normalized(f: MeanStdFilter, rows: np.ndarray, **kwargs: object) -> np.ndarray:
    """``f`` called as a pipeline calls it (RLlib's ConnectorV2 signature); the observations it returns."""
    out: np.ndarray = f(rl_module=None, batch={"obs": rows}, episodes=None, **kwargs)["obs"]
    return out


def test_statistics_match_numpy() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    f = MeanStdFilter(shape=(4,))
    for chunk in np.array_split(data, 7):
        f.update(chunk)
    assert f.count == 1000
    np.testing.assert_allclose(f.mean, data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(f.var, data.var(0), rtol=1e-10)
    out = normalized(f, data[:5], update=False)
    assert out.dtype == np.float32 and f.count == 1000
    np.testing.assert_allclose(out, (data[:5] - data.mean(0)) / (data.std(0) + 1e-8), rtol=1e-5)


def test_clip_and_update_flag() -> None:
    f = MeanStdFilter(shape=(1,), clip=2.0)
    normalized(f, np.array([[0.0], [1.0], [0.0], [1.0]]))
    assert f.count == 4
    assert float(normalized(f, np.array([[100.0]]), update=False)[0, 0]) == 2.0
    assert f.count == 4


def test_merge_states_equals_one_filter_over_all_data() -> None:
    rng = np.random.default_rng(1)
    a_data, b_data = rng.normal(size=(50, 2)), rng.normal(5, 3, size=(70, 2))
    a, b, both = MeanStdFilter(shape=(2,)), MeanStdFilter(shape=(2,)), MeanStdFilter(shape=(2,))
    a.update(a_data)
    b.update(b_data)
    both.update(np.concatenate([a_data, b_data]))
    merged = MeanStdFilter.merge_states([a.get_state(), b.get_state(), MeanStdFilter(shape=(2,)).get_state()])
    assert merged["count"] == 120
    np.testing.assert_allclose(merged["mean"], both.mean, rtol=1e-12)
    np.testing.assert_allclose(merged["m2"], both.m2, rtol=1e-10)


def test_state_types_survive_a_round_trip(tmp_path: Path) -> None:
    f = MeanStdFilter(shape=(3,))
    f.update(np.ones((2, 3)))
    g = MeanStdFilter.from_checkpoint(f.save_to_path(tmp_path / "f"))
    state = g.get_state()
    assert type(state["count"]) is int and state["mean"].dtype == np.float64
    assert_states_equal(state, f.get_state())


def test_shape_mismatch_is_incompatible(tmp_path: Path) -> None:
    path = MeanStdFilter(shape=(3,)).save_to_path(tmp_path / "f")
    with pytest.raises(IncompatibleCheckpointError, match="shape"):
        MeanStdFilter(shape=(4,)).restore_from_path(path)


def test_pipeline_layout_and_errors(tmp_path: Path) -> None:
    pipe = ConnectorPipeline([(MeanStdFilter, {"shape": [2]})])
    path = pipe.save_to_path(tmp_path / "p")
    assert (Path(path) / "MeanStdFilter" / "metadata.json").is_file()
    assert isinstance(pipe["MeanStdFilter"], MeanStdFilter) and len(pipe) == 1
    with pytest.raises(ValueError, match="already has"):
        pipe.append(MeanStdFilter(shape=(2,)))
    clipped = ClipActions(low=[-1.0], high=[1.0])(
        rl_module=None, batch={"actions": np.array([[3.0], [-0.5]])}, episodes=None
    )
    np.testing.assert_array_equal(clipped["actions"], [[1.0], [-0.5]])
