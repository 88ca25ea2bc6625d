"""The replay buffer component: a ring of chunked columns that checkpoints incrementally and exactly."""

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
from cairn.rl.utils.replay_buffers import MultiAgentReplayBuffer, ReplayBuffer, ReplayBufferChunk

# Atari-like rows at a small size: 16x16 uint8 frames; 4096 rows in 16 chunks of 256 (~1.1 MB).
COLUMNS: dict[str, tuple[tuple[int, ...], str]] = {
    "obs": ((16, 16), "uint8"),
    "actions": ((), "int64"),
    "rewards": ((), "float32"),
    "terminateds": ((), "bool"),
}
CAPACITY, CHUNK = 4096, 256


def rows(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.integers(0, 256, (n, 16, 16), dtype=np.uint8),
        "actions": rng.integers(0, 6, n),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "terminateds": rng.random(n) < 0.05,
    }


def make(seed: int = 0, **kw: Any) -> ReplayBuffer:
    opts: dict[str, Any] = {"chunk_rows": CHUNK, "seed": seed} | kw
    capacity = opts.pop("capacity", CAPACITY)
    return ReplayBuffer(capacity, opts.pop("columns", COLUMNS), **opts)


def digest(batch: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode() + batch[name].tobytes())
    return h.hexdigest()


def assert_same(a: ReplayBuffer, b: ReplayBuffer) -> None:
    assert (len(a), a.cursor, a.added_lifetime, a.sampled_lifetime) == (
        len(b),
        b.cursor,
        b.added_lifetime,
        b.sampled_lifetime,
    )
    for name in COLUMNS:
        np.testing.assert_array_equal(a.columns[name], b.columns[name])
    assert a.rng.bit_generator.state == b.rng.bit_generator.state


# ----------------------------------------------------------------------------- the ring


def test_add_wraps_around_and_sample_is_seeded() -> None:
    buf = make(capacity=1000, chunk_rows=100)
    buf.add(rows(700, 1))
    assert (len(buf), buf.cursor) == (700, 700)
    new = rows(500, 2)
    buf.add(new)
    assert (len(buf), buf.cursor, buf.added_lifetime) == (1000, 200, 1200)
    np.testing.assert_array_equal(buf.columns["obs"][700:], new["obs"][:300])
    np.testing.assert_array_equal(buf.columns["obs"][:200], new["obs"][300:])
    # A batch larger than the buffer keeps its newest rows, in ring order.
    big = rows(2500, 3)
    buf.add(big)
    assert buf.cursor == (200 + 2500) % 1000
    np.testing.assert_array_equal(np.roll(buf.columns["actions"], -buf.cursor), big["actions"][-1000:])
    a, b = make(seed=5), make(seed=5)
    a.add(rows(300, 4))
    b.add(rows(300, 4))
    assert digest(a.sample(64)) == digest(b.sample(64))
    assert a.sampled_lifetime == 64


def test_add_and_sample_refuse_what_does_not_fit() -> None:
    buf = make()
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    with pytest.raises(ValueError, match="missing columns \\['terminateds'\\]"):
        buf.add({k: v for k, v in rows(3, 0).items() if k != "terminateds"})
    bad = rows(3, 0) | {"obs": np.zeros((3, 8, 8), np.uint8)}
    with pytest.raises(ValueError, match="'obs' has shape \\(3, 8, 8\\)"):
        buf.add(bad)
    with pytest.raises(ValueError, match="'actions'"):
        buf.add(rows(3, 0) | {"actions": np.zeros(3, np.float64)})  # float into int64: not the same kind
    with pytest.raises(ValueError, match="chunk_rows"):
        make(chunk_rows=CAPACITY + 1)
    assert len(buf) == 0


def test_default_chunks_are_about_sixteen_megabytes() -> None:
    frames = ReplayBuffer(100_000, {"obs": ((84, 84), "uint8")})
    assert frames.chunk_rows == 2048  # 2048 frames of 7 KB: 14.5 MB, the power of two below 16 MB
    tiny = ReplayBuffer(1000, {"obs": ((4,), "float32")})
    assert tiny.chunk_rows == 1000  # never more than the capacity


# ----------------------------------------------------------------------------- checkpoints


def test_round_trip_reads_into_the_live_arrays_and_continues_exactly(tmp_path: Path) -> None:
    buf = make(seed=1)
    buf.add(rows(CAPACITY + 1000, 0))  # wrapped
    buf.sample(32)
    path = buf.save_to_path(tmp_path / "ckpt")
    # Only chunks holding rows are folders; their names carry the layout.
    assert len([n for n in os.listdir(path) if n.startswith("chunk_")]) == CAPACITY // CHUNK

    other = make(seed=99)
    other.add(rows(10, 7))
    obs = other.columns["obs"]
    other.restore_from_path(path)
    assert other.columns["obs"] is obs  # restored in place, not replaced
    assert_same(buf, other)

    built = ReplayBuffer.from_checkpoint(path)
    assert_same(buf, built)
    want = digest(buf.sample(50))
    assert digest(other.sample(50)) == want
    assert digest(built.sample(50)) == want


