"""The replay buffer's incremental checkpoints on S3 (moto on loopback): unchanged chunks are copied
server-side, each step folder restores alone. The buffer's other tests: tests/rl/test_rl_replay_buffer.py."""

from __future__ import annotations

import os

import numpy as np
from storage_backends import MotoS3

import cairn
from cairn.rl.utils.replay_buffers import ReplayBuffer

COLUMNS = {"obs": ((16, 16), "uint8"), "actions": ((), "int64")}


def rows(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.integers(0, 256, (n, 16, 16), dtype=np.uint8), "actions": rng.integers(0, 6, n)}


def test_replay_buffer_incremental_saves_on_s3(moto_s3: MotoS3) -> None:
    root = f"s3://{moto_s3.bucket}/replay-{os.getpid()}"
    buf = ReplayBuffer(1024, COLUMNS, chunk_rows=128, seed=0)
    buf.add(rows(1024, 0))
    with cairn.CheckpointManager(root, keep_last=1) as mgr:
        mgr.save(buf, 1)
        buf.add(rows(100, 1))  # rows 0..99: chunk 0 of 8 changes
        path = mgr.save(buf, 2)
        stats = mgr.last_stats
    assert stats is not None and stats.bytes_written < 0.2 * buf.nbytes < stats.bytes_linked
    # keep_last=1 deleted step 1: step 2 holds copies, not references.
    restored = ReplayBuffer.from_checkpoint(path)
    assert (len(restored), restored.cursor) == (1024, 100)
    for name in COLUMNS:
        np.testing.assert_array_equal(restored.columns[name], buf.columns[name])
    assert restored.rng.bit_generator.state == buf.rng.bit_generator.state
