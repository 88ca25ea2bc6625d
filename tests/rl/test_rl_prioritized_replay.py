"""Prioritized replay: proportional sampling, importance weights, priorities checkpointed in pages, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn import CorruptCheckpointError, IncompatibleCheckpointError
from cairn.rl.utils.replay_buffers import PrioritizedMultiAgentReplayBuffer, PrioritizedReplayBuffer
from pack_helpers import tensor_file

COLUMNS: dict[str, tuple[tuple[int, ...], str]] = {"obs": ((4,), "float32"), "actions": ((), "int64")}
CAPACITY, CHUNK, PAGE = 4096, 256, 256


def rows(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 4)).astype(np.float32), "actions": rng.integers(0, 2, n)}


def make(seed: int = 0, **kw: Any) -> PrioritizedReplayBuffer:
    opts: dict[str, Any] = {"chunk_rows": CHUNK, "priority_page_rows": PAGE, "seed": seed} | kw
    return PrioritizedReplayBuffer(opts.pop("capacity", CAPACITY), COLUMNS, **opts)


def digest(batch: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode() + np.ascontiguousarray(batch[name]).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_sampling_is_proportional_to_priorities(alpha: float) -> None:
    buf = make(capacity=8, chunk_rows=8, priority_page_rows=8, alpha=alpha, epsilon=0.0, seed=1)
    buf.add(rows(8, 0))
    priorities = np.arange(1.0, 9.0)
    buf.update_priorities(np.arange(8), priorities)
    draws = 200_000
    counts = np.bincount(buf.sample(draws)["batch_indexes"], minlength=8)
    expected = priorities**alpha / (priorities**alpha).sum()
    # Seeded, so the same counts every run; and 6 standard deviations of a binomial would hold
    # for any seed (about 1 run in 10^8 fails), so the tolerance is not tuned to this seed.
    sigma = np.sqrt(expected * (1 - expected) / draws)
    np.testing.assert_array_less(np.abs(counts / draws - expected), 6 * sigma)
    # The proportions differ from uniform by far more than the tolerance: the test can fail.
    assert np.abs(expected - 1 / 8).max() > 20 * sigma.max()


def test_importance_weights_follow_the_formula() -> None:
    buf = make(capacity=16, chunk_rows=16, priority_page_rows=16, alpha=0.6, beta=0.4, epsilon=0.01, seed=2)
    buf.add(rows(10, 0))
    td = np.linspace(0.0, 3.0, 10)
    buf.update_priorities(np.arange(10), td)
    batch = buf.sample(500)
    p = (np.abs(td) + 0.01) ** 0.6
    prob = p / p.sum()
    weights = (10 * prob) ** -0.4
    expected = weights / weights.max()
    np.testing.assert_allclose(batch["weights"], expected[batch["batch_indexes"]].astype(np.float32), rtol=1e-6)
    assert batch["weights"].dtype == np.float32 and batch["weights"].max() <= 1.0
    # The row of the smallest priority (row 0) has weight 1; beta=0 corrects nothing.
    assert buf.sample(200, beta=0.0)["weights"].tolist() == [1.0] * 200
    np.testing.assert_allclose(expected[0], 1.0)


def test_priorities_update_and_new_rows_get_the_largest_so_far() -> None:
    buf = make(capacity=64, chunk_rows=16, priority_page_rows=16, alpha=0.5, epsilon=0.0)
    buf.add(rows(10, 0))
    np.testing.assert_array_equal(buf.priorities[:10], np.ones(10))  # max priority starts at 1
    buf.update_priorities(np.array([2, 3, 2]), np.array([4.0, -9.0, 16.0]))  # row 2 twice: the last counts
    np.testing.assert_allclose(buf.priorities[[2, 3]], [4.0, 3.0])  # (|td|)^0.5
    assert buf.max_priority == 16.0
    buf.add(rows(5, 1))
    np.testing.assert_allclose(buf.priorities[10:15], [4.0] * 5)  # 16^0.5
    assert (buf.priorities[15:] == 0).all()
    np.testing.assert_allclose(buf._trees.total, buf.priorities.sum())
    with pytest.raises(ValueError, match="NaN or infinite"):
        buf.update_priorities(np.array([1]), np.array([np.nan]))
    with pytest.raises(ValueError, match=r"rows held \(0..14\)"):
        buf.update_priorities(np.array([15]), np.array([1.0]))
    with pytest.raises(ValueError, match="same length"):
        buf.update_priorities(np.array([1, 2]), np.array([1.0]))
    with pytest.raises(ValueError, match="names sample"):
        PrioritizedReplayBuffer(8, {"weights": ((), "float32")})


# ----------------------------------------------------------------------------- checkpoints


def _inode(step: str, folder: str) -> int:
    return tensor_file(os.path.join(step, folder)).stat().st_ino


def test_a_save_writes_only_the_new_chunks_and_the_changed_priority_pages(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(1000, 0))  # chunks and pages 0..3
    chunks = buf.get_state()["chunks"]
    pages = buf.get_state()["priority_pages"]
    assert len(chunks) == len(pages) == 4
    with cairn.CheckpointManager(tmp_path / "run", keep_last=4) as mgr:
        first = mgr.save(buf, 1)
        # 200 of page 0's 256 rows change (at least an eighth): the save writes page 0 again.
        buf.update_priorities(np.arange(0, 200), np.full(200, 2.0))
        second = mgr.save(buf, 2)
        assert [p for p in pages if _inode(second, p) != _inode(first, p)] == pages[:1]
        assert all(_inode(second, c) == _inode(first, c) for c in chunks)
        # 10 rows of page 1 change: no page is written, the rows go into the buffer's overlay.
        buf.update_priorities(np.arange(300, 310), np.full(10, 3.0))
        third = mgr.save(buf, 3)
        assert all(_inode(third, p) == _inode(second, p) for p in pages)
        assert mgr.last_stats is not None and mgr.last_stats.bytes_written < 8 * len(buf)  # < all priorities
        assert buf.get_state()["priority_overlay_rows"].tolist() == list(range(300, 310))
        # 300 new rows (1000..1299): chunks 3..5 change; page 4 (all new) is written, the new rows of
        # pages 3 and 5 join the overlay (page 5 is written once, as its base of zeros).
        buf.add(rows(300, 1))
        fourth = mgr.save(buf, 4)
        chunks, pages = buf.get_state()["chunks"], buf.get_state()["priority_pages"]
        assert [c for c in chunks[:4] if _inode(fourth, c) != _inode(third, c)] == chunks[3:4]
        assert all(_inode(fourth, p) == _inode(third, p) for p in pages[:4])
        assert len(chunks) == len(pages) == 6
        overlay = buf.get_state()["priority_overlay_rows"].tolist()
        assert overlay == [*range(300, 310), *range(1000, 1024), *range(1280, 1300)]
    back = PrioritizedReplayBuffer.from_checkpoint(fourth)
    np.testing.assert_array_equal(back._trees.sum, buf._trees.sum)
    np.testing.assert_array_equal(back._trees.min, buf._trees.min)
    assert digest(back.sample(64)) == digest(buf.sample(64))
    # A restore in place over a fuller buffer: its rows past 1300 are gone from the trees too.
    live = make(seed=8)
    live.add(rows(2000, 2))
    live.restore_from_path(fourth)
    np.testing.assert_array_equal(live._trees.sum, buf._trees.sum)
    np.testing.assert_array_equal(live._trees.min, buf._trees.min)


RESUME = r"""
import hashlib, json, sys
import numpy as np
from cairn.rl.utils.replay_buffers import PrioritizedReplayBuffer