def test_partially_filled_buffer_saves_only_its_chunks(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(300, 0))  # two chunks of 256 rows
    path = buf.save_to_path(tmp_path / "ckpt")
    assert sorted(n.split(".")[0] for n in os.listdir(path) if n.startswith("chunk_")) == [
        "chunk_00000",
        "chunk_00001",
    ]
    again = ReplayBuffer.from_checkpoint(path)
    assert_same(buf, again)
    empty = make()
    assert len(ReplayBuffer.from_checkpoint(empty.save_to_path(tmp_path / "empty"))) == 0


def _tensor_inode(step: str, chunk: str) -> int:
    return os.stat(os.path.join(step, chunk, "tensors.safetensors")).st_ino


@pytest.mark.loose_files
def test_manager_save_writes_only_the_changed_chunks(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(CAPACITY, 0))
    names = [name for name, _ in buf.get_checkpointable_components()]
    with cairn.CheckpointManager(tmp_path / "run", keep_last=2) as mgr:
        first = mgr.save(buf, 1)
        # 5% new rows into a full ring: they overwrite rows 0..203, all in chunk 0.
        buf.add(rows(CAPACITY // 20, 1))
        second = mgr.save(buf, 2)
        stats = mgr.last_stats
        assert stats is not None
        assert stats.bytes_written <= 0.10 * buf.nbytes, stats
        assert stats.bytes_linked >= 0.90 * buf.nbytes, stats
        assert _tensor_inode(second, names[0]) != _tensor_inode(first, names[0])
        assert all(_tensor_inode(second, n) == _tensor_inode(first, n) for n in names[1:])
        # 300 more rows from row 204: chunks 0 and 1 change (row 504 is in chunk 1), the rest is linked.
        buf.add(rows(300, 2))
        third = mgr.save(buf, 3)
        changed = [n for n in names if _tensor_inode(third, n) != _tensor_inode(second, n)]
        assert changed == names[:2]
    # keep_last=2 deleted step 1; each remaining step folder is a complete checkpoint on its own.
    assert not os.path.exists(first)
    assert_same(buf, ReplayBuffer.from_checkpoint(third))


def test_async_manager_saves_a_snapshot(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(1000, 0))
    before = buf.columns["obs"].copy()
    with cairn.CheckpointManager(tmp_path / "run", async_save=True) as mgr:
        path = mgr.save(buf, 1)
        buf.add(rows(500, 1))  # training goes on while the save is written
    restored = ReplayBuffer.from_checkpoint(path)
    assert len(restored) == 1000
    np.testing.assert_array_equal(restored.columns["obs"], before)


RESUME = r"""
import hashlib, json, sys
import numpy as np
from cairn.rl.utils.replay_buffers import ReplayBuffer

def digest(batch):
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode() + batch[name].tobytes())
    return h.hexdigest()

buf = ReplayBuffer.from_checkpoint(sys.argv[1])
rng = np.random.default_rng(11)
out = [digest(buf.sample(64))]
buf.add({"obs": rng.integers(0, 256, (700, 16, 16), dtype=np.uint8), "actions": rng.integers(0, 6, 700),
         "rewards": rng.standard_normal(700).astype(np.float32), "terminateds": rng.random(700) < 0.05})
out += [digest(buf.sample(64)), digest(buf.columns), buf.cursor, buf.added_lifetime, buf.sampled_lifetime]
print(json.dumps(out))
"""


def test_resume_in_a_new_process_is_bit_for_bit(tmp_path: Path) -> None:
    buf = make(seed=4)
    buf.add(rows(CAPACITY - 100, 0))
    buf.sample(10)
    path = buf.save_to_path(tmp_path / "ckpt")
    # Straight on, in this process: the same steps as the script.
    rng = np.random.default_rng(11)
    expected = [digest(buf.sample(64))]
    buf.add(
        {
            "obs": rng.integers(0, 256, (700, 16, 16), dtype=np.uint8),
            "actions": rng.integers(0, 6, 700),
            "rewards": rng.standard_normal(700).astype(np.float32),
            "terminateds": rng.random(700) < 0.05,
        }
    )
    expected += [digest(buf.sample(64)), digest(buf.columns), buf.cursor, buf.added_lifetime, buf.sampled_lifetime]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", RESUME, path], check=True, env=env, capture_output=True, text=True, timeout=120
    )
    assert json.loads(done.stdout) == expected


# ----------------------------------------------------------------------------- verified restore


def test_a_buffer_of_another_layout_is_refused_and_nothing_applied(tmp_path: Path) -> None:
    src = make(capacity=2048)
    src.add(rows(2048, 0))
    path = src.save_to_path(tmp_path / "ckpt")
    live = make(seed=3)
    live.add(rows(600, 1))
    before = {k: v.copy() for k, v in live.columns.items()}
    rng_before = live.rng.bit_generator.state
    with pytest.raises(IncompatibleCheckpointError, match="capacity 2048 in chunks of 256 rows, but this buffer has"):
        live.restore_from_path(path)
    cols = dict(COLUMNS) | {"obs": ((16, 16), "int16")}
    other = make(columns=cols, capacity=2048)
    with pytest.raises(IncompatibleCheckpointError, match=r"Column 'obs' .* is uint8 \(16, 16\), but this .* int16"):
        other.restore_from_path(path)
    for name, arr in before.items():  # the layout is in the chunk folders' names: no chunk was read
        np.testing.assert_array_equal(live.columns[name], arr)
    assert (len(live), live.rng.bit_generator.state) == (600, rng_before)
    # from_checkpoint builds the recorded layout; a capacity override cannot take the old chunks.
    assert len(ReplayBuffer.from_checkpoint(path)) == 2048
    with pytest.raises(IncompatibleCheckpointError, match="capacity"):
        ReplayBuffer.from_checkpoint(path, capacity=4096)


def _tampered(buf: ReplayBuffer, tmp_path: Path, name: str, change: Any) -> str:
    """A checkpoint whose checksums all pass but whose content says something else (a crafted one)."""
    state = buf.get_state()
    state = {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}
    change(state)
    return buf.save_to_path(tmp_path / name, state=state)


def test_declarations_that_do_not_match_the_files_are_refused(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(1000, 0))  # chunks 0..3
    chunk_names = buf.get_state()["chunks"]

    def bigger(s: dict[str, Any]) -> None:
        s["size"] = s["cursor"] = s["added_lifetime"] = 1300  # needs chunks that are not there

    def chunk_gone(s: dict[str, Any]) -> None:
        del s[chunk_names[2]]

    def float_frames(s: dict[str, Any]) -> None:
        s[chunk_names[1]]["columns"] = s[chunk_names[1]]["columns"] | {
            "obs": s[chunk_names[1]]["columns"]["obs"].astype(np.float32)
        }

    def short_chunk(s: dict[str, Any]) -> None:
        s[chunk_names[3]]["columns"] = {k: v[:100] for k, v in s[chunk_names[3]]["columns"].items()}

    def cursor_off(s: dict[str, Any]) -> None:
        s["cursor"] = 17

    cases: list[tuple[str, Any, type[Exception], str]] = [
        ("bigger", bigger, CorruptCheckpointError, "chunk list \\(4 entries\\) is not the 6 chunks that 1300 rows"),
        ("gone", chunk_gone, CorruptCheckpointError, f"1 of them are not in it \\({chunk_names[2]}\\)"),
        ("float", float_frames, IncompatibleCheckpointError, "Column 'obs' of replay buffer chunk 1 .* float32"),
        ("short", short_chunk, IncompatibleCheckpointError, "chunk 3 \\(rows 768..1023\\) holds uint8 \\(100, 16"),
        ("cursor", cursor_off, CorruptCheckpointError, "cursor at 1000, not 17"),
    ]
    for name, change, error, message in cases:
        path = _tampered(buf, tmp_path, name, change)
        with pytest.raises(error, match=message):
            ReplayBuffer.from_checkpoint(path)
        fresh = make(seed=8)
        with pytest.raises(error, match=message):
            fresh.restore_from_path(path)
        assert (len(fresh), fresh.added_lifetime) == (0, 0)  # the counters, cursor and RNG are untouched


@pytest.mark.loose_files
def test_a_corrupt_chunk_file_is_refused_before_anything_is_applied(tmp_path: Path) -> None:
    buf = make()
    buf.add(rows(1000, 0))
    path = Path(buf.save_to_path(tmp_path / "ckpt"))
    chunk = sorted(p for p in path.iterdir() if p.name.startswith("chunk_00002"))[0]
    data = bytearray((chunk / "tensors.safetensors").read_bytes())
    data[-7] ^= 0x10
    (chunk / "tensors.safetensors").write_bytes(bytes(data))
    live = make()
    live.add(rows(500, 5))
    before = live.columns["obs"].copy()
    with pytest.raises(CorruptCheckpointError, match=f"{chunk.name}/tensors.safetensors"):
        live.restore_from_path(path)
    np.testing.assert_array_equal(live.columns["obs"], before)
    assert len(live) == 500


# ----------------------------------------------------------------------------- in a tree, multi-agent


class Trainer(cairn.Checkpointable):
    """A stand-in for an algorithm: a counter and a replay buffer component."""

    def __init__(self, seed: int = 0) -> None:
        self.iteration = 0
        self.replay_buffer = make(seed=seed)

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("replay_buffer", self.replay_buffer)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kw: Any) -> dict[str, Any]:
        return {"iteration": self.iteration, **self._get_components_state(components, not_components=not_components)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._set_components_state(state)
        self.iteration = state.get("iteration", self.iteration)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


def test_partial_restore_of_the_buffer_in_a_tree(tmp_path: Path) -> None:
    trainer = Trainer()
    trainer.iteration = 12
    trainer.replay_buffer.add(rows(900, 0))
    path = trainer.save_to_path(tmp_path / "ckpt")
    other = Trainer(seed=5)
    other.replay_buffer.add(rows(50, 1))
    other.restore_from_path(os.path.join(path, "replay_buffer"), component="replay_buffer")
    assert other.iteration == 0  # the rest of the tree is untouched
    assert_same(trainer.replay_buffer, other.replay_buffer)
    alone = ReplayBuffer.from_checkpoint(os.path.join(path, "replay_buffer"))
    assert_same(trainer.replay_buffer, alone)
    name = trainer.replay_buffer.get_state()["chunks"][1]
    chunk = ReplayBufferChunk.from_checkpoint(os.path.join(path, "replay_buffer", name))
    np.testing.assert_array_equal(chunk.arrays["obs"], trainer.replay_buffer.columns["obs"][CHUNK : 2 * CHUNK])


def test_multi_agent_buffers_per_module(tmp_path: Path) -> None:
    # Modules with different observation spaces: one buffer each, each a component named by its id.
    cols = {"p0": COLUMNS, "p1": {"obs": ((3,), "float32"), "actions": ((2,), "float32")}}
    multi = MultiAgentReplayBuffer(512, cols, chunk_rows=128, seed=1)
    multi.add({"p0": rows(300, 0), "p1": {"obs": np.ones((40, 3), np.float32), "actions": np.zeros((40, 2))}})
    assert (len(multi["p0"]), len(multi["p1"]), len(multi)) == (300, 40, 340)
    s0, s1 = multi["p0"].sample(4), multi["p1"].sample(4)
    assert digest(s0) != digest(s1) and s1["obs"].shape == (4, 3)
    path = multi.save_to_path(tmp_path / "ckpt")

    rebuilt = MultiAgentReplayBuffer.from_checkpoint(path)
    assert digest(rebuilt.sample(16)["p0"]) == digest(multi.sample(16)["p0"])
    # Just one module's buffer, into a multi-buffer that has p0 and p2.
    other = MultiAgentReplayBuffer(512, {"p0": COLUMNS, "p2": COLUMNS}, chunk_rows=128, seed=9)
    other.add({"p2": rows(10, 3)})
    other.restore_from_path(os.path.join(path, "p0"), component="p0")
    assert (len(other["p0"]), len(other["p2"])) == (300, 10)
    # The whole checkpoint into {p0, p2}: p0 restored, p1 not created, p2 left as it was.
    other.restore_from_path(path)
    assert sorted(other) == ["p0", "p2"] and len(other["p2"]) == 10

    multi.add_module("p3", COLUMNS)
    multi.remove_module("p1")
    again = MultiAgentReplayBuffer.from_checkpoint(multi.save_to_path(tmp_path / "modules"))
    assert sorted(again) == ["p0", "p3"]
    with pytest.raises(ValueError, match="not a valid component name"):
        multi.add_module("../p4", COLUMNS)


@pytest.mark.parametrize("change", ["chunk_gone", "float_frames"])
def test_a_crafted_checkpoint_leaves_the_live_arrays_unchanged(tmp_path: Path, change: str) -> None:
    # Checksums pass, but a chunk folder is missing or a chunk's frames have another dtype:
    # before check_state, the chunks that fit were read into the live arrays before the refusal.
    buf = make()
    buf.add(rows(1000, 0))
    names = buf.get_state()["chunks"]

    def edit(s: dict[str, Any]) -> None:
        if change == "chunk_gone":
            del s[names[2]]
        else:
            cols = s[names[1]]["columns"]
            s[names[1]]["columns"] = cols | {"obs": cols["obs"].astype(np.float32)}

    path = _tampered(buf, tmp_path, change, edit)
    live = make(seed=4)
    live.add(rows(900, 7))
    before = {k: v.copy() for k, v in live.columns.items()}
    with pytest.raises((CorruptCheckpointError, IncompatibleCheckpointError)):
        live.restore_from_path(path)
    for name, arr in before.items():
        np.testing.assert_array_equal(live.columns[name], arr)
    assert (len(live), live.added_lifetime) == (900, 900)