def digest(batch):
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode() + np.ascontiguousarray(batch[name]).tobytes())
    return h.hexdigest()

buf = PrioritizedReplayBuffer.from_checkpoint(sys.argv[1])
out = []
for step in range(5):
    batch = buf.sample(32)
    out.append(digest(batch))
    buf.update_priorities(batch["batch_indexes"], np.sin(batch["batch_indexes"] * (step + 1.0)))
out.append(hashlib.sha256(buf._trees.sum.tobytes() + buf._trees.min.tobytes()).hexdigest())
print(json.dumps(out))
"""


def test_resume_in_a_new_process_samples_and_updates_bit_for_bit(tmp_path: Path) -> None:
    buf = make(seed=5)
    buf.add(rows(3000, 0))
    batch = buf.sample(300)
    buf.update_priorities(batch["batch_indexes"], batch["obs"][:, 0])
    path = buf.save_to_path(tmp_path / "ck")
    expected = []
    for step in range(5):
        batch = buf.sample(32)
        expected.append(digest(batch))
        buf.update_priorities(batch["batch_indexes"], np.sin(batch["batch_indexes"] * (step + 1.0)))
    import hashlib as _h

    expected.append(_h.sha256(buf._trees.sum.tobytes() + buf._trees.min.tobytes()).hexdigest())
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", RESUME, path], check=True, env=env, capture_output=True, text=True, timeout=120
    )
    assert json.loads(done.stdout) == expected


def test_multi_agent_buffers_keep_priorities_per_module(tmp_path: Path) -> None:
    multi = PrioritizedMultiAgentReplayBuffer(
        512, {"p0": COLUMNS, "p1": COLUMNS}, chunk_rows=128, priority_page_rows=128, alpha=0.7, seed=3
    )
    multi.add({"p0": rows(300, 0), "p1": rows(50, 1)})
    batch = multi.sample(16)
    multi.update_priorities("p0", batch["p0"]["batch_indexes"], np.full(16, 5.0))
    assert multi["p0"].max_priority == pytest.approx(5.0) and multi["p1"].max_priority == 1.0
    path = multi.save_to_path(tmp_path / "multi")
    assert sorted(p for p in os.listdir(os.path.join(path, "p0")) if p.startswith("priorities_")) == [
        n for n in multi["p0"].get_state()["priority_pages"]
    ]
    back = PrioritizedMultiAgentReplayBuffer.from_checkpoint(path)
    assert (back["p0"].alpha, back["p1"].priority_page_rows) == (0.7, 128)
    for module_id in ("p0", "p1"):
        np.testing.assert_array_equal(back[module_id].priorities, multi[module_id].priorities)
    assert digest(back.sample(8)["p0"]) == digest(multi.sample(8)["p0"])


# ----------------------------------------------------------------------------- hostile checkpoints


def _crafted(buf: PrioritizedReplayBuffer, tmp_path: Path, name: str, change: Any) -> str:
    """A checkpoint whose checksums all pass but whose priorities say something else."""
    state = buf.get_state()
    state = {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}
    for key, value in state.items():
        if key.startswith("priorities_"):
            value["priorities"] = value["priorities"].copy()
    change(state)
    return buf.save_to_path(tmp_path / name, state=state)


def _page(state: dict[str, Any], k: int) -> dict[str, Any]:
    page: dict[str, Any] = state[state["priority_pages"][k]]
    return page


def _overlay(state: dict[str, Any], rows: Any, values: Any) -> None:
    state["priority_overlay_rows"], state["priority_overlay_values"] = rows, values


def _set(page: dict[str, Any], row: int, value: float) -> None:
    page["priorities"][row] = value
    page["sum"] = float(page["priorities"].sum())  # the page holds together: only the value is bad


HOSTILE: list[tuple[str, Any, type[Exception], str]] = [
    (
        "short_page",
        lambda s: _page(s, 1).update(priorities=_page(s, 1)["priorities"][:100]),
        CorruptCheckpointError,
        r"not float64 \(256,\)",
    ),
    ("negative", lambda s: _set(_page(s, 0), 3, -1.0), CorruptCheckpointError, "negative, NaN or infinite"),
    ("nan", lambda s: _set(_page(s, 2), 7, float("nan")), CorruptCheckpointError, "negative, NaN or infinite"),
    (
        "page_sum",
        lambda s: _page(s, 1).update(sum=_page(s, 1)["sum"] + 1.0),
        CorruptCheckpointError,
        "the priority tree does not sum",
    ),
    (
        "tree_sum",
        lambda s: s.update(priority_sums=[x * 2 for x in s["priority_sums"]]),
        CorruptCheckpointError,
        "the tree does not sum",
    ),
    ("past_size", lambda s: _set(_page(s, 3), 255, 1.0), CorruptCheckpointError, "rows past the 1000 held"),
    ("held_zero", lambda s: _set(_page(s, 0), 5, 0.0), CorruptCheckpointError, "held but has priority 0"),
    ("page_gone", lambda s: s.pop(s["priority_pages"][2]), CorruptCheckpointError, "are not in it"),
    ("max_nan", lambda s: s.update(max_priority=float("nan")), CorruptCheckpointError, "largest priority"),
    ("alpha", lambda s: s.update(alpha=0.9), IncompatibleCheckpointError, "alpha=0.9"),
    (
        "overlay_past_size",
        lambda s: _overlay(s, np.array([5, 1000]), np.array([1.0, 1.0])),
        CorruptCheckpointError,
        r"overlay rows are not increasing rows held \(0..999\)",
    ),
    (
        "overlay_unsorted",
        lambda s: _overlay(s, np.array([9, 5]), np.array([1.0, 1.0])),
        CorruptCheckpointError,
        "not increasing",
    ),
    (
        "overlay_nan",
        lambda s: _overlay(s, np.array([5]), np.array([np.nan])),
        CorruptCheckpointError,
        "not finite and > 0",
    ),
    (
        "overlay_lengths",
        lambda s: _overlay(s, np.array([5, 6]), np.array([1.0])),
        CorruptCheckpointError,
        "of one length",
    ),
]


@pytest.mark.parametrize(("name", "change", "error", "match"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_priorities_are_refused_and_nothing_changes(
    tmp_path: Path, name: str, change: Any, error: type[Exception], match: str
) -> None:
    buf = make()
    buf.add(rows(1000, 0))
    buf.get_state()  # the pages' bases: the rows as added
    # Few changes (an overlay of rows 100..109), and rows 700..799 of page 2 changed enough to rewrite it.
    buf.update_priorities(np.r_[100:110, 700:800], np.linspace(0.5, 2.0, 110))
    assert buf.get_state()["priority_overlay_rows"].tolist() == list(range(100, 110))
    path = _crafted(buf, tmp_path, name, change)
    live = make(seed=9)
    live.add(rows(700, 3))
    live.update_priorities(np.arange(50), np.full(50, 3.0))
    before = (live._trees.sum.copy(), live.columns["obs"].copy(), len(live), live.max_priority)
    with pytest.raises(error, match=match):
        live.restore_from_path(path)
    np.testing.assert_array_equal(live._trees.sum, before[0])
    np.testing.assert_array_equal(live.columns["obs"], before[1])
    assert (len(live), live.max_priority) == before[2:]
    with pytest.raises(error, match=match):
        PrioritizedReplayBuffer.from_checkpoint(path)


def test_a_page_restored_alone_never_makes_rows_past_the_buffer_drawable(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(600, 0))
    path = buf.save_to_path(tmp_path / "ck")
    page = buf.get_state()["priority_pages"][1]  # rows 256..511
    live = make(seed=2)
    live.add(rows(300, 1))
    live.restore_from_path(os.path.join(path, page), component=page)
    assert (live.priorities[300:] == 0).all() and (live.priorities[:300] > 0).all()
    assert live.sample(2_000)["batch_indexes"].max() < 300
    np.testing.assert_allclose(live._trees.total, live.priorities.sum())


def test_segment_trees_refuse_bad_capacities_and_states_and_agree_with_the_buffer_trees() -> None:
    """RLlib's segment-tree API (cairn.rl.execution): power-of-two bound, state shape, one arithmetic."""
    from cairn.rl.execution.segment_tree import MinSegmentTree, SegmentTree, SumSegmentTree
    from cairn.rl.utils.replay_buffers.priority_trees import PriorityTrees

    for bad in (0, -4, 3, 6, 1000):
        with pytest.raises(ValueError, match="positive power of two"):
            SumSegmentTree(bad)
    with pytest.raises(TypeError, match="must be an int"):
        MinSegmentTree(4.0)  # type: ignore[arg-type]
    tree = SumSegmentTree(8)
    with pytest.raises(IndexError, match="outside"):
        tree[8] = 1.0
    with pytest.raises(ValueError, match="outside"):
        tree.find_prefixsum_idx(1.0)  # the tree's sum is 0
    with pytest.raises(ValueError, match="expected \\(16,\\)"):
        tree.set_state(np.zeros(8))
    assert MinSegmentTree(4).min() == float("inf")  # RLlib's neutral element: an empty min tree is inf
    # The buffer's trees and RLlib's API over the same leaves are the same nodes, bit for bit.
    leaves = np.random.default_rng(3).random(8) * (np.arange(8) % 3 != 0)
    trees = PriorityTrees(8)
    trees.leaves[:] = leaves
    trees.refresh(np.arange(8))
    for i, v in enumerate(leaves):
        tree[i] = v
    assert tree.get_state().tobytes() == trees.sum.tobytes()
    again = SumSegmentTree(8)
    again.set_state(tree.get_state())
    assert again.sum(2, -1) == tree.sum(2, 7) == float(np.sum(leaves[2:7]))
    assert isinstance(trees._min_tree, SegmentTree) and trees.smallest == float(leaves[leaves > 0].min())
